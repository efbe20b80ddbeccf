//! A linearizability checker for key-value histories.
//!
//! The simulator records what its clients saw (operations with real-time intervals, some of
//! them timed out) and this module decides whether some sequential order of those operations,
//! consistent with real time, explains every observed result. Any non-linearizable history is
//! proof of a consistency bug, so the verdict explains which operations cannot be ordered.
//!
//! - [`Model`] is the sequential specification; [`Register`] (read/write/compare-and-set over
//!   an optional `u64`, and swap: a write returning the value it replaced) and [`Append`]
//!   (get/put/append over strings) implement it.
//! - [`History`] holds the operations; keys are independent objects and are checked one at a
//!   time, since linearizability is compositional.
//! - [`check`] runs the Wing–Gong search with Lowe's memoisation under a [`SearchBudget`].
//! - [`parse_jepsen_etcd`] and [`parse_jepsen_kv`] read the reference histories that the
//!   checker is validated against.

mod blocks;
mod history;
mod model;
mod parse;
mod search;
mod table;
mod verdict;

pub use history::{History, HistoryError, Key, Operation, Outcome};
pub use model::{
    Append, AppendOp, AppendOutput, Effect, Model, Register, RegisterOp, RegisterOutput, Value,
};
pub use parse::{parse_jepsen_etcd, parse_jepsen_kv, ParseError, ParseErrorKind, ETCD_KEY};
pub use verdict::{check, Counterexample, SearchBudget, Verdict};

#[cfg(test)]
mod tests;
