//! LCS: the longest common subsequence of two values, by the textbook dynamic programme Redis
//! uses, with the same walk back through the table, so that the subsequence and the IDX ranges
//! are the ones Redis answers.
//!
//! The table has (len1 + 1) x (len2 + 1) cells of 4 bytes, and filling it takes as many steps.
//! Like every read, LCS runs in the apply pipeline, so writes wait for it: inputs whose table
//! would exceed [`LCS_CELLS_MAX`] cells are refused with an error instead (Redis refuses a table
//! larger than `proto-max-bulk-len` bytes, 512 MiB by default).

use bytes::Bytes;

use crate::command::LcsForm;
use keel_resp::Reply;

/// Most table cells LCS fills: 2^24 (64 MiB, tens of milliseconds), e.g. two values of 4 KiB. A
/// constant, not a setting: inside a transaction every replica computes the reply.
pub const LCS_CELLS_MAX: u64 = 1 << 24;

/// LCS of `a` and `b` in the reply `form` asks for.
pub(super) fn longest_common_subsequence(a: &[u8], b: &[u8], form: LcsForm) -> Reply {
    let cells = (a.len() as u64 + 1).saturating_mul(b.len() as u64 + 1);
    if cells > LCS_CELLS_MAX {
        return Reply::error(format!(
            "ERR LCS of values of {} and {} bytes needs a table of {cells} cells, more than the \
             {LCS_CELLS_MAX} keel allows",
            a.len(),
            b.len()
        ));
    }
    let table = Table::fill(a, b);
    let length = table.at(a.len(), b.len());
    match form {
        LcsForm::Length => Reply::Integer(i64::from(length)),
        LcsForm::Text => Reply::Bulk(Bytes::from(table.walk_back(a, b).text)),
        LcsForm::Ranges {
            min_match_len,
            with_match_len,
        } => {
            let matches = table
                .walk_back(a, b)
                .ranges
                .into_iter()
                .filter(|range| range.len() >= min_match_len)
                .map(|range| range.to_reply(with_match_len))
                .collect();
            Reply::Map(vec![
                (Reply::text("matches"), Reply::Array(matches)),
                (Reply::text("len"), Reply::Integer(i64::from(length))),
            ])
        }
    }
}

/// `at(i, j)`: the LCS length of `a[..i]` and `b[..j]`.
struct Table {
    cells: Vec<u32>,
    width: usize,
}

impl Table {
    fn fill(a: &[u8], b: &[u8]) -> Table {
        let width = b.len() + 1;
        let mut cells = vec![0u32; (a.len() + 1) * width];
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                cells[i * width + j] = if a[i - 1] == b[j - 1] {
                    cells[(i - 1) * width + j - 1] + 1
                } else {
                    cells[(i - 1) * width + j].max(cells[i * width + j - 1])
                };
            }
        }
        Table { cells, width }
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells[i * self.width + j]
    }

    /// The subsequence and its runs of bytes contiguous in both values, from the end back, as
    /// Redis walks: on a mismatch it steps back in `a` only when that keeps a longer LCS.
    fn walk_back(&self, a: &[u8], b: &[u8]) -> Walk {
        let mut text = Vec::with_capacity(self.at(a.len(), b.len()) as usize);
        let mut ranges: Vec<MatchRange> = Vec::new();
        let mut current: Option<MatchRange> = None;
        let (mut i, mut j) = (a.len(), b.len());
        while i > 0 && j > 0 {
            if a[i - 1] == b[j - 1] {
                text.push(a[i - 1]);
                current = Some(match current {
                    // Contiguous with the run so far: extend it backwards.
                    Some(run) if run.a.0 == i && run.b.0 == j => MatchRange {
                        a: (i - 1, run.a.1),
                        b: (j - 1, run.b.1),
                    },
                    _ => MatchRange {
                        a: (i - 1, i - 1),
                        b: (j - 1, j - 1),
                    },
                });
                i -= 1;
                j -= 1;
            } else {
                ranges.extend(current.take());
                if self.at(i - 1, j) > self.at(i, j - 1) {
                    i -= 1;
                } else {
                    j -= 1;
                }
            }
        }
        ranges.extend(current);
        text.reverse();
        Walk { text, ranges }
    }
}

struct Walk {
    text: Vec<u8>,
    /// Latest in the values first, as Redis lists them.
    ranges: Vec<MatchRange>,
}

/// A run of the subsequence contiguous in both values: inclusive byte positions in each.
#[derive(Clone, Copy)]
struct MatchRange {
    a: (usize, usize),
    b: (usize, usize),
}

impl MatchRange {
    fn len(&self) -> u64 {
        (self.a.1 - self.a.0 + 1) as u64
    }

    fn to_reply(self, with_match_len: bool) -> Reply {
        let pair = |(start, end): (usize, usize)| {
            Reply::Array(vec![
                Reply::Integer(start as i64),
                Reply::Integer(end as i64),
            ])
        };
        let mut reply = vec![pair(self.a), pair(self.b)];
        if with_match_len {
            reply.push(Reply::Integer(self.len() as i64));
        }
        Reply::Array(reply)
    }
}
