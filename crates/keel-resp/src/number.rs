//! Numbers as Redis writes and reads them. Integers: strict decimal, so that a value is an integer
//! only if formatting it back gives the same bytes (`"01"`, `"+1"`, `" 1"` and `"-0"` are not
//! integers). Floats (INCRBYFLOAT): what `strtod` accepts, in full, finite or an explicit
//! infinity.

/// Longest decimal `i64`: a sign and 19 digits.
pub const I64_DECIMAL_BYTES_MAX: usize = 20;

/// Parses `bytes` as Redis's `string2ll` does: an optional `-`, then digits with no leading zero
/// (except `0` itself), fitting an `i64`.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > I64_DECIMAL_BYTES_MAX {
        return None;
    }
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [b'0'] if !negative => return Some(0),
        [] | [b'0', ..] => return None,
        _ => {}
    }
    // Accumulate as a negative number so that i64::MIN parses without overflow.
    let mut value: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_sub(i64::from(b - b'0'))?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// Parses a non-negative decimal that fits `u64` (node ids, counts).
pub fn parse_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 20 || (bytes.len() > 1 && bytes[0] == b'0') {
        return None;
    }
    let mut value: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(value)
}

/// Longest float text read (Redis's `MAX_LONG_DOUBLE_CHARS`).
const FLOAT_TEXT_BYTES_MAX: usize = 5 * 1024;

/// Parses `bytes` as Redis's `string2ld` does, into an `f64`: the whole text is a decimal float
/// (`1`, `-1.5`, `.5`, `1e3`) or an infinity (`inf`, `+Infinity`); no spaces, no NaN. A text
/// whose value is out of the `f64` range (overflow to infinity, or a non-zero value that
/// underflows to zero) is refused, as `strtold`'s `ERANGE` makes Redis refuse a value out of the
/// larger `long double` range. Unlike `strtold`, hexadecimal floats are not read.
pub fn parse_f64(bytes: &[u8]) -> Option<f64> {
    if bytes.is_empty() || bytes.len() >= FLOAT_TEXT_BYTES_MAX {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let value: f64 = text.parse().ok()?;
    let spelled_infinity = text.bytes().any(|b| b.eq_ignore_ascii_case(&b'i'));
    let mantissa_is_zero = text
        .bytes()
        .take_while(|b| !b.eq_ignore_ascii_case(&b'e'))
        .all(|b| !matches!(b, b'1'..=b'9'));
    let out_of_range =
        (value.is_infinite() && !spelled_infinity) || (value == 0.0 && !mantissa_is_zero);
    (!value.is_nan() && !out_of_range).then_some(value)
}

/// Formats a finite float as INCRBYFLOAT stores it: the shortest decimal that reads back as the
/// same `f64`, never in exponent form, without trailing zeros, and `0` for negative zero.
/// (Redis formats a `long double` with 17 decimals and trims the zeros: the same text for the
/// numbers people type, but Redis's arithmetic is in 80-bit precision, so the last digits of a
/// sum can differ (`0.1` plus `0.2` is `0.3` there), and digits past the 17th decimal place are
/// rounded away there (`1e-20` is `0`).)
pub fn format_f64(value: f64) -> String {
    debug_assert!(value.is_finite());
    if value == 0.0 {
        return "0".to_string();
    }
    // Rust's `Display` for f64 is the shortest round-trip form, in positional notation.
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_parse_like_redis_string2ld_and_format_for_humans() {
        for (text, want) in [
            ("1", Some(1.0)),
            ("-1.5", Some(-1.5)),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            ("+2", Some(2.0)),
            ("1e3", Some(1000.0)),
            ("0.0", Some(0.0)),
            ("0e5000", Some(0.0)),
            ("+inf", Some(f64::INFINITY)),
            ("-Infinity", Some(f64::NEG_INFINITY)),
            ("", None),
            (" 1", None),
            ("1 ", None),
            ("1\x002", None), // an embedded NUL
            ("nan", None),
            ("abc", None),
            ("1e400", None),
            ("1e-400", None),
            ("0x10", None),
        ] {
            assert_eq!(parse_f64(text.as_bytes()), want, "{text:?}");
        }
        assert_eq!(parse_f64(&[b'1'; FLOAT_TEXT_BYTES_MAX]), None);
        for (value, text) in [
            (17179869185.5, "17179869185.5"),
            (34359738368.0, "34359738368"),
            (-0.0, "0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e21, "1000000000000000000000"),
            (1.25e-7, "0.000000125"),
        ] {
            assert_eq!(format_f64(value), text);
            assert_eq!(parse_f64(text.as_bytes()), Some(value + 0.0));
        }
    }

    #[test]
    fn parses_like_redis_string2ll() {
        for (text, want) in [
            ("0", Some(0)),
            ("1", Some(1)),
            ("-1", Some(-1)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("", None),
            ("-", None),
            ("-0", None),
            ("01", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("1.5", None),
            ("abc", None),
        ] {
            assert_eq!(parse_i64(text.as_bytes()), want, "{text:?}");
        }
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"007"), None);
    }

    #[test]
    fn round_trips_through_formatting() {
        for n in [0, 1, -1, 42, i64::MAX, i64::MIN, 1_000_000] {
            assert_eq!(parse_i64(n.to_string().as_bytes()), Some(n));
        }
    }
}
