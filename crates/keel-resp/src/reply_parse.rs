//! The client side: decoding replies (`keel bench`, tests, and a follower's link to the leader,
//! whose replies are relayed to the client by encoding them again). Accepts every RESP2 and RESP3
//! type a server may send, bounded like requests: lengths against [`Limits`], nesting depth
//! against [`DEPTH_MAX`].
//!
//! Every type keel sends parses back into the [`Reply`] it was encoded from, in the protocol it
//! was encoded in (a double keeps its text), so that a relayed reply is encoded again byte for
//! byte as the leader wrote it. Two shapes do not survive a change of protocol: RESP2 flattens
//! maps, sets, doubles and pairs, and RESP3's [`Reply::Pairs`] parses as arrays of arrays; a
//! relay therefore reads the protocol its client speaks. RESP3 types without a variant are
//! mapped onto the nearest one: booleans to integers 1/0, big numbers to bulk strings of their
//! text, pushes to arrays, blob errors to errors; a verbatim string loses its format (keel sends
//! only `txt`); attributes are skipped.

use bytes::Bytes;

use super::request::LENGTH_LINE_BYTES_MAX;
use super::{Limits, ProtocolError, Reply};
use crate::number::parse_i64;

/// Deepest nesting of aggregates accepted in a reply.
pub const DEPTH_MAX: usize = 32;

/// Whether a reply was an error (`-...` or `!...`), for clients that only count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    Value,
    Error,
}

/// Decodes one complete reply from the start of `buf`; `None` when more bytes are needed.
pub fn parse_reply(buf: &[u8], limits: &Limits) -> Result<Option<(Reply, usize)>, ProtocolError> {
    let walker = Walker {
        buf,
        limits,
        build: true,
    };
    Ok(walker
        .walk(0, 0)?
        .map(|step| (step.reply.expect("built"), step.next)))
}

/// Finds the end of one complete reply without building it (no allocation).
pub fn skip_reply(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(ReplyKind, usize)>, ProtocolError> {
    let walker = Walker {
        buf,
        limits,
        build: false,
    };
    Ok(walker.walk(0, 0)?.map(|step| {
        let kind = if step.is_error {
            ReplyKind::Error
        } else {
            ReplyKind::Value
        };
        (kind, step.next)
    }))
}

struct Walker<'a> {
    buf: &'a [u8],
    limits: &'a Limits,
    /// False when only the extent of the reply is wanted.
    build: bool,
}

struct Step {
    reply: Option<Reply>,
    next: usize,
    is_error: bool,
}

type Walk = Result<Option<Step>, ProtocolError>;

impl Walker<'_> {
    fn walk(&self, pos: usize, depth: usize) -> Walk {
        if depth > DEPTH_MAX {
            return Err(ProtocolError::NestingTooDeep { max: DEPTH_MAX });
        }
        let Some(&marker) = self.buf.get(pos) else {
            return Ok(None);
        };
        match marker {
            b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => self.line_reply(marker, pos),
            b'$' | b'=' | b'!' => self.bulk_reply(marker, pos),
            b'*' | b'~' | b'>' | b'%' | b'|' => self.aggregate(marker, pos, depth),
            other => Err(ProtocolError::UnknownReplyType(other)),
        }
    }

    fn line_reply(&self, marker: u8, pos: usize) -> Walk {
        let Some((text, next)) = self.line(pos, self.limits.inline_bytes_max)? else {
            return Ok(None);
        };
        let is_error = marker == b'-';
        if !self.build {
            return Ok(Some(Step {
                reply: None,
                next,
                is_error,
            }));
        }
        let as_string = || String::from_utf8_lossy(text).into_owned();
        let reply = match marker {
            b'+' => Reply::simple(as_string()),
            b'-' => Reply::error(as_string()),
            b':' => Reply::Integer(parse_i64(text).ok_or(ProtocolError::InvalidReplyNumber)?),
            b'_' => Reply::Null,
            b'#' => Reply::Boolean(text == b"t"),
            b',' => Reply::Double(Bytes::copy_from_slice(text)),
            _ => Reply::Bulk(Bytes::copy_from_slice(text)),
        };
        Ok(Some(Step {
            reply: Some(reply),
            next,
            is_error,
        }))
    }

    fn bulk_reply(&self, marker: u8, pos: usize) -> Walk {
        let Some((len, data_start)) = self.length(pos)? else {
            return Ok(None);
        };
        let is_error = marker == b'!';
        if len < 0 {
            let reply = self.build.then_some(Reply::Null);
            return Ok(Some(Step {
                reply,
                next: data_start,
                is_error,
            }));
        }
        let len = len as u64;
        if len > self.limits.bulk_bytes_max as u64 {
            return Err(ProtocolError::BulkTooLong {
                len,
                max: self.limits.bulk_bytes_max,
            });
        }
        let end = data_start + len as usize + 2;
        if self.buf.len() < end {
            return Ok(None);
        }
        if &self.buf[end - 2..end] != b"\r\n" {
            return Err(ProtocolError::MissingCrlf);
        }
        let reply = self.build.then(|| {
            let data = &self.buf[data_start..end - 2];
            if is_error {
                Reply::error(String::from_utf8_lossy(data).into_owned())
            } else if marker == b'=' {
                // Past the "txt:" / "mkd:" format prefix (a verbatim string keeps no format).
                Reply::Verbatim(Bytes::copy_from_slice(data.get(4..).unwrap_or_default()))
            } else {
                Reply::Bulk(Bytes::copy_from_slice(data))
            }
        });
        Ok(Some(Step {
            reply,
            next: end,
            is_error,
        }))
    }

    fn aggregate(&self, marker: u8, pos: usize, depth: usize) -> Walk {
        let Some((count, mut next)) = self.length(pos)? else {
            return Ok(None);
        };
        if count < 0 {
            let reply = self.build.then_some(Reply::NullArray);
            return Ok(Some(Step {
                reply,
                next,
                is_error: false,
            }));
        }
        let is_pairs = matches!(marker, b'%' | b'|');
        let elements = (count as u64).saturating_mul(if is_pairs { 2 } else { 1 });
        if elements > self.limits.args_max as u64 {
            return Err(ProtocolError::TooManyArguments {
                count: elements,
                max: self.limits.args_max,
            });
        }
        let mut items = Vec::with_capacity(if self.build {
            (elements as usize).min(64)
        } else {
            0
        });
        for _ in 0..elements {
            let Some(step) = self.walk(next, depth + 1)? else {
                return Ok(None);
            };
            next = step.next;
            if let Some(reply) = step.reply {
                items.push(reply);
            }
        }
        if marker == b'|' {
            // Attributes describe the reply that follows; we have no use for them.
            return self.walk(next, depth + 1);
        }
        let reply = self.build.then(|| {
            if is_pairs {
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                Reply::Map(pairs)
            } else if marker == b'~' {
                Reply::Set(items)
            } else {
                Reply::Array(items)
            }
        });
        Ok(Some(Step {
            reply,
            next,
            is_error: false,
        }))
    }

    /// A `<marker><signed integer>\r\n` line.
    fn length(&self, pos: usize) -> Result<Option<(i64, usize)>, ProtocolError> {
        let Some((text, next)) = self.line(pos, LENGTH_LINE_BYTES_MAX)? else {
            return Ok(None);
        };
        let n = parse_i64(text).ok_or(ProtocolError::InvalidReplyNumber)?;
        Ok(Some((n, next)))
    }

    /// The text after the marker at `pos` up to CRLF, and the offset past the CRLF.
    fn line(
        &self,
        pos: usize,
        line_bytes_max: usize,
    ) -> Result<Option<(&[u8], usize)>, ProtocolError> {
        let window_end = self.buf.len().min(pos + line_bytes_max + 3);
        let window = &self.buf[pos..window_end];
        if let Some(cr) = window.windows(2).position(|w| w == b"\r\n") {
            return Ok(Some((&window[1..cr], pos + cr + 2)));
        }
        if window.len() >= line_bytes_max + 3 {
            return Err(ProtocolError::LengthLineTooLong);
        }
        Ok(None)
    }
}
