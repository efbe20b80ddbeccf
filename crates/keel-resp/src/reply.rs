//! Replies and their encoding in RESP2 and RESP3.

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};

use super::ProtocolVersion;

/// A reply value, independent of the protocol version it will be written in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`, `+PONG`: a short status line.
    Simple(Cow<'static, str>),
    /// `-ERR ...`: the whole line after the `-`, starting with the error code (`ERR`,
    /// `WRONGPASS`, `NOPROTO`, `TRYAGAIN`, ...).
    Error(Cow<'static, str>),
    Integer(i64),
    Bulk(Bytes),
    /// RESP2 `$-1` (a null bulk string), RESP3 `_`.
    Null,
    Array(Vec<Reply>),
    /// RESP3 `%`; in RESP2 a flat array of alternating keys and values, as Redis does.
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    pub const OK: Reply = Reply::Simple(Cow::Borrowed("OK"));
    pub const PONG: Reply = Reply::Simple(Cow::Borrowed("PONG"));

    /// An error reply; `message` starts with its code, e.g. `"ERR syntax error"`.
    pub fn error(message: impl Into<Cow<'static, str>>) -> Reply {
        Reply::Error(message.into())
    }

    pub fn simple(text: impl Into<Cow<'static, str>>) -> Reply {
        Reply::Simple(text.into())
    }

    pub fn bulk(data: impl Into<Bytes>) -> Reply {
        Reply::Bulk(data.into())
    }

    /// A bulk string from text.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Bulk(Bytes::from(text.into()))
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// At least as many bytes as [`encode`] appends for this reply in either protocol version:
    /// what a server checks against an output bound before encoding (an MGET of many large
    /// values must not be built only to be refused).
    pub fn encoded_len_max(&self) -> usize {
        // A marker, a sign, 19 digits, CRLF: the longest header or integer line.
        const HEADER_BYTES_MAX: usize = 23;
        match self {
            Reply::Simple(text) | Reply::Error(text) => text.len() + 3,
            Reply::Integer(_) | Reply::Null => HEADER_BYTES_MAX,
            Reply::Bulk(data) => HEADER_BYTES_MAX + data.len() + 2,
            Reply::Array(items) => {
                HEADER_BYTES_MAX + items.iter().map(Reply::encoded_len_max).sum::<usize>()
            }
            Reply::Map(pairs) => {
                HEADER_BYTES_MAX
                    + pairs
                        .iter()
                        .map(|(k, v)| k.encoded_len_max() + v.encoded_len_max())
                        .sum::<usize>()
            }
        }
    }
}

/// Appends `reply` to `out` in the connection's protocol version.
pub fn encode(reply: &Reply, version: ProtocolVersion, out: &mut BytesMut) {
    match reply {
        Reply::Simple(text) => line(out, b'+', text),
        Reply::Error(text) => line(out, b'-', text),
        Reply::Integer(n) => {
            out.put_u8(b':');
            put_decimal(out, *n);
            out.put_slice(b"\r\n");
        }
        Reply::Bulk(data) => put_bulk(out, data),
        Reply::Null => match version {
            ProtocolVersion::Resp2 => out.put_slice(b"$-1\r\n"),
            ProtocolVersion::Resp3 => out.put_slice(b"_\r\n"),
        },
        Reply::Array(items) => {
            header(out, b'*', items.len());
            for item in items {
                encode(item, version, out);
            }
        }
        Reply::Map(pairs) => {
            match version {
                ProtocolVersion::Resp2 => header(out, b'*', pairs.len() * 2),
                ProtocolVersion::Resp3 => header(out, b'%', pairs.len()),
            }
            for (key, value) in pairs {
                encode(key, version, out);
                encode(value, version, out);
            }
        }
    }
}

/// Appends a request (a RESP array of bulk strings) to `out`: what a client sends.
pub fn encode_request<A: AsRef<[u8]>>(args: &[A], out: &mut BytesMut) {
    header(out, b'*', args.len());
    for arg in args {
        put_bulk(out, arg.as_ref());
    }
}

/// A status or error line. CR and LF would end the line early and desynchronise the client, so
/// they become spaces (error messages may quote user input).
fn line(out: &mut BytesMut, marker: u8, text: &str) {
    out.reserve(text.len() + 3);
    out.put_u8(marker);
    out.extend(
        text.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.put_slice(b"\r\n");
}

fn header(out: &mut BytesMut, marker: u8, len: usize) {
    out.put_u8(marker);
    put_decimal(out, len as i64);
    out.put_slice(b"\r\n");
}

/// Appends one bulk string (also an argument of a request started by [`put_array_header`]).
pub fn put_bulk(out: &mut BytesMut, data: &[u8]) {
    out.reserve(data.len() + 16);
    header(out, b'$', data.len());
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// Writes `n` in decimal without going through `fmt` (this runs for every reply).
fn put_decimal(out: &mut BytesMut, n: i64) {
    let mut digits = [0u8; 20];
    if n < 0 {
        out.put_u8(b'-');
    }
    out.put_slice(decimal(n.unsigned_abs(), &mut digits));
}

/// The decimal digits of `n`, written at the end of `digits`.
fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[at..]
}

/// Appends `n` in decimal as a bulk string (a request's numeric argument), without allocating.
pub fn put_decimal_bulk(out: &mut BytesMut, n: u64) {
    let mut digits = [0u8; 20];
    put_bulk(out, decimal(n, &mut digits));
}

/// Appends a RESP array header of `len` elements (the start of a request of `len` arguments).
pub fn put_array_header(out: &mut BytesMut, len: usize) {
    header(out, b'*', len);
}
