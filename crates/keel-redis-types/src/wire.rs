//! Little-endian primitives shared by the log-command and snapshot encodings. Reading is
//! keel-core's `codec::Reader`, which checks every length against the bytes actually remaining
//! before it slices, and slices (zero-copy) rather than allocates.

use bytes::{BufMut, Bytes};
use keel_core::codec;

pub fn put_bytes(out: &mut Vec<u8>, data: &[u8]) {
    let len = u32::try_from(data.len()).expect("lengths are bounded far below 4 GiB");
    out.put_u32_le(len);
    out.put_slice(data);
}

/// keel-core's bounds-checked reader (`keel_core::codec`), with the conventions of these
/// encodings: a short read is `None` (the decoders report where it fell short, by position), a
/// signed integer is its two's-complement `u64`, and a byte string is a `u32` length and its
/// bytes.
pub struct Reader(codec::Reader);

impl Reader {
    pub fn new(buf: Bytes) -> Self {
        Reader(codec::Reader::new(buf))
    }

    pub fn remaining(&self) -> usize {
        self.0.remaining()
    }

    pub fn position(&self) -> usize {
        self.0.position()
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.0.u8("u8").ok()
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.0.u32("u32").ok()
    }

    pub fn u64(&mut self) -> Option<u64> {
        self.0.u64("u64").ok()
    }

    pub fn i64(&mut self) -> Option<i64> {
        self.u64().map(|n| n as i64)
    }

    /// A `u32` length followed by that many bytes, as a slice of the input.
    pub fn bytes(&mut self) -> Option<Bytes> {
        let len = self.0.u32("length").ok()? as usize;
        self.0.bytes(len, "bytes").ok()
    }

    /// A count of items each at least `item_bytes_min` long, rejected if the remaining input could
    /// not hold that many: so the count can size an allocation.
    pub fn count(&mut self, item_bytes_min: usize) -> Option<usize> {
        self.0.count(item_bytes_min, "count").ok()
    }
}
