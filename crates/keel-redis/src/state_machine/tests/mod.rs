use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::command::{FloatBits, QueuedCommand, ReadCommand, SetCondition, WriteCommand};

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

fn set(key: &str, value: &str) -> WriteCommand {
    WriteCommand::Set {
        key: b(key),
        value: b(value),
        condition: SetCondition::Always,
    }
}

/// Applies commands as a log would: consecutive indexes, one client, consecutive seqs, each
/// entry stamped `stamp_ms` (0, no time, unless a test sets it).
struct Log {
    sm: KvStateMachine,
    index: u64,
    seq: u64,
    stamp_ms: u64,
}

impl Log {
    fn new() -> Self {
        Log {
            sm: KvStateMachine::new(),
            index: 0,
            seq: 0,
            stamp_ms: 0,
        }
    }

    fn apply(&mut self, command: WriteCommand) -> WriteReply {
        self.seq += 1;
        self.apply_as(1, self.seq, command)
    }

    fn apply_as(&mut self, client: u64, seq: u64, command: WriteCommand) -> WriteReply {
        match self.apply_logged(client, seq, command.into()) {
            ApplyReply::Write(reply) => reply,
            other => panic!("a write answered {other:?}"),
        }
    }

    fn apply_logged(&mut self, client: u64, seq: u64, command: LoggedCommand) -> ApplyReply {
        self.index += 1;
        let entry = LogCommand::new(client, seq, self.stamp_ms, command).encode();
        self.sm.apply(self.index, &entry).expect("valid entry")
    }

    /// A MULTI ... EXEC transaction as the next entry of this log's client.
    fn exec(&mut self, commands: Vec<QueuedCommand>) -> ApplyReply {
        self.seq += 1;
        self.apply_logged(1, self.seq, LoggedCommand::Exec(commands))
    }

    fn get(&self, key: &str) -> Option<&[u8]> {
        self.sm.get(key.as_bytes())
    }
}

#[test]
fn set_with_conditions() {
    let mut log = Log::new();
    let cond = |key: &str, value: &str, condition| WriteCommand::Set {
        key: b(key),
        value: b(value),
        condition,
    };
    assert_eq!(
        log.apply(cond("k", "1", SetCondition::IfPresent)),
        WriteReply::Nil
    );
    assert_eq!(log.get("k"), None);
    assert_eq!(
        log.apply(cond("k", "1", SetCondition::IfAbsent)),
        WriteReply::Ok
    );
    assert_eq!(
        log.apply(cond("k", "2", SetCondition::IfAbsent)),
        WriteReply::Nil
    );
    assert_eq!(log.get("k"), Some(&b"1"[..]));
    assert_eq!(
        log.apply(cond("k", "3", SetCondition::IfPresent)),
        WriteReply::Ok
    );
    assert_eq!(log.apply(set("k", "4")), WriteReply::Ok);
    assert_eq!(log.get("k"), Some(&b"4"[..]));
    assert_eq!(WriteReply::Nil.to_reply(), Reply::Null);
    assert_eq!(WriteReply::Ok.to_reply(), Reply::OK);
}

#[test]
fn del_counts_removed_keys() {
    let mut log = Log::new();
    log.apply(set("a", "1"));
    log.apply(set("b", "2"));
    let del = WriteCommand::Del {
        keys: vec![b("a"), b("a"), b("c"), b("b")],
    };
    assert_eq!(log.apply(del), WriteReply::Integer(2));
    assert!(log.sm.is_empty());
    assert_eq!(log.sm.state_digest(), 0, "the empty map has digest 0");
}

#[test]
fn incr_has_redis_semantics_and_errors_are_results() {
    let mut log = Log::new();
    let incr = |key: &str, delta| WriteCommand::IncrBy { key: b(key), delta };
    assert_eq!(log.apply(incr("n", 1)), WriteReply::Integer(1));
    assert_eq!(log.apply(incr("n", 41)), WriteReply::Integer(42));
    assert_eq!(log.apply(incr("n", -50)), WriteReply::Integer(-8));
    assert_eq!(log.get("n"), Some(&b"-8"[..]));
    log.apply(set("s", "abc"));
    log.apply(set("sp", " 1"));
    let not_integer = WriteReply::Error(WriteError::NotInteger);
    assert_eq!(log.apply(incr("s", 1)), not_integer);
    assert_eq!(log.apply(incr("sp", 1)), not_integer);
    assert_eq!(
        not_integer.to_reply(),
        Reply::error("ERR value is not an integer or out of range")
    );
    log.apply(set("max", &i64::MAX.to_string()));
    let digest = log.sm.state_digest();
    assert_eq!(
        log.apply(incr("max", 1)),
        WriteReply::Error(WriteError::Overflow)
    );
    assert_eq!(
        log.sm.state_digest(),
        digest,
        "a failed INCR changes nothing"
    );
    // ... but the entry counts as applied.
    assert_eq!(log.sm.applied_index(), log.index);
}

#[test]
fn mset_append_cas() {
    let mut log = Log::new();
    let mset = WriteCommand::MSet {
        pairs: vec![(b("a"), b("1")), (b("b"), b("2")), (b("a"), b("3"))],
    };
    assert_eq!(log.apply(mset), WriteReply::Ok);
    assert_eq!(log.get("a"), Some(&b"3"[..]), "later pairs win");
    let append = |key: &str, value: &str| WriteCommand::Append {
        key: b(key),
        value: b(value),
    };
    assert_eq!(log.apply(append("b", "xy")), WriteReply::Integer(3));
    assert_eq!(log.apply(append("new", "z")), WriteReply::Integer(1));
    assert_eq!(log.get("b"), Some(&b"2xy"[..]));
    let cas = |key: &str, expected: &str, new: &str| WriteCommand::Cas {
        key: b(key),
        expected: b(expected),
        new: b(new),
    };
    assert_eq!(log.apply(cas("b", "wrong", "v")), WriteReply::Integer(0));
    assert_eq!(log.apply(cas("missing", "", "v")), WriteReply::Integer(0));
    assert_eq!(log.apply(cas("b", "2xy", "v")), WriteReply::Integer(1));
    assert_eq!(log.get("b"), Some(&b"v"[..]));
}

#[test]
fn reads() {
    let mut log = Log::new();
    log.apply(set("a", "hello"));
    log.apply(set("b", ""));
    let sm = &log.sm;
    assert_eq!(
        sm.read(&ReadCommand::Get { key: b("a") }),
        Reply::text("hello")
    );
    assert_eq!(sm.read(&ReadCommand::Get { key: b("x") }), Reply::Null);
    assert_eq!(
        sm.read(&ReadCommand::MGet {
            keys: vec![b("a"), b("x"), b("b")]
        }),
        Reply::Array(vec![Reply::text("hello"), Reply::Null, Reply::text("")])
    );
    assert_eq!(
        sm.read(&ReadCommand::Exists {
            keys: vec![b("a"), b("a"), b("x"), b("b")]
        }),
        Reply::Integer(3)
    );
    assert_eq!(
        sm.read(&ReadCommand::StrLen { key: b("a") }),
        Reply::Integer(5)
    );
    assert_eq!(
        sm.read(&ReadCommand::StrLen { key: b("x") }),
        Reply::Integer(0)
    );
    assert_eq!(sm.read(&ReadCommand::DbSize), Reply::Integer(2));
}

#[test]
fn a_retry_returns_the_remembered_reply_and_changes_nothing() {
    let mut log = Log::new();
    let incr = WriteCommand::IncrBy {
        key: b("n"),
        delta: 5,
    };
    assert_eq!(log.apply_as(7, 1, incr.clone()), WriteReply::Integer(5));
    let digest = log.sm.state_digest();
    // The same request id committed again (a retried proposal): same reply, no second apply.
    assert_eq!(log.apply_as(7, 1, incr.clone()), WriteReply::Integer(5));
    assert_eq!(log.get("n"), Some(&b"5"[..]));
    assert_eq!(log.sm.state_digest(), digest);
    // Even if the retry's bytes differ, the id decides.
    assert_eq!(log.apply_as(7, 1, set("n", "junk")), WriteReply::Integer(5));
    assert_eq!(log.get("n"), Some(&b"5"[..]));
    // Out-of-order seqs inside the window apply once each.
    assert_eq!(log.apply_as(7, 3, incr.clone()), WriteReply::Integer(10));
    assert_eq!(log.apply_as(7, 2, incr.clone()), WriteReply::Integer(15));
    assert_eq!(log.apply_as(7, 2, incr.clone()), WriteReply::Integer(15));
    assert_eq!(log.apply_as(7, 3, incr.clone()), WriteReply::Integer(10));
    // Another client's seq 1 is its own.
    assert_eq!(log.apply_as(8, 1, incr), WriteReply::Integer(20));
}

#[test]
fn dedup_window_is_bounded() {
    let limits = DedupLimits {
        clients_max: 2,
        replies_per_client_max: 4,
    };
    let mut log = Log::new();
    log.sm = KvStateMachine::with_dedup_limits(limits);
    let incr = || WriteCommand::IncrBy {
        key: b("n"),
        delta: 1,
    };
    for seq in 1..=10 {
        log.apply_as(1, seq, incr());
    }
    // Seqs 7..=10 are remembered; 6 and below cannot be told from "never applied": refused.
    assert_eq!(log.apply_as(1, 10, incr()), WriteReply::Integer(10));
    assert_eq!(log.apply_as(1, 7, incr()), WriteReply::Integer(7));
    assert_eq!(
        log.apply_as(1, 6, incr()),
        WriteReply::Error(WriteError::RequestTooOld)
    );
    assert!(WriteError::RequestTooOld
        .to_string()
        .starts_with("TRYAGAIN "));
    assert_eq!(log.get("n"), Some(&b"10"[..]));
    // A third client evicts the least recently used (client 2, not the just-used client 1).
    log.apply_as(2, 1, incr());
    log.apply_as(1, 11, incr());
    log.apply_as(3, 1, incr());
    assert_eq!(log.sm.dedup_sessions(), 2);
    assert_eq!(log.apply_as(1, 11, incr()), WriteReply::Integer(12));
    // Client 2 was forgotten: its retry applies again. This is the documented limit of the bound.
    assert_eq!(log.apply_as(2, 1, incr()), WriteReply::Integer(14));
}

#[test]
fn replicas_that_applied_the_same_log_agree_and_any_change_moves_the_digest() {
    let commands = vec![
        set("a", "1"),
        set("b", "2"),
        WriteCommand::IncrBy {
            key: b("a"),
            delta: 10,
        },
        WriteCommand::Append {
            key: b("b"),
            value: b("x"),
        },
        WriteCommand::Del { keys: vec![b("b")] },
        set("c", "3"),
    ];
    let mut one = Log::new();
    let mut two = Log::new();
    let mut digests = std::collections::HashSet::new();
    for command in commands {
        one.apply(command.clone());
        two.apply(command);
        assert_eq!(one.sm.state_digest(), two.sm.state_digest());
        assert_eq!(one.sm, two.sm);
        digests.insert(one.sm.state_digest());
    }
    assert_eq!(digests.len(), 6, "every change moved the digest");
    // The digest depends on the content, not the history that produced it.
    let mut other = Log::new();
    other.apply(set("c", "3"));
    other.apply(set("a", "11"));
    assert_eq!(other.sm.state_digest(), one.sm.state_digest());
}

#[test]
fn snapshot_round_trips_with_digest_and_dedup() {
    let mut log = Log::new();
    for i in 0..50 {
        log.apply(set(&format!("key{i}"), &"v".repeat(i)));
        // Keys too long to be inline, and keys that are prefixes of others: the view sorts its
        // pairs itself and must give the same bytes as the ordered map.
        if i % 7 == 0 {
            log.apply(set(&format!("{}{i}", "long-".repeat(10)), "x"));
            log.apply(set(&format!("key{i}\0"), "y"));
        }
    }
    log.apply_as(
        9,
        4,
        WriteCommand::IncrBy {
            key: b("n"),
            delta: 3,
        },
    );
    log.sm.advance_applied(log.index + 5).unwrap();
    let snapshot = log.sm.snapshot();
    let restored = KvStateMachine::from_snapshot(&snapshot).unwrap();
    assert_eq!(restored, log.sm);
    assert_eq!(restored.state_digest(), log.sm.state_digest());
    assert_eq!(restored.applied_index(), log.index + 5);
    assert_eq!(log.sm.snapshot_view().encode(), snapshot);
    // A retry after the restore is still recognised.
    let mut after = Log {
        sm: restored,
        index: log.index + 5,
        seq: log.seq,
        stamp_ms: 0,
    };
    let retry = WriteCommand::IncrBy {
        key: b("n"),
        delta: 3,
    };
    assert_eq!(after.apply_as(9, 4, retry), WriteReply::Integer(3));
    assert_eq!(after.get("n"), Some(&b"3"[..]));
    assert_eq!(after.sm.state_digest(), log.sm.state_digest());
}

#[test]
fn restore_rejects_damaged_snapshots_and_keeps_the_old_state() {
    let mut log = Log::new();
    log.apply(set("a", "1"));
    log.apply(set("b", "2"));
    let good = log.sm.snapshot();
    let mut target = KvStateMachine::new();
    target.restore(&good).unwrap();
    let before = target.clone();

    let truncated = &good[..good.len() - 1];
    assert!(matches!(
        target.restore(truncated),
        Err(SnapshotError::ChecksumMismatch { .. })
    ));
    assert!(matches!(
        target.restore(&good[..10]),
        Err(SnapshotError::TooShort(10))
    ));
    for at in [0, 9, 20, 50, good.len() - 5] {
        let mut flipped = good.clone();
        flipped[at] ^= 0x40;
        assert!(
            matches!(
                target.restore(&flipped),
                Err(SnapshotError::ChecksumMismatch { .. })
            ),
            "flip at {at}"
        );
    }
    // Valid checksums over bad content are caught by the structural checks.
    let reseal = |mut body: Vec<u8>| {
        body.truncate(body.len() - 4);
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        body
    };
    let mut wrong_version = good.clone();
    wrong_version[8] = 8;
    assert_eq!(
        target.restore(&reseal(wrong_version)),
        Err(SnapshotError::UnsupportedVersion(8))
    );
    let mut wrong_magic = good.clone();
    wrong_magic[0] = b'X';
    assert_eq!(
        target.restore(&reseal(wrong_magic)),
        Err(SnapshotError::BadMagic)
    );
    let mut wrong_digest = good.clone();
    wrong_digest[20] ^= 1;
    assert!(matches!(
        target.restore(&reseal(wrong_digest)),
        Err(SnapshotError::DigestMismatch { .. })
    ));
    let mut huge_count = good.clone();
    huge_count[36..44].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        target.restore(&reseal(huge_count)),
        Err(SnapshotError::Truncated(_))
    ));
    // Cut inside the session table (before the members count, the log time and the checksum).
    let mut short = good[..good.len() - 4 - 8 - 4 - 8].to_vec();
    short.extend_from_slice(&[0; 4]);
    assert!(matches!(
        target.restore(&reseal(short)),
        Err(SnapshotError::Truncated(_))
    ));
    assert_eq!(target, before, "failed restores change nothing");
}

#[test]
fn write_replies_encode_for_relaying() {
    for reply in [
        WriteReply::Ok,
        WriteReply::Nil,
        WriteReply::Integer(i64::MIN),
        WriteReply::Error(WriteError::NotInteger),
        WriteReply::Error(WriteError::Overflow),
        WriteReply::Error(WriteError::StringTooLarge),
        WriteReply::Error(WriteError::RequestTooOld),
        WriteReply::Error(WriteError::UndecodableEntry),
    ] {
        let mut out = Vec::new();
        reply.encode(&mut out);
        assert_eq!(WriteReply::decode(&out), Some(reply));
        out.push(0);
        assert_eq!(WriteReply::decode(&out), None, "trailing byte");
    }
    assert_eq!(WriteReply::decode(&[2, 1]), None, "truncated");
    assert_eq!(WriteReply::decode(&[9]), None, "unknown tag");
}

#[test]
fn apply_rejects_old_indexes() {
    let mut sm = KvStateMachine::new();
    let entry = LogCommand::new(1, 1, 0, set("a", "1")).encode();
    sm.apply(5, &entry).unwrap();
    assert_eq!(
        sm.apply(5, &entry),
        Err(ApplyError::IndexNotIncreasing {
            index: 5,
            applied_index: 5
        })
    );
}

#[test]
fn an_undecodable_entry_is_the_same_no_op_on_every_replica() {
    let mut replicas = [KvStateMachine::new(), KvStateMachine::new()];
    let entry = LogCommand::new(1, 1, 1_000, set("a", "1")).encode();
    let mut future_version = entry.to_vec();
    future_version[0] = 3;
    // A version-2 entry with a later stamp and an op this build does not know: its stamp is not
    // taken either.
    let mut unknown_op = LogCommand::new(1, 2, 5_000, set("a", "2"))
        .encode()
        .to_vec();
    unknown_op[25] = 200;
    let garbage = [
        Bytes::from(future_version),
        Bytes::from(unknown_op),
        Bytes::new(),
        entry.slice(..entry.len() - 1),
        Bytes::from_static(b"\x01\xff\xff"),
    ];
    for sm in &mut replicas {
        sm.apply(5, &entry).unwrap();
        let before = (
            sm.state_digest(),
            sm.len(),
            sm.dedup_sessions(),
            sm.log_time_ms(),
        );
        for (i, bad) in garbage.iter().enumerate() {
            let index = 6 + i as u64;
            assert_eq!(
                sm.apply(index, bad),
                Ok(ApplyReply::Write(WriteReply::Error(
                    WriteError::UndecodableEntry
                ))),
                "{bad:?}"
            );
            assert_eq!(sm.applied_index(), index, "the applied index advances");
        }
        assert_eq!(
            (
                sm.state_digest(),
                sm.len(),
                sm.dedup_sessions(),
                sm.log_time_ms()
            ),
            before,
            "nothing else changed"
        );
        assert_eq!(sm.log_time_ms(), 1_000);
        // The next good entry applies as usual.
        let next = LogCommand::new(1, 2, 0, set("b", "2")).encode();
        assert_eq!(sm.apply(11, &next), Ok(ApplyReply::Write(WriteReply::Ok)));
    }
    assert_eq!(replicas[0], replicas[1]);
    assert_eq!(replicas[0].snapshot(), replicas[1].snapshot());
}

/// Applies `entries` (from index 1) on one replica, and on others that restore a snapshot taken
/// after each entry `snapshot_after` picks, then apply the rest: all end equal, with the same
/// digest and snapshot bytes. Returns the first replica.
fn assert_replicas_agree(
    entries: &[Bytes],
    snapshot_after: impl Fn(usize) -> bool,
) -> KvStateMachine {
    let mut full = KvStateMachine::new();
    let mut snapshots = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        full.apply(i as u64 + 1, entry).unwrap();
        if snapshot_after(i) {
            snapshots.push(full.snapshot());
        }
    }
    assert!(!snapshots.is_empty());
    for bytes in &snapshots {
        let mut replica = KvStateMachine::from_snapshot(bytes).unwrap();
        for index in replica.applied_index() + 1..=entries.len() as u64 {
            replica.apply(index, &entries[index as usize - 1]).unwrap();
        }
        assert_eq!(replica, full);
        assert_eq!(replica.state_digest(), full.state_digest());
        assert_eq!(replica.snapshot(), full.snapshot());
    }
    full
}

/// Every proper prefix of an encoded entry decodes as `Truncated`, never as something else.
fn assert_every_cut_is_truncated(entry: &Bytes) {
    for cut in 0..entry.len() {
        assert!(
            matches!(
                LogCommand::decode(&entry.slice(..cut)),
                Err(DecodeError::Truncated(_))
            ),
            "cut at {cut}"
        );
    }
}

#[test]
fn log_command_decoding_is_strict() {
    let entry = LogCommand::new(1, 2, 0, set("k", "v")).encode();
    assert_every_cut_is_truncated(&entry);
    let mut trailing = entry.to_vec();
    trailing.push(0);
    assert_eq!(
        LogCommand::decode(&Bytes::from(trailing)),
        Err(DecodeError::TrailingBytes(1))
    );
    let mut bad_op = entry.to_vec();
    bad_op[25] = 200;
    assert_eq!(
        LogCommand::decode(&Bytes::from(bad_op)),
        Err(DecodeError::UnknownOp(200))
    );
    // A DEL claiming four billion keys is refused before anything is allocated.
    let mut huge = entry[..25].to_vec();
    huge.push(2);
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        LogCommand::decode(&Bytes::from(huge)),
        Err(DecodeError::Truncated(_))
    ));
}

fn arb_bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..12).prop_map(Bytes::from)
}

fn arb_write() -> impl Strategy<Value = WriteCommand> {
    let condition = prop_oneof![
        Just(SetCondition::Always),
        Just(SetCondition::IfAbsent),
        Just(SetCondition::IfPresent)
    ];
    prop_oneof![
        (arb_bytes(), arb_bytes(), condition).prop_map(|(key, value, condition)| {
            WriteCommand::Set {
                key,
                value,
                condition,
            }
        }),
        prop::collection::vec(arb_bytes(), 1..4).prop_map(|keys| WriteCommand::Del { keys }),
        (arb_bytes(), any::<i64>()).prop_map(|(key, delta)| WriteCommand::IncrBy { key, delta }),
        prop::collection::vec((arb_bytes(), arb_bytes()), 1..4)
            .prop_map(|pairs| WriteCommand::MSet { pairs }),
        (arb_bytes(), arb_bytes()).prop_map(|(key, value)| WriteCommand::Append { key, value }),
        (arb_bytes(), arb_bytes(), arb_bytes())
            .prop_map(|(key, expected, new)| WriteCommand::Cas { key, expected, new }),
        (arb_bytes(), any::<f64>()).prop_map(|(key, delta)| WriteCommand::IncrByFloat {
            key,
            delta: FloatBits(delta)
        }),
        (arb_bytes(), 0u64..64, arb_bytes())
            .prop_map(|(key, offset, value)| WriteCommand::SetRange { key, offset, value }),
        (arb_bytes(), 0u64..512, any::<bool>())
            .prop_map(|(key, offset, bit)| WriteCommand::SetBit { key, offset, bit }),
        (arb_bytes(), arb_bytes(), any::<bool>()).prop_map(|(key, new_key, only_if_absent)| {
            WriteCommand::Rename {
                key,
                new_key,
                only_if_absent,
            }
        }),
        (arb_bytes(), arb_bytes(), any::<bool>()).prop_map(|(source, destination, replace)| {
            WriteCommand::Copy {
                source,
                destination,
                replace,
                db: None,
            }
        }),
    ]
}

proptest! {
    #[test]
    fn log_commands_round_trip(client in any::<u64>(), seq in any::<u64>(), command in arb_write()) {
        let log = LogCommand::new(client, seq, 0, command);
        prop_assert_eq!(LogCommand::decode(&log.encode()), Ok(log));
    }

    #[test]
    fn snapshots_round_trip_any_history(
        commands in prop::collection::vec((0u64..4, 1u64..6, arb_write()), 0..40),
    ) {
        let mut sm = KvStateMachine::with_dedup_limits(DedupLimits { clients_max: 3, replies_per_client_max: 3 });
        for (i, (client, seq, command)) in commands.into_iter().enumerate() {
            let entry = LogCommand::new(client, seq, 0, command).encode();
            sm.apply(i as u64 + 1, &entry).unwrap();
        }
        let restored = KvStateMachine::from_snapshot(&sm.snapshot()).unwrap();
        // The digest is recomputed from scratch on restore: the incremental one must match it.
        prop_assert_eq!(restored.state_digest(), sm.state_digest());
        prop_assert_eq!(restored, sm);
    }

    #[test]
    fn corrupt_input_never_panics(data in prop::collection::vec(any::<u8>(), 0..120)) {
        let _ = LogCommand::decode(&Bytes::from(data.clone()));
        let _ = KvStateMachine::from_snapshot(&data);
    }
}

mod blocking_pops;
mod blocking_reads;
mod collections;
mod databases;
mod exec;
mod expiry;
mod keyspace_commands;
mod list_positions;
mod members;
mod notify;
mod sort;
mod streams;
mod string_key_ops;
mod strings;
mod time;

#[test]
fn stored_keys_and_values_do_not_keep_the_received_frame_alive() {
    // Entries received from a leader are slices of one frame; the map must hold copies, or a key
    // never overwritten would keep the whole frame in memory.
    let entry = LogCommand::new(
        1,
        1,
        0,
        set("a-key-longer-than-the-inline-limit-of-38", "value"),
    );
    let mut frame = Vec::from(&b"other entries"[..]);
    frame.extend_from_slice(&entry.encode());
    let frame = Bytes::from(frame);
    let mut sm = KvStateMachine::new();
    let sliced = frame.slice(13..);
    sm.apply(1, &sliced).unwrap();
    drop(sliced);
    assert!(frame.is_unique(), "the map still points into the frame");
    assert_eq!(
        sm.get(b"a-key-longer-than-the-inline-limit-of-38"),
        Some(&b"value"[..])
    );
}

#[test]
fn overwrites_in_place_never_reach_a_snapshot_view_or_a_read_reply() {
    let mut log = Log::new();
    log.apply(set("k", "aaaa"));
    log.apply(set("other", "1"));
    let view = log.sm.snapshot_view();
    let view_bytes = view.encode();
    let reply = log.sm.read(&ReadCommand::Get { key: b("k") });
    // Same length: the write would go in place if nothing shared the value.
    log.apply(set("k", "bbbb"));
    assert_eq!(reply, Reply::Bulk(b("aaaa")));
    assert_eq!(
        view.encode(),
        view_bytes,
        "the view changed under a later write"
    );
    let restored = KvStateMachine::from_snapshot(&view_bytes).unwrap();
    assert_eq!(restored.get(b"k"), Some(&b"aaaa"[..]));
    drop((view, reply));
    // Nothing shares it now: in place, and the digest still follows the content.
    log.apply(set("k", "cccc"));
    assert_eq!(log.get("k"), Some(&b"cccc"[..]));
    let mut fresh = Log::new();
    fresh.apply(set("other", "1"));
    fresh.apply(set("k", "cccc"));
    assert_eq!(fresh.sm.state_digest(), log.sm.state_digest());
    let restored = KvStateMachine::from_snapshot(&log.sm.snapshot()).unwrap();
    assert_eq!(restored.state_digest(), log.sm.state_digest());
}

#[test]
fn used_bytes_follow_every_change_and_survive_a_snapshot() {
    let pair = |k: &str, v: usize| (k.len() + v) as u64 + map::PAIR_OVERHEAD_BYTES;
    let mut log = Log::new();
    assert_eq!(log.sm.used_bytes(), 0);
    log.apply(set("a", "12345"));
    assert_eq!(log.sm.used_bytes(), pair("a", 5));
    // Overwritten in place (same length) and with another length.
    log.apply(set("a", "54321"));
    log.apply(set("a", "1"));
    assert_eq!(log.sm.used_bytes(), pair("a", 1));
    log.apply(WriteCommand::Append {
        key: b("a"),
        value: b("234"),
    });
    log.apply(WriteCommand::IncrBy {
        key: b("n"),
        delta: 100,
    });
    log.apply(WriteCommand::MSet {
        pairs: vec![(b("x"), b("xx")), (b("y"), b("yyy"))],
    });
    let expected = pair("a", 4) + pair("n", 3) + pair("x", 2) + pair("y", 3);
    assert_eq!(log.sm.used_bytes(), expected);
    let restored = KvStateMachine::from_snapshot(&log.sm.snapshot()).unwrap();
    assert_eq!(restored.used_bytes(), expected);
    log.apply(WriteCommand::Del {
        keys: vec![b("a"), b("x"), b("missing")],
    });
    assert_eq!(log.sm.used_bytes(), pair("n", 3) + pair("y", 3));
    log.apply(WriteCommand::Del {
        keys: vec![b("n"), b("y")],
    });
    assert_eq!(log.sm.used_bytes(), 0);
}
