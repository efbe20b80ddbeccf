//! What applying one log entry answers, and its encoding: the bytes the apply thread hands back to
//! the connection that proposed the entry (`keel_runtime::StateMachine::apply`'s result).
//!
//! Format. Integers little-endian; `bytes` is a `u32` length then that many bytes; `count` is a
//! `u32`. One tag byte, then its body:
//!
//! ```text
//! tag  body
//! 0    -                     +OK                      \
//! 1    -                     nil                       | a single write: exactly the remembered-
//! 2    i64                   integer                   | reply encoding of snapshot.rs, so a
//! 3    u8 error code         error (the codes of       | single write's result is unchanged
//!      [u8 command]          snapshot.rs; 7 invalid    | by EXEC's addition
//!                            expire time, then the     |
//!                            command's code)          /
//! 5    count n, n x value    EXEC: one reply per queued command, in order
//! 6    -                     a request whose id was applied before and whose reply is not kept
//!                            (EXEC, or a write that answers a value; see below)
//! 7    value                 a write that answers a value (SET ... GET, GETDEL, GETEX,
//!                            INCRBYFLOAT)
//! 8    -                     EXEC aborted: a watched key changed (nothing ran; null)
//!
//! value (an element of an EXEC reply; nested for MGET):
//! 0    bytes text            simple string (+OK, +PONG)
//! 1    bytes text            error, text starting with its code (-ERR ...)
//! 2    i64                   integer
//! 3    bytes data            bulk string
//! 4    -                     null
//! 5    count n, n x value    array
//! 6    count n, n x (value, value)   map
//! 7    bytes text            double (its decimal text)
//! 8    count n, n x value    set
//! 9    count n, n x (value, value)   pairs (WITHSCORES)
//! 10   bytes text            verbatim string
//! 11   u8 (0 or 1)           boolean
//! 12   -                     null array (RESP2 `*-1`)
//! 13   count n, n x (value, value)   keyed (XREAD's streams: a map in RESP3)
//! ```
//!
//! Nothing may follow. Values nest at most [`VALUE_DEPTH_MAX`] deep. These bytes never reach
//! disk or the network (the runtime passes them in memory to the proposer's `Pending`), so the
//! format can change with the code (values 7 to 10 came with RESP3's types, without a version);
//! it is documented because the two ends are in different modules. What is durable is the
//! deduplication table's compact replies (`WriteReply`, in snapshots): a reply holding a double,
//! a set or pairs is a value (tag 7 or EXEC), which that table never keeps.
//!
//! A transaction is deduplicated like a write (one request id for the whole transaction), but the
//! deduplication table remembers only *that* it was applied (as `+OK`, the compact replies of
//! `dedup.rs`: an EXEC's reply may hold large values read from the store). So does a write that
//! answers a stored value. A retried transaction or such write whose first copy applied is
//! therefore not run again and answers [`ApplyReply::AppliedBefore`] (tag 6), an error that says
//! so, unless what it answered was compact (an error, a pop's null): that is remembered and
//! answered again.

use std::borrow::Cow;

use bytes::{BufMut, Bytes};

use super::WriteReply;
use keel_redis_types::wire::{put_bytes, Reader};
use keel_resp::Reply;

/// Deepest nesting of values decoded in an EXEC reply or a write's value. LCS IDX in EXEC: EXEC's
/// array holds LCS IDX's map, which holds the array of matches, each an array holding two
/// ranges, arrays of integers: 5.
/// XINFO STREAM FULL nests deepest: EXEC's array, the stream's map, its groups, a group, its
/// consumers, a consumer, its pending entries, one of them, its integers: 9.
pub const VALUE_DEPTH_MAX: usize = 9;

const TAG_EXEC: u8 = 5;
const TAG_APPLIED_BEFORE: u8 = 6;
const TAG_VALUE: u8 = 7;
const TAG_EXEC_ABORTED: u8 = 8;

const VALUE_SIMPLE: u8 = 0;
const VALUE_ERROR: u8 = 1;
const VALUE_INTEGER: u8 = 2;
const VALUE_BULK: u8 = 3;
const VALUE_NULL: u8 = 4;
const VALUE_ARRAY: u8 = 5;
const VALUE_MAP: u8 = 6;
const VALUE_DOUBLE: u8 = 7;
const VALUE_SET: u8 = 8;
const VALUE_PAIRS: u8 = 9;
const VALUE_VERBATIM: u8 = 10;
const VALUE_BOOLEAN: u8 = 11;
const VALUE_NULL_ARRAY: u8 = 12;
const VALUE_KEYED: u8 = 13;

/// The outcome of one applied log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyReply {
    /// A single write's reply.
    Write(WriteReply),
    /// EXEC: one reply per queued command, in order. A command that failed (not an integer, too
    /// large, ...) has its error in its place; the others still applied, as in Redis.
    Exec(Vec<Reply>),
    /// A write that answers a stored value (SET ... GET, GETDEL, GETEX, INCRBYFLOAT).
    Value(Reply),
    /// A request whose id was applied before and whose reply is not kept (EXEC, or a write that
    /// answers a value): not run again.
    AppliedBefore,
    /// EXEC of a transaction a watched key of which changed since WATCH: nothing ran (Redis's
    /// null reply).
    ExecAborted,
}

impl From<WriteReply> for ApplyReply {
    fn from(reply: WriteReply) -> Self {
        ApplyReply::Write(reply)
    }
}

impl ApplyReply {
    pub fn to_reply(&self) -> Reply {
        self.clone().into_reply()
    }

    pub fn into_reply(self) -> Reply {
        match self {
            ApplyReply::Write(reply) => reply.to_reply(),
            ApplyReply::Exec(replies) => Reply::Array(replies),
            ApplyReply::Value(reply) => reply,
            // Redis answers a transaction a watched key aborted with the null array (`*-1`).
            ApplyReply::ExecAborted => Reply::NullArray,
            ApplyReply::AppliedBefore => Reply::error(
                "ERR this request id was applied already: it is not run again, and its reply \
                 is not kept",
            ),
        }
    }

    /// Appends the encoding described in the module documentation.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ApplyReply::Write(reply) => reply.encode(out),
            ApplyReply::Exec(replies) => {
                out.put_u8(TAG_EXEC);
                put_count(out, replies.len());
                for reply in replies {
                    put_value(out, reply);
                }
            }
            ApplyReply::Value(reply) => {
                out.put_u8(TAG_VALUE);
                put_value(out, reply);
            }
            ApplyReply::AppliedBefore => out.put_u8(TAG_APPLIED_BEFORE),
            ApplyReply::ExecAborted => out.put_u8(TAG_EXEC_ABORTED),
        }
    }

    /// [`Self::encode`] into a buffer of its own; the commonest reply, `+OK`, needs no allocation.
    pub fn to_bytes(&self) -> Bytes {
        /// The encoding of `+OK` (a test checks it against `encode`).
        const OK_ENCODED: &[u8] = &[0];
        if let ApplyReply::Write(WriteReply::Ok) = self {
            return Bytes::from_static(OK_ENCODED);
        }
        let mut out = Vec::with_capacity(16);
        self.encode(&mut out);
        Bytes::from(out)
    }

    /// Decodes what [`Self::encode`] wrote; `data` must hold exactly one reply. Bulk strings are
    /// zero-copy slices of `data`.
    pub fn decode(data: &Bytes) -> Option<ApplyReply> {
        match *data.first()? {
            TAG_EXEC => {
                let mut r = Reader::new(data.slice(1..));
                let n = r.count(1)?;
                let replies = (0..n)
                    .map(|_| read_value(&mut r, 1))
                    .collect::<Option<Vec<_>>>()?;
                (r.remaining() == 0).then_some(ApplyReply::Exec(replies))
            }
            TAG_VALUE => {
                let mut r = Reader::new(data.slice(1..));
                let reply = read_value(&mut r, 1)?;
                (r.remaining() == 0).then_some(ApplyReply::Value(reply))
            }
            TAG_APPLIED_BEFORE => (data.len() == 1).then_some(ApplyReply::AppliedBefore),
            TAG_EXEC_ABORTED => (data.len() == 1).then_some(ApplyReply::ExecAborted),
            _ => WriteReply::decode(data).map(ApplyReply::Write),
        }
    }
}

/// The bytes `reply` takes in RESP, roughly (for bounding an EXEC's reply).
pub(crate) fn reply_bytes(reply: &Reply) -> usize {
    const OVERHEAD: usize = 16;
    OVERHEAD
        + match reply {
            Reply::Simple(text) | Reply::Error(text) => text.len(),
            Reply::Integer(_) | Reply::Null | Reply::Boolean(_) | Reply::NullArray => 0,
            Reply::Bulk(data) | Reply::Double(data) | Reply::Verbatim(data) => data.len(),
            Reply::Array(items)
            | Reply::Set(items)
            | Reply::Push(items)
            | Reply::Several(items) => items.iter().map(reply_bytes).sum(),
            Reply::Map(pairs) | Reply::Pairs(pairs) | Reply::Keyed(pairs) => pairs
                .iter()
                .map(|(k, v)| reply_bytes(k) + reply_bytes(v))
                .sum(),
        }
}

fn put_count(out: &mut Vec<u8>, n: usize) {
    out.put_u32_le(u32::try_from(n).expect("EXEC replies are bounded far below 4G elements"));
}

fn put_value(out: &mut Vec<u8>, reply: &Reply) {
    match reply {
        Reply::Simple(text) => {
            out.put_u8(VALUE_SIMPLE);
            put_bytes(out, text.as_bytes());
        }
        Reply::Error(text) => {
            out.put_u8(VALUE_ERROR);
            put_bytes(out, text.as_bytes());
        }
        Reply::Integer(n) => {
            out.put_u8(VALUE_INTEGER);
            out.put_i64_le(*n);
        }
        Reply::Bulk(data) => {
            out.put_u8(VALUE_BULK);
            put_bytes(out, data);
        }
        Reply::Double(text) => {
            out.put_u8(VALUE_DOUBLE);
            put_bytes(out, text);
        }
        Reply::Verbatim(text) => {
            out.put_u8(VALUE_VERBATIM);
            put_bytes(out, text);
        }
        Reply::Null => out.put_u8(VALUE_NULL),
        Reply::NullArray => out.put_u8(VALUE_NULL_ARRAY),
        Reply::Boolean(b) => {
            out.put_u8(VALUE_BOOLEAN);
            out.put_u8(u8::from(*b));
        }
        // Pushes and several replies are the node's own answers (pub/sub), never a command's
        // applied reply; were one ever here, it would read back as the array it is in RESP2.
        Reply::Array(items) | Reply::Push(items) | Reply::Several(items) => {
            put_items(out, VALUE_ARRAY, items)
        }
        Reply::Set(items) => put_items(out, VALUE_SET, items),
        Reply::Map(pairs) => put_pairs(out, VALUE_MAP, pairs),
        Reply::Pairs(pairs) => put_pairs(out, VALUE_PAIRS, pairs),
        Reply::Keyed(pairs) => put_pairs(out, VALUE_KEYED, pairs),
    }
}

fn put_items(out: &mut Vec<u8>, tag: u8, items: &[Reply]) {
    out.put_u8(tag);
    put_count(out, items.len());
    for item in items {
        put_value(out, item);
    }
}

fn put_pairs(out: &mut Vec<u8>, tag: u8, pairs: &[(Reply, Reply)]) {
    out.put_u8(tag);
    put_count(out, pairs.len());
    for (first, second) in pairs {
        put_value(out, first);
        put_value(out, second);
    }
}

fn read_text(r: &mut Reader) -> Option<Cow<'static, str>> {
    let data = r.bytes()?;
    String::from_utf8(data.to_vec()).ok().map(Cow::Owned)
}

fn read_value(r: &mut Reader, depth: usize) -> Option<Reply> {
    if depth > VALUE_DEPTH_MAX {
        return None;
    }
    Some(match r.u8()? {
        VALUE_SIMPLE => Reply::Simple(read_text(r)?),
        VALUE_ERROR => Reply::Error(read_text(r)?),
        VALUE_INTEGER => Reply::Integer(r.i64()?),
        VALUE_BULK => Reply::Bulk(r.bytes()?),
        VALUE_DOUBLE => Reply::Double(r.bytes()?),
        VALUE_VERBATIM => Reply::Verbatim(r.bytes()?),
        VALUE_NULL => Reply::Null,
        VALUE_NULL_ARRAY => Reply::NullArray,
        VALUE_BOOLEAN => Reply::Boolean(r.u8()? != 0),
        VALUE_ARRAY => Reply::Array(read_items(r, depth)?),
        VALUE_SET => Reply::Set(read_items(r, depth)?),
        VALUE_MAP => Reply::Map(read_pairs(r, depth)?),
        VALUE_PAIRS => Reply::Pairs(read_pairs(r, depth)?),
        VALUE_KEYED => Reply::Keyed(read_pairs(r, depth)?),
        _ => return None,
    })
}

fn read_items(r: &mut Reader, depth: usize) -> Option<Vec<Reply>> {
    let n = r.count(1)?;
    (0..n).map(|_| read_value(r, depth + 1)).collect()
}

fn read_pairs(r: &mut Reader, depth: usize) -> Option<Vec<(Reply, Reply)>> {
    let n = r.count(2)?;
    (0..n)
        .map(|_| Some((read_value(r, depth + 1)?, read_value(r, depth + 1)?)))
        .collect()
}
