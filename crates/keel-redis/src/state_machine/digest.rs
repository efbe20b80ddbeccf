//! The incremental `state_digest`.
//!
//! `state_digest = XOR over every (key, value) pair of pair_hash(key, value)`, where `pair_hash`
//! is SipHash-2-4 with a fixed key over `len(key) as u64 LE || key || value` (the length prefix
//! keeps `("ab", "c")` and `("a", "bc")` apart).
//!
//! Why XOR of hashes: XOR is commutative and associative and every pair is its own inverse, so the
//! digest depends only on the *set* of pairs, not on the order they were written in, and a change
//! costs O(1) hash work: XOR out the old pair's hash, XOR in the new one. Two replicas that applied
//! the same log hold the same map and so the same digest, whatever their apply batching or
//! snapshot history; the empty map has digest 0.
//!
//! What it cannot detect: XOR is linear, so any set of differences whose hashes XOR to zero
//! cancels. For accidental divergence (a lost write, a flipped bit, a replica that applied an entry
//! twice) that happens with probability about 2^-64. But the hash key is public (it must be the
//! same on every node), so it is not a defence against someone who *chooses* keys and values to
//! collide; and it covers only the key-value pairs, not the request-id deduplication table (a
//! snapshot's checksum covers that on the way to disk and over the wire).
//!
//! A key's deadline (expiry) is replicated state too: every key with one adds
//! `expiry_hash(key, deadline)` (below) to the XOR, so the digest depends on the set of (key,
//! value, deadline) triples. Versions and tombstones (what WATCH compares, `key_metadata.rs`) are
//! not in the digest: they are functions of the log indexes at which keys changed, checked by the
//! snapshot round trips and the transaction tests instead.
//!
//! The state machine's log time (`log_time_ms`, see `mod.rs`) is replicated state too, so the
//! digest covers it: `state_digest = pairs' XOR ^ log_time_hash(log_time_ms)`, where
//! `log_time_hash(0) = 0` (no time: the digest of a state built from unstamped entries is what it
//! was before stamps existed) and otherwise SipHash-2-4 under a key of its own (`TIME_KEY`) over
//! the 8 bytes of the time, little-endian. A key of its own keeps it apart from every pair hash.
//! It is folded in when the digest is read (one hash of 8 bytes), not kept in the pairs' XOR, so
//! a snapshot's stored digest stays the pairs' alone and is recomputed from them on restore.
//!
//! SipHash-2-4 is written out here rather than taken from `std`: the standard library's hasher is
//! documented as unstable across releases, and a digest that changed with the compiler would make
//! two nodes built by different toolchains disagree. A test checks it against `std`'s (deprecated,
//! but SipHash-2-4) `SipHasher` today.

/// The fixed SipHash key: the bytes of `"keel-kv digest 1"`. Changing it changes every digest, so
/// it is part of the replicated format.
const DIGEST_KEY: [u8; 16] = *b"keel-kv digest 1";

/// The SipHash key of [`log_time_hash`]: the bytes of `"keel-kv logtime1"`. Part of the
/// replicated format, as `DIGEST_KEY`.
const TIME_KEY: [u8; 16] = *b"keel-kv logtime1";

/// The SipHash key of [`expiry_hash`]: the bytes of `"keel-kv expiry 1"`. Part of the replicated
/// format, as `DIGEST_KEY`.
const EXPIRY_KEY: [u8; 16] = *b"keel-kv expiry 1";

/// A key's deadline's share of the digest: 0 for none (0), else SipHash-2-4 under `EXPIRY_KEY`
/// over `len(key) as u64 LE || key || deadline_ms as u64 LE`. Kept beside the pair hash (not
/// folded into it) so that changing a deadline does not rehash the value.
pub(crate) fn expiry_hash(key: &[u8], deadline_ms: u64) -> u64 {
    if deadline_ms == 0 {
        return 0;
    }
    let k0 = u64::from_le_bytes(EXPIRY_KEY[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(EXPIRY_KEY[8..].try_into().expect("8 bytes"));
    let mut hasher = SipHasher24::new_with_keys(k0, k1);
    hasher.write(&(key.len() as u64).to_le_bytes());
    hasher.write(key);
    hasher.write(&deadline_ms.to_le_bytes());
    hasher.finish()
}

/// The log time's share of the digest: 0 for no time (0), else its SipHash under `TIME_KEY`.
pub(crate) fn log_time_hash(log_time_ms: u64) -> u64 {
    if log_time_ms == 0 {
        return 0;
    }
    let k0 = u64::from_le_bytes(TIME_KEY[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(TIME_KEY[8..].try_into().expect("8 bytes"));
    let mut hasher = SipHasher24::new_with_keys(k0, k1);
    hasher.write(&log_time_ms.to_le_bytes());
    hasher.finish()
}

/// The hash of one stored pair; the digest is the XOR of these.
pub(crate) fn pair_hash(key: &[u8], value: &[u8]) -> u64 {
    let k0 = u64::from_le_bytes(DIGEST_KEY[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(DIGEST_KEY[8..].try_into().expect("8 bytes"));
    let mut hasher = SipHasher24::new_with_keys(k0, k1);
    hasher.write(&(key.len() as u64).to_le_bytes());
    hasher.write(key);
    hasher.write(value);
    hasher.finish()
}

/// The SipHash key of [`collection_pair_hash`]: the bytes of `"keel-kv collect1"`. Part of the
/// replicated format, as `DIGEST_KEY`.
const COLLECTION_KEY: [u8; 16] = *b"keel-kv collect1";

/// The SipHash key of [`element_hash`]: the bytes of `"keel-kv element1"`. Part of the
/// replicated format, as `DIGEST_KEY`.
const ELEMENT_KEY: [u8; 16] = *b"keel-kv element1";

fn keyed(key: &[u8; 16]) -> SipHasher24 {
    let k0 = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(key[8..].try_into().expect("8 bytes"));
    SipHasher24::new_with_keys(k0, k1)
}

/// The share of the digest of a key holding a collection (a list, hash, set or sorted set):
/// SipHash-2-4
/// under `COLLECTION_KEY` over `len(key) as u64 LE || key || kind tag u8 || element count u64
/// LE || content hash u64 LE`, where the content hash is the collection's own
/// (`collections/`): kept up to date as elements come and go, so a change costs O(1) hash work
/// however large the collection. A string keeps [`pair_hash`], so the digest of a state of
/// strings alone is what it was before collections existed.
pub(crate) fn collection_pair_hash(key: &[u8], tag: u8, count: u64, content: u64) -> u64 {
    let mut hasher = keyed(&COLLECTION_KEY);
    hasher.write(&(key.len() as u64).to_le_bytes());
    hasher.write(key);
    hasher.write(&[tag]);
    hasher.write(&count.to_le_bytes());
    hasher.write(&content.to_le_bytes());
    hasher.finish()
}

/// One element's hash inside a collection's content hash: SipHash-2-4 under `ELEMENT_KEY` over
/// `role u8 || len(first) as u64 LE || first || second`: a list element or set member is
/// `(role, element, "")`, a hash field `(role, field, value)`, a sorted set's member `(role,
/// member, score's f64 bits LE)`. The role (1 list, 2 hash, 3 set, 5 sorted set) keeps the kinds'
/// elements apart; role 4 is SPOP's draw (`set_commands.rs`), never part of the digest.
pub(crate) fn element_hash(role: u8, first: &[u8], second: &[u8]) -> u64 {
    let mut hasher = keyed(&ELEMENT_KEY);
    hasher.write(&[role]);
    hasher.write(&(first.len() as u64).to_le_bytes());
    hasher.write(first);
    hasher.write(second);
    hasher.finish()
}

/// SipHash-2-4 (Aumasson and Bernstein), 64-bit output, streaming.
#[derive(Clone, Debug)]
pub(crate) struct SipHasher24 {
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
    pub(crate) fn new_with_keys(k0: u64, k1: u64) -> Self {
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

    pub(crate) fn write(&mut self, mut bytes: &[u8]) {
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

    pub(crate) fn finish(mut self) -> u64 {
        let last = ((self.total_len & 0xff) << 56) | self.tail;
        self.compress(last);
        self.v2 ^= 0xff;
        for _ in 0..4 {
            self.round();
        }
        self.v0 ^ self.v1 ^ self.v2 ^ self.v3
    }
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

    #[test]
    fn log_time_hash_is_zero_only_for_no_time_and_differs_from_pair_hashes() {
        assert_eq!(log_time_hash(0), 0);
        let t = 1_700_000_000_000u64;
        assert_ne!(log_time_hash(t), 0);
        assert_ne!(log_time_hash(t), log_time_hash(t + 1));
        // The same 8 bytes as a pair (empty key, the time as value) hash apart.
        assert_ne!(log_time_hash(t), pair_hash(b"", &t.to_le_bytes()));
    }

    #[test]
    fn pair_hash_separates_key_and_value() {
        assert_ne!(pair_hash(b"ab", b"c"), pair_hash(b"a", b"bc"));
        assert_ne!(pair_hash(b"k", b""), pair_hash(b"", b"k"));
    }
}
