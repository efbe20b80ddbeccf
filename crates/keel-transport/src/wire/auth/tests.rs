//! The authentication exchange and the record layer without sockets: what each check refuses.

use bytes::Bytes;

use super::*;
use crate::wire::*;

const CLUSTER: u64 = 0xC1;

fn secret(fill: u8) -> ClusterSecret {
    ClusterSecret::new(&[fill; 32]).unwrap()
}

fn hello(channel: Channel) -> Handshake {
    Handshake::new(CLUSTER, 1, channel)
        .with_incarnation(77)
        .with_advertised_addr("127.0.0.1:7001".parse().unwrap())
}

/// What the responder decodes from the initiator's handshake body.
fn received(body: &[u8]) -> Handshake {
    match decode_body(Bytes::copy_from_slice(body)).unwrap() {
        Body::Handshake(h) => h,
        other => panic!("expected a handshake, got {other:?}"),
    }
}

fn initiator(s: &ClusterSecret, channel: Channel, nonce: u8) -> Initiator {
    Initiator::new(s.clone(), hello(channel), [nonce; NONCE_BYTES], 2)
}

fn responder(s: &ClusterSecret, body: &[u8], nonce: u8) -> Responder {
    Responder::new(s.clone(), &received(body), body, 2, [nonce; NONCE_BYTES]).unwrap()
}

/// Encodes and decodes a frame (what crosses the wire).
fn over_the_wire(frame: &[u8]) -> Body {
    decode_frame(&Bytes::copy_from_slice(frame), 1 << 20)
        .unwrap()
        .unwrap()
        .0
}

/// A whole exchange; returns (initiator's keys, responder's keys).
fn exchange(s: &ClusterSecret) -> (SessionKeys, SessionKeys) {
    exchange_with(s, 0xA1, 0xB1)
}

fn exchange_with(s: &ClusterSecret, nonce_a: u8, nonce_b: u8) -> (SessionKeys, SessionKeys) {
    let i = initiator(s, Channel::Messages, nonce_a);
    let r = responder(s, i.hello_body(), nonce_b);
    let mut frame = Vec::new();
    encode_challenge(r.challenge(), &mut frame);
    let Body::AuthChallenge(challenge) = over_the_wire(&frame) else {
        panic!("a challenge")
    };
    assert_eq!(&challenge, r.challenge());
    let (response, keys_i) = i.on_challenge(&challenge).unwrap();
    frame.clear();
    encode_response(&response, &mut frame);
    let Body::AuthResponse(decoded) = over_the_wire(&frame) else {
        panic!("a response")
    };
    assert_eq!(decoded, response);
    let keys_r = r.on_response(&decoded).unwrap();
    (keys_i, keys_r)
}

#[test]
fn the_exchange_round_trips_and_keys_both_directions() {
    let s = secret(7);
    let (mut keys_i, mut keys_r) = exchange(&s);
    for payload in [&b"first batch of frames"[..], b"second", b""] {
        let mut record = Vec::new();
        keys_i.to_responder.seal_record(payload, &mut record);
        let header: [u8; RECORD_HEADER_BYTES] = record[..RECORD_HEADER_BYTES].try_into().unwrap();
        let (len, tag) = parse_record_header(&header, 1 << 20).unwrap();
        assert_eq!(len as usize, payload.len());
        assert_eq!(
            keys_r
                .to_responder
                .open(&record[RECORD_HEADER_BYTES..], &tag),
            Ok(())
        );
    }
    let tag = keys_r.to_initiator.seal(b"refusal");
    assert_eq!(keys_i.to_initiator.open(b"refusal", &tag), Ok(()));
    // The handshake announces the nonce with the required flag.
    let i = initiator(&s, Channel::Snapshot, 3);
    let h = received(i.hello_body());
    assert_ne!(h.flags & FLAG_AUTHENTICATED, 0);
    assert_eq!(h.nonce(), Ok(Some([3; NONCE_BYTES])));
    assert_eq!(h.incarnation(), Ok(Some(77)));
}

#[test]
fn another_secret_is_refused_by_both_sides() {
    let (ours, theirs) = (secret(7), secret(8));
    // The initiator refuses a responder that does not know its secret...
    let i = initiator(&ours, Channel::Messages, 0xA1);
    let r = responder(&theirs, i.hello_body(), 0xB1);
    assert_eq!(
        i.on_challenge(r.challenge()).err(),
        Some(AuthError::BadProof)
    );
    // ...and the responder refuses an initiator that does not know its secret (the initiator
    // was shown a valid challenge under its own secret, for the same hello and nonces).
    let i = initiator(&theirs, Channel::Messages, 0xA1);
    let r_theirs = responder(&theirs, i.hello_body(), 0xB1);
    let (response, _) = i.on_challenge(r_theirs.challenge()).unwrap();
    let r_ours = responder(&ours, i.hello_body(), 0xB1);
    assert_eq!(
        r_ours.on_response(&response).err(),
        Some(AuthError::BadProof)
    );
}

#[test]
fn a_replayed_response_is_refused() {
    let s = secret(7);
    let i = initiator(&s, Channel::Messages, 0xA1);
    let r = responder(&s, i.hello_body(), 0xB1);
    let (recorded, _) = i.on_challenge(r.challenge()).unwrap();
    assert!(r.on_response(&recorded).is_ok());
    // The same handshake and response replayed on a new connection: the responder's fresh
    // nonce is in the transcript, so the recorded proof no longer matches.
    let again = responder(&s, i.hello_body(), 0xB2);
    assert_eq!(
        again.on_response(&recorded).err(),
        Some(AuthError::BadProof)
    );
}

#[test]
fn a_reflected_proof_is_refused() {
    let s = secret(7);
    let i = initiator(&s, Channel::Messages, 0xA1);
    let r = responder(&s, i.hello_body(), 0xB1);
    // An attacker without the secret sends the responder its own proof back.
    let reflected = Response {
        proof: r.challenge().proof,
    };
    assert_eq!(r.on_response(&reflected).err(), Some(AuthError::BadProof));
}

#[test]
fn a_challenge_from_another_node_is_refused() {
    // A connection meant for node 2 relayed to node 3 (which knows the secret): the initiator
    // sees the wrong responder id, bound into the proof.
    let s = secret(7);
    let i = initiator(&s, Channel::Messages, 0xA1);
    let body = i.hello_body().to_vec();
    let node3 = Responder::new(s.clone(), &received(&body), &body, 3, [0xB1; NONCE_BYTES]).unwrap();
    assert_eq!(
        i.on_challenge(node3.challenge()).err(),
        Some(AuthError::WrongPeer {
            expected: 2,
            got: 3
        })
    );
    // Claiming node 2 while proving as node 3 does not help.
    let mut forged = node3.challenge().clone();
    forged.responder = 2;
    assert_eq!(i.on_challenge(&forged).err(), Some(AuthError::BadProof));
}

#[test]
fn a_handshake_altered_in_transit_is_refused() {
    // Cluster id, initiator id, channel and every extension record are in the transcript: a
    // responder that saw an altered handshake proves a transcript the initiator never said.
    let s = secret(7);
    let i = initiator(&s, Channel::Messages, 0xA1);
    let original = i.hello_body().to_vec();
    // Byte offsets in the handshake body: channel at 7, cluster id at 12, node id at 20..28, and
    // the last byte of the extension.
    let mut checked = 0;
    for at in [7, 12, 21, original.len() - 1] {
        let mut altered = original.clone();
        altered[at] ^= 1;
        let h = match decode_body(Bytes::from(altered.clone())) {
            Ok(Body::Handshake(h)) => h,
            _ => continue, // refused outright: fine too
        };
        let Ok(r) = Responder::new(s.clone(), &h, &altered, 2, [0xB1; NONCE_BYTES]) else {
            continue;
        };
        assert_eq!(
            i.on_challenge(r.challenge()).err(),
            Some(AuthError::BadProof),
            "byte {at} altered"
        );
        checked += 1;
    }
    assert_eq!(checked, 4, "every alteration reached the proof check");
}

#[test]
fn skipping_authentication_is_refused() {
    let s = secret(7);
    // A handshake that does not ask to authenticate.
    let plain = hello(Channel::Messages);
    let mut body = Vec::new();
    plain.encode_body(&mut body);
    assert_eq!(
        Responder::new(s.clone(), &plain, &body, 2, [1; NONCE_BYTES]).err(),
        Some(AuthError::Required)
    );
    // The flag without a nonce.
    let mut flagged = plain.clone();
    flagged.flags |= FLAG_AUTHENTICATED;
    body.clear();
    flagged.encode_body(&mut body);
    assert_eq!(
        Responder::new(s, &flagged, &body, 2, [1; NONCE_BYTES]).err(),
        Some(AuthError::MissingNonce)
    );
}

#[test]
fn a_record_with_a_bad_tag_is_refused() {
    let (mut keys_i, mut keys_r) = exchange(&secret(7));
    let tag = keys_i.to_responder.seal(b"append entries");
    assert_eq!(
        keys_r.to_responder.open(b"append entrieS", &tag),
        Err(AuthError::BadTag)
    );
    let mut bad = tag;
    bad[15] ^= 0x80;
    assert_eq!(
        keys_r.to_responder.open(b"append entries", &bad),
        Err(AuthError::BadTag)
    );
    // A refused record does not move the sequence on: the genuine one still opens.
    assert_eq!(keys_r.to_responder.open(b"append entries", &tag), Ok(()));
}

#[test]
fn a_record_from_another_connection_is_refused() {
    // Same secret, same nodes, both at sequence 0: only the nonces differ, and the keys with
    // them, so a record recorded on one connection does not open on another.
    let (mut keys_i, _) = exchange_with(&secret(7), 0xA1, 0xB1);
    let (_, mut other_r) = exchange_with(&secret(7), 0xA2, 0xB2);
    let tag = keys_i.to_responder.seal(b"heartbeat");
    assert_eq!(
        other_r.to_responder.open(b"heartbeat", &tag),
        Err(AuthError::BadTag)
    );
}

#[test]
fn a_replayed_or_reordered_record_is_refused() {
    let (mut keys_i, mut keys_r) = exchange(&secret(7));
    let first = keys_i.to_responder.seal(b"first");
    let second = keys_i.to_responder.seal(b"second");
    // Reordered: the second record cannot be opened as the first.
    assert_eq!(
        keys_r.to_responder.open(b"second", &second),
        Err(AuthError::BadTag)
    );
    assert_eq!(keys_r.to_responder.open(b"first", &first), Ok(()));
    // Replayed: the first record cannot be opened again.
    assert_eq!(
        keys_r.to_responder.open(b"first", &first),
        Err(AuthError::BadTag)
    );
    assert_eq!(keys_r.to_responder.open(b"second", &second), Ok(()));
}

#[test]
fn a_record_reflected_to_its_sender_is_refused() {
    // Each direction has its own key: what the initiator sealed does not open as the
    // responder's, though both start at sequence 0.
    let (mut keys_i, _) = exchange(&secret(7));
    let tag = keys_i.to_responder.seal(b"heartbeat");
    assert_eq!(
        keys_i.to_initiator.open(b"heartbeat", &tag),
        Err(AuthError::BadTag)
    );
}

#[test]
fn secrets_shorter_than_32_bytes_are_refused() {
    assert!(ClusterSecret::new(&[1; 31])
        .unwrap_err()
        .contains("at least 32"));
    assert!(ClusterSecret::new(&[1; 32]).is_ok());
    assert!(format!("{:?}", secret(0x41)).contains("32 bytes"));
    assert!(
        !format!("{:?}", secret(0x41)).contains("AAAA"),
        "Debug hides it"
    );
}

#[test]
fn an_oversize_record_is_refused_before_allocating() {
    let mut header = [0u8; RECORD_HEADER_BYTES];
    header[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        parse_record_header(&header, 1 << 20).err(),
        Some(AuthError::OversizeRecord {
            len_bytes: u32::MAX.into(),
            bytes_max: 1 << 20
        })
    );
}
