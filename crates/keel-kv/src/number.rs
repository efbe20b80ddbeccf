//! Integers as Redis writes and reads them: strict decimal, so that a value is an integer only if
//! formatting it back gives the same bytes (`"01"`, `"+1"`, `" 1"` and `"-0"` are not integers).

/// Longest decimal `i64`: a sign and 19 digits.
pub(crate) const I64_DECIMAL_BYTES_MAX: usize = 20;

/// Parses `bytes` as Redis's `string2ll` does: an optional `-`, then digits with no leading zero
/// (except `0` itself), fitting an `i64`.
pub(crate) fn parse_i64(bytes: &[u8]) -> Option<i64> {
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
pub(crate) fn parse_u64(bytes: &[u8]) -> Option<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
