//! Every family through the parts of it that are replicated: the body in a snapshot (a function of
//! the content alone, read back to an equal value, its order checked) and the content hash (the
//! same for the same content whatever the order of the writes, pinned so that a change to it is
//! seen as the format change it is).

use bytes::Bytes;
use keel_redis_types::hash::Hash;
use keel_redis_types::list::{End, List};
use keel_redis_types::set::{Set, SetAlgebra};
use keel_redis_types::wire::Reader;
use keel_redis_types::zset::{Added, Score, ZAddCondition, ZSet};
use keel_redis_types::{encode_body, BodyError, Family, ValueError};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Encodes `value`, reads it back with its count as a snapshot is read (checking the value, its
/// content hash and its counted bytes come back equal), and returns the encoding.
fn round_trip<F: Family + PartialEq + std::fmt::Debug>(value: &F) -> Vec<u8> {
    let mut out = Vec::new();
    encode_body(&mut out, value);
    let mut r = Reader::new(Bytes::from(out.clone()));
    let count = r.count(F::ELEMENT_BYTES_MIN).expect("a count");
    assert_eq!(count, value.len());
    let back = F::decode_body(&mut r, count).expect("decodes");
    assert_eq!(r.remaining(), 0, "the body is read to its end");
    assert_eq!(&back, value);
    assert_eq!(back.content_hash(), value.content_hash());
    assert_eq!(back.counted_bytes(), value.counted_bytes());
    out
}

fn hash_of(pairs: &[(&str, &str)]) -> Hash {
    let mut hash = Hash::default();
    for (f, v) in pairs {
        hash.insert(b(f), b(v));
    }
    hash
}

fn set_of(members: &[&str]) -> Set {
    let mut set = Set::default();
    members.iter().for_each(|m| {
        set.insert(b(m));
    });
    set
}

fn zset_of(pairs: &[(f64, &str)]) -> ZSet {
    let mut zset = ZSet::default();
    for (score, member) in pairs {
        zset.insert(b(member), Score::new(*score).expect("a number"));
    }
    zset
}

#[test]
fn unordered_families_encode_and_hash_their_content_not_their_history() {
    let one = hash_of(&[("a", "1"), ("b", "2"), ("c", "3")]);
    let other = hash_of(&[("c", "3"), ("a", "0"), ("b", "2"), ("a", "1")]);
    assert_eq!(round_trip(&one), round_trip(&other));
    assert_eq!(one.content_hash(), other.content_hash());

    let one = set_of(&["x", "y", "z"]);
    let other = set_of(&["z", "x", "y", "x"]);
    assert_eq!(round_trip(&one), round_trip(&other));
    assert_eq!(one.content_hash(), other.content_hash());

    let one = zset_of(&[(1.0, "a"), (2.5, "b")]);
    let other = zset_of(&[(2.5, "b"), (7.0, "a"), (1.0, "a")]);
    assert_eq!(round_trip(&one), round_trip(&other));
    assert_eq!(one.content_hash(), other.content_hash());
}

#[test]
fn a_list_keeps_its_order_in_the_body_and_the_hash() {
    let mut ab = List::default();
    ab.push(End::Right, b("a"));
    ab.push(End::Right, b("b"));
    let mut ba = List::default();
    ba.push(End::Left, b("a"));
    ba.push(End::Left, b("b"));
    assert_ne!(round_trip(&ab), round_trip(&ba));
    assert_ne!(ab.content_hash(), ba.content_hash());
}

/// The content hashes of small values, as computed when the families moved into this crate: a
/// change to any of them is a change to the replicated format (replicas of two versions would
/// disagree on the digest), never a refactor.
#[test]
fn content_hashes_are_pinned() {
    let mut list = List::default();
    ["a", "b", "c"]
        .iter()
        .for_each(|e| list.push(End::Right, b(e)));
    let pinned = [
        list.content_hash(),
        hash_of(&[("f", "v"), ("g", "w")]).content_hash(),
        set_of(&["m", "n"]).content_hash(),
        zset_of(&[(1.5, "m"), (-2.0, "n")]).content_hash(),
    ];
    assert_eq!(pinned, PINNED, "{pinned:#018x?}");
}

const PINNED: [u64; 4] = [
    0x10b5_1d4d_db9f_8f37,
    0x08a1_59dd_4365_fba3,
    0xc204_c8e7_4cf9_a484,
    0x679e_9a89_124f_734d,
];

#[test]
fn decoding_rejects_repeats_and_disorder() {
    // A set body of two members, "b" then "a": not ascending.
    let mut out = Vec::new();
    out.extend_from_slice(&2u32.to_le_bytes());
    for m in ["b", "a"] {
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(m.as_bytes());
    }
    let mut r = Reader::new(Bytes::from(out));
    let count = r.count(Set::ELEMENT_BYTES_MIN).unwrap();
    assert!(matches!(
        Set::decode_body(&mut r, count),
        Err(BodyError::Malformed(_))
    ));
    // A sorted set's score of negative zero is not canonical.
    let mut out = Vec::new();
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.push(b'm');
    out.extend_from_slice(&(-0.0f64).to_bits().to_le_bytes());
    let mut r = Reader::new(Bytes::from(out));
    let count = r.count(ZSet::ELEMENT_BYTES_MIN).unwrap();
    assert!(matches!(
        ZSet::decode_body(&mut r, count),
        Err(BodyError::Malformed(_))
    ));
    // A list cut short inside an element.
    let mut r = Reader::new(Bytes::from_static(&[1, 0, 0, 0, 5, 0, 0, 0, b'a']));
    let count = r.count(List::ELEMENT_BYTES_MIN).unwrap();
    assert!(matches!(
        List::decode_body(&mut r, count),
        Err(BodyError::Truncated(_))
    ));
}

#[test]
fn list_operations_follow_redis() {
    let mut list = List::default();
    for e in ["a", "b", "a", "c", "a"] {
        list.push(End::Right, b(e));
    }
    assert_eq!(list.remove_matching(-2, b"a"), 2); // from the tail
    assert_eq!(list.items(), &["a", "b", "c"].map(b));
    assert_eq!(list.insert_by_pivot(true, b"c", b("x")), Some(4));
    assert_eq!(list.insert_by_pivot(false, b"nope", b("y")), None);
    assert!(list.set_at(-1, b("z")));
    assert!(!list.set_at(4, b("w")));
    list.trim(1, -2);
    assert_eq!(list.items(), &["b", "x"].map(b));
    assert_eq!(list.at(-1), Some(&b("x")));
    assert_eq!(
        list.range(0, 10).cloned().collect::<Vec<_>>(),
        ["b", "x"].map(b)
    );
    assert_eq!(list.pop_up_to(End::Left, 5), ["b", "x"].map(b));
    assert!(list.is_empty());
}

#[test]
fn hash_increments_check_their_operands() {
    let mut hash = hash_of(&[("n", "41"), ("s", "text"), ("big", "9223372036854775807")]);
    assert_eq!(hash.incr_by(b("n"), 1), Ok(42));
    assert_eq!(hash.incr_by(b("new"), -3), Ok(-3));
    assert_eq!(
        hash.incr_by(b("s"), 1),
        Err(ValueError::HashValueNotInteger)
    );
    assert_eq!(hash.incr_by(b("big"), 1), Err(ValueError::Overflow));
    assert_eq!(hash.incr_by_float(b("n"), 0.5), Ok(b("42.5")));
    assert_eq!(
        hash.incr_by_float(b("s"), 1.0),
        Err(ValueError::HashValueNotFloat)
    );
    assert_eq!(
        hash.incr_by_float(b("n"), f64::INFINITY),
        Err(ValueError::NanOrInfinity)
    );
    assert_eq!(
        hash.get(b"n"),
        Some(&b("42.5")),
        "a failed increment changes nothing"
    );
}

#[test]
fn set_algebra_and_pops() {
    let (x, y) = (set_of(&["a", "b", "c"]), set_of(&["b", "c", "d"]));
    let sorted = |s: Set| s.sorted().into_iter().cloned().collect::<Vec<_>>();
    assert_eq!(
        sorted(Set::algebra(SetAlgebra::Inter, &[&x, &y])),
        ["b", "c"].map(b)
    );
    assert_eq!(sorted(Set::algebra(SetAlgebra::Union, &[&x, &y])).len(), 4);
    assert_eq!(
        sorted(Set::algebra(SetAlgebra::Diff, &[&x, &y])),
        ["a"].map(b)
    );
    // The same salt draws the same members on every replica.
    let (mut one, mut other) = (x.clone(), x.clone());
    assert_eq!(
        one.pop_least_hashed(2, b"salt"),
        other.pop_least_hashed(2, b"salt")
    );
    assert_eq!(one.len(), 1);
}

#[test]
fn zadd_conditions_and_pops() {
    let mut zset = zset_of(&[(1.0, "a"), (2.0, "b")]);
    let only_new = ZAddCondition {
        only_new: true,
        ..ZAddCondition::default()
    };
    assert_eq!(
        zset.add(only_new, false, 5.0, &b("a")).unwrap().0,
        Added::Skipped
    );
    let only_greater = ZAddCondition {
        only_greater: true,
        ..ZAddCondition::default()
    };
    assert_eq!(
        zset.add(only_greater, false, 0.5, &b("b")).unwrap().0,
        Added::Skipped
    );
    assert_eq!(
        zset.add(ZAddCondition::default(), true, 1.0, &b("b"))
            .unwrap(),
        (Added::Changed, Some(3.0))
    );
    zset.insert(b("inf"), Score::new(f64::INFINITY).unwrap());
    assert_eq!(
        zset.add(ZAddCondition::default(), true, f64::NEG_INFINITY, &b("inf")),
        Err(ValueError::ScoreNotANumber)
    );
    let popped = zset.pop(true, 1);
    assert_eq!(popped[0].1, b("inf"));
    assert_eq!(zset.remove_all(&[b("a"), b("zz")]), 1);
    assert_eq!(zset.len(), 1);
}
