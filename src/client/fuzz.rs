//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

// ---------------------------------------------------------------------------------------------
// client_response

/// The client's decoding of one daemon response line (`client::decode_answer`) over arbitrary
/// bytes, for request ID 7: never a panic; a result is only ever taken from a line that ends in
/// a newline, is JSON with `ok: true`, and carries ID 7 or none; a request is only ever called
/// unread for an ID-less `idle` or `busy` error. And a response the server encodes decodes to
/// what it carried.
#[cfg(feature = "server")]
pub fn client_response(data: &[u8]) {
    use crate::client::{Answer, ClientError, decode_answer};
    use crate::protocol::{ApiError, ErrorCode, Response};
    use serde_json::Value;
    match decode_answer(data, 7) {
        Ok(Answer::Result(result)) => {
            assert!(data.ends_with(b"\n"));
            let Ok(json) = serde_json::from_slice::<Value>(data) else {
                panic!("a result from a line that is not JSON");
            };
            assert_eq!(json["ok"], Value::Bool(true));
            assert!(json.get("id").is_none_or(|id| id.as_u64() == Some(7)));
            assert_eq!(json["result"], result);
        }
        Ok(Answer::Unread(error)) => {
            assert!(matches!(error.code, ErrorCode::Idle | ErrorCode::Busy));
        }
        Err(ClientError::Api(_) | ClientError::BadResponse(_)) => {}
        Err(e) => panic!("a decode failed with neither an API nor a response error: {e}"),
    }
    // The same bytes as a result the server sends, and as an error's message.
    let text = String::from_utf8_lossy(data).into_owned();
    for (id, outcome) in [
        (Some(Value::from(7)), Ok(Value::String(text.clone()))),
        (None, Err(ApiError::new(ErrorCode::Internal, text.clone()))),
    ] {
        let line = Response::new(id, outcome.clone()).to_line();
        match (decode_answer(&line, 7), outcome) {
            (Ok(Answer::Result(got)), Ok(sent)) => assert_eq!(got, sent),
            (Err(ClientError::Api(got)), Err(sent)) => assert_eq!(got, sent),
            (got, sent) => panic!("sent {sent:?}, decoded {got:?}"),
        }
    }
}
