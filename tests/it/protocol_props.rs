//! Properties of the socket protocol's decoders: every typed request survives the wire, arbitrary
//! and mutated bytes never panic, and strict base64 is canonical.

use std::collections::{BTreeMap, BTreeSet};

use procjournal::lifecycle::{Handle, ProcessRef, State};
use procjournal::protocol::base64;
use procjournal::protocol::{
    ErrorCode, OPS, RETENTION_BYTES_MAX, RETENTION_BYTES_MIN, Request, RestartArgs, StartArgs,
    decode_request, request_from_args,
};
use procjournal::supervisor::Rendering;
use procjournal::{EventId, fuzzing};
use proptest::prelude::*;
use serde_json::{Value, json};

fn handle() -> impl Strategy<Value = Handle> {
    any::<[u8; 16]>().prop_map(|b| Handle(EventId::from_bytes(b)))
}

/// Any way to name a process: its handle, its number, its name.
fn reference() -> impl Strategy<Value = ProcessRef> {
    prop_oneof![
        handle().prop_map(ProcessRef::Handle),
        (1u64..).prop_map(ProcessRef::Number),
        "[a-oq-zA-Z_][a-zA-Z0-9._-]{0,12}".prop_map(ProcessRef::Name),
    ]
}

fn text() -> impl Strategy<Value = String> {
    // Any Unicode but NUL (which start refuses), including quotes, escapes and newlines.
    "[^\u{0}]{0,12}"
}

fn state() -> impl Strategy<Value = State> {
    proptest::sample::select(State::ALL.to_vec())
}

fn start_args() -> impl Strategy<Value = StartArgs> {
    (
        proptest::collection::vec(text(), 0..4),
        "[a-z]{1,8}",
        proptest::option::of("/[a-z/]{0,10}"),
        proptest::collection::btree_map("[A-Z_]{1,6}", text(), 0..3),
        proptest::collection::btree_map(text(), text(), 0..3),
        (
            proptest::option::of(1u64..u64::MAX),
            proptest::option::of(1u64..u64::MAX),
        ),
        proptest::option::of(RETENTION_BYTES_MIN..=RETENTION_BYTES_MAX),
        proptest::option::of(0u64..=procjournal::protocol::QUEUE_MS_MAX),
        proptest::option::of((1u16.., 1u16..)),
        (
            proptest::collection::btree_map("[A-Z_]{1,6}", text(), 0..3),
            proptest::option::of(proptest::collection::btree_map("[A-Z_]{1,6}", text(), 0..3)),
            any::<bool>(),
            any::<bool>(),
        ),
        // A name: never a number, never starting "p-".
        proptest::option::of("[a-oq-zA-Z_][a-zA-Z0-9._-]{0,12}"),
    )
        .prop_map(
            |(
                args,
                program,
                cwd,
                env,
                labels,
                (timeout_ms, idle_timeout_ms),
                retention_bytes,
                queue_ms,
                pty,
                (env_persist, client_env, inherit_env, login_shell_overlay),
                name,
            )| {
                let mut command = vec![program];
                command.extend(args);
                // The two bases exclude each other: a request with both is refused.
                let inherit_env = inherit_env && client_env.is_none();
                // A name in both env and env_persist is refused too.
                let env_persist = env_persist
                    .into_iter()
                    .filter(|(k, _)| !env.contains_key(k))
                    .collect();
                // A name and a different label `name` are refused.
                let mut labels = labels;
                if name.is_some() {
                    labels.remove("name");
                }
                // The yield fields, drawn from the others' values (the tuple is at its size).
                let yield_ms = queue_ms.map(|q| q % 60_001);
                let settle_ms = yield_ms.and(idle_timeout_ms.map(|t| t % 60_000 + 1));
                let max_bytes = yield_ms.and(retention_bytes.map(|b| b % (1 << 20) + 1));
                StartArgs {
                    yield_ms,
                    settle_ms,
                    max_bytes,
                    command,
                    cwd,
                    env,
                    env_persist,
                    client_env,
                    inherit_env,
                    login_shell_overlay,
                    labels,
                    name,
                    timeout_ms,
                    idle_timeout_ms,
                    retention_bytes,
                    queue_ms,
                    pty: pty.map(|(rows, cols)| procjournal::protocol::PtyArgs { rows, cols }),
                }
            },
        )
}

/// Every field of `RestartArgs`, each present or not.
fn restart_args() -> impl Strategy<Value = RestartArgs> {
    (
        handle(),
        proptest::collection::btree_map("[A-Z_]{1,6}", text(), 0..3),
        proptest::option::of(proptest::collection::btree_map("[A-Z_]{1,6}", text(), 0..3)),
        any::<bool>(),
        proptest::option::of(0u64..=procjournal::protocol::QUEUE_MS_MAX),
        proptest::option::of((1u16.., 1u16..)),
    )
        .prop_map(
            |(handle, env, client_env, inherit_env, queue_ms, pty)| RestartArgs {
                handle: handle.to_string(),
                env,
                // The two bases exclude each other: a request with both is refused.
                inherit_env: inherit_env && client_env.is_none(),
                client_env,
                queue_ms,
                pty: pty.map(|(rows, cols)| procjournal::protocol::PtyArgs { rows, cols }),
            },
        )
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        Just(Request::Hello),
        Just(Request::Admission),
        start_args().prop_map(Request::Start),
        restart_args().prop_map(Request::Restart),
        prop_oneof![
            handle().prop_map(ProcessRef::Handle),
            (1u64..).prop_map(ProcessRef::Number),
            "[a-oq-zA-Z_][a-zA-Z0-9._-]{0,12}".prop_map(ProcessRef::Name),
        ]
        .prop_map(Request::Resolve),
        (
            proptest::option::of(state()),
            proptest::option::of(("[^=\u{0}]{1,6}", text()))
        )
            .prop_map(|(state, label)| Request::List { state, label }),
        reference().prop_map(Request::Manifest),
        reference().prop_map(Request::Interrupt),
        (
            reference(),
            any::<u64>(),
            1u64..=1 << 20,
            prop_oneof![Just(Rendering::SafeText), Just(Rendering::Base64)],
            0u64..=60_000,
            proptest::option::of(0u64..=1 << 20),
            proptest::option::of(1u64..=60_000),
            proptest::option::of(1u64..=procjournal::protocol::TAIL_LINES_MAX),
        )
            .prop_map(
                |(
                    handle,
                    cursor,
                    max_bytes,
                    rendering,
                    wait_ms,
                    min_bytes,
                    settle_ms,
                    tail_lines,
                )| {
                    Request::Output {
                        handle,
                        cursor,
                        max_bytes,
                        rendering,
                        wait_ms,
                        min_bytes,
                        settle_ms,
                        tail_lines,
                    }
                }
            ),
        (
            reference(),
            proptest::collection::vec(any::<u8>(), 0..64),
            any::<bool>()
        )
            .prop_map(|(handle, data, close)| Request::Input {
                handle,
                data,
                close
            }),
        (reference(), 0u64..=600_000)
            .prop_map(|(handle, grace_ms)| Request::Stop { handle, grace_ms }),
        (reference(), proptest::option::of(any::<u64>()))
            .prop_map(|(handle, timeout_ms)| Request::Wait { handle, timeout_ms }),
        (0u64..=600_000).prop_map(|grace_ms| Request::Shutdown { grace_ms }),
        (proptest::option::of(any::<u64>()), any::<bool>()).prop_map(|(older_than_ms, dry_run)| {
            Request::Clean {
                older_than_ms,
                dry_run,
            }
        }),
        proptest::option::of(1u64..=procjournal::protocol::ADMISSION_LIMIT_MAX)
            .prop_map(|max_concurrent| Request::AdmissionLimit { max_concurrent }),
        "[^\u{0}]{0,40}".prop_map(|reason| Request::Pause { reason }),
        "[^\u{0}]{0,40}".prop_map(|reason| Request::Resume { reason }),
        (reference(), any::<bool>())
            .prop_map(|(handle, waiting)| Request::AwaitInput { handle, waiting }),
        (reference(), 1u16.., 1u16..).prop_map(|(handle, rows, cols)| Request::Resize {
            handle,
            rows,
            cols
        }),
        (
            start_args(),
            1u64..=1 << 20,
            prop_oneof![Just(Rendering::SafeText), Just(Rendering::Base64)]
        )
            .prop_map(|(start, max_bytes, rendering)| Request::Capture {
                // Capture runs to the end: the yield fields are the start tool's only.
                start: StartArgs {
                    yield_ms: None,
                    settle_ms: None,
                    max_bytes: None,
                    ..start
                },
                max_bytes,
                rendering
            }),
    ]
}

fn id() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        any::<i64>().prop_map(|n| Some(json!(n))),
        "[^\u{0}]{0,20}".prop_map(|s| Some(json!(s))),
    ]
}

/// The round trip below is only as good as its generator: it must draw every operation.
#[test]
fn the_request_strategy_draws_every_operation() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = request();
    let mut drawn = BTreeSet::new();
    for _ in 0..2048 {
        let tree = strategy.new_tree(&mut runner).unwrap();
        drawn.insert(tree.current().op());
    }
    let missing: Vec<&str> = OPS
        .iter()
        .copied()
        .filter(|op| !drawn.contains(op))
        .collect();
    assert!(missing.is_empty(), "never drawn: {missing:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_request_survives_the_wire(request in request(), id in id()) {
        let line = request.to_line(id.clone());
        prop_assert_eq!(line.last(), Some(&b'\n'));
        let body = &line[..line.len() - 1];
        prop_assert!(!body.contains(&b'\n'));
        let envelope = decode_request(body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&envelope.request, &request);
        prop_assert_eq!(envelope.id, id);
        // The MCP path: the same args object, validated by op name, gives the same request.
        let (op, args) = request.to_wire();
        prop_assert_eq!(request_from_args(op, args).ok(), Some(request));
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        fuzzing::protocol_request(&data);
    }

    #[test]
    fn mutated_requests_never_panic(
        request in request(),
        cuts in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..4),
        truncate in any::<proptest::sample::Index>(),
    ) {
        let mut line = request.to_line(Some(json!(7)));
        for (at, byte) in cuts {
            let i = at.index(line.len());
            line[i] = byte;
        }
        fuzzing::protocol_request(&line);
        let keep = truncate.index(line.len());
        fuzzing::protocol_request(&line[..keep]);
    }

    #[test]
    fn wrong_typed_fields_are_bad_args(op in proptest::sample::select(vec![
        "start", "output", "input", "stop", "wait", "interrupt", "manifest", "capture"
    ]), value in prop_oneof![
        Just(json!(null)), Just(json!(-1)), Just(json!(1.5)), Just(json!("p-x")), Just(json!("a b")),
        Just(json!([1])), Just(json!({"a": 1})), Just(json!(true))
    ]) {
        // Every field of every operation given a value of the wrong type or range ("x" is a
        // name, so a reference: "p-x" and "a b" are not).
        let mut args = BTreeMap::new();
        args.insert("handle".to_owned(), value.clone());
        let args = serde_json::to_value(args).unwrap();
        let line = json!({"v": 1, "op": op, "args": args}).to_string();
        match decode_request(line.as_bytes()) {
            Ok(envelope) => prop_assert!(false, "accepted {line}: {:?}", envelope.request),
            Err(e) => prop_assert_eq!(
                ErrorCode::from(&e.kind),
                ErrorCode::BadArgs,
                "{}", line
            ),
        }
    }

    /// `retention_bytes` outside its bounds (0, below one spool segment, past the maximum) is
    /// refused as bad_args, naming the range; inside them it is accepted as given.
    #[test]
    fn retention_is_validated_against_its_bounds(bytes in prop_oneof![
        Just(0u64),
        1u64..RETENTION_BYTES_MIN,
        Just(RETENTION_BYTES_MIN - 1),
        Just(RETENTION_BYTES_MIN),
        RETENTION_BYTES_MIN..=RETENTION_BYTES_MAX,
        Just(RETENTION_BYTES_MAX),
        Just(RETENTION_BYTES_MAX + 1),
        (RETENTION_BYTES_MAX + 1)..=u64::MAX,
    ]) {
        let args = json!({"command": ["true"], "retention_bytes": bytes});
        let within = (RETENTION_BYTES_MIN..=RETENTION_BYTES_MAX).contains(&bytes);
        match request_from_args("start", args) {
            Ok(Request::Start(start)) => {
                prop_assert!(within, "accepted {}", bytes);
                prop_assert_eq!(start.retention_bytes, Some(bytes));
            }
            Ok(other) => prop_assert!(false, "not a start: {:?}", other),
            Err(e) => {
                prop_assert!(!within, "refused {}: {}", bytes, e);
                prop_assert_eq!(ErrorCode::from(&e), ErrorCode::BadArgs);
                prop_assert!(e.to_string().contains("retention_bytes"), "{}", e);
            }
        }
    }

    /// `capture` takes `start` as `start` does (its checks included) and `max_bytes` within
    /// `output`'s bounds.
    #[test]
    fn capture_is_validated_as_start_and_output_are(
        max_bytes in prop_oneof![Just(0u64), 1u64..=1 << 20, (1u64 << 20) + 1..=u64::MAX],
        command_ok in any::<bool>(),
    ) {
        let command = if command_ok { json!(["true"]) } else { json!([]) };
        let args = json!({"start": {"command": command}, "max_bytes": max_bytes});
        let within = (1..=1 << 20).contains(&max_bytes) && command_ok;
        match request_from_args("capture", args) {
            Ok(Request::Capture { max_bytes: got, rendering, .. }) => {
                prop_assert!(within, "accepted {}", max_bytes);
                prop_assert_eq!(got, max_bytes);
                prop_assert_eq!(rendering, Rendering::SafeText);
            }
            Ok(other) => prop_assert!(false, "not a capture: {:?}", other),
            Err(e) => {
                prop_assert!(!within, "refused {}: {}", max_bytes, e);
                prop_assert_eq!(ErrorCode::from(&e), ErrorCode::BadArgs);
            }
        }
    }

    #[test]
    fn base64_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let encoded = procjournal::spool::render::base64(&bytes);
        prop_assert_eq!(base64::decode(&encoded), Ok(bytes));
    }

    #[test]
    fn base64_is_canonical(text in "[A-Za-z0-9+/=\\-_ ]{0,24}") {
        // Whatever decodes re-encodes to exactly the input: one encoding per byte string.
        if let Ok(bytes) = base64::decode(&text) {
            prop_assert_eq!(procjournal::spool::render::base64(&bytes), text);
        }
    }
}
