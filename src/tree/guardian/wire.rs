//! The guardian's control protocol: one short ASCII line per message over the control socket
//! (a `socketpair` the supervisor hands the guardian as descriptor 3).
//!
//! ```text
//! guardian -> supervisor                      supervisor -> guardian
//!   REG <pid> <start> <ino> <dev> <rino>        GO <nonce: 32 hex digits>
//!   RUN                                          SIG INT|TERM|KILL
//!   EXECFAIL <errno>
//!   EXIT code <n> | EXIT signal <n>
//!   DONE <reaped>
//!   FAIL <reason>
//! ```
//!
//! `REG` names the gated workload (pid, start time in clock ticks, pidfs inode or 0) and the
//! receipt file the guardian created (device and inode), so the supervisor can persist both
//! before `GO` lets the workload exec. The nonce travels only here, never in argv or the
//! environment, so a workload cannot read it from /proc. End of stream from the supervisor is
//! the lifeline: the guardian takes its tree down.
//!
//! Invariants: every line is at most [`LINE_MAX`] bytes including its newline; numbers are
//! plain decimal (no sign, no leading zero but "0"); the decoders are total (any bytes give a
//! message or a typed error, never a panic), and `decode(encode(m)) == m` for every message.

use crate::tree::{LeaderExit, TreeSignal};

/// The longest line either side sends or accepts, newline included.
pub const LINE_MAX: usize = 256;

/// Guardian to supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Up {
    Reg {
        pid: u32,
        start_time_ticks: u64,
        pidfs_ino: u64,
        receipt_dev: u64,
        receipt_ino: u64,
    },
    Run,
    ExecFailed {
        errno: i32,
    },
    Exit(LeaderExit),
    Done {
        reaped: u64,
    },
    Failed(String),
}

/// Supervisor to guardian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Down {
    Go { nonce: [u8; 16] },
    Signal(TreeSignal),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("control line longer than {LINE_MAX} bytes")]
    TooLong,
    #[error("control line is not ASCII text")]
    NotText,
    #[error("unknown control message {0:?}")]
    Unknown(String),
    #[error("malformed control message {0:?}")]
    Malformed(String),
}

impl Up {
    /// The line, newline included; a `Failed` reason is cut and made printable to fit.
    pub fn encode(&self) -> Vec<u8> {
        let line = match self {
            Up::Reg {
                pid,
                start_time_ticks,
                pidfs_ino,
                receipt_dev,
                receipt_ino,
            } => format!("REG {pid} {start_time_ticks} {pidfs_ino} {receipt_dev} {receipt_ino}"),
            Up::Run => "RUN".to_owned(),
            Up::ExecFailed { errno } => format!("EXECFAIL {errno}"),
            Up::Exit(LeaderExit::Code(c)) => format!("EXIT code {c}"),
            Up::Exit(LeaderExit::Signal(s)) => format!("EXIT signal {s}"),
            Up::Done { reaped } => format!("DONE {reaped}"),
            Up::Failed(reason) => {
                let printable: String = reason
                    .chars()
                    .map(|c| if c.is_ascii_graphic() { c } else { ' ' })
                    .take(LINE_MAX - "FAIL \n".len())
                    .collect();
                format!("FAIL {printable}")
            }
        };
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        bytes
    }

    /// Decodes one line, without its newline.
    pub fn decode(line: &[u8]) -> Result<Up, WireError> {
        let words = words(line)?;
        let malformed = || WireError::Malformed(String::from_utf8_lossy(line).into_owned());
        Ok(match words.as_slice() {
            ["REG", pid, start, ino, dev, rino] => Up::Reg {
                pid: number(pid)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(malformed)?,
                start_time_ticks: number(start).ok_or_else(malformed)?,
                pidfs_ino: number(ino).ok_or_else(malformed)?,
                receipt_dev: number(dev).ok_or_else(malformed)?,
                receipt_ino: number(rino).ok_or_else(malformed)?,
            },
            ["RUN"] => Up::Run,
            ["EXECFAIL", errno] => Up::ExecFailed {
                errno: signed(errno).ok_or_else(malformed)?,
            },
            ["EXIT", "code", c] => Up::Exit(LeaderExit::Code(signed(c).ok_or_else(malformed)?)),
            ["EXIT", "signal", s] => Up::Exit(LeaderExit::Signal(signed(s).ok_or_else(malformed)?)),
            ["DONE", reaped] => Up::Done {
                reaped: number(reaped).ok_or_else(malformed)?,
            },
            ["FAIL", ..] => Up::Failed(
                std::str::from_utf8(line)
                    .map_err(|_| WireError::NotText)?
                    .get(5..)
                    .unwrap_or("")
                    .to_owned(),
            ),
            [word, ..] if is_up_word(word) => return Err(malformed()),
            _ => {
                return Err(WireError::Unknown(
                    String::from_utf8_lossy(line).into_owned(),
                ));
            }
        })
    }
}

fn is_up_word(word: &str) -> bool {
    matches!(word, "REG" | "RUN" | "EXECFAIL" | "EXIT" | "DONE")
}

impl Down {
    pub fn encode(&self) -> Vec<u8> {
        let line = match self {
            Down::Go { nonce } => format!("GO {}", hex(nonce)),
            Down::Signal(s) => format!("SIG {}", signal_word(*s)),
        };
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        bytes
    }

    pub fn decode(line: &[u8]) -> Result<Down, WireError> {
        let words = words(line)?;
        let malformed = || WireError::Malformed(String::from_utf8_lossy(line).into_owned());
        Ok(match words.as_slice() {
            ["GO", nonce] => Down::Go {
                nonce: unhex(nonce).ok_or_else(malformed)?,
            },
            ["SIG", "INT"] => Down::Signal(TreeSignal::Interrupt),
            ["SIG", "TERM"] => Down::Signal(TreeSignal::Terminate),
            ["SIG", "KILL"] => Down::Signal(TreeSignal::Kill),
            ["GO" | "SIG", ..] => return Err(malformed()),
            _ => {
                return Err(WireError::Unknown(
                    String::from_utf8_lossy(line).into_owned(),
                ));
            }
        })
    }
}

fn signal_word(s: TreeSignal) -> &'static str {
    match s {
        TreeSignal::Interrupt => "INT",
        TreeSignal::Terminate => "TERM",
        TreeSignal::Kill => "KILL",
    }
}

/// The line split at single spaces; printable ASCII only.
fn words(line: &[u8]) -> Result<Vec<&str>, WireError> {
    if line.len() >= LINE_MAX {
        return Err(WireError::TooLong);
    }
    if !line.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        return Err(WireError::NotText);
    }
    let text = std::str::from_utf8(line).map_err(|_| WireError::NotText)?;
    Ok(text.split(' ').collect())
}

/// Plain decimal: digits only, no leading zero unless the number is 0 (shared with the
/// receipt, which follows the same rule).
pub(crate) fn number(word: &str) -> Option<u64> {
    let canonical = !word.is_empty()
        && word.bytes().all(|b| b.is_ascii_digit())
        && (word == "0" || !word.starts_with('0'));
    if canonical { word.parse().ok() } else { None }
}

/// [`number`] with an optional `-`; `-0` is not canonical.
pub(crate) fn signed(word: &str) -> Option<i32> {
    match word.strip_prefix('-') {
        Some(rest) if rest != "0" => number(rest)
            .and_then(|n| i64::try_from(n).ok())
            .and_then(|n| i32::try_from(-n).ok()),
        Some(_) => None,
        None => number(word).and_then(|n| i32::try_from(n).ok()),
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Exactly 32 lowercase hex digits.
pub(crate) fn unhex(word: &str) -> Option<[u8; 16]> {
    let bytes = word.as_bytes();
    if bytes.len() != 32 {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 16];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// Splits complete lines off the front of `buf`, leaving a partial line behind. A line that
/// reaches [`LINE_MAX`] without a newline is an error (the peer is not a guardian, or broken).
pub(crate) fn take_line(buf: &mut Vec<u8>) -> Result<Option<Vec<u8>>, WireError> {
    match buf.iter().position(|b| *b == b'\n') {
        Some(end) => {
            let mut line: Vec<u8> = buf.drain(..=end).collect();
            line.pop();
            Ok(Some(line))
        }
        None if buf.len() >= LINE_MAX => Err(WireError::TooLong),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn up() -> impl Strategy<Value = Up> {
        prop_oneof![
            (
                any::<u32>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>()
            )
                .prop_map(
                    |(pid, start_time_ticks, pidfs_ino, receipt_dev, receipt_ino)| Up::Reg {
                        pid,
                        start_time_ticks,
                        pidfs_ino,
                        receipt_dev,
                        receipt_ino
                    }
                ),
            Just(Up::Run),
            any::<i32>().prop_map(|errno| Up::ExecFailed { errno }),
            any::<i32>().prop_map(|c| Up::Exit(LeaderExit::Code(c))),
            any::<i32>().prop_map(|s| Up::Exit(LeaderExit::Signal(s))),
            any::<u64>().prop_map(|reaped| Up::Done { reaped }),
            "[!-~]([ -~]{0,60}[!-~])?".prop_map(Up::Failed),
        ]
    }

    fn down() -> impl Strategy<Value = Down> {
        prop_oneof![
            any::<[u8; 16]>().prop_map(|nonce| Down::Go { nonce }),
            Just(Down::Signal(TreeSignal::Interrupt)),
            Just(Down::Signal(TreeSignal::Terminate)),
            Just(Down::Signal(TreeSignal::Kill)),
        ]
    }

    proptest! {
        /// Every message survives its encoding, fits a line, and the decoders are total.
        #[test]
        fn messages_round_trip_and_decoding_is_total(u in up(), d in down(), junk in proptest::collection::vec(any::<u8>(), 0..300)) {
            let line = u.encode();
            prop_assert!(line.len() <= LINE_MAX);
            prop_assert_eq!(Up::decode(&line[..line.len() - 1]), Ok(u));
            let line = d.encode();
            prop_assert_eq!(Down::decode(&line[..line.len() - 1]), Ok(d));
            let _ = Up::decode(&junk);
            let _ = Down::decode(&junk);
            let mut buf = junk.clone();
            while let Ok(Some(_)) = take_line(&mut buf) {}
        }
    }

    #[test]
    fn non_canonical_numbers_and_nonces_are_refused() {
        assert!(Up::decode(b"DONE 01").is_err());
        assert!(Up::decode(b"DONE +1").is_err());
        assert!(Up::decode(b"EXIT code -0").is_err());
        assert!(Up::decode(b"EXIT code  1").is_err());
        assert!(Up::decode(b"RUN ").is_err());
        assert!(Down::decode(b"GO 00").is_err());
        assert!(Down::decode(b"GO A").is_err());
        assert!(Down::decode(b"SIG HUP").is_err());
        assert_eq!(
            Up::decode(b"EXIT signal 9"),
            Ok(Up::Exit(LeaderExit::Signal(9)))
        );
        assert_eq!(
            Up::decode(b"FAIL no /bin/x"),
            Ok(Up::Failed("no /bin/x".into()))
        );
    }

    #[test]
    fn lines_are_split_and_a_runaway_line_is_an_error() {
        let mut buf = b"RUN\nDONE 3\nEX".to_vec();
        assert_eq!(take_line(&mut buf), Ok(Some(b"RUN".to_vec())));
        assert_eq!(take_line(&mut buf), Ok(Some(b"DONE 3".to_vec())));
        assert_eq!(take_line(&mut buf), Ok(None));
        assert_eq!(buf, b"EX");
        let mut long = vec![b'x'; LINE_MAX];
        assert_eq!(take_line(&mut long), Err(WireError::TooLong));
    }
}
