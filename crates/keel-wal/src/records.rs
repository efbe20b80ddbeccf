//! The log's records as bytes, for a log storage of an embedder's (`keel_core::storage::Storage`
//! on another database): an entry, the hard state and a snapshot's metadata, each encoded as the
//! WAL encodes it inside its frames (the format is this crate's, version 2, documented in
//! `lib.rs`: "Entry encoding", "Hard state", "Membership"), so it changes only with the WAL's
//! format version. Decoding checks every length and refuses trailing bytes: a damaged record is
//! an error, never a panic or a wrong value.
//!
//! - an entry: term u64, payload kind u8 (0 no-op, 1 normal, 2 membership), payload length u32,
//!   payload; its index is not in it (a storage keys entries by index);
//! - the hard state: term u64, vote u64 (0: none), commit u64;
//! - a snapshot's metadata: last index u64, last term u64, the membership (three sets —
//!   voters, outgoing voters, learners — each a u32 count and that many u64 ids), the term
//!   history (a u32 count, then each term's first entry as term u64, index u64).

use keel_core::codec::Reader;
use keel_core::{Entry, HardState, Index, LogId, SnapshotMeta};

use crate::codec::{self, ReadWal};

/// Why a record did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt {what} record: {reason}")]
pub struct RecordError {
    /// Which record.
    pub what: &'static str,
    /// What was wrong with it.
    pub reason: String,
}

fn decode<T>(
    bytes: &[u8],
    what: &'static str,
    read: impl FnOnce(&mut Reader) -> Result<T, String>,
) -> Result<T, RecordError> {
    let mut reader = Reader::new(bytes::Bytes::copy_from_slice(bytes));
    let value = read(&mut reader).map_err(|reason| RecordError { what, reason })?;
    match reader.remaining() {
        0 => Ok(value),
        n => Err(RecordError {
            what,
            reason: format!("{n} trailing bytes"),
        }),
    }
}

/// An entry's record (without its index).
pub fn encode_entry(entry: &Entry) -> Vec<u8> {
    let mut buf = Vec::with_capacity(codec::entry_size_bytes(entry));
    codec::put_entry(&mut buf, entry);
    buf
}

/// The entry at `index` from its record.
pub fn decode_entry(index: Index, bytes: &[u8]) -> Result<Entry, RecordError> {
    decode(bytes, "entry", |r| r.entry(index))
}

/// The hard state's record (24 bytes).
pub fn encode_hard_state(hard_state: &HardState) -> Vec<u8> {
    let mut buf = Vec::with_capacity(24);
    codec::put_hard_state(&mut buf, hard_state);
    buf
}

/// The hard state from its record.
pub fn decode_hard_state(bytes: &[u8]) -> Result<HardState, RecordError> {
    decode(bytes, "hard state", ReadWal::hard_state)
}

/// A snapshot's metadata as a record.
pub fn encode_snapshot_meta(meta: &SnapshotMeta) -> Vec<u8> {
    let mut buf = Vec::new();
    codec::put_u64(&mut buf, meta.last.index);
    codec::put_u64(&mut buf, meta.last.term);
    codec::put_membership(&mut buf, &meta.membership);
    codec::put_log_ids(&mut buf, &meta.term_history);
    buf
}

/// A snapshot's metadata from its record.
pub fn decode_snapshot_meta(bytes: &[u8]) -> Result<SnapshotMeta, RecordError> {
    decode(bytes, "snapshot metadata", |r| {
        let index = r.u64("snapshot index")?;
        let term = r.u64("snapshot term")?;
        let membership = r.membership()?;
        let term_history = r.log_ids()?;
        Ok(SnapshotMeta {
            last: LogId::new(term, index),
            membership: std::sync::Arc::new(membership),
            term_history,
        })
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use keel_core::{EntryPayload, Membership};

    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_refused() {
        for payload in [
            EntryPayload::Noop,
            EntryPayload::Normal(Bytes::from_static(b"data")),
            EntryPayload::Membership(Arc::new(Membership::new_voters([1, 2, 3]))),
        ] {
            let entry = Entry {
                term: 4,
                index: 9,
                payload,
            };
            let bytes = encode_entry(&entry);
            assert_eq!(decode_entry(9, &bytes), Ok(entry));
            for cut in 0..bytes.len() {
                assert!(decode_entry(9, &bytes[..cut]).is_err(), "cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(decode_entry(9, &longer).is_err(), "trailing bytes");
        }
        let hs = HardState {
            term: 7,
            vote: Some(2),
            commit: 40,
        };
        assert_eq!(decode_hard_state(&encode_hard_state(&hs)), Ok(hs));
        assert!(decode_hard_state(&encode_hard_state(&hs)[..23]).is_err());
        let meta = SnapshotMeta {
            last: LogId::new(3, 100),
            membership: Arc::new(Membership {
                learners: [9].into(),
                ..Membership::new_voters([1, 2, 3])
            }),
            term_history: vec![LogId::new(1, 1), LogId::new(3, 50)],
        };
        let bytes = encode_snapshot_meta(&meta);
        assert_eq!(decode_snapshot_meta(&bytes), Ok(meta));
        for cut in 0..bytes.len() {
            assert!(decode_snapshot_meta(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
