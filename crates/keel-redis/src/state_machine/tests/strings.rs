//! INCRBYFLOAT, SETRANGE, SETBIT, GETRANGE, GETBIT, BITCOUNT and LCS, checked against the cases
//! of Redis's test suite (`type/incr.tcl`, `type/string.tcl`, `bitops.tcl`).

use super::expiry::{pttl, set_px, watched_now, T0};
use super::*;
use crate::command::{BitRange, BitUnit, FloatBits, LcsForm};

fn incr_by_float(key: &str, delta: f64) -> WriteCommand {
    WriteCommand::IncrByFloat {
        key: b(key),
        delta: FloatBits(delta),
    }
}

fn set_range(key: &str, offset: u64, value: &[u8]) -> WriteCommand {
    WriteCommand::SetRange {
        key: b(key),
        offset,
        value: Bytes::copy_from_slice(value),
    }
}

fn set_bit(key: &str, offset: u64, bit: bool) -> WriteCommand {
    WriteCommand::SetBit {
        key: b(key),
        offset,
        bit,
    }
}

fn get_range(sm: &KvStateMachine, key: &str, start: i64, end: i64) -> Reply {
    sm.read(&ReadCommand::GetRange {
        key: b(key),
        start,
        end,
    })
}

fn bit_count(sm: &KvStateMachine, range: Option<(i64, i64, BitUnit)>) -> Reply {
    sm.read(&ReadCommand::BitCount {
        key: b("s"),
        range: range.map(|(start, end, unit)| BitRange { start, end, unit }),
    })
}

fn bulk(data: &[u8]) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(data))
}

const NOT_FLOAT: WriteReply = WriteReply::Error(WriteError::NotFloat);
const NAN_OR_INFINITY: WriteReply = WriteReply::Error(WriteError::NanOrInfinity);
const TOO_FAR: WriteReply = WriteReply::Error(WriteError::StringExceedsMaxSize);

#[test]
fn errors_are_worded_as_redis_words_them() {
    for (reply, text) in [
        (NOT_FLOAT, "ERR value is not a valid float"),
        (
            NAN_OR_INFINITY,
            "ERR increment would produce NaN or Infinity",
        ),
        (
            TOO_FAR,
            "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
        ),
    ] {
        assert_eq!(reply.to_reply(), Reply::error(text));
        // Remembered for a retry and relayed intact, like every compact reply.
        let mut relayed = Vec::new();
        reply.encode(&mut relayed);
        assert_eq!(WriteReply::decode(&relayed), Some(reply));
    }
}

#[test]
fn incrbyfloat_adds_and_formats_as_redis_tests_expect() {
    let mut log = Log::new();
    assert_eq!(log.value(incr_by_float("novar", 1.0)), Reply::text("1"));
    assert_eq!(log.get("novar"), Some(&b"1"[..]));
    assert_eq!(log.value(incr_by_float("novar", 0.25)), Reply::text("1.25"));
    log.apply(set("novar", "1.5"));
    assert_eq!(log.value(incr_by_float("novar", 1.5)), Reply::text("3"));
    log.apply(set("novar", "17179869184"));
    assert_eq!(
        log.value(incr_by_float("novar", 1.5)),
        Reply::text("17179869185.5")
    );
    log.apply(set("novar", "17179869184"));
    assert_eq!(
        log.value(incr_by_float("novar", 17179869184.0)),
        Reply::text("34359738368")
    );
    log.apply(set("foo", "1"));
    let Reply::Bulk(decrement) = log.value(incr_by_float("foo", -1.1)) else {
        panic!("a bulk string")
    };
    let decrement: f64 = std::str::from_utf8(&decrement).unwrap().parse().unwrap();
    assert!((decrement + 0.1).abs() < 1e-10, "{decrement}");
    log.apply(WriteCommand::Del {
        keys: vec![b("foo")],
    });
    log.value(incr_by_float("foo", 1.0 / 41.0));
    log.value(incr_by_float("foo", -1.0 / 41.0));
    assert_eq!(log.get("foo"), Some(&b"0"[..]), "no negative zero");
}

#[test]
fn incrbyfloat_refuses_what_is_not_a_float_and_infinite_results() {
    let mut log = Log::new();
    for text in ["    11", "11    ", " 11 ", "1\x002", "abc"] {
        log.apply(set("novar", text));
        let reply = log.apply(incr_by_float("novar", 1.0));
        assert_eq!(reply, NOT_FLOAT, "{text:?}");
        assert_eq!(log.get("novar"), Some(text.as_bytes()), "unchanged");
    }
    log.apply(set("foo", "0"));
    assert_eq!(
        log.apply(incr_by_float("foo", f64::INFINITY)),
        NAN_OR_INFINITY
    );
    log.apply(set("max", &f64::MAX.to_string()));
    assert_eq!(log.apply(incr_by_float("max", f64::MAX)), NAN_OR_INFINITY);
    // A forged NaN increment is refused the same way.
    assert_eq!(log.apply(incr_by_float("foo", f64::NAN)), NAN_OR_INFINITY);
    assert_eq!(log.get("foo"), Some(&b"0"[..]));
}

#[test]
fn partial_writes_keep_the_deadline_and_a_retry_says_it_applied() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    for (key, command) in [
        ("f", incr_by_float("f", 1.5)),
        ("r", set_range("r", 1, b"x")),
        ("b", set_bit("b", 1, true)),
    ] {
        log.apply(set_px(key, "12", 500));
        log.seq += 1;
        log.apply_logged(1, log.seq, command.clone().into());
        assert_eq!(pttl(&log.sm, key), Reply::Integer(500), "{key}");
        let again = log.apply_logged(1, log.seq, command.clone().into());
        if command.replies_with_value() {
            assert_eq!(again, ApplyReply::AppliedBefore);
        } else {
            assert!(matches!(again, ApplyReply::Write(WriteReply::Integer(_))));
        }
    }
    assert_eq!(log.get("f"), Some(&b"13.5"[..]));
    assert_eq!(log.get("r"), Some(&b"1x"[..]));
    assert_eq!(log.get("b"), Some(&b"q2"[..]), "0x31 with bit 1 set");
    // An expired key is gone first: its deadline is not kept.
    log.apply(set_px("gone", "5", 10));
    log.stamp_ms = T0 + 10;
    log.value(incr_by_float("gone", 1.0));
    assert_eq!(log.get("gone"), Some(&b"1"[..]));
    assert_eq!(pttl(&log.sm, "gone"), Reply::Integer(-1));
}

#[test]
fn setrange_pads_with_zeros_and_answers_the_length() {
    let mut log = Log::new();
    assert_eq!(log.apply(set_range("k", 0, b"foo")), WriteReply::Integer(3));
    assert_eq!(log.get("k"), Some(&b"foo"[..]));
    log.apply(WriteCommand::Del { keys: vec![b("k")] });
    assert_eq!(log.apply(set_range("k", 0, b"")), WriteReply::Integer(0));
    assert_eq!(log.get("k"), None, "nothing written, nothing created");
    assert_eq!(log.apply(set_range("k", 1, b"foo")), WriteReply::Integer(4));
    assert_eq!(log.get("k"), Some(&b"\0foo"[..]));
    for (offset, value, length, result) in [
        (0, &b"b"[..], 3, &b"boo"[..]),
        (0, b"", 3, b"foo"),
        (1, b"b", 3, b"fbo"),
        (4, b"bar", 7, b"foo\0bar"),
    ] {
        log.apply(set("k", "foo"));
        let reply = log.apply(set_range("k", offset, value));
        assert_eq!(reply, WriteReply::Integer(length));
        assert_eq!(log.get("k"), Some(result));
    }
    log.apply(set("k", "1234"));
    assert_eq!(log.apply(set_range("k", 5, b"2")), WriteReply::Integer(6));
    assert_eq!(log.get("k"), Some(&b"1234\x002"[..]));
}

#[test]
fn no_write_makes_a_value_longer_than_the_bound() {
    let mut log = Log::new();
    let too_far = TOO_FAR;
    let max = STRING_BYTES_MAX as u64;
    assert_eq!(
        log.apply(set_range("k", 512 * 1024 * 1024 - 4, b"world")),
        too_far
    );
    assert_eq!(log.apply(set_range("k", max - 2, b"abc")), too_far);
    assert_eq!(log.apply(set_range("k", i64::MAX as u64, b"A")), too_far);
    assert_eq!(log.apply(set_range("k", u64::MAX, b"A")), too_far);
    assert!(log.sm.is_empty());
    // An empty value is never too far.
    log.apply(set("k", "hello"));
    assert_eq!(
        log.apply(set_range("k", u64::MAX, b"")),
        WriteReply::Integer(5)
    );
    // A forged SETBIT past the bound (the parser refuses it) changes nothing either.
    assert_eq!(log.apply(set_bit("b", 8 * max, true)), too_far);
    assert_eq!(log.apply(set_bit("b", u64::MAX, true)), too_far);
    assert_eq!(log.get("b"), None);
    // Exactly at the bound is allowed.
    let reply = log.apply(set_range("k", max - 3, b"abc"));
    assert_eq!(reply, WriteReply::Integer(STRING_BYTES_MAX as i64));
    assert_eq!(
        log.apply(set_bit("k", 8 * max - 1, true)),
        WriteReply::Integer(1)
    );
    assert_eq!(log.sm.used_bytes(), map::PAIR_OVERHEAD_BYTES + 1 + max);
}

#[test]
fn setbit_and_getbit_follow_redis_bit_order() {
    let mut log = Log::new();
    let get_bit = |sm: &KvStateMachine, offset| {
        sm.read(&ReadCommand::GetBit {
            key: b("mykey"),
            offset,
        })
    };
    assert_eq!(log.apply(set_bit("mykey", 1, true)), WriteReply::Integer(0));
    assert_eq!(log.get("mykey"), Some(&[0b0100_0000][..]));
    log.apply(set("mykey", "@"));
    assert_eq!(log.apply(set_bit("mykey", 2, true)), WriteReply::Integer(0));
    assert_eq!(log.get("mykey"), Some(&[0b0110_0000][..]));
    assert_eq!(
        log.apply(set_bit("mykey", 1, false)),
        WriteReply::Integer(1)
    );
    assert_eq!(log.get("mykey"), Some(&[0b0010_0000][..]));
    log.apply(set("mykey", "1"));
    assert_eq!(log.apply(set_bit("mykey", 6, true)), WriteReply::Integer(0));
    assert_eq!(log.get("mykey"), Some(&[0b0011_0011][..]));
    // Clearing a bit of a missing key still creates it, as in Redis.
    assert_eq!(
        log.apply(set_bit("zero", 17, false)),
        WriteReply::Integer(0)
    );
    assert_eq!(log.get("zero"), Some(&[0u8, 0, 0][..]));
    log.apply(set("mykey", "`"));
    let bits: Vec<Reply> = [0, 1, 2, 3, 8, 100, 10000, u64::MAX]
        .into_iter()
        .map(|offset| get_bit(&log.sm, offset))
        .collect();
    let want = [0, 1, 1, 0, 0, 0, 0, 0].map(Reply::Integer);
    assert_eq!(bits, want);
    assert_eq!(
        log.sm.read(&ReadCommand::GetBit {
            key: b("missing"),
            offset: 0
        }),
        Reply::Integer(0)
    );
    // Setting a bit to what it is is no change at all (WATCH included).
    let watched = watched_now(&log, "mykey");
    assert_eq!(log.apply(set_bit("mykey", 1, true)), WriteReply::Integer(1));
    assert!(!log.sm.watched_changed(&watched));
}

/// A deterministic stream of pseudo-random numbers for the fuzzing tests.
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

#[test]
fn setbit_fuzzing_matches_a_model() {
    let mut log = Log::new();
    let mut model = vec![0u8; 0];
    let mut seed = 7;
    for _ in 0..2000 {
        let offset = lcg(&mut seed) % (256 * 8);
        let bit = lcg(&mut seed) % 2 == 1;
        let byte = (offset / 8) as usize;
        if model.len() <= byte {
            model.resize(byte + 1, 0);
        }
        let mask = 0x80 >> (offset % 8);
        let old = model[byte] & mask != 0;
        model[byte] = if bit {
            model[byte] | mask
        } else {
            model[byte] & !mask
        };
        let reply = log.apply(set_bit("mykey", offset, bit));
        assert_eq!(reply, WriteReply::Integer(i64::from(old)));
        assert_eq!(log.get("mykey"), Some(&model[..]));
    }
}

#[test]
fn getrange_follows_redis() {
    let mut log = Log::new();
    assert_eq!(get_range(&log.sm, "mykey", 0, -1), bulk(b""));
    log.apply(set("mykey", "Hello World"));
    for (start, end, want) in [
        (0, 3, "Hell"),
        (0, -1, "Hello World"),
        (-4, -1, "orld"),
        (5, 3, ""),
        (5, 5000, " World"),
        (-5000, 10000, "Hello World"),
    ] {
        assert_eq!(get_range(&log.sm, "mykey", start, end), Reply::text(want));
    }
    log.apply(set("foo", "bar"));
    assert_eq!(get_range(&log.sm, "foo", 0, 4294967297), Reply::text("bar"));
    // Fuzzing against Tcl's `string range` semantics for non-negative indexes.
    let mut seed = 11;
    for _ in 0..1000 {
        let len = (lcg(&mut seed) % 1025) as usize;
        let value: Vec<u8> = (0..len).map(|_| lcg(&mut seed) as u8).collect();
        log.apply(WriteCommand::Set {
            key: b("bin"),
            value: Bytes::from(value.clone()),
            condition: SetCondition::Always,
        });
        let (start, end) = (lcg(&mut seed) % 1500, lcg(&mut seed) % 1500);
        let want = if (start as usize) < len && start <= end {
            &value[start as usize..=(end as usize).min(len - 1)]
        } else {
            &[][..]
        };
        assert_eq!(
            get_range(&log.sm, "bin", start as i64, end as i64),
            bulk(want)
        );
    }
}

#[test]
fn bitcount_follows_redis() {
    let mut log = Log::new();
    use BitUnit::{Bit, Byte};
    assert_eq!(bit_count(&log.sm, None), Reply::Integer(0));
    assert_eq!(bit_count(&log.sm, Some((0, 1000, Bit))), Reply::Integer(0));
    log.apply(set("s", "xxxx"));
    for range in [(4, 10, Byte), (32, 87, Bit), (-6, -7, Byte), (-6, -15, Bit)] {
        assert_eq!(
            bit_count(&log.sm, Some(range)),
            Reply::Integer(0),
            "{range:?}"
        );
    }
    let ones = |bytes: &[u8]| bytes.iter().map(|b| b.count_ones() as i64).sum::<i64>();
    for vector in [&b""[..], b"\xaa", b"\x00\x00\xff", b"foobar", b"123"] {
        log.apply(WriteCommand::Set {
            key: b("s"),
            value: Bytes::copy_from_slice(vector),
            condition: SetCondition::Always,
        });
        assert_eq!(bit_count(&log.sm, None), Reply::Integer(ones(vector)));
        assert_eq!(
            bit_count(&log.sm, Some((0, -1, Bit))),
            Reply::Integer(ones(vector))
        );
    }
    log.apply(set("s", "foobar"));
    let bits_between = |first: i64, last: i64| {
        (first..=last)
            .filter(|&bit| b"foobar"[(bit / 8) as usize] & (0x80 >> (bit % 8)) != 0)
            .count() as i64
    };
    for (range, want) in [
        ((0, -1, Byte), ones(b"foobar")),
        ((1, -2, Byte), ones(b"ooba")),
        ((-2, 1, Byte), 0),
        ((0, 1000, Byte), ones(b"foobar")),
        ((10, 14, Bit), bits_between(10, 14)),
        ((3, 14, Bit), bits_between(3, 14)),
        ((3, 29, Bit), bits_between(3, 29)),
        ((10, -34, Bit), bits_between(10, 14)),
        ((3, -34, Bit), bits_between(3, 14)),
        ((3, -19, Bit), bits_between(3, 29)),
        ((-2, 1, Bit), 0),
        ((0, 1000, Bit), ones(b"foobar")),
    ] {
        assert_eq!(
            bit_count(&log.sm, Some(range)),
            Reply::Integer(want),
            "{range:?}"
        );
    }
    log.apply(set("s", "ab"));
    assert_eq!(bit_count(&log.sm, Some((1, -1, Byte))), Reply::Integer(3));
    log.apply(set("s", "__PPxxxxxxxxxxxxxxxxRR__"));
    assert_eq!(bit_count(&log.sm, Some((2, -3, Byte))), Reply::Integer(74));
}

const RNA1: &str = "CACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTTCGTCCGGGTGTG";
const RNA2: &str = "ATTAAAGGTTTATACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT";
const RNA_LCS: &str = "ACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT";

fn lcs(sm: &KvStateMachine, form: LcsForm) -> Reply {
    sm.read(&ReadCommand::Lcs {
        key1: b("virus1"),
        key2: b("virus2"),
        form,
    })
}

/// Redis's `{{a_start a_end} {b_start b_end} [len]}` list of matches.
fn matches(ranges: &[[i64; 5]], with_len: bool) -> Reply {
    let pair = |start, end| Reply::Array(vec![Reply::Integer(start), Reply::Integer(end)]);
    Reply::Array(
        ranges
            .iter()
            .map(|&[a0, a1, b0, b1, len]| {
                let mut item = vec![pair(a0, a1), pair(b0, b1)];
                if with_len {
                    item.push(Reply::Integer(len));
                }
                Reply::Array(item)
            })
            .collect(),
    )
}

#[test]
fn lcs_answers_as_redis_tests_expect() {
    let mut log = Log::new();
    log.apply(set("virus1", RNA1));
    log.apply(set("virus2", RNA2));
    assert_eq!(lcs(&log.sm, LcsForm::Text), Reply::text(RNA_LCS));
    let length = Reply::Integer(RNA_LCS.len() as i64);
    assert_eq!(lcs(&log.sm, LcsForm::Length), length);
    let ranges = [
        [238, 238, 239, 239, 1],
        [236, 236, 238, 238, 1],
        [229, 230, 236, 237, 2],
        [224, 224, 235, 235, 1],
        [1, 222, 13, 234, 222],
    ];
    let idx = |min_match_len, with_match_len| {
        lcs(
            &log.sm,
            LcsForm::Ranges {
                min_match_len,
                with_match_len,
            },
        )
    };
    let reply = |ranges: &[[i64; 5]], with_len| {
        Reply::Map(vec![
            (Reply::text("matches"), matches(ranges, with_len)),
            (Reply::text("len"), length.clone()),
        ])
    };
    assert_eq!(idx(0, false), reply(&ranges, false));
    assert_eq!(idx(0, true), reply(&ranges, true));
    assert_eq!(idx(5, true), reply(&ranges[4..], true));
    // A missing key is the empty string.
    let missing = log.sm.read(&ReadCommand::Lcs {
        key1: b("virus1"),
        key2: b("nothing"),
        form: LcsForm::Text,
    });
    assert_eq!(missing, Reply::text(""));
}

#[test]
fn lcs_refuses_a_table_past_its_bound() {
    let mut log = Log::new();
    // 4096 x 4096 cells: exactly the bound.
    assert_eq!(LCS_CELLS_MAX, 4096 * 4096);
    log.apply(set("virus1", &"a".repeat(4095)));
    log.apply(set("virus2", &"a".repeat(4095)));
    assert_eq!(lcs(&log.sm, LcsForm::Length), Reply::Integer(4095));
    log.apply(set("virus1", &"a".repeat(4096)));
    let Reply::Error(text) = lcs(&log.sm, LcsForm::Length) else {
        panic!("expected an error")
    };
    assert!(
        text.starts_with("ERR LCS of values of 4096 and 4095 bytes"),
        "{text}"
    );
}
