//! `cjson`: JSON as Redis's Lua CJSON 2.1.0 reads and writes it.
//!
//! - `cjson.encode(value)`: strings escaped as CJSON escapes them (`"`, `\`, `/`, control
//!   characters and DEL; other bytes as they are, UTF-8 or not), numbers as `%.14g` (the
//!   precision `encode_number_precision` sets), `nil` and `cjson.null` as `null`. A table whose
//!   keys are all integers from 1 is an array up to its largest key (holes as `null`) unless it
//!   is excessively sparse (largest key over twice the count and over 10, the settings
//!   `encode_sparse_array` changes): an error, or an object if conversion is on. Any other table,
//!   the empty one included, is an object, its keys in Lua's `next` order (numbers written as
//!   strings), as Redis walks them; so the same table encodes to the same bytes as on Redis.
//! - `cjson.decode(text)`: CJSON's parser, with its error messages (`Expected value but found
//!   invalid token at character 1`), its leniency (numbers as C's `strtod` reads them: `0x10`,
//!   `1e5`, `inf`, `nan`, a leading `+`, while `decode_invalid_numbers` is on as in Redis), and
//!   its end of input at a NUL byte. `null` becomes `cjson.null`.
//! - The settings functions answer and change their setting as CJSON's do, with its argument
//!   errors. Redis keeps them for the life of its Lua state (until `SCRIPT FLUSH`); keel runs
//!   each script in a fresh state, so a setting lasts for the script that made it (Redis's own
//!   tests restore the defaults at their end). `encode_keep_buffer` only changes what it
//!   answers: buffers are not observable. `cjson.new()` answers an independent module table.
//!
//! Bounds: nesting within [`super::DEPTH_MAX`] whatever `encode_max_depth` or `decode_max_depth`
//! say, and an encoding within what the script's heap has left.

use std::sync::{Arc, Mutex};

use mlua::{Lua, Table, Value};

use super::{format_g, function, plain, Args, Fail, LibResult, Out, Output, DEPTH_MAX};

/// CJSON's settings, shared by the functions of one module table.
#[derive(Clone, Debug)]
pub(super) struct Config {
    sparse_convert: bool,
    sparse_ratio: i64,
    sparse_safe: i64,
    encode_max_depth: i64,
    decode_max_depth: i64,
    /// 0: an error, 1: written as `inf`/`nan`, 2: written as `null`.
    encode_invalid_numbers: usize,
    decode_invalid_numbers: bool,
    keep_buffer: bool,
    precision: i64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: true,
            keep_buffer: true,
            precision: 14,
        }
    }
}

type Shared = Arc<Mutex<Config>>;

fn config(shared: &Shared) -> Config {
    shared.lock().map(|c| c.clone()).unwrap_or_default()
}

/// The `cjson` table (also what `cjson.new()` answers).
pub fn library(lua: &Lua, memory_bytes_max: usize) -> mlua::Result<Table> {
    let shared: Shared = Arc::default();
    let table = lua.create_table()?;
    let c = shared.clone();
    let encode = move |lua: &Lua, args: &Args| {
        if args.len() != 1 {
            return Err(Fail::Arg(1, "expected 1 argument".into()));
        }
        let out = Output::new(lua, memory_bytes_max, "Cannot serialise");
        let text = Encoder::new(config(&c), out).encode(&args.get(1)?)?;
        Ok(Out::One(Value::String(lua.create_string(text)?)))
    };
    table.raw_set("encode", function(lua, "encode", encode)?)?;
    let c = shared.clone();
    let decode = move |lua: &Lua, args: &Args| {
        if args.len() != 1 {
            return Err(Fail::Arg(1, "expected 1 argument".into()));
        }
        let text = args.bytes(lua, 1)?;
        Ok(Out::One(super::cjson_decode::decode(
            lua,
            &text,
            &config(&c),
        )?))
    };
    table.raw_set("decode", function(lua, "decode", decode)?)?;
    settings(lua, &table, &shared)?;
    let new =
        move |lua: &Lua, _: &Args| Ok(Out::One(Value::Table(library(lua, memory_bytes_max)?)));
    table.raw_set("new", function(lua, "new", new)?)?;
    table.raw_set("null", Value::NULL)?;
    table.raw_set("_NAME", "cjson")?;
    table.raw_set("_VERSION", "2.1.0")?;
    Ok(table)
}

/// An integer setting: `(field, min)`.
type IntSetting = (fn(&mut Config) -> &mut i64, i64, i64);

/// The settings functions.
fn settings(lua: &Lua, table: &Table, shared: &Shared) -> mlua::Result<()> {
    let integers: [(&'static str, IntSetting); 3] = [
        (
            "encode_max_depth",
            (|c| &mut c.encode_max_depth, 1, i32::MAX as i64),
        ),
        (
            "decode_max_depth",
            (|c| &mut c.decode_max_depth, 1, i32::MAX as i64),
        ),
        ("encode_number_precision", (|c| &mut c.precision, 1, 14)),
    ];
    for (name, setting) in integers {
        let c = shared.clone();
        let f = move |lua: &Lua, args: &Args| {
            arity(args, 1)?;
            let mut config = c.lock().map_err(|_| Fail::Plain("cjson settings".into()))?;
            Ok(Out::One(integer_option(
                lua,
                args,
                1,
                setting,
                &mut config,
            )?))
        };
        table.raw_set(name, function(lua, name, f)?)?;
    }
    type BoolField = fn(&mut Config) -> &mut bool;
    let booleans: [(&'static str, BoolField); 2] = [
        ("encode_keep_buffer", |c| &mut c.keep_buffer),
        ("decode_invalid_numbers", |c| &mut c.decode_invalid_numbers),
    ];
    for (name, field) in booleans {
        let c = shared.clone();
        let f = move |lua: &Lua, args: &Args| {
            arity(args, 1)?;
            let mut config = c.lock().map_err(|_| Fail::Plain("cjson settings".into()))?;
            let mut setting = usize::from(*field(&mut config));
            let answer = enum_option(lua, args, 1, &mut setting, &["off", "on"])?;
            *field(&mut config) = setting == 1;
            Ok(Out::One(answer))
        };
        table.raw_set(name, function(lua, name, f)?)?;
    }
    let c = shared.clone();
    let invalid = move |lua: &Lua, args: &Args| {
        arity(args, 1)?;
        let mut config = c.lock().map_err(|_| Fail::Plain("cjson settings".into()))?;
        let options = ["off", "on", "null"];
        let answer = enum_option(lua, args, 1, &mut config.encode_invalid_numbers, &options)?;
        Ok(Out::One(answer))
    };
    table.raw_set(
        "encode_invalid_numbers",
        function(lua, "encode_invalid_numbers", invalid)?,
    )?;
    sparse_setting(lua, table, shared)
}

/// `encode_sparse_array([convert [, ratio [, safe]]])`: three settings, three answers.
fn sparse_setting(lua: &Lua, table: &Table, shared: &Shared) -> mlua::Result<()> {
    let c = shared.clone();
    let sparse = move |lua: &Lua, args: &Args| {
        arity(args, 3)?;
        let mut config = c.lock().map_err(|_| Fail::Plain("cjson settings".into()))?;
        let mut convert = usize::from(config.sparse_convert);
        let first = enum_option(lua, args, 1, &mut convert, &["off", "on"])?;
        config.sparse_convert = convert == 1;
        let ratio = (|c: &mut Config| &mut c.sparse_ratio) as fn(&mut Config) -> &mut i64;
        let safe = (|c: &mut Config| &mut c.sparse_safe) as fn(&mut Config) -> &mut i64;
        let max = i32::MAX as i64;
        let second = integer_option(lua, args, 2, (ratio, 0, max), &mut config)?;
        let third = integer_option(lua, args, 3, (safe, 0, max), &mut config)?;
        let answers = lua.create_sequence_from([first, second, third])?;
        Ok(Out::Many(answers, 3))
    };
    table.raw_set(
        "encode_sparse_array",
        function(lua, "encode_sparse_array", sparse)?,
    )
}

/// CJSON's check that a settings function got at most `count` arguments.
fn arity(args: &Args, count: usize) -> LibResult<()> {
    match args.len() > count {
        true => Err(Fail::Arg(count + 1, "found too many arguments".into())),
        false => Ok(()),
    }
}

/// Sets an integer setting from argument `i` unless it is nil, and answers its value. CJSON
/// names argument 1 in its range error whatever the argument: so does keel.
fn integer_option(
    lua: &Lua,
    args: &Args,
    i: usize,
    (field, min, max): IntSetting,
    config: &mut Config,
) -> LibResult<Value> {
    if !matches!(args.get(i)?, Value::Nil) {
        let value = args.integer(lua, i)?;
        if value < min || value > max {
            return Err(Fail::Arg(
                1,
                format!("expected integer between {min} and {max}"),
            ));
        }
        *field(config) = value;
    }
    Ok(Value::Number(*field(config) as f64))
}

/// Sets an option from argument `i` (a boolean, or one of `options` by name) unless it is nil,
/// and answers it: a boolean while it is off or on, else its name.
fn enum_option(
    lua: &Lua,
    args: &Args,
    i: usize,
    setting: &mut usize,
    options: &[&str],
) -> LibResult<Value> {
    match args.get(i)? {
        Value::Nil => {}
        Value::Boolean(on) => *setting = usize::from(on),
        _ => {
            let name = args.bytes(lua, i)?;
            match options.iter().position(|o| o.as_bytes() == name) {
                Some(found) => *setting = found,
                None => {
                    let name = String::from_utf8_lossy(&name);
                    return Err(Fail::Arg(i, format!("invalid option '{name}'")));
                }
            }
        }
    }
    Ok(match *setting {
        0 | 1 => Value::Boolean(*setting == 1),
        other => Value::String(lua.create_string(options[other])?),
    })
}

/// Writes one value as JSON, within its output's bound.
struct Encoder {
    config: Config,
    out: Output,
    /// A failure inside a table walk, which can only stop by an mlua error.
    failed: Option<Fail>,
}

/// How a table walk is stopped once `Encoder::failed` is set.
const STOP: &str = "cjson: stopped";

impl Encoder {
    fn new(config: Config, out: Output) -> Self {
        Encoder {
            config,
            out,
            failed: None,
        }
    }

    fn encode(mut self, value: &Value) -> LibResult<Vec<u8>> {
        self.value(value, 0)?;
        Ok(self.out.bytes)
    }

    fn push(&mut self, bytes: &[u8]) -> LibResult<()> {
        self.out.push(bytes)
    }

    fn value(&mut self, value: &Value, depth: usize) -> LibResult<()> {
        match value {
            Value::String(s) => self.string(&s.as_bytes()),
            Value::Integer(n) => self.number(*n as f64, "number"),
            Value::Number(n) => self.number(*n, "number"),
            Value::Boolean(true) => self.push(b"true"),
            Value::Boolean(false) => self.push(b"false"),
            Value::Nil => self.push(b"null"),
            Value::LightUserData(data) if data.0.is_null() => self.push(b"null"),
            Value::Table(table) => self.table(table, depth + 1),
            other => unsupported(other, "type not supported"),
        }
    }

    fn string(&mut self, text: &[u8]) -> LibResult<()> {
        let mut out = Vec::with_capacity(text.len() + 2);
        out.push(b'"');
        for &byte in text {
            match byte {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'/' => out.extend_from_slice(b"\\/"),
                b'\x08' => out.extend_from_slice(b"\\b"),
                b'\t' => out.extend_from_slice(b"\\t"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\x0c' => out.extend_from_slice(b"\\f"),
                b'\r' => out.extend_from_slice(b"\\r"),
                0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{byte:04x}").as_bytes()),
                _ => out.push(byte),
            }
        }
        out.push(b'"');
        self.push(&out)
    }

    fn number(&mut self, n: f64, type_name: &str) -> LibResult<()> {
        let invalid = n.is_nan() || n.is_infinite();
        match self.config.encode_invalid_numbers {
            0 if invalid => {
                return plain(format!(
                    "Cannot serialise {type_name}: must not be NaN or Inf"
                ))
            }
            1 if n.is_nan() => return self.push(b"nan"),
            2 if invalid => return self.push(b"null"),
            _ => {}
        }
        self.push(format_g(n, self.config.precision as i32).as_bytes())
    }

    fn table(&mut self, table: &Table, depth: usize) -> LibResult<()> {
        let max_depth = (self.config.encode_max_depth.max(0) as usize).min(DEPTH_MAX);
        if depth > max_depth {
            return plain(format!("Cannot serialise, excessive nesting ({depth})"));
        }
        match self.array_length(table)? {
            Some(length) if length > 0 => {
                self.push(b"[")?;
                for i in 1..=length {
                    if i > 1 {
                        self.push(b",")?;
                    }
                    self.value(&table.raw_get::<Value>(i)?, depth)?;
                }
                self.push(b"]")
            }
            _ => self.object(table, depth),
        }
    }

    /// The length a table has as an array, `None` if it is an object (CJSON's
    /// `lua_array_length`).
    fn array_length(&mut self, table: &Table) -> LibResult<Option<i64>> {
        let (mut max, mut items, mut array) = (0i64, 0i64, true);
        table.for_each(|key: Value, _: Value| {
            let k = match key {
                Value::Integer(n) => n as f64,
                Value::Number(n) => n,
                _ => f64::NAN,
            };
            if k.floor() == k && k >= 1.0 {
                max = max.max(k.min(i32::MAX as f64) as i64);
                items += 1;
            } else {
                array = false;
            }
            Ok(())
        })?;
        if !array {
            return Ok(None);
        }
        let config = &self.config;
        if config.sparse_ratio > 0
            && max > items.saturating_mul(config.sparse_ratio)
            && max > config.sparse_safe
        {
            if !config.sparse_convert {
                return plain("Cannot serialise table: excessively sparse array");
            }
            return Ok(None);
        }
        Ok(Some(max))
    }

    fn object(&mut self, table: &Table, depth: usize) -> LibResult<()> {
        self.push(b"{")?;
        let mut first = true;
        let walked = table.for_each(|key: Value, value: Value| {
            let step = self.member(first, &key, &value, depth);
            first = false;
            step.map_err(|fail| {
                self.failed = Some(fail);
                mlua::Error::runtime(STOP)
            })
        });
        if let Some(fail) = self.failed.take() {
            return Err(fail);
        }
        walked?;
        self.push(b"}")
    }

    fn member(&mut self, first: bool, key: &Value, value: &Value, depth: usize) -> LibResult<()> {
        if !first {
            self.push(b",")?;
        }
        match key {
            Value::Integer(_) | Value::Number(_) => {
                let n = match key {
                    Value::Integer(n) => *n as f64,
                    Value::Number(n) => *n,
                    _ => 0.0,
                };
                self.push(b"\"")?;
                self.number(n, "number")?;
                self.push(b"\":")?;
            }
            Value::String(s) => {
                self.string(&s.as_bytes())?;
                self.push(b":")?;
            }
            other => return unsupported(other, "table key must be a number or string"),
        }
        self.value(value, depth)
    }
}

/// CJSON's `Cannot serialise <type>: <reason>`.
fn unsupported(value: &Value, reason: &str) -> LibResult<()> {
    plain(format!(
        "Cannot serialise {}: {reason}",
        super::type_name(value)
    ))
}

impl Config {
    /// The deepest nesting decoding allows.
    pub(super) fn decode_depth_max(&self) -> usize {
        (self.decode_max_depth.max(0) as usize).min(DEPTH_MAX)
    }

    pub(super) fn decodes_invalid_numbers(&self) -> bool {
        self.decode_invalid_numbers
    }
}
