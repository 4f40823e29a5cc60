//! Handles people can type: every process has a number on its root (1, 2, ... in
//! registration order, the same after a reopen) and may have a name, unique among live
//! processes, with real children and the real binary. A name clash is refused with the holder's
//! handle, also when many starts race for one name; a name is free again once its holder ended;
//! a name resolves to its live holder, else to the newest process that had it. Every client
//! command takes a handle, a number or a name, through the daemon and offline.

use crate::common::daemon as daemon_common;
use crate::common::supervisor as common;

use std::time::Duration;

use common::{config, guarded, open, sh, start, temp_root};
use procjournal::lifecycle::{ProcessRef, ReferenceError};
use procjournal::supervisor::{PrepareError, Refusal, Services, StartError, Supervisor};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_count_registrations_and_names_are_unique_among_live_processes() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let dir = root.path();
    let first = start(&sup, sh(dir, "true")).await;
    let web = start(&sup, sh(dir, "sleep 60").name("web")).await;
    assert_eq!(sup.manifest(&first).unwrap().number, 1);
    assert_eq!(sup.manifest(&web).unwrap().number, 2);
    assert_eq!(
        sup.resolve(&ProcessRef::Number(2)).unwrap().handle,
        web,
        "a number names its process"
    );
    assert_eq!(sup.resolve(&"#1".parse().unwrap()).unwrap().handle, first);
    assert_eq!(
        sup.resolve(&ProcessRef::Number(3)),
        Err(ReferenceError::UnknownNumber(3))
    );

    // The name is taken while `web` lives: refused, with the holder named, nothing recorded.
    let clash = sup.prepare(sh(dir, "true").name("web")).unwrap();
    match sup.start(clash).await {
        Err(StartError::Refused {
            reason: Refusal::NameTaken { name, holder },
            ..
        }) => {
            assert_eq!((name.as_str(), holder), ("web", web));
        }
        other => panic!("expected NameTaken, got {other:?}"),
    }
    assert_eq!(sup.list(&Default::default()).len(), 2);
    assert_eq!(
        sup.resolve(&ProcessRef::Name("web".into())).unwrap().handle,
        web
    );

    // Once `web` ended, the name is free; it names the newest holder, live or not.
    sup.stop(&web, Duration::from_secs(5)).await.unwrap();
    guarded("web stopped", sup.wait(&web, None)).await.unwrap();
    let web2 = start(&sup, sh(dir, "exit 4").name("web")).await;
    guarded("web2", sup.wait(&web2, None)).await.unwrap();
    assert_eq!(
        sup.resolve(&ProcessRef::Name("web".into())).unwrap().handle,
        web2,
        "no live holder: the newest"
    );
    let web3 = start(&sup, sh(dir, "sleep 60").name("web")).await;
    assert_eq!(
        sup.resolve(&ProcessRef::Name("web".into())).unwrap().handle,
        web3,
        "the live holder before any newer finished one"
    );
    assert_eq!(
        sup.resolve(&ProcessRef::Name("db".into())),
        Err(ReferenceError::UnknownName("db".into()))
    );

    // Many starts race for one free name: exactly one gets it.
    let mut racers = Vec::new();
    for _ in 0..16 {
        let sup = sup.clone();
        let prepared = sup.prepare(sh(dir, "sleep 60").name("race")).unwrap();
        racers.push(tokio::spawn(async move { sup.start(prepared).await }));
    }
    let mut won = Vec::new();
    for r in racers {
        match r.await.unwrap() {
            Ok(h) => won.push(h),
            Err(StartError::Refused {
                reason: Refusal::NameTaken { .. },
                ..
            }) => {}
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    assert_eq!(won.len(), 1, "one name, one live process");

    // A name people cannot type is refused before anything runs.
    for bad in ["", "12", "p-build", "has space", "\u{1b}]0;x\u{7}"] {
        assert!(
            matches!(
                sup.prepare(sh(dir, "true").name(bad)),
                Err(PrepareError::BadName(_))
            ),
            "{bad:?}"
        );
    }
    sup.shutdown(Duration::from_secs(5)).await;
    drop(sup);

    // Numbers are the journal's order: a reopened supervisor gives the same ones.
    let (sup, _) = Supervisor::open(config(root.path()), Services::channel().0)
        .await
        .unwrap();
    assert_eq!(sup.resolve(&ProcessRef::Number(2)).unwrap().handle, web);
    assert_eq!(sup.manifest(&web3).unwrap().number, 4);
    assert_eq!(sup.manifest(&won[0]).unwrap().number, 5);
    // After the restore no process is live: a name names its newest holder.
    assert_eq!(
        sup.resolve(&ProcessRef::Name("web".into())).unwrap().handle,
        web3
    );
    sup.shutdown(Duration::from_secs(5)).await;
}

/// The CLI: `--name` on start, a number or a name wherever a handle goes, `ps` shows numbers,
/// a clash exits non-zero naming the holder, and offline `logs` resolves from the journal.
#[test]
fn every_client_command_takes_a_number_or_a_name() {
    use daemon_common::{Daemon, client};
    let root = temp_root();
    let root = root.path();
    let mut daemon = Daemon::start(root);
    let (code, out, err) = client(
        root,
        &[
            "start",
            "--name",
            "build",
            "--",
            "sh",
            "-c",
            "echo built; exit 3",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let build = out.trim().to_owned();
    let (code, _, _) = client(root, &["wait", "build"]);
    assert_eq!(code, 3, "wait by name exits with the process's status");
    for reference in ["build", "1", "#1", build.as_str()] {
        let (code, logs, err) = client(root, &["logs", reference]);
        assert_eq!((code, logs.as_str()), (0, "built\n"), "{reference}: {err}");
    }
    let (code, out, err) = client(root, &["start", "--name", "srv", "--", "sleep", "60"]);
    assert_eq!(code, 0, "{err}");
    let srv = out.trim().to_owned();
    let (code, _, err) = client(root, &["start", "--name", "srv", "--", "true"]);
    assert_ne!(code, 0);
    assert!(err.contains(&srv) && err.contains("\"srv\""), "{err}");
    let (_, ps, _) = client(root, &["ps"]);
    let row = ps
        .lines()
        .find(|l| l.contains(&srv))
        .unwrap_or_else(|| panic!("{ps}"));
    assert_eq!(row.split_whitespace().next(), Some("2"), "{ps}");
    let (code, _, err) = client(root, &["stop", "2", "--grace", "1s"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = client(root, &["logs", "nosuch"]);
    assert_ne!(code, 0);
    assert!(err.contains("no process named \"nosuch\""), "{err}");
    let (code, _, err) = client(root, &["logs", "1x"]);
    assert_ne!(code, 0);
    assert!(err.contains("not a process reference"), "{err}");
    let (code, _, err) = client(root, &["shutdown"]);
    assert_eq!(code, 0, "{err}");
    daemon.wait_exit();

    // Without a daemon, from the journal.
    let (code, logs, err) = client(root, &["logs", "build"]);
    assert_eq!((code, logs.as_str()), (0, "built\n"), "{err}");
}
