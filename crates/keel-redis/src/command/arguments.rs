//! The arguments of the string and keyspace commands that are more than a key, a value or an
//! integer.

use bytes::Bytes;

/// An `f64` that compares by its bits, so that commands stay `Eq` (INCRBYFLOAT's increment).
#[derive(Clone, Copy, Debug)]
pub struct FloatBits(pub f64);

impl PartialEq for FloatBits {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for FloatBits {}

/// BITCOUNT's `start end [BYTE | BIT]`: inclusive, negative from the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitRange {
    pub start: i64,
    pub end: i64,
    pub unit: BitUnit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitUnit {
    Byte,
    Bit,
}

/// What LCS answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LcsForm {
    /// The subsequence itself.
    Text,
    /// LEN: its length.
    Length,
    /// IDX: the matching ranges (of at least `min_match_len` bytes) and the length.
    Ranges {
        min_match_len: u64,
        with_match_len: bool,
    },
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanArgs {
    /// Where the previous call stopped (0: from the start); see
    /// `state_machine/keyspace_commands.rs`.
    pub cursor: u64,
    /// None: every key (also for MATCH `*`).
    pub pattern: Option<Bytes>,
    /// How many keys a call returns at most (at least 1; more only when keys share a hash),
    /// bounded by `state_machine::SCAN_COUNT_MAX` when it runs.
    pub count: u32,
    /// TYPE's filter.
    pub types: TypeFilter,
}

/// SCAN's TYPE option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeFilter {
    /// No TYPE: every key.
    Any,
    /// The keys holding this kind of value.
    Only(crate::kind::Kind),
    /// TYPE names a type keel does not hold (any word but the kinds' names): no key.
    Nothing,
}
