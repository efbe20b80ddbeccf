//! `cmsgpack`: MessagePack as Redis's lua-cmsgpack 0.4.0 writes and reads it.
//!
//! - `cmsgpack.pack(v1, v2, ...)`: each value encoded in turn, concatenated. A number that is a
//!   64-bit integer is written in the smallest integer form (fixint, uint/int 8 to 64), any
//!   other as a 32-bit float when that is exact, else a 64-bit one; a string always as a str
//!   (fixstr, str 8/16/32: never bin); a table whose keys are exactly 1..n is an array (its
//!   values read `t[1]` to `t[#t]`), any other a map walked in Lua's `next` order; booleans as
//!   such; anything else (nil, functions, `cjson.null`) as nil. Tables deeper than 16 levels are
//!   written as nil, as lua-cmsgpack does (so a table containing itself ends).
//! - `cmsgpack.unpack(data)`: every value in `data`, as separate results. `unpack_one(data
//!   [, offset])` and `unpack_limit(data, limit [, offset])` answer the offset to continue from
//!   (-1 at the end) and then the values. Integers become numbers, str 8/16/32 and fixstr
//!   strings, arrays and maps tables; types lua-cmsgpack does not read (bin, ext, ...) fail
//!   with `Bad data format in input.`, truncated data with `Missing bytes in input.`
//!
//! Bounds: decoding nests at most [`super::DEPTH_MAX`] levels (lua-cmsgpack recurses until
//! Lua's stack runs out); an encoding stays within what the script's heap has left.

use mlua::{Lua, Table, Value};

use super::{function, plain, Args, Fail, LibResult, Out, Output, DEPTH_MAX};

/// lua-cmsgpack's nesting limit when encoding: a deeper table is written as nil.
const ENCODE_NESTING_MAX: usize = 16;

/// The `cmsgpack` table.
pub fn library(lua: &Lua, memory_bytes_max: usize) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    let pack = move |lua: &Lua, args: &Args| {
        if args.is_empty() {
            return Err(Fail::Arg(0, "MessagePack pack needs input.".into()));
        }
        let mut encoder = Encoder {
            out: Output::new(lua, memory_bytes_max, "MessagePack pack"),
        };
        for i in 1..=args.len() {
            encoder.value(&args.get(i)?, 0)?;
        }
        Ok(Out::One(Value::String(
            lua.create_string(encoder.out.bytes)?,
        )))
    };
    table.raw_set("pack", function(lua, "pack", pack)?)?;
    let unpack = |lua: &Lua, args: &Args| {
        let data = args.bytes(lua, 1)?;
        unpack_full(lua, &data, 0, 0)
    };
    table.raw_set("unpack", function(lua, "unpack", unpack)?)?;
    let unpack_one = |lua: &Lua, args: &Args| {
        let offset = args.opt_integer(lua, 2, 0)?;
        let data = args.bytes(lua, 1)?;
        unpack_full(lua, &data, 1, offset)
    };
    table.raw_set("unpack_one", function(lua, "unpack_one", unpack_one)?)?;
    let unpack_limit = |lua: &Lua, args: &Args| {
        let limit = args.integer(lua, 2)?;
        let offset = args.opt_integer(lua, 3, 0)?;
        let data = args.bytes(lua, 1)?;
        unpack_full(lua, &data, limit, offset)
    };
    table.raw_set("unpack_limit", function(lua, "unpack_limit", unpack_limit)?)?;
    table.raw_set("_NAME", "cmsgpack")?;
    table.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    table.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    table.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(table)
}

struct Encoder {
    out: Output,
}

impl Encoder {
    fn push(&mut self, bytes: &[u8]) -> LibResult<()> {
        self.out.push(bytes)
    }

    /// A header: `fix` (the small form's first byte, when `n` fits `fix_max`), else the 16-
    /// or 32-bit form.
    fn header(&mut self, n: usize, fix: u8, fix_max: usize, wide: [u8; 2]) -> LibResult<()> {
        if n <= fix_max {
            self.push(&[fix | n as u8])
        } else if n <= 0xffff {
            self.push(&[wide[0], (n >> 8) as u8, n as u8])
        } else {
            let mut bytes = vec![wide[1]];
            bytes.extend_from_slice(&(n as u32).to_be_bytes());
            self.push(&bytes)
        }
    }

    fn value(&mut self, value: &Value, level: usize) -> LibResult<()> {
        match value {
            Value::String(s) => self.string(&s.as_bytes()),
            Value::Boolean(b) => self.push(&[if *b { 0xc3 } else { 0xc2 }]),
            Value::Integer(n) => self.integer(*n),
            Value::Number(n) => self.number(*n),
            Value::Table(table) if level < ENCODE_NESTING_MAX => self.table(table, level),
            _ => self.push(&[0xc0]),
        }
    }

    fn string(&mut self, s: &[u8]) -> LibResult<()> {
        let len = s.len();
        if len < 32 {
            self.push(&[0xa0 | len as u8])?;
        } else if len <= 0xff {
            self.push(&[0xd9, len as u8])?;
        } else {
            self.header(len, 0, 0, [0xda, 0xdb])?;
        }
        self.push(s)
    }

    fn number(&mut self, n: f64) -> LibResult<()> {
        // lua-cmsgpack's test for a 64-bit integer: the cast back compares equal (NaN and
        // out-of-range casts give i64::MIN on x86-64, which compares unequal).
        let cast = super::cast_integer(n);
        if n.is_finite() && cast as f64 == n {
            return self.integer(cast);
        }
        let float = n as f32;
        if f64::from(float) == n {
            let mut bytes = vec![0xca];
            bytes.extend_from_slice(&float.to_be_bytes());
            return self.push(&bytes);
        }
        let mut bytes = vec![0xcb];
        bytes.extend_from_slice(&n.to_be_bytes());
        self.push(&bytes)
    }

    fn integer(&mut self, n: i64) -> LibResult<()> {
        let mut bytes = Vec::with_capacity(9);
        match n {
            0..=127 => bytes.push(n as u8),
            128..=0xff => bytes.extend_from_slice(&[0xcc, n as u8]),
            0x100..=0xffff => bytes.extend_from_slice(&[0xcd, (n >> 8) as u8, n as u8]),
            0x1_0000..=0xffff_ffff => {
                bytes.push(0xce);
                bytes.extend_from_slice(&(n as u32).to_be_bytes());
            }
            0x1_0000_0000.. => {
                bytes.push(0xcf);
                bytes.extend_from_slice(&(n as u64).to_be_bytes());
            }
            -32..=-1 => bytes.push(n as i8 as u8),
            -128..=-33 => bytes.extend_from_slice(&[0xd0, n as u8]),
            -32768..=-129 => bytes.extend_from_slice(&[0xd1, (n >> 8) as u8, n as u8]),
            -2_147_483_648..=-32769 => {
                bytes.push(0xd2);
                bytes.extend_from_slice(&(n as i32).to_be_bytes());
            }
            _ => {
                bytes.push(0xd3);
                bytes.extend_from_slice(&n.to_be_bytes());
            }
        }
        self.push(&bytes)
    }

    fn table(&mut self, table: &Table, level: usize) -> LibResult<()> {
        // An array when every key is a positive integer (fitting an int) and the largest is
        // the count: keys 1..n.
        let (mut count, mut max, mut array) = (0i64, 0i64, true);
        table.for_each(|key: Value, _: Value| {
            let n = match key {
                Value::Integer(n) => n as f64,
                Value::Number(n) => n,
                _ => 0.0,
            };
            if n <= 0.0 || n.fract() != 0.0 || n > i32::MAX as f64 {
                array = false;
            } else {
                max = max.max(n as i64);
                count += 1;
            }
            Ok(())
        })?;
        if array && max == count {
            let len = table.raw_len();
            self.header(len, 0x90, 15, [0xdc, 0xdd])?;
            for i in 1..=len {
                self.value(&table.raw_get::<Value>(i)?, level + 1)?;
            }
            return Ok(());
        }
        let mut failed = None;
        self.header(count_keys(table)?, 0x80, 15, [0xde, 0xdf])?;
        let walked = table.for_each(|key: Value, value: Value| {
            let step = self
                .value(&key, level + 1)
                .and_then(|()| self.value(&value, level + 1));
            step.map_err(|fail| {
                failed = Some(fail);
                mlua::Error::runtime("cmsgpack: stopped")
            })
        });
        match failed {
            Some(fail) => Err(fail),
            None => Ok(walked?),
        }
    }
}

fn count_keys(table: &Table) -> LibResult<usize> {
    let mut count = 0;
    table.for_each(|_: Value, _: Value| {
        count += 1;
        Ok(())
    })?;
    Ok(count)
}

/// lua-cmsgpack's `mp_unpack_full`: up to `limit` values from `offset` (every value, without
/// the offset result, when both are 0).
fn unpack_full(lua: &Lua, data: &[u8], limit: i64, offset: i64) -> LibResult<Out> {
    let all = limit == 0 && offset == 0;
    if offset < 0 || limit < 0 {
        return plain(format!(
            "Invalid request to unpack with offset of {} and limit of {}.",
            offset as i32,
            data.len() as i32
        ));
    }
    if offset as u64 > data.len() as u64 {
        return plain(format!(
            "Start offset {} greater than input length {}.",
            offset as i32,
            data.len() as i32
        ));
    }
    let limit = if all { i64::from(i32::MAX) } else { limit };
    let mut decoder = Decoder {
        lua,
        data,
        pos: offset as usize,
        depth: 0,
    };
    let results = lua.create_table()?;
    let mut count = 0usize;
    if !all {
        count = 1;
    }
    let mut decoded = 0;
    while decoder.pos < data.len() && decoded < limit {
        let value = match decoder.value() {
            Ok(value) => value,
            Err(Fail::Plain(message)) if message == EOF => return plain(EOF),
            Err(fail) => return Err(fail),
        };
        count += 1;
        results.raw_set(count, value)?;
        decoded += 1;
    }
    if !all {
        let next = match decoder.pos == data.len() {
            true => -1,
            false => decoder.pos as i64,
        };
        results.raw_set(1, next)?;
    }
    Ok(Out::Many(results, count))
}

const EOF: &str = "Missing bytes in input.";
const BADFMT: &str = "Bad data format in input.";

struct Decoder<'a> {
    lua: &'a Lua,
    data: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Decoder<'_> {
    /// The next `n` bytes, consumed.
    fn take(&mut self, n: usize) -> LibResult<&[u8]> {
        match self.data.len() - self.pos >= n {
            true => {
                self.pos += n;
                Ok(&self.data[self.pos - n..self.pos])
            }
            false => plain(EOF),
        }
    }

    /// A big-endian unsigned integer of `n` bytes.
    fn unsigned(&mut self, n: usize) -> LibResult<u64> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| acc << 8 | u64::from(b)))
    }

    fn string(&mut self, len: usize) -> LibResult<Value> {
        let lua = self.lua;
        let bytes = self.take(len)?;
        Ok(Value::String(lua.create_string(bytes)?))
    }

    fn value(&mut self) -> LibResult<Value> {
        let first = self.take(1)?[0];
        let number = |n: f64| Ok(Value::Number(n));
        match first {
            0xcc => number(self.unsigned(1)? as f64),
            0xcd => number(self.unsigned(2)? as f64),
            0xce => number(self.unsigned(4)? as f64),
            0xcf => number(self.unsigned(8)? as i64 as f64),
            0xd0 => number(self.unsigned(1)? as u8 as i8 as f64),
            0xd1 => number(self.unsigned(2)? as u16 as i16 as f64),
            0xd2 => number(self.unsigned(4)? as u32 as i32 as f64),
            0xd3 => number(self.unsigned(8)? as i64 as f64),
            0xc0 => Ok(Value::Nil),
            0xc2 => Ok(Value::Boolean(false)),
            0xc3 => Ok(Value::Boolean(true)),
            0xca => number(f64::from(f32::from_bits(self.unsigned(4)? as u32))),
            0xcb => number(f64::from_bits(self.unsigned(8)?)),
            0xd9 => {
                let len = self.unsigned(1)? as usize;
                self.string(len)
            }
            0xda => {
                let len = self.unsigned(2)? as usize;
                self.string(len)
            }
            0xdb => {
                let len = self.unsigned(4)? as usize;
                self.string(len)
            }
            0xdc => self.sized_array(2),
            0xdd => self.sized_array(4),
            0xde => self.sized_map(2),
            0xdf => self.sized_map(4),
            0x00..=0x7f => number(f64::from(first)),
            0xe0..=0xff => number(f64::from(first as i8)),
            0xa0..=0xbf => self.string(usize::from(first & 0x1f)),
            0x90..=0x9f => self.array(usize::from(first & 0xf)),
            0x80..=0x8f => self.map(usize::from(first & 0xf)),
            _ => plain(BADFMT),
        }
    }

    fn sized_array(&mut self, size_bytes: usize) -> LibResult<Value> {
        let len = self.unsigned(size_bytes)? as usize;
        self.array(len)
    }

    fn sized_map(&mut self, size_bytes: usize) -> LibResult<Value> {
        let len = self.unsigned(size_bytes)? as usize;
        self.map(len)
    }

    fn descend(&mut self) -> LibResult<()> {
        self.depth += 1;
        match self.depth > DEPTH_MAX {
            true => plain(format!(
                "MessagePack data nests deeper than {DEPTH_MAX} levels"
            )),
            false => Ok(()),
        }
    }

    fn array(&mut self, len: usize) -> LibResult<Value> {
        self.descend()?;
        let table = self.lua.create_table()?;
        for i in 1..=len {
            let value = self.value()?;
            table.raw_set(i, value)?;
        }
        self.depth -= 1;
        Ok(Value::Table(table))
    }

    fn map(&mut self, len: usize) -> LibResult<Value> {
        self.descend()?;
        let table = self.lua.create_table()?;
        for _ in 0..len {
            let key = self.value()?;
            let value = self.value()?;
            // `lua_settable` with a nil key raises in Redis; keel skips what Lua cannot hold.
            if !matches!(key, Value::Nil) && !matches!(key, Value::Number(n) if n.is_nan()) {
                table.raw_set(key, value)?;
            }
        }
        self.depth -= 1;
        Ok(Value::Table(table))
    }
}
