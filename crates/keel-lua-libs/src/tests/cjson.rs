//! `cjson`: Redis's JSON smoke test, encodings, settings and errors.

use super::*;

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
        ("print", "Cannot serialise function: type not supported"),
        ("1, 2", "bad argument #1 to 'encode' (expected 1 argument)"),
    ];
    raises(&errors, "cjson.encode({})");
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

/// What `cjson.decode(text)` raises, as Redis words it.
const DECODING_ERRORS: &[(&str, &str)] = &[
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

#[test]
fn cjson_decoding_errors_are_redis_s() {
    raises(DECODING_ERRORS, "cjson.decode('{}')");
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
