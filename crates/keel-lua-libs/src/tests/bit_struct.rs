//! `bit` and `struct`: Redis's bitop tests, vectors and errors.

use super::*;

#[test]
fn bit_as_redis_s_tests_use_it() {
    let minimal = "assert(bit.tobit(1) == 1); assert(bit.band(1) == 1); \
        assert(bit.bxor(1,2) == 3); assert(bit.bor(1,2,4,8,16,32,64,128) == 255)";
    assert_eq!(eval(minimal), Reply::Null);
    let cases: &[(&str, Reply)] = &[
        (
            "{bit.tobit(2^32+5), bit.tobit(-1), bit.tobit(2^31), bit.tobit(1.5), bit.tobit(2.5), \
          bit.tobit('7'), bit.tobit(2^53+3)}",
            ints(&[5, -1, -2147483648, 2, 2, 7, 2]),
        ),
        (
            "{bit.band(0xff, 0x0f, 0x3), bit.bnot(0), bit.lshift(1, 31), bit.lshift(1, 32), \
          bit.rshift(-1, 28), bit.arshift(-256, 4), bit.rol(0x12345678, 8), \
          bit.ror(0x12345678, 8), bit.bswap(0x12345678)}",
            ints(&[
                3,
                -1,
                -2147483648,
                1,
                15,
                -16,
                878082066,
                2014458966,
                2018915346,
            ]),
        ),
        (
            "{bit.tohex(65535), bit.tohex(-1), bit.tohex(255, 2), bit.tohex(255, -4), \
          bit.tohex(1, 20), bit.tohex(1, -2^31), bit.tohex(0x12345678, 0)}",
            Reply::Array(
                [
                    &b"0000ffff"[..],
                    b"ffffffff",
                    b"ff",
                    b"00FF",
                    b"00000001",
                    b"00000001",
                    b"",
                ]
                .iter()
                .map(|b| bulk(b))
                .collect(),
            ),
        ),
    ];
    for (expression, expected) in cases {
        assert_eq!(
            &eval(&format!("return {expression}")),
            expected,
            "{expression}"
        );
    }
    assert_eq!(
        error("return bit.tohex(65535, 'x')"),
        "ERR user_script:1: bad argument #2 to 'tohex' (number expected, got string)"
    );
    assert_eq!(
        error("return bit.tobit()"),
        "ERR user_script:1: bad argument #1 to 'tobit' (number expected, got no value)"
    );
    assert_eq!(
        caught("bit.band, 1, nil"),
        bulk(b"bad argument #2 to '?' (number expected, got nil)")
    );
}

#[test]
fn struct_packs_and_unpacks_as_redis() {
    let packs: &[(&str, &[u8])] = &[
        ("'>i2', 258", b"\x01\x02"),
        ("'<i', -2", b"\xfe\xff\xff\xff"),
        ("'>I3', 65539", b"\x01\x00\x03"),
        ("'b', -1", b"\xff"),
        ("'h', -2", b"\xfe\xff"),
        ("'>l', 1", b"\0\0\0\0\0\0\0\x01"),
        ("'>d', 1.5", b"?\xf8\0\0\0\0\0\0"),
        ("'<f', 0.5", b"\0\0\0?"),
        ("'s', 'hi'", b"hi\0"),
        ("'c0', 'hello'", b"hello"),
        ("'c3', 'hello'", b"hel"),
        ("'!4 b i', 1, 2", b"\x01\0\0\0\x02\0\0\0"),
        ("'!b d', 1, 2", b"\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0@"),
        ("'bxb', 1, 2", b"\x01\0\x02"),
        ("'i', '12'", b"\x0c\0\0\0"),
        (
            "'>i16', -1",
            b"\0\0\0\0\0\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff",
        ),
    ];
    for (args, expected) in packs {
        assert_eq!(
            eval(&format!("return struct.pack({args})")),
            bulk(expected),
            "{args}"
        );
    }
    let unpacks: &[(&str, Reply)] = &[
        (r"'>i2', '\1\2'", ints(&[258, 3])),
        (r"'>I3 b B', '\0\1\3\255\255'", ints(&[259, -1, 255, 6])),
        (
            r"'s', 'hi\0rest'",
            Reply::Array(vec![bulk(b"hi"), Reply::Integer(4)]),
        ),
        (
            r"'b c0', '\3abcd'",
            Reply::Array(vec![bulk(b"abc"), Reply::Integer(5)]),
        ),
        (
            "'c2', 'abc', 2",
            Reply::Array(vec![bulk(b"bc"), Reply::Integer(4)]),
        ),
        ("'!4 b i', struct.pack('!4 b i', 1, 2)", ints(&[1, 2, 9])),
        ("'>i16', struct.pack('>i16', -1)", ints(&[-1, 17])),
    ];
    for (args, expected) in unpacks {
        assert_eq!(
            &eval(&format!("return {{struct.unpack({args})}}")),
            expected,
            "{args}"
        );
    }
    assert_eq!(
        eval(
            "return {struct.size('i'), struct.size('!8 b d'), struct.size('c10'), \
              struct.size('b q b'), struct.size('>hHlLT')}"
        ),
        ints(&[4, 16, 10, 2, 28])
    );
}

#[test]
fn struct_errors_are_redis_s() {
    let errors = [
        (
            "struct.pack('c6', 'hello')",
            "bad argument #3 to 'pack' (string too short)",
        ),
        (
            "struct.pack('q', 1)",
            "bad argument #1 to 'pack' (invalid format option 'q')",
        ),
        (
            "struct.pack('i33', 1)",
            "integral size 33 is larger than limit of 32",
        ),
        ("struct.pack('!3', 1)", "alignment 3 is not a power of 2"),
        (
            "struct.pack('i', 'x')",
            "bad argument #2 to 'pack' (number expected, got string)",
        ),
        (
            "struct.pack('i')",
            "bad argument #2 to 'pack' (number expected, got nil)",
        ),
        (
            "struct.unpack('c0', 'abc')",
            "format 'c0' needs a previous size",
        ),
        (
            "struct.unpack('c2', 'abc', 0)",
            "bad argument #3 to 'unpack' (offset must be 1 or greater)",
        ),
        (
            "struct.unpack('c2', 'abc', 3)",
            "bad argument #2 to 'unpack' (data string too short)",
        ),
        ("struct.unpack('s', 'abc')", "unfinished string in data"),
        (
            "struct.unpack('q', 'abc')",
            "bad argument #1 to 'unpack' (invalid format option 'q')",
        ),
        (
            "struct.size('s')",
            "bad argument #1 to 'size' (option 's' has no fixed size)",
        ),
        (
            "struct.size('c0')",
            "bad argument #1 to 'size' (option 'c0' has no fixed size)",
        ),
        (
            "struct.size()",
            "bad argument #1 to 'size' (string expected, got no value)",
        ),
    ];
    raises(&errors, "{}");
}
