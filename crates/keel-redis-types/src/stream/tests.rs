//! The stream's operations against Redis 7.0's rules, its content hash and its body.

use bytes::Bytes;

use super::*;
use crate::wire::Reader;
use crate::{encode_body, Family};

fn fields(n: u64) -> Vec<Bytes> {
    vec![Bytes::from_static(b"f"), Bytes::from(n.to_string())]
}

fn id(ms: u64, seq: u64) -> StreamId {
    StreamId::new(ms, seq)
}

fn round_trip(stream: &Stream) -> Stream {
    let mut out = Vec::new();
    encode_body(&mut out, stream);
    let mut r = Reader::new(Bytes::from(out));
    let count = r.count(Stream::ELEMENT_BYTES_MIN).unwrap();
    let decoded = Stream::decode_body(&mut r, count).unwrap();
    assert_eq!(r.remaining(), 0);
    decoded
}

#[test]
fn auto_ids_follow_the_time_given_and_never_go_back() {
    let mut s = Stream::default();
    assert_eq!(s.add(NewId::Auto, fields(1), 1000), Ok(id(1000, 0)));
    assert_eq!(s.add(NewId::Auto, fields(2), 1000), Ok(id(1000, 1)));
    // A time behind the last ID's: the last ms, the next sequence.
    assert_eq!(s.add(NewId::Auto, fields(3), 900), Ok(id(1000, 2)));
    assert_eq!(s.add(NewId::Auto, fields(4), 2000), Ok(id(2000, 0)));
    assert_eq!(s.add(NewId::Ms(2000), fields(5), 0), Ok(id(2000, 1)));
    assert_eq!(s.add(NewId::Ms(3000), fields(6), 0), Ok(id(3000, 0)));
    assert_eq!(
        s.add(NewId::Exact(id(3000, 0)), fields(7), 0),
        Err(AddError::NotAboveTop)
    );
    assert_eq!(s.len(), 6);
    assert_eq!(s.entries_added(), 6);
    let mut full = Stream::default();
    full.add(NewId::Exact(StreamId::MAX), fields(1), 0).unwrap();
    assert_eq!(
        full.add(NewId::Auto, fields(2), 0),
        Err(AddError::Exhausted)
    );
}

#[test]
fn approximate_trimming_removes_whole_nodes_only() {
    let mut s = Stream::default();
    for n in 0..1000 {
        s.add(NewId::Auto, fields(n), 1).unwrap();
        s.trim(Trim {
            strategy: TrimStrategy::MaxLen(555),
            approx: true,
            limit: APPROX_TRIM_LIMIT_DEFAULT,
        });
    }
    assert_eq!(s.len(), 600);
    let exact = Trim {
        strategy: TrimStrategy::MaxLen(5),
        approx: false,
        limit: 0,
    };
    assert_eq!(s.trim(exact), 595);
    assert_eq!(s.len(), 5);
    let by_id = Trim {
        strategy: TrimStrategy::MinId(id(1, 998)),
        approx: false,
        limit: 0,
    };
    assert_eq!(s.trim(by_id), 3);
    // A node larger than the limit stays.
    let mut small = Stream::default();
    for n in 0..3 {
        small.add(NewId::Auto, fields(n), 1).unwrap();
    }
    let limited = Trim {
        strategy: TrimStrategy::MaxLen(0),
        approx: true,
        limit: 1,
    };
    assert_eq!(small.trim(limited), 0);
}

#[test]
fn groups_deliver_acknowledge_and_claim() {
    let mut s = Stream::default();
    for n in 1..=3 {
        s.add(NewId::Exact(id(n, 0)), fields(n), 0).unwrap();
    }
    assert!(s.create_group(Bytes::from_static(b"g"), StreamId::ZERO, None));
    assert!(!s.create_group(Bytes::from_static(b"g"), StreamId::ZERO, None));
    let ReadGroupOutcome::Served(read) = s.read_group(b"g", b"alice", None, 2, false, 100) else {
        panic!("served");
    };
    assert_eq!(read.len(), 2);
    let group = s.group(b"g").unwrap();
    assert_eq!(group.last_id(), id(2, 0));
    assert_eq!(group.entries_read(), Some(2));
    assert_eq!(s.lag(group), Some(1));
    assert_eq!(group.pel()[&id(1, 0)].delivery_ms, 100);
    // History: the consumer's own pending entries, redelivered.
    let ReadGroupOutcome::Served(history) =
        s.read_group(b"g", b"alice", Some(StreamId::ZERO), 0, false, 150)
    else {
        panic!("served");
    };
    assert_eq!(history.len(), 2);
    assert_eq!(s.group(b"g").unwrap().pel()[&id(1, 0)].delivery_count, 2);
    assert_eq!(s.ack(b"g", &[id(1, 0), id(9, 0)]), 1);
    let options = ClaimOptions {
        min_idle_ms: 10,
        ..ClaimOptions::default()
    };
    let claimed = s.claim(b"g", b"bob", &[id(2, 0)], options, 200);
    assert_eq!(claimed.len(), 1);
    let group = s.group(b"g").unwrap();
    assert_eq!(group.pel()[&id(2, 0)].consumer, Bytes::from_static(b"bob"));
    assert!(group.consumer(b"alice").unwrap().pending.is_empty());
    s.delete(&[id(2, 0)]);
    let args = AutoClaim {
        start: StreamId::ZERO,
        count: 10,
        min_idle_ms: 0,
        just_id: false,
    };
    let auto = s.auto_claim(b"g", b"carol", args, 300);
    assert_eq!(auto.deleted, vec![id(2, 0)]);
    assert!(auto.claimed.is_empty());
    assert_eq!(auto.next, StreamId::ZERO);
    assert_eq!(s.delete_consumer(b"g", b"bob"), Some(0));
}

#[test]
fn the_content_hash_is_the_contents_and_the_body_round_trips() {
    let build = |order: &[u64]| {
        let mut s = Stream::default();
        for n in 1..=4 {
            s.add(NewId::Exact(id(n, 0)), fields(n), 0).unwrap();
        }
        for &g in order {
            s.create_group(Bytes::from(format!("g{g}")), StreamId::ZERO, Some(0));
        }
        s.read_group(b"g1", b"c", None, 2, false, 50);
        s.delete(&[id(4, 0)]);
        s
    };
    let (a, b) = (build(&[1, 2]), build(&[2, 1]));
    assert_eq!(a.content_hash(), b.content_hash());
    assert_eq!(a.counted_bytes(), b.counted_bytes());
    let mut c = build(&[1, 2]);
    c.ack(b"g1", &[id(1, 0)]);
    assert_ne!(c.content_hash(), a.content_hash());
    let decoded = round_trip(&a);
    assert_eq!(decoded, a);
    assert_eq!(decoded.content_hash(), a.content_hash());
    assert_eq!(decoded.max_deleted_id(), id(4, 0));
    // An empty stream is a value too.
    let empty = Stream::default();
    assert_eq!(round_trip(&empty), empty);
    assert!(!empty.is_empty());
}

#[test]
fn set_id_and_the_read_counter_follow_redis() {
    let mut s = Stream::default();
    s.add(NewId::Exact(id(5, 0)), fields(1), 0).unwrap();
    assert_eq!(
        s.set_id(id(4, 0), None, StreamId::ZERO),
        Err(SetIdError::BelowTop)
    );
    assert_eq!(
        s.set_id(id(6, 0), Some(0), StreamId::ZERO),
        Err(SetIdError::AddedBelowLength)
    );
    assert_eq!(s.set_id(id(6, 0), Some(10), id(5, 5)), Ok(()));
    assert_eq!(s.entries_read_at(id(6, 0)), Some(10));
    assert_eq!(s.entries_read_at(id(7, 0)), None);
    assert_eq!(
        s.entries_read_at(id(1, 0)),
        None,
        "a tombstone after the first entry"
    );
}
