//! The peer wire format (keel-transport's `wire`): `peer_frame`, `handshake` and `snapshot_chunk`.

use bytes::Bytes;
use keel_core::LogId;
use keel_engine::handshake::{Admission, ConfigurationChange, HandshakeGate, PeerHello};
use keel_transport::wire::{
    self, auth, decode_body, decode_frame, Body, Challenge, Channel, ClusterSecret, Handshake,
    Reassembly, Response, SnapshotOffer, FRAME_HEADER_SIZE_BYTES, FRAME_SIZE_BYTES_MAX_DEFAULT,
    SNAPSHOT_CHUNK_BYTES_LIMIT, SNAPSHOT_CONTROL_FRAME_BYTES_MAX,
};
use keel_wal::{Fs, SimFs};

use crate::Input;

/// Frames decoded from one input at most.
const FRAMES_MAX: usize = 64;

/// `peer_frame`: a message connection's byte stream after the handshake, split into frames as
/// the transport reads it (length checked against the bound first, then the checksum, then the
/// body). The first byte picks the bound (the default, or a small one). Every frame that decodes
/// is encoded again and must come back identical, byte for byte.
pub fn peer_frame(data: &[u8]) {
    let mut input = Input::new(data);
    let bytes_max = if input.bool() {
        FRAME_SIZE_BYTES_MAX_DEFAULT
    } else {
        256
    };
    let mut buf = Bytes::copy_from_slice(input.rest());
    // Parts of a message are put back together as a message connection does.
    let mut reassembly = Reassembly::default();
    for _ in 0..FRAMES_MAX {
        match decode_frame(&buf, bytes_max) {
            Ok(Some((body, used))) => {
                assert!(used >= FRAME_HEADER_SIZE_BYTES && used <= buf.len());
                check_body(&body, &buf[..used]);
                if let Body::MessagePart(part) = body {
                    match reassembly.add(part, MESSAGE_BYTES_MAX) {
                        Ok(Some(whole)) => check_reassembled(whole),
                        Ok(None) => {}
                        Err(_) => return, // the connection would close
                    }
                }
                buf = buf.slice(used..);
            }
            Ok(None) | Err(_) => return,
        }
    }
}

/// The receiver's message bound in this target: small, so that the fuzzer reaches it.
const MESSAGE_BYTES_MAX: u32 = 4096;

/// A reassembled body that decodes is a message that encodes back to the same body.
fn check_reassembled(whole: Bytes) {
    assert!(whole.len() <= MESSAGE_BYTES_MAX as usize);
    if let Ok(Body::Message(group, m)) = wire::decode_body(whole.clone()) {
        let mut out = Vec::new();
        wire::encode_message(group, &m, &mut out);
        assert_eq!(
            &out[FRAME_HEADER_SIZE_BYTES..],
            &whole[..],
            "a message changed in a reassembly round trip"
        );
    }
}

/// Whatever a decoded body says must be safe to ask, and it must encode back to `frame`.
fn check_body(body: &Body, frame: &[u8]) {
    if let Body::Handshake(h) = body {
        inspect_handshake(h);
    }
    let Some(encoded) = encode_body(body) else {
        return;
    };
    assert_eq!(
        encoded, frame,
        "a frame changed in a decode/encode round trip"
    );
}

/// The frame the runtime writes for `body` (`None` for a snapshot chunk header: its encoder is
/// checked by `snapshot_chunk`).
fn encode_body(body: &Body) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match body {
        Body::Handshake(h) => wire::encode_handshake(h, &mut out),
        Body::Message(group, m) => wire::encode_message(*group, m, &mut out),
        Body::SnapshotOffer(o) => wire::encode_offer(o, &mut out),
        Body::SnapshotPosition(p) => wire::encode_position(p, &mut out),
        Body::SnapshotChunk(h) => wire::encode_chunk_header(h, &mut out),
        Body::SnapshotAck(a) => wire::encode_ack(a, &mut out),
        Body::Refusal(reason) => wire::encode_refusal(reason, &mut out),
        Body::AuthChallenge(c) => wire::encode_challenge(c, &mut out),
        Body::AuthResponse(r) => wire::encode_response(r, &mut out),
        // A sender writes parts only through `OutgoingParts`; the reassembled message is checked.
        Body::MessagePart(_) => return None,
        Body::NodeMessage(m) => wire::encode_node_message(m, &mut out),
    }
    Some(out)
}

/// Everything the transport asks of a received handshake.
fn inspect_handshake(h: &Handshake) {
    let _ = h.check_required_flags();
    // The gate's decisions over what the handshake announced (in memory, a member seen before
    // under another incarnation).
    if let (Ok(incarnation), Ok(advertised_addr), Ok(client_addr)) =
        (h.incarnation(), h.advertised_addr(), h.client_addr())
    {
        let mut gate = HandshakeGate::load(7, 1, SimFs::new(), None).expect("in memory");
        gate.configuration_changed(&ConfigurationChange {
            departed: Vec::new(),
            members: [1, 2, 3].into_iter().collect(),
            history_skipped: false,
        });
        gate.hears(2, 5);
        let hello = PeerHello {
            cluster_id: h.cluster_id,
            node_id: h.node_id,
            incarnation,
            advertised_addr,
            client_addr,
        };
        if let Ok(admitted) = gate.admit(&hello) {
            assert!(h.cluster_id == 7, "another cluster admitted");
            assert!(h.node_id != 2 || incarnation.is_none_or(|i| i == 5));
            assert!(h.node_id != 1 || admitted == Admission::default());
        }
    }
    let _ = h.advertised_addr();
    let _ = h.incarnation();
    let _ = h.nonce();
    if let Ok(Some(addr)) = h.client_addr() {
        assert!(wire::valid_client_addr(&addr));
        // A client address that passed the check can be announced again.
        let _ = Handshake::new(1, 1, Channel::Messages).with_client_addr(&addr);
    }
}

/// `handshake`: the first frames of a connection, on both sides, with authentication. The
/// input is split in records `[kind, len: u16, bytes]`:
///
/// - kind 0: a handshake body as the accepting side receives it: decoded, inspected, and if it
///   asks to authenticate, answered with a challenge (`Responder::new`); a later kind-2 record
///   is the initiator's response, whose proof must never verify (the input cannot know the
///   secret);
/// - kind 1: a challenge body as the connecting side receives it: a forged proof must never
///   verify (`Initiator::on_challenge`);
/// - kind 3: a record header and payload on an authenticated connection: the length bound and
///   the tag check (a forged tag must never open).
#[expect(clippy::too_many_lines)]
pub fn handshake(data: &[u8]) {
    let mut input = Input::new(data);
    let secret = ClusterSecret::new(&[0x5a; auth::SECRET_BYTES_MIN]).expect("valid secret");
    let mut responder = None;
    let mut record_key = None;
    for _ in 0..FRAMES_MAX {
        if input.is_empty() {
            return;
        }
        let kind = input.below(4);
        let len = usize::from(input.u16());
        let bytes = input.bytes(len);
        match kind {
            0 => {
                responder = None;
                let Ok(Body::Handshake(hello)) = decode_body(Bytes::copy_from_slice(bytes)) else {
                    continue;
                };
                inspect_handshake(&hello);
                let mut framed = Vec::new();
                wire::encode_handshake(&hello, &mut framed);
                assert_eq!(
                    &framed[FRAME_HEADER_SIZE_BYTES..],
                    bytes,
                    "handshake round trip"
                );
                if hello.check_required_flags().is_err() {
                    continue;
                }
                responder = auth::Responder::new(secret.clone(), &hello, bytes, 2, [3; 32]).ok();
            }
            1 => {
                let Ok(Body::AuthChallenge(c)) = decode_body(Bytes::copy_from_slice(bytes)) else {
                    continue;
                };
                let initiator = auth::Initiator::new(
                    secret.clone(),
                    Handshake::new(9, 1, Channel::Messages),
                    [1; 32],
                    c.responder,
                );
                assert!(
                    initiator.on_challenge(&c).is_err(),
                    "a forged challenge proof verified"
                );
                round_trip_challenge(&c);
            }
            2 => {
                let Ok(Body::AuthResponse(r)) = decode_body(Bytes::copy_from_slice(bytes)) else {
                    continue;
                };
                if let Some(resp) = &responder {
                    assert!(
                        resp.on_response(&r).is_err(),
                        "a forged response proof verified"
                    );
                }
                let mut out = Vec::new();
                wire::encode_response(&r, &mut out);
                assert_eq!(&out[FRAME_HEADER_SIZE_BYTES..], bytes);
            }
            _ => {
                let mut header = [0u8; auth::RECORD_HEADER_BYTES];
                let n = bytes.len().min(header.len());
                header[..n].copy_from_slice(&bytes[..n]);
                let payload = &bytes[n..];
                if let Ok((record_len, tag)) = auth::parse_record_header(&header, 1 << 16) {
                    assert!(record_len <= 1 << 16);
                    // A session key only exists after a verified response, which the input
                    // cannot produce: take one from an honest exchange; forged tags must fail.
                    let key = record_key.get_or_insert_with(|| honest_session().to_responder);
                    assert!(
                        key.open(payload, &tag).is_err(),
                        "a forged record tag opened"
                    );
                }
            }
        }
    }
}

fn round_trip_challenge(c: &Challenge) {
    let mut out = Vec::new();
    wire::encode_challenge(c, &mut out);
    match decode_frame(&Bytes::from(out), FRAME_SIZE_BYTES_MAX_DEFAULT) {
        Ok(Some((Body::AuthChallenge(again), _))) => assert_eq!(&again, c),
        other => panic!("challenge round trip: {other:?}"),
    }
}

/// Session keys from a complete honest exchange (the record target's keys).
fn honest_session() -> auth::SessionKeys {
    let secret = ClusterSecret::new(&[0x5a; auth::SECRET_BYTES_MIN]).expect("valid secret");
    let initiator = auth::Initiator::new(
        secret.clone(),
        Handshake::new(9, 1, Channel::Messages),
        [1; 32],
        2,
    );
    let hello = match decode_body(Bytes::copy_from_slice(initiator.hello_body())) {
        Ok(Body::Handshake(h)) => h,
        other => panic!("own handshake: {other:?}"),
    };
    let responder = auth::Responder::new(secret, &hello, initiator.hello_body(), 2, [3; 32])
        .expect("honest handshake");
    let (response, keys) = initiator
        .on_challenge(responder.challenge())
        .expect("honest challenge");
    let _: Response = response;
    keys
}

/// `snapshot_chunk`: the receiving side of a snapshot connection. Control frames are read with
/// the snapshot channel's small bound; a chunk header's data (its `len_bytes`, refused above the
/// chunk limit before anything is read) follows it in the stream and is checked against its
/// CRC32C. Chunks that continue the transfer at the offset held are assembled; once a final
/// chunk arrives, the assembled file is verified as a snapshot file of the offered position
/// (`keel_wal::snapshot::verify_snapshot`, what a receiver runs before the node hears of it)
/// and, if it verifies, read back.
pub fn snapshot_chunk(data: &[u8]) {
    let mut buf = Bytes::copy_from_slice(data);
    let mut offer: Option<SnapshotOffer> = None;
    let mut assembled: Vec<u8> = Vec::new();
    let mut crc = 0u32;
    for _ in 0..FRAMES_MAX {
        let (body, used) = match decode_frame(&buf, SNAPSHOT_CONTROL_FRAME_BYTES_MAX) {
            Ok(Some(decoded)) => decoded,
            Ok(None) | Err(_) => return,
        };
        check_body(&body, &buf[..used]);
        buf = buf.slice(used..);
        match body {
            Body::SnapshotOffer(o) => {
                offer = Some(o);
                assembled.clear();
                crc = 0;
            }
            Body::SnapshotChunk(h) => {
                let Some(o) = offer else { return };
                if !h.id.same_snapshot(&o.id) || h.len_bytes > SNAPSHOT_CHUNK_BYTES_LIMIT {
                    return;
                }
                let len = h.len_bytes as usize;
                if buf.len() < len {
                    return;
                }
                let chunk = buf.slice(..len);
                buf = buf.slice(len..);
                if crc32c::crc32c(&chunk) != h.crc || h.offset != assembled.len() as u64 {
                    continue; // refused: the sender resends from the offset held
                }
                let end = h.offset + len as u64;
                if end > o.total_len_bytes || h.last.is_some() != (end == o.total_len_bytes) {
                    return;
                }
                assembled.extend_from_slice(&chunk);
                crc = crc32c::crc32c_append(crc, &chunk);
                if let Some((total, whole_crc)) = h.last {
                    if total == o.total_len_bytes && whole_crc == crc {
                        verify_assembled(&assembled, LogId::new(o.id.term, o.id.index));
                    }
                    return;
                }
            }
            _ => {}
        }
    }
}

/// The complete file, as the receiver checks it before handing it to the node.
fn verify_assembled(file: &[u8], position: LogId) {
    let fs = SimFs::new();
    let path = std::path::Path::new("/snap/received.snap");
    fs.create_dir_all(std::path::Path::new("/snap"))
        .expect("mkdir");
    let mut f = fs.create(path).expect("create");
    keel_wal::FileHandle::write_at(&mut f, file, 0).expect("write");
    let Ok(verified) = keel_wal::snapshot::verify_snapshot(&fs, path) else {
        return;
    };
    if verified.meta.last != position {
        return; // refused: a snapshot of another position
    }
    let data = keel_wal::snapshot::read_snapshot_data(&fs, &verified, u64::MAX);
    assert!(
        data.is_ok(),
        "a verified snapshot file does not read back: {data:?}"
    );
}
