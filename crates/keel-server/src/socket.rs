//! Reading a client's socket.
//!
//! A client socket is read in one `recv`; a read that leaves room unfilled drained the socket
//! and clears its readiness, as tokio's `poll_read` does, so no `recv` only answers `EAGAIN`.

use std::io::ErrorKind;
use std::os::fd::AsRawFd;

use bytes::BytesMut;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Reads what the socket holds into `input`'s spare room with one `recv`, as
/// `TcpStream::try_read_buf` does, except that a read that leaves room unfilled also clears the
/// socket's read readiness, as tokio's own `poll_read` does: a stream socket hands over all it
/// holds up to the room given, so a short read drained it, and the connection's next wait goes
/// to epoll instead of paying for a `recv` that can only answer `EAGAIN` (one per request for a
/// client that waits for each reply). The clear is the one `try_io` makes on `WouldBlock`: only
/// the readiness event the read started under is cleared, so bytes that arrive after the `recv`
/// raise an event the clear leaves alone.
pub(super) fn read_available(stream: &TcpStream, input: &mut BytesMut) -> std::io::Result<usize> {
    let fd = stream.as_raw_fd();
    let mut drained = None;
    let read = stream.try_io(Interest::READABLE, || {
        let room = input.spare_capacity_mut();
        let room_bytes = room.len();
        // No room would read 0 bytes, which says the peer closed (`QueryBuffer::prepare` always
        // leaves room for a read).
        debug_assert!(room_bytes > 0, "a read with no room in the buffer");
        // SAFETY: `recv` writes at most `room_bytes` bytes into the spare capacity, which
        // `room` borrows whole for the call.
        let n = unsafe { libc::recv(fd, room.as_mut_ptr().cast(), room_bytes, 0) };
        let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
        // SAFETY: `recv` initialized the first `n` bytes of the spare capacity.
        unsafe { input.set_len(input.len() + n) };
        if n > 0 && n < room_bytes {
            drained = Some(n);
            return Err(ErrorKind::WouldBlock.into());
        }
        Ok(n)
    });
    match drained {
        Some(n) => Ok(n),
        None => read,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    async fn readable_within(stream: &TcpStream, wait: Duration) -> bool {
        tokio::time::timeout(wait, stream.ready(Interest::READABLE))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_short_read_clears_readiness_and_later_bytes_raise_it_again() {
        let (mut client, server) = pair().await;
        client.write_all(b"PING\r\n").await.unwrap();
        assert!(readable_within(&server, Duration::from_secs(5)).await);
        let mut input = BytesMut::with_capacity(1024);
        assert_eq!(read_available(&server, &mut input).unwrap(), 6);
        assert_eq!(&input[..], b"PING\r\n");
        // Drained: the next wait goes to epoll, no `recv` answering EAGAIN first.
        assert!(!readable_within(&server, Duration::from_millis(50)).await);
        // Bytes that arrive later are not missed.
        client.write_all(b"ECHO\r\n").await.unwrap();
        assert!(readable_within(&server, Duration::from_secs(5)).await);
        assert_eq!(read_available(&server, &mut input).unwrap(), 6);
        assert_eq!(&input[..], b"PING\r\nECHO\r\n");
        // A closed peer reads as 0 bytes.
        drop(client);
        assert!(readable_within(&server, Duration::from_secs(5)).await);
        assert_eq!(read_available(&server, &mut input).unwrap(), 0);
    }

    #[tokio::test]
    async fn a_full_read_keeps_readiness_for_the_rest() {
        let (mut client, server) = pair().await;
        client.write_all(&[7u8; 100]).await.unwrap();
        assert!(readable_within(&server, Duration::from_secs(5)).await);
        let mut input = BytesMut::with_capacity(64);
        let room = input.capacity();
        assert_eq!(read_available(&server, &mut input).unwrap(), room);
        // The room was filled: more may wait, and readiness says so at once.
        assert!(readable_within(&server, Duration::from_millis(50)).await);
        input.reserve(1024);
        assert_eq!(read_available(&server, &mut input).unwrap(), 100 - room);
    }
}
