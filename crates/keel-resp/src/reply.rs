//! Replies and their encoding in RESP2 and RESP3.

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};

use super::number::format_f64;
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
    /// RESP2 `*-1` (a null array: what BLPOP answers at its timeout), RESP3 `_`.
    NullArray,
    Array(Vec<Reply>),
    /// RESP3 `%`; in RESP2 a flat array of alternating keys and values, as Redis does.
    Map(Vec<(Reply, Reply)>),
    /// A floating-point number (a sorted set's score), held as the decimal text it is written
    /// as, so that a reply relayed from another node keeps its exact digits: RESP3 `,`; in
    /// RESP2 a bulk string of the same text, as Redis does. Made by [`Reply::double`].
    Double(Bytes),
    /// RESP3 `~` (SMEMBERS, SINTER, ...); in RESP2 an array.
    Set(Vec<Reply>),
    /// Pairs that RESP3 answers as an array of two-element arrays and RESP2 as one flat array of
    /// alternating firsts and seconds (`WITHSCORES`: member and score): Redis's shape for pairs
    /// whose firsts may repeat or whose order matters, where a map will not do.
    Pairs(Vec<(Reply, Reply)>),
    /// RESP3 `=` with the `txt` format (INFO, CLIENT LIST); in RESP2 a bulk string.
    Verbatim(Bytes),
    /// RESP3 `#t` / `#f` (a script's boolean after `redis.setresp(3)`); in RESP2 the integer 1
    /// or 0, as Redis does.
    Boolean(bool),
    /// RESP3 `%`; in RESP2 an array of two-element arrays, as Redis answers XREAD's streams
    /// (a map only in RESP3).
    Keyed(Vec<(Reply, Reply)>),
    /// RESP3 `>`, an out-of-band push (pub/sub messages and confirmations); in RESP2 an array,
    /// as Redis does. Only ever answered by the node itself: never logged, never relayed.
    Push(Vec<Reply>),
    /// Several replies to one request, written one after the other (SUBSCRIBE `a b`: one
    /// confirmation per channel; UNSUBSCRIBE of nothing: none). Only ever answered by the node
    /// itself: never logged, never relayed, never inside another reply.
    Several(Vec<Reply>),
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

    /// A double in the form [`format_double`] gives it (`inf`, `-inf`, or the shortest decimal
    /// that reads back as `value`).
    pub fn double(value: f64) -> Reply {
        Reply::Double(Bytes::from(format_double(value)))
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
            Reply::Integer(_) | Reply::Null | Reply::Boolean(_) | Reply::NullArray => {
                HEADER_BYTES_MAX
            }
            Reply::Bulk(data) | Reply::Double(data) => HEADER_BYTES_MAX + data.len() + 2,
            Reply::Verbatim(text) => HEADER_BYTES_MAX + VERBATIM_TXT.len() + text.len() + 2,
            Reply::Array(items)
            | Reply::Set(items)
            | Reply::Push(items)
            | Reply::Several(items) => {
                HEADER_BYTES_MAX + items.iter().map(Reply::encoded_len_max).sum::<usize>()
            }
            Reply::Map(pairs) | Reply::Pairs(pairs) | Reply::Keyed(pairs) => {
                // A pair's own header, for `Pairs` in RESP3 and `Keyed` in RESP2.
                HEADER_BYTES_MAX
                    + pairs
                        .iter()
                        .map(|(k, v)| HEADER_BYTES_MAX + k.encoded_len_max() + v.encoded_len_max())
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
        Reply::NullArray => match version {
            ProtocolVersion::Resp2 => out.put_slice(b"*-1\r\n"),
            ProtocolVersion::Resp3 => out.put_slice(b"_\r\n"),
        },
        Reply::Keyed(pairs) => match version {
            ProtocolVersion::Resp2 => nested_pairs(out, pairs, version),
            ProtocolVersion::Resp3 => {
                header(out, b'%', pairs.len());
                pairs_of(out, pairs, version);
            }
        },
        Reply::Array(items) => items_of(out, b'*', items, version),
        Reply::Push(items) => match version {
            ProtocolVersion::Resp2 => items_of(out, b'*', items, version),
            ProtocolVersion::Resp3 => items_of(out, b'>', items, version),
        },
        Reply::Several(replies) => replies.iter().for_each(|r| encode(r, version, out)),
        Reply::Set(items) => match version {
            ProtocolVersion::Resp2 => items_of(out, b'*', items, version),
            ProtocolVersion::Resp3 => items_of(out, b'~', items, version),
        },
        Reply::Map(pairs) => {
            match version {
                ProtocolVersion::Resp2 => header(out, b'*', pairs.len() * 2),
                ProtocolVersion::Resp3 => header(out, b'%', pairs.len()),
            }
            pairs_of(out, pairs, version);
        }
        Reply::Pairs(pairs) => match version {
            ProtocolVersion::Resp2 => {
                header(out, b'*', pairs.len() * 2);
                pairs_of(out, pairs, version);
            }
            ProtocolVersion::Resp3 => nested_pairs(out, pairs, version),
        },
        Reply::Double(text) => match version {
            ProtocolVersion::Resp2 => put_bulk(out, text),
            ProtocolVersion::Resp3 => {
                out.put_u8(b',');
                out.put_slice(text);
                out.put_slice(b"\r\n");
            }
        },
        Reply::Boolean(b) => match version {
            ProtocolVersion::Resp2 => out.put_slice(if *b { b":1\r\n" } else { b":0\r\n" }),
            ProtocolVersion::Resp3 => out.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
        },
        Reply::Verbatim(text) => match version {
            ProtocolVersion::Resp2 => put_bulk(out, text),
            ProtocolVersion::Resp3 => {
                header(out, b'=', VERBATIM_TXT.len() + text.len());
                out.put_slice(VERBATIM_TXT);
                out.put_slice(text);
                out.put_slice(b"\r\n");
            }
        },
    }
}

/// The format prefix of a verbatim string of plain text.
const VERBATIM_TXT: &[u8] = b"txt:";

fn items_of(out: &mut BytesMut, marker: u8, items: &[Reply], version: ProtocolVersion) {
    header(out, marker, items.len());
    for item in items {
        encode(item, version, out);
    }
}

/// An array of two-element arrays.
fn nested_pairs(out: &mut BytesMut, pairs: &[(Reply, Reply)], version: ProtocolVersion) {
    header(out, b'*', pairs.len());
    for pair in pairs {
        header(out, b'*', 2);
        pairs_of(out, std::slice::from_ref(pair), version);
    }
}

fn pairs_of(out: &mut BytesMut, pairs: &[(Reply, Reply)], version: ProtocolVersion) {
    for (first, second) in pairs {
        encode(first, version, out);
        encode(second, version, out);
    }
}

/// A double as keel writes it in either protocol: `inf`, `-inf`, or the shortest decimal that
/// reads back as `value` ([`format_f64`], `0` for negative zero), the form Redis 7.2 writes
/// (Redis 7.0 wrote `%.17g`, 17 significant digits: the same number, with more digits).
pub fn format_double(value: f64) -> String {
    if value == f64::INFINITY {
        "inf".to_string()
    } else if value == f64::NEG_INFINITY {
        "-inf".to_string()
    } else {
        format_f64(value)
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
