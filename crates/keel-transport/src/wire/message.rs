//! Encoding of [`Message`] bodies, entries, memberships and snapshot metadata (layout in the
//! module documentation of `wire`).

use std::collections::BTreeSet;
use std::sync::Arc;

use keel_core::{
    AppendResult, Entry, EntryPayload, FollowerClock, LeaderClock, LogId, Membership, Message,
    MessageBody, NodeId, RepairAnswer, SnapshotMeta,
};

use super::{ReadWire, Reader, WireError};

/// term + index + payload kind + payload length.
const ENTRY_SIZE_BYTES_MIN: usize = 8 + 8 + 1 + 4;

const TAG_PRE_VOTE: u8 = 1;
const TAG_PRE_VOTE_RESPONSE: u8 = 2;
const TAG_REQUEST_VOTE: u8 = 3;
const TAG_VOTE_RESPONSE: u8 = 4;
const TAG_APPEND: u8 = 5;
const TAG_APPEND_RESPONSE: u8 = 6;
const TAG_HEARTBEAT: u8 = 7;
const TAG_HEARTBEAT_RESPONSE: u8 = 8;
const TAG_TIMEOUT_NOW: u8 = 9;
const TAG_INSTALL_SNAPSHOT: u8 = 10;
const TAG_REPAIR_REQUEST: u8 = 11;
const TAG_REPAIR_RESPONSE: u8 = 12;

const REPAIR_ENTRIES: u8 = 0;
const REPAIR_LACKS: u8 = 1;
const REPAIR_UNKNOWN: u8 = 2;
const REPAIR_COMMITTED: u8 = 3;
const REPAIR_HOLDS: u8 = 4;

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    put_u32(out, u32::try_from(n).expect("count under 2^32"));
}

fn put_log_id(out: &mut Vec<u8>, id: LogId) {
    put_u64(out, id.term);
    put_u64(out, id.index);
}

fn get_log_id(r: &mut Reader) -> Result<LogId, WireError> {
    let term = r.u64("log id term")?;
    let index = r.u64("log id index")?;
    Ok(LogId::new(term, index))
}

fn put_set(out: &mut Vec<u8>, set: &BTreeSet<NodeId>) {
    put_len(out, set.len());
    for id in set {
        put_u64(out, *id);
    }
}

fn get_set(r: &mut Reader) -> Result<BTreeSet<NodeId>, WireError> {
    let n = r.count(8, "membership set")?;
    (0..n).map(|_| Ok(r.u64("node id")?)).collect()
}

fn put_membership(out: &mut Vec<u8>, m: &Membership) {
    put_set(out, &m.voters);
    put_set(out, &m.outgoing);
    put_set(out, &m.learners);
}

fn get_membership(r: &mut Reader) -> Result<Membership, WireError> {
    Ok(Membership {
        voters: get_set(r)?,
        outgoing: get_set(r)?,
        learners: get_set(r)?,
    })
}

fn put_entry(out: &mut Vec<u8>, e: &Entry) {
    put_u64(out, e.term);
    put_u64(out, e.index);
    match &e.payload {
        EntryPayload::Noop => {
            out.push(0);
            put_u32(out, 0);
        }
        EntryPayload::Normal(data) => {
            out.push(1);
            put_len(out, data.len());
            out.extend_from_slice(data);
        }
        EntryPayload::Membership(m) => {
            out.push(2);
            let at = out.len();
            put_u32(out, 0);
            put_membership(out, m);
            let len = u32::try_from(out.len() - at - 4).expect("membership under 4 GiB");
            out[at..at + 4].copy_from_slice(&len.to_le_bytes());
        }
    }
}

fn get_entry(r: &mut Reader) -> Result<Entry, WireError> {
    let term = r.u64("entry term")?;
    let index = r.u64("entry index")?;
    let kind = r.u8("entry payload kind")?;
    let len = r.u32("entry payload length")? as usize;
    let payload = r.bytes(len, "entry payload")?;
    let payload = match kind {
        0 if len == 0 => EntryPayload::Noop,
        0 => return Err(WireError::Invalid("a noop entry carries no payload")),
        1 => EntryPayload::Normal(payload),
        2 => {
            let mut inner = Reader::new(payload);
            let m = get_membership(&mut inner)?;
            inner.finish()?;
            EntryPayload::Membership(Arc::new(m))
        }
        tag => {
            return Err(WireError::UnknownTag {
                what: "entry payload",
                tag,
            })
        }
    };
    Ok(Entry {
        term,
        index,
        payload,
    })
}

/// Writes a snapshot meta as the wire lays it out: last log id, membership, term history count u32,
/// then (term, first index) per term.
pub fn encode_meta(meta: &SnapshotMeta, out: &mut Vec<u8>) {
    put_log_id(out, meta.last);
    put_membership(out, &meta.membership);
    put_len(out, meta.term_history.len());
    for t in &meta.term_history {
        put_u64(out, t.term);
        put_u64(out, t.index);
    }
}

pub(super) fn decode_meta(r: &mut Reader) -> Result<SnapshotMeta, WireError> {
    let last = get_log_id(r)?;
    let membership = Arc::new(get_membership(r)?);
    let n = r.count(16, "term history")?;
    let term_history = (0..n).map(|_| get_log_id(r)).collect::<Result<_, _>>()?;
    Ok(SnapshotMeta {
        last,
        membership,
        term_history,
    })
}

/// Writes `from`, `to`, `term`, the tag and the fields (after the body kind byte).
#[expect(clippy::too_many_lines)]
pub fn encode_message_fields(msg: &Message, out: &mut Vec<u8>) {
    put_u64(out, msg.from);
    put_u64(out, msg.to);
    put_u64(out, msg.term);
    match &msg.body {
        MessageBody::PreVote { last_log_id } => {
            out.push(TAG_PRE_VOTE);
            put_log_id(out, *last_log_id);
        }
        MessageBody::PreVoteResponse { granted } => {
            out.push(TAG_PRE_VOTE_RESPONSE);
            out.push(u8::from(*granted));
        }
        MessageBody::RequestVote {
            last_log_id,
            transfer,
        } => {
            out.push(TAG_REQUEST_VOTE);
            put_log_id(out, *last_log_id);
            out.push(u8::from(*transfer));
        }
        MessageBody::VoteResponse { granted } => {
            out.push(TAG_VOTE_RESPONSE);
            out.push(u8::from(*granted));
        }
        MessageBody::Append {
            prev,
            entries,
            commit,
        } => {
            out.push(TAG_APPEND);
            put_log_id(out, *prev);
            put_u64(out, *commit);
            put_entries(out, entries);
        }
        MessageBody::AppendResponse(result) => {
            out.push(TAG_APPEND_RESPONSE);
            match *result {
                AppendResult::Success { match_index } => {
                    out.push(0);
                    put_u64(out, match_index);
                }
                AppendResult::Conflict {
                    rejected,
                    hint_term,
                    hint_index,
                } => {
                    out.push(1);
                    put_u64(out, rejected);
                    out.push(u8::from(hint_term.is_some()));
                    put_u64(out, hint_term.unwrap_or(0));
                    put_u64(out, hint_index);
                }
            }
        }
        MessageBody::Heartbeat {
            commit,
            read_round,
            clock,
        } => {
            out.push(TAG_HEARTBEAT);
            put_u64(out, *commit);
            put_u64(out, *read_round);
            put_u64(out, clock.sent_at_ms);
            out.push(u8::from(clock.your_offset_ms.is_some()));
            put_u64(out, clock.your_offset_ms.unwrap_or(0) as u64);
        }
        MessageBody::HeartbeatResponse {
            read_round,
            lagging,
            clock,
        } => {
            out.push(TAG_HEARTBEAT_RESPONSE);
            put_u64(out, *read_round);
            out.push(u8::from(*lagging));
            put_u64(out, clock.echo_sent_at_ms);
            put_u64(out, clock.answered_at_ms);
        }
        MessageBody::TimeoutNow => out.push(TAG_TIMEOUT_NOW),
        MessageBody::InstallSnapshot { meta } => {
            out.push(TAG_INSTALL_SNAPSHOT);
            encode_meta(meta, out);
        }
        MessageBody::RepairRequest {
            promised,
            last,
            terms,
            holds_last,
        } => {
            out.push(TAG_REPAIR_REQUEST);
            put_log_id(out, *promised);
            put_log_id(out, *last);
            put_len(out, terms.len());
            for start in terms {
                put_log_id(out, *start);
            }
            out.push(u8::from(*holds_last));
        }
        MessageBody::RepairResponse(answer) => {
            out.push(TAG_REPAIR_RESPONSE);
            match answer {
                RepairAnswer::Entries { prev, entries } => {
                    out.push(REPAIR_ENTRIES);
                    put_log_id(out, *prev);
                    put_entries(out, entries);
                }
                RepairAnswer::Lacks { after } => {
                    out.push(REPAIR_LACKS);
                    put_log_id(out, *after);
                }
                RepairAnswer::Unknown => out.push(REPAIR_UNKNOWN),
                RepairAnswer::Committed { through, config } => {
                    out.push(REPAIR_COMMITTED);
                    put_log_id(out, *through);
                    put_membership(out, config);
                }
                RepairAnswer::Holds {
                    after,
                    through,
                    config,
                } => {
                    out.push(REPAIR_HOLDS);
                    put_log_id(out, *after);
                    put_log_id(out, *through);
                    put_membership(out, config);
                }
            }
        }
    }
}

fn put_entries(out: &mut Vec<u8>, entries: &[Entry]) {
    put_len(out, entries.len());
    for e in entries {
        put_entry(out, e);
    }
}

fn get_entries(r: &mut Reader) -> Result<Vec<Entry>, WireError> {
    let n = r.count(ENTRY_SIZE_BYTES_MIN, "entries")?;
    (0..n).map(|_| get_entry(r)).collect()
}

/// Reads what [`encode_message_fields`] writes, from just after the body kind byte; every count
/// checked against the bytes left before anything is allocated. Bytes left after the message are
/// the caller's to refuse ([`decode_body`](super::decode_body) does).
#[expect(clippy::too_many_lines)]
pub fn decode_message_fields(r: &mut Reader) -> Result<Message, WireError> {
    let from = r.u64("from")?;
    let to = r.u64("to")?;
    let term = r.u64("term")?;
    if from == 0 || to == 0 {
        return Err(WireError::Invalid("node id 0 is reserved"));
    }
    let body = match r.u8("message tag")? {
        TAG_PRE_VOTE => MessageBody::PreVote {
            last_log_id: get_log_id(r)?,
        },
        TAG_PRE_VOTE_RESPONSE => MessageBody::PreVoteResponse {
            granted: r.bool("granted")?,
        },
        TAG_REQUEST_VOTE => MessageBody::RequestVote {
            last_log_id: get_log_id(r)?,
            transfer: r.bool("transfer")?,
        },
        TAG_VOTE_RESPONSE => MessageBody::VoteResponse {
            granted: r.bool("granted")?,
        },
        TAG_APPEND => {
            let prev = get_log_id(r)?;
            let commit = r.u64("commit")?;
            let entries = get_entries(r)?;
            MessageBody::Append {
                prev,
                entries,
                commit,
            }
        }
        TAG_APPEND_RESPONSE => MessageBody::AppendResponse(match r.u8("append result")? {
            0 => AppendResult::Success {
                match_index: r.u64("match index")?,
            },
            1 => {
                let rejected = r.u64("rejected")?;
                let present = r.bool("hint term present")?;
                let term = r.u64("hint term")?;
                if !present && term != 0 {
                    return Err(WireError::Invalid("absent hint term must be 0"));
                }
                AppendResult::Conflict {
                    rejected,
                    hint_term: present.then_some(term),
                    hint_index: r.u64("hint index")?,
                }
            }
            tag => {
                return Err(WireError::UnknownTag {
                    what: "append result",
                    tag,
                })
            }
        }),
        TAG_HEARTBEAT => MessageBody::Heartbeat {
            commit: r.u64("commit")?,
            read_round: r.u64("read round")?,
            clock: LeaderClock {
                sent_at_ms: r.u64("sent at")?,
                your_offset_ms: {
                    let present = r.bool("offset present")?;
                    let offset = r.u64("offset")? as i64;
                    present.then_some(offset)
                },
            },
        },
        TAG_HEARTBEAT_RESPONSE => MessageBody::HeartbeatResponse {
            read_round: r.u64("read round")?,
            lagging: r.bool("lagging")?,
            clock: FollowerClock {
                echo_sent_at_ms: r.u64("echoed sent at")?,
                answered_at_ms: r.u64("answered at")?,
            },
        },
        TAG_TIMEOUT_NOW => MessageBody::TimeoutNow,
        TAG_INSTALL_SNAPSHOT => MessageBody::InstallSnapshot {
            meta: decode_meta(r)?,
        },
        TAG_REPAIR_REQUEST => MessageBody::RepairRequest {
            promised: get_log_id(r)?,
            last: get_log_id(r)?,
            terms: {
                let n = r.count(16, "term starts")?;
                (0..n).map(|_| get_log_id(r)).collect::<Result<_, _>>()?
            },
            holds_last: r.bool("holds last")?,
        },
        TAG_REPAIR_RESPONSE => MessageBody::RepairResponse(match r.u8("repair answer")? {
            REPAIR_ENTRIES => RepairAnswer::Entries {
                prev: get_log_id(r)?,
                entries: get_entries(r)?,
            },
            REPAIR_LACKS => RepairAnswer::Lacks {
                after: get_log_id(r)?,
            },
            REPAIR_UNKNOWN => RepairAnswer::Unknown,
            REPAIR_COMMITTED => RepairAnswer::Committed {
                through: get_log_id(r)?,
                config: get_membership(r)?,
            },
            REPAIR_HOLDS => RepairAnswer::Holds {
                after: get_log_id(r)?,
                through: get_log_id(r)?,
                config: get_membership(r)?,
            },
            tag => {
                return Err(WireError::UnknownTag {
                    what: "repair answer",
                    tag,
                })
            }
        }),
        tag => {
            return Err(WireError::UnknownTag {
                what: "message",
                tag,
            })
        }
    };
    Ok(Message {
        from,
        to,
        term,
        body,
    })
}
