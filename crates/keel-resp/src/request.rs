//! The request decoder: RESP arrays of bulk strings and inline commands.
//!
//! Incremental and sans-IO. The caller keeps a buffer that starts at a frame boundary, appends what
//! the socket delivers and calls [`Decoder::decode`] again; once a frame is returned together with
//! the number of bytes it used, the caller drops those bytes. Between two calls that returned
//! `None` the caller may only *append* to the buffer: the decoder remembers how far it got (the
//! arguments already delimited, how far an inline line was searched), so a request arriving one
//! byte at a time costs linear work, not quadratic. The server decodes with
//! [`Decoder::decode_split`]: each request is split off its input buffer and its arguments are
//! slices of it, no copy.
//!
//! Bounds: every length is checked against [`Limits`] as soon as its line is complete, before any
//! of its bytes are awaited or anything is reserved for them. A length line longer than
//! [`LENGTH_LINE_BYTES_MAX`] without a CRLF is an error, not a reason to keep buffering. So while a
//! request is incomplete, the buffer never legitimately holds more than `request_bytes_max` bytes
//! (or `inline_bytes_max` for an inline command).

use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};

use super::{inline, Limits, ProtocolError};
use crate::number::parse_i64;

/// Longest `*<count>\r\n` or `$<len>\r\n` line: the marker, a sign, 19 digits, CRLF, with room to
/// spare. Anything longer without a CRLF is not a length.
pub(crate) const LENGTH_LINE_BYTES_MAX: usize = 32;

/// Preallocate at most this many argument slots from a declared count: the count is only a claim
/// until the arguments arrive, so it must not size an allocation.
const ARGS_PREALLOCATED_MAX: usize = 64;

/// How the request was written. Both mean the same to the command layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// `*<n>\r\n` followed by n bulk strings: what client libraries send.
    Multibulk,
    /// A line of space-separated words, with Redis's quoting rules.
    Inline,
}

/// One client request: the command name and its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The command name first. Empty for `*0`, `*-1` and blank lines, which the server ignores
    /// without a reply (as Redis does).
    pub args: Vec<Bytes>,
    pub kind: FrameKind,
}

impl Frame {
    /// True for requests the server ignores without replying.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }
}

/// Decodes one request from the start of `buf`, statelessly: `Ok(None)` means "incomplete, call
/// again with more bytes". Use a [`Decoder`] per connection to avoid rescanning a partial request.
pub fn parse(buf: &[u8], limits: &Limits) -> Result<Option<(Frame, usize)>, ProtocolError> {
    Decoder::new(*limits).decode(buf)
}

/// A per-connection request decoder that resumes where the previous call stopped.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    state: State,
}

#[derive(Debug, Default)]
enum State {
    /// At a frame boundary.
    #[default]
    Idle,
    /// An inline line; `scanned` bytes hold no newline.
    Inline { scanned: usize },
    /// Inside a RESP array of `argc` bulk strings. `args` are the argument byte ranges delimited
    /// so far; `pos` is where the next `$` line starts; `awaited` is where the argument whose
    /// length line was read ends (0 before that line is complete).
    Multibulk {
        argc: usize,
        pos: usize,
        args: Vec<Range<usize>>,
        awaited: usize,
    },
}

impl Decoder {
    pub fn new(limits: Limits) -> Self {
        Decoder {
            limits,
            state: State::Idle,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How many bytes the buffer must hold (from the start of the request) before the argument
    /// being read is complete: known once its length line arrived, 0 otherwise. Lets a server
    /// size its buffer for a large argument once, instead of growing it read by read.
    pub fn awaited_len(&self) -> usize {
        match self.state {
            State::Multibulk { awaited, .. } => awaited,
            _ => 0,
        }
    }

    /// Decodes the next request from `buf`, which must start where the previous frame ended (or at
    /// the start of the stream). Returns the frame and how many bytes of `buf` it used, `None` if
    /// more bytes are needed, or an error after which the connection should be closed (the decoder
    /// is reset, but the stream has lost its framing). The frame's arguments share one copy of
    /// its bytes.
    pub fn decode(&mut self, buf: &[u8]) -> Result<Option<(Frame, usize)>, ProtocolError> {
        Ok(self.next(buf)?.map(|decoded| match decoded {
            Decoded::Frame(frame, used) => (frame, used),
            Decoded::Multibulk { args, used } => {
                // One copy of the whole frame, sliced per argument: one allocation per request
                // rather than one per argument.
                let bytes = Bytes::copy_from_slice(&buf[..used]);
                (multibulk(&bytes, args), used)
            }
        }))
    }

    /// [`Self::decode`] from a connection's input buffer, without copying: the frame's bytes are
    /// split off the front of `buf` and its arguments are slices of them (they keep that part of
    /// the buffer's allocation alive until dropped; the rest of `buf` can still grow).
    pub fn decode_split(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        Ok(self.next(buf)?.map(|decoded| match decoded {
            Decoded::Frame(frame, used) => {
                buf.advance(used);
                frame
            }
            Decoded::Multibulk { args, used } => multibulk(&buf.split_to(used).freeze(), args),
        }))
    }

    fn next(&mut self, buf: &[u8]) -> Result<Option<Decoded>, ProtocolError> {
        let result = self.decode_inner(buf);
        if !matches!(result, Ok(None)) {
            self.state = State::Idle;
        }
        result
    }

    fn decode_inner(&mut self, buf: &[u8]) -> Result<Option<Decoded>, ProtocolError> {
        let limits = self.limits;
        if let State::Idle = self.state {
            match buf.first() {
                None => return Ok(None),
                Some(b'*') => {
                    let Some((digits, next)) = length_line(buf, 0)? else {
                        return Ok(None);
                    };
                    let count = parse_i64(digits).ok_or(ProtocolError::InvalidMultibulkLength)?;
                    if count <= 0 {
                        // `*0` and `*-1`: nothing to run (Redis ignores them too).
                        return Ok(Some(Decoded::Frame(empty(FrameKind::Multibulk), next)));
                    }
                    if count as u64 > limits.args_max as u64 {
                        return Err(ProtocolError::TooManyArguments {
                            count: count as u64,
                            max: limits.args_max,
                        });
                    }
                    let argc = count as usize;
                    self.state = State::Multibulk {
                        argc,
                        pos: next,
                        args: Vec::with_capacity(argc.min(ARGS_PREALLOCATED_MAX)),
                        awaited: 0,
                    };
                }
                Some(_) => self.state = State::Inline { scanned: 0 },
            }
        }
        match &mut self.state {
            State::Idle => unreachable!("state was set above"),
            State::Inline { scanned } => decode_inline(buf, scanned, &limits),
            State::Multibulk {
                argc,
                pos,
                args,
                awaited,
            } => decode_multibulk(buf, *argc, pos, args, awaited, &limits),
        }
    }
}

/// A complete request found at the start of the buffer.
enum Decoded {
    /// Built already (inline commands, empty frames), from the first `used` bytes.
    Frame(Frame, usize),
    /// A RESP array: its arguments' byte ranges within the first `used` bytes.
    Multibulk {
        args: Vec<Range<usize>>,
        used: usize,
    },
}

/// The frame whose arguments are `args` within `bytes`.
fn multibulk(bytes: &Bytes, args: Vec<Range<usize>>) -> Frame {
    Frame {
        args: args.into_iter().map(|r| bytes.slice(r)).collect(),
        kind: FrameKind::Multibulk,
    }
}

fn empty(kind: FrameKind) -> Frame {
    Frame {
        args: Vec::new(),
        kind,
    }
}

fn decode_multibulk(
    buf: &[u8],
    argc: usize,
    pos: &mut usize,
    args: &mut Vec<Range<usize>>,
    awaited: &mut usize,
    limits: &Limits,
) -> Result<Option<Decoded>, ProtocolError> {
    while args.len() < argc {
        let Some(&marker) = buf.get(*pos) else {
            return Ok(None);
        };
        if marker != b'$' {
            return Err(ProtocolError::ExpectedBulk(marker));
        }
        let Some((digits, data_start)) = length_line(buf, *pos)? else {
            return Ok(None);
        };
        let len = parse_i64(digits)
            .and_then(|n| u64::try_from(n).ok())
            .ok_or(ProtocolError::InvalidBulkLength)?;
        if len > limits.bulk_bytes_max as u64 {
            return Err(ProtocolError::BulkTooLong {
                len,
                max: limits.bulk_bytes_max,
            });
        }
        // Everything up to the end of this argument, headers included.
        let end = data_start as u64 + len + 2;
        if end > limits.request_bytes_max as u64 {
            return Err(ProtocolError::RequestTooLarge {
                len: end,
                max: limits.request_bytes_max,
            });
        }
        let end = end as usize;
        if buf.len() < end {
            // The length line is re-read next time (at most LENGTH_LINE_BYTES_MAX bytes); the
            // arguments before it are not.
            *awaited = end;
            return Ok(None);
        }
        if &buf[end - 2..end] != b"\r\n" {
            return Err(ProtocolError::MissingCrlf);
        }
        args.push(data_start..end - 2);
        *pos = end;
    }
    Ok(Some(Decoded::Multibulk {
        args: std::mem::take(args),
        used: *pos,
    }))
}

fn decode_inline(
    buf: &[u8],
    scanned: &mut usize,
    limits: &Limits,
) -> Result<Option<Decoded>, ProtocolError> {
    let start = (*scanned).min(buf.len());
    let Some(offset) = buf[start..].iter().position(|&b| b == b'\n') else {
        // A trailing CR may be the first half of the line's CRLF: not counted, so a line of
        // exactly `inline_bytes_max` bytes is accepted however its bytes arrive (the check
        // below, once the LF is in, does not count the CR either).
        let line_so_far = buf.strip_suffix(b"\r").unwrap_or(buf);
        if line_so_far.len() > limits.inline_bytes_max {
            return Err(ProtocolError::InlineTooLong {
                max: limits.inline_bytes_max,
            });
        }
        *scanned = buf.len();
        return Ok(None);
    };
    let newline = start + offset;
    let line = buf[..newline]
        .strip_suffix(b"\r")
        .unwrap_or(&buf[..newline]);
    if line.len() > limits.inline_bytes_max {
        return Err(ProtocolError::InlineTooLong {
            max: limits.inline_bytes_max,
        });
    }
    let args = inline::split_args(line, limits.args_max)?;
    Ok(Some(Decoded::Frame(
        Frame {
            args,
            kind: FrameKind::Inline,
        },
        newline + 1,
    )))
}

/// Finds the CRLF ending the length line that starts at `start` (with its `*` or `$` marker).
/// Returns the digits between marker and CRLF, and the offset just past the CRLF.
fn length_line(buf: &[u8], start: usize) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let window_end = buf.len().min(start + LENGTH_LINE_BYTES_MAX);
    let window = &buf[start..window_end];
    if let Some(cr) = window.windows(2).position(|w| w == b"\r\n") {
        return Ok(Some((&window[1..cr], start + cr + 2)));
    }
    if window.len() >= LENGTH_LINE_BYTES_MAX {
        return Err(ProtocolError::LengthLineTooLong);
    }
    Ok(None)
}
