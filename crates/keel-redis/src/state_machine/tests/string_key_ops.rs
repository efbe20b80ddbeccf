//! The log encoding of the string and keyspace ops (`log_command/strings_and_keys.rs`): round
//! trips, strictness, their reads inside an EXEC, and replicas that apply them alike.

use proptest::prelude::*;

use super::expiry::{set_px, T0};
use super::*;
use crate::command::{BitRange, BitUnit, FloatBits, LcsForm, ScanArgs, TypeFilter};
use crate::kind::Kind;

/// Any read of the new ops, as an EXEC carries it.
pub(super) fn arb_read() -> impl Strategy<Value = QueuedCommand> {
    let unit = prop_oneof![Just(BitUnit::Byte), Just(BitUnit::Bit)];
    let range = prop::option::of(
        (any::<i64>(), any::<i64>(), unit).prop_map(|(start, end, unit)| BitRange {
            start,
            end,
            unit,
        }),
    );
    let form = prop_oneof![
        Just(LcsForm::Text),
        Just(LcsForm::Length),
        (any::<u64>(), any::<bool>()).prop_map(|(min_match_len, with_match_len)| {
            LcsForm::Ranges {
                min_match_len,
                with_match_len,
            }
        }),
    ];
    let scan = (
        any::<u64>(),
        prop::option::of(arb_bytes()),
        1u32..,
        prop_oneof![
            Just(TypeFilter::Any),
            Just(TypeFilter::Nothing),
            Just(TypeFilter::Only(Kind::String)),
            Just(TypeFilter::Only(Kind::Set)),
        ],
    )
        .prop_map(|(cursor, pattern, count, types)| {
            ReadCommand::Scan(ScanArgs {
                cursor,
                pattern,
                count,
                types,
            })
        });
    prop_oneof![
        (arb_bytes(), any::<i64>(), any::<i64>())
            .prop_map(|(key, start, end)| ReadCommand::GetRange { key, start, end }),
        (arb_bytes(), any::<u64>()).prop_map(|(key, offset)| ReadCommand::GetBit { key, offset }),
        (arb_bytes(), range).prop_map(|(key, range)| ReadCommand::BitCount { key, range }),
        (arb_bytes(), arb_bytes(), form).prop_map(|(key1, key2, form)| ReadCommand::Lcs {
            key1,
            key2,
            form
        }),
        arb_bytes().prop_map(|key| ReadCommand::Type { key }),
        Just(ReadCommand::RandomKey),
        arb_bytes().prop_map(|pattern| ReadCommand::Keys { pattern }),
        scan,
    ]
    .prop_map(QueuedCommand::Read)
}

fn writes() -> Vec<WriteCommand> {
    vec![
        WriteCommand::IncrByFloat {
            key: b("f"),
            delta: FloatBits(-2.5),
        },
        WriteCommand::SetRange {
            key: b("r"),
            offset: 3,
            value: b("xyz"),
        },
        WriteCommand::SetBit {
            key: b("bits"),
            offset: 9,
            bit: true,
        },
        WriteCommand::Rename {
            key: b("r"),
            new_key: b("r2"),
            only_if_absent: false,
        },
        WriteCommand::Rename {
            key: b("r2"),
            new_key: b("r3"),
            only_if_absent: true,
        },
        WriteCommand::Copy {
            source: b("r3"),
            destination: b("c"),
            replace: true,
            db: None,
        },
    ]
}

fn reads() -> Vec<ReadCommand> {
    vec![
        ReadCommand::GetRange {
            key: b("c"),
            start: 2,
            end: -1,
        },
        ReadCommand::GetBit {
            key: b("bits"),
            offset: 9,
        },
        ReadCommand::BitCount {
            key: b("bits"),
            range: Some(BitRange {
                start: 0,
                end: -1,
                unit: BitUnit::Bit,
            }),
        },
        ReadCommand::Lcs {
            key1: b("c"),
            key2: b("r3"),
            form: LcsForm::Ranges {
                min_match_len: 1,
                with_match_len: true,
            },
        },
        ReadCommand::Type { key: b("c") },
        ReadCommand::Keys { pattern: b("r*") },
        ReadCommand::Scan(ScanArgs {
            cursor: 0,
            pattern: Some(b("[bc]*")),
            count: 10,
            types: TypeFilter::Any,
        }),
        ReadCommand::RandomKey,
    ]
}

#[test]
fn every_new_op_round_trips_and_every_cut_is_truncated() {
    for write in writes() {
        let entry = LogCommand::new(3, 4, T0, write);
        let encoded = entry.encode();
        assert_eq!(LogCommand::decode(&encoded), Ok(entry));
        assert_every_cut_is_truncated(&encoded);
    }
    let queued = reads().into_iter().map(QueuedCommand::Read).collect();
    let exec = LogCommand::new(3, 5, T0, LoggedCommand::Exec(queued));
    let encoded = exec.encode();
    assert_eq!(LogCommand::decode(&encoded), Ok(exec));
    assert_every_cut_is_truncated(&encoded);
}

#[test]
fn bodies_are_as_documented() {
    let body = |command: LoggedCommand| LogCommand::new(0, 0, 0, command).encode()[25..].to_vec();
    let setbit = WriteCommand::SetBit {
        key: b("k"),
        offset: 9,
        bit: true,
    };
    let mut expected = vec![66, 1, 0, 0, 0, b'k'];
    expected.extend_from_slice(&9u64.to_le_bytes());
    expected.push(1);
    assert_eq!(body(setbit.into()), expected);
    let scan = QueuedCommand::Read(ReadCommand::Scan(ScanArgs {
        cursor: 5,
        pattern: Some(b("a*")),
        count: 7,
        types: TypeFilter::Any,
    }));
    let mut expected = vec![7, 1, 0, 0, 0, 103];
    expected.extend_from_slice(&5u64.to_le_bytes());
    expected.extend_from_slice(&7u32.to_le_bytes());
    expected.extend_from_slice(&[1, 1, 2, 0, 0, 0, b'a', b'*']);
    assert_eq!(body(LoggedCommand::Exec(vec![scan])), expected);
}

#[test]
#[expect(clippy::too_many_lines)]
fn undecodable_variants_are_refused_and_apply_as_the_same_no_op() {
    let header = LogCommand::new(1, 1, T0, WriteCommand::FlushAll).encode()[..25].to_vec();
    let entry = |op: u8, body: &[u8]| {
        let mut e = header.clone();
        e.push(op);
        e.extend_from_slice(body);
        Bytes::from(e)
    };
    let exec_of = |op: u8, body: &[u8]| {
        let mut inner = vec![1, 0, 0, 0, op];
        inner.extend_from_slice(body);
        entry(7, &inner)
    };
    let key = [1, 0, 0, 0, b'k'];
    let with = |parts: &[&[u8]]| parts.concat();
    let zero = 0u64.to_le_bytes();
    let cases = [
        (
            entry(66, &with(&[&key, &zero, &[2]])),
            DecodeError::UnknownCode("SETBIT bit", 2),
        ),
        (
            entry(69, &with(&[&[2], &key, &key])),
            DecodeError::UnknownCode("COPY REPLACE flag", 2),
        ),
        (entry(74, &key), DecodeError::UnknownOp(74)),
        (entry(95, &key), DecodeError::UnknownOp(95)),
        (entry(96, &key), DecodeError::OnlyInExec(96)),
        (entry(127, &[]), DecodeError::OnlyInExec(127)),
        (exec_of(104, &[]), DecodeError::UnknownOp(104)),
        (
            exec_of(98, &with(&[&[0], &1i64.to_le_bytes(), &zero, &key])),
            DecodeError::UnknownCode("BITCOUNT range", 0),
        ),
        (
            exec_of(98, &with(&[&[3], &zero, &zero, &key])),
            DecodeError::UnknownCode("BITCOUNT range", 3),
        ),
        (
            exec_of(99, &with(&[&[1], &5u64.to_le_bytes(), &key, &key])),
            DecodeError::UnknownCode("LCS form", 1),
        ),
        (
            exec_of(99, &with(&[&[4], &zero, &key, &key])),
            DecodeError::UnknownCode("LCS form", 4),
        ),
        (
            exec_of(103, &with(&[&zero, &0u32.to_le_bytes(), &[1, 0]])),
            DecodeError::UnknownCode("SCAN count", 0),
        ),
        (
            exec_of(103, &with(&[&zero, &1u32.to_le_bytes(), &[9, 0]])),
            DecodeError::UnknownCode("SCAN type", 9),
        ),
        (
            exec_of(103, &with(&[&zero, &1u32.to_le_bytes(), &[1, 2]])),
            DecodeError::UnknownCode("SCAN pattern flag", 2),
        ),
    ];
    let mut replicas = [KvStateMachine::new(), KvStateMachine::new()];
    for sm in &mut replicas {
        sm.apply(1, &LogCommand::new(1, 1, T0, set("k", "v")).encode())
            .unwrap();
    }
    for (i, (bad, error)) in cases.into_iter().enumerate() {
        assert_eq!(LogCommand::decode(&bad), Err(error.clone()), "{error}");
        for sm in &mut replicas {
            let reply = sm.apply(i as u64 + 2, &bad).unwrap();
            assert_eq!(
                reply,
                ApplyReply::Write(WriteReply::Error(WriteError::UndecodableEntry))
            );
        }
    }
    assert_eq!(replicas[0], replicas[1]);
    assert_eq!(replicas[0].get(b"k"), Some(&b"v"[..]));
}

#[test]
fn new_reads_inside_exec_see_the_transactions_writes_and_relay_intact() {
    let mut log = Log::new();
    log.apply(set("r", "abc"));
    let mut queued: Vec<QueuedCommand> = writes().into_iter().map(QueuedCommand::Write).collect();
    queued.extend(reads().into_iter().map(QueuedCommand::Read));
    let reply = log.exec(queued);
    let ApplyReply::Exec(replies) = &reply else {
        panic!("an EXEC reply: {reply:?}")
    };
    let range = |a: i64, b: i64| Reply::Array(vec![Reply::Integer(a), Reply::Integer(b)]);
    let expected = [
        Reply::text("-2.5"),
        Reply::Integer(6),
        Reply::Integer(0),
        Reply::OK,
        Reply::Integer(1),
        Reply::Integer(1),
        Reply::text("cxyz"),
        Reply::Integer(1),
        Reply::Integer(1),
        Reply::Map(vec![
            (
                Reply::text("matches"),
                Reply::Array(vec![Reply::Array(vec![
                    range(0, 5),
                    range(0, 5),
                    Reply::Integer(6),
                ])]),
            ),
            (Reply::text("len"), Reply::Integer(6)),
        ]),
        Reply::simple("string"),
        Reply::Array(vec![Reply::text("r3")]),
    ];
    assert_eq!(&replies[..expected.len()], &expected[..]);
    let Reply::Array(scan) = &replies[expected.len()] else {
        panic!("SCAN answers an array")
    };
    assert_eq!(scan[0], Reply::text("0"));
    let Reply::Array(found) = &scan[1] else {
        panic!("and its keys")
    };
    assert_eq!(found.len(), 2, "bits and c: {found:?}");
    assert!(matches!(replies.last(), Some(Reply::Bulk(_))), "RANDOMKEY");
    // LCS IDX's ranges nest five deep in the EXEC reply, and relay intact.
    let mut relayed = Vec::new();
    reply.encode(&mut relayed);
    assert_eq!(ApplyReply::decode(&Bytes::from(relayed)), Some(reply));
}

#[test]
fn replicas_with_different_histories_agree_after_the_new_writes() {
    let mut stamps = [T0, T0 + 30, T0 - 10, T0 + 60].into_iter().cycle();
    let entries: Vec<Bytes> = (0..90u64)
        .map(|i| {
            let key = |n: u64| b(&format!("k{}", (i + n) % 5));
            let command: LoggedCommand = match i % 9 {
                0 => set_px(&format!("k{}", i % 5), "1.5", 40).into(),
                1 => WriteCommand::IncrByFloat {
                    key: key(1),
                    delta: FloatBits(0.25),
                }
                .into(),
                2 => WriteCommand::SetRange {
                    key: key(2),
                    offset: i % 4,
                    value: b("ab"),
                }
                .into(),
                3 => WriteCommand::SetBit {
                    key: key(3),
                    offset: i % 17,
                    bit: i % 2 == 0,
                }
                .into(),
                4 => WriteCommand::Rename {
                    key: key(0),
                    new_key: key(4),
                    only_if_absent: i % 2 == 0,
                }
                .into(),
                5 => WriteCommand::Copy {
                    source: key(1),
                    destination: key(3),
                    replace: i % 3 == 0,
                    db: None,
                }
                .into(),
                6 => LoggedCommand::Tick(vec![b("k0"), b("k1"), b("k2"), b("k3"), b("k4")]),
                7 => LoggedCommand::Exec(vec![
                    QueuedCommand::Read(ReadCommand::Keys { pattern: b("*") }),
                    QueuedCommand::Write(WriteCommand::Del { keys: vec![key(2)] }),
                ]),
                _ => WriteCommand::IncrByFloat {
                    key: key(4),
                    delta: FloatBits(1e300),
                }
                .into(),
            };
            let tick = matches!(command, LoggedCommand::Tick(_));
            let (client, seq) = if tick { (0, 0) } else { (1, i + 1) };
            LogCommand::new(client, seq, stamps.next().unwrap(), command).encode()
        })
        .collect();
    let full = assert_replicas_agree(&entries, |i| i % 20 == 7);
    assert!(!full.is_empty());
}
