//! A stream entry's ID (`ms-seq`, two 64-bit numbers ordered as a pair) and the ways commands
//! write one: exact, `ms` alone (its sequence filled in), `ms-*` (XADD picks the sequence), `-`
//! and `+` (the least and greatest IDs), `(` before an ID to exclude it from a range.

use std::fmt;

/// An entry's ID. Ordered by `ms`, then `seq`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    /// `0-0`: no ID (an empty stream's last ID, no deleted entry yet).
    pub const ZERO: StreamId = StreamId { ms: 0, seq: 0 };
    /// The greatest ID: `+`.
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The next ID, None past the greatest.
    pub fn next(self) -> Option<StreamId> {
        match self.seq.checked_add(1) {
            Some(seq) => Some(StreamId::new(self.ms, seq)),
            None => self.ms.checked_add(1).map(|ms| StreamId::new(ms, 0)),
        }
    }

    /// The previous ID, None before `0-0`.
    pub fn prev(self) -> Option<StreamId> {
        match self.seq.checked_sub(1) {
            Some(seq) => Some(StreamId::new(self.ms, seq)),
            None => self.ms.checked_sub(1).map(|ms| StreamId::new(ms, u64::MAX)),
        }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::ZERO
    }

    /// Big-endian `ms || seq`: what the content hash reads (16 bytes, ordered as the IDs).
    pub fn to_bytes(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.ms.to_be_bytes());
        out[8..].copy_from_slice(&self.seq.to_be_bytes());
        out
    }

    /// Parses `ms-seq` or `ms` (the sequence then `missing_seq`), and `-` / `+` when `special`
    /// (the range commands). None for anything else (Redis: "Invalid stream ID").
    pub fn parse(text: &[u8], missing_seq: u64, special: bool) -> Option<StreamId> {
        match text {
            b"-" if special => return Some(StreamId::ZERO),
            b"+" if special => return Some(StreamId::MAX),
            _ => {}
        }
        let (ms, seq) = match text.iter().position(|&b| b == b'-') {
            Some(dash) => (&text[..dash], Some(&text[dash + 1..])),
            None => (text, None),
        };
        let ms = number(ms)?;
        let seq = match seq {
            Some(seq) => number(seq)?,
            None => missing_seq,
        };
        Some(StreamId::new(ms, seq))
    }
}

/// An unsigned decimal as Redis's `string2ull` reads it: digits only, within `u64`.
fn number(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 20 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// The ID XADD was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewId {
    /// `*`: from the log's time and the last ID.
    Auto,
    /// `ms-*`: this ms, the sequence after the last ID's if the ms is the same, else 0.
    Ms(u64),
    /// `ms-seq` or `ms` (sequence 0).
    Exact(StreamId),
}

impl NewId {
    /// `*`, `ms-*`, `ms-seq` or `ms`; None for anything else.
    pub fn parse(text: &[u8]) -> Option<NewId> {
        if text == b"*" {
            return Some(NewId::Auto);
        }
        if let Some(ms) = text.strip_suffix(b"-*") {
            return number(ms).map(NewId::Ms);
        }
        StreamId::parse(text, 0, false).map(NewId::Exact)
    }
}

/// One end of a range (XRANGE, XPENDING, XAUTOCLAIM): an ID, `-`, `+`, or `(` and an ID to
/// exclude it. Resolved to an inclusive ID by [`RangeBound::start`] or [`RangeBound::end`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeBound {
    pub id: StreamId,
    pub exclusive: bool,
}

impl RangeBound {
    /// `missing_seq` is the sequence of an ID given as `ms` alone: 0 for a start, the greatest
    /// for an end. `(` takes no `-` or `+`.
    pub fn parse(text: &[u8], missing_seq: u64) -> Option<RangeBound> {
        match text.strip_prefix(b"(") {
            Some(rest) if !rest.is_empty() => Some(RangeBound {
                id: StreamId::parse(rest, missing_seq, false)?,
                exclusive: true,
            }),
            _ => Some(RangeBound {
                id: StreamId::parse(text, missing_seq, true)?,
                exclusive: false,
            }),
        }
    }

    /// The inclusive start this bound means; None when an exclusive start has no next ID.
    pub fn start(self) -> Option<StreamId> {
        if self.exclusive {
            self.id.next()
        } else {
            Some(self.id)
        }
    }

    /// The inclusive end this bound means; None when an exclusive end has no previous ID.
    pub fn end(self) -> Option<StreamId> {
        if self.exclusive {
            self.id.prev()
        } else {
            Some(self.id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_redis_takes() {
        assert_eq!(StreamId::parse(b"5-3", 0, false), Some(StreamId::new(5, 3)));
        assert_eq!(
            StreamId::parse(b"5", u64::MAX, false),
            Some(StreamId::new(5, u64::MAX))
        );
        assert_eq!(StreamId::parse(b"-", 0, true), Some(StreamId::ZERO));
        assert_eq!(StreamId::parse(b"+", 0, false), None);
        assert_eq!(StreamId::parse(b"5-", 0, false), None);
        assert_eq!(StreamId::parse(b"-5", 0, false), None);
        assert_eq!(StreamId::parse(b"18446744073709551616", 0, false), None);
        assert_eq!(NewId::parse(b"7-*"), Some(NewId::Ms(7)));
        assert_eq!(NewId::parse(b"*"), Some(NewId::Auto));
        assert_eq!(NewId::parse(b"*-1"), None);
        let bound = RangeBound::parse(b"(5-3", 0).unwrap();
        assert_eq!(bound.start(), Some(StreamId::new(5, 4)));
        assert_eq!(bound.end(), Some(StreamId::new(5, 2)));
        assert_eq!(RangeBound::parse(b"(+", 0), None);
        assert_eq!(RangeBound::parse(b"(", 0), None);
    }

    #[test]
    fn next_and_prev_carry_and_stop_at_the_ends() {
        assert_eq!(StreamId::new(1, u64::MAX).next(), Some(StreamId::new(2, 0)));
        assert_eq!(StreamId::MAX.next(), None);
        assert_eq!(StreamId::new(2, 0).prev(), Some(StreamId::new(1, u64::MAX)));
        assert_eq!(StreamId::ZERO.prev(), None);
        assert_eq!(StreamId::new(3, 4).to_string(), "3-4");
    }
}
