//! `struct`: Roberto Ierusalimschy's struct library as Redis embeds it (`struct.pack(fmt,
//! ...)`, `struct.unpack(fmt, data [, pos])`, `struct.size(fmt)`), with the sizes of Redis's
//! x86-64 build.
//!
//! The format: `<` little endian, `>` big endian (the default is the machine's: little), `!n`
//! the largest alignment (`!` alone: 8), spaces ignored; `b`/`B` a signed/unsigned byte,
//! `h`/`H` 2 bytes, `l`/`L` and `T` 8 bytes, `i`/`I` an int of `n` bytes (4 by default, at most
//! 32), `f` a float, `d` a double, `s` a zero-terminated string, `cn` `n` bytes of a string
//! (`c0`: the whole string when packing, the length the previous result gave when unpacking),
//! `x` a zero byte of padding. Each item is aligned to the smaller of its size and the largest
//! alignment. Integers go through 64 bits as C's `long` does there (wider ones are padded with
//! zero bytes), and unpack as numbers; `unpack` answers the values and then the position after
//! them.
//!
//! Bounds: the output is made of the format (at most 32 bytes an item, alignment included) and
//! the strings given, and stays within what the script's heap has left.

use mlua::{Lua, Table, Value};

use super::{function, output_room, plain, Args, Fail, LibResult, Out};

/// The largest integer size (`i32`).
const INT_SIZE_MAX: usize = 32;

/// The default largest alignment (`!` alone): a double's, on x86-64.
const ALIGN_DEFAULT: usize = 8;

/// The `struct` table.
pub fn library(lua: &Lua, memory_bytes_max: usize) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    let pack = move |lua: &Lua, args: &Args| {
        let packed = pack(lua, args, output_room(lua, memory_bytes_max))?;
        Ok(Out::One(Value::String(lua.create_string(packed)?)))
    };
    table.raw_set("pack", function(lua, "pack", pack)?)?;
    table.raw_set("unpack", function(lua, "unpack", unpack)?)?;
    table.raw_set("size", function(lua, "size", size)?)?;
    Ok(table)
}

/// The format being read, and its options so far.
struct Format {
    text: Vec<u8>,
    pos: usize,
    little: bool,
    align: usize,
}

impl Format {
    fn new(text: Vec<u8>) -> Self {
        Format {
            text,
            pos: 0,
            little: true,
            align: 1,
        }
    }

    /// The next option, if any.
    fn next(&mut self) -> Option<u8> {
        let option = self.text.get(self.pos).copied()?;
        self.pos += 1;
        Some(option)
    }

    /// A number following the option, or `default`.
    fn number(&mut self, default: usize) -> LibResult<usize> {
        if !self.text.get(self.pos).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut n: usize = 0;
        while let Some(digit) = self.text.get(self.pos).filter(|d| d.is_ascii_digit()) {
            let digit = usize::from(digit - b'0');
            if n > (i32::MAX as usize) / 10 || n * 10 > i32::MAX as usize - digit {
                return plain("integral size overflow");
            }
            n = n * 10 + digit;
            self.pos += 1;
        }
        Ok(n)
    }

    /// The size of `option` (`optsize`), reading its number if it takes one.
    fn size(&mut self, option: u8) -> LibResult<usize> {
        Ok(match option {
            b'b' | b'B' | b'x' => 1,
            b'h' | b'H' => 2,
            b'l' | b'L' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.number(1)?,
            b'i' | b'I' => {
                let size = self.number(4)?;
                if size > INT_SIZE_MAX {
                    return plain(format!(
                        "integral size {size} is larger than limit of {INT_SIZE_MAX}"
                    ));
                }
                size
            }
            _ => 0,
        })
    }

    /// Padding before an item of `size` at offset `len`.
    fn padding(&self, len: usize, option: u8, size: usize) -> usize {
        if size == 0 || option == b'c' {
            return 0;
        }
        let size = size.min(self.align);
        (size - (len & (size - 1))) & (size - 1)
    }

    /// An option that is not an item (`controloptions`).
    fn control(&mut self, option: u8) -> LibResult<()> {
        match option {
            b' ' => {}
            b'>' => self.little = false,
            b'<' => self.little = true,
            b'!' => {
                let align = self.number(ALIGN_DEFAULT)?;
                if !align.is_power_of_two() {
                    return plain(format!("alignment {align} is not a power of 2"));
                }
                self.align = align;
            }
            other => {
                let option = other as char;
                return Err(Fail::Arg(1, format!("invalid format option '{option}'")));
            }
        }
        Ok(())
    }
}

/// An integer's `size` bytes in the format's order: its 64-bit two's complement, zero past it.
fn integer_bytes(value: u64, size: usize, little: bool) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..size)
        .map(|i| if i < 8 { (value >> (8 * i)) as u8 } else { 0 })
        .collect();
    if !little {
        bytes.reverse();
    }
    bytes
}

/// A float (`single`) or a double in the format's order.
fn float_bytes(n: f64, single: bool, little: bool) -> Vec<u8> {
    match (single, little) {
        (true, true) => (n as f32).to_le_bytes().to_vec(),
        (true, false) => (n as f32).to_be_bytes().to_vec(),
        (false, true) => n.to_le_bytes().to_vec(),
        (false, false) => n.to_be_bytes().to_vec(),
    }
}

/// Argument `i` of `pack` as a number. The C library pushes a nil after its arguments, so the
/// first one missing reads as nil there, not "no value".
fn pack_number(lua: &Lua, args: &Args, i: usize) -> LibResult<f64> {
    nil_past_end(args, i, "number", args.number(lua, i))
}

/// Argument `i` of `pack` as a string (see [`pack_number`]).
fn pack_bytes(lua: &Lua, args: &Args, i: usize) -> LibResult<Vec<u8>> {
    nil_past_end(args, i, "string", args.bytes(lua, i))
}

fn nil_past_end<T>(args: &Args, i: usize, what: &str, got: LibResult<T>) -> LibResult<T> {
    match got {
        Err(Fail::Arg(..)) if i == args.len() + 1 => {
            Err(Fail::Arg(i, format!("{what} expected, got nil")))
        }
        other => other,
    }
}

fn pack(lua: &Lua, args: &Args, room: usize) -> LibResult<Vec<u8>> {
    let mut format = Format::new(args.bytes(lua, 1)?);
    let mut out = Vec::new();
    let mut arg = 2;
    while let Some(option) = format.next() {
        let mut size = format.size(option)?;
        let padding = format.padding(out.len(), option, size);
        out.resize(out.len() + padding, 0);
        match option {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = pack_number(lua, args, arg)?;
                arg += 1;
                // C's casts: through `long` when negative, `unsigned long` otherwise.
                let value = if n < 0.0 {
                    super::cast_integer(n) as u64
                } else {
                    n as u64
                };
                out.extend(integer_bytes(value, size, format.little));
            }
            b'x' => out.push(0),
            b'f' | b'd' => {
                let n = pack_number(lua, args, arg)?;
                arg += 1;
                out.extend(float_bytes(n, option == b'f', format.little));
            }
            b'c' | b's' => {
                let text = pack_bytes(lua, args, arg)?;
                arg += 1;
                if size == 0 {
                    size = text.len();
                }
                if text.len() < size {
                    // The library names the argument after the string, as Redis's does.
                    return Err(Fail::Arg(arg, "string too short".into()));
                }
                if out.len().saturating_add(size) > room {
                    return plain("struct.pack: the result exceeds the script's memory left");
                }
                out.extend_from_slice(&text[..size]);
                if option == b's' {
                    out.push(0);
                }
            }
            other => format.control(other)?,
        }
        if out.len() > room {
            return plain("struct.pack: the result exceeds the script's memory left");
        }
    }
    Ok(out)
}

/// An integer read from `bytes` in the format's order, as a number.
fn read_integer(bytes: &[u8], little: bool, signed: bool) -> f64 {
    let mut value = 0u64;
    let mut push = |b: &u8| value = value.wrapping_shl(8) | u64::from(*b);
    match little {
        true => bytes.iter().rev().for_each(&mut push),
        false => bytes.iter().for_each(&mut push),
    }
    if !signed {
        return value as f64;
    }
    // The sign bit, as x86-64 shifts: the count modulo 64.
    let bits = (bytes.len() * 8).wrapping_sub(1) as u32 % 64;
    let mask = u64::MAX << bits;
    if value & mask != 0 {
        value |= mask;
    }
    value as i64 as f64
}

/// A float (4 bytes) or a double (8) in the format's order, as a number.
fn read_float(bytes: &[u8], little: bool) -> f64 {
    let mut ordered = bytes.to_vec();
    if !little {
        ordered.reverse();
    }
    match <[u8; 4]>::try_from(&ordered[..]) {
        Ok(four) => f64::from(f32::from_le_bytes(four)),
        Err(_) => f64::from_le_bytes(ordered.try_into().unwrap_or_default()),
    }
}

fn unpack(lua: &Lua, args: &Args) -> LibResult<Out> {
    let mut format = Format::new(args.bytes(lua, 1)?);
    let data = args.bytes(lua, 2)?;
    let start = args.opt_integer(lua, 3, 1)?;
    if start == 0 {
        return Err(Fail::Arg(3, "offset must be 1 or greater".into()));
    }
    // A negative start is a huge `size_t` in C: past the data.
    let mut pos = (start as u64).wrapping_sub(1).min(usize::MAX as u64) as usize;
    let results = lua.create_table()?;
    let mut n = 0usize;
    let too_short = || Err(Fail::Arg(2, "data string too short".into()));
    while let Some(option) = format.next() {
        let mut size = format.size(option)?;
        pos = pos.saturating_add(format.padding(pos, option, size));
        if size > data.len() || pos > data.len() - size {
            return too_short();
        }
        let value = match option {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let signed = option.is_ascii_lowercase();
                Value::Number(read_integer(&data[pos..pos + size], format.little, signed))
            }
            b'x' => Value::Nil,
            b'f' | b'd' => Value::Number(read_float(&data[pos..pos + size], format.little)),
            b'c' => {
                if size == 0 {
                    let previous = match n {
                        0 => None,
                        _ => lua.coerce_number(results.raw_get::<Value>(n)?)?,
                    };
                    let Some(length) = previous else {
                        return plain("format 'c0' needs a previous size");
                    };
                    results.raw_set(n, Value::Nil)?;
                    n -= 1;
                    size = length.max(0.0) as usize;
                    if size > data.len() || pos > data.len() - size {
                        return too_short();
                    }
                }
                Value::String(lua.create_string(&data[pos..pos + size])?)
            }
            b's' => {
                let Some(end) = data[pos..].iter().position(|&b| b == 0) else {
                    return plain("unfinished string in data");
                };
                size = end + 1;
                Value::String(lua.create_string(&data[pos..pos + end])?)
            }
            other => {
                format.control(other)?;
                Value::Nil
            }
        };
        if !matches!(option, b'x') && !matches!(value, Value::Nil) {
            n += 1;
            results.raw_set(n, value)?;
        }
        pos = pos.saturating_add(size);
    }
    results.raw_set(n + 1, Value::Number(pos as f64 + 1.0))?;
    Ok(Out::Many(results, n + 1))
}

fn size(lua: &Lua, args: &Args) -> LibResult<Out> {
    let mut format = Format::new(args.bytes(lua, 1)?);
    let mut pos = 0usize;
    while let Some(option) = format.next() {
        let size = format.size(option)?;
        pos = pos.saturating_add(format.padding(pos, option, size));
        if option == b's' {
            return Err(Fail::Arg(1, "option 's' has no fixed size".into()));
        }
        if option == b'c' && size == 0 {
            return Err(Fail::Arg(1, "option 'c0' has no fixed size".into()));
        }
        if !option.is_ascii_alphanumeric() {
            format.control(option)?;
        }
        pos = pos.saturating_add(size);
    }
    Ok(Out::One(Value::Number(pos as f64)))
}
