//! SipHash-2-4 (Aumasson and Bernstein), 64-bit output, streaming: the hash under every digest
//! and content hash keel replicates.
//!
//! Written out here rather than taken from `std`: the standard library's hasher is documented as
//! unstable across releases, and a digest that changed with the compiler would make two nodes
//! built by different toolchains disagree. A test checks it against `std`'s (deprecated, but
//! SipHash-2-4) `SipHasher` today.

/// The hasher: feed it with [`SipHasher24::write`] in any split, read it with
/// [`SipHasher24::finish`].
#[derive(Clone, Debug)]
pub struct SipHasher24 {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
    /// Bytes not yet compressed (fewer than 8), little-endian in the low bits.
    tail: u64,
    tail_len: usize,
    total_len: u64,
}

impl SipHasher24 {
    pub fn new_with_keys(k0: u64, k1: u64) -> Self {
        SipHasher24 {
            v0: k0 ^ 0x736f_6d65_7073_6575,
            v1: k1 ^ 0x646f_7261_6e64_6f6d,
            v2: k0 ^ 0x6c79_6765_6e65_7261,
            v3: k1 ^ 0x7465_6462_7974_6573,
            tail: 0,
            tail_len: 0,
            total_len: 0,
        }
    }

    fn round(&mut self) {
        self.v0 = self.v0.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(13) ^ self.v0;
        self.v0 = self.v0.rotate_left(32);
        self.v2 = self.v2.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(16) ^ self.v2;
        self.v0 = self.v0.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(21) ^ self.v0;
        self.v2 = self.v2.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(17) ^ self.v2;
        self.v2 = self.v2.rotate_left(32);
    }

    fn compress(&mut self, block: u64) {
        self.v3 ^= block;
        self.round();
        self.round();
        self.v0 ^= block;
    }

    pub fn write(&mut self, mut bytes: &[u8]) {
        self.total_len = self.total_len.wrapping_add(bytes.len() as u64);
        // Top up a partial block first.
        while self.tail_len > 0 && !bytes.is_empty() {
            self.tail |= u64::from(bytes[0]) << (8 * self.tail_len);
            self.tail_len += 1;
            bytes = &bytes[1..];
            if self.tail_len == 8 {
                self.compress(self.tail);
                self.tail = 0;
                self.tail_len = 0;
            }
        }
        let mut blocks = bytes.chunks_exact(8);
        for block in &mut blocks {
            self.compress(u64::from_le_bytes(block.try_into().expect("8 bytes")));
        }
        for (i, &b) in blocks.remainder().iter().enumerate() {
            self.tail |= u64::from(b) << (8 * i);
        }
        self.tail_len = blocks.remainder().len();
    }

    pub fn finish(mut self) -> u64 {
        let last = ((self.total_len & 0xff) << 56) | self.tail;
        self.compress(last);
        self.v2 ^= 0xff;
        for _ in 0..4 {
            self.round();
        }
        self.v0 ^ self.v1 ^ self.v2 ^ self.v3
    }
}

/// A hasher under a 16-byte key (two little-endian u64 halves).
pub fn keyed(key: &[u8; 16]) -> SipHasher24 {
    let k0 = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(key[8..].try_into().expect("8 bytes"));
    SipHasher24::new_with_keys(k0, k1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference vectors of the SipHash paper: key 00..0f, messages 00..(n-1).
    #[test]
    fn matches_the_reference_vectors() {
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let message: Vec<u8> = (0u8..64).collect();
        let hash = |n: usize| {
            let mut h = SipHasher24::new_with_keys(k0, k1);
            h.write(&message[..n]);
            h.finish()
        };
        assert_eq!(hash(0), 0x726f_db47_dd0e_0e31);
        assert_eq!(hash(1), 0x74f8_39c5_93dc_67fd);
        assert_eq!(hash(15), 0xa129_ca61_49be_45e5);
    }

    #[test]
    #[allow(deprecated)]
    fn agrees_with_std_siphash_2_4_for_any_split() {
        use std::hash::Hasher;
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 7, 8, 9, 63, 64, 65, 300] {
            let mut reference = std::hash::SipHasher::new_with_keys(11, 22);
            reference.write(&data[..len]);
            for split in [0, 1, 3, 8, len / 2, len] {
                let split = split.min(len);
                let mut ours = SipHasher24::new_with_keys(11, 22);
                ours.write(&data[..split]);
                ours.write(&data[split..len]);
                assert_eq!(ours.finish(), reference.finish(), "len {len} split {split}");
            }
        }
    }
}
