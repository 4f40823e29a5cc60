//! The exit receipt: what a guardian writes once the kernel says it has no child left (ECHILD
//! under a child subreaper), proving that the whole tree it owned has exited.
//!
//! Byte for byte (journal-format.md, "Guardian receipts"): nine lines of ASCII, each ended by
//! `\n`, in this order, single spaces between words, numbers in plain decimal:
//!
//! ```text
//! procjournal-receipt 1
//! handle <handle>
//! nonce <32 lowercase hex digits>
//! boot <32 lowercase hex digits>
//! guardian <pid> <start ticks>
//! workload <pid> <start ticks> <pidfs inode or 0>
//! status code <n> | status signal <n> | status none
//! reaped <processes the guardian reaped>
//! crc32 <8 lowercase hex digits: CRC-32 (IEEE) of every byte before this line>
//! ```
//!
//! Invariants: a receipt binds to one registration through the handle, the nonce (sent to the
//! guardian over its control socket only after the registration was durable, never through
//! argv or the environment) and the workload's identity; the file's own device and inode are
//! checked by the reader against what the registration recorded, so a replaced file does not
//! verify. The decoder is total: a torn, truncated or forged file is a typed error, never a
//! panic, and never a receipt.

use crate::tree::LeaderExit;
use crate::tree::guardian::wire::{hex, number, signed, unhex};

/// Receipts are small; a larger file is not one.
pub const RECEIPT_BYTES_MAX: usize = 1024;

const MAGIC: &str = "procjournal-receipt 1";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub handle: String,
    pub nonce: [u8; 16],
    pub boot_id: [u8; 16],
    pub guardian_pid: u32,
    pub guardian_start_ticks: u64,
    pub workload_pid: u32,
    pub workload_start_ticks: u64,
    pub workload_pidfs_ino: u64,
    /// The workload's own exit; `None` when it was never reaped as such (a gated launch that
    /// was aborted before exec still ends in a receipt).
    pub status: Option<LeaderExit>,
    pub reaped: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    #[error("receipt is empty or incomplete (the guardian did not finish it)")]
    Incomplete,
    #[error("receipt is larger than {RECEIPT_BYTES_MAX} bytes")]
    TooLarge,
    #[error("receipt checksum does not match its contents")]
    Checksum,
    #[error("receipt line {line}: {what}")]
    Malformed { line: usize, what: &'static str },
}

impl Receipt {
    pub fn encode(&self) -> Vec<u8> {
        let status = match self.status {
            Some(LeaderExit::Code(c)) => format!("code {c}"),
            Some(LeaderExit::Signal(s)) => format!("signal {s}"),
            None => "none".to_owned(),
        };
        let body = format!(
            "{MAGIC}\nhandle {}\nnonce {}\nboot {}\nguardian {} {}\nworkload {} {} {}\nstatus {status}\nreaped {}\n",
            self.handle,
            hex(&self.nonce),
            hex(&self.boot_id),
            self.guardian_pid,
            self.guardian_start_ticks,
            self.workload_pid,
            self.workload_start_ticks,
            self.workload_pidfs_ino,
            self.reaped,
        );
        let crc = crc32fast::hash(body.as_bytes());
        let mut bytes = body.into_bytes();
        bytes.extend_from_slice(format!("crc32 {crc:08x}\n").as_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<Receipt, ReceiptError> {
        let body = checked_body(bytes)?;
        let lines: Vec<&str> = body.split_terminator('\n').collect();
        let [
            magic,
            handle,
            nonce,
            boot,
            guardian,
            workload,
            status,
            reaped,
        ] = lines[..]
        else {
            return Err(ReceiptError::Malformed {
                line: lines.len().min(8) + 1,
                what: "expected eight lines before the checksum",
            });
        };
        let bad = |line, what| ReceiptError::Malformed { line, what };
        if magic != MAGIC {
            return Err(bad(1, "not a version-1 receipt"));
        }
        let handle = field(handle, "handle")
            .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or(bad(2, "handle"))?
            .to_owned();
        let nonce = field(nonce, "nonce")
            .and_then(unhex)
            .ok_or(bad(3, "nonce"))?;
        let boot_id = field(boot, "boot").and_then(unhex).ok_or(bad(4, "boot"))?;
        let g: Vec<&str> = field(guardian, "guardian")
            .ok_or(bad(5, "guardian"))?
            .split(' ')
            .collect();
        let [gpid, gstart] = g[..] else {
            return Err(bad(5, "guardian"));
        };
        let w: Vec<&str> = field(workload, "workload")
            .ok_or(bad(6, "workload"))?
            .split(' ')
            .collect();
        let [wpid, wstart, wino] = w[..] else {
            return Err(bad(6, "workload"));
        };
        let status = field(status, "status")
            .and_then(leader_status)
            .ok_or(bad(7, "status"))?;
        let pid = |w: &str, line| {
            number(w)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(bad(line, "pid"))
        };
        Ok(Receipt {
            handle,
            nonce,
            boot_id,
            guardian_pid: pid(gpid, 5)?,
            guardian_start_ticks: number(gstart).ok_or(bad(5, "start"))?,
            workload_pid: pid(wpid, 6)?,
            workload_start_ticks: number(wstart).ok_or(bad(6, "start"))?,
            workload_pidfs_ino: number(wino).ok_or(bad(6, "pidfs inode"))?,
            status,
            reaped: field(reaped, "reaped")
                .and_then(number)
                .ok_or(bad(8, "reaped"))?,
        })
    }
}

/// The receipt's text before its checksum line, once its size, its end, its encoding and its
/// checksum are right: the checksum line is the last, and covers everything before it.
fn checked_body(bytes: &[u8]) -> Result<&str, ReceiptError> {
    if bytes.len() > RECEIPT_BYTES_MAX {
        return Err(ReceiptError::TooLarge);
    }
    if !bytes.ends_with(b"\n") {
        return Err(ReceiptError::Incomplete);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| ReceiptError::Malformed {
        line: 0,
        what: "not text",
    })?;
    let body_end = text[..text.len() - 1].rfind('\n').map_or(0, |i| i + 1);
    let (body, last) = text.split_at(body_end);
    let crc_text = last
        .strip_prefix("crc32 ")
        .and_then(|s| s.strip_suffix('\n'))
        .ok_or(ReceiptError::Incomplete)?;
    let crc = (crc_text.len() == 8
        && crc_text
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    .then(|| u32::from_str_radix(crc_text, 16).ok())
    .flatten()
    .ok_or(ReceiptError::Malformed {
        line: 9,
        what: "crc32 is not 8 lowercase hex digits",
    })?;
    if crc32fast::hash(body.as_bytes()) != crc {
        return Err(ReceiptError::Checksum);
    }
    Ok(body)
}

/// The status line's value: `none` (the workload was never reaped as such), or how it ended
/// (`code N`, `signal N`); `None` for anything else.
fn leader_status(value: &str) -> Option<Option<LeaderExit>> {
    if value == "none" {
        return Some(None);
    }
    let (kind, n) = value.split_once(' ')?;
    let n = signed(n)?;
    match kind {
        "code" => Some(Some(LeaderExit::Code(n))),
        "signal" => Some(Some(LeaderExit::Signal(n))),
        _ => None,
    }
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.strip_prefix(key)?.strip_prefix(' ')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn receipt() -> impl Strategy<Value = Receipt> {
        (
            "[0-9a-f-]{1,40}",
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            (
                any::<u32>(),
                any::<u64>(),
                any::<u32>(),
                any::<u64>(),
                any::<u64>(),
            ),
            prop_oneof![
                Just(None),
                any::<i32>().prop_map(|c| Some(LeaderExit::Code(c))),
                any::<i32>().prop_map(|s| Some(LeaderExit::Signal(s))),
            ],
            any::<u64>(),
        )
            .prop_map(
                |(handle, nonce, boot_id, (gp, gs, wp, ws, wi), status, reaped)| Receipt {
                    handle,
                    nonce,
                    boot_id,
                    guardian_pid: gp,
                    guardian_start_ticks: gs,
                    workload_pid: wp,
                    workload_start_ticks: ws,
                    workload_pidfs_ino: wi,
                    status,
                    reaped,
                },
            )
    }

    proptest! {
        /// Every receipt survives its encoding; every strict prefix of one (a torn write) and
        /// every single-byte change is refused; arbitrary bytes never panic.
        #[test]
        fn receipts_round_trip_and_damage_is_refused(
            r in receipt(),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            junk in proptest::collection::vec(any::<u8>(), 0..1200),
        ) {
            let bytes = r.encode();
            prop_assert!(bytes.len() <= RECEIPT_BYTES_MAX);
            prop_assert_eq!(Receipt::decode(&bytes), Ok(r.clone()));
            let cut = cut.index(bytes.len());
            prop_assert!(Receipt::decode(&bytes[..cut]).is_err());
            let mut flipped = bytes.clone();
            let at = flip.index(bytes.len());
            flipped[at] ^= 0x01;
            prop_assert!(Receipt::decode(&flipped).is_err());
            let _ = Receipt::decode(&junk);
            // The fuzz target's body holds the binding rules (its nonce binds, another never,
            // none only for an aborted launch's receipt) on this receipt and on its aborted
            // form.
            #[cfg(feature = "fuzzing")]
            {
                crate::fuzzing::guardian_receipt(&bytes);
                let aborted = Receipt { nonce: [0; 16], status: None, reaped: 1, ..r };
                crate::fuzzing::guardian_receipt(&aborted.encode());
            }
        }
    }

    #[test]
    fn the_documented_layout_is_what_is_written() {
        let r = Receipt {
            handle: "h".into(),
            nonce: [0xab; 16],
            boot_id: [1; 16],
            guardian_pid: 10,
            guardian_start_ticks: 20,
            workload_pid: 11,
            workload_start_ticks: 21,
            workload_pidfs_ino: 0,
            status: Some(LeaderExit::Code(3)),
            reaped: 2,
        };
        let text = String::from_utf8(r.encode()).unwrap();
        let body = "procjournal-receipt 1\nhandle h\nnonce abababababababababababababababab\n\
                    boot 01010101010101010101010101010101\nguardian 10 20\nworkload 11 21 0\n\
                    status code 3\nreaped 2\n";
        assert_eq!(
            text,
            format!("{body}crc32 {:08x}\n", crc32fast::hash(body.as_bytes()))
        );
        assert_eq!(Receipt::decode(b""), Err(ReceiptError::Incomplete));
    }
}
