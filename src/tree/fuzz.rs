//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

// ---------------------------------------------------------------------------------------------
// guardian_control

/// The guardian's control protocol (`tree::guardian::wire`) over arbitrary bytes, read as both of
/// its readers read the socket: the bytes arrive in chunks (of 1, 7, `LINE_MAX` bytes, and all
/// at once), and every complete line is taken off the buffer with `take_line` before the next
/// chunk. Every chunking delivers the same lines, each exactly the bytes before a newline of the
/// input, up to the first line of `LINE_MAX` bytes or more, which is an error in every chunking;
/// a buffer left without a line is always shorter than `LINE_MAX`. Every line (and the input
/// itself) goes through `Up::decode` and `Down::decode`: never a panic, at most one of them
/// accepts, an accepted message encodes to one line of at most `LINE_MAX` bytes that decodes
/// to the same message, and (but for `FAIL`, whose reason is made printable) to the very line.
///
pub fn guardian_control(data: &[u8]) {
    use crate::tree::guardian::wire::LINE_MAX;
    let whole = control_lines(data, data.len().max(1));
    for chunk in [1, 7, LINE_MAX] {
        assert_eq!(
            control_lines(data, chunk),
            whole,
            "chunks of {chunk} bytes split the stream differently"
        );
    }
    for line in whole.0.iter().map(Vec::as_slice).chain([data]) {
        check_control_line(line);
    }
}

/// Feeds `data` to `take_line` `chunk` bytes at a time, taking every complete line before the
/// next chunk (what both control readers do). Returns the lines shorter than `LINE_MAX` in order,
/// and whether a line of `LINE_MAX` bytes or more (complete, or refused by `take_line`) ended the
/// stream.
fn control_lines(data: &[u8], chunk: usize) -> (Vec<Vec<u8>>, bool) {
    use crate::tree::guardian::wire::{LINE_MAX, WireError, take_line};
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    // Input bytes delivered as lines, newlines included.
    let mut taken = 0;
    for piece in data.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match take_line(&mut buf) {
                Ok(Some(line)) => {
                    assert!(!line.contains(&b'\n'), "a line holds a newline");
                    assert_eq!(
                        data.get(taken..=taken + line.len()),
                        Some([line.as_slice(), b"\n"].concat().as_slice()),
                        "a line is not the input up to its newline"
                    );
                    taken += line.len() + 1;
                    if line.len() >= LINE_MAX {
                        return (lines, true);
                    }
                    lines.push(line);
                }
                Ok(None) => {
                    assert!(buf.len() < LINE_MAX, "a runaway line was left buffered");
                    break;
                }
                Err(e) => {
                    assert_eq!(e, WireError::TooLong);
                    assert!(buf.len() >= LINE_MAX && !buf.contains(&b'\n'));
                    return (lines, true);
                }
            }
        }
    }
    assert_eq!(
        buf.as_slice(),
        &data[taken..],
        "bytes after the last line were lost"
    );
    (lines, false)
}

/// One control line through both decoders (module doc of [`guardian_control`]).
fn check_control_line(line: &[u8]) {
    use crate::tree::guardian::wire::{Down, LINE_MAX, Up};
    let one_line = |encoded: &[u8]| -> Vec<u8> {
        assert!(encoded.len() <= LINE_MAX, "an encoded message is too long");
        let Some(body) = encoded.strip_suffix(b"\n") else {
            panic!("an encoded message does not end its line");
        };
        assert!(!body.contains(&b'\n'), "an encoded message spans lines");
        body.to_vec()
    };
    let up = Up::decode(line);
    let down = Down::decode(line);
    assert!(
        up.is_err() || down.is_err(),
        "one line decodes both ways: {up:?}, {down:?}"
    );
    match up {
        Ok(m) => {
            let body = one_line(&m.encode());
            assert_eq!(
                Up::decode(&body),
                Ok(m.clone()),
                "Up changed on re-encoding"
            );
            if !matches!(m, Up::Failed(_)) {
                assert_eq!(body, line, "a decoded Up does not re-encode to its line");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    match down {
        Ok(m) => {
            let body = one_line(&m.encode());
            assert_eq!(Down::decode(&body), Ok(m), "Down changed on re-encoding");
            assert_eq!(body, line, "a decoded Down does not re-encode to its line");
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

// ---------------------------------------------------------------------------------------------
// guardian_receipt

/// The guardian's exit-receipt decoder over arbitrary bytes, twice: the input as it is, and the
/// input with its checksum line (a last line starting `crc32 `, if any) replaced by the right one,
/// so that the fuzzer reaches the field parser behind the CRC. Never a panic; an accepted receipt
/// re-encodes to exactly its bytes (the format is canonical) and `decode(encode(r)) == r`.
pub fn guardian_receipt(data: &[u8]) {
    check_receipt(data);
    check_receipt(&with_receipt_checksum(data));
}

fn check_receipt(bytes: &[u8]) {
    use crate::tree::guardian::Receipt;
    match Receipt::decode(bytes) {
        Ok(r) => {
            let encoded = r.encode();
            assert_eq!(
                Receipt::decode(&encoded),
                Ok(r.clone()),
                "a receipt changed on re-encoding"
            );
            assert_eq!(
                encoded.as_slice(),
                bytes,
                "a decoded receipt does not re-encode to its bytes"
            );
            check_receipt_binding(&r);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// A decoded receipt against the registration its own fields describe (journal-format.md,
/// "Guardian receipts"): its nonce always binds; another nonce never does; no nonce binds only
/// where an assessment allows it and only for an aborted launch's receipt (`status none`,
/// `reaped 1`, a known guardian start time and boot).
fn check_receipt_binding(r: &crate::tree::guardian::Receipt) {
    use crate::tree::guardian::{Registration, bind};
    let workload = crate::tree::ProcessWitness {
        pid: r.workload_pid,
        start_time_ticks: r.workload_start_ticks,
        pidfs_ino: r.workload_pidfs_ino,
    };
    let guardian = crate::tree::ProcessWitness {
        pid: r.guardian_pid,
        start_time_ticks: r.guardian_start_ticks,
        pidfs_ino: 0,
    };
    let binding = |nonce| crate::tree::ReceiptBinding {
        path: String::new(),
        dev: 0,
        ino: 0,
        nonce,
    };
    let reg = |b: &crate::tree::ReceiptBinding, gateless| {
        bind(
            r,
            &Registration {
                binding: b,
                handle: &r.handle,
                workload: &workload,
                gateless_guardian: gateless,
                boot_id: r.boot_id,
            },
        )
    };
    let own = binding(r.nonce);
    assert!(reg(&own, Some(&guardian)).is_ok() && reg(&own, None).is_ok());
    let mut other = r.nonce;
    other[0] ^= 1;
    let other = binding(other);
    assert!(
        reg(&other, None).is_err(),
        "a receipt bound without its nonce"
    );
    let aborted = r.nonce == [0; 16]
        && r.status.is_none()
        && r.reaped == 1
        && r.guardian_start_ticks != 0
        && r.boot_id != [0; 16];
    assert_eq!(
        reg(&other, Some(&guardian)).is_ok(),
        aborted,
        "a receipt without the registration's nonce bound, or an aborted launch's did not"
    );
    // A registration without a scope binds by its handle alone, and only the receipt of a gate
    // that never opened: no nonce, no status, the one gated child.
    let unscoped = r.nonce == [0; 16] && r.status.is_none() && r.reaped == 1;
    assert_eq!(
        crate::tree::guardian::bind_unscoped(r, &r.handle).is_ok(),
        unscoped,
        "an unscoped registration's receipt bound other than an aborted launch's"
    );
    let mut stranger = r.handle.clone();
    stranger.push('x');
    assert!(crate::tree::guardian::bind_unscoped(r, &stranger).is_err());
}

/// `data` without a last line that starts `crc32 `, ended by a newline, plus the checksum line of
/// everything before it.
fn with_receipt_checksum(data: &[u8]) -> Vec<u8> {
    let last_start = data
        .strip_suffix(b"\n")
        .unwrap_or(data)
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let mut body = if data[last_start..].starts_with(b"crc32 ") {
        data[..last_start].to_vec()
    } else {
        data.to_vec()
    };
    if !body.is_empty() && !body.ends_with(b"\n") {
        body.push(b'\n');
    }
    let crc = crc32fast::hash(&body);
    body.extend_from_slice(format!("crc32 {crc:08x}\n").as_bytes());
    body
}

// ---------------------------------------------------------------------------------------------
// guardian_zygote

/// The guardian zygote's wire (`tree::guardian::zygote`): the request and reply decoders over
/// arbitrary bytes never panic, and whatever either accepts encodes back to exactly the input
/// (both encodings are canonical: no field has more than one spelling) and decodes to the same
/// message again. A decoded request holds no NUL byte in any string (each becomes a C string in
/// the forked guardian).
pub fn guardian_zygote(data: &[u8]) {
    use crate::tree::guardian::zygote::{REQUEST_MAX, Received, Reply};
    let decode = |bytes: &[u8]| Received::decode(bytes).map(Received::into_request);
    if let Ok(request) = decode(data) {
        assert!(data.len() <= REQUEST_MAX);
        let strings = request
            .args
            .iter()
            .chain(&request.envp)
            .chain([&request.cwd]);
        for s in strings {
            assert!(!s.contains(&0), "a decoded string holds a NUL byte");
        }
        let encoded = request.encode();
        assert_eq!(
            encoded.as_deref(),
            Ok(data),
            "a request re-encodes to other bytes"
        );
        let Ok(encoded) = encoded else { return };
        assert_eq!(decode(&encoded), Ok(request));
    }
    if let Ok(reply) = Reply::decode(data) {
        assert_eq!(
            reply.encode().as_slice(),
            data,
            "a reply re-encodes to other bytes"
        );
        assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
    }
}
