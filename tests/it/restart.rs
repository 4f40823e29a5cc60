//! `restart` with real children and a real journal: a finished process's
//! command runs again as a new process linked to the old one (`restart_of`), with everything the
//! journal recorded; a withheld environment value is asked for again by name and nothing is
//! recorded until it is given; the given value reaches the child and no file under the root; a
//! live process, an unknown handle and a recorded command that no longer validates are refused
//! with typed errors; the link survives a reopen and a fresh replay.

use crate::common::daemon as daemon_common;
use crate::common::supervisor as common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{config, files_containing, guarded, open, replay, sh, start, temp_root};
use procjournal::environment::RestartEnvError;
use procjournal::lifecycle::State;
use procjournal::lifecycle::event::ExitStatus;
use procjournal::supervisor::{Command, RestartError, Services, Supervisor};

/// A marker outside the hex digits, so that `od`'s rendering of it holds none of its bytes.
const SECRET: &str = "sEcReT-restart-qwz-6620";

/// Everything the process wrote, from the start of its output.
async fn output_of(sup: &Supervisor, h: &procjournal::lifecycle::Handle) -> Vec<u8> {
    let read = sup.output_raw(h, 0, 1 << 20).await.expect("read output");
    assert!(!read.gap, "no gap expected");
    read.bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_process_runs_again_as_a_new_process_linked_to_the_old_one() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let work = tempfile::tempdir_in(root.path()).unwrap();
    let command = sh(
        work.path(),
        "echo run in $(pwd); echo mode=$MODE; echo args=$#; exit 7",
    )
    .env_persisted("MODE", "persisted-value")
    .label("job", "build")
    .timeout(Duration::from_secs(3600))
    .idle_timeout(Duration::from_secs(1800))
    .output_retention(32 << 20)
    .owner("alice");
    let old = start(&sup, command).await;
    let first = guarded("first run", sup.wait(&old, None)).await.unwrap();
    assert_eq!(first.exit, ExitStatus::Code(7));

    let new = guarded("restart", sup.restart(&old, &BTreeMap::new()))
        .await
        .expect("restart");
    assert_ne!(new, old);
    let second = guarded("second run", sup.wait(&new, None)).await.unwrap();
    assert_eq!(second.exit, ExitStatus::Code(7));
    assert_eq!(
        output_of(&sup, &new).await,
        output_of(&sup, &old).await,
        "the same command, in the same directory, with the same persisted value"
    );
    let expected = format!(
        "run in {}\nmode=persisted-value\nargs=0\n",
        work.path().display()
    );
    assert_eq!(
        String::from_utf8_lossy(&output_of(&sup, &new).await),
        expected
    );

    let (m_old, m_new) = (sup.manifest(&old).unwrap(), sup.manifest(&new).unwrap());
    assert_eq!(m_new.restart_of, Some(old));
    assert_eq!(m_old.restart_of, None);
    assert_eq!(m_new.command.program(), m_old.command.program());
    assert_eq!(
        m_new.command.args().collect::<Vec<_>>(),
        m_old.command.args().collect::<Vec<_>>()
    );
    assert_eq!(m_new.command.cwd(), m_old.command.cwd());
    assert_eq!(m_new.command.label("job"), Some("build"));
    assert_eq!(m_new.command.owner(), "alice");
    assert_eq!(m_new.command.limits(), m_old.command.limits());
    assert_eq!(
        m_new.command.env_overrides().collect::<Vec<_>>(),
        vec![("MODE", Some("persisted-value"))]
    );

    // A restart of the restart links to the one it restarts, not to the first.
    let third = sup.restart(&new, &BTreeMap::new()).await.expect("restart");
    guarded("third run", sup.wait(&third, None)).await.unwrap();
    assert_eq!(sup.manifest(&third).unwrap().restart_of, Some(new));

    // The links are the journal's: a fresh replay and a reopened supervisor both have them.
    sup.shutdown(Duration::from_secs(5)).await;
    drop(sup);
    let (store, report) = replay(&root.path().join("rt"));
    assert!(report.rejected.is_empty(), "{report:?}");
    assert_eq!(store.get(&new).unwrap().restart_of, Some(old));
    assert_eq!(store.get(&third).unwrap().restart_of, Some(new));
    let (sup, _) = Supervisor::open(config(root.path()), Services::channel().0)
        .await
        .unwrap();
    assert_eq!(sup.manifest(&third).unwrap().restart_of, Some(new));
    // And a restart after the reopen works from the restored manifest.
    let fourth = sup
        .restart(&third, &BTreeMap::new())
        .await
        .expect("restart");
    let done = guarded("fourth run", sup.wait(&fourth, None))
        .await
        .unwrap();
    assert_eq!(done.exit, ExitStatus::Code(7));
    assert_eq!(
        String::from_utf8_lossy(&output_of(&sup, &fourth).await),
        expected
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withheld_value_is_asked_for_by_name_and_never_reaches_the_disk() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let work = root.path();
    // The child prints the secrets as hex, which holds none of the marker's bytes in order.
    let command = sh(
        work,
        "printf %s \"$TOKEN\" | od -An -tx1 | tr -d ' \\n'; echo; printf %s \"$OTHER\" | od -An -tx1 | tr -d ' \\n'",
    )
    .env("TOKEN", SECRET)
    .env_persisted("PLAIN", "kept")
    .env("OTHER", "second-secret");
    let old = start(&sup, command).await;
    guarded("first run", sup.wait(&old, None)).await.unwrap();
    let known = sup.list(&Default::default()).len();

    // Nothing supplied: both withheld names, in the command's order; nothing recorded.
    match sup.restart(&old, &BTreeMap::new()).await {
        Err(RestartError::Environment {
            handle,
            source: RestartEnvError::Missing(names),
        }) => {
            assert_eq!(handle, old);
            assert_eq!(names, ["TOKEN", "OTHER"]);
        }
        other => panic!("expected the missing names, got {other:?}"),
    }
    // One of two supplied: the other is still named.
    let partial = BTreeMap::from([("TOKEN".to_owned(), SECRET.to_owned())]);
    let err = sup.restart(&old, &partial).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("cannot restart {old}: the values of OTHER were not persisted; supply them again")
    );
    assert_eq!(
        sup.list(&Default::default()).len(),
        known,
        "nothing recorded"
    );

    // Both supplied (and one for a persisted name, which the record overrides): it runs.
    let supplied = BTreeMap::from([
        ("TOKEN".to_owned(), SECRET.to_owned()),
        ("OTHER".to_owned(), "second-secret".to_owned()),
        ("PLAIN".to_owned(), "ignored".to_owned()),
    ]);
    let new = sup.restart(&old, &supplied).await.expect("restart");
    guarded("second run", sup.wait(&new, None)).await.unwrap();
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(
        String::from_utf8_lossy(&output_of(&sup, &new).await),
        format!("{}\n{}", hex(SECRET), hex("second-secret"))
    );
    let m = sup.manifest(&new).unwrap();
    assert_eq!(
        m.command.env_overrides().collect::<Vec<_>>(),
        vec![("TOKEN", None), ("PLAIN", Some("kept")), ("OTHER", None)],
        "persistence as first recorded; the record's value stands for PLAIN"
    );
    sup.shutdown(Duration::from_secs(5)).await;
    assert!(
        files_containing(root.path(), SECRET).is_empty(),
        "the restart's secret reached the disk"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_unknown_and_no_longer_valid_processes_are_refused() {
    let root = temp_root();
    let (sup, _rx) = open(config(root.path())).await;
    let live = start(&sup, sh(root.path(), "sleep 60")).await;
    match sup.restart(&live, &BTreeMap::new()).await {
        Err(RestartError::NotFinished { handle, state }) => {
            assert_eq!(handle, live);
            assert!(
                matches!(state, State::Running | State::Starting),
                "{state:?}"
            );
        }
        other => panic!("expected NotFinished, got {other:?}"),
    }
    let unknown: procjournal::lifecycle::Handle =
        "p-0123456789abcdef0123456789abcdef".parse().unwrap();
    assert!(matches!(
        sup.restart(&unknown, &BTreeMap::new()).await,
        Err(RestartError::UnknownHandle(h)) if h == unknown
    ));
    sup.stop(&live, Duration::from_secs(5)).await.unwrap();
    guarded("stopped", sup.wait(&live, None)).await.unwrap();
    // Once stopped it may be restarted; the restart is a normal start (it can be stopped).
    let again = sup.restart(&live, &BTreeMap::new()).await.expect("restart");
    assert_eq!(sup.manifest(&again).unwrap().restart_of, Some(live));
    sup.stop(&again, Duration::from_secs(5)).await.unwrap();
    guarded("stopped again", sup.wait(&again, None))
        .await
        .unwrap();
    sup.shutdown(Duration::from_secs(5)).await;
    drop(sup);

    // A supervisor whose spool segments are larger than the recorded retention cannot keep
    // that retention: the restart is refused as a typed prepare error, nothing recorded.
    let mut big = config(root.path());
    big.spool.segment_bytes = 128 << 20;
    big.spool.retention_bytes = 256 << 20;
    let (sup, _) = Supervisor::open(big, Services::channel().0).await.unwrap();
    let known = sup.list(&Default::default()).len();
    assert!(matches!(
        sup.restart(&live, &BTreeMap::new()).await,
        Err(RestartError::Prepare { handle, .. }) if handle == live
    ));
    assert_eq!(sup.list(&Default::default()).len(), known);
    // The caller can still take the command and adjust it before starting it.
    let command: Command = sup
        .restart_command(&live, &BTreeMap::new())
        .unwrap()
        .output_retention(256 << 20);
    assert_eq!(command.restart_of(), Some(live));
    let adjusted = start(&sup, command).await;
    assert_eq!(sup.manifest(&adjusted).unwrap().restart_of, Some(live));
    sup.shutdown(Duration::from_secs(5)).await;
}

/// `procjournal restart` through the daemon: the missing value named on stderr with a failing
/// exit and nothing started; with `--env` the new handle on stdout, linked in `ps --json`, and
/// the command sees the value supplied from this shell.
#[test]
fn the_cli_restarts_through_the_daemon_and_names_what_is_missing() {
    use daemon_common::{Daemon, client};
    let root = temp_root();
    let root = root.path();
    let _daemon = Daemon::start(root);
    let (code, out, err) = client(
        root,
        &[
            "start",
            "--env",
            "TOKEN=abc",
            "--label",
            "job=probe",
            "--",
            "sh",
            "-c",
            "test \"$TOKEN\" = abc && echo token-ok",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let old = out.trim().to_owned();
    let (code, _, err) = client(root, &["wait", &old]);
    assert_eq!(code, 0, "{err}");

    let (code, out, err) = client(root, &["restart", &old]);
    assert_ne!(code, 0, "a restart without the withheld value must fail");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("TOKEN") && err.contains("supply them again"),
        "{err}"
    );
    let (_, ps, _) = client(root, &["ps", "--json"]);
    assert_eq!(ps.lines().count(), 1, "nothing started: {ps}");

    let (code, out, err) = client(root, &["restart", &old, "--env", "TOKEN=abc"]);
    assert_eq!(code, 0, "{err}");
    let new = out.trim().to_owned();
    assert!(new.starts_with("p-") && new != old, "{new}");
    let (code, _, err) = client(root, &["wait", &new]);
    assert_eq!(code, 0, "the restart saw the supplied value: {err}");
    let (_, logs, _) = client(root, &["logs", &new]);
    assert_eq!(logs, "token-ok\n");
    let (_, ps, _) = client(root, &["ps", "--json"]);
    let linked = ps
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|p| p["handle"] == new.as_str())
        .expect("the restart is listed");
    assert_eq!(linked["restart_of"], old.as_str());
    assert_eq!(linked["labels"]["job"], "probe");

    // A live process is not restarted.
    let (_, live, _) = client(root, &["start", "--", "sleep", "60"]);
    let (code, _, err) = client(root, &["restart", live.trim()]);
    assert_ne!(code, 0);
    assert!(err.contains("has not ended"), "{err}");
    let (code, _, err) = client(root, &["shutdown"]);
    assert_eq!(code, 0, "{err}");
}
