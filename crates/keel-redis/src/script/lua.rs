//! Running one script: a fresh, sandboxed Lua 5.1 state per call, with Redis's scripting API
//! (`redis.call`, `pcall`, `error_reply`, `status_reply`, `sha1hex` and `log`) and its
//! conversions between replies and Lua values.
//!
//! Redis embeds Lua 5.1 and scripts written for it rely on 5.1's semantics, so keel runs the same
//! language, and follows Redis 7.0's `EVAL` (its vendored test suite is the reference):
//!
//! - **A fresh state per run**, so nothing a script does reaches the next one (tens of µs).
//! - **Sandbox.** The base (with 5.1's `coroutine`), `table`, `string` and `math` libraries, less
//!   `print`, `dofile`, `loadfile` and `load`; `loadstring` takes source text only (Lua 5.1
//!   trusts precompiled chunks, and a crafted one corrupts memory).
//! - **Read-only globals**, as in Redis 7.0.15: assigning a global, or a field of a library table
//!   or of `redis`, raises `Attempt to modify a readonly table`; reading a global that does not
//!   exist raises `Script attempted to access nonexistent global variable`. Lua 5.1 has no
//!   read-only tables: each is an empty proxy over the real one (`rawget`, `rawset`, `next`,
//!   `pairs` and `setmetatable` see through proxies). This protection is written in Lua
//!   (`sandbox.lua`).
//! - **Errors are tables.** `redis.call` raises a command's error as `{err = "CODE message"}`; a
//!   script ending by an error answers its text with where it was raised appended (`ERR ...
//!   script: f_<sha>, on @user_script:3.`), a string error (`error("boom")`) with the code
//!   `ERR`. The script runs under `xpcall`, whose handler notes the line while the stack is there.
//! - **Kill.** A hook polls the kill flag every [`KILL_POLL_INSTRUCTIONS`] VM instructions and
//!   raises once it is set; `pcall`, `xpcall` and `coroutine.resume` check it again as they
//!   return, so a script cannot catch its way past `SCRIPT KILL`. A library call runs to its end
//!   first: as in Redis, a pattern that backtracks exponentially cannot be killed (`string.rep`
//!   of an empty string, which could loop as long without allocating, returns at once).
//! - **Bounds.** The Lua heap (`Limits::memory_bytes_max`): past it allocations fail with a
//!   memory error, which a script may catch but not get past. The reply: at most
//!   [`REPLY_DEPTH_MAX`] levels (as in Redis, the level past it becomes the error `reached lua
//!   stack limit`, so a table containing itself ends) and `Limits::reply_bytes_max` bytes.
//!   Recursion: Lua bounds its own (`stack overflow`, `C stack overflow`) except in its pattern
//!   matcher, which recurses in C once per pattern item, so patterns are bounded
//!   ([`PATTERN_BYTES_MAX`]). A default 2 MiB thread stack is enough; the tests run on one.
//!
//! Nothing here trusts the script: every failure, Lua's or mlua's, becomes an error reply, and no
//! Rust function takes a variable number of Lua values (mlua panics past a few thousand).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use mlua::{
    ChunkMode, Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState,
};

use keel_resp::Reply;

use keel_lua_libs as libs;

/// What a script's `redis.call` / `redis.pcall` reach: runs one command (its name first) and
/// returns its reply; a command error is [`Reply::Error`].
pub trait Redis {
    fn call(&mut self, args: Vec<Bytes>) -> Reply;
}

/// Bounds on one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bound on the Lua heap, in bytes (0 leaves no room, rather than no bound).
    pub memory_bytes_max: usize,
    /// Bound on the script's converted reply, in bytes, roughly as encoded.
    pub reply_bytes_max: usize,
}

/// How often the kill flag is polled, in VM instructions: often enough that a killed script
/// stops within a millisecond, rarely enough to cost nothing measurable.
pub const KILL_POLL_INSTRUCTIONS: u32 = 10_000;

/// Deepest nesting of tables converted into a reply.
pub const REPLY_DEPTH_MAX: usize = 64;

/// Longest pattern `string.find`, `match`, `gmatch` and `gsub` take. Lua 5.1's matcher recurses
/// in C once per pattern item with no limit of its own: a pattern of 100,000 items overflows a
/// 2 MiB stack, 2,048 items (the most this allows) take about 128 KiB. Real patterns are a few
/// dozen bytes.
pub const PATTERN_BYTES_MAX: usize = 4_096;

/// Bound on the heap compiling a script may use in [`check`].
const CHECK_MEMORY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// The script's chunk name: Lua's messages then read `user_script:LINE: ...`, as Redis's do.
const SCRIPT_CHUNK: &str = "@user_script";

/// The chunk name of the sandbox's own Lua code, skipped when finding where an error was raised.
const SANDBOX_CHUNK: &str = libs::HOST_CHUNK;

/// Where the hook finds the kill-flag check: the hook must be `'static`, the flag is borrowed.
const KILLED_REGISTRY_KEY: &str = "keel.script.killed";

/// Redis's message for a killed script.
const KILLED_TEXT: &str = "ERR Script killed by user with SCRIPT KILL...";

/// Redis's message where a reply nests deeper than it converts.
const TOO_DEEP_TEXT: &str = "ERR reached lua stack limit";

/// Frames searched, from the top, for where an error was raised.
const ERROR_FRAMES_MAX: usize = 16;

/// Compiles `body` without running it: `Ok`, or the error reply Redis gives for a script that
/// does not compile.
pub fn check(body: &[u8]) -> Result<(), Reply> {
    let lua = Lua::new_with(StdLib::NONE, LuaOptions::new()).map_err(|e| setup_error("", &e))?;
    lua.set_memory_limit(CHECK_MEMORY_BYTES_MAX)
        .map_err(|e| setup_error("", &e))?;
    compile(&lua, body).map(drop).map_err(|e| compile_error(&e))
}

/// Runs the script `body` (its SHA-1 hex is `sha`, named `f_<sha>` in error messages) with the
/// globals `KEYS` and `ARGV`, in a fresh sandboxed state, calling `redis` for each `redis.call` /
/// `redis.pcall`, until it returns, fails or `kill` is set. Returns the script's reply,
/// converted as Redis converts it, or an error reply.
pub fn run(
    body: &[u8],
    sha: &str,
    keys: &[Bytes],
    args: &[Bytes],
    kill: &AtomicBool,
    limits: &Limits,
    redis: &mut dyn Redis,
) -> Reply {
    let function_name = format!("f_{sha}");
    let libraries = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
    let lua = match Lua::new_with(libraries, LuaOptions::new()) {
        Ok(lua) => lua,
        Err(e) => return setup_error(&function_name, &e),
    };
    let run = Run {
        function_name: &function_name,
        kill,
        limits,
        raised_at: RefCell::new(None),
    };
    match run.execute(&lua, body, keys, args, redis) {
        Ok(reply) => reply,
        Err(e) => setup_error(&function_name, &e),
    }
}

/// One run, for the functions the script calls.
struct Run<'a> {
    function_name: &'a str,
    kill: &'a AtomicBool,
    limits: &'a Limits,
    /// Set by the message handler when an error reaches the top: where it was raised, if in Lua.
    raised_at: RefCell<Option<Option<(String, usize)>>>,
}

impl Run<'_> {
    /// Sets up the sandbox, runs the script and converts its outcome. An `Err` is a failure
    /// outside the script (setup, or memory exhausted before it started).
    fn execute(
        &self,
        lua: &Lua,
        body: &[u8],
        keys: &[Bytes],
        args: &[Bytes],
        redis: &mut dyn Redis,
    ) -> mlua::Result<Reply> {
        lua.set_memory_limit(self.limits.memory_bytes_max.max(1))?;
        lua.scope(|scope| {
            let api = lua.create_table()?;
            let api_of_command = api.clone();
            let command = scope.create_function_mut(move |lua, args: Table| {
                command(lua, &args, resp(&api_of_command), &mut *redis)
            })?;
            api.raw_set("command", command)?;
            let killed = scope.create_function(|_, ()| Ok(self.kill.load(Ordering::Relaxed)))?;
            lua.set_named_registry_value(KILLED_REGISTRY_KEY, &killed)?;
            api.raw_set("killed", killed)?;
            register_api(lua, &api)?;
            let memory_bytes_max = self.limits.memory_bytes_max.max(1);
            api.raw_set("libraries", libs::libraries(lua, memory_bytes_max)?)?;
            let c_function = lua.create_function(|lua, f: Function| libs::c_function(lua, f))?;
            api.raw_set("c_function", c_function)?;
            let handler = scope.create_function(|lua, error: Value| {
                *self.raised_at.borrow_mut() = Some(raised_at(lua));
                Ok(error)
            })?;

            let globals: Table = lua
                .load(SANDBOX)
                .set_name(SANDBOX_CHUNK)
                .set_mode(ChunkMode::Text)
                .call((&api, strings(lua, keys)?, strings(lua, args)?))?;
            lua.set_globals(globals)?;
            let script = match compile(lua, body) {
                Ok(script) => script,
                Err(e @ mlua::Error::SyntaxError { .. }) => return Ok(compile_error(&e)),
                Err(e) => return Err(e),
            };

            let triggers = HookTriggers::new().every_nth_instruction(KILL_POLL_INSTRUCTIONS);
            lua.set_global_hook(triggers, |lua, _| {
                let killed: Function = lua.named_registry_value(KILLED_REGISTRY_KEY)?;
                match killed.call::<bool>(())? {
                    true => Err(mlua::Error::runtime(KILLED_TEXT)),
                    false => Ok(VmState::Continue),
                }
            })?;
            let run: Function = api.raw_get("run")?;
            let outcome = run.call::<MultiValue>((script, handler));
            lua.remove_global_hook();
            // Converting the outcome allocates a little (keys, references): the script's bound
            // must not fail it.
            lua.set_memory_limit(0)?;
            Ok(self.reply(lua, outcome?, resp(&api)))
        })
    }

    /// The reply for what `xpcall` returned: the script's first return value, or its error.
    fn reply(&self, lua: &Lua, outcome: MultiValue, resp: u8) -> Reply {
        let mut outcome = outcome.into_iter();
        let succeeded = matches!(outcome.next(), Some(Value::Boolean(true)));
        let value = outcome.next().unwrap_or(Value::Nil);
        if succeeded {
            let bytes_max = self.limits.reply_bytes_max;
            let mut converter = ToReply {
                resp,
                bytes_left: bytes_max,
            };
            return converter.convert(&value, 0).unwrap_or_else(|e| match e {
                ToReplyError::TooLarge => Reply::error(format!(
                    "ERR script reply too large: more than {bytes_max} bytes"
                )),
                ToReplyError::Lua(e) => setup_error(self.function_name, &e),
            });
        }
        let raised_at = self.raised_at.borrow_mut().take();
        let message = match (self.kill.load(Ordering::Relaxed), &raised_at, &value) {
            (true, ..) => KILLED_TEXT.to_string(),
            (false, Some(_), value) => error_value_text(lua, value),
            // The handler did not run: Lua raised a memory error, or the handler itself failed.
            (false, None, Value::String(text)) => {
                let name = self.function_name;
                let text = text.to_string_lossy();
                format!("ERR Error running script (call to {name}): {text}")
            }
            (false, None, value) => error_value_text(lua, value),
        };
        // Redis 7.0 names the script by its SHA-1 here (its function name elsewhere).
        let sha = self
            .function_name
            .strip_prefix("f_")
            .unwrap_or(self.function_name);
        match raised_at.flatten() {
            Some((source, line)) => {
                Reply::error(format!("{message} script: {sha}, on {source}:{line}."))
            }
            None => Reply::error(message),
        }
    }
}

/// The sandbox, run once before the script: receives the Rust side's functions (`api`) and the
/// `KEYS` and `ARGV` tables, returns the globals table the script runs with.
const SANDBOX: &str = include_str!("sandbox.lua");

/// The protocol `redis.setresp` chose: how replies convert to Lua values and back.
fn resp(api: &Table) -> u8 {
    match api.raw_get::<Option<u8>>("resp") {
        Ok(Some(3)) => 3,
        _ => 2,
    }
}

/// Registers the API functions that need nothing of the run.
fn register_api(lua: &Lua, api: &Table) -> mlua::Result<()> {
    api.raw_set("resp", 2)?;
    api.raw_set("killed_text", KILLED_TEXT)?;
    api.raw_set("pattern_bytes_max", PATTERN_BYTES_MAX)?;
    let version = crate::REDIS_COMPAT_VERSION;
    let parts = version
        .split('.')
        .map(|part| part.parse::<i64>().unwrap_or(0));
    let version_num = parts
        .take(3)
        .fold(0, |number, part| (number << 8) | (part & 0xff));
    api.raw_set("version", version)?;
    api.raw_set("version_num", version_num)?;
    let sha1hex = lua.create_function(|lua, value: Value| {
        let text = lua.coerce_string(value)?;
        let data = text.map(|s| s.as_bytes().to_vec()).unwrap_or_default();
        lua.create_string(super::sha1::sha1_hex(&data))
    })?;
    api.raw_set("sha1hex", sha1hex)?;
    let error_text = lua.create_function(|lua, text: mlua::String| {
        let text = text.as_bytes();
        let buffer = match text.first() {
            Some(b'-') => text.to_vec(),
            _ => [b"-", &text[..]].concat(),
        };
        lua.create_string(normalized_error(&buffer))
    })?;
    api.raw_set("error_text", error_text)?;
    let log = lua.create_function(|_, (level, message): (f64, mlua::String)| {
        let message = message.to_string_lossy();
        tracing::debug!(level = level as i64, message = %message, "redis.log");
        Ok(())
    })?;
    api.raw_set("log", log)
}

/// `redis.call` / `redis.pcall`: runs the command, returns its reply as Lua sees it in protocol
/// `resp` and whether it is an error (which `redis.call` raises).
fn command(
    lua: &Lua,
    args: &Table,
    resp: u8,
    redis: &mut dyn Redis,
) -> mlua::Result<(Value, bool)> {
    // The arguments come packed in a table (`n` of them): each argument held as a Lua value on
    // the Rust side takes one of mlua's few thousand reference slots.
    let count = args.raw_get::<Option<usize>>("n")?.unwrap_or(0);
    if count == 0 {
        let text = b"Please specify at least one argument for this redis lib call";
        return Ok((field_table(lua, "err", &normalized_error(text))?, true));
    }
    let mut argv = Vec::with_capacity(count);
    for i in 1..=count {
        argv.push(match args.raw_get::<Value>(i)? {
            Value::String(s) => Bytes::copy_from_slice(&s.as_bytes()),
            Value::Integer(n) => Bytes::from(format_g17(n as f64)),
            Value::Number(n) => Bytes::from(format_g17(n)),
            _ => {
                let text = b"Lua redis lib command arguments must be strings or integers";
                return Ok((field_table(lua, "err", &normalized_error(text))?, true));
            }
        });
    }
    let reply = redis.call(argv);
    Ok((reply_to_lua(lua, &reply, resp, 0)?, reply.is_error()))
}

/// A reply as a Lua value, as Redis converts one for `redis.call`: what the script's protocol
/// (`redis.setresp`, RESP2 unless it chose 3) would carry.
fn reply_to_lua(lua: &Lua, reply: &Reply, resp: u8, depth: usize) -> mlua::Result<Value> {
    if depth > REPLY_DEPTH_MAX {
        return Err(mlua::Error::runtime("reply nested too deep"));
    }
    let nested = |reply| reply_to_lua(lua, reply, resp, depth + 1);
    Ok(match reply {
        Reply::Integer(n) => Value::Number(*n as f64),
        Reply::Bulk(data) => Value::String(lua.create_string(data)?),
        // RESP2 carries doubles and verbatim strings as bulk strings.
        Reply::Double(text) | Reply::Verbatim(text) if resp == 2 => {
            Value::String(lua.create_string(text)?)
        }
        Reply::Double(text) => {
            let value = std::str::from_utf8(text).ok().and_then(|t| t.parse().ok());
            field_table_of(lua, "double", Value::Number(value.unwrap_or(f64::NAN)))?
        }
        Reply::Verbatim(text) => {
            let verbatim = lua.create_table_with_capacity(0, 2)?;
            verbatim.raw_set("string", lua.create_string(text)?)?;
            verbatim.raw_set("format", "txt")?;
            field_table_of(lua, "verbatim_string", Value::Table(verbatim))?
        }
        Reply::Null | Reply::NullArray if resp == 2 => Value::Boolean(false),
        // RESP2 carries booleans as integers.
        Reply::Boolean(b) if resp == 2 => Value::Number(f64::from(u8::from(*b))),
        Reply::Boolean(b) => Value::Boolean(*b),
        Reply::Null | Reply::NullArray => Value::Nil,
        Reply::Simple(text) => field_table(lua, "ok", text.as_bytes())?,
        Reply::Error(text) => {
            let text = normalized_error(&[b"-", text.as_bytes()].concat());
            field_table(lua, "err", &text)?
        }
        // Pushes and several replies are pub/sub's, which scripts cannot run.
        Reply::Array(items) | Reply::Push(items) | Reply::Several(items) => {
            sequence(lua, items.iter().map(nested))?
        }
        Reply::Set(items) if resp == 2 => sequence(lua, items.iter().map(nested))?,
        // A RESP3 script gets `{set = {member = true, ...}}`.
        Reply::Set(items) => {
            let set = lua.create_table_with_capacity(0, items.len())?;
            for item in items {
                set.raw_set(nested(item)?, true)?;
            }
            field_table_of(lua, "set", Value::Table(set))?
        }
        // RESP2 flattens pairs and maps into alternating firsts and seconds.
        Reply::Map(pairs) | Reply::Pairs(pairs) if resp == 2 => {
            sequence(lua, pairs.iter().flat_map(|(k, v)| [nested(k), nested(v)]))?
        }
        // RESP2 nests a keyed reply's pairs (XREAD's streams); RESP3 makes it a map.
        Reply::Keyed(pairs) if resp == 2 => sequence(
            lua,
            pairs
                .iter()
                .map(|(k, v)| sequence(lua, [nested(k), nested(v)].into_iter())),
        )?,
        Reply::Pairs(pairs) => sequence(
            lua,
            pairs
                .iter()
                .map(|(k, v)| sequence(lua, [nested(k), nested(v)].into_iter())),
        )?,
        // RESP3 scripts get `{map = t}`.
        Reply::Map(pairs) | Reply::Keyed(pairs) => {
            let map = lua.create_table_with_capacity(0, pairs.len())?;
            for (key, value) in pairs {
                match nested(key)? {
                    Value::Nil => {}
                    key => map.raw_set(key, nested(value)?)?,
                }
            }
            field_table_of(lua, "map", Value::Table(map))?
        }
    })
}

/// Converts the script's return value into a reply, as Redis does, within bounds.
struct ToReply {
    resp: u8,
    bytes_left: usize,
}

enum ToReplyError {
    TooLarge,
    Lua(mlua::Error),
}

impl From<mlua::Error> for ToReplyError {
    fn from(e: mlua::Error) -> Self {
        ToReplyError::Lua(e)
    }
}

impl ToReply {
    /// A header or an integer, as encoded (marker, digits, CRLF).
    const ITEM_BYTES: usize = 16;

    fn charge(&mut self, bytes: usize) -> Result<(), ToReplyError> {
        let bytes = bytes.saturating_add(Self::ITEM_BYTES);
        self.bytes_left = (self.bytes_left.checked_sub(bytes)).ok_or(ToReplyError::TooLarge)?;
        Ok(())
    }

    fn bulk(&mut self, data: &[u8]) -> Result<Reply, ToReplyError> {
        self.charge(data.len())?;
        Ok(Reply::Bulk(Bytes::copy_from_slice(data)))
    }

    fn convert(&mut self, value: &Value, depth: usize) -> Result<Reply, ToReplyError> {
        if let Value::String(s) = value {
            return self.bulk(&s.as_bytes());
        }
        if let Value::Table(table) = value {
            return self.table(table, depth);
        }
        self.charge(0)?;
        Ok(match value {
            // A RESP3 script answers booleans (RESP3 `#t`/`#f`, RESP2 1/0); a RESP2 script 1
            // for true and nil for false, as Redis does.
            Value::Boolean(b) if self.resp == 3 => Reply::Boolean(*b),
            Value::Boolean(true) => Reply::Integer(1),
            // Redis casts the double to `long long`; Rust's cast saturates.
            Value::Number(n) => Reply::Integer(*n as i64),
            Value::Integer(n) => Reply::Integer(*n),
            _ => Reply::Null,
        })
    }

    /// A table: an error, a status, a RESP3 `double`, `map` or `set`, or else an array up to its first
    /// `nil`. Only raw reads, so no metamethod of the script's runs.
    fn table(&mut self, table: &Table, depth: usize) -> Result<Reply, ToReplyError> {
        if depth >= REPLY_DEPTH_MAX {
            self.charge(TOO_DEEP_TEXT.len())?;
            return Ok(Reply::error(TOO_DEEP_TEXT));
        }
        if let Value::String(text) = table.raw_get::<Value>("err")? {
            self.charge(text.as_bytes().len())?;
            return Ok(Reply::Error(text.to_string_lossy().into()));
        }
        if let Value::String(text) = table.raw_get::<Value>("ok")? {
            self.charge(text.as_bytes().len())?;
            return Ok(Reply::Simple(text.to_string_lossy().into()));
        }
        // A double as Redis 7.0 writes a script's: `%.17g`.
        let double = match table.raw_get::<Value>("double")? {
            Value::Number(n) => Some(n),
            Value::Integer(n) => Some(n as f64),
            _ => None,
        };
        if let Some(value) = double {
            let text = format_g17(value);
            self.charge(text.len())?;
            return Ok(Reply::Double(Bytes::from(text)));
        }
        self.charge(0)?;
        if let Value::Table(map) = table.raw_get::<Value>("map")? {
            let mut pairs = Vec::new();
            for pair in map.pairs::<Value, Value>() {
                let (key, value) = pair?;
                pairs.push((
                    self.convert(&key, depth + 1)?,
                    self.convert(&value, depth + 1)?,
                ));
            }
            return Ok(Reply::Map(pairs));
        }
        // `{set = {member = true, ...}}`, its members in `next` order as Redis walks them.
        if let Value::Table(set) = table.raw_get::<Value>("set")? {
            let mut members = Vec::new();
            for pair in set.pairs::<Value, Value>() {
                let (member, _) = pair?;
                members.push(self.convert(&member, depth + 1)?);
            }
            return Ok(Reply::Set(members));
        }
        let mut items = Vec::new();
        for i in 1.. {
            match table.raw_get::<Value>(i)? {
                Value::Nil => break,
                item => items.push(self.convert(&item, depth + 1)?),
            }
        }
        Ok(Reply::Array(items))
    }
}

/// Compiles the script as source text (never a precompiled chunk).
fn compile(lua: &Lua, body: &[u8]) -> mlua::Result<Function> {
    // Redis skips a `#!lua ...` first line (its flags are read before the script runs); the
    // newline stays so that line numbers do not shift.
    let body = match body.strip_prefix(b"#!") {
        Some(_) => &body[body.iter().position(|&b| b == b'\n').unwrap_or(body.len())..],
        None => body,
    };
    (lua.load(body).set_name(SCRIPT_CHUNK))
        .set_mode(ChunkMode::Text)
        .into_function()
}

/// Redis's reply for a script that does not compile.
fn compile_error(error: &mlua::Error) -> Reply {
    let message = root_message(error);
    Reply::error(format!(
        "ERR Error compiling script (new function): {message}"
    ))
}

/// The reply for a failure outside the script's own errors.
fn setup_error(function_name: &str, error: &mlua::Error) -> Reply {
    let message = root_message(error);
    Reply::error(format!(
        "ERR Error running script (call to {function_name}): {message}"
    ))
}

/// The innermost error's message: mlua wraps a callback's error with a traceback that only
/// adds noise to a reply.
fn root_message(error: &mlua::Error) -> String {
    match error {
        mlua::Error::CallbackError { cause, .. } | mlua::Error::WithContext { cause, .. } => {
            root_message(cause)
        }
        mlua::Error::SyntaxError { message, .. }
        | mlua::Error::RuntimeError(message)
        | mlua::Error::MemoryError(message) => message.clone(),
        other => other.to_string(),
    }
}

/// The text of an error that ended the script, as Redis 7 makes it: an `{err = ...}` table's
/// text as it is, anything else (a Lua error message) with the code `ERR`.
fn error_value_text(lua: &Lua, value: &Value) -> String {
    let text = |value: Value| match lua.coerce_string(value) {
        Ok(Some(text)) => Some(text.to_string_lossy()),
        _ => None,
    };
    match value {
        Value::Table(table) => match table.raw_get::<Value>("err") {
            Ok(err @ (Value::String(_) | Value::Integer(_) | Value::Number(_))) => text(err),
            _ => None,
        }
        .unwrap_or_else(|| "ERR execution failure".to_string()),
        Value::Error(e) => format!("ERR {}", root_message(e)),
        other => match text(other.clone()) {
            Some(text) => format!("ERR {text}"),
            None => format!("ERR (error object is a {} value)", other.type_name()),
        },
    }
}

/// Where an error reaching the message handler was raised: the innermost frame of Lua code
/// that is not the sandbox's own (level 0 is the handler).
fn raised_at(lua: &Lua) -> Option<(String, usize)> {
    for level in 1..=ERROR_FRAMES_MAX {
        let frame = lua.inspect_stack(level, |debug| {
            let source = debug.source();
            let name = source.source.map(|name| name.into_owned());
            (source.what != "C", name, debug.current_line())
        })?;
        if let (true, Some(name), Some(line)) = frame {
            if name != SANDBOX_CHUNK {
                return Some((name, line));
            }
        }
    }
    None
}

/// Redis's error text normalisation (`luaPushErrorBuff`): `-CODE message` keeps its code,
/// anything else gets the code `ERR`; newlines around the message go.
fn normalized_error(buffer: &[u8]) -> Vec<u8> {
    let (code, message): (&[u8], &[u8]) = match buffer.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&b| b == b' ') {
            Some(space) => (&rest[..space], &rest[space + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", buffer),
    };
    let kept = |b: &u8| *b != b'\r' && *b != b'\n';
    let start = message.iter().position(kept).unwrap_or(message.len());
    let end = message.iter().rposition(kept).map_or(start, |i| i + 1);
    [code, b" ", &message[start..end]].concat()
}

/// A table with one string field, `{err = ...}` or `{ok = ...}`.
fn field_table(lua: &Lua, field: &str, text: &[u8]) -> mlua::Result<Value> {
    field_table_of(lua, field, Value::String(lua.create_string(text)?))
}

/// A Lua sequence of `items`, in order.
fn sequence(lua: &Lua, items: impl Iterator<Item = mlua::Result<Value>>) -> mlua::Result<Value> {
    let table = lua.create_table_with_capacity(items.size_hint().0, 0)?;
    for (i, item) in items.enumerate() {
        table.raw_set(i + 1, item?)?;
    }
    Ok(Value::Table(table))
}

fn field_table_of(lua: &Lua, field: &str, value: Value) -> mlua::Result<Value> {
    let table = lua.create_table_with_capacity(0, 1)?;
    table.raw_set(field, value)?;
    Ok(Value::Table(table))
}

/// `KEYS` or `ARGV`: a sequence of Lua strings.
fn strings(lua: &Lua, items: &[Bytes]) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        table.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(table)
}

/// A number as C's `%.17g` prints it, as Redis turns a Lua number into a command argument:
/// integers below 10^17 without a fraction, others with every digit that tells doubles apart.
fn format_g17(value: f64) -> String {
    libs::format_g(value, 17)
}

#[cfg(test)]
mod tests;
