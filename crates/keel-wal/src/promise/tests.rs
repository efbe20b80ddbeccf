use std::path::PathBuf;

use keel_core::{HardState, LogId};

use super::*;
use crate::simfs::{Crash, SimFs};

fn dir() -> PathBuf {
    PathBuf::from("/data/wal")
}

fn path() -> PathBuf {
    dir().join(PROMISE_FILE_NAME)
}

fn promise(term: u64, vote: Option<u64>, acked: (u64, u64)) -> Promise {
    let acked = LogId::new(acked.0, acked.1);
    Promise {
        term,
        vote,
        acked,
        starts: TermStarts::new([acked]),
    }
}

/// A promise whose log had the terms starting at `starts` (the last one of `acked`'s term).
fn promise_of_terms(acked: (u64, u64), starts: &[(u64, u64)]) -> Promise {
    Promise {
        starts: TermStarts::new(starts.iter().map(|(t, i)| LogId::new(*t, *i))),
        ..promise(acked.0, None, acked)
    }
}

/// A promise file on a fresh disk holding `first`, then each of `then` in turn.
fn file_with(first: Promise, then: &[Promise]) -> (SimFs, PromiseFile<SimFs>) {
    let fs = SimFs::new();
    fs.create_dir_all(&dir()).unwrap();
    let read = read_promise(&fs, &dir()).unwrap();
    assert!(read.missing);
    let mut file = PromiseFile::open(&fs, &dir(), &read, first, 1, None).unwrap();
    for p in then {
        file.set(*p).unwrap();
    }
    (fs, file)
}

#[test]
fn a_slot_round_trips_and_is_320_bytes_with_its_checksum_last() {
    let sixteen: Vec<(u64, u64)> = (1..=16).map(|t| (t * 2, t * 10)).collect();
    for (slot, seq) in [(0, 2), (1, 1), (0, u64::MAX - 1), (1, u64::MAX)] {
        for p in [
            Promise::default(),
            promise(7, Some(3), (6, 1_000)),
            promise(u64::MAX, Some(u64::MAX), (u64::MAX, u64::MAX)),
            promise_of_terms((6, 1_000), &[(1, 1), (2, 40), (6, 900)]),
            promise_of_terms((32, 170), &sixteen),
        ] {
            let bytes = encode_slot(slot, seq, &p);
            assert_eq!(bytes.len(), PROMISE_SLOT_SIZE_BYTES);
            assert_eq!(&bytes[..8], b"KEELPRMS");
            assert_eq!(crc32c::crc32c(&bytes[..316]).to_le_bytes(), bytes[316..320]);
            assert_eq!(
                decode_slot(slot, &bytes),
                SlotState::Valid { seq, promise: p }
            );
        }
    }
}

#[test]
fn any_flipped_bit_in_a_slot_is_refused_never_misread() {
    let bytes = encode_slot(1, 5, &promise(4, Some(2), (4, 77)));
    for at in 0..PROMISE_SLOT_SIZE_BYTES {
        for bit in 0..8 {
            let mut damaged = bytes;
            damaged[at] ^= 1 << bit;
            assert!(
                matches!(decode_slot(1, &damaged), SlotState::Corrupt(_)),
                "flip at byte {at} bit {bit}"
            );
        }
    }
}

#[test]
fn a_slot_found_in_the_other_place_or_out_of_turn_is_refused() {
    let p = promise(1, None, (1, 1));
    // Slot 0's record read at slot 1.
    assert!(matches!(
        decode_slot(1, &encode_slot(0, 2, &p)),
        SlotState::Corrupt(_)
    ));
    // Sequence numbers alternate: an even one never belongs in slot 1.
    assert!(matches!(
        decode_slot(1, &encode_slot(1, 2, &p)),
        SlotState::Corrupt(_)
    ));
    assert_eq!(decode_slot(0, &[0; 64]), SlotState::Blank);
    assert!(matches!(decode_slot(0, &[1; 10]), SlotState::Corrupt(_)));
}

#[test]
fn writes_alternate_slots_and_the_newest_valid_one_wins() {
    let a = promise(1, Some(1), (1, 10));
    let b = promise(1, Some(1), (1, 20));
    let c = promise(2, None, (1, 20));
    let (fs, file) = file_with(a, &[b, c]);
    assert_eq!(file.current(), c);
    let read = read_promise(&fs, &dir()).unwrap();
    // Writes 1 (a), 2 (b), 3 (c): slot 1 holds c, slot 0 holds b.
    assert_eq!(read.slots[1], SlotState::Valid { seq: 3, promise: c });
    assert_eq!(read.slots[0], SlotState::Valid { seq: 2, promise: b });
    assert_eq!(read.promise(), Some(c));
    // An unchanged promise is not written again.
    let ops = fs.op_count();
    let mut file = file;
    file.set(c).unwrap();
    assert_eq!(fs.op_count(), ops);
}

#[test]
fn each_slot_corrupted_leaves_the_other_and_both_corrupted_is_unreadable() {
    let older = promise(3, Some(2), (3, 40));
    let newer = promise(3, Some(2), (3, 41));
    let (fs, _file) = file_with(older, &[newer]);
    // newer is write 2, in slot 0; older is write 1, in slot 1.
    fs.flip_bit(&path(), 30, 2).unwrap();
    let read = read_promise(&fs, &dir()).unwrap();
    assert!(matches!(read.slots[0], SlotState::Corrupt(_)));
    assert_eq!(read.promise(), Some(older), "the older copy promises less");
    assert!(!read.unreadable());
    fs.flip_bit(&path(), 30, 2).unwrap();

    fs.flip_bit(&path(), PROMISE_SLOT_STRIDE_BYTES + 50, 0)
        .unwrap();
    let read = read_promise(&fs, &dir()).unwrap();
    assert!(matches!(read.slots[1], SlotState::Corrupt(_)));
    assert_eq!(read.promise(), Some(newer));

    fs.flip_bit(&path(), 30, 2).unwrap();
    let read = read_promise(&fs, &dir()).unwrap();
    assert_eq!(read.promise(), None);
    assert!(read.unreadable() && !read.missing);
}

#[test]
fn the_next_write_overwrites_a_corrupt_slot() {
    let older = promise(1, None, (1, 1));
    let newer = promise(1, None, (1, 2));
    let (fs, _file) = file_with(older, &[newer]);
    // The newest copy (slot 0) is damaged: the older one is read, and the next write (number 2
    // again, after the older one's 1) goes to slot 0, over the damage.
    fs.flip_bit(&path(), 20, 1).unwrap();
    let read = read_promise(&fs, &dir()).unwrap();
    assert_eq!(read.newest(), Some((1, older)));
    let mut file =
        PromiseFile::open(&fs, &dir(), &read, promise(1, None, (1, 3)), 1, None).unwrap();
    assert_eq!(file.current(), promise(1, None, (1, 3)));
    file.set(promise(1, None, (1, 4))).unwrap();
    let read = read_promise(&fs, &dir()).unwrap();
    assert!(read
        .slots
        .iter()
        .all(|s| matches!(s, SlotState::Valid { .. })));
    assert_eq!(read.promise(), Some(promise(1, None, (1, 4))));
}

/// A write torn at any byte (or lost, or kept whole) leaves the previous promise or the new
/// one, never nothing.
#[test]
fn a_torn_write_leaves_the_previous_promise() {
    let before = promise(2, Some(1), (2, 10));
    let after = promise(2, Some(1), (2, 11));
    for torn_bytes in 0..=PROMISE_SLOT_SIZE_BYTES {
        for crash in [
            Crash::KeepPrefix { ops: 0, torn_bytes },
            Crash::LoseUnsynced,
            Crash::Scramble {
                seed: torn_bytes as u64,
            },
        ] {
            let (fs, mut file) = file_with(before, &[]);
            // Dies at the fsync: the write is issued, not synced.
            fs.kill_after_ops(1);
            assert!(file.set(after).is_err());
            drop(file);
            fs.crash_with(crash);
            let read = read_promise(&fs, &dir()).unwrap();
            let got = read.promise();
            assert!(
                got == Some(before) || got == Some(after),
                "{crash:?}: {read:?}"
            );
        }
    }
}

/// Format version 1 (64-byte slots, no term starts) is still read: a node upgraded in place
/// keeps its promise.
#[test]
fn a_version_1_slot_is_read_as_a_promise_without_term_starts() {
    let mut v1 = Vec::new();
    v1.extend_from_slice(b"KEELPRMS");
    v1.extend_from_slice(&1u16.to_le_bytes());
    v1.extend_from_slice(&64u16.to_le_bytes());
    put_u32(&mut v1, 1);
    for field in [3, 9, 2, 8, 41] {
        put_u64(&mut v1, field);
    }
    put_u32(&mut v1, 0);
    let crc = crc32c::crc32c(&v1);
    put_u32(&mut v1, crc);
    v1.resize(PROMISE_SLOT_SIZE_BYTES, 0);
    let expected = Promise {
        term: 9,
        vote: Some(2),
        acked: LogId::new(8, 41),
        starts: TermStarts::default(),
    };
    assert_eq!(
        decode_slot(1, &v1),
        SlotState::Valid {
            seq: 3,
            promise: expected
        }
    );
    // Version 1's reserved bytes stay zero.
    v1[56] = 1;
    let crc = crc32c::crc32c(&v1[..60]);
    v1[60..64].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(decode_slot(1, &v1), SlotState::Corrupt(_)));
}

#[test]
fn term_starts_keep_the_last_sixteen_and_skip_a_repeated_term() {
    let starts =
        TermStarts::new((1..=20).flat_map(|t| [LogId::new(t, t * 10), LogId::new(t, t * 10 + 1)]));
    let kept = starts.as_slice();
    assert_eq!(kept.len(), PROMISE_TERM_STARTS_MAX);
    assert_eq!(kept.first(), Some(&LogId::new(5, 50)));
    assert_eq!(kept.last(), Some(&LogId::new(20, 200)));
}

/// Term starts that could not describe the log the promise names are damage, even under a
/// matching checksum: they would tell peers which entries to send.
#[test]
fn term_starts_that_fall_or_pass_the_acknowledged_entry_are_refused() {
    let bad = [
        promise_of_terms((6, 100), &[(2, 10), (6, 101)]),
        promise_of_terms((6, 100), &[(2, 10), (5, 50)]),
        promise_of_terms((6, 100), &[(6, 10), (2, 50), (6, 60)]),
    ];
    for p in bad {
        // Encoded as is, under a valid checksum.
        let bytes = encode_slot(0, 2, &p);
        assert!(
            matches!(decode_slot(0, &bytes), SlotState::Corrupt(_)),
            "{p:?}"
        );
    }
    // Falling starts, written byte by byte (`TermStarts::new` would not keep them).
    let mut bytes = encode_slot(0, 2, &promise_of_terms((6, 100), &[(2, 10), (6, 60)]));
    bytes[60..68].copy_from_slice(&7u64.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..316]);
    bytes[316..320].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(decode_slot(0, &bytes), SlotState::Corrupt(_)));
}

#[test]
fn promise_of_a_hard_state_and_its_display() {
    let hs = HardState {
        term: 5,
        vote: Some(2),
        commit: 9,
    };
    let p = Promise::of(&hs, LogId::new(4, 12), TermStarts::new([LogId::new(4, 12)]));
    assert_eq!(p, promise(5, Some(2), (4, 12)));
    assert_eq!(p.to_string(), "term 5, vote 2, entries through 4/12");
}
