//! `cjson.decode`: CJSON 2.1.0's parser (see `cjson.rs`), its tokens, its lenient numbers (C's
//! `strtod`) and its error messages, positions counted from 1 as CJSON counts them.

use mlua::{Lua, Table, Value};

use super::cjson::Config as JsonConfig;
use super::{plain, LibResult};

/// A token, as CJSON names them in its errors.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str(Vec<u8>),
    Number(f64),
    Boolean(bool),
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

impl Token {
    /// What an error message says was found.
    fn found(&self) -> &'static str {
        match self {
            Token::ObjBegin => "T_OBJ_BEGIN",
            Token::ObjEnd => "T_OBJ_END",
            Token::ArrBegin => "T_ARR_BEGIN",
            Token::ArrEnd => "T_ARR_END",
            Token::Str(_) => "T_STRING",
            Token::Number(_) => "T_NUMBER",
            Token::Boolean(_) => "T_BOOLEAN",
            Token::Null => "T_NULL",
            Token::Colon => "T_COLON",
            Token::Comma => "T_COMMA",
            Token::End => "T_END",
            Token::Error(what) => what,
        }
    }
}

/// Decodes `text` into a Lua value.
pub fn decode(lua: &Lua, text: &[u8], config: &JsonConfig) -> LibResult<Value> {
    if text.len() >= 2 && (text[0] == 0 || text[1] == 0) {
        return plain("JSON parser does not support UTF-16 or UTF-32");
    }
    let mut parser = Parser {
        lua,
        data: text,
        pos: 0,
        depth: 0,
        depth_max: config.decode_depth_max(),
        invalid_numbers: config.decodes_invalid_numbers(),
    };
    let (token, index) = parser.next_token();
    let value = parser.value(token, index)?;
    let (token, index) = parser.next_token();
    if token != Token::End {
        return parse_error("the end", &token, index);
    }
    Ok(value)
}

/// CJSON's `Expected <what> but found <token> at character <n>`.
fn parse_error<T>(expected: &str, token: &Token, index: usize) -> LibResult<T> {
    let found = token.found();
    plain(format!(
        "Expected {expected} but found {found} at character {}",
        index + 1
    ))
}

struct Parser<'a> {
    lua: &'a Lua,
    data: &'a [u8],
    pos: usize,
    depth: usize,
    depth_max: usize,
    invalid_numbers: bool,
}

impl Parser<'_> {
    /// The byte at `at`: the end of the data reads as NUL, as C's terminator does.
    fn at(&self, at: usize) -> u8 {
        self.data.get(at).copied().unwrap_or(0)
    }

    /// The next token and where it starts (where the error is, for an error token).
    fn next_token(&mut self) -> (Token, usize) {
        while matches!(self.at(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let start = self.pos;
        let single = match self.at(start) {
            0 => return (Token::End, start),
            b'{' => Token::ObjBegin,
            b'}' => Token::ObjEnd,
            b'[' => Token::ArrBegin,
            b']' => Token::ArrEnd,
            b',' => Token::Comma,
            b':' => Token::Colon,
            b'"' => return self.string(),
            b'-' | b'0'..=b'9' => {
                if !self.invalid_numbers && self.invalid_number() {
                    return (Token::Error("invalid number"), start);
                }
                return self.number();
            }
            _ => return self.word(),
        };
        self.pos += 1;
        (single, start)
    }

    /// `true`, `false`, `null`, or (while invalid numbers decode) `+1`, `inf`, `nan`.
    fn word(&mut self) -> (Token, usize) {
        let start = self.pos;
        let rest = &self.data[start..];
        for (word, token, length) in [
            (&b"true"[..], Token::Boolean(true), 4),
            (b"false", Token::Boolean(false), 5),
            (b"null", Token::Null, 4),
        ] {
            if rest.starts_with(word) {
                self.pos += length;
                return (token, start);
            }
        }
        let starts_number = matches!(self.at(start), b'+' | b'i' | b'I' | b'n' | b'N');
        if self.invalid_numbers && starts_number && self.invalid_number() {
            return self.number();
        }
        (Token::Error("invalid token"), start)
    }

    /// CJSON's `json_is_invalid_number`: what `strtod` reads but JSON does not allow.
    fn invalid_number(&self) -> bool {
        let mut p = self.pos;
        match self.at(p) {
            b'+' => return true,
            b'-' => p += 1,
            _ => {}
        }
        if self.at(p) == b'0' {
            let next = self.at(p + 1);
            return next | 0x20 == b'x' || next.is_ascii_digit();
        }
        if self.at(p) <= b'9' {
            return false;
        }
        let word = self.data.get(p..p + 3).unwrap_or(&[]).to_ascii_lowercase();
        word == b"inf" || word == b"nan"
    }

    fn number(&mut self) -> (Token, usize) {
        let start = self.pos;
        match strtod(self.data, start) {
            Some((value, end)) => {
                self.pos = end;
                (Token::Number(value), start)
            }
            None => (Token::Error("invalid number"), start),
        }
    }

    /// A string token; an error token points where the string went wrong.
    fn string(&mut self) -> (Token, usize) {
        let start = self.pos;
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let byte = self.at(self.pos);
            match byte {
                b'"' => break,
                0 => return (Token::Error("unexpected end of string"), self.pos),
                b'\\' => {
                    let unescaped = match self.at(self.pos + 1) {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => b'\x08',
                        b't' => b'\t',
                        b'n' => b'\n',
                        b'f' => b'\x0c',
                        b'r' => b'\r',
                        b'u' => match self.unicode_escape(&mut out) {
                            true => continue,
                            false => {
                                return (Token::Error("invalid unicode escape code"), self.pos)
                            }
                        },
                        _ => return (Token::Error("invalid escape code"), self.pos),
                    };
                    out.push(unescaped);
                    self.pos += 2;
                }
                _ => {
                    out.push(byte);
                    self.pos += 1;
                }
            }
        }
        self.pos += 1;
        (Token::Str(out), start)
    }

    /// Four hex digits at `at`, or `None`.
    fn hex4(&self, at: usize) -> Option<u32> {
        (0..4).try_fold(0u32, |acc, i| {
            let digit = (self.at(at + i) as char).to_digit(16)?;
            Some(acc << 4 | digit)
        })
    }

    /// `\uXXXX` (or a surrogate pair of them) at `pos`, appended as UTF-8.
    fn unicode_escape(&mut self, out: &mut Vec<u8>) -> bool {
        let Some(mut code) = self.hex4(self.pos + 2) else {
            return false;
        };
        let mut length = 6;
        if code & 0xF800 == 0xD800 {
            if code & 0x400 != 0 {
                return false;
            }
            if self.at(self.pos + 6) != b'\\' || self.at(self.pos + 7) != b'u' {
                return false;
            }
            let Some(low) = self.hex4(self.pos + 8) else {
                return false;
            };
            if low & 0xFC00 != 0xDC00 {
                return false;
            }
            code = (((code & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            length = 12;
        }
        // CJSON writes UTF-8 by hand, for any code point up to 0x1FFFFF.
        match code {
            0..=0x7F => out.push(code as u8),
            0x80..=0x7FF => out.extend_from_slice(&[0xC0 | (code >> 6) as u8, tail(code, 0)]),
            0x800..=0xFFFF => {
                out.extend_from_slice(&[0xE0 | (code >> 12) as u8, tail(code, 6), tail(code, 0)])
            }
            _ => out.extend_from_slice(&[
                0xF0 | (code >> 18) as u8,
                tail(code, 12),
                tail(code, 6),
                tail(code, 0),
            ]),
        }
        self.pos += length;
        true
    }

    /// A value starting with `token` (which starts at `index`).
    fn value(&mut self, token: Token, index: usize) -> LibResult<Value> {
        Ok(match token {
            Token::Str(text) => Value::String(self.lua.create_string(text)?),
            Token::Number(n) => Value::Number(n),
            Token::Boolean(b) => Value::Boolean(b),
            Token::Null => Value::NULL,
            Token::ObjBegin => Value::Table(self.object()?),
            Token::ArrBegin => Value::Table(self.array()?),
            other => return parse_error("value", &other, index),
        })
    }

    fn descend(&mut self) -> LibResult<()> {
        self.depth += 1;
        if self.depth > self.depth_max {
            return plain(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth, self.pos
            ));
        }
        Ok(())
    }

    fn object(&mut self) -> LibResult<Table> {
        self.descend()?;
        let table = self.lua.create_table()?;
        let (mut token, mut index) = self.next_token();
        if token == Token::ObjEnd {
            self.depth -= 1;
            return Ok(table);
        }
        loop {
            let Token::Str(key) = token else {
                return parse_error("object key string", &token, index);
            };
            let key = self.lua.create_string(key)?;
            let (colon, at) = self.next_token();
            if colon != Token::Colon {
                return parse_error("colon", &colon, at);
            }
            let (first, at) = self.next_token();
            table.raw_set(key, self.value(first, at)?)?;
            let (next, at) = self.next_token();
            match next {
                Token::ObjEnd => {
                    self.depth -= 1;
                    return Ok(table);
                }
                Token::Comma => (token, index) = self.next_token(),
                other => return parse_error("comma or object end", &other, at),
            }
        }
    }

    fn array(&mut self) -> LibResult<Table> {
        self.descend()?;
        let table = self.lua.create_table()?;
        let (mut token, mut index) = self.next_token();
        if token == Token::ArrEnd {
            self.depth -= 1;
            return Ok(table);
        }
        for i in 1.. {
            table.raw_set(i, self.value(token, index)?)?;
            let (next, at) = self.next_token();
            match next {
                Token::ArrEnd => break,
                Token::Comma => (token, index) = self.next_token(),
                other => return parse_error("comma or array end", &other, at),
            }
        }
        self.depth -= 1;
        Ok(table)
    }
}

/// A UTF-8 continuation byte: six bits of `code` from bit `shift`.
fn tail(code: u32, shift: u32) -> u8 {
    0x80 | ((code >> shift) & 0x3F) as u8
}

/// C's `strtod` on the bytes from `start`: the value and where it ended, or `None` where it
/// reads nothing. Decimal and hexadecimal numbers, `inf`, `infinity` and `nan`, any case, with a
/// sign.
pub fn strtod(data: &[u8], start: usize) -> Option<(f64, usize)> {
    let at = |i: usize| data.get(i).copied().unwrap_or(0);
    let mut p = start;
    let negative = at(p) == b'-';
    if matches!(at(p), b'+' | b'-') {
        p += 1;
    }
    let sign = if negative { -1.0 } else { 1.0 };
    let word = |p: usize, w: &[u8]| {
        data.get(p..p + w.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(w))
    };
    if word(p, b"infinity") {
        return Some((sign * f64::INFINITY, p + 8));
    }
    if word(p, b"inf") {
        return Some((sign * f64::INFINITY, p + 3));
    }
    if word(p, b"nan") {
        let mut end = p + 3;
        if at(end) == b'(' {
            let close =
                (end + 1..data.len()).find(|&i| !(at(i).is_ascii_alphanumeric() || at(i) == b'_'));
            if let Some(close) = close.filter(|&i| at(i) == b')') {
                end = close + 1;
            }
        }
        return Some((f64::NAN.copysign(sign), end));
    }
    if at(p) == b'0' && at(p + 1) | 0x20 == b'x' {
        if let Some((value, end)) = hex_float(data, p + 2) {
            return Some((sign * value, end));
        }
    }
    let digits = |mut i: usize| {
        while at(i).is_ascii_digit() {
            i += 1;
        }
        i
    };
    let integer_end = digits(p);
    let mut end = integer_end;
    let mut fraction_digits = 0;
    if at(end) == b'.' {
        let fraction_end = digits(end + 1);
        fraction_digits = fraction_end - end - 1;
        end = fraction_end;
    }
    if integer_end == p && fraction_digits == 0 {
        return None;
    }
    if at(end) | 0x20 == b'e' {
        let mut q = end + 1;
        if matches!(at(q), b'+' | b'-') {
            q += 1;
        }
        if at(q).is_ascii_digit() {
            end = digits(q);
        }
    }
    let text = std::str::from_utf8(&data[p..end]).ok()?;
    let text = text.strip_suffix('.').unwrap_or(text);
    let value: f64 = match text.strip_prefix('.') {
        Some(_) => format!("0{text}").parse().ok()?,
        None => text.parse().ok()?,
    };
    Some((sign * value, end))
}

/// The hexadecimal digits after `0x` (with a fraction and a binary exponent), or `None`.
fn hex_float(data: &[u8], start: usize) -> Option<(f64, usize)> {
    let at = |i: usize| data.get(i).copied().unwrap_or(0);
    let (mut value, mut p, mut any, mut scale) = (0f64, start, false, 0i32);
    while let Some(d) = (at(p) as char).to_digit(16) {
        value = value * 16.0 + f64::from(d);
        (p, any) = (p + 1, true);
    }
    if at(p) == b'.' {
        let mut q = p + 1;
        while let Some(d) = (at(q) as char).to_digit(16) {
            value = value * 16.0 + f64::from(d);
            (q, any, scale) = (q + 1, true, scale - 4);
        }
        if any {
            p = q;
        }
    }
    if !any {
        return None;
    }
    if at(p) | 0x20 == b'p' {
        let mut q = p + 1;
        let negative = at(q) == b'-';
        if matches!(at(q), b'+' | b'-') {
            q += 1;
        }
        if at(q).is_ascii_digit() {
            let mut exponent = 0i32;
            while at(q).is_ascii_digit() {
                exponent = exponent
                    .saturating_mul(10)
                    .saturating_add(i32::from(at(q) - b'0'));
                q += 1;
            }
            scale = scale.saturating_add(if negative { -exponent } else { exponent });
            p = q;
        }
    }
    Some((value * 2f64.powi(scale), p))
}
