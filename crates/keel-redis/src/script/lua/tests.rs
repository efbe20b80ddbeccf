//! Scripts as Redis 7.0's documentation and test suite run them, against a small in-memory
//! command set, plus the hostile ones a client may send.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::*;
use crate::script::sha1::sha1_hex;

/// Enough commands for the scripts below.
#[derive(Default)]
struct Fake {
    data: HashMap<Bytes, Bytes>,
    calls: Vec<Vec<Bytes>>,
}

impl Redis for Fake {
    fn call(&mut self, args: Vec<Bytes>) -> Reply {
        self.calls.push(args.clone());
        let name = String::from_utf8_lossy(&args[0]).to_lowercase();
        match (name.as_str(), &args[1..]) {
            ("get", [key]) => self.data.get(key).cloned().map_or(Reply::Null, Reply::Bulk),
            ("set", [key, value]) => {
                self.data.insert(key.clone(), value.clone());
                Reply::OK
            }
            ("del", keys) => {
                let removed = keys
                    .iter()
                    .filter(|key| self.data.remove(*key).is_some())
                    .count();
                Reply::Integer(removed as i64)
            }
            ("incr", [key]) => {
                let parse = |v: &Bytes| std::str::from_utf8(v).ok()?.parse::<i64>().ok();
                let Some(n) = self.data.get(key).map_or(Some(0), parse) else {
                    return Reply::error("ERR value is not an integer or out of range");
                };
                self.data
                    .insert(key.clone(), Bytes::from((n + 1).to_string()));
                Reply::Integer(n + 1)
            }
            ("ping", []) => Reply::PONG,
            ("ping" | "echo", [message]) => Reply::Bulk(message.clone()),
            ("hgetall", [_]) => Reply::Map(vec![(Reply::text("field"), Reply::text("value"))]),
            ("argc", rest) => Reply::Integer(rest.len() as i64),
            ("nested", []) => Reply::Array(vec![
                Reply::Integer(1),
                Reply::Array(vec![Reply::Null, Reply::text("x")]),
                Reply::simple("FINE"),
                Reply::error("WRONGTYPE inner"),
            ]),
            ("get" | "set" | "incr", _) => {
                Reply::error("ERR Wrong number of args calling Redis command from script")
            }
            _ => Reply::error("ERR Unknown Redis command called from script"),
        }
    }
}

const LIMITS: Limits = Limits {
    memory_bytes_max: 32 * 1024 * 1024,
    reply_bytes_max: 1024 * 1024,
};

fn strings_of(items: &[&str]) -> Vec<Bytes> {
    items
        .iter()
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect()
}

/// Runs `body` as `EVAL body numkeys keys... args...` would.
fn eval_full(body: &str, keys: &[&str], args: &[&str], limits: &Limits, redis: &mut Fake) -> Reply {
    let (sha, kill) = (sha1_hex(body.as_bytes()), AtomicBool::new(false));
    let (keys, args) = (strings_of(keys), strings_of(args));
    run(body.as_bytes(), &sha, &keys, &args, &kill, limits, redis)
}

fn eval(body: &str, keys: &[&str], args: &[&str], redis: &mut Fake) -> Reply {
    eval_full(body, keys, args, &LIMITS, redis)
}

/// Runs a script that needs no key, argument or data.
fn eval0(body: &str) -> Reply {
    eval(body, &[], &[], &mut Fake::default())
}

fn error_of(reply: &Reply) -> String {
    match reply {
        Reply::Error(text) => text.to_string(),
        other => panic!("expected an error reply, got {other:?}"),
    }
}

/// The suffix Redis 7 appends to an error that ended a script.
fn at(body: &str, line: usize) -> String {
    format!(
        " script: {}, on @user_script:{line}.",
        sha1_hex(body.as_bytes())
    )
}

fn ints(values: &[i64]) -> Reply {
    Reply::Array(values.iter().map(|&n| Reply::Integer(n)).collect())
}

#[test]
fn check_compiles_without_running_and_reports_syntax_errors_as_redis() {
    assert_eq!(check(b"return 1"), Ok(()));
    assert_eq!(check(b"while true do end"), Ok(()));
    assert_eq!(check(b"#!lua flags=no-writes\nreturn 1"), Ok(()));
    let error = error_of(&check(b"return 1 +").unwrap_err());
    assert!(
        error.starts_with("ERR Error compiling script (new function): user_script:1: "),
        "{error}"
    );
    let error = error_of(&check(b"\n\nlocal x = = 1").unwrap_err());
    assert!(error.contains("user_script:3:"), "{error}");
    // A precompiled chunk is refused: Lua 5.1 would trust it.
    assert!(check(b"\x1bLuaQ\x00\x01\x04\x08").is_err());
    // `run` answers the same for a script that does not compile.
    let reply = eval0("return 1 +");
    assert_eq!(reply, check(b"return 1 +").unwrap_err());
}

#[test]
fn lock_release_script_deletes_only_its_own_lock() {
    let script = r#"if redis.call("get",KEYS[1]) == ARGV[1] then
        return redis.call("del",KEYS[1])
    else
        return 0
    end"#;
    let mut redis = Fake::default();
    redis
        .data
        .insert(Bytes::from("lock"), Bytes::from("token-1"));
    assert_eq!(
        eval(script, &["lock"], &["token-2"], &mut redis),
        Reply::Integer(0)
    );
    assert!(redis.data.contains_key(&Bytes::from("lock")));
    assert_eq!(
        eval(script, &["lock"], &["token-1"], &mut redis),
        Reply::Integer(1)
    );
    assert!(redis.data.is_empty());
    assert_eq!(
        eval(script, &["lock"], &["token-1"], &mut redis),
        Reply::Integer(0)
    );
}

#[test]
fn keys_and_argv_are_one_based_string_arrays() {
    let reply = eval(
        "return {KEYS[1], KEYS[2], ARGV[1], ARGV[2], #KEYS, #ARGV, type(ARGV[1])}",
        &["a{t}", "b{t}"],
        &["c{t}", "d{t}"],
        &mut Fake::default(),
    );
    let text = |s: &str| Reply::text(s.to_string());
    let want = [text("a{t}"), text("b{t}"), text("c{t}"), text("d{t}")];
    let mut want = want.to_vec();
    want.extend([Reply::Integer(2), Reply::Integer(2), text("string")]);
    assert_eq!(reply, Reply::Array(want));
}

#[test]
fn lua_values_convert_to_replies_as_in_redis() {
    let nested = Reply::Array(vec![
        Reply::Integer(1),
        Reply::Integer(2),
        Reply::Integer(3),
        Reply::text("ciao"),
        ints(&[1, 2]),
    ]);
    assert_eq!(eval0("return {1,2,3,'ciao',{1,2}}"), nested);
    assert_eq!(eval0("return 3.99"), Reply::Integer(3));
    assert_eq!(eval0("return -3.99"), Reply::Integer(-3));
    assert_eq!(eval0("return 100.5"), Reply::Integer(100));
    assert_eq!(eval0("return true"), Reply::Integer(1));
    assert_eq!(eval0("return false"), Reply::Null);
    assert_eq!(eval0("return nil"), Reply::Null);
    assert_eq!(eval0("local x = 1"), Reply::Null);
    assert_eq!(eval0("return 'hello', 'ignored'"), Reply::text("hello"));
    assert_eq!(eval0("return {ok='fine'}"), Reply::simple("fine"));
    assert_eq!(eval0("return {err='My Error'}"), Reply::error("My Error"));
    assert_eq!(eval0("return {1, nil, 3}"), ints(&[1]));
    assert_eq!(eval0("return {1, 2, x = 3}"), ints(&[1, 2]));
    assert_eq!(eval0("return function() end"), Reply::Null);
    let with_error = Reply::Array(vec![Reply::Integer(1), Reply::error("ERR inner")]);
    assert_eq!(eval0("return {1, {err='ERR inner'}}"), with_error);
    // Redis 7.0 writes a script's double with `%.17g`: RESP2 a bulk string, RESP3 a double.
    assert_eq!(eval0("return {double=3.5}"), Reply::Double("3.5".into()));
    assert_eq!(
        eval0("return {double=0.1}"),
        Reply::Double("0.10000000000000001".into())
    );
    assert_eq!(
        eval0("return {map={a=1}}"),
        Reply::Map(vec![(Reply::text("a"), Reply::Integer(1))])
    );
    // Only raw reads: a metatable's functions never run while the reply is converted.
    assert_eq!(eval0("return _G"), Reply::Array(vec![]));
    let script =
        "local a = {} setmetatable(a, {__index = function() while true do end end}) return a";
    assert_eq!(eval0(script), Reply::Array(vec![]));
}

#[test]
fn binary_strings_round_trip() {
    let binary = "a\0b\u{1}\u{ff}";
    let mut redis = Fake::default();
    let reply = eval("return ARGV[1]", &[], &[binary], &mut redis);
    assert_eq!(reply, Reply::text(binary));
    let reply = eval(
        "redis.call('set', KEYS[1], ARGV[1]) return redis.call('get', KEYS[1])",
        &["k"],
        &[binary],
        &mut redis,
    );
    assert_eq!(reply, Reply::text(binary));
    assert_eq!(eval0("return #'a\\0b'"), Reply::Integer(3));
}

#[test]
fn replies_convert_to_lua_values_as_in_redis() {
    let mut redis = Fake::default();
    assert_eq!(
        eval(
            "return redis.call('incr', KEYS[1])",
            &["n"],
            &[],
            &mut redis
        ),
        Reply::Integer(1)
    );
    assert_eq!(
        eval(
            "return redis.call('incr', KEYS[1])",
            &["n"],
            &[],
            &mut redis
        ),
        Reply::Integer(2)
    );
    let script = "local v = redis.call('incr', KEYS[1]) return {type(v), v}";
    let want = Reply::Array(vec![Reply::text("number"), Reply::Integer(3)]);
    assert_eq!(eval(script, &["n"], &[], &mut redis), want);
    let script = "local v = redis.call('get', 'missing') return {type(v), v == false}";
    let want = Reply::Array(vec![Reply::text("boolean"), Reply::Integer(1)]);
    assert_eq!(eval(script, &[], &[], &mut redis), want);
    let script = "local v = redis.call('set', 'k', 'v') return {type(v), v['ok']}";
    let want = Reply::Array(vec![Reply::text("table"), Reply::text("OK")]);
    assert_eq!(eval(script, &[], &[], &mut redis), want);
    let script = "local v = redis.call('nested') \
                  return {#v, v[1], v[2][1] == false, v[2][2], v[3].ok, v[4].err}";
    let want = Reply::Array(vec![
        Reply::Integer(4),
        Reply::Integer(1),
        Reply::Integer(1),
        Reply::text("x"),
        Reply::text("FINE"),
        Reply::text("WRONGTYPE inner"),
    ]);
    assert_eq!(eval(script, &[], &[], &mut redis), want);
    // A reply read back converts to what the command answered.
    assert_eq!(
        eval0("return redis.call('nested')"),
        Fake::default().call(strings_of(&["nested"]))
    );
}

#[test]
fn numbers_become_arguments_as_percent_17g() {
    let mut redis = Fake::default();
    let script = "redis.call('set', KEYS[1], ARGV[1] + 0) return redis.call('get', KEYS[1])";
    for (number, want) in [
        ("3", "3"),
        ("3.5", "3.5"),
        ("-2", "-2"),
        ("0.1", "0.10000000000000001"),
        ("9007199254740991", "9007199254740991"),
        ("1e17", "1e+17"),
        ("1e-5", "1.0000000000000001e-05"),
    ] {
        assert_eq!(
            eval(script, &["k"], &[number], &mut redis),
            Reply::text(want),
            "{number}"
        );
    }
    for (value, want) in [
        (0.0, "0"),
        (-0.0, "-0"),
        (123456789012345678.0, "1.2345678901234568e+17"),
        (0.0001, "0.0001"),
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
        (f64::NAN, "nan"),
    ] {
        assert_eq!(format_g17(value), want, "{value}");
    }
}

#[test]
fn call_raises_command_errors_and_pcall_returns_them() {
    let mut redis = Fake::default();
    redis
        .data
        .insert(Bytes::from("s"), Bytes::from("not-an-int"));
    let script = "return redis.pcall('incr', KEYS[1])";
    let reply = eval(script, &["s"], &[], &mut redis);
    assert_eq!(
        reply,
        Reply::error("ERR value is not an integer or out of range")
    );
    let script = "local t = redis.pcall('incr', KEYS[1]) return {type(t), t['err']}";
    let want = Reply::Array(vec![
        Reply::text("table"),
        Reply::text("ERR value is not an integer or out of range"),
    ]);
    assert_eq!(eval(script, &["s"], &[], &mut redis), want);

    let script = "\nredis.call('incr', KEYS[1])\nreturn 'not reached'";
    let want = format!(
        "ERR value is not an integer or out of range{}",
        at(script, 2)
    );
    assert_eq!(error_of(&eval(script, &["s"], &[], &mut redis)), want);
    let script = "redis.call('nosuchcommand')";
    assert!(error_of(&eval0(script))
        .starts_with("ERR Unknown Redis command called from script script: "));
    let script = "redis.call('get', 'a', 'b')";
    assert!(error_of(&eval0(script)).starts_with("ERR Wrong number of args calling Redis command"));

    // Redis 7's pcall turns an error table into its text.
    let script = "local ok, e = pcall(redis.call, 'incr', KEYS[1]) return {tostring(ok), e}";
    let want = Reply::Array(vec![
        Reply::text("false"),
        Reply::text("ERR value is not an integer or out of range"),
    ]);
    assert_eq!(eval(script, &["s"], &[], &mut redis), want);
}

#[test]
fn bad_call_arguments_are_errors() {
    let no_arguments = "ERR Please specify at least one argument for this redis lib call";
    let script = "redis.call()";
    assert_eq!(
        error_of(&eval0(script)),
        no_arguments.to_string() + &at(script, 1)
    );
    // `redis.call` is a C function, as in Redis: a tail call keeps the script's frame.
    let script = "return redis.call()";
    assert_eq!(
        error_of(&eval0(script)),
        no_arguments.to_string() + &at(script, 1)
    );
    let not_strings = "ERR Lua redis lib command arguments must be strings or integers";
    let script = "local x = {} redis.call('ping', x)";
    assert_eq!(
        error_of(&eval0(script)),
        not_strings.to_string() + &at(script, 1)
    );
    let script = "return redis.pcall('ping', true)";
    assert_eq!(eval0(script), Reply::error(not_strings));
    let mut redis = Fake::default();
    let script =
        "local a = {} for i = 1, 7999 do a[i] = 'x' .. i end return redis.call('argc', unpack(a))";
    assert_eq!(eval(script, &[], &[], &mut redis), Reply::Integer(7999));
    assert_eq!(redis.calls[0].len(), 8000);
}

#[test]
fn many_values_cross_every_boundary() {
    // Lua 5.1's own pcall pushes its status past the stack it checked after a call with many
    // results; mlua holds at most a few thousand Lua values on the Rust side at once.
    let fill = "local t = {} for i = 1, 7990 do t[i] = 'x' .. i end ";
    for (script, want) in [
        ("return select('#', pcall(unpack, t))", 7991),
        (
            "return select('#', xpcall(function() return unpack(t) end, tostring))",
            7991,
        ),
        (
            "return select('#', coroutine.resume(coroutine.create(function() return unpack(t) end)))",
            7991,
        ),
        ("redis.log(redis.LOG_DEBUG, unpack(t)) return 1", 1),
        ("return redis.pcall('argc', unpack(t))", 7990),
        ("return #redis.call('echo', table.concat(t))", 38_843),
        (
            "local function f(n) if n == 0 then return unpack(t) end return f(n - 1) end \
          return select('#', f(100))",
            7990,
        ),
    ] {
        let mut redis = Fake::default();
        let reply = eval(&format!("{fill}{script}"), &[], &[], &mut redis);
        assert_eq!(reply, Reply::Integer(want), "{script}");
    }
    let reply = eval0(&format!("{fill}return t"));
    assert!(matches!(reply, Reply::Array(items) if items.len() == 7990));
    let reply = eval0(&format!("{fill}return unpack(t)"));
    assert_eq!(reply, Reply::text("x1"));
}

#[test]
fn script_errors_carry_their_code_and_location() {
    let script = "\nerror('boom')";
    assert_eq!(
        error_of(&eval0(script)),
        format!("ERR user_script:2: boom{}", at(script, 2))
    );
    let script = "local x = nil\nreturn x.field";
    let error = error_of(&eval0(script));
    assert!(
        error.starts_with("ERR user_script:2: attempt to index local 'x' (a nil value)"),
        "{error}"
    );
    let script = "error({err='MYERR x'})";
    assert_eq!(
        error_of(&eval0(script)),
        format!("MYERR x{}", at(script, 1))
    );
    let script = "return redis.error_reply('My Error')";
    assert_eq!(eval0(script), Reply::error("My Error"));
    assert_eq!(
        eval0("return redis.error_reply('MY_ERR_CODE custom msg')"),
        Reply::error("MY_ERR_CODE custom msg")
    );
    assert_eq!(
        eval0("return redis.error_reply('oops')"),
        Reply::error("ERR oops")
    );
    assert_eq!(
        eval0("return redis.error_reply('-ERR x\\r\\n')"),
        Reply::error("ERR x")
    );
    assert_eq!(eval0("return redis.error_reply('')"), Reply::error("ERR "));
    assert_eq!(
        eval0("return redis.error_reply(1)"),
        Reply::error("ERR wrong number or type of arguments")
    );
    assert_eq!(
        eval0("return redis.status_reply('MY_OK_CODE custom msg')"),
        Reply::simple("MY_OK_CODE custom msg")
    );
    // Error values that are not strings or error tables still make an `ERR` reply.
    for script in [
        "error()",
        "error({})",
        "error(true)",
        "error(coroutine.create(function() end))",
    ] {
        assert!(error_of(&eval0(script)).starts_with("ERR "), "{script}");
    }
    let script = "error(setmetatable({}, {__tostring = function() while true do end end}))";
    assert!(error_of(&eval0(script)).starts_with("ERR execution failure"));
}

#[test]
fn globals_are_read_only() {
    let error = error_of(&eval0("a = 5"));
    assert!(
        error.starts_with("ERR user_script:1: Attempt to modify a readonly table"),
        "{error}"
    );
    assert!(
        error.contains("Script attempted to create global variable 'a'"),
        "{error}"
    );
    let error = error_of(&eval0("return a"));
    let want = "ERR user_script:1: Script attempted to access nonexistent global variable 'a'";
    assert!(error.starts_with(want), "{error}");
    for script in [
        "redis = function() return 1 end",
        "redis.call = function() return 1 end",
        "_G = {}",
        "KEYS = {}",
        "string.rep = nil",
        "setmetatable(_G, {})",
        "local g = getmetatable(_G) g.__index = {}",
        "rawset(_G, 'x', 1)",
        "rawset(redis, 'x', 1)",
        "cjson.encode = function() return 1 end",
        "cmsgpack.pack = function() return 1 end",
        "bit.lshift = function() return 1 end",
        "struct.pack = 1",
    ] {
        let error = error_of(&eval0(script));
        assert!(
            error.contains("Attempt to modify a readonly table"),
            "{script}: {error}"
        );
    }
    for name in [
        "loadfile", "dofile", "print", "load", "os", "io", "debug", "require", "package",
    ] {
        let error = error_of(&eval0(&format!("return {name}")));
        let want = format!("Script attempted to access nonexistent global variable '{name}'");
        assert!(error.contains(&want), "{error}");
    }
    // Reads see through the proxies; locals, and fields of a script's own tables, are free.
    let script = "local n = 0 for k in pairs(_G) do n = n + 1 end \
                  KEYS[1] = 'x' local t = {} t.y = 2 \
                  return {rawget(_G, 'redis') ~= nil and 1 or 0, n > 10 and 1 or 0, KEYS[1], t.y, \
                          type(next(string)), tostring(rawget(_G, 'nothing'))}";
    let want = Reply::Array(vec![
        Reply::Integer(1),
        Reply::Integer(1),
        Reply::text("x"),
        Reply::Integer(2),
        Reply::text("string"),
        Reply::text("nil"),
    ]);
    assert_eq!(eval(script, &["k"], &[], &mut Fake::default()), want);
    // Redis 7's pcall of a global-protection error.
    let script = "local ok, e = pcall(function() return foo end) return tostring(ok) .. ' ' .. e";
    let reply = eval0(script);
    let Reply::Bulk(text) = &reply else {
        panic!("{reply:?}")
    };
    assert!(text.ends_with(b"Script attempted to access nonexistent global variable 'foo'"));
}

#[test]
fn libraries_are_the_sandboxed_set() {
    let script = "return {type(string.format), type(table.concat), type(math.floor), \
                  type(coroutine.create), type(unpack), type(tonumber), type(xpcall)}";
    let Reply::Array(types) = eval0(script) else {
        panic!()
    };
    assert_eq!(types.len(), 7);
    assert!(types.iter().all(|t| *t == Reply::text("function")));
    assert_eq!(
        eval0("return loadstring('return 1 + 1')()"),
        Reply::Integer(2)
    );
    // A precompiled chunk is not loaded.
    let error = error_of(&eval0(
        "return loadstring(string.dump(function() return 1 end))()",
    ));
    assert!(error.contains("attempt to call a nil value"), "{error}");
    assert_eq!(eval0("return ('ab'):rep(3)"), Reply::text("ababab"));
    assert_eq!(
        eval0("return string.find('a.b', '.', 1, true)"),
        Reply::Integer(2)
    );
    assert_eq!(eval0("return #string.rep('', 1e15)"), Reply::Integer(0));
    let script = "return string.find('aaa', string.rep('a?', 2049))";
    assert!(error_of(&eval0(script)).contains("pattern longer than 4096 bytes"));
    let script = "local r = math.random() return r >= 0 and r < 1";
    assert_eq!(eval0(script), Reply::Integer(1));
    // A seed makes the sequence repeatable.
    let script = "math.randomseed(ARGV[1]) return tostring(math.random())";
    let mut redis = Fake::default();
    let first = eval(script, &[], &["10"], &mut redis);
    assert_eq!(eval(script, &[], &["10"], &mut redis), first);
}

#[test]
fn the_redis_library_matches_redis_7() {
    assert_eq!(
        eval0("return redis.sha1hex('')"),
        Reply::text("da39a3ee5e6b4b0d3255bfef95601890afd80709")
    );
    let reply = eval0("return redis.sha1hex('Pizza & Mandolino')");
    assert_eq!(
        reply,
        Reply::text("74822d82031af7493c20eefa13bd07ec4fada82f")
    );
    assert!(error_of(&eval0("redis.sha1hex()")).starts_with("ERR wrong number of arguments"));
    assert_eq!(
        eval0("redis.log(redis.LOG_WARNING, 'a', 1) return 1"),
        Reply::Integer(1)
    );
    assert!(error_of(&eval0("redis.log(1)"))
        .starts_with("ERR redis.log() requires two arguments or more."));
    assert!(
        error_of(&eval0("redis.log('x', 'y')")).starts_with("ERR First argument must be a number")
    );
    assert!(error_of(&eval0("redis.log(9, 'y')")).starts_with("ERR Invalid debug level."));
    assert_eq!(
        eval0("return redis.replicate_commands()"),
        Reply::Integer(1)
    );
    assert_eq!(
        eval0("redis.set_repl(redis.REPL_ALL) return 1"),
        Reply::Integer(1)
    );
    assert!(error_of(&eval0("redis.set_repl(12345)")).starts_with("ERR Invalid replication flags."));
    let reply = eval0("return {redis.REDIS_VERSION, redis.REDIS_VERSION_NUM}");
    let version = crate::REDIS_COMPAT_VERSION;
    let Reply::Array(items) = reply else { panic!() };
    assert_eq!(items[0], Reply::text(version));
    assert!(matches!(items[1], Reply::Integer(n) if n > 0x07_00_00 - 1));
    assert!(error_of(&eval0("redis.setresp(4)")).starts_with("ERR RESP version must be 2 or 3."));
}

#[test]
fn setresp_3_gives_maps_as_maps() {
    let mut redis = Fake::default();
    let map = Reply::Map(vec![(Reply::text("field"), Reply::text("value"))]);
    let script = "redis.setresp(3) return redis.call('hgetall', KEYS[1])";
    assert_eq!(eval(script, &["h"], &[], &mut redis), map);
    let script = "redis.setresp(2) return redis.call('hgetall', KEYS[1])";
    let flat = Reply::Array(vec![Reply::text("field"), Reply::text("value")]);
    assert_eq!(eval(script, &["h"], &[], &mut redis), flat);
    assert_eq!(eval0("return redis.call('hgetall', 'h')"), flat);
    let script = "redis.setresp(3) return redis.call('get', 'missing') == nil";
    assert_eq!(eval0(script), Reply::Boolean(true));
    assert_eq!(
        eval0("redis.setresp(3) return false"),
        Reply::Boolean(false)
    );
    assert_eq!(eval0("return false"), Reply::Null, "RESP2: nil");
}

#[test]
fn a_recursive_or_deep_reply_ends_in_an_error_at_the_depth_bound() {
    let reply = eval0("local a = {} local b = {a} a[1] = b return a");
    let mut depth = 0;
    let mut reply = &reply;
    while let Reply::Array(items) = reply {
        assert_eq!(items.len(), 1);
        reply = &items[0];
        depth += 1;
    }
    assert_eq!(depth, REPLY_DEPTH_MAX);
    assert_eq!(*reply, Reply::error("ERR reached lua stack limit"));
    let script = "local t = {} for i = 1, 1000 do t = {t} end return t";
    assert!(matches!(eval0(script), Reply::Array(_)));
}

#[test]
fn replies_are_bounded_in_bytes() {
    let limits = Limits {
        memory_bytes_max: LIMITS.memory_bytes_max,
        reply_bytes_max: 1_000,
    };
    let mut redis = Fake::default();
    let reply = eval_full("return string.rep('x', 900)", &[], &[], &limits, &mut redis);
    assert!(matches!(reply, Reply::Bulk(data) if data.len() == 900));
    let reply = eval_full(
        "return string.rep('x', 2000)",
        &[],
        &[],
        &limits,
        &mut redis,
    );
    assert_eq!(
        error_of(&reply),
        "ERR script reply too large: more than 1000 bytes"
    );
    let script = "local t = {} for i = 1, 1000 do t[i] = i end return t";
    let reply = eval_full(script, &[], &[], &limits, &mut redis);
    assert!(error_of(&reply).starts_with("ERR script reply too large"));
}

#[test]
fn memory_is_bounded() {
    let script = "local t = {} for i = 1, 1e8 do t[i] = i end return #t";
    let error = error_of(&eval0(script));
    assert!(
        error.starts_with("ERR") && error.contains("not enough memory"),
        "{error}"
    );
    let error = error_of(&eval0("return #string.rep('x', 1e9)"));
    assert!(error.contains("not enough memory"), "{error}");
    // A script may catch the error, and goes on within the bound.
    let script = "local ok, e = pcall(function() local t = {} for i = 1, 1e8 do t[i] = i end end) \
                  return {tostring(ok), e, collectgarbage('count') < 32 * 1024}";
    let want = Reply::Array(vec![
        Reply::text("false"),
        Reply::text("not enough memory"),
        Reply::Integer(1),
    ]);
    assert_eq!(eval0(script), want);
    let script = "collectgarbage('stop') local s = '' for i = 1, 1e7 do s = s .. i end";
    assert!(error_of(&eval0(script)).contains("not enough memory"));
    // No room at all is an error too.
    for memory_bytes_max in [0, 1, 16 * 1024] {
        let limits = Limits {
            memory_bytes_max,
            reply_bytes_max: 1024,
        };
        let reply = eval_full("return 1", &[], &[], &limits, &mut Fake::default());
        assert!(error_of(&reply).starts_with("ERR"), "{memory_bytes_max}");
    }
}

/// Runs `body` until `kill` is set 50 ms in; returns the reply and how long the kill took.
fn killed_after_50ms(body: &str) -> (Reply, Duration) {
    let kill = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            kill.store(true, Ordering::Relaxed);
        });
        let start = Instant::now();
        let sha = sha1_hex(body.as_bytes());
        let reply = run(
            body.as_bytes(),
            &sha,
            &[],
            &[],
            &kill,
            &LIMITS,
            &mut Fake::default(),
        );
        (reply, start.elapsed())
    })
}

#[test]
fn kill_stops_a_script_even_one_that_catches_errors() {
    for script in [
        "while true do end",
        "local i = 0 while true do i = i + 1 end",
        "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end",
        "while true do xpcall(function() while true do end end, function(e) return e end) end",
        "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
        "coroutine.wrap(function() while true do end end)()",
        "local function f() local ok = pcall(f) while true do end end f()",
    ] {
        let (reply, elapsed) = killed_after_50ms(script);
        let error = error_of(&reply);
        assert!(
            error.starts_with("ERR Script killed by user with SCRIPT KILL..."),
            "{script}: {error}"
        );
        assert!(elapsed < Duration::from_secs(1), "{script}: {elapsed:?}");
    }
    // A flag already set stops the script at its first poll.
    let kill = AtomicBool::new(true);
    let reply = run(
        b"while true do end",
        "0",
        &[],
        &[],
        &kill,
        &LIMITS,
        &mut Fake::default(),
    );
    assert!(error_of(&reply).contains("Script killed by user with SCRIPT KILL"));
    // A script that finishes before any poll is not affected by a set flag.
    let reply = run(
        b"return 1",
        "0",
        &[],
        &[],
        &kill,
        &LIMITS,
        &mut Fake::default(),
    );
    assert_eq!(reply, Reply::Integer(1));
}

#[test]
fn runaway_recursion_is_an_error_on_a_small_stack() {
    // A script's thread may have a default-sized stack: Lua's own bounds must fit in it.
    let scripts = [
        "local function f() return f() + 1 end return f()",
        "local function f() return 1 + f() end return f()",
        "local function f() return pcall(f) end return f()",
        "local function f() return select(2, pcall(f)) end return f()",
        "local t = setmetatable({}, {__index = function(t, k) return t[k] end}) return t.x",
        "local t = setmetatable({}, {__tostring = function(t) return tostring(t) end}) return tostring(t)",
        "local function f() return coroutine.resume(coroutine.create(f)) end return f()",
        "local function f() return coroutine.wrap(f)() end return f()",
        "return string.find(string.rep('a', 600), string.rep('a?', 512))",
        // The longest pattern allowed, each item a level of the matcher's C recursion.
        "return string.find(string.rep('a', 3000), string.rep('a?', 2048))",
        "return string.gsub(string.rep('a', 3000), string.rep('a?', 2048), 'b')",
        "return string.match(string.rep('a', 3000), string.rep('a?', 2048) .. 'b')",
        "return loadstring(string.rep('(', 1e5))",
        "local s = string.rep('{', 1e4) return loadstring('return ' .. s)",
        "return table.concat({}, ',', 1, 1e9)",
        "return unpack({}, 1, 1e8)",
        "return coroutine.yield(1)",
        "return string.format('%99999d', 1)",
    ];
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            for script in scripts {
                let reply = eval0(script);
                if let Reply::Error(text) = &reply {
                    assert!(text.starts_with("ERR"), "{script}: {text}");
                }
            }
            let error = error_of(&eval0("local function f() return f() + 1 end return f()"));
            assert!(error.contains("stack overflow"), "{error}");
        })
        .expect("spawn")
        .join()
        .expect("no script may crash its thread");
}
