//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

// ---------------------------------------------------------------------------------------------
// server_framing

/// The daemon socket's line framing (`server::read_line`) over arbitrary bytes: the first byte
/// picks the line bound (1 to 64), the second the read buffer's size (1 to 16, so lines arrive
/// cut at every place), the rest is what a client sends. The lines read are exactly the input
/// split at its newlines (a last line without one counts, an empty input is no line), each
/// within the bound returned whole and each over it reported with its length and dropped whole,
/// then end of input; never a panic, and never more than the bound kept.
#[cfg(feature = "server")]
pub fn server_framing(data: &[u8]) {
    use crate::server::{Line, read_line};
    let (max, capacity, input) = match data {
        [a, b, rest @ ..] => (usize::from(a % 64) + 1, usize::from(b % 16) + 1, rest),
        _ => return,
    };
    let mut expected: Vec<Result<&[u8], usize>> = input
        .split(|&b| b == b'\n')
        .map(|line| {
            if line.len() <= max {
                Ok(line)
            } else {
                Err(line.len())
            }
        })
        .collect();
    // `split` yields an empty piece after a final newline (and for an empty input): no line.
    if input.is_empty() || input.ends_with(b"\n") {
        expected.pop();
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    runtime.block_on(async {
        let mut reader = tokio::io::BufReader::with_capacity(capacity, input);
        let mut line = Vec::new();
        for want in &expected {
            let got = read_line(&mut reader, &mut line, max).await;
            match (got, want) {
                (Ok(Line::Complete), Ok(bytes)) => assert_eq!(&line[..], *bytes),
                (Ok(Line::TooLong(n)), Err(len)) => {
                    assert_eq!(n, *len);
                    assert!(
                        line.len() <= max,
                        "a refused line kept {} bytes",
                        line.len()
                    );
                }
                (got, want) => panic!("read {got:?}, expected {want:?}"),
            }
        }
        assert_eq!(
            read_line(&mut reader, &mut line, max).await.ok(),
            Some(Line::Eof)
        );
    });
}
