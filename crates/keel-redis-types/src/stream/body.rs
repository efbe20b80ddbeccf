//! A stream's body in a snapshot (kind 5; the count before it is the number of entries, which
//! may be 0):
//!
//! ```text
//! n x entry, IDs strictly ascending:
//!     ms u64, seq u64, ordinal u64 (`mod.rs`: the node `~` trims by),
//!     field count u32 (even, >= 2), then that many bytes (field, value, field, value, ...)
//! last ID (ms u64, seq u64)          at or above the greatest entry's
//! max deleted ID (ms u64, seq u64)
//! entries added u64                  at least n
//! group count u32, then per group, names strictly ascending:
//!     bytes name, last ID (ms u64, seq u64), entries read u64 (u64::MAX: unknown),
//!     consumer count u32, then per consumer, names strictly ascending:
//!         bytes name, seen u64, active u64
//!     pending count u32, then per pending entry, IDs strictly ascending:
//!         ms u64, seq u64, bytes consumer (one of the group's), delivery time u64, count u64
//! ```

use bytes::BufMut;

use super::{Entry, Group, Pending, Stream, StreamId};
use crate::wire::{put_bytes, Reader};
use crate::{read_element, BodyError, BYTES_FIELD_MIN};

fn put_id(out: &mut Vec<u8>, id: StreamId) {
    out.put_u64_le(id.ms);
    out.put_u64_le(id.seq);
}

fn put_count(out: &mut Vec<u8>, count: usize) {
    out.put_u32_le(u32::try_from(count).expect("a stream's parts fit the format"));
}

pub(super) fn encode(stream: &Stream, out: &mut Vec<u8>) {
    for (id, entry) in &stream.entries {
        put_id(out, *id);
        out.put_u64_le(entry.ordinal);
        put_count(out, entry.fields.len());
        for field in &entry.fields {
            put_bytes(out, field);
        }
    }
    put_id(out, stream.last_id);
    put_id(out, stream.max_deleted_id);
    out.put_u64_le(stream.entries_added);
    put_count(out, stream.groups.len());
    for (name, group) in &stream.groups {
        put_bytes(out, name);
        put_id(out, group.last_id);
        out.put_u64_le(group.entries_read.unwrap_or(u64::MAX));
        put_count(out, group.consumers().len());
        for (consumer, c) in group.consumers() {
            put_bytes(out, consumer);
            out.put_u64_le(c.seen_ms);
            out.put_u64_le(c.active_ms);
        }
        put_count(out, group.pel().len());
        for (id, pending) in group.pel() {
            put_id(out, *id);
            put_bytes(out, &pending.consumer);
            out.put_u64_le(pending.delivery_ms);
            out.put_u64_le(pending.delivery_count);
        }
    }
}

fn id(r: &mut Reader, part: &'static str) -> Result<StreamId, BodyError> {
    let ms = r.u64().ok_or(BodyError::Truncated(part))?;
    let seq = r.u64().ok_or(BodyError::Truncated(part))?;
    Ok(StreamId::new(ms, seq))
}

fn u64_of(r: &mut Reader, part: &'static str) -> Result<u64, BodyError> {
    r.u64().ok_or(BodyError::Truncated(part))
}

fn malformed(rule: &'static str) -> BodyError {
    BodyError::Malformed(rule)
}

pub(super) fn decode(r: &mut Reader, count: usize) -> Result<Stream, BodyError> {
    let mut stream = Stream::default();
    let mut previous: Option<StreamId> = None;
    for _ in 0..count {
        let entry_id = id(r, "a stream entry")?;
        let ordinal = u64_of(r, "a stream entry")?;
        if previous.is_some_and(|p| p >= entry_id) {
            return Err(malformed("stream entries not strictly ascending"));
        }
        let fields_len = r
            .count(BYTES_FIELD_MIN)
            .ok_or(BodyError::Truncated("a stream entry's fields"))?;
        if fields_len == 0 || fields_len % 2 != 0 {
            return Err(malformed("a stream entry without field-value pairs"));
        }
        let fields = (0..fields_len)
            .map(|_| read_element(r))
            .collect::<Result<Vec<_>, _>>()?;
        stream.insert_entry(entry_id, Entry { fields, ordinal });
        previous = Some(entry_id);
    }
    stream.last_id = id(r, "a stream's last ID")?;
    stream.max_deleted_id = id(r, "a stream's deleted ID")?;
    stream.entries_added = u64_of(r, "a stream's count of entries added")?;
    if stream.last_id < stream.top_id() || stream.entries_added < count as u64 {
        return Err(malformed("a stream's last ID or count below its entries"));
    }
    let groups = r
        .count(BYTES_FIELD_MIN + 36)
        .ok_or(BodyError::Truncated("a stream's groups"))?;
    for _ in 0..groups {
        let name = read_element(r)?;
        if stream
            .groups
            .keys()
            .next_back()
            .is_some_and(|last| *last >= name)
        {
            return Err(malformed("stream groups not strictly ascending"));
        }
        let group = decode_group(r)?;
        stream.groups_hash ^= group.total_hash(&name);
        stream.group_bytes += group.counted_bytes(&name);
        stream.groups.insert(name, group);
    }
    Ok(stream)
}

fn decode_group(r: &mut Reader) -> Result<Group, BodyError> {
    let last_id = id(r, "a group")?;
    let entries_read = u64_of(r, "a group")?;
    let mut group = Group::new(last_id, (entries_read != u64::MAX).then_some(entries_read));
    let consumers = r
        .count(BYTES_FIELD_MIN + 16)
        .ok_or(BodyError::Truncated("a group's consumers"))?;
    for _ in 0..consumers {
        let name = read_element(r)?;
        if group
            .consumers()
            .keys()
            .next_back()
            .is_some_and(|last| *last >= name)
        {
            return Err(malformed("consumers not strictly ascending"));
        }
        let seen = u64_of(r, "a consumer")?;
        let active = u64_of(r, "a consumer")?;
        group.restore_consumer(name, seen, active);
    }
    let pending = r
        .count(BYTES_FIELD_MIN + 32)
        .ok_or(BodyError::Truncated("a group's pending entries"))?;
    for _ in 0..pending {
        let pending_id = id(r, "a pending entry")?;
        let consumer = read_element(r)?;
        let delivery_ms = u64_of(r, "a pending entry")?;
        let delivery_count = u64_of(r, "a pending entry")?;
        if group
            .pel()
            .keys()
            .next_back()
            .is_some_and(|last| *last >= pending_id)
        {
            return Err(malformed("pending entries not strictly ascending"));
        }
        if group.consumer(&consumer).is_none() {
            return Err(malformed("a pending entry of no consumer"));
        }
        let entry = Pending {
            consumer,
            delivery_ms,
            delivery_count,
        };
        group.set_pending(pending_id, entry);
    }
    Ok(group)
}
