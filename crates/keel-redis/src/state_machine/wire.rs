//! Little-endian primitives shared by the log-command and snapshot encodings. The reader checks
//! every length against the bytes actually remaining before it slices, and slices (zero-copy)
//! rather than allocates.

use bytes::{BufMut, Bytes};

pub(crate) fn put_bytes(out: &mut Vec<u8>, data: &[u8]) {
    let len = u32::try_from(data.len()).expect("lengths are bounded far below 4 GiB");
    out.put_u32_le(len);
    out.put_slice(data);
}

/// A cursor over encoded bytes. Every accessor returns `None` when the input is too short.
pub(crate) struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    pub(crate) fn new(buf: Bytes) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    fn take(&mut self, len: usize) -> Option<&[u8]> {
        if self.remaining() < len {
            return None;
        }
        let slice = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Some(slice)
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    pub(crate) fn i64(&mut self) -> Option<i64> {
        self.u64().map(|n| n as i64)
    }

    /// A `u32` length followed by that many bytes, as a slice of the input.
    pub(crate) fn bytes(&mut self) -> Option<Bytes> {
        let len = self.u32()? as usize;
        if self.remaining() < len {
            return None;
        }
        let slice = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Some(slice)
    }

    /// A count of items each at least `item_bytes_min` long, rejected if the remaining input could
    /// not hold that many: so the count can size an allocation.
    pub(crate) fn count(&mut self, item_bytes_min: usize) -> Option<usize> {
        let count = self.u32()? as usize;
        (count.checked_mul(item_bytes_min)? <= self.remaining()).then_some(count)
    }
}
