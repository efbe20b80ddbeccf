//! The Lua libraries Redis 7.0 embeds for scripts, written for keel in Rust: `cjson`
//! ([`cjson`]), `cmsgpack` ([`cmsgpack`]), `struct` ([`structs`]) and `bit` ([`bit`]).
//! [`libraries`] builds them into an mlua Lua 5.1 state as one table; the host (keel-redis's
//! script sandbox) installs each as a global table of the same name, read-only like the rest of
//! its sandbox. This crate knows nothing of Redis's commands, keys or replies: only Lua values.
//!
//! How a library function reaches a script: each is a small C function (`trampoline`) over a
//! Rust one. The C function packs the arguments in one table (`{n = count, ...}`: a Rust
//! function never takes a variable number of Lua values, see keel-redis's `script/lua.rs`), calls the Rust function,
//! which answers `true, value`, `true, results, count` or `false, message`, and unpacks the
//! results or raises the message with `lua_error`: a library's error is a plain string, as
//! Redis's C libraries raise it (`luaL_error`), never an mlua error object a script could not
//! read. Being C, it keeps its caller's frame on a tail call (`return cjson.encode(t)`), as
//! Redis's do, so the message carries the position of the script line that called it
//! (`user_script:3: ...`), as `luaL_error` adds it, and argument errors name the function (`bad
//! argument #1 to 'encode' (...)`); called from `pcall` (C in Redis), neither: no position and
//! the name `?`.
//!
//! Determinism: no library reads a clock or draws a random number. Where a library walks a
//! table's keys (cjson's objects, cmsgpack's maps) it walks them in Lua's `next` order, as
//! Redis's C code does with `lua_next`: the same Lua 5.1 table code gives the same order for a
//! table built the same way, so encodings match Redis's byte for byte, and every replica would
//! compute the same (only the leader runs a script, but its reply must not depend on chance).
//! Tables a library builds (decoded JSON and MessagePack) are created empty and filled in
//! Redis's order, for the same reason.
//!
//! Bounds: nesting ([`DEPTH_MAX`], below mlua's reference slots and Lua's C stack), and output
//! ([`Output`]: an encoding fails as soon as it outgrows what the script's heap has left, since
//! it could not become a Lua string anyway; a table referring to another many times would
//! otherwise encode to exponentially many bytes outside the Lua heap's bound).

pub mod bit;
pub mod cjson;
mod cjson_decode;
pub mod cmsgpack;
pub mod structs;

use mlua::{Function, Lua, Table, Value};

/// Deepest nesting any library encodes or decodes. Redis's cjson allows up to its
/// `encode_max_depth` / `decode_max_depth` (1,000 by default), which keel keeps as a bound:
/// each level holds a few of mlua's references (at most about 8,000) and a few slots of Lua's C
/// stack (8,000 in Lua 5.1).
pub const DEPTH_MAX: usize = 1_000;

/// The chunk name of the host's own Lua code (its sandbox): a library's error names the position
/// of the script line that called it, and a call from a chunk of this name (or from C) is not a
/// script's, so its errors carry no position and name the function `?`.
pub const HOST_CHUNK: &str = "=sandbox";

/// A library function's failure: raised as a Lua error by `trampoline`, or (`Lua`) an error of
/// Lua's own (memory exhausted) that propagates as it is.
#[derive(Debug)]
pub enum Fail {
    /// `bad argument #n to 'name' (text)`, as `luaL_argerror` words it.
    Arg(usize, String),
    /// Any other message, as `luaL_error` raises it.
    Plain(String),
    Lua(mlua::Error),
}

impl From<mlua::Error> for Fail {
    fn from(error: mlua::Error) -> Self {
        Fail::Lua(error)
    }
}

pub type LibResult<T> = Result<T, Fail>;

/// A failure with a plain message.
pub fn plain<T>(text: impl Into<String>) -> LibResult<T> {
    Err(Fail::Plain(text.into()))
}

/// What a library function answers.
pub enum Out {
    One(Value),
    /// Several results: a sequence of `count` values, unpacked by the sandbox.
    Many(Table, usize),
}

/// A library function's arguments, packed.
pub struct Args {
    table: Table,
    count: usize,
}

impl Args {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Argument `i` (1-based), nil past the last.
    pub fn get(&self, i: usize) -> LibResult<Value> {
        match i <= self.count {
            true => Ok(self.table.raw_get(i)?),
            false => Ok(Value::Nil),
        }
    }

    /// `luaL_typename` of argument `i`: `no value` past the last.
    pub fn type_name(&self, i: usize) -> LibResult<&'static str> {
        Ok(match i <= self.count {
            true => type_name(&self.get(i)?),
            false => "no value",
        })
    }

    /// `luaL_checknumber`: a number, or a string Lua converts to one.
    pub fn number(&self, lua: &Lua, i: usize) -> LibResult<f64> {
        match lua.coerce_number(self.get(i)?)? {
            Some(n) => Ok(n),
            None => Err(self.expected(i, "number")),
        }
    }

    /// `luaL_checkinteger`: a number truncated toward zero, as Lua 5.1 casts it.
    pub fn integer(&self, lua: &Lua, i: usize) -> LibResult<i64> {
        self.number(lua, i).map(cast_integer)
    }

    /// `luaL_optinteger`: `default` when absent or nil.
    pub fn opt_integer(&self, lua: &Lua, i: usize, default: i64) -> LibResult<i64> {
        match self.get(i)? {
            Value::Nil => Ok(default),
            _ => self.integer(lua, i),
        }
    }

    /// `luaL_checklstring`: a string, or a number as Lua writes it (`%.14g`).
    pub fn bytes(&self, lua: &Lua, i: usize) -> LibResult<Vec<u8>> {
        match lua.coerce_string(self.get(i)?)? {
            Some(s) => Ok(s.as_bytes().to_vec()),
            None => Err(self.expected(i, "string")),
        }
    }

    /// `luaL_typerror`'s failure for argument `i`.
    pub fn expected(&self, i: usize, what: &str) -> Fail {
        match self.type_name(i) {
            Ok(found) => Fail::Arg(i, format!("{what} expected, got {found}")),
            Err(fail) => fail,
        }
    }
}

/// Lua 5.1's `lua_typename` for a value.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Integer(_) | Value::Number(_) => "number",
        Value::LightUserData(_) | Value::UserData(_) => "userdata",
        other => other.type_name(),
    }
}

/// A double cast to a 64-bit integer as C does on x86-64 where C leaves it undefined (NaN and
/// out of range become `i64::MIN`), as Lua 5.1's `lua_tointeger` does there.
pub fn cast_integer(n: f64) -> i64 {
    // 2^63, exactly.
    let limit = i64::MAX as f64;
    if n.is_nan() || !(-limit..limit).contains(&n) {
        return i64::MIN;
    }
    n as i64
}

/// The bytes an output may still take: what the script's Lua heap has left.
pub fn output_room(lua: &Lua, memory_bytes_max: usize) -> usize {
    memory_bytes_max.saturating_sub(lua.used_memory())
}

/// An encoding being built, within what the script's heap has left when it started (it could
/// not become a Lua string otherwise).
pub struct Output {
    pub bytes: Vec<u8>,
    room: usize,
    /// Who fails, in the error: `Cannot serialise`, `MessagePack pack`.
    who: &'static str,
}

impl Output {
    pub fn new(lua: &Lua, memory_bytes_max: usize, who: &'static str) -> Self {
        Output {
            bytes: Vec::new(),
            room: output_room(lua, memory_bytes_max),
            who,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) -> LibResult<()> {
        if self.bytes.len() + bytes.len() > self.room {
            return plain(format!(
                "{}: the encoding exceeds the {} bytes the script's memory has left",
                self.who, self.room
            ));
        }
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }
}

/// A Rust library function as a script calls it: a C function (so a caller's `return f(x)`
/// keeps the caller's frame, as with Redis's C libraries, and errors can name its line) that
/// packs its arguments for `f` and raises `f`'s failure as a plain string, as `luaL_error` does.
/// `name` is the function's name in argument errors.
pub fn function<F>(lua: &Lua, name: &'static str, f: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, &Args) -> LibResult<Out> + Send + 'static,
{
    let inner = lua.create_function(move |lua, table: Table| {
        let count = table.raw_get::<Option<usize>>("n")?.unwrap_or(0);
        let args = Args { table, count };
        Ok(match f(lua, &args) {
            Ok(Out::One(value)) => (true, value, None),
            Ok(Out::Many(values, count)) => (true, Value::Table(values), Some(count)),
            Err(Fail::Lua(error)) => return Err(error),
            Err(fail) => {
                let message = located(lua, name, fail);
                (false, Value::String(lua.create_string(message)?), None)
            }
        })
    })?;
    c_function(lua, inner)
}

/// `inner` (which takes its arguments packed and answers `ok, value[, count]`) behind a C
/// function that packs, unpacks and raises (`trampoline`): what a script calls. `redis.call`
/// is made this way too, so that `return redis.call(...)` keeps the script's frame for its
/// error's position.
pub fn c_function(lua: &Lua, inner: Function) -> mlua::Result<Function> {
    // SAFETY: `trampoline` only uses the Lua C API on its own stack; the closure takes `inner`
    // from the top of the stack `exec_raw` gives.
    unsafe {
        lua.exec_raw::<Function>(inner, |state| {
            mlua::ffi::lua_pushcclosure(state, trampoline, 1);
        })
    }
}

/// The C side of a library function ([`function`]): calls its Rust function (upvalue 1) with
/// the arguments packed in a table `{n = count, ...}`; raises the message it answers with
/// `false`, or returns its value, or unpacks its `count` results. It holds nothing that needs
/// dropping, so a Lua error may unwind past it (Lua 5.1 long-jumps).
unsafe extern "C-unwind" fn trampoline(state: *mut mlua::ffi::lua_State) -> std::os::raw::c_int {
    use mlua::ffi;
    let count = ffi::lua_gettop(state);
    ffi::lua_createtable(state, count, 1);
    for i in 1..=count {
        ffi::lua_pushvalue(state, i);
        ffi::lua_rawseti(state, -2, i as _);
    }
    ffi::lua_pushinteger(state, count as ffi::lua_Integer);
    ffi::lua_setfield(state, -2, c"n".as_ptr());
    ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
    ffi::lua_insert(state, -2);
    ffi::lua_call(state, 1, 3);
    // The stack: arguments, ok, value, count.
    if ffi::lua_toboolean(state, -3) == 0 {
        ffi::lua_pushvalue(state, -2);
        ffi::lua_error(state);
    }
    if ffi::lua_isnil(state, -1) != 0 {
        ffi::lua_pushvalue(state, -2);
        return 1;
    }
    let results = ffi::lua_tointeger(state, -1).max(0);
    let table = ffi::lua_gettop(state) - 1;
    if results > i64::from(i32::MAX - 100) || ffi::lua_checkstack(state, results as i32 + 1) == 0 {
        ffi::lua_pushstring(state, c"too many results to unpack".as_ptr());
        ffi::lua_error(state);
    }
    for i in 1..=results as i32 {
        ffi::lua_rawgeti(state, table, i as _);
    }
    results as i32
}

/// The message of `error` as Redis's C library would raise it from where it was called: level 0
/// is the Rust function, 1 its C side ([`trampoline`]), 2 the caller.
fn located(lua: &Lua, name: &str, fail: Fail) -> String {
    let caller = lua.inspect_stack(2, |debug| {
        let source = debug.source();
        let user = source.what != "C" && source.source.as_deref() != Some(HOST_CHUNK);
        let short = source.short_src.map(|s| s.into_owned()).unwrap_or_default();
        (user, short, debug.current_line())
    });
    let (prefix, name) = match caller {
        Some((true, short, Some(line))) => (format!("{short}:{line}: "), name),
        Some((true, _, None)) => (String::new(), name),
        _ => (String::new(), "?"),
    };
    match fail {
        Fail::Arg(i, text) => format!("{prefix}bad argument #{i} to '{name}' ({text})"),
        Fail::Plain(text) => format!("{prefix}{text}"),
        Fail::Lua(error) => format!("{prefix}{error}"),
    }
}

/// Every library, as the table the sandbox installs: `{cjson = {...}, cmsgpack = {...}, ...}`.
/// `memory_bytes_max` is the script's heap bound, which outputs respect.
pub fn libraries(lua: &Lua, memory_bytes_max: usize) -> mlua::Result<Table> {
    let all = lua.create_table()?;
    all.raw_set("cjson", cjson::library(lua, memory_bytes_max)?)?;
    all.raw_set("cmsgpack", cmsgpack::library(lua, memory_bytes_max)?)?;
    all.raw_set("struct", structs::library(lua, memory_bytes_max)?)?;
    all.raw_set("bit", bit::library(lua)?)?;
    Ok(all)
}

/// A number as C's `%.<precision>g` writes it (glibc: `inf`, `-inf`, `nan`, `-nan`).
pub fn format_g(value: f64, precision: i32) -> String {
    if !value.is_finite() || value == 0.0 {
        let sign = if value.is_sign_negative() { "-" } else { "" };
        let magnitude = match value {
            v if v.is_nan() => "nan",
            v if v.is_infinite() => "inf",
            _ => "0",
        };
        return format!("{sign}{magnitude}");
    }
    let precision = precision.max(1);
    // `%g` picks its style by the exponent of the value rounded to its precision.
    let scientific = format!("{:.*e}", (precision - 1) as usize, value);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..precision).contains(&exponent) {
        let fixed = format!("{:.*}", (precision - 1 - exponent) as usize, value);
        return trim_fraction(&fixed).to_string();
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!(
        "{}e{sign}{:02}",
        trim_fraction(mantissa),
        exponent.unsigned_abs()
    )
}

/// `%g`'s removal of trailing zeros in the fraction, and of a bare point.
fn trim_fraction(text: &str) -> &str {
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.'),
        false => text,
    }
}

#[cfg(test)]
mod tests;
