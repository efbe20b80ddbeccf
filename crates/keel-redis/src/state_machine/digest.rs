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
//! Databases: the XOR above is kept per database, and the state digest is the XOR of each
//! database's share (`db_digest_share`): database 0's XOR as it is, any other's hashed with its
//! index, so the same pair in two databases counts differently and a state in database 0 alone
//! has the digest it had before databases existed.
//!
//! The hash is SipHash-2-4 written out in `keel_redis_types::siphash` (why not `std`'s is said
//! there); a collection's content hash is its own, kept by its type (`keel_redis_types`).

use keel_redis_types::siphash::{keyed, SipHasher24};

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

/// The SipHash key of [`db_digest_share`]: the bytes of `"keel-kv db dig 1"`. Part of the
/// replicated format, as `DIGEST_KEY`.
const DB_KEY: [u8; 16] = *b"keel-kv db dig 1";

/// Database `db`'s share of the state digest, given the XOR of its pair and deadline hashes:
/// database 0's XOR as it is (so the digest of a state in database 0 alone is what it was
/// before databases existed), any other's SipHash-2-4 under `DB_KEY` over `db as u32 LE ||
/// digest as u64 LE`, and 0 for an empty database. The same pair in two databases thus counts
/// differently, and pairs moved between databases change the digest.
pub(crate) fn db_digest_share(db: u32, digest: u64) -> u64 {
    if db == 0 || digest == 0 {
        return digest;
    }
    let k0 = u64::from_le_bytes(DB_KEY[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(DB_KEY[8..].try_into().expect("8 bytes"));
    let mut hasher = SipHasher24::new_with_keys(k0, k1);
    hasher.write(&db.to_le_bytes());
    hasher.write(&digest.to_le_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

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
