use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::command::{QueuedCommand, ReadCommand, SetCondition, WriteCommand};

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

/// Applies commands as a log would: consecutive indexes, one client, consecutive seqs.
struct Log {
    sm: KvStateMachine,
    index: u64,
    seq: u64,
}

impl Log {
    fn new() -> Self {
        Log {
            sm: KvStateMachine::new(),
            index: 0,
            seq: 0,
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
        let entry = LogCommand::new(client, seq, command).encode();
        self.sm.apply(self.index, &entry).expect("valid entry")
    }

    /// A MULTI ... EXEC transaction as the next entry of this log's client.
    fn exec(&mut self, commands: Vec<QueuedCommand>) -> ApplyReply {
        self.seq += 1;
        self.apply_logged(1, self.seq, LoggedCommand::Exec(commands))
    }

    fn get(&self, key: &str) -> Option<&[u8]> {
        self.sm.get(key.as_bytes()).map(|v| v.as_ref())
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
    wrong_version[8] = 2;
    assert_eq!(
        target.restore(&reseal(wrong_version)),
        Err(SnapshotError::UnsupportedVersion(2))
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
    let mut short = good[..good.len() - 4 - 8].to_vec(); // cut inside the session table
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
fn apply_rejects_undecodable_entries_and_old_indexes() {
    let mut sm = KvStateMachine::new();
    let entry = LogCommand::new(1, 1, set("a", "1")).encode();
    sm.apply(5, &entry).unwrap();
    assert_eq!(
        sm.apply(5, &entry),
        Err(ApplyError::IndexNotIncreasing {
            index: 5,
            applied_index: 5
        })
    );
    let mut future = entry.to_vec();
    future[0] = 2;
    assert!(matches!(
        sm.apply(6, &Bytes::from(future)),
        Err(ApplyError::Undecodable {
            index: 6,
            source: DecodeError::UnsupportedVersion(2)
        })
    ));
    assert_eq!(sm.applied_index(), 5, "a failed apply does not advance");
}

#[test]
fn log_command_decoding_is_strict() {
    let entry = LogCommand::new(1, 2, set("k", "v")).encode();
    for cut in 0..entry.len() {
        assert!(
            matches!(
                LogCommand::decode(&entry.slice(..cut)),
                Err(DecodeError::Truncated(_))
            ),
            "cut at {cut}"
        );
    }
    let mut trailing = entry.to_vec();
    trailing.push(0);
    assert_eq!(
        LogCommand::decode(&Bytes::from(trailing)),
        Err(DecodeError::TrailingBytes(1))
    );
    let mut bad_op = entry.to_vec();
    bad_op[17] = 99;
    assert_eq!(
        LogCommand::decode(&Bytes::from(bad_op)),
        Err(DecodeError::UnknownOp(99))
    );
    // A DEL claiming four billion keys is refused before anything is allocated.
    let mut huge = entry[..17].to_vec();
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
    ]
}

proptest! {
    #[test]
    fn log_commands_round_trip(client in any::<u64>(), seq in any::<u64>(), command in arb_write()) {
        let log = LogCommand::new(client, seq, command);
        prop_assert_eq!(LogCommand::decode(&log.encode()), Ok(log));
    }

    #[test]
    fn snapshots_round_trip_any_history(
        commands in prop::collection::vec((0u64..4, 1u64..6, arb_write()), 0..40),
    ) {
        let mut sm = KvStateMachine::with_dedup_limits(DedupLimits { clients_max: 3, replies_per_client_max: 3 });
        for (i, (client, seq, command)) in commands.into_iter().enumerate() {
            let entry = LogCommand::new(client, seq, command).encode();
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

// ---- MULTI ... EXEC transactions ----

fn w(command: WriteCommand) -> QueuedCommand {
    QueuedCommand::Write(command)
}

fn r(command: ReadCommand) -> QueuedCommand {
    QueuedCommand::Read(command)
}

fn incr(key: &str) -> QueuedCommand {
    w(WriteCommand::IncrBy {
        key: b(key),
        delta: 1,
    })
}

fn get(key: &str) -> QueuedCommand {
    r(ReadCommand::Get { key: b(key) })
}

#[test]
fn exec_runs_every_command_in_order_as_one_entry() {
    let mut log = Log::new();
    log.apply(set("s", "text"));
    let before = log.sm.applied_index();
    let reply = log.exec(vec![
        w(set("a", "1")),
        incr("a"),
        get("a"),
        incr("s"),
        r(ReadCommand::MGet {
            keys: vec![b("a"), b("missing"), b("s")],
        }),
        r(ReadCommand::Exists {
            keys: vec![b("a"), b("a"), b("missing")],
        }),
        r(ReadCommand::StrLen { key: b("s") }),
        r(ReadCommand::DbSize),
        w(WriteCommand::Set {
            key: b("a"),
            value: b("x"),
            condition: SetCondition::IfAbsent,
        }),
        QueuedCommand::Ping,
        QueuedCommand::Echo(b("hi")),
        w(WriteCommand::Del {
            keys: vec![b("s"), b("missing")],
        }),
        r(ReadCommand::DbSize),
    ]);
    assert_eq!(
        reply,
        ApplyReply::Exec(vec![
            Reply::OK,
            Reply::Integer(2),
            Reply::Bulk(b("2")),
            // One failing command does not roll back the others.
            Reply::error("ERR value is not an integer or out of range"),
            Reply::Array(vec![
                Reply::Bulk(b("2")),
                Reply::Null,
                Reply::Bulk(b("text"))
            ]),
            Reply::Integer(2),
            Reply::Integer(4),
            Reply::Integer(2),
            Reply::Null,
            Reply::PONG,
            Reply::Bulk(b("hi")),
            Reply::Integer(1),
            Reply::Integer(1),
        ])
    );
    assert_eq!(log.sm.applied_index(), before + 1, "one entry");
    assert_eq!(log.get("a"), Some(&b"2"[..]));
    assert_eq!(log.get("s"), None);
    // The RESP form is the array.
    let Reply::Array(items) = reply.to_reply() else {
        panic!("not an array")
    };
    assert_eq!(items.len(), 13);
}

#[test]
fn exec_replies_encode_and_decode() {
    let exec = ApplyReply::Exec(vec![
        Reply::OK,
        Reply::Null,
        Reply::Integer(-7),
        Reply::Bulk(b("")),
        Reply::Bulk(Bytes::from(vec![0u8, 255, b'\r', b'\n'])),
        Reply::error("ERR value is not an integer or out of range"),
        Reply::Array(vec![Reply::Bulk(b("v")), Reply::Null, Reply::Array(vec![])]),
        Reply::Map(vec![(Reply::text("k"), Reply::Integer(1))]),
        Reply::PONG,
    ]);
    for reply in [
        exec.clone(),
        ApplyReply::Exec(vec![]),
        ApplyReply::ExecDuplicate,
        ApplyReply::Write(WriteReply::Ok),
        ApplyReply::Write(WriteReply::Integer(i64::MIN)),
        ApplyReply::Write(WriteReply::Error(WriteError::RequestTooOld)),
    ] {
        let mut out = Vec::new();
        reply.encode(&mut out);
        assert_eq!(
            ApplyReply::decode(&Bytes::from(out.clone())),
            Some(reply.clone())
        );
        let mut trailing = out.clone();
        trailing.push(0);
        assert_eq!(
            ApplyReply::decode(&Bytes::from(trailing)),
            None,
            "{reply:?}"
        );
        for cut in 0..out.len() {
            assert_eq!(
                ApplyReply::decode(&Bytes::copy_from_slice(&out[..cut])),
                None
            );
        }
    }
    // A single write's result is the bytes it always was (WriteReply's encoding).
    for reply in [
        WriteReply::Nil,
        WriteReply::Integer(3),
        WriteReply::Error(WriteError::Overflow),
    ] {
        let (mut old, mut new) = (Vec::new(), Vec::new());
        reply.encode(&mut old);
        ApplyReply::Write(reply).encode(&mut new);
        assert_eq!(old, new);
        assert_eq!(WriteReply::decode(&new), Some(reply));
    }
    // Nesting is bounded.
    let mut deep = Reply::Null;
    for _ in 0..10 {
        deep = Reply::Array(vec![deep]);
    }
    let mut out = Vec::new();
    ApplyReply::Exec(vec![deep]).encode(&mut out);
    assert_eq!(ApplyReply::decode(&Bytes::from(out)), None);
    // A count larger than the input is refused before allocating.
    assert_eq!(
        ApplyReply::decode(&Bytes::from(vec![5, 0xff, 0xff, 0xff, 0xff])),
        None
    );
}

#[test]
fn a_retried_transaction_is_not_applied_twice() {
    let mut log = Log::new();
    let tx = vec![incr("n"), incr("n"), get("n")];
    let first = log.apply_logged(9, 1, LoggedCommand::Exec(tx.clone()));
    assert_eq!(
        first,
        ApplyReply::Exec(vec![
            Reply::Integer(1),
            Reply::Integer(2),
            Reply::Bulk(b("2"))
        ])
    );
    let digest = log.sm.state_digest();
    // The same request id again (a retry whose first copy committed): not run again.
    let again = log.apply_logged(9, 1, LoggedCommand::Exec(tx.clone()));
    assert_eq!(again, ApplyReply::ExecDuplicate);
    assert!(again.to_reply().is_error());
    assert_eq!(log.get("n"), Some(&b"2"[..]));
    assert_eq!(log.sm.state_digest(), digest);
    assert_eq!(log.sm.applied_index(), 2);
    // The next request id of the same client runs.
    let next = log.apply_logged(9, 2, LoggedCommand::Exec(tx));
    assert_eq!(
        next,
        ApplyReply::Exec(vec![
            Reply::Integer(3),
            Reply::Integer(4),
            Reply::Bulk(b("4"))
        ])
    );
    // The remembered "applied" survives a snapshot (whose format is unchanged).
    let mut restored = KvStateMachine::from_snapshot(&log.sm.snapshot()).unwrap();
    let entry = LogCommand::new(9, 2, LoggedCommand::Exec(vec![incr("n")])).encode();
    assert_eq!(restored.apply(10, &entry), Ok(ApplyReply::ExecDuplicate));
    assert_eq!(restored.get(b"n"), Some(&b("4")));
}

#[test]
fn replicas_applying_transactions_agree() {
    let history: Vec<LoggedCommand> = vec![
        set("a", "1").into(),
        LoggedCommand::Exec(vec![incr("a"), w(set("b", "x")), get("a"), incr("b")]),
        WriteCommand::Append {
            key: b("b"),
            value: b("y"),
        }
        .into(),
        LoggedCommand::Exec(vec![
            w(WriteCommand::Del { keys: vec![b("a")] }),
            w(WriteCommand::MSet {
                pairs: vec![(b("c"), b("3")), (b("d"), b("4"))],
            }),
            w(WriteCommand::Cas {
                key: b("c"),
                expected: b("3"),
                new: b("33"),
            }),
            r(ReadCommand::DbSize),
        ]),
    ];
    let mut one = Log::new();
    let mut two = Log::new();
    for (seq, command) in history.iter().enumerate() {
        let a = one.apply_logged(4, seq as u64 + 1, command.clone());
        let b = two.apply_logged(4, seq as u64 + 1, command.clone());
        assert_eq!(a, b);
    }
    assert_eq!(one.sm, two.sm);
    assert_ne!(one.sm.state_digest(), 0);
    assert_eq!(one.sm.state_digest(), two.sm.state_digest());
    let restored = KvStateMachine::from_snapshot(&one.sm.snapshot()).unwrap();
    assert_eq!(restored.state_digest(), one.sm.state_digest());
    assert_eq!(restored, one.sm);
    // Applying the same writes one by one gives the same state and digest.
    let mut plain = Log::new();
    for command in [
        set("a", "1"),
        WriteCommand::IncrBy {
            key: b("a"),
            delta: 1,
        },
        set("b", "x"),
        WriteCommand::IncrBy {
            key: b("b"),
            delta: 1,
        },
        WriteCommand::Append {
            key: b("b"),
            value: b("y"),
        },
        WriteCommand::Del { keys: vec![b("a")] },
        WriteCommand::MSet {
            pairs: vec![(b("c"), b("33")), (b("d"), b("4"))],
        },
    ] {
        plain.apply(command);
    }
    assert_eq!(plain.sm.state_digest(), one.sm.state_digest());
}

#[test]
fn entries_written_before_exec_existed_still_decode() {
    // Version-1 entries as earlier builds wrote them, byte for byte.
    let mut set_entry = vec![1u8];
    set_entry.extend_from_slice(&7u64.to_le_bytes());
    set_entry.extend_from_slice(&3u64.to_le_bytes());
    set_entry.extend_from_slice(&[1, 1]); // SET, NX
    set_entry.extend_from_slice(&[1, 0, 0, 0, b'k', 2, 0, 0, 0, b'v', b'1']);
    let decoded = LogCommand::decode(&Bytes::from(set_entry.clone())).unwrap();
    assert_eq!(
        decoded,
        LogCommand::new(
            7,
            3,
            WriteCommand::Set {
                key: b("k"),
                value: b("v1"),
                condition: SetCondition::IfAbsent,
            }
        )
    );
    assert_eq!(
        decoded.encode().as_ref(),
        &set_entry[..],
        "single writes encode as before"
    );
    let mut del_entry = vec![1u8];
    del_entry.extend_from_slice(&1u64.to_le_bytes());
    del_entry.extend_from_slice(&2u64.to_le_bytes());
    del_entry.extend_from_slice(&[2, 2, 0, 0, 0, 1, 0, 0, 0, b'a', 0, 0, 0, 0]);
    assert_eq!(
        LogCommand::decode(&Bytes::from(del_entry)).unwrap().command,
        LoggedCommand::Write(WriteCommand::Del {
            keys: vec![b("a"), b("")]
        })
    );
    // And an EXEC's bytes as documented in log_command.rs.
    let exec = LogCommand::new(
        1,
        2,
        LoggedCommand::Exec(vec![get("k"), QueuedCommand::Ping]),
    );
    let mut expected = vec![1u8];
    expected.extend_from_slice(&1u64.to_le_bytes());
    expected.extend_from_slice(&2u64.to_le_bytes());
    expected.extend_from_slice(&[7, 2, 0, 0, 0, 16, 1, 0, 0, 0, b'k', 32]);
    assert_eq!(exec.encode().as_ref(), &expected[..]);
}

#[test]
fn exec_entry_decoding_is_strict() {
    let entry = LogCommand::new(
        1,
        2,
        LoggedCommand::Exec(vec![
            w(set("k", "v")),
            r(ReadCommand::MGet {
                keys: vec![b("a"), b("b")],
            }),
            QueuedCommand::Echo(b("e")),
        ]),
    )
    .encode();
    for cut in 0..entry.len() {
        assert!(
            matches!(
                LogCommand::decode(&entry.slice(..cut)),
                Err(DecodeError::Truncated(_))
            ),
            "cut at {cut}"
        );
    }
    let header = |op: u8| {
        let mut e = entry[..17].to_vec();
        e.push(op);
        e
    };
    let mut empty = header(7);
    empty.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        LogCommand::decode(&Bytes::from(empty)),
        Err(DecodeError::EmptyList)
    );
    let mut nested = header(7);
    nested.extend_from_slice(&1u32.to_le_bytes());
    nested.push(7);
    nested.extend_from_slice(&1u32.to_le_bytes());
    nested.push(32);
    assert_eq!(
        LogCommand::decode(&Bytes::from(nested)),
        Err(DecodeError::NestedExec)
    );
    let mut read_alone = header(16);
    read_alone.extend_from_slice(&[1, 0, 0, 0, b'k']);
    assert_eq!(
        LogCommand::decode(&Bytes::from(read_alone)),
        Err(DecodeError::OnlyInExec(16))
    );
    let mut unknown_inside = header(7);
    unknown_inside.extend_from_slice(&1u32.to_le_bytes());
    unknown_inside.push(99);
    assert_eq!(
        LogCommand::decode(&Bytes::from(unknown_inside)),
        Err(DecodeError::UnknownOp(99))
    );
}

#[test]
fn exec_reply_size_is_bounded() {
    let mut log = Log::new();
    let big = Bytes::from(vec![b'x'; STRING_BYTES_MAX]);
    log.apply(WriteCommand::Set {
        key: b("big"),
        value: big.clone(),
        condition: SetCondition::Always,
    });
    let ApplyReply::Exec(replies) = log.exec(vec![
        get("big"),
        get("big"),
        r(ReadCommand::StrLen { key: b("big") }),
        incr("n"),
    ]) else {
        panic!("not an EXEC reply")
    };
    assert_eq!(replies[0], Reply::Bulk(big));
    assert!(
        matches!(&replies[1], Reply::Error(e) if e.contains("EXEC reply would exceed")),
        "{:?}",
        replies[1]
    );
    assert_eq!(replies[2], Reply::Integer(STRING_BYTES_MAX as i64));
    assert_eq!(replies[3], Reply::Integer(1), "writes still apply");
}

fn arb_queued() -> impl Strategy<Value = QueuedCommand> {
    prop_oneof![
        arb_write().prop_map(QueuedCommand::Write),
        arb_bytes().prop_map(|key| r(ReadCommand::Get { key })),
        prop::collection::vec(arb_bytes(), 1..4).prop_map(|keys| r(ReadCommand::MGet { keys })),
        prop::collection::vec(arb_bytes(), 1..4).prop_map(|keys| r(ReadCommand::Exists { keys })),
        arb_bytes().prop_map(|key| r(ReadCommand::StrLen { key })),
        Just(r(ReadCommand::DbSize)),
        Just(QueuedCommand::Ping),
        arb_bytes().prop_map(QueuedCommand::Echo),
    ]
}

proptest! {
    #[test]
    fn exec_entries_round_trip(
        client in any::<u64>(),
        seq in any::<u64>(),
        commands in prop::collection::vec(arb_queued(), 1..8),
    ) {
        let log = LogCommand::new(client, seq, LoggedCommand::Exec(commands));
        prop_assert_eq!(LogCommand::decode(&log.encode()), Ok(log));
    }

    #[test]
    fn transactions_and_writes_snapshot_and_replay_alike(
        history in prop::collection::vec(
            (0u64..3, 1u64..5, prop::collection::vec(arb_queued(), 1..5)),
            0..20,
        ),
    ) {
        let limits = DedupLimits { clients_max: 2, replies_per_client_max: 3 };
        let mut one = KvStateMachine::with_dedup_limits(limits);
        let mut two = KvStateMachine::with_dedup_limits(limits);
        for (i, (client, seq, commands)) in history.into_iter().enumerate() {
            let entry = LogCommand::new(client, seq, LoggedCommand::Exec(commands)).encode();
            let a = one.apply(i as u64 + 1, &entry).unwrap();
            prop_assert_eq!(two.apply(i as u64 + 1, &entry).unwrap(), a.clone());
            let mut out = Vec::new();
            a.encode(&mut out);
            prop_assert_eq!(ApplyReply::decode(&Bytes::from(out)), Some(a));
        }
        prop_assert_eq!(&one, &two);
        let restored = KvStateMachine::from_snapshot(&one.snapshot()).unwrap();
        prop_assert_eq!(restored, one);
    }
}
