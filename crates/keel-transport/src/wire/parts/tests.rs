//! Messages in parts: what a sender writes reassembles to the same message, and every way a
//! part can break the rules is refused.

use bytes::Bytes;
use keel_core::{Entry, EntryPayload, LogId, Message, MessageBody};

use crate::wire::*;

fn append_of(payload_bytes: usize) -> Message {
    let payload: Vec<u8> = (0..payload_bytes).map(|i| (i % 251) as u8).collect();
    Message {
        from: 1,
        to: 2,
        term: 3,
        body: MessageBody::Append {
            prev: LogId::new(3, 9),
            entries: vec![Entry {
                term: 3,
                index: 10,
                payload: EntryPayload::Normal(Bytes::from(payload)),
            }],
            commit: 9,
        },
    }
}

/// Every frame in `stream`, decoded.
fn frames(stream: &[u8]) -> Vec<Body> {
    let mut buf = Bytes::copy_from_slice(stream);
    let mut out = Vec::new();
    while let Some((body, used)) = decode_frame(&buf, MESSAGE_FRAME_BYTES_MAX as u32).unwrap() {
        out.push(body);
        buf = buf.slice(used..);
    }
    assert!(buf.is_empty(), "a partial frame left over");
    out
}

/// Encodes `msg` the way the transport does: whole, or every part in turn.
fn encode_all(msg: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(mut parts) = encode_message_or_parts(0, msg, &mut out) {
        while !parts.is_done() {
            parts.encode_next(&mut out);
        }
    }
    out
}

fn part(message_len: u32, offset: u32, data: &[u8]) -> MessagePart {
    MessagePart {
        message_len,
        offset,
        data: Bytes::copy_from_slice(data),
    }
}

#[test]
fn small_messages_stay_whole_and_large_ones_reassemble_exactly() {
    let small = append_of(1000);
    assert!(matches!(&frames(&encode_all(&small))[..], [Body::Message(0, m)] if *m == small));
    for payload_bytes in [MESSAGE_PART_BYTES, 3 * MESSAGE_PART_BYTES + 17, 5 << 20] {
        let large = append_of(payload_bytes);
        let decoded = frames(&encode_all(&large));
        let expected_parts = (payload_bytes + 100).div_ceil(MESSAGE_PART_BYTES);
        assert!(decoded.len() >= 2 && decoded.len() <= expected_parts + 1);
        let mut reassembly = Reassembly::default();
        let mut whole = None;
        for (k, body) in decoded.into_iter().enumerate() {
            let Body::MessagePart(part) = body else {
                panic!("frame {k} is not a part")
            };
            assert!(whole.is_none(), "a part after the message completed");
            whole = reassembly.add(part, 8 << 20).unwrap();
        }
        let body = whole.expect("the last part completes the message");
        assert_eq!(decode_body(body).unwrap(), Body::Message(0, large));
        assert_eq!(reassembly.held_bytes(), 0);
    }
}

#[test]
fn parts_out_of_order_oversize_or_of_another_kind_are_refused() {
    let mut body = vec![BODY_MESSAGE];
    body.extend_from_slice(&[7u8; 99]);
    let len = body.len() as u32;
    // A message longer than the bound: refused on its first part, before anything is held.
    let mut r = Reassembly::default();
    assert!(matches!(
        r.add(part(len, 0, &body[..10]), len - 1),
        Err(WireError::Oversize { .. })
    ));
    assert_eq!(r.held_bytes(), 0);
    // Not starting at 0, a gap, an overlap, a changed length.
    let mut r = Reassembly::default();
    assert!(r.add(part(len, 10, &body[10..20]), 1 << 20).is_err());
    for bad in [
        part(len, 30, &body[30..40]),
        part(len, 5, &body[5..40]),
        part(len + 1, 20, &body[20..40]),
    ] {
        let mut r = Reassembly::default();
        assert_eq!(r.add(part(len, 0, &body[..20]), 1 << 20), Ok(None));
        assert!(r.add(bad, 1 << 20).is_err());
    }
    // A completed body of another kind.
    let mut r = Reassembly::default();
    let other = [BODY_REFUSAL, 0, 0];
    assert!(matches!(
        r.add(part(3, 0, &other), 1 << 20),
        Err(WireError::UnexpectedBody { .. })
    ));
    // On the wire: an empty part, or data reaching past the stated length.
    let frame = |message_len: u32, offset: u32, data: &[u8]| {
        let mut b = vec![BODY_MESSAGE_PART];
        b.extend_from_slice(&message_len.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
        b.extend_from_slice(data);
        decode_body(Bytes::from(b))
    };
    assert!(matches!(frame(10, 0, &[]), Err(WireError::Invalid(_))));
    assert!(matches!(
        frame(10, 8, &[1, 2, 3]),
        Err(WireError::Invalid(_))
    ));
    assert!(matches!(frame(10, 7, &[1, 2, 3]), Ok(Body::MessagePart(_))));
    assert!(matches!(frame(10, 0, &[1]).map(|_| ()), Ok(())));
    assert!(matches!(
        decode_body(Bytes::from_static(&[BODY_MESSAGE_PART, 1, 0])),
        Err(WireError::Truncated { .. })
    ));
}
