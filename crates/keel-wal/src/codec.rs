//! Hand-written little-endian encodings of the core's types (docs/DESIGN.md section 7: no serde format
//! whose layout can drift). Every decoder checks a length against the bytes that remain *before*
//! allocating for it, so a corrupt count can never make recovery allocate gigabytes.

use std::collections::BTreeSet;

use keel_core::{Entry, EntryPayload, HardState, LogId, Membership, NodeId};

/// Encoded size of a [`HardState`]: term, vote, commit.
pub const HARD_STATE_SIZE_BYTES: usize = 24;
/// Encoded size of an entry without its payload: term (8), payload kind (1), payload length (4).
pub const ENTRY_HEADER_SIZE_BYTES: usize = 13;

const PAYLOAD_NOOP: u8 = 0;
const PAYLOAD_NORMAL: u8 = 1;
const PAYLOAD_MEMBERSHIP: u8 = 2;

/// Builds the membership payload. `.into()` fits both a plain `Membership` and an
/// `Arc<Membership>` in `EntryPayload::Membership`.
#[allow(clippy::useless_conversion)]
pub fn membership_payload(membership: Membership) -> EntryPayload {
    EntryPayload::Membership(membership.into())
}

pub fn put_u8(buf: &mut Vec<u8>, v: u8) {
    buf.push(v);
}

pub fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

pub fn get_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"))
}

pub fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

pub fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

pub fn put_hard_state(buf: &mut Vec<u8>, hs: &HardState) {
    assert_ne!(hs.vote, Some(0), "node id 0 is reserved for 'no vote'");
    put_u64(buf, hs.term);
    put_u64(buf, hs.vote.unwrap_or(0));
    put_u64(buf, hs.commit);
}

fn membership_size_bytes(m: &Membership) -> usize {
    12 + 8 * (m.voters.len() + m.outgoing.len() + m.learners.len())
}

pub fn put_membership(buf: &mut Vec<u8>, m: &Membership) {
    for set in [&m.voters, &m.outgoing, &m.learners] {
        put_u32(
            buf,
            u32::try_from(set.len()).expect("member count fits u32"),
        );
        for id in set {
            put_u64(buf, *id);
        }
    }
}

pub fn payload_size_bytes(payload: &EntryPayload) -> usize {
    match payload {
        EntryPayload::Noop => 0,
        EntryPayload::Normal(data) => data.len(),
        EntryPayload::Membership(m) => membership_size_bytes(m),
    }
}

/// Encoded size of one entry.
pub fn entry_size_bytes(entry: &Entry) -> usize {
    ENTRY_HEADER_SIZE_BYTES + payload_size_bytes(&entry.payload)
}

/// Encodes one entry; its index is implicit (the enclosing record carries the first index).
pub fn put_entry(buf: &mut Vec<u8>, entry: &Entry) {
    put_u64(buf, entry.term);
    let len = payload_size_bytes(&entry.payload);
    let kind = match &entry.payload {
        EntryPayload::Noop => PAYLOAD_NOOP,
        EntryPayload::Normal(_) => PAYLOAD_NORMAL,
        EntryPayload::Membership(_) => PAYLOAD_MEMBERSHIP,
    };
    put_u8(buf, kind);
    put_u32(
        buf,
        u32::try_from(len).expect("payload length checked by the writer"),
    );
    let before = buf.len();
    match &entry.payload {
        EntryPayload::Noop => {}
        EntryPayload::Normal(data) => buf.extend_from_slice(data),
        EntryPayload::Membership(m) => put_membership(buf, m),
    }
    debug_assert_eq!(buf.len() - before, len);
}

pub fn put_log_ids(buf: &mut Vec<u8>, ids: &[LogId]) {
    put_u32(
        buf,
        u32::try_from(ids.len()).expect("term history fits u32"),
    );
    for id in ids {
        put_u64(buf, id.term);
        put_u64(buf, id.index);
    }
}

/// Why a structure failed to decode. Turned into a typed corruption error by the caller, which
/// knows the file and offset.
pub type DecodeError = String;

pub use keel_core::codec::Reader;

/// The core's types as keel-wal encodes them, read off keel-core's [`Reader`] (which checks
/// every length; its short reads become this crate's messages).
pub trait ReadWal {
    fn hard_state(&mut self) -> Result<HardState, DecodeError>;
    fn membership(&mut self) -> Result<Membership, DecodeError>;
    fn entry(&mut self, index: u64) -> Result<Entry, DecodeError>;
    fn log_ids(&mut self) -> Result<Vec<LogId>, DecodeError>;
}

impl ReadWal for Reader {
    fn hard_state(&mut self) -> Result<HardState, DecodeError> {
        let term = self.u64("hard state term")?;
        let vote = self.u64("hard state vote")?;
        let commit = self.u64("hard state commit")?;
        Ok(HardState {
            term,
            vote: (vote != 0).then_some(vote),
            commit,
        })
    }

    fn membership(&mut self) -> Result<Membership, DecodeError> {
        let mut sets: [BTreeSet<NodeId>; 3] = Default::default();
        for set in &mut sets {
            let n = self.count(8, "member count")?;
            for _ in 0..n {
                set.insert(self.u64("member id")?);
            }
        }
        let [voters, outgoing, learners] = sets;
        Ok(Membership {
            voters,
            outgoing,
            learners,
        })
    }

    fn entry(&mut self, index: u64) -> Result<Entry, DecodeError> {
        let term = self.u64("entry term")?;
        let kind = self.u8("entry payload kind")?;
        let len = self.u32("entry payload length")? as usize;
        let payload = match kind {
            PAYLOAD_NOOP if len == 0 => EntryPayload::Noop,
            PAYLOAD_NORMAL => EntryPayload::Normal(self.bytes(len, "entry payload")?),
            PAYLOAD_MEMBERSHIP => {
                let body = self.bytes(len, "membership payload")?;
                let mut inner = Reader::new(body);
                let m = inner.membership()?;
                if inner.remaining() != 0 {
                    return Err("membership payload has trailing bytes".into());
                }
                membership_payload(m)
            }
            _ => return Err(format!("entry payload kind {kind} with length {len}")),
        };
        Ok(Entry {
            term,
            index,
            payload,
        })
    }

    fn log_ids(&mut self) -> Result<Vec<LogId>, DecodeError> {
        let n = self.count(16, "term history length")?;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let term = self.u64("term history term")?;
            let index = self.u64("term history index")?;
            ids.push(LogId::new(term, index));
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn entries_round_trip() {
        let entries = vec![
            Entry {
                term: 3,
                index: 7,
                payload: EntryPayload::Noop,
            },
            Entry {
                term: 3,
                index: 8,
                payload: EntryPayload::Normal(Bytes::from_static(b"abc")),
            },
            Entry {
                term: 4,
                index: 9,
                payload: membership_payload(Membership {
                    voters: [1, 2].into(),
                    outgoing: [3].into(),
                    learners: [9].into(),
                }),
            },
        ];
        let mut buf = Vec::new();
        for e in &entries {
            put_entry(&mut buf, e);
        }
        let total: usize = entries.iter().map(entry_size_bytes).sum();
        assert_eq!(buf.len(), total);
        let bytes = Bytes::from(buf);
        let mut r = Reader::new(bytes.clone());
        let back: Vec<Entry> = (7..10).map(|i| r.entry(i).unwrap()).collect();
        assert_eq!(back, entries);
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn huge_counts_are_rejected_before_allocating() {
        let mut buf = Vec::new();
        put_u32(&mut buf, u32::MAX);
        let bytes = Bytes::from(buf);
        assert!(Reader::new(bytes.clone()).membership().is_err());
        assert!(Reader::new(bytes.clone()).log_ids().is_err());
    }
}
