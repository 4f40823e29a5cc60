//! Replays every committed fuzz input on stable Rust: the seeds of each target's corpus
//! (`fuzz/corpus/<target>/seed-*`) and every minimised crash (`fuzz/regressions/<target>/*`), through
//! the same `procjournal::fuzzing` functions the cargo-fuzz targets call.

use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

type Body = fn(&[u8]);

const TARGETS: &[(&str, Body)] = &[
    ("journal_record", procjournal::fuzzing::record_decoder),
    ("journal_open", procjournal::fuzzing::journal_open),
    (
        "journal_commit_slot",
        procjournal::fuzzing::journal_commit_slot,
    ),
    ("codec_decode", procjournal::fuzzing::codec_decode),
    ("safe_text", procjournal::fuzzing::safe_text),
    ("spool_recovery", procjournal::fuzzing::spool_recovery),
    ("lifecycle_store", procjournal::fuzzing::lifecycle_store),
    // The bodies of a surface's decoders come with its feature.
    #[cfg(feature = "server")]
    ("protocol_request", procjournal::fuzzing::protocol_request),
    ("guardian_control", procjournal::fuzzing::guardian_control),
    ("guardian_receipt", procjournal::fuzzing::guardian_receipt),
    ("guardian_zygote", procjournal::fuzzing::guardian_zygote),
    ("replay", procjournal::fuzzing::replay),
    ("snapshot_decode", procjournal::fuzzing::snapshot_decode),
    ("journal_floor", procjournal::fuzzing::journal_floor),
    #[cfg(feature = "server")]
    ("server_framing", procjournal::fuzzing::server_framing),
    #[cfg(feature = "mcp")]
    ("mcp_line", procjournal::fuzzing::mcp_line),
    #[cfg(feature = "mcp")]
    ("mcp_tool_call", procjournal::fuzzing::mcp_tool_call),
    #[cfg(feature = "server")]
    ("client_response", procjournal::fuzzing::client_response),
    #[cfg(feature = "cli")]
    ("env_file", procjournal::fuzzing::env_file),
    #[cfg(feature = "fleet")]
    ("fleet_message", procjournal::fuzzing::fleet_message),
];

/// Regression inputs of bugs that are known and not fixed yet, as `(target, file name)`. Each must
/// still fail; when a fix lands this test says so, and the entry is removed here.
/// (`procjournal::fuzzing::KNOWN_BUGS` describes them.)
const OPEN_BUGS: &[(&str, &str)] = &[];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Files directly in `dir` whose name starts with `prefix`, sorted; none if `dir` does not exist.
fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.expect("read fuzz directory entry").path())
        .filter(|p| p.is_file())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    out.sort();
    out
}

/// Runs `body` on the file's bytes; `Err` holds the panic message.
fn replay(body: Body, path: &Path) -> Result<(), String> {
    let data = std::fs::read(path).expect("read fuzz input");
    panic::catch_unwind(AssertUnwindSafe(|| body(&data))).map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "non-string panic".to_owned())
    })
}

fn is_open_bug(target: &str, path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    OPEN_BUGS.iter().any(|&(t, n)| t == target && n == name)
}

#[test]
fn every_seed_and_regression_replays_cleanly() {
    let dir = fuzz_dir();
    let mut failures = Vec::new();
    let mut fixed = Vec::new();
    for &(target, body) in TARGETS {
        let seeds = files(&dir.join("corpus").join(target), "seed-");
        assert!(
            !seeds.is_empty(),
            "no seeds under fuzz/corpus/{target}/: the replay would test nothing"
        );
        let regressions = files(&dir.join("regressions").join(target), "");
        for path in seeds.iter().chain(&regressions) {
            let open = is_open_bug(target, path);
            match (replay(body, path), open) {
                (Ok(()), false) | (Err(_), true) => {}
                (Err(message), false) => failures.push(format!("{}: {message}", path.display())),
                (Ok(()), true) => fixed.push(path.display().to_string()),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "fuzz inputs fail:\n{}",
        failures.join("\n")
    );
    assert!(
        fixed.is_empty(),
        "these known bugs no longer reproduce; remove them from OPEN_BUGS:\n{}",
        fixed.join("\n")
    );
}

#[test]
fn every_open_bug_has_its_input() {
    for &(target, name) in OPEN_BUGS {
        let path = fuzz_dir().join("regressions").join(target).join(name);
        assert!(path.is_file(), "{} is listed but missing", path.display());
    }
    // The library's list, with what is wrong, names the same inputs.
    let known: Vec<(&str, &str)> = procjournal::fuzzing::KNOWN_BUGS
        .iter()
        .map(|&(target, name, _)| (target, name))
        .collect();
    assert_eq!(known, OPEN_BUGS, "fuzzing::KNOWN_BUGS and OPEN_BUGS differ");
}

/// The seeds are meant to start the fuzzer deep: at least one record seed is a valid record, at
/// least one codec seed decodes, replay seeds reach a completed process and every kind of
/// report entry, and every guardian receipt seed is a valid receipt.
#[test]
fn seeds_reach_past_the_first_check() {
    let dir = fuzz_dir().join("corpus");
    let records = files(&dir.join("journal_record"), "seed-");
    assert!(records.iter().any(|p| {
        let data = std::fs::read(p).expect("read seed");
        procjournal::journal::format::decode_record(&data).is_ok()
    }));
    let payloads = files(&dir.join("codec_decode"), "seed-");
    assert!(payloads.iter().any(|p| {
        let data = std::fs::read(p).expect("read seed");
        procjournal::codec::decode::<procjournal::fuzzing::FuzzPayload>(1, &data).is_ok()
    }));
    // Some replay seed takes a process through to its completion without a rejection, and some
    // seed has records that replay rejects and records it cannot decode.
    let replays: Vec<_> = files(&dir.join("replay"), "seed-")
        .iter()
        .map(|p| {
            let data = std::fs::read(p).expect("read seed");
            let mut replayer = procjournal::lifecycle::Replayer::default();
            let records = procjournal::fuzzing::replay_records(&data);
            for (seq, r) in (1..).zip(&records) {
                replayer.feed(&procjournal::journal::reader::RecordView {
                    position: procjournal::Position {
                        seq,
                        segment_index: 0,
                        offset: 0,
                    },
                    event_id: r.event_id,
                    kind: r.kind,
                    codec_version: r.codec_version,
                    payload: &r.payload,
                });
            }
            replayer.finish()
        })
        .collect();
    assert!(replays.iter().any(|(store, report)| {
        report.is_clean()
            && store
                .iter()
                .any(|m| m.completion_notified && m.released.is_some())
    }));
    assert!(replays.iter().any(|(_, report)| !report.rejected.is_empty()
        && !report.undecodable.is_empty()
        && report.other_events > 0));
    for p in files(&dir.join("guardian_receipt"), "seed-") {
        let data = std::fs::read(&p).expect("read seed");
        let decoded = procjournal::tree::guardian::Receipt::decode(&data);
        assert!(decoded.is_ok(), "{}: {decoded:?}", p.display());
    }
}

/// Every listed MCP tool has a seed (`seed-<tool>`) whose first byte picks it and whose
/// arguments decode, so the fuzzer starts past the argument checks of each tool.
#[cfg(feature = "mcp")]
#[test]
fn every_listed_tool_has_a_tool_call_seed_that_decodes() {
    let dir = fuzz_dir().join("corpus").join("mcp_tool_call");
    for (i, tool) in procjournal::fuzzing::listed_tools().iter().enumerate() {
        let path = dir.join(format!("seed-{tool}"));
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            data.first().map(|&b| usize::from(b)),
            Some(i),
            "{}",
            path.display()
        );
        let args: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&data[1..]).expect("a JSON object");
        let call = procjournal::mcp::decode_call(tool, Some(args));
        assert!(call.is_ok(), "{}: {call:?}", path.display());
    }
}
