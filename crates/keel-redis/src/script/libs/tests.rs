//! The libraries as scripts see them: the assertions of Redis 7.0's `scripting.tcl` about
//! `cjson`, `cmsgpack` and `bit`, and vectors and error messages taken from redis-server 7.0.

use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use keel_resp::Reply;

use crate::script::lua::{run, Limits, Redis};
use crate::script::sha1::sha1_hex;

struct NoCommands;

impl Redis for NoCommands {
    fn call(&mut self, _: Vec<Bytes>) -> Reply {
        Reply::error("ERR no commands here")
    }
}

fn eval_with(body: &str, memory_bytes_max: usize) -> Reply {
    let limits = Limits {
        memory_bytes_max,
        reply_bytes_max: 16 * 1024 * 1024,
    };
    let kill = AtomicBool::new(false);
    let sha = sha1_hex(body.as_bytes());
    run(
        body.as_bytes(),
        &sha,
        &[],
        &[],
        &kill,
        &limits,
        &mut NoCommands,
    )
}

fn eval(body: &str) -> Reply {
    eval_with(body, crate::script::SCRIPT_MEMORY_BYTES_MAX)
}

fn bulk(data: &[u8]) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(data))
}

fn ints(values: &[i64]) -> Reply {
    Reply::Array(values.iter().map(|&n| Reply::Integer(n)).collect())
}

/// The message of the error a script ended with, without the `script: ..., on ...` suffix.
fn error(body: &str) -> String {
    match eval(body) {
        Reply::Error(text) => match text.split_once(" script: ") {
            Some((message, _)) => message.to_string(),
            None => text.to_string(),
        },
        other => panic!("{body}: expected an error, got {other:?}"),
    }
}

/// What a script's `pcall(...)` caught: `return select(2, pcall(...))`.
fn caught(call: &str) -> Reply {
    eval(&format!("return select(2, pcall({call}))"))
}

#[test]
fn cjson_as_redis_s_tests_use_it() {
    // "EVAL - JSON numeric decoding" and "JSON string decoding".
    let numbers =
        r#"return table.concat(cjson.decode("[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]"), " ")"#;
    assert_eq!(eval(numbers), bulk(b"0 -5000 -1 0.0003 1023.2 0"));
    let strings = r#"local decoded = cjson.decode('{"keya": "a", "keyb": "b"}')
        return {decoded.keya, decoded.keyb}"#;
    assert_eq!(eval(strings), Reply::Array(vec![bulk(b"a"), bulk(b"b")]));
    // "EVAL - JSON smoke test", assertions and all.
    let smoke = r#"
        local some_map = {s1="Some string", n1=100, a1={"Some","String","Array"}, nil1=nil,
                          b1=true, b2=false}
        local encoded = cjson.encode(some_map)
        local decoded = cjson.decode(encoded)
        assert(table.concat(some_map) == table.concat(decoded))
        cjson.encode_keep_buffer(false)
        encoded = cjson.encode(some_map)
        decoded = cjson.decode(encoded)
        assert(table.concat(some_map) == table.concat(decoded))
        local table1 = {one="one", [1]="one"}
        decoded = cjson.decode(cjson.encode(table1))
        assert(decoded["one"] == table1["one"])
        assert(decoded["1"] == table1[1])
        local array1 = {[1]="one", [2]="two"}
        decoded = cjson.decode(cjson.encode(array1))
        assert(table.concat(array1) == table.concat(decoded))
        local invalid_map = {}
        invalid_map[false] = "false"
        local ok = pcall(cjson.encode, invalid_map)
        assert(ok == false)
        cjson.encode_max_depth(1)
        ok = pcall(cjson.encode, some_map)
        assert(ok == false)
        cjson.decode_max_depth(1)
        ok = pcall(cjson.decode, '{"obj": {"array": [1,2,3,4]}}')
        assert(ok == false)
        ok = pcall(cjson.encode, {num1=0/0})
        assert(ok == false)
        cjson.encode_invalid_numbers(true)
        ok = pcall(cjson.encode, {num1=0/0})
        assert(ok == true)
        return 'done'"#;
    assert_eq!(eval(smoke), bulk(b"done"));
    assert!(error("cjson.encode = function() return 1 end")
        .contains("Attempt to modify a readonly table"));
}

#[test]
fn cjson_encodes_as_redis() {
    let cases: &[(&str, &[u8])] = &[
        ("{1,2,3}", b"[1,2,3]"),
        ("{}", b"{}"),
        ("{1,2,nil,4}", b"[1,2,null,4]"),
        ("{[1]=1,[10]=2}", b"[1,null,null,null,null,null,null,null,null,2]"),
        ("{[1]=1,[3]=3, x=1}", br#"{"1":1,"x":1,"3":3}"#),
        ("{[0]=1}", br#"{"0":1}"#),
        ("{[1.5]=1}", br#"{"1.5":1}"#),
        (
            "{one=1, two=2, three=3, four=4, five=5, six=6, seven=7}",
            br#"{"six":6,"four":4,"two":2,"one":1,"seven":7,"five":5,"three":3}"#,
        ),
        (
            r#""a\"b\\c/d\n\r\t\b\f\1\127\200""#,
            br#""a\"b\\c\/d\n\r\t\b\f\u0001\u007f"#,
        ),
        (
            "{a={b={1.5,2^53, 1e300, 0.1, -0, 1/3, 100, -1e-7, 123456789012345678}}}",
            br#"{"a":{"b":[1.5,9.007199254741e+15,1e+300,0.1,-0,0.33333333333333,100,-1e-07,1.2345678901235e+17]}}"#,
        ),
        ("cjson.null", b"null"),
        ("nil", b"null"),
        ("true", b"true"),
        ("KEYS", b"{}"),
    ];
    for (value, expected) in cases {
        let reply = eval(&format!("return cjson.encode({value})"));
        let expected = match expected.ends_with(b"\\u007f") {
            // The byte 200 follows as it is.
            true => [&expected[..], b"\xc8\""].concat(),
            false => expected.to_vec(),
        };
        assert_eq!(reply, bulk(&expected), "cjson.encode({value})");
    }
}

#[test]
fn cjson_settings_answer_and_apply_as_redis() {
    let script = r#"return {cjson.encode_invalid_numbers(true), cjson.encode(0/0), cjson.encode(-1/0),
        cjson.encode_invalid_numbers("null"), cjson.encode(1/0),
        cjson.encode_number_precision(3), cjson.encode(3.14159),
        cjson.encode_keep_buffer(false), cjson.encode_keep_buffer("on")}"#;
    let reply = eval(script);
    let expected = Reply::Array(vec![
        Reply::Integer(1),
        bulk(b"nan"),
        bulk(b"-inf"),
        bulk(b"null"),
        bulk(b"null"),
        Reply::Integer(3),
        bulk(b"3.14"),
        Reply::Null,
        Reply::Integer(1),
    ]);
    assert_eq!(reply, expected);
    assert_eq!(
        eval("return {cjson.encode_sparse_array(true, 3, 5), cjson.encode({[1]=1,[20]=2})}"),
        Reply::Array(vec![Reply::Integer(1), bulk(br#"{"1":1,"20":2}"#)])
    );
    assert_eq!(
        eval("return {cjson.encode_max_depth(2), pcall(cjson.encode, {{{1}}})}"),
        Reply::Array(vec![
            Reply::Integer(2),
            Reply::Null,
            bulk(b"Cannot serialise, excessive nesting (3)")
        ])
    );
    assert_eq!(
        caught("cjson.encode, (function() cjson.encode_max_depth(2) return {{{1}}} end)()"),
        bulk(b"Cannot serialise, excessive nesting (3)")
    );
    assert_eq!(
        eval("cjson.encode_number_precision(5) return cjson.new().encode(1/3)"),
        bulk(b"0.33333333333333"),
        "a new module has its own settings"
    );
    let errors = [
        (
            "cjson.encode_invalid_numbers('maybe')",
            "user_script:1: bad argument #1 to 'encode_invalid_numbers' (invalid option 'maybe')",
        ),
        (
            "cjson.encode_number_precision(15)",
            "user_script:1: bad argument #1 to 'encode_number_precision' (expected integer \
             between 1 and 14)",
        ),
        (
            "cjson.encode_max_depth(1, 2)",
            "user_script:1: bad argument #2 to 'encode_max_depth' (found too many arguments)",
        ),
        (
            "cjson.encode_sparse_array(nil, -1)",
            "user_script:1: bad argument #1 to 'encode_sparse_array' (expected integer between \
             0 and 2147483647)",
        ),
    ];
    for (call, message) in errors {
        assert_eq!(error(call), format!("ERR {message}"), "{call}");
    }
}

#[test]
fn cjson_encoding_errors_are_redis_s() {
    let errors = [
        (
            "{[1]=1,[20]=2}",
            "Cannot serialise table: excessively sparse array",
        ),
        ("0/0", "Cannot serialise number: must not be NaN or Inf"),
        ("{x=1/0}", "Cannot serialise number: must not be NaN or Inf"),
        (
            "{[true]=1}",
            "Cannot serialise boolean: table key must be a number or string",
        ),
        (
            "redis.call",
            "Cannot serialise function: type not supported",
        ),
        ("1, 2", "bad argument #1 to 'encode' (expected 1 argument)"),
    ];
    for (value, message) in errors {
        let body = format!("return cjson.encode({value})");
        assert_eq!(
            error(&body),
            format!("ERR user_script:1: {message}"),
            "{body}"
        );
    }
    assert_eq!(
        caught("cjson.encode"),
        bulk(b"bad argument #1 to '?' (expected 1 argument)"),
        "through pcall: no position, no name, as from C"
    );
    // A table containing itself stops at the depth bound.
    assert_eq!(
        caught("cjson.encode, (function() local t = {} t[1] = t return t end)()"),
        bulk(b"Cannot serialise, excessive nesting (1001)")
    );
}

#[test]
fn cjson_decodes_as_redis() {
    let cases: &[(&str, Reply)] = &[
        (
            r#"return cjson.decode('"\\u00e9\\ud83d\\ude00\\n\\/"')"#,
            bulk("é😀\n/".as_bytes()),
        ),
        ("return cjson.decode('0x10')", Reply::Integer(16)),
        ("return cjson.decode('+5')", Reply::Integer(5)),
        ("return cjson.decode('01')", Reply::Integer(1)),
        ("return tostring(cjson.decode('-inf'))", bulk(b"-inf")),
        ("return tostring(cjson.decode('nan'))", bulk(b"nan")),
        ("return cjson.decode(123)", Reply::Integer(123)),
        (
            "return cjson.decode('[null, true, false]')[1] == cjson.null",
            Reply::Integer(1),
        ),
        (
            r#"return cjson.encode(cjson.decode('{"a":[1,2,{"b":null}],"c":"d"}'))"#,
            bulk(br#"{"a":[1,2,{"b":null}],"c":"d"}"#),
        ),
        (
            "return {cjson._NAME, cjson._VERSION}",
            Reply::Array(vec![bulk(b"cjson"), bulk(b"2.1.0")]),
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(&eval(body), expected, "{body}");
    }
}

#[test]
fn cjson_decoding_errors_are_redis_s() {
    let errors = [
        ("x", "Expected value but found invalid token at character 1"),
        (
            "[1,2",
            "Expected comma or array end but found T_END at character 5",
        ),
        (
            "[1 2]",
            "Expected comma or array end but found T_NUMBER at character 4",
        ),
        (
            r#"{"a" 1}"#,
            "Expected colon but found T_NUMBER at character 6",
        ),
        (
            "{1:1}",
            "Expected object key string but found T_NUMBER at character 2",
        ),
        (
            r#""abc"#,
            "Expected value but found unexpected end of string at character 5",
        ),
        (
            r#""\\q""#,
            "Expected value but found invalid escape code at character 2",
        ),
        (
            r#""\\ud800""#,
            "Expected value but found invalid unicode escape code at character 2",
        ),
        (
            "[1] x",
            "Expected the end but found invalid token at character 5",
        ),
        ("", "Expected value but found T_END at character 1"),
        ("\\0a", "JSON parser does not support UTF-16 or UTF-32"),
        (
            "1.5e",
            "Expected the end but found invalid token at character 4",
        ),
        (
            ".5",
            "Expected value but found invalid token at character 1",
        ),
        (
            "tru",
            "Expected value but found invalid token at character 1",
        ),
    ];
    for (text, message) in errors {
        let body = format!("return cjson.decode('{text}')");
        assert_eq!(
            error(&body),
            format!("ERR user_script:1: {message}"),
            "{body}"
        );
    }
    assert_eq!(
        error("return cjson.decode({})"),
        "ERR user_script:1: bad argument #1 to 'decode' (string expected, got table)"
    );
    assert_eq!(
        caught("cjson.decode, (function() cjson.decode_max_depth(2) return '[[[1]]]' end)()"),
        bulk(b"Found too many nested data structures (3) at character 3")
    );
    assert_eq!(
        caught("cjson.decode, (function() cjson.decode_invalid_numbers(false) return '0x1' end)()"),
        bulk(b"Expected value but found invalid number at character 1")
    );
    let deep = format!("{}1{}", "[".repeat(1001), "]".repeat(1001));
    assert_eq!(
        caught(&format!("cjson.decode, '{deep}'")),
        bulk(b"Found too many nested data structures (1001) at character 1001"),
        "bounded whatever the setting"
    );
}

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
    assert!(error("cmsgpack.pack = function() return 1 end")
        .contains("Attempt to modify a readonly table"));
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
    for (expression, message) in errors {
        let body = format!("return {expression}");
        assert_eq!(
            error(&body),
            format!("ERR user_script:1: {message}"),
            "{body}"
        );
    }
    let deep = format!("return cmsgpack.unpack(string.rep('\\145', 1001) .. '\\1')");
    assert!(error(&deep).contains("nests deeper than 1000"), "bounded");
}

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
    assert!(error("bit.lshift = function() return 1 end")
        .contains("Attempt to modify a readonly table"));
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
    for (call, message) in errors {
        let body = format!("return {call}");
        assert_eq!(
            error(&body),
            format!("ERR user_script:1: {message}"),
            "{body}"
        );
    }
    assert!(error("struct.pack = 1").contains("Attempt to modify a readonly table"));
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
