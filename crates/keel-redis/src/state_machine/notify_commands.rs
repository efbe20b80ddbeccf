//! Each write's keys and the events Redis fires for it (`notify.rs`).

use bytes::Bytes;

use super::{condition_held, pop_event, push_event, sets_deadline, store_event, Outcome, Watched};
use crate::command::blocking::{PopShape, PopSource};
use crate::command::{CollectionWrite, Expiry, HSetReply, StreamWrite, WriteCommand, ZSetWrite};
use crate::notify::{GENERIC, HASH, LIST, SET, STREAM, STRING, ZSET};
use crate::state_machine::KvStateMachine;
use keel_redis_types::stream::{Stream, StreamId};

/// The keys `command` may change, with their databases (repeats removed by the caller).
pub(super) fn keys_of(command: &WriteCommand, db: u32) -> Vec<(u32, Bytes)> {
    let here = |keys: &[&Bytes]| keys.iter().map(|k| (db, (*k).clone())).collect::<Vec<_>>();
    match command {
        WriteCommand::Set { key, .. }
        | WriteCommand::SetWith { key, .. }
        | WriteCommand::IncrBy { key, .. }
        | WriteCommand::Append { key, .. }
        | WriteCommand::Cas { key, .. }
        | WriteCommand::GetDel { key }
        | WriteCommand::GetEx { key, .. }
        | WriteCommand::Expire { key, .. }
        | WriteCommand::Persist { key }
        | WriteCommand::IncrByFloat { key, .. }
        | WriteCommand::SetRange { key, .. }
        | WriteCommand::SetBit { key, .. } => here(&[key]),
        WriteCommand::Del { keys } => keys.iter().map(|k| (db, k.clone())).collect(),
        WriteCommand::MSet { pairs } | WriteCommand::MSetNx { pairs } => {
            pairs.iter().map(|(k, _)| (db, k.clone())).collect()
        }
        WriteCommand::FlushAll | WriteCommand::FlushDb | WriteCommand::SwapDb { .. } => Vec::new(),
        WriteCommand::Move { key, db: to } => vec![(db, key.clone()), (*to, key.clone())],
        WriteCommand::Rename { key, new_key, .. } => here(&[key, new_key]),
        WriteCommand::Copy {
            source,
            destination,
            db: to,
            ..
        } => vec![
            (db, source.clone()),
            (to.unwrap_or(db), destination.clone()),
        ],
        WriteCommand::Collection(typed) => collection_keys(&typed.op)
            .into_iter()
            .map(|k| (db, k))
            .collect(),
    }
}

fn collection_keys(op: &CollectionWrite) -> Vec<Bytes> {
    use CollectionWrite as W;
    match op {
        W::Push { key, .. }
        | W::Pop { key, .. }
        | W::LSet { key, .. }
        | W::LRem { key, .. }
        | W::LTrim { key, .. }
        | W::LInsert { key, .. }
        | W::HSet { key, .. }
        | W::HDel { key, .. }
        | W::HIncrBy { key, .. }
        | W::HIncrByFloat { key, .. }
        | W::SAdd { key, .. }
        | W::SRem { key, .. }
        | W::SPop { key, .. } => vec![key.clone()],
        W::LMove {
            source,
            destination,
            ..
        }
        | W::SMove {
            source,
            destination,
            ..
        } => vec![source.clone(), destination.clone()],
        W::SStore { destination, .. } | W::SortStore { destination, .. } => {
            vec![destination.clone()]
        }
        W::ZSet(z) => vec![zset_key(z).clone()],
        W::Stream(s) => stream_keys(s),
        W::BlockingPop(pop) => {
            let mut keys = pop.keys.clone();
            if let PopShape::MoveTo { destination, .. } = &pop.shape {
                keys.push(destination.clone());
            }
            keys
        }
    }
}

fn zset_key(op: &ZSetWrite) -> &Bytes {
    match op {
        ZSetWrite::Add { key, .. }
        | ZSetWrite::Rem { key, .. }
        | ZSetWrite::IncrBy { key, .. }
        | ZSetWrite::Pop { key, .. }
        | ZSetWrite::RemRangeByScore { key, .. }
        | ZSetWrite::RemRangeByRank { key, .. } => key,
    }
}

fn stream_keys(op: &StreamWrite) -> Vec<Bytes> {
    match op {
        StreamWrite::Add { key, .. }
        | StreamWrite::Trim { key, .. }
        | StreamWrite::Del { key, .. }
        | StreamWrite::SetId { key, .. }
        | StreamWrite::GroupCreate { key, .. }
        | StreamWrite::GroupSetId { key, .. }
        | StreamWrite::GroupDestroy { key, .. }
        | StreamWrite::Consumer { key, .. }
        | StreamWrite::Ack { key, .. }
        | StreamWrite::Claim { key, .. }
        | StreamWrite::AutoClaim { key, .. } => vec![key.clone()],
        StreamWrite::ReadGroup(read) => read.streams.iter().map(|(k, _)| k.clone()).collect(),
    }
}

/// What a stream write's events depend on, read before it runs.
#[derive(Debug, Default)]
pub(super) struct StreamsBefore {
    /// For a write that may create or delete a consumer: each stream it names, with whether the
    /// consumer it names was there.
    consumers: Vec<(Bytes, bool)>,
    /// For XADD with MAXLEN or MINID: the stream's first entry (a trim moves it).
    first_id: Option<StreamId>,
}

pub(super) fn streams_before(sm: &KvStateMachine, command: &WriteCommand) -> StreamsBefore {
    let WriteCommand::Collection(typed) = command else {
        return StreamsBefore::default();
    };
    let CollectionWrite::Stream(op) = &typed.op else {
        return StreamsBefore::default();
    };
    let first_id = match op {
        StreamWrite::Add {
            key, trim: Some(_), ..
        } => first_id(sm, key),
        _ => None,
    };
    StreamsBefore {
        consumers: consumers_of(sm, op),
        first_id,
    }
}

fn first_id(sm: &KvStateMachine, key: &[u8]) -> Option<StreamId> {
    let stream = sm.collection::<Stream>(key).ok().flatten()?;
    Some(stream.first_id())
}

fn consumers_of(sm: &KvStateMachine, op: &StreamWrite) -> Vec<(Bytes, bool)> {
    let named = |key: &Bytes, group: &Bytes, consumer: &Bytes| {
        (key.clone(), has_consumer(sm, key, group, consumer))
    };
    match op {
        StreamWrite::Consumer {
            key,
            group,
            consumer,
            ..
        }
        | StreamWrite::Claim {
            key,
            group,
            consumer,
            ..
        }
        | StreamWrite::AutoClaim {
            key,
            group,
            consumer,
            ..
        } => vec![named(key, group, consumer)],
        StreamWrite::ReadGroup(read) => match &read.group {
            Some((group, consumer)) => read
                .streams
                .iter()
                .map(|(key, _)| named(key, group, consumer))
                .collect(),
            None => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Notes in `w` the events of `command`, which answered `outcome`; `before` is what
/// [`streams_before`] found before it ran.
pub(super) fn events(
    sm: &KvStateMachine,
    command: &WriteCommand,
    outcome: Outcome,
    before: &StreamsBefore,
    w: &mut Watched,
) {
    if outcome == Outcome::Error {
        return;
    }
    match command {
        WriteCommand::Collection(typed) => match &typed.op {
            CollectionWrite::Stream(op) => stream_events(sm, op, outcome, before, w),
            CollectionWrite::ZSet(op) => zset_events(op, outcome, w),
            op => collection_events(op, outcome, w),
        },
        _ => key_events(command, outcome, w),
    }
}

fn positive(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Int(n) if n > 0)
}

/// Whether a command that answers a value or null did something.
fn served(outcome: Outcome) -> bool {
    !matches!(outcome, Outcome::Nothing | Outcome::Error)
}

fn key_events(command: &WriteCommand, outcome: Outcome, w: &mut Watched) {
    match command {
        WriteCommand::Set { key, .. } if outcome == Outcome::Ok => w.push(STRING, "set", key),
        WriteCommand::SetWith {
            key,
            condition,
            expiry,
            get,
            ..
        } => {
            let existed = w.existed(key);
            let set = if *get {
                condition_held(*condition, existed)
            } else {
                outcome == Outcome::Ok
            };
            if set {
                w.push(STRING, "set", key);
                if !w.after_live(key) {
                    w.push(GENERIC, "del", key);
                } else if sets_deadline(*expiry) {
                    w.push(GENERIC, "expire", key);
                }
            }
        }
        WriteCommand::Del { keys } => {
            for key in keys {
                if w.removed(key) && !w.noted(key) {
                    w.push(GENERIC, "del", key);
                }
            }
        }
        WriteCommand::IncrBy { key, .. } => w.push(STRING, "incrby", key),
        WriteCommand::IncrByFloat { key, .. } => w.push(STRING, "incrbyfloat", key),
        WriteCommand::MSet { pairs } if outcome == Outcome::Ok => {
            pairs.iter().for_each(|(key, _)| w.push(STRING, "set", key));
        }
        WriteCommand::MSetNx { pairs } if outcome == Outcome::Int(1) => {
            pairs.iter().for_each(|(key, _)| w.push(STRING, "set", key));
        }
        WriteCommand::Append { key, .. } => w.push(STRING, "append", key),
        WriteCommand::Cas { key, .. } if outcome == Outcome::Int(1) => w.push(STRING, "set", key),
        WriteCommand::SetRange { key, value, .. } if !value.is_empty() => {
            w.push(STRING, "setrange", key);
        }
        WriteCommand::SetBit { key, .. } => w.push(STRING, "setbit", key),
        WriteCommand::GetDel { key } if w.removed(key) => w.push(GENERIC, "del", key),
        WriteCommand::GetEx { key, expiry } if served(outcome) => match expiry {
            _ if w.removed(key) => w.push(GENERIC, "del", key),
            Expiry::Clear if w.changed(key) => w.push(GENERIC, "persist", key),
            e if sets_deadline(*e) => w.push(GENERIC, "expire", key),
            _ => {}
        },
        WriteCommand::Expire { key, .. } if outcome == Outcome::Int(1) => {
            let event = if w.removed(key) { "del" } else { "expire" };
            w.push(GENERIC, event, key);
        }
        WriteCommand::Persist { key } if outcome == Outcome::Int(1) => {
            w.push(GENERIC, "persist", key);
        }
        _ => moved_events(command, outcome, w),
    }
}

/// RENAME, MOVE and COPY: events on both of their keys.
fn moved_events(command: &WriteCommand, outcome: Outcome, w: &mut Watched) {
    let done = matches!(outcome, Outcome::Ok | Outcome::Int(1));
    match command {
        WriteCommand::Rename { key, new_key, .. } if done && key != new_key => {
            w.push(GENERIC, "rename_from", key);
            w.push(GENERIC, "rename_to", new_key);
        }
        WriteCommand::Move { key, db } if done => {
            w.push(GENERIC, "move_from", key);
            w.push_in(*db, GENERIC, "move_to", key);
        }
        WriteCommand::Copy {
            destination, db, ..
        } if done => {
            w.push_in(db.unwrap_or(w.db), GENERIC, "copy_to", destination);
        }
        _ => {}
    }
}

fn list_events(op: &CollectionWrite, outcome: Outcome, w: &mut Watched) {
    use CollectionWrite as W;
    match op {
        W::Push { key, end, .. } if positive(outcome) => w.push(LIST, push_event(*end), key),
        W::Pop { key, end, .. } if served(outcome) => w.push_then_del(LIST, pop_event(*end), key),
        W::LSet { key, .. } if outcome == Outcome::Ok => w.push(LIST, "lset", key),
        W::LRem { key, .. } if positive(outcome) => w.push_then_del(LIST, "lrem", key),
        W::LTrim { key, .. } if outcome == Outcome::Ok && w.existed(key) => {
            w.push_then_del(LIST, "ltrim", key);
        }
        W::LInsert { key, .. } if positive(outcome) => w.push(LIST, "linsert", key),
        W::LMove {
            source,
            destination,
            from,
            to,
        } if served(outcome) => {
            w.push(LIST, push_event(*to), destination);
            w.push_then_del(LIST, pop_event(*from), source);
        }
        W::SortStore { destination, .. } => {
            stored(w, positive(outcome), LIST, "sortstore", destination);
        }
        _ => {}
    }
}

fn collection_events(op: &CollectionWrite, outcome: Outcome, w: &mut Watched) {
    use CollectionWrite as W;
    match op {
        W::Push { .. }
        | W::Pop { .. }
        | W::LSet { .. }
        | W::LRem { .. }
        | W::LTrim { .. }
        | W::LInsert { .. }
        | W::LMove { .. }
        | W::SortStore { .. } => list_events(op, outcome, w),
        W::HSet { key, reply, .. } if *reply != HSetReply::IfNew || outcome == Outcome::Int(1) => {
            w.push(HASH, "hset", key);
        }
        W::HDel { key, .. } if positive(outcome) => w.push_then_del(HASH, "hdel", key),
        W::HIncrBy { key, .. } => w.push(HASH, "hincrby", key),
        W::HIncrByFloat { key, .. } => w.push(HASH, "hincrbyfloat", key),
        W::SAdd { key, .. } if positive(outcome) => w.push(SET, "sadd", key),
        W::SRem { key, .. } if positive(outcome) => w.push_then_del(SET, "srem", key),
        W::SMove {
            source,
            destination,
            ..
        } if outcome == Outcome::Int(1) => {
            w.push_then_del(SET, "srem", source);
            if w.changed(destination) {
                w.push(SET, "sadd", destination);
            }
        }
        W::SStore {
            algebra,
            destination,
            ..
        } => stored(
            w,
            positive(outcome),
            SET,
            store_event(*algebra),
            destination,
        ),
        W::SPop { key, .. } if served(outcome) => w.push_then_del(SET, "spop", key),
        W::BlockingPop(pop) if served(outcome) => {
            let Some(key) = pop.keys.iter().find(|k| w.changed(k)).cloned() else {
                return;
            };
            let (class, event) = match pop.source {
                PopSource::List(end) => (LIST, pop_event(end)),
                PopSource::ZSet { max: false } => (ZSET, "zpopmin"),
                PopSource::ZSet { max: true } => (ZSET, "zpopmax"),
                // A blocked XREADGROUP's attempts fire no event yet (Redis fires
                // `xgroup-createconsumer` when the call makes its consumer).
                PopSource::Streams => return,
            };
            if let PopShape::MoveTo { destination, end } = &pop.shape {
                w.push(LIST, push_event(*end), destination);
            }
            w.push_then_del(class, event, &key);
        }
        _ => {}
    }
}

/// A *STORE command's destination: its event when the result is not empty, else `del` if it
/// removed what was there.
fn stored(w: &mut Watched, filled: bool, class: u16, event: &'static str, key: &Bytes) {
    if filled {
        w.push(class, event, key);
    } else {
        w.del_if_removed(key);
    }
}

fn zset_events(op: &ZSetWrite, outcome: Outcome, w: &mut Watched) {
    match op {
        ZSetWrite::Add { key, incr, .. } if w.changed(key) => {
            w.push(ZSET, if *incr { "zincr" } else { "zadd" }, key);
        }
        ZSetWrite::IncrBy { key, .. } => w.push(ZSET, "zincr", key),
        ZSetWrite::Rem { key, .. } if positive(outcome) => w.push_then_del(ZSET, "zrem", key),
        ZSetWrite::Pop { key, max, .. } if served(outcome) => {
            w.push_then_del(ZSET, if *max { "zpopmax" } else { "zpopmin" }, key);
        }
        ZSetWrite::RemRangeByScore { key, .. } if positive(outcome) => {
            w.push_then_del(ZSET, "zrembyscore", key);
        }
        ZSetWrite::RemRangeByRank { key, .. } if positive(outcome) => {
            w.push_then_del(ZSET, "zrembyrank", key);
        }
        _ => {}
    }
}

fn stream_events(
    sm: &KvStateMachine,
    op: &StreamWrite,
    outcome: Outcome,
    before: &StreamsBefore,
    w: &mut Watched,
) {
    let ok = outcome == Outcome::Ok;
    let consumers = before.consumers.as_slice();
    match op {
        StreamWrite::Add { key, trim, .. } if served(outcome) => {
            w.push(STREAM, "xadd", key);
            // Trimmed from the front: its first entry moved (Redis fires xtrim after xadd).
            if trim.is_some()
                && before
                    .first_id
                    .is_some_and(|f| first_id(sm, key) != Some(f))
            {
                w.push(STREAM, "xtrim", key);
            }
        }
        StreamWrite::Trim { key, .. } if positive(outcome) => w.push(STREAM, "xtrim", key),
        StreamWrite::Del { key, .. } if positive(outcome) => w.push(STREAM, "xdel", key),
        StreamWrite::SetId { key, .. } if ok => w.push(STREAM, "xsetid", key),
        StreamWrite::GroupCreate { key, .. } if ok => w.push(STREAM, "xgroup-create", key),
        StreamWrite::GroupSetId { key, .. } if ok => w.push(STREAM, "xgroup-setid", key),
        StreamWrite::GroupDestroy { key, .. } if outcome == Outcome::Int(1) => {
            w.push(STREAM, "xgroup-destroy", key);
        }
        StreamWrite::Consumer {
            key, create: false, ..
        } => {
            if consumers.first().is_some_and(|(_, was)| *was) {
                w.push(STREAM, "xgroup-delconsumer", key);
            }
        }
        StreamWrite::Ack { .. } => {}
        _ => created_consumers(sm, op, consumers, w),
    }
}

/// `xgroup-createconsumer` on each stream whose group gained the consumer the write names
/// (XGROUP CREATECONSUMER, XREADGROUP, XCLAIM, XAUTOCLAIM).
fn created_consumers(
    sm: &KvStateMachine,
    op: &StreamWrite,
    consumers: &[(Bytes, bool)],
    w: &mut Watched,
) {
    let (group, consumer) = match op {
        StreamWrite::Consumer {
            group, consumer, ..
        }
        | StreamWrite::Claim {
            group, consumer, ..
        }
        | StreamWrite::AutoClaim {
            group, consumer, ..
        } => (group, consumer),
        StreamWrite::ReadGroup(read) => match &read.group {
            Some((group, consumer)) => (group, consumer),
            None => return,
        },
        _ => return,
    };
    for (key, was) in consumers {
        if !was && has_consumer(sm, key, group, consumer) {
            w.push(STREAM, "xgroup-createconsumer", key);
        }
    }
}

fn has_consumer(sm: &KvStateMachine, key: &[u8], group: &[u8], consumer: &[u8]) -> bool {
    sm.collection::<Stream>(key)
        .ok()
        .flatten()
        .and_then(|s| s.group(group))
        .is_some_and(|g| g.consumer(consumer).is_some())
}
