//! MULTI ... EXEC transactions: one log entry, applied atomically.

use bytes::Bytes;
use proptest::prelude::*;

use super::*;

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
        ApplyReply::AppliedBefore,
        ApplyReply::Write(WriteReply::Ok),
        ApplyReply::Write(WriteReply::Integer(i64::MIN)),
        ApplyReply::Write(WriteReply::Error(WriteError::RequestTooOld)),
    ] {
        let mut out = Vec::new();
        reply.encode(&mut out);
        // `to_bytes` (with its shortcut for +OK) is the same encoding.
        assert_eq!(reply.to_bytes(), out, "{reply:?}");
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
    assert_eq!(again, ApplyReply::AppliedBefore);
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
    let entry = LogCommand::new(9, 2, 0, LoggedCommand::Exec(vec![incr("n")])).encode();
    assert_eq!(restored.apply(10, &entry), Ok(ApplyReply::AppliedBefore));
    assert_eq!(restored.get(b"n"), Some(&b"4"[..]));
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
            0,
            WriteCommand::Set {
                key: b("k"),
                value: b("v1"),
                condition: SetCondition::IfAbsent,
            }
        )
    );
    // Encoded again it is a version-2 entry: the same fields with a stamp of 0 (no time).
    let mut as_v2 = vec![2u8];
    as_v2.extend_from_slice(&set_entry[1..17]);
    as_v2.extend_from_slice(&0u64.to_le_bytes());
    as_v2.extend_from_slice(&set_entry[17..]);
    assert_eq!(
        decoded.encode().as_ref(),
        &as_v2[..],
        "single writes encode as before, with the stamp"
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
        1_700_000_000_123,
        LoggedCommand::Exec(vec![get("k"), QueuedCommand::Ping]),
    );
    let mut expected = vec![2u8];
    expected.extend_from_slice(&1u64.to_le_bytes());
    expected.extend_from_slice(&2u64.to_le_bytes());
    expected.extend_from_slice(&1_700_000_000_123u64.to_le_bytes());
    expected.extend_from_slice(&[7, 2, 0, 0, 0, 16, 1, 0, 0, 0, b'k', 32]);
    assert_eq!(exec.encode().as_ref(), &expected[..]);
}

#[test]
fn exec_entry_decoding_is_strict() {
    let entry = LogCommand::new(
        1,
        2,
        0,
        LoggedCommand::Exec(vec![
            w(set("k", "v")),
            r(ReadCommand::MGet {
                keys: vec![b("a"), b("b")],
            }),
            QueuedCommand::Echo(b("e")),
        ]),
    )
    .encode();
    assert_every_cut_is_truncated(&entry);
    let header = |op: u8| {
        let mut e = entry[..25].to_vec();
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
    unknown_inside.push(200);
    assert_eq!(
        LogCommand::decode(&Bytes::from(unknown_inside)),
        Err(DecodeError::UnknownOp(200))
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
        super::string_key_ops::arb_read(),
    ]
}

proptest! {
    #[test]
    fn exec_entries_round_trip(
        client in any::<u64>(),
        seq in any::<u64>(),
        commands in prop::collection::vec(arb_queued(), 1..8),
    ) {
        let log = LogCommand::new(client, seq, 0, LoggedCommand::Exec(commands));
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
            let entry = LogCommand::new(client, seq, 0, LoggedCommand::Exec(commands)).encode();
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
