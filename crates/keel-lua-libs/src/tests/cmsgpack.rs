//! `cmsgpack`: Redis's MessagePack tests, encodings, errors, and the output bound.

use super::*;

#[test]
fn cmsgpack_as_redis_s_tests_use_it() {
    let hex = |value: &str| {
        format!(
            "local encoded = cmsgpack.pack({value}) local h = '' \
             for i = 1, #encoded do h = h .. string.format('%02x', string.byte(encoded, i)) end \
             return h"
        )
    };
    assert_eq!(eval(&hex("0.1")), bulk(b"cb3fb999999999999a"));
    assert_eq!(eval(&hex("-1099511627776")), bulk(b"d3ffffff0000000000"));
    let smoke = r#"
        local str_lt_32, str_lt_255 = string.rep("x", 30), string.rep("x", 250)
        local str_lt_65535, str_long = string.rep("x", 65530), string.rep("x", 100000)
        local array_big, map_big = {}, {}
        for i = 1, 100000 do array_big[i] = i; map_big[tostring(i)] = i end
        local some_map = {s1=str_lt_32, s2=str_lt_255, s3=str_lt_65535, s4=str_long, d1=0.1,
            i1=1, i2=250, i3=65530, i4=100000, i5=2^40, i6=-1, i7=-120, i8=-32000, i9=-100000,
            i10=-3147483648, a1={1, 2, 3, 4, 5}, a2={1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
            14, 15, 16, 17, 18}, a3=array_big, m1={a=1, b=2}, m2=map_big, b1=false, b2=true,
            n=nil}
        local encoded = cmsgpack.pack(some_map)
        local decoded = cmsgpack.unpack(encoded)
        assert(table.concat(some_map) == table.concat(decoded))
        local offset, decoded_one = cmsgpack.unpack_one(encoded, 0)
        assert(table.concat(some_map) == table.concat(decoded_one))
        assert(offset == -1)
        assert(decoded.m2["99999"] == 99999 and decoded.a3[100000] == 100000)
        assert(decoded.i10 == -3147483648 and decoded.d1 == 0.1 and decoded.s4 == str_long)
        local encoded_multiple = cmsgpack.pack(str_lt_32, str_lt_255, str_lt_65535, str_long)
        local offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, 0)
        assert(obj == str_lt_32)
        offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
        assert(obj == str_lt_255)
        offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
        assert(obj == str_lt_65535)
        offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
        assert(obj == str_long)
        assert(offset == -1)
        return 'done'"#;
    assert_eq!(eval(smoke), bulk(b"done"));
    let circular =
        hex("(function() local a = {x=nil,y=5} local b = {x=a} a['x'] = b return a end)()");
    let expected = format!("{}c0", "82a17905a17881a178".repeat(8));
    assert_eq!(eval(&circular), bulk(expected.as_bytes()));
    let depth = r#"local a = {x=nil,y=5}; local b = {x=a}; a['x'] = b
        local re = cmsgpack.unpack(cmsgpack.pack(a))
        assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.y == re.y)
        assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x)
        assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x == nil)
        return {re.x.x.x.x.x.x.x.x.y == re.y, re.y == 5}"#;
    assert_eq!(eval(depth), ints(&[1, 1]));
}

#[test]
fn cmsgpack_encodes_numbers_strings_and_tables_as_redis() {
    let numbers = "return cmsgpack.pack(1, -1, 127, 128, 255, 256, 65535, 65536, 2^32-1, 2^32, \
        -32, -33, -128, -129, -32768, -32769, -2^31, -2^31-1, 2^63, -2^63, 0.5, 1e300, 1/0, \
        0/0, -0.0)";
    let expected: &[u8] = b"\x01\xff\x7f\xcc\x80\xcc\xff\xcd\x01\x00\xcd\xff\xff\xce\x00\x01\
        \x00\x00\xce\xff\xff\xff\xff\xcf\x00\x00\x00\x01\x00\x00\x00\x00\xe0\xd0\xdf\xd0\x80\xd1\
        \xff\x7f\xd1\x80\x00\xd2\xff\xff\x7f\xff\xd2\x80\x00\x00\x00\xd3\xff\xff\xff\xff\x7f\xff\
        \xff\xff\xca_\x00\x00\x00\xd3\x80\x00\x00\x00\x00\x00\x00\x00\xca?\x00\x00\x00\xcb~7\xe4<\
        \x88\x00u\x9c\xca\x7f\x80\x00\x00\xcb\xff\xf8\x00\x00\x00\x00\x00\x00\x00";
    assert_eq!(eval(numbers), bulk(expected));
    assert_eq!(
        eval("return cmsgpack.pack({}, {1,2}, {a=1}, {1, nil, 3}, true, false, nil)"),
        bulk(b"\x90\x92\x01\x02\x81\xa1a\x01\x82\x01\x01\x03\x03\xc3\xc2\xc0")
    );
    assert_eq!(
        eval("return cmsgpack.pack({[1]=1, [2]=2, x=3})"),
        bulk(b"\x83\x01\x01\x02\x02\xa1x\x03")
    );
    let headers = "local h = {} for _, n in ipairs({0, 31, 32, 255, 256, 65535, 65536}) do \
        h[#h + 1] = cmsgpack.pack(string.rep('x', n)):sub(1, 5) end return h";
    let expected = [
        &b"\xa0"[..],
        b"\xbfxxxx",
        b"\xd9\x20xxx",
        b"\xd9\xffxxx",
        b"\xda\x01\x00xx",
        b"\xda\xff\xffxx",
        b"\xdb\x00\x01\x00\x00",
    ];
    assert_eq!(
        eval(headers),
        Reply::Array(expected.iter().map(|b| bulk(b)).collect())
    );
}

#[test]
fn cmsgpack_unpacks_and_fails_as_redis() {
    let cases: &[(&str, Reply)] = &[
        (
            "{cmsgpack.unpack(cmsgpack.pack(1, 'two', 3.5, true))}",
            Reply::Array(vec![
                Reply::Integer(1),
                bulk(b"two"),
                Reply::Integer(3),
                Reply::Integer(1),
            ]),
        ),
        (
            "{cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3))}",
            ints(&[1, 1]),
        ),
        (
            "{cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 2)}",
            ints(&[-1, 3]),
        ),
        (
            "{cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)}",
            ints(&[2, 1, 2]),
        ),
        (
            "{cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2, 1)}",
            ints(&[-1, 2, 3]),
        ),
        (
            r"{cmsgpack.unpack('\207\255\255\255\255\255\255\255\255\211\128\0\0\0\0\0\0\0\202\63\192\0\0\208\128\209\128\0\210\128\0\0\0')}",
            ints(&[-1, i64::MIN, 1, -128, -32768, -2147483648]),
        ),
        ("cmsgpack.unpack('')", Reply::Null),
    ];
    for (expression, expected) in cases {
        assert_eq!(
            &eval(&format!("return {expression}")),
            expected,
            "{expression}"
        );
    }
    let errors = [
        (
            "cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), -1)",
            "Invalid request to unpack with offset of 0 and limit of 3.",
        ),
        (
            "cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 10)",
            "Start offset 10 greater than input length 3.",
        ),
        (r"cmsgpack.unpack('\193')", "Bad data format in input."),
        (r"cmsgpack.unpack('\196\1a')", "Bad data format in input."),
        (r"cmsgpack.unpack('\205\1')", "Missing bytes in input."),
        (
            "cmsgpack.pack()",
            "bad argument #0 to 'pack' (MessagePack pack needs input.)",
        ),
    ];
    raises(&errors, "{}");
    let deep = "return cmsgpack.unpack(string.rep('\\145', 1001) .. '\\1')";
    assert!(error(deep).contains("nests deeper than 1000"), "bounded");
}

#[test]
fn library_outputs_stay_within_the_script_s_memory() {
    // Each level doubles the encoding: 2^40 copies of a string could not fit anywhere, 2^14
    // (cmsgpack writes 16 levels) not in 8 MiB.
    for (levels, encode) in [(40, "cjson.encode(t)"), (14, "cmsgpack.pack(t)")] {
        let body = format!(
            "local t = string.rep('x', 1000) for i = 1, {levels} do t = {{t, t}} end \
             return select(2, pcall(function() return {encode} end))"
        );
        match eval_with(&body, 8 * 1024 * 1024) {
            Reply::Bulk(message) => {
                let message = String::from_utf8_lossy(&message);
                assert!(message.contains("memory has left"), "{encode}: {message}");
            }
            other => panic!("{encode}: {other:?}"),
        }
    }
}
