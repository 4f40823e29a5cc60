//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

// ---------------------------------------------------------------------------------------------
// protocol_request

/// The socket protocol's request decoder over arbitrary bytes, and the same bytes as the `args`
/// of every operation (what the MCP tools pass): never a panic; a refusal carries an error code
/// and a message; whatever decodes re-encodes ([`crate::protocol::Request::to_line`]) to a line
/// that decodes to the same request and ID.
#[cfg(feature = "server")]
pub fn protocol_request(data: &[u8]) {
    use crate::protocol::{ApiError, OPS, decode_request, request_from_args};
    let line = data.strip_suffix(b"\n").unwrap_or(data);
    match decode_request(line) {
        Ok(envelope) => {
            let encoded = envelope.request.to_line(envelope.id.clone());
            let Some(body) = encoded.strip_suffix(b"\n") else {
                panic!("an encoded request has no newline");
            };
            assert!(!body.contains(&b'\n'), "an encoded request spans lines");
            match decode_request(body) {
                Ok(again) => {
                    assert_eq!(again.request, envelope.request, "request changed");
                    assert_eq!(again.id, envelope.id, "id changed");
                }
                Err(e) => panic!("a re-encoded request is refused: {e}"),
            }
        }
        Err(e) => {
            let api = ApiError::from(&e);
            assert!(!api.message.is_empty(), "an error without a message");
        }
    }
    if let Ok(args) = serde_json::from_slice::<serde_json::Value>(line) {
        for op in OPS {
            if let Ok(request) = request_from_args(op, args.clone()) {
                assert_eq!(
                    request.to_wire().0,
                    op,
                    "args decoded into another operation"
                );
            }
        }
    }
}
