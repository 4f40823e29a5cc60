//! The drain's read of a pipe into its buffer, on a real pipe.

use super::OutputEnd;
use crate::aligned::{ALIGN, ReadBuf};
use crate::limits::READ_BYTES;

/// Bytes come back as written, into a buffer made lazily or one that was read into before; a
/// read with nothing waiting would block; a read takes at most the room it is given; the
/// writer's end is the end of output.
#[tokio::test]
async fn a_pipe_is_read_into_the_room_it_is_given() {
    let (tx, rx) = tokio::net::unix::pipe::pipe().unwrap();
    let end = OutputEnd::Pipe(rx);
    let mut buf = ReadBuf::new();

    tx.writable().await.unwrap();
    tx.try_write(b"first").unwrap();
    end.readable().await.unwrap();
    let room = buf.room(READ_BYTES);
    assert_eq!(room.as_ptr().addr() % ALIGN, 0, "on a cache line");
    assert_eq!(end.try_read_into(room).unwrap(), 5);
    assert_eq!(buf.bytes(5), b"first");
    let nothing = end.try_read_into(buf.room(READ_BYTES)).unwrap_err();
    assert_eq!(nothing.kind(), std::io::ErrorKind::WouldBlock);

    buf.room(READ_BYTES).fill(0xAA);
    tx.writable().await.unwrap();
    tx.try_write(b"second").unwrap();
    end.readable().await.unwrap();
    assert_eq!(end.try_read_into(buf.room(READ_BYTES)).unwrap(), 6);
    assert_eq!(buf.bytes(6), b"second");

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
    let n = end.try_read_into(buf.room(READ_BYTES)).unwrap();
    assert_eq!(n, READ_BYTES);
    let mut read = buf.bytes(n).to_vec();
    let n = end.try_read_into(buf.room(READ_BYTES)).unwrap();
    read.extend_from_slice(buf.bytes(n));
    assert_eq!(read, big);

    drop(tx);
    end.readable().await.unwrap();
    assert_eq!(
        end.try_read_into(buf.room(READ_BYTES)).unwrap(),
        0,
        "the end of output"
    );
}
