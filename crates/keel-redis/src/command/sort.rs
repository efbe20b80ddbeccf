//! `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC | DESC] [ALPHA]
//! [STORE destination]` and `SORT_RO` (the same without STORE), parsed as Redis 7.0 parses them
//! (`sort.c`): options in any order, the last of each kind winning (GET accumulates).
//!
//! SORT with STORE is a write (a [`super::CollectionWrite::SortStore`], logged as its arguments
//! like every collection command); without it, and SORT_RO, a read. The parser decides which it
//! is, so the log carries it as op 128 or 129 like the other collection commands; `COMMAND
//! GETKEYS` finds STORE's destination by its keyword.

use bytes::Bytes;

use super::collections::{CollectionRead, CollectionWrite, Typed};
use super::parse::{integer, is};
use super::{Command, CommandError, ReadCommand, WriteCommand};

/// What SORT sorts and what it answers for each element (`state_machine/collections/sort.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortArgs {
    pub key: Bytes,
    /// BY's pattern: each element is sorted by the value it names. None: by the element itself.
    pub by: Option<Bytes>,
    /// BY with a pattern without `*` (`BY nosort`): the elements keep their native order.
    pub no_sort: bool,
    /// LIMIT's offset and count, as given (clamped when the length is known, as Redis does).
    pub limit: Option<(i64, i64)>,
    /// GET's patterns, in order: each element answers one value per pattern (`#`: itself).
    pub get: Vec<Bytes>,
    pub descending: bool,
    /// ALPHA: compare bytes, not numbers.
    pub alpha: bool,
}

/// SORT (`read_only` false) or SORT_RO, `args` with the name first (arity checked): without
/// STORE a read ([`CollectionRead::Sort`]), with it a write ([`CollectionWrite::SortStore`]).
pub(super) fn parse_sort(args: &[Bytes], read_only: bool) -> Result<Command, CommandError> {
    let rest = &args[1..];
    let mut sort = SortArgs {
        key: rest[0].clone(),
        by: None,
        no_sort: false,
        limit: None,
        get: Vec::new(),
        descending: false,
        alpha: false,
    };
    let mut destination = None;
    let mut at = 1;
    while at < rest.len() {
        let option = &rest[at];
        let left = rest.len() - at - 1;
        if is(option, "ASC") {
            sort.descending = false;
        } else if is(option, "DESC") {
            sort.descending = true;
        } else if is(option, "ALPHA") {
            sort.alpha = true;
        } else if is(option, "LIMIT") && left >= 2 {
            sort.limit = Some((integer(&rest[at + 1])?, integer(&rest[at + 2])?));
            at += 2;
        } else if is(option, "STORE") && !read_only && left >= 1 {
            destination = Some(rest[at + 1].clone());
            at += 1;
        } else if is(option, "BY") && left >= 1 {
            let pattern = rest[at + 1].clone();
            // Once a pattern without `*` is given, nothing is sorted, whatever BY follows.
            sort.no_sort |= !pattern.contains(&b'*');
            sort.by = Some(pattern);
            at += 1;
        } else if is(option, "GET") && left >= 1 {
            sort.get.push(rest[at + 1].clone());
            at += 1;
        } else {
            return Err(CommandError::Syntax);
        }
        at += 1;
    }
    let args = args.to_vec();
    Ok(match destination {
        Some(destination) => Command::Write(WriteCommand::Collection(Typed {
            op: CollectionWrite::SortStore {
                args: sort,
                destination,
            },
            args,
        })),
        None => Command::Read(ReadCommand::Collection(Typed {
            op: CollectionRead::Sort(sort),
            args,
        })),
    })
}

/// The keys of a SORT for `COMMAND GETKEYS` (Redis's `sortGetKeys`): the key sorted, and the
/// last STORE's destination if any. Patterns name keys too, but not ones a client can know.
pub(super) fn sort_key_positions(args: &[Bytes]) -> Vec<usize> {
    let mut store = None;
    let mut at = 2;
    while at < args.len() {
        let skip = if is(&args[at], "LIMIT") {
            2
        } else if is(&args[at], "GET") || is(&args[at], "BY") {
            1
        } else {
            // STORE's argument is not skipped, as in Redis's sortGetKeys.
            if is(&args[at], "STORE") && at + 1 < args.len() {
                store = Some(at + 1);
            }
            0
        };
        at += skip + 1;
    }
    std::iter::once(1).chain(store).collect()
}
