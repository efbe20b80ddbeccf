//! The frames of the snapshot channel (layout in the module documentation of `wire`, section
//! "Snapshot channel"). Pure encoding and decoding; the protocol that uses them lives in the
//! crate's top-level `snapshot.rs`.

use super::frame::put_frame;
use super::{Reader, WireError};

/// Version of the snapshot channel's frames, carried in every offer. Version 1 was the
/// one-frame transfer (body kind 3), no longer spoken; version 3 added the offer's group.
pub const SNAPSHOT_CHANNEL_VERSION: u16 = 3;
/// Bound on the control frames of the snapshot channel (offer, position, chunk header, ack):
/// each is under 64 bytes, so anything larger is garbage and refused before allocating.
pub const SNAPSHOT_CONTROL_FRAME_BYTES_MAX: u32 = 256;
/// Upper bound on any chunk's length, whatever a node is configured with.
pub const SNAPSHOT_CHUNK_BYTES_LIMIT: u32 = 64 << 20;

pub const BODY_SNAPSHOT_OFFER: u8 = 4;
pub const BODY_SNAPSHOT_POSITION: u8 = 5;
pub const BODY_SNAPSHOT_CHUNK: u8 = 6;
pub const BODY_SNAPSHOT_ACK: u8 = 7;

const CHUNK_FLAG_FINAL: u8 = 1;

// The frames are the engine's decision types; this module only lays them out in bytes.
pub use keel_engine::transfer::{
    AckStatus, ChunkHeader, PositionStatus, SnapshotAck, SnapshotId, SnapshotOffer,
    SnapshotPosition,
};

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `o` as an offer frame (body kind 4) to `out`.
pub fn encode_offer(o: &SnapshotOffer, out: &mut Vec<u8>) {
    put_frame(out, |b| {
        b.push(BODY_SNAPSHOT_OFFER);
        b.extend_from_slice(&o.version.to_le_bytes());
        put_u64(b, o.group);
        put_u64(b, o.id.leader_term);
        put_u64(b, o.id.index);
        put_u64(b, o.id.term);
        put_u64(b, o.total_len_bytes);
    });
}

/// Appends `p` as a position frame (body kind 5) to `out`.
pub fn encode_position(p: &SnapshotPosition, out: &mut Vec<u8>) {
    put_frame(out, |b| {
        b.push(BODY_SNAPSHOT_POSITION);
        put_u64(b, p.index);
        put_u64(b, p.term);
        b.push(p.status as u8);
        put_u64(b, p.offset);
    });
}

/// The chunk header frame only; the caller writes the data bytes after it.
pub fn encode_chunk_header(h: &ChunkHeader, out: &mut Vec<u8>) {
    put_frame(out, |b| {
        b.push(BODY_SNAPSHOT_CHUNK);
        put_u64(b, h.id.leader_term);
        put_u64(b, h.id.index);
        put_u64(b, h.id.term);
        put_u64(b, h.offset);
        b.extend_from_slice(&h.len_bytes.to_le_bytes());
        b.extend_from_slice(&h.crc.to_le_bytes());
        match h.last {
            None => b.push(0),
            Some((total, crc)) => {
                b.push(CHUNK_FLAG_FINAL);
                put_u64(b, total);
                b.extend_from_slice(&crc.to_le_bytes());
            }
        }
    });
}

/// Appends `a` as an ack frame (body kind 7) to `out`.
pub fn encode_ack(a: &SnapshotAck, out: &mut Vec<u8>) {
    put_frame(out, |b| {
        b.push(BODY_SNAPSHOT_ACK);
        put_u64(b, a.index);
        put_u64(b, a.term);
        b.push(a.status as u8);
        put_u64(b, a.received);
        put_u64(b, a.durable);
    });
}

fn get_id(r: &mut Reader) -> Result<SnapshotId, WireError> {
    Ok(SnapshotId {
        leader_term: r.u64("leader term")?,
        index: r.u64("snapshot index")?,
        term: r.u64("snapshot term")?,
    })
}

pub(super) fn decode_offer(r: &mut Reader) -> Result<SnapshotOffer, WireError> {
    // The version first: a later version may lay out the rest differently.
    let version = r.u16("snapshot channel version")?;
    if version != SNAPSHOT_CHANNEL_VERSION {
        return Err(WireError::UnsupportedVersion {
            got: version,
            supported: SNAPSHOT_CHANNEL_VERSION,
        });
    }
    Ok(SnapshotOffer {
        version,
        group: r.u64("group")?,
        id: get_id(r)?,
        total_len_bytes: r.u64("total length")?,
    })
}

pub(super) fn decode_position(r: &mut Reader) -> Result<SnapshotPosition, WireError> {
    let index = r.u64("snapshot index")?;
    let term = r.u64("snapshot term")?;
    let status = match r.u8("position status")? {
        0 => PositionStatus::Continue,
        1 => PositionStatus::RefusedStale,
        2 => PositionStatus::RefusedTooLarge,
        3 => PositionStatus::NotNeeded,
        tag => {
            return Err(WireError::UnknownTag {
                what: "position status",
                tag,
            })
        }
    };
    Ok(SnapshotPosition {
        index,
        term,
        status,
        offset: r.u64("offset")?,
    })
}

pub(super) fn decode_chunk_header(r: &mut Reader) -> Result<ChunkHeader, WireError> {
    let id = get_id(r)?;
    let offset = r.u64("chunk offset")?;
    let len_bytes = r.u32("chunk length")?;
    let crc = r.u32("chunk crc")?;
    let last = match r.u8("chunk flags")? {
        0 => None,
        CHUNK_FLAG_FINAL => Some((r.u64("total length")?, r.u32("whole crc")?)),
        _ => return Err(WireError::Invalid("unknown chunk flags")),
    };
    Ok(ChunkHeader {
        id,
        offset,
        len_bytes,
        crc,
        last,
    })
}

pub(super) fn decode_ack(r: &mut Reader) -> Result<SnapshotAck, WireError> {
    let index = r.u64("snapshot index")?;
    let term = r.u64("snapshot term")?;
    let status = match r.u8("ack status")? {
        0 => AckStatus::Accepted,
        1 => AckStatus::Resend,
        2 => AckStatus::Complete,
        3 => AckStatus::Failed,
        tag => {
            return Err(WireError::UnknownTag {
                what: "ack status",
                tag,
            })
        }
    };
    Ok(SnapshotAck {
        index,
        term,
        status,
        received: r.u64("received offset")?,
        durable: r.u64("durable offset")?,
    })
}
