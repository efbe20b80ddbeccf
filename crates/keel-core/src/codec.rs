//! [`Reader`]: the one bounds-checked cursor that every decoder of keel's formats reads with:
//! keel-wal's records, segment frames and snapshot headers, keel-transport's peer frames, and
//! keel-redis's log commands, write results and snapshots. Each of those formats is documented
//! beside its own code; what they share is how bytes are taken off the input:
//!
//! - every read checks the bytes that remain before it slices, and a read that falls short
//!   leaves the cursor where it was and says what it was reading ([`Short`]);
//! - fixed-size fields are little-endian; payloads are zero-copy slices of the input (`Bytes`);
//! - a count of items is checked against what remains (at its items' smallest size) before a
//!   caller can size an allocation with it, so a corrupt or hostile count costs nothing.
//!
//! Each user turns a [`Short`] into its own error: keel-wal into its decode message (the
//! [`Short`]'s `Display`), keel-transport into `WireError::Truncated`, keel-redis into its
//! "truncated" answers.

use std::fmt;

use bytes::Bytes;

/// A cursor over `buf[pos..end]`.
#[derive(Clone, Debug)]
pub struct Reader {
    buf: Bytes,
    pos: usize,
    end: usize,
}

/// A read the input was too short for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Short {
    /// What was being read (a field's name).
    pub what: &'static str,
    /// How many bytes the read needed, and of what kind.
    pub wanted: Wanted,
    /// Bytes left when the read was tried.
    pub remaining: usize,
}

/// What a short read asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// A fixed-size field of this many bytes.
    Field(usize),
    /// A payload of this length (a length read from the input).
    Length(usize),
    /// This many items of at least `item_bytes_min` bytes each.
    Count {
        /// The count read from the input.
        count: usize,
        /// The smallest size of one item, in bytes, as the caller gave it.
        item_bytes_min: usize,
    },
}

impl Short {
    /// How many more bytes the read needed than remained (saturating for counts).
    pub fn needed_bytes(&self) -> usize {
        let wanted = match self.wanted {
            Wanted::Field(n) | Wanted::Length(n) => n,
            Wanted::Count {
                count,
                item_bytes_min,
            } => count.saturating_mul(item_bytes_min),
        };
        wanted.saturating_sub(self.remaining)
    }
}

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, remaining) = (self.what, self.remaining);
        match self.wanted {
            Wanted::Field(n) => write!(f, "{what}: needs {n} bytes, {remaining} remain"),
            Wanted::Length(n) => {
                write!(
                    f,
                    "{what}: length {n} exceeds the {remaining} bytes that remain"
                )
            }
            Wanted::Count { count, .. } => {
                write!(
                    f,
                    "{what}: count {count} cannot fit in the {remaining} bytes that remain"
                )
            }
        }
    }
}

impl std::error::Error for Short {}

/// For decoders whose errors are messages (keel-wal's).
impl From<Short> for String {
    fn from(short: Short) -> String {
        short.to_string()
    }
}

impl Reader {
    /// A reader over all of `buf`.
    #[inline]
    pub fn new(buf: Bytes) -> Reader {
        let end = buf.len();
        Reader { buf, pos: 0, end }
    }

    /// A reader over `buf[start..end]`. Panics if the range is not within `buf`: the caller
    /// computed it from lengths it already checked.
    pub fn range(buf: Bytes, start: usize, end: usize) -> Reader {
        assert!(
            start <= end && end <= buf.len(),
            "reader range out of bounds"
        );
        Reader {
            buf,
            pos: start,
            end,
        }
    }

    /// Bytes left between the cursor and the end of the reader's range.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.end - self.pos
    }

    /// The offset of the next byte within the buffer the reader was made over.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    #[inline]
    fn short(&self, what: &'static str, wanted: Wanted) -> Short {
        Short {
            what,
            wanted,
            remaining: self.remaining(),
        }
    }

    #[inline]
    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], Short> {
        if n > self.remaining() {
            return Err(self.short(what, Wanted::Field(n)));
        }
        let slice = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    /// The next `N` bytes, copied: a fixed-size field such as a magic number or a nonce.
    #[inline]
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Short> {
        Ok(self.take(N, what)?.try_into().expect("N bytes"))
    }

    /// The next byte.
    #[inline]
    pub fn u8(&mut self, what: &'static str) -> Result<u8, Short> {
        Ok(self.take(1, what)?[0])
    }

    /// The next 2 bytes, little-endian.
    #[inline]
    pub fn u16(&mut self, what: &'static str) -> Result<u16, Short> {
        self.array(what).map(u16::from_le_bytes)
    }

    /// The next 4 bytes, little-endian.
    #[inline]
    pub fn u32(&mut self, what: &'static str) -> Result<u32, Short> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// The next 8 bytes, little-endian.
    #[inline]
    pub fn u64(&mut self, what: &'static str) -> Result<u64, Short> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// The next `n` bytes, as a slice sharing the input's buffer.
    #[inline]
    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<Bytes, Short> {
        if n > self.remaining() {
            return Err(self.short(what, Wanted::Length(n)));
        }
        let out = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(out)
    }

    /// Steps over `n` bytes: [`Reader::bytes`] without the slice (same check, same error).
    #[inline]
    pub fn skip(&mut self, n: usize, what: &'static str) -> Result<(), Short> {
        if n > self.remaining() {
            return Err(self.short(what, Wanted::Length(n)));
        }
        self.pos += n;
        Ok(())
    }

    /// A `u32` count of items each at least `item_bytes_min` long, refused when what remains
    /// could not hold that many: so the count can size an allocation. The cursor moves past the
    /// count only when it is accepted.
    #[inline]
    pub fn count(&mut self, item_bytes_min: usize, what: &'static str) -> Result<usize, Short> {
        let start = self.pos;
        let count = self.u32(what)? as usize;
        if count.saturating_mul(item_bytes_min) > self.remaining() {
            let remaining = self.remaining();
            self.pos = start;
            return Err(Short {
                what,
                wanted: Wanted::Count {
                    count,
                    item_bytes_min,
                },
                remaining,
            });
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &[u8]) -> Reader {
        Reader::new(Bytes::copy_from_slice(bytes))
    }

    #[test]
    fn fields_are_little_endian_and_payloads_share_the_input() {
        let input = Bytes::from_static(&[7, 1, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, b'a', b'b']);
        let mut r = Reader::new(input.clone());
        assert_eq!(r.u8("a"), Ok(7));
        assert_eq!(r.u16("b"), Ok(1));
        assert_eq!(r.u32("c"), Ok(2));
        assert_eq!(r.u64("d"), Ok(3));
        let payload = r.bytes(2, "e").unwrap();
        assert_eq!(&payload[..], b"ab");
        assert_eq!(
            payload.as_ptr(),
            input[15..].as_ptr(),
            "a slice, not a copy"
        );
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.position(), 17);
    }

    #[test]
    fn a_short_read_names_its_field_and_leaves_the_cursor() {
        let mut r = reader(&[1, 2, 3]);
        let short = r.u32("frame length").unwrap_err();
        assert_eq!(short.what, "frame length");
        assert_eq!(short.wanted, Wanted::Field(4));
        assert_eq!(short.needed_bytes(), 1);
        assert_eq!(short.to_string(), "frame length: needs 4 bytes, 3 remain");
        assert_eq!(r.position(), 0);
        assert_eq!(r.bytes(4, "payload").unwrap_err().needed_bytes(), 1);
        assert_eq!(
            String::from(r.skip(9, "padding").unwrap_err()),
            "padding: length 9 exceeds the 3 bytes that remain"
        );
        assert_eq!(r.u8("first"), Ok(1));
    }

    #[test]
    fn a_count_is_refused_before_anything_is_sized_by_it() {
        // A count of 2^32 - 1 items of 8 bytes, with 4 bytes behind it.
        let mut r = reader(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let short = r.count(8, "members").unwrap_err();
        assert_eq!(
            short.wanted,
            Wanted::Count {
                count: u32::MAX as usize,
                item_bytes_min: 8
            }
        );
        assert_eq!(short.remaining, 4, "what remained after the count");
        assert_eq!(short.needed_bytes(), u32::MAX as usize * 8 - 4);
        assert_eq!(
            short.to_string(),
            "members: count 4294967295 cannot fit in the 4 bytes that remain"
        );
        assert_eq!(r.position(), 0, "the cursor stays before the refused count");
        let mut ok = reader(&[2, 0, 0, 0, 1, 2]);
        assert_eq!(ok.count(1, "items"), Ok(2));
        assert_eq!(ok.remaining(), 2);
    }

    #[test]
    fn a_range_reads_only_its_part() {
        let mut r = Reader::range(Bytes::from_static(&[9, 1, 2, 9]), 1, 3);
        assert_eq!(r.remaining(), 2);
        assert_eq!(r.u16("middle"), Ok(0x0201));
        assert!(r.u8("past the end").is_err());
    }

    #[test]
    #[should_panic(expected = "reader range out of bounds")]
    fn a_range_outside_the_buffer_is_a_bug() {
        Reader::range(Bytes::from_static(&[1, 2]), 1, 3);
    }
}
