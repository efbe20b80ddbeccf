//! `bit`: LuaBitOp as Redis embeds it. Every operation works on 32-bit integers made from Lua's
//! doubles the way LuaBitOp makes them: add 2^52 + 2^51 and keep the low 32 bits of the sum's
//! representation (numbers round to nearest, ties to even, and wrap modulo 2^32), and answers a
//! signed 32-bit result as a number. An argument that is not a number, nor a string Lua converts
//! to one, raises `bad argument #n to 'f' (number expected, got T)`.

use mlua::{Lua, Table, Value};

use super::{function, Args, LibResult, Out};

/// LuaBitOp's conversion of an argument (`barg`): Lua 5.1's `lua_tonumber`, 0 for anything
/// else, which is an error unless the value was a number.
fn arg(lua: &Lua, args: &Args, i: usize) -> LibResult<u32> {
    let n = lua.coerce_number(args.get(i)?)?;
    let bits = tobit(n.unwrap_or(0.0));
    if bits == 0 && n.is_none() {
        return Err(args.expected(i, "number"));
    }
    Ok(bits)
}

/// A double's low 32 bits after adding 2^52 + 2^51.
pub fn tobit(n: f64) -> u32 {
    (n + 6_755_399_441_055_744.0).to_bits() as u32
}

fn result(bits: u32) -> Out {
    Out::One(Value::Number(f64::from(bits as i32)))
}

/// `bit.tohex(x [, n])`: `n` hex digits (8 by default; negative: upper case; at most 8).
fn tohex(lua: &Lua, args: &Args) -> LibResult<Out> {
    let mut bits = arg(lua, args, 1)?;
    let mut n = match args.len() >= 2 {
        true => arg(lua, args, 2)? as i32,
        false => 8,
    };
    let mut digits: &[u8; 16] = b"0123456789abcdef";
    n = n.max(i32::MIN + 1);
    if n < 0 {
        n = -n;
        digits = b"0123456789ABCDEF";
    }
    let n = n.min(8) as usize;
    let mut text = vec![0u8; n];
    for slot in text.iter_mut().rev() {
        *slot = digits[(bits & 15) as usize];
        bits >>= 4;
    }
    Ok(Out::One(Value::String(lua.create_string(&text)?)))
}

/// An operation on its first argument and, for shifts and rotations, a count (modulo 32).
fn unary(lua: &Lua, args: &Args, op: fn(u32, u32) -> u32, shift: bool) -> LibResult<Out> {
    let bits = arg(lua, args, 1)?;
    let count = match shift {
        true => arg(lua, args, 2)? & 31,
        false => 0,
    };
    Ok(result(op(bits, count)))
}

/// `band`, `bor`, `bxor`: the operation folded over every argument.
fn fold(lua: &Lua, args: &Args, op: fn(u32, u32) -> u32) -> LibResult<Out> {
    let mut bits = arg(lua, args, 1)?;
    // LuaBitOp reads the arguments from the last to the second.
    for i in (2..=args.len()).rev() {
        bits = op(bits, arg(lua, args, i)?);
    }
    Ok(result(bits))
}

/// The `bit` table.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    type Op = fn(u32, u32) -> u32;
    let table = lua.create_table()?;
    let unaries: [(&'static str, Op, bool); 8] = [
        ("tobit", |b, _| b, false),
        ("bnot", |b, _| !b, false),
        ("bswap", |b, _| b.swap_bytes(), false),
        ("lshift", |b, n| b << n, true),
        ("rshift", |b, n| b >> n, true),
        ("arshift", |b, n| ((b as i32) >> n) as u32, true),
        ("rol", |b, n| b.rotate_left(n), true),
        ("ror", |b, n| b.rotate_right(n), true),
    ];
    for (name, op, shift) in unaries {
        let f = function(lua, name, move |lua, args| unary(lua, args, op, shift))?;
        table.raw_set(name, f)?;
    }
    let folds: [(&'static str, Op); 3] = [
        ("band", |a, b| a & b),
        ("bor", |a, b| a | b),
        ("bxor", |a, b| a ^ b),
    ];
    for (name, op) in folds {
        table.raw_set(
            name,
            function(lua, name, move |lua, args| fold(lua, args, op))?,
        )?;
    }
    table.raw_set("tohex", function(lua, "tohex", tohex)?)?;
    Ok(table)
}
