//! The libraries as scripts see them: the assertions of Redis 7.0's `scripting.tcl` about
//! `cjson`, `cmsgpack` and `bit`, and vectors and error messages taken from redis-server 7.0.

mod bit_struct;
mod cjson;
mod cmsgpack;

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
