//! The drain's read of a pipe into its scratch buffer, on a real pipe.

use super::OutputEnd;
use crate::limits::READ_BYTES;

/// Bytes come back as written, whether the buffer is fresh (read into its spare room, so never
/// zeroed) or was zero-filled by a terminal's read on the same thread; a read with nothing
/// waiting would block; the writer's end is the end of output.
#[tokio::test]
async fn a_pipe_is_read_into_a_fresh_or_a_zeroed_scratch_buffer() {
    let (tx, rx) = tokio::net::unix::pipe::pipe().unwrap();
    let end = OutputEnd::Pipe(rx);
    let mut scratch = Vec::new();

    tx.writable().await.unwrap();
    tx.try_write(b"first").unwrap();
    end.readable().await.unwrap();
    assert_eq!(end.try_read_into(&mut scratch).unwrap(), b"first");
    assert_eq!(scratch.len(), 0, "a pipe's read leaves the buffer unfilled");
    assert!(scratch.capacity() >= READ_BYTES);
    let nothing = end.try_read_into(&mut scratch).unwrap_err();
    assert_eq!(nothing.kind(), std::io::ErrorKind::WouldBlock);

    scratch.resize(READ_BYTES, 0xAA);
    tx.writable().await.unwrap();
    tx.try_write(b"second").unwrap();
    end.readable().await.unwrap();
    assert_eq!(end.try_read_into(&mut scratch).unwrap(), b"second");

    // Room for more than one read (the supervisor enlarges its pipes too): a read takes at
    // most the bound, and the next one the rest.
    nix::fcntl::fcntl(&tx, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20)).unwrap();
    let big: Vec<u8> = (0..READ_BYTES + 100).map(|i| i as u8).collect();
    let mut written = 0;
    while written < big.len() {
        tx.writable().await.unwrap();
        written += tx.try_write(&big[written..]).unwrap();
    }
    end.readable().await.unwrap();
    let mut read = end.try_read_into(&mut scratch).unwrap().to_vec();
    assert_eq!(read.len(), READ_BYTES);
    read.extend_from_slice(end.try_read_into(&mut scratch).unwrap());
    assert_eq!(read, big);

    drop(tx);
    end.readable().await.unwrap();
    assert!(
        end.try_read_into(&mut scratch).unwrap().is_empty(),
        "the end of output"
    );
}
