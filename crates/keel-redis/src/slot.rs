//! Hash slots, as Redis Cluster numbers them: the slot of a key is the CRC16 (XMODEM:
//! polynomial 0x1021, initial value 0, no reflection, no final XOR) of the key, or of its hash
//! tag when it has a non-empty one, modulo [`SLOTS`] (16,384).
//!
//! The hash tag: the bytes between the first `{` and the first `}` after it, when there is at
//! least one byte between them (`{user1000}.following` and `{user1000}.followers` share a slot;
//! `foo{}{bar}` hashes the whole key; `foo{{bar}}` hashes `{bar`).
//!
//! Each database keeps its keys grouped by slot (`state_machine/map.rs`), so that the keys of
//! one slot are counted and listed for what that slot holds: the step towards handing slots to
//! several Raft groups without changing the data model.

/// How many hash slots there are.
pub const SLOTS: usize = 16_384;

/// CRC16-XMODEM, a byte at a time.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC16-XMODEM of `data` (Redis's `crc16`).
pub fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &byte| {
        (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ byte)]
    })
}

/// What a key's slot is computed from: its hash tag if it has a non-empty one, else itself.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(length) = key[open + 1..].iter().position(|&b| b == b'}') {
            if length > 0 {
                return &key[open + 1..open + 1 + length];
            }
        }
    }
    key
}

/// The hash slot of `key` (Redis's `keyHashSlot`).
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) & (SLOTS as u16 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_cluster_s() {
        // The check value of CRC16-XMODEM, from the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"123456789"), 0x31C3);
        // `CLUSTER KEYSLOT` answers of Redis.
        assert_eq!(key_slot(b"foo"), 12_182);
        assert_eq!(key_slot(b"somekey"), 11_058);
        assert_eq!(key_slot(b""), 0);
        // Hash tags.
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"{unclosed"), b"{unclosed");
        assert!(key_slot(&[0xFF; 100]) < SLOTS as u16);
    }
}
