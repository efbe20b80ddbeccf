//! The connection layer under the frames: plain, or sealed records once a connection has
//! authenticated (wire format in the `wire` module documentation, "Authentication").
//!
//! [`RecordReader`] is an `AsyncRead` that yields only bytes whose record tag matched, so the
//! frame and chunk readers above it are the same in both modes; [`FrameWriter`] collects frames
//! (and snapshot chunk data) in one buffer and writes them as one record per
//! [`FrameWriter::send`]: a batch of messages costs one MAC. Both sit on any
//! `AsyncRead`/`AsyncWrite`, so a TLS stream can be put underneath later without changing
//! anything above.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::wire::auth::{self, RecordKey, RECORD_HEADER_BYTES, TAG_BYTES};
use crate::wire::AuthError;

/// An authentication failure carried through `io::Error` (the `AsyncRead` interface), turned
/// back into `TransportError::Auth` by its `From<io::Error>`.
pub(super) fn auth_io_error(e: AuthError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

enum ReadState {
    /// Reading a record header; `filled` bytes of it so far.
    Header { filled: usize },
    /// Reading a payload of `len` bytes; `filled` so far.
    Payload {
        len: usize,
        filled: usize,
        tag: [u8; TAG_BYTES],
    },
    /// Handing out a verified payload from `pos`.
    Serving { pos: usize },
}

/// Reads through `inner`: passes bytes through until keyed, then only verified record payloads.
pub struct RecordReader<R> {
    inner: R,
    key: Option<RecordKey>,
    /// Bound on one record's payload, checked before anything is allocated for it.
    record_bytes_max: u32,
    state: ReadState,
    header: [u8; RECORD_HEADER_BYTES],
    payload: Vec<u8>,
}

impl<R> RecordReader<R> {
    pub fn plain(inner: R) -> Self {
        RecordReader {
            inner,
            key: None,
            record_bytes_max: 0,
            state: ReadState::Serving { pos: 0 },
            header: [0; RECORD_HEADER_BYTES],
            payload: Vec::new(),
        }
    }

    /// From now on every byte must arrive in a record sealed with `key`, whose payload is at
    /// most `record_bytes_max`.
    pub fn seal(&mut self, key: RecordKey, record_bytes_max: u32) {
        self.key = Some(key);
        self.record_bytes_max = record_bytes_max;
    }

    /// The stream underneath (to drain a closing connection without checking tags).
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for RecordReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let Some(key) = this.key.as_mut() else {
            return Pin::new(&mut this.inner).poll_read(cx, out);
        };
        loop {
            match &mut this.state {
                ReadState::Serving { pos } => {
                    if *pos < this.payload.len() {
                        let n = out.remaining().min(this.payload.len() - *pos);
                        out.put_slice(&this.payload[*pos..*pos + n]);
                        *pos += n;
                        return Poll::Ready(Ok(()));
                    }
                    this.state = ReadState::Header { filled: 0 };
                }
                ReadState::Header { filled } => {
                    let mut buf = ReadBuf::new(&mut this.header[*filled..]);
                    ready!(Pin::new(&mut this.inner).poll_read(cx, &mut buf))?;
                    let n = buf.filled().len();
                    if n == 0 {
                        if *filled == 0 {
                            return Poll::Ready(Ok(())); // a clean end between records
                        }
                        return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                    }
                    *filled += n;
                    if *filled == RECORD_HEADER_BYTES {
                        let (len, tag) =
                            auth::parse_record_header(&this.header, this.record_bytes_max)
                                .map_err(auth_io_error)?;
                        this.payload.clear();
                        this.payload.resize(len as usize, 0);
                        this.state = ReadState::Payload {
                            len: len as usize,
                            filled: 0,
                            tag,
                        };
                    }
                }
                ReadState::Payload { len, filled, tag } => {
                    if *filled < *len {
                        let mut buf = ReadBuf::new(&mut this.payload[*filled..]);
                        ready!(Pin::new(&mut this.inner).poll_read(cx, &mut buf))?;
                        let n = buf.filled().len();
                        if n == 0 {
                            return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                        }
                        *filled += n;
                        continue;
                    }
                    // Nothing of a record is handed out before its whole tag matched.
                    key.open(&this.payload, tag).map_err(auth_io_error)?;
                    this.state = ReadState::Serving { pos: 0 };
                }
            }
        }
    }
}

/// Writes frames: plain, or, once keyed, one sealed record per [`FrameWriter::send`].
pub struct FrameWriter<W> {
    inner: W,
    key: Option<RecordKey>,
    /// What the next `send` writes. When keyed, it starts with room for the record header, so
    /// a record is sealed in place.
    buf: Vec<u8>,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    pub fn plain(inner: W) -> Self {
        FrameWriter {
            inner,
            key: None,
            buf: Vec::new(),
        }
    }

    /// From now on everything written is sealed with `key`. Call between sends.
    pub fn seal(&mut self, key: RecordKey) {
        debug_assert!(self.buf.is_empty(), "sealing between sends only");
        self.key = Some(key);
        self.reset();
    }

    fn reset(&mut self) {
        self.buf.clear();
        if self.key.is_some() {
            self.buf.resize(RECORD_HEADER_BYTES, 0);
        }
    }

    /// The buffer to append frames (and chunk data) to.
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Bytes appended since the last send.
    pub fn pending_bytes(&self) -> usize {
        let header = if self.key.is_some() {
            RECORD_HEADER_BYTES
        } else {
            0
        };
        self.buf.len() - header
    }

    /// Writes what was appended (as one record when keyed) and empties the buffer.
    pub async fn send(&mut self) -> io::Result<()> {
        if self.pending_bytes() > 0 {
            if let Some(key) = self.key.as_mut() {
                key.seal_in_place(&mut self.buf);
            }
            let written = self.inner.write_all(&self.buf).await;
            self.reset();
            written?;
        }
        Ok(())
    }

    /// Forgets what was appended and not sent.
    pub fn discard(&mut self) {
        self.reset();
    }

    pub async fn shutdown(&mut self) -> io::Result<()> {
        self.inner.shutdown().await
    }
}
