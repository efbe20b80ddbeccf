//! The libraries as scripts see them: the assertions of Redis 7.0's `scripting.tcl` about
//! `cjson`, `cmsgpack` and `bit`, and vectors and error messages taken from redis-server 7.0.

mod bit_struct;
mod cjson;
mod cmsgpack;

use bytes::Bytes;
use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use super::libraries;

/// The heap bound of a script in keel (keel-redis's `SCRIPT_MEMORY_BYTES_MAX`).
const SCRIPT_MEMORY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What a script answered, as Redis converts a Lua value into a reply.
#[derive(Clone, Debug, PartialEq)]
enum Reply {
    Null,
    Integer(i64),
    Bulk(Bytes),
    Array(Vec<Reply>),
    Error(String),
}

/// Runs `body` as a script runs: Lua 5.1 with the base, table, string and math libraries, the
/// libraries as globals, the chunk named `user_script` (so errors read `user_script:LINE: ...`),
/// `KEYS` and `ARGV` empty, the heap bounded by `memory_bytes_max`. A script's error becomes `ERR <message>`.
fn eval_with(body: &str, memory_bytes_max: usize) -> Reply {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::new(),
    )
    .expect("a Lua state");
    let globals = lua.globals();
    let all = libraries(&lua, memory_bytes_max).expect("the libraries");
    for pair in all.pairs::<String, Table>() {
        let (name, library) = pair.expect("a library");
        globals.raw_set(name, library).expect("a global");
    }
    for name in ["KEYS", "ARGV"] {
        let empty = lua.create_table().expect("a table");
        globals.raw_set(name, empty).expect("a global");
    }
    lua.set_memory_limit(memory_bytes_max)
        .expect("a memory limit");
    let chunk = match lua.load(body).set_name("@user_script").into_function() {
        Ok(chunk) => chunk,
        Err(e) => return Reply::Error(format!("ERR {e}")),
    };
    let pcall: Function = globals.get("pcall").expect("pcall");
    let outcome: MultiValue = pcall.call(chunk).expect("pcall answers");
    let mut values = outcome.into_iter();
    let ok = matches!(values.next(), Some(Value::Boolean(true)));
    let value = values.next().unwrap_or(Value::Nil);
    match ok {
        true => reply(&value, 0),
        false => Reply::Error(format!("ERR {}", text(&lua, &value))),
    }
}

/// Redis's conversion of a script's value: nil and false null, true 1, numbers truncated to
/// integers, strings bulk, tables arrays up to their first nil.
fn reply(value: &Value, depth: usize) -> Reply {
    match value {
        Value::Boolean(true) => Reply::Integer(1),
        Value::Integer(n) => Reply::Integer(*n),
        Value::Number(n) => Reply::Integer(*n as i64),
        Value::String(s) => Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Table(table) if depth < 100 => {
            let mut items = Vec::new();
            for i in 1.. {
                match table.raw_get::<Value>(i).expect("an item") {
                    Value::Nil => break,
                    item => items.push(reply(&item, depth + 1)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Null,
    }
}

/// An error value's text.
fn text(lua: &Lua, value: &Value) -> String {
    match lua.coerce_string(value.clone()) {
        Ok(Some(s)) => s.to_string_lossy(),
        _ => format!("{value:?}"),
    }
}

fn eval(body: &str) -> Reply {
    eval_with(body, SCRIPT_MEMORY_BYTES_MAX)
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

/// Each `(argument, message)`: `return <call>`, `{}` in `call` standing for the argument, ends
/// the script with `ERR user_script:1: <message>`, as Redis words it.
fn raises(cases: &[(&str, &str)], call: &str) {
    for (argument, message) in cases {
        let body = format!("return {}", call.replace("{}", argument));
        assert_eq!(
            error(&body),
            format!("ERR user_script:1: {message}"),
            "{body}"
        );
    }
}
