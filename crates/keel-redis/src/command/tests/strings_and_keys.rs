//! Parsing the string and keyspace commands: Redis's errors, options and bounds.

use super::*;
use keel_redis_types::STRING_BYTES_MAX;

#[test]
#[expect(clippy::too_many_lines)]
fn string_commands() {
    let write = |line| match parse(line) {
        Ok(Command::Write(write)) => write,
        other => panic!("{line}: {other:?}"),
    };
    let read = |line| match parse(line) {
        Ok(Command::Read(read)) => read,
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(
        write("INCRBYFLOAT k -1.5e3"),
        WriteCommand::IncrByFloat {
            key: b("k"),
            delta: FloatBits(-1500.0)
        }
    );
    for bad in ["x", "nan", " 1", "1e400", ""] {
        let line = Command::parse(&[b("INCRBYFLOAT"), b("k"), b(bad)]);
        assert_eq!(line, Err(CommandError::NotFloat), "{bad:?}");
    }
    assert_eq!(error("INCRBYFLOAT k x"), "ERR value is not a valid float");
    assert!(matches!(
        write("incrbyfloat k +inf"),
        WriteCommand::IncrByFloat { delta, .. } if delta.0.is_infinite()
    ));
    assert_eq!(
        write("SETRANGE k 4 bar"),
        WriteCommand::SetRange {
            key: b("k"),
            offset: 4,
            value: b("bar")
        }
    );
    assert_eq!(error("SETRANGE k -1 world"), "ERR offset is out of range");
    assert_eq!(
        error("SETRANGE k x world"),
        "ERR value is not an integer or out of range"
    );
    // Too far for the value: refused when it runs (an empty value is never too far).
    assert!(matches!(
        write("SETRANGE k 9223372036854775807 A"),
        WriteCommand::SetRange { .. }
    ));
    assert_eq!(
        write("SETBIT k 7 1"),
        WriteCommand::SetBit {
            key: b("k"),
            offset: 7,
            bit: true
        }
    );
    let offset_max = (STRING_BYTES_MAX as u64) * 8 - 1;
    assert!(parse(&format!("SETBIT k {offset_max} 0")).is_ok());
    for offset in ["-1", "x", "4294967296", &(offset_max + 1).to_string()] {
        for line in [format!("SETBIT k {offset} 1"), format!("GETBIT k {offset}")] {
            assert_eq!(
                error(&line),
                "ERR bit offset is not an integer or out of range",
                "{line}"
            );
        }
    }
    for bit in ["-1", "2", "10", "x"] {
        assert_eq!(
            error(&format!("SETBIT k 0 {bit}")),
            "ERR bit is not an integer or out of range"
        );
    }
    assert_eq!(
        read("GETBIT k 100"),
        ReadCommand::GetBit {
            key: b("k"),
            offset: 100
        }
    );
    let range = ReadCommand::GetRange {
        key: b("k"),
        start: -4,
        end: -1,
    };
    assert_eq!(read("GETRANGE k -4 -1"), range);
    assert_eq!(read("substr k -4 -1"), range);
    assert_eq!(
        error("GETRANGE k 0 x"),
        "ERR value is not an integer or out of range"
    );
    let bitcount = |range| ReadCommand::BitCount { key: b("k"), range };
    assert_eq!(read("BITCOUNT k"), bitcount(None));
    let byte_range = |start, end, unit| Some(BitRange { start, end, unit });
    assert_eq!(
        read("BITCOUNT k 1 -2"),
        bitcount(byte_range(1, -2, BitUnit::Byte))
    );
    assert_eq!(
        read("bitcount k 3 29 bit"),
        bitcount(byte_range(3, 29, BitUnit::Bit))
    );
    assert_eq!(
        read("BITCOUNT k 0 -1 BYTE"),
        bitcount(byte_range(0, -1, BitUnit::Byte))
    );
    for line in [
        "BITCOUNT k 0",
        "BITCOUNT k 0 1 hello",
        "BITCOUNT k 0 1 BIT x",
    ] {
        assert_eq!(error(line), "ERR syntax error", "{line}");
    }
    assert_eq!(
        error("BITCOUNT k 0 x"),
        "ERR value is not an integer or out of range"
    );
}

#[test]
fn lcs_options() {
    let lcs = |line, form| {
        assert_eq!(
            parse(line),
            Ok(Command::Read(ReadCommand::Lcs {
                key1: b("a"),
                key2: b("b"),
                form
            })),
            "{line}"
        )
    };
    lcs("LCS a b", LcsForm::Text);
    lcs("LCS a b len", LcsForm::Length);
    lcs("LCS a b WITHMATCHLEN", LcsForm::Text);
    lcs(
        "LCS a b IDX",
        LcsForm::Ranges {
            min_match_len: 0,
            with_match_len: false,
        },
    );
    lcs(
        "LCS a b IDX WITHMATCHLEN MINMATCHLEN 5",
        LcsForm::Ranges {
            min_match_len: 5,
            with_match_len: true,
        },
    );
    lcs(
        "LCS a b MINMATCHLEN -3 IDX",
        LcsForm::Ranges {
            min_match_len: 0,
            with_match_len: false,
        },
    );
    assert_eq!(
        error("LCS a b LEN IDX"),
        "ERR If you want both the length and indexes, please just use IDX."
    );
    assert_eq!(error("LCS a b IDX MINMATCHLEN"), "ERR syntax error");
    assert_eq!(error("LCS a b BOGUS"), "ERR syntax error");
    assert_eq!(
        error("LCS a b MINMATCHLEN x"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error("LCS a"),
        "ERR wrong number of arguments for 'lcs' command"
    );
}

#[test]
fn keyspace_commands() {
    let rename = |line, only_if_absent| {
        assert_eq!(
            parse(line),
            Ok(Command::Write(WriteCommand::Rename {
                key: b("a"),
                new_key: b("b"),
                only_if_absent
            }))
        )
    };
    rename("RENAME a b", false);
    rename("renamenx a b", true);
    let copy = |line, replace, db| {
        assert_eq!(
            parse(line),
            Ok(Command::Write(WriteCommand::Copy {
                source: b("a"),
                destination: b("b"),
                replace,
                db,
            })),
            "{line}"
        )
    };
    copy("COPY a b", false, None);
    copy("COPY a b REPLACE", true, None);
    copy("COPY a b db 0 replace", true, Some(0));
    copy("COPY a b REPLACE DB 3", true, Some(3));
    assert_eq!(error("COPY a b DB 1024"), "ERR DB index is out of range");
    assert_eq!(error("COPY a b DB -1"), "ERR DB index is out of range");
    assert_eq!(
        error("COPY a b DB notanumber"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(error("COPY a b DB"), "ERR syntax error");
    assert_eq!(error("COPY a b NOW"), "ERR syntax error");
    assert_eq!(
        error("COPY a a"),
        "ERR source and destination objects are the same"
    );
    assert_eq!(
        parse("UNLINK a b"),
        Ok(Command::Write(WriteCommand::Del {
            keys: vec![b("a"), b("b")]
        }))
    );
    assert_eq!(
        parse("TOUCH a a"),
        Ok(Command::Read(ReadCommand::Exists {
            keys: vec![b("a"), b("a")]
        }))
    );
    assert_eq!(
        parse("TYPE a"),
        Ok(Command::Read(ReadCommand::Type { key: b("a") }))
    );
    assert_eq!(
        parse("RANDOMKEY"),
        Ok(Command::Read(ReadCommand::RandomKey))
    );
    assert_eq!(
        parse("KEYS foo*"),
        Ok(Command::Read(ReadCommand::Keys { pattern: b("foo*") }))
    );
}

#[test]
fn scan_options() {
    let scan = |line: &str| match parse(line) {
        Ok(Command::Read(ReadCommand::Scan(args))) => args,
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(
        scan("SCAN 0"),
        ScanArgs {
            cursor: 0,
            pattern: None,
            count: 10,
            types: TypeFilter::Any
        }
    );
    assert_eq!(
        scan("scan 0042 MATCH key:* count 5 TYPE STRING"),
        ScanArgs {
            cursor: 42,
            pattern: Some(b("key:*")),
            count: 5,
            types: TypeFilter::Only(crate::kind::Kind::String)
        }
    );
    assert_eq!(scan("SCAN 18446744073709551615").cursor, u64::MAX);
    assert_eq!(
        scan("SCAN -1").cursor,
        u64::MAX,
        "strtoul wraps a negative cursor"
    );
    assert_eq!(scan("SCAN +5").cursor, 5);
    assert_eq!(scan("SCAN 1 MATCH *").pattern, None);
    assert_eq!(
        scan("SCAN 1 TYPE list").types,
        TypeFilter::Only(crate::kind::Kind::List)
    );
    assert_eq!(
        scan("SCAN 1 TYPE stream").types,
        TypeFilter::Only(crate::kind::Kind::Stream)
    );
    assert_eq!(scan("SCAN 1 TYPE hyperloglog").types, TypeFilter::Nothing);
    assert_eq!(
        scan("SCAN 1 TYPE String").types,
        TypeFilter::Only(crate::kind::Kind::String)
    );
    assert_eq!(scan("SCAN 1 COUNT 9999999999").count, u32::MAX);
    assert_eq!(scan("SCAN 1 COUNT 1 COUNT 7").count, 7, "the last one wins");
    for cursor in ["x", "-", "18446744073709551616", "1.5", "--1", "0x1"] {
        assert_eq!(
            error(&format!("SCAN {cursor}")),
            "ERR invalid cursor",
            "{cursor}"
        );
    }
    for line in [
        "SCAN 0 COUNT 0",
        "SCAN 0 COUNT -1",
        "SCAN 0 MATCH",
        "SCAN 0 BOGUS x",
    ] {
        assert_eq!(error(line), "ERR syntax error", "{line}");
    }
    assert_eq!(
        error("SCAN 0 COUNT x"),
        "ERR value is not an integer or out of range"
    );
}
