//! Redis-style glob patterns (`stringmatchlen`): `*`, `?`, `[abc]`, `[a-z]`, `[^...]`, `\x`.
//! KEYS and SCAN MATCH compare bytes exactly; CONFIG GET ignores ASCII case.
//!
//! Iterative with one backtrack point, the last `*`: every other pattern element consumes exactly
//! one byte, so letting the last `*` swallow one more byte on a mismatch finds a match whenever
//! one exists, in O(pattern x text) at worst, never exponential (Redis's recursive matcher needed
//! a guard for patterns such as `a*a*a*...b`). An unterminated class (`[abc`) matches nothing.

/// Whether letters match whatever their ASCII case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    Sensitive,
    Insensitive,
}

impl Case {
    fn fold(self, byte: u8) -> u8 {
        match self {
            Case::Sensitive => byte,
            Case::Insensitive => byte.to_ascii_lowercase(),
        }
    }

    fn same(self, a: u8, b: u8) -> bool {
        self.fold(a) == self.fold(b)
    }
}

pub fn glob_match(pattern: &[u8], text: &[u8], case: Case) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((true, next)) = class_match(pattern, p, text[t], case) {
                        p = next;
                        t += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if case.same(pattern[p + 1], text[t]) {
                        p += 2;
                        t += 1;
                        continue;
                    }
                }
                c => {
                    if case.same(c, text[t]) {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
        }
        // Mismatch: let the last `*` swallow one more byte, or fail.
        match star {
            Some((star_p, star_t)) => {
                star = Some((star_p, star_t + 1));
                p = star_p + 1;
                t = star_t + 1;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pattern[open] == '['`. Returns whether it matched
/// and where the pattern continues, or None for an unterminated class (treated as a mismatch).
fn class_match(pattern: &[u8], open: usize, c: u8, case: Case) -> Option<(bool, usize)> {
    let c = case.fold(c);
    let mut i = open + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            matched |= case.fold(pattern[i + 1]) == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (mut lo, mut hi) = (case.fold(pattern[i]), case.fold(pattern[i + 2]));
            if lo > hi {
                std::mem::swap(&mut lo, &mut hi);
            }
            matched |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            matched |= case.fold(pattern[i]) == c;
            i += 1;
        }
    }
    if i >= pattern.len() {
        return None;
    }
    Some((matched != negate, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_patterns_are_case_sensitive_and_config_patterns_are_not() {
        for (pattern, text, sensitive, insensitive) in [
            ("foo*", "foo_a", true, true),
            ("foo*", "FOO_a", false, true),
            ("key:1??", "key:123", true, true),
            ("key:1??", "key:1234", false, false),
            ("[A-C]x", "bx", false, true),
            ("[^a]x", "Ax", true, false),
            ("\\*", "*", true, true),
            ("\\*", "a", false, false),
            ("a\\", "a\\", true, true),
            ("[abc", "a", false, false),
            ("*", "", true, true),
        ] {
            let case = |case| glob_match(pattern.as_bytes(), text.as_bytes(), case);
            assert_eq!(case(Case::Sensitive), sensitive, "{pattern} vs {text}");
            assert_eq!(case(Case::Insensitive), insensitive, "{pattern} vs {text}");
        }
    }

    /// Redis's "Regression for pattern matching long nested loops": answered at once.
    #[test]
    fn many_stars_never_take_exponential_time() {
        let pattern = "a*".repeat(20) + "b";
        let text = "a".repeat(40);
        assert!(!glob_match(
            pattern.as_bytes(),
            text.as_bytes(),
            Case::Sensitive
        ));
    }
}
