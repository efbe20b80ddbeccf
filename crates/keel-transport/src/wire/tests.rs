use std::sync::Arc;

use bytes::Bytes;
use keel_core::{
    AppendResult, Entry, EntryPayload, FollowerClock, LeaderClock, LogId, Membership, Message,
    MessageBody, RepairAnswer, SnapshotMeta,
};
use proptest::collection::{btree_set, vec};
use proptest::prelude::*;

use super::*;

fn log_id() -> impl Strategy<Value = LogId> {
    (any::<u64>(), any::<u64>()).prop_map(|(t, i)| LogId::new(t, i))
}

fn membership() -> impl Strategy<Value = Membership> {
    (
        btree_set(1u64..20, 0..5),
        btree_set(1u64..20, 0..5),
        btree_set(1u64..20, 0..3),
    )
        .prop_map(|(voters, outgoing, learners)| Membership {
            voters,
            outgoing,
            learners,
        })
}

fn entry() -> impl Strategy<Value = Entry> {
    let payload = prop_oneof![
        Just(EntryPayload::Noop),
        vec(any::<u8>(), 0..64).prop_map(|d| EntryPayload::Normal(Bytes::from(d))),
        membership().prop_map(|m| EntryPayload::Membership(Arc::new(m))),
    ];
    (any::<u64>(), any::<u64>(), payload).prop_map(|(term, index, payload)| Entry {
        term,
        index,
        payload,
    })
}

fn meta() -> impl Strategy<Value = SnapshotMeta> {
    (log_id(), membership(), vec(log_id(), 0..5)).prop_map(|(last, m, term_history)| SnapshotMeta {
        last,
        membership: Arc::new(m),
        term_history,
    })
}

#[expect(clippy::too_many_lines)]
fn body() -> impl Strategy<Value = MessageBody> {
    prop_oneof![
        log_id().prop_map(|last_log_id| MessageBody::PreVote { last_log_id }),
        any::<bool>().prop_map(|granted| MessageBody::PreVoteResponse { granted }),
        (log_id(), any::<bool>()).prop_map(|(last_log_id, transfer)| MessageBody::RequestVote {
            last_log_id,
            transfer
        }),
        any::<bool>().prop_map(|granted| MessageBody::VoteResponse { granted }),
        (log_id(), vec(entry(), 0..6), any::<u64>()).prop_map(|(prev, entries, commit)| {
            MessageBody::Append {
                prev,
                entries,
                commit,
            }
        }),
        any::<u64>().prop_map(
            |match_index| MessageBody::AppendResponse(AppendResult::Success { match_index })
        ),
        (
            any::<u64>(),
            proptest::option::of(any::<u64>()),
            any::<u64>()
        )
            .prop_map(
                |(rejected, hint_term, hint_index)| MessageBody::AppendResponse(
                    AppendResult::Conflict {
                        rejected,
                        hint_term,
                        hint_index
                    }
                )
            ),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<Option<i64>>()
        )
            .prop_map(|(commit, read_round, sent_at_ms, your_offset_ms)| {
                MessageBody::Heartbeat {
                    commit,
                    read_round,
                    clock: LeaderClock {
                        sent_at_ms,
                        your_offset_ms,
                    },
                }
            }),
        (any::<u64>(), any::<bool>(), any::<u64>(), any::<u64>()).prop_map(
            |(read_round, lagging, echo_sent_at_ms, answered_at_ms)| {
                MessageBody::HeartbeatResponse {
                    read_round,
                    lagging,
                    clock: FollowerClock {
                        echo_sent_at_ms,
                        answered_at_ms,
                    },
                }
            }
        ),
        Just(MessageBody::TimeoutNow),
        meta().prop_map(|meta| MessageBody::InstallSnapshot { meta }),
        (log_id(), log_id(), vec(log_id(), 0..5), any::<bool>()).prop_map(
            |(promised, last, terms, holds_last)| MessageBody::RepairRequest {
                promised,
                last,
                terms,
                holds_last,
            }
        ),
        (log_id(), vec(entry(), 0..4)).prop_map(|(prev, entries)| {
            MessageBody::RepairResponse(RepairAnswer::Entries { prev, entries })
        }),
        log_id().prop_map(|after| MessageBody::RepairResponse(RepairAnswer::Lacks { after })),
        Just(MessageBody::RepairResponse(RepairAnswer::Unknown)),
        (log_id(), membership()).prop_map(|(through, config)| {
            MessageBody::RepairResponse(RepairAnswer::Committed { through, config })
        }),
        (log_id(), log_id(), membership()).prop_map(|(after, through, config)| {
            MessageBody::RepairResponse(RepairAnswer::Holds {
                after,
                through,
                config,
            })
        }),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (1u64..u64::MAX, 1u64..u64::MAX, any::<u64>(), body()).prop_map(|(from, to, term, body)| {
        Message {
            from,
            to,
            term,
            body,
        }
    })
}

fn decode_one(buf: Vec<u8>) -> Result<Option<(Body, usize)>, WireError> {
    decode_frame(&Bytes::from(buf), FRAME_SIZE_BYTES_MAX_DEFAULT)
}

proptest! {
    #[test]
    fn every_message_round_trips(msg in message(), group in any::<u64>()) {
        let mut buf = Vec::new();
        encode_message(group, &msg, &mut buf);
        let len = buf.len();
        let (body, used) = decode_one(buf).unwrap().unwrap();
        prop_assert_eq!(used, len);
        prop_assert_eq!(body, Body::Message(group, msg));
    }

    #[test]
    fn snapshot_channel_frames_round_trip(
        leader_term in any::<u64>(), index in any::<u64>(), term in any::<u64>(),
        offset in any::<u64>(), len_bytes in any::<u32>(), crc in any::<u32>(),
        last in proptest::option::of((any::<u64>(), any::<u32>())), status in 0u8..4,
        group in any::<u64>(),
    ) {
        let id = SnapshotId { leader_term, index, term };
        let offer = SnapshotOffer {
            version: SNAPSHOT_CHANNEL_VERSION, group, id, total_len_bytes: offset,
        };
        let position = SnapshotPosition {
            index, term, status: PositionStatus::RefusedStale, offset,
        };
        let chunk = ChunkHeader { id, offset, len_bytes, crc, last };
        let ack = SnapshotAck {
            index,
            term,
            status: [AckStatus::Accepted, AckStatus::Resend, AckStatus::Complete, AckStatus::Failed]
                [status as usize],
            received: offset,
            durable: offset / 2,
        };
        let mut buf = Vec::new();
        encode_offer(&offer, &mut buf);
        encode_position(&position, &mut buf);
        encode_chunk_header(&chunk, &mut buf);
        encode_ack(&ack, &mut buf);
        let mut buf = Bytes::from(buf);
        let mut bodies = Vec::new();
        while let Some((body, used)) = decode_frame(&buf, SNAPSHOT_CONTROL_FRAME_BYTES_MAX).unwrap() {
            bodies.push(body);
            buf = buf.slice(used..);
        }
        prop_assert_eq!(bodies, vec![
            Body::SnapshotOffer(offer),
            Body::SnapshotPosition(position),
            Body::SnapshotChunk(chunk),
            Body::SnapshotAck(ack),
        ]);
    }

    /// Any flipped bit in a frame is refused (the CRC covers the body; a flipped length either
    /// exceeds the bound, leaves the frame incomplete, or moves the checksummed range).
    #[test]
    fn every_bit_flip_is_rejected(msg in message(), bit in any::<prop::sample::Index>()) {
        let mut buf = Vec::new();
        encode_message(0, &msg, &mut buf);
        let at = bit.index(buf.len() * 8);
        buf[at / 8] ^= 1 << (at % 8);
        let decoded = decode_one(buf);
        prop_assert!(!matches!(decoded, Ok(Some((Body::Message(_, ref m), _))) if *m == msg));
        prop_assert!(!matches!(decoded, Ok(Some(_))), "corrupt frame accepted: {:?}", decoded);
    }

    /// Every prefix of a frame is "incomplete", never an error nor a message.
    #[test]
    fn truncated_frames_wait_for_more(msg in message(), cut in any::<prop::sample::Index>()) {
        let mut buf = Vec::new();
        encode_message(0, &msg, &mut buf);
        let cut = cut.index(buf.len());
        buf.truncate(cut);
        prop_assert_eq!(decode_one(buf), Ok(None));
    }

    /// Arbitrary bytes never panic the decoder.
    #[test]
    fn garbage_never_panics(data in vec(any::<u8>(), 0..200)) {
        let _ = decode_one(data.clone());
        let _ = decode_body(Bytes::from(data));
    }
}

/// A body whose CRC is right but whose content is truncated inside reports what was cut.
#[test]
fn truncated_body_with_valid_crc_is_typed() {
    let msg = Message {
        from: 1,
        to: 2,
        term: 3,
        body: MessageBody::Heartbeat {
            commit: 4,
            read_round: 5,
            clock: Default::default(),
        },
    };
    let mut body = vec![BODY_MESSAGE];
    body.extend_from_slice(&0u64.to_le_bytes()); // the group
    encode_message_fields(&msg, &mut body);
    body.truncate(body.len() - 3);
    assert!(matches!(
        decode_body(Bytes::from(body)),
        Err(WireError::Truncated {
            what: "offset",
            needed: 3
        })
    ));
}

#[test]
fn unknown_tags_and_trailing_bytes_are_refused() {
    assert_eq!(
        decode_body(Bytes::from_static(&[13])),
        Err(WireError::UnknownTag {
            what: "body",
            tag: 13
        })
    );
    let mut body = vec![BODY_MESSAGE];
    body.extend_from_slice(&0u64.to_le_bytes()); // the group
    body.extend_from_slice(&1u64.to_le_bytes());
    body.extend_from_slice(&2u64.to_le_bytes());
    body.extend_from_slice(&3u64.to_le_bytes());
    body.push(77);
    assert_eq!(
        decode_body(Bytes::from(body.clone())),
        Err(WireError::UnknownTag {
            what: "message",
            tag: 77
        })
    );
    body.pop();
    body.push(9); // TimeoutNow
    body.push(0);
    assert_eq!(
        decode_body(Bytes::from(body)),
        Err(WireError::TrailingBytes(1))
    );
}

#[test]
fn oversize_is_rejected_from_the_header_alone() {
    // Only the 8-byte header exists: the bound is checked before the body could be read or
    // allocated.
    let mut header = Vec::new();
    header.extend_from_slice(&(u32::MAX).to_le_bytes());
    header.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        decode_frame(&Bytes::from(header.clone()), 1024),
        Err(WireError::Oversize {
            len_bytes: u32::MAX as u64,
            bytes_max: 1024
        })
    );
    let h: [u8; 8] = header.try_into().unwrap();
    assert!(FrameHeader::parse(h, 1024).is_err());
}

#[test]
fn hostile_counts_do_not_allocate() {
    // An Append claiming 2^32 - 1 entries in a tiny body.
    let mut body = vec![BODY_MESSAGE];
    body.extend_from_slice(&0u64.to_le_bytes()); // the group
    for v in [1u64, 2, 3] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.push(5);
    body.extend_from_slice(&[0u8; 24]);
    body.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_body(Bytes::from(body)),
        Err(WireError::Truncated {
            what: "entries",
            ..
        })
    ));
}

#[test]
fn handshake_round_trips_and_is_validated() {
    let mut h = Handshake::new(0xC1, 7, Channel::Snapshot);
    h.extension = Bytes::from_static(b"future auth");
    let mut buf = Vec::new();
    encode_handshake(&h, &mut buf);
    let (body, _) = decode_one(buf).unwrap().unwrap();
    assert_eq!(body, Body::Handshake(h.clone()));
    assert_eq!(h.check_required_flags(), Ok(()));
    // (The cluster id is keel-engine's handshake gate's to check.)
    // An optional flag is ignored; a required one this build lacks is refused.
    h.flags = 1 << 20;
    assert_eq!(h.check_required_flags(), Ok(()));
    h.flags = FLAG_CHUNKED_SNAPSHOT;
    assert_eq!(h.check_required_flags(), Ok(()));
    h.flags = FLAG_CHUNKED_SNAPSHOT | FLAG_AUTHENTICATED;
    assert_eq!(h.check_required_flags(), Ok(()));
    h.flags = 1 << 2;
    assert_eq!(
        h.check_required_flags(),
        Err(WireError::UnknownRequiredFlags(4))
    );
}

#[test]
fn a_later_snapshot_channel_version_is_refused_before_the_rest_is_read() {
    let offer = SnapshotOffer {
        version: SNAPSHOT_CHANNEL_VERSION,
        group: 0,
        id: SnapshotId {
            leader_term: 1,
            index: 2,
            term: 1,
        },
        total_len_bytes: 10,
    };
    let mut buf = Vec::new();
    encode_offer(&offer, &mut buf);
    let mut body = buf[FRAME_HEADER_SIZE_BYTES..].to_vec();
    assert_eq!(body.len(), 43);
    let later = SNAPSHOT_CHANNEL_VERSION + 1;
    body[1..3].copy_from_slice(&later.to_le_bytes());
    assert_eq!(
        decode_body(Bytes::from(body)),
        Err(WireError::UnsupportedVersion {
            got: later,
            supported: SNAPSHOT_CHANNEL_VERSION
        })
    );
    // Body sizes as documented: chunk header 42 bytes, 54 for the final chunk.
    for (last, size) in [(None, 42), (Some((10, 7)), 54)] {
        let mut buf = Vec::new();
        let header = ChunkHeader {
            id: offer.id,
            offset: 0,
            len_bytes: 10,
            crc: 0,
            last,
        };
        encode_chunk_header(&header, &mut buf);
        assert_eq!(buf.len() - FRAME_HEADER_SIZE_BYTES, size);
    }
    // The retired one-frame snapshot body is refused.
    assert!(matches!(
        decode_body(Bytes::from_static(&[3, 0, 0])),
        Err(WireError::UnknownTag {
            what: "body",
            tag: 3
        })
    ));
}

#[test]
fn wrong_version_and_magic_are_refused_with_a_reason() {
    let h = Handshake::new(1, 2, Channel::Messages);
    let mut body = Vec::new();
    h.encode_body(&mut body);
    let next = PROTOCOL_VERSION + 1;
    let mut newer = body.clone();
    newer[5..7].copy_from_slice(&next.to_le_bytes());
    let err = decode_body(Bytes::from(newer)).unwrap_err();
    assert_eq!(
        err,
        WireError::UnsupportedVersion {
            got: next,
            supported: PROTOCOL_VERSION
        }
    );
    assert!(err
        .to_string()
        .contains(&format!("unsupported protocol version {next}")));
    let mut bad = body.clone();
    bad[1] = b'X';
    assert!(matches!(
        decode_body(Bytes::from(bad)),
        Err(WireError::BadMagic(_))
    ));
}

#[test]
fn invalid_bool_is_refused() {
    let msg = Message {
        from: 1,
        to: 2,
        term: 3,
        body: MessageBody::VoteResponse { granted: true },
    };
    let mut body = vec![BODY_MESSAGE];
    body.extend_from_slice(&0u64.to_le_bytes()); // the group
    encode_message_fields(&msg, &mut body);
    *body.last_mut().unwrap() = 2;
    assert!(matches!(
        decode_body(Bytes::from(body)),
        Err(WireError::Invalid(_))
    ));
}

#[test]
fn advertised_address_round_trips_and_unknown_records_are_skipped() {
    let addr: std::net::SocketAddr = "10.1.2.3:7379".parse().unwrap();
    let h = Handshake::new(1, 4, Channel::Messages).with_advertised_addr(addr);
    let mut buf = Vec::new();
    encode_handshake(&h, &mut buf);
    let Some((Body::Handshake(back), _)) = decode_one(buf).unwrap() else {
        panic!("not a handshake");
    };
    assert_eq!(back.advertised_addr().unwrap(), Some(addr));
    back.check_required_flags()
        .expect("an optional flag never refuses");

    // A record of a type this build does not know, before the address: skipped.
    let mut records = vec![200u8, 3, 0, b'x', b'y', b'z'];
    records.extend_from_slice(&h.extension);
    let mut with_unknown = h.clone();
    with_unknown.extension = Bytes::from(records);
    assert_eq!(with_unknown.advertised_addr().unwrap(), Some(addr));

    // Without the flag the extension is opaque: nothing is read from it.
    let mut opaque = h.clone();
    opaque.flags &= !FLAG_EXTENSION_RECORDS;
    assert_eq!(opaque.advertised_addr().unwrap(), None);
}

#[test]
fn malformed_extension_records_are_refused() {
    let addr: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
    let good = Handshake::new(1, 4, Channel::Messages).with_advertised_addr(addr);
    let mut truncated = good.clone();
    truncated.extension = good.extension.slice(..good.extension.len() - 1);
    assert!(truncated.advertised_addr().is_err());
    let mut not_an_address = good.clone();
    not_an_address.extension = Bytes::from_static(&[1, 4, 0, b'n', b'o', b'p', b'e']);
    assert!(not_an_address.advertised_addr().is_err());
}

#[test]
fn incarnation_round_trips_beside_the_advertised_address() {
    let addr: std::net::SocketAddr = "10.0.0.9:7379".parse().unwrap();
    let h = Handshake::new(1, 2, Channel::Messages)
        .with_incarnation(0xDEAD_BEEF_1234)
        .with_advertised_addr(addr);
    let mut buf = Vec::new();
    encode_handshake(&h, &mut buf);
    let Some((Body::Handshake(back), _)) = decode_one(buf).unwrap() else {
        panic!("not a handshake");
    };
    assert_eq!(back.incarnation().unwrap(), Some(0xDEAD_BEEF_1234));
    assert_eq!(back.advertised_addr().unwrap(), Some(addr));
    assert_eq!(
        Handshake::new(1, 2, Channel::Messages)
            .incarnation()
            .unwrap(),
        None
    );
    let mut short = h.clone();
    short.extension = Bytes::from_static(&[2, 4, 0, 1, 2, 3, 4]);
    assert!(short.incarnation().is_err(), "an incarnation is 8 bytes");
}

#[test]
fn client_address_round_trips_beside_the_others_and_is_checked() {
    let addr: std::net::SocketAddr = "10.0.0.9:7379".parse().unwrap();
    for client in ["node-1.example.com:6379", "10.0.0.9:6379", "[::1]:6379"] {
        let h = Handshake::new(1, 2, Channel::Messages)
            .with_incarnation(7)
            .with_client_addr(client)
            .with_advertised_addr(addr);
        let mut buf = Vec::new();
        encode_handshake(&h, &mut buf);
        let Some((Body::Handshake(back), _)) = decode_one(buf).unwrap() else {
            panic!("not a handshake");
        };
        assert_eq!(back.client_addr().unwrap().as_deref(), Some(client));
        assert_eq!(back.advertised_addr().unwrap(), Some(addr));
        assert_eq!(back.incarnation().unwrap(), Some(7));
    }
    assert_eq!(
        Handshake::new(1, 2, Channel::Messages)
            .client_addr()
            .unwrap(),
        None
    );
    // What a hostile or broken peer could announce instead is refused, not learned.
    let long = format!("{}:1", "h".repeat(CLIENT_ADDR_BYTES_MAX));
    for bad in [
        "",
        "no-port",
        "host:",
        "host:65536",
        "ho st:1",
        ":6379",
        "h\u{e9}:1",
        &long,
    ] {
        assert!(!valid_client_addr(bad), "{bad:?}");
        let mut h = Handshake::new(1, 2, Channel::Messages);
        let mut records = vec![RECORD_CLIENT_ADDR];
        records.extend_from_slice(&(bad.len() as u16).to_le_bytes());
        records.extend_from_slice(bad.as_bytes());
        h.extension = Bytes::from(records);
        h.flags |= FLAG_EXTENSION_RECORDS;
        assert!(h.client_addr().is_err(), "{bad:?}");
    }
}

#[test]
fn refusals_round_trip_bounded_and_utf8() {
    let mut buf = Vec::new();
    encode_refusal("node 3 came back with other storage", &mut buf);
    let len = buf.len();
    assert_eq!(
        decode_one(buf),
        Ok(Some((
            Body::Refusal("node 3 came back with other storage".into()),
            len
        )))
    );
    // A long reason is cut at a character boundary, within the bound.
    let long = "é".repeat(REFUSAL_REASON_BYTES_MAX);
    let mut buf = Vec::new();
    encode_refusal(&long, &mut buf);
    match decode_one(buf) {
        Ok(Some((Body::Refusal(reason), _))) => {
            assert_eq!(reason.len(), REFUSAL_REASON_BYTES_MAX);
            assert!(long.starts_with(&reason));
        }
        other => panic!("unexpected {other:?}"),
    }
    // Not UTF-8, and longer than the bound: refused, each with its reason.
    for (body, what) in [
        (vec![BODY_REFUSAL, 2, 0, 0xff, 0xfe], "not UTF-8"),
        (
            [
                &[BODY_REFUSAL][..],
                &(REFUSAL_REASON_BYTES_MAX as u16 + 1).to_le_bytes(),
            ]
            .concat(),
            "too long",
        ),
    ] {
        let mut frame = Vec::new();
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        frame.extend_from_slice(&body);
        match decode_one(frame) {
            Err(WireError::Invalid(why)) => assert!(why.contains(what), "{why}"),
            other => panic!("{what}: unexpected {other:?}"),
        }
    }
}

#[test]
fn a_node_message_round_trips_and_one_past_its_bound_is_refused() {
    for len in [0, 1, NODE_MESSAGE_BYTES_MAX] {
        let message = vec![0x5A; len];
        let mut out = Vec::new();
        encode_node_message(&message, &mut out);
        let (body, used) = decode_frame(&Bytes::from(out.clone()), FRAME_SIZE_BYTES_MAX_DEFAULT)
            .unwrap()
            .unwrap();
        assert_eq!(
            (body, used),
            (Body::NodeMessage(Bytes::from(message)), out.len())
        );
    }
    let mut body = vec![BODY_NODE_MESSAGE];
    body.extend(std::iter::repeat_n(0, NODE_MESSAGE_BYTES_MAX + 1));
    assert!(matches!(
        decode_body(Bytes::from(body)),
        Err(WireError::Oversize { .. })
    ));
}
