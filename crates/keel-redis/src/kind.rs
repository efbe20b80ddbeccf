//! [`Kind`]: the type of a key's value. Below both the commands (TYPE, SCAN's TYPE option) and
//! the state machine (snapshots and the digest code it by its tag), so neither reaches into the
//! other for it.

/// The type of a key's value, as TYPE names it. The tag is its code in snapshots and in the
/// digest (`snapshot.rs`, `digest.rs`): part of the replicated format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    String,
    List,
    Hash,
    Set,
    ZSet,
    Stream,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::String,
        Kind::List,
        Kind::Hash,
        Kind::Set,
        Kind::ZSet,
        Kind::Stream,
    ];

    /// TYPE's answer, and what SCAN's TYPE option names.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::List => "list",
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::Stream => "stream",
        }
    }

    pub(crate) fn tag(self) -> u8 {
        match self {
            Kind::String => 0,
            Kind::List => 1,
            Kind::Hash => 2,
            Kind::Set => 3,
            Kind::ZSet => 4,
            Kind::Stream => 5,
        }
    }

    pub(crate) fn from_tag(tag: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.tag() == tag)
    }

    /// The kind TYPE or SCAN's TYPE option names (case-insensitive); None for any other name
    /// (Redis's other kinds, which keel does not hold).
    pub fn named(name: &[u8]) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|kind| kind.name().as_bytes().eq_ignore_ascii_case(name))
    }
}
