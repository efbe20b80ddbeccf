//! Splitting an inline command line into arguments, with the quoting rules of Redis's
//! `sdssplitargs`, so `redis-cli`-style input such as `SET "a key" 'it''s'` behaves the same here:
//!
//! - arguments are separated by spaces, tabs, CR, LF or NUL;
//! - `"..."` allows the escapes `\n \r \t \b \a \\ \"` and `\xHH`; any other `\c` is `c`;
//! - `'...'` allows only `\'`;
//! - a closing quote must be followed by a separator or the end of the line, and an unclosed
//!   quote is an error ("unbalanced quotes").

use bytes::Bytes;

use super::ProtocolError;

fn is_separator(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0 | 0x0b | 0x0c)
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// Splits one line (without its line terminator) into at most `args_max` arguments.
pub(crate) fn split_args(line: &[u8], args_max: usize) -> Result<Vec<Bytes>, ProtocolError> {
    let mut args = Vec::new();
    let mut p = 0;
    loop {
        while p < line.len() && is_separator(line[p]) {
            p += 1;
        }
        if p == line.len() {
            return Ok(args);
        }
        if args.len() == args_max {
            return Err(ProtocolError::TooManyArguments {
                count: args.len() as u64 + 1,
                max: args_max,
            });
        }
        let (arg, next) = split_one(line, p)?;
        args.push(Bytes::from(arg));
        p = next;
    }
}

/// Reads one argument starting at `p` (not a separator); returns it and where scanning resumes.
#[expect(clippy::too_many_lines)]
fn split_one(line: &[u8], mut p: usize) -> Result<(Vec<u8>, usize), ProtocolError> {
    let closing_ok = |at: usize| at >= line.len() || is_separator(line[at]);
    let mut current = Vec::new();
    let mut in_double = false;
    let mut in_single = false;
    loop {
        if in_double {
            let Some(&c) = line.get(p) else {
                return Err(ProtocolError::UnbalancedQuotes);
            };
            let next = line.get(p + 1).copied();
            match (c, next) {
                (b'\\', Some(b'x')) => {
                    let hex = line
                        .get(p + 2)
                        .and_then(|&h| hex_value(h))
                        .zip(line.get(p + 3).and_then(|&l| hex_value(l)));
                    match hex {
                        Some((high, low)) => {
                            current.push(high * 16 + low);
                            p += 3;
                        }
                        None => {
                            // Not a valid \xHH: Redis keeps the `x` literally.
                            current.push(b'x');
                            p += 1;
                        }
                    }
                }
                (b'\\', Some(escaped)) => {
                    current.push(match escaped {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                    p += 1;
                }
                (b'"', _) => {
                    if !closing_ok(p + 1) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    return Ok((current, p + 1));
                }
                (c, _) => current.push(c),
            }
        } else if in_single {
            let Some(&c) = line.get(p) else {
                return Err(ProtocolError::UnbalancedQuotes);
            };
            match (c, line.get(p + 1)) {
                (b'\\', Some(b'\'')) => {
                    current.push(b'\'');
                    p += 1;
                }
                (b'\'', _) => {
                    if !closing_ok(p + 1) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    return Ok((current, p + 1));
                }
                (c, _) => current.push(c),
            }
        } else {
            match line.get(p) {
                None => return Ok((current, p)),
                Some(&c) if is_separator(c) => return Ok((current, p)),
                Some(b'"') => in_double = true,
                Some(b'\'') => in_single = true,
                Some(&c) => current.push(c),
            }
        }
        p += 1;
    }
}
