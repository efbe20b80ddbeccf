//! Recorded client operations.

use std::collections::BTreeMap;
use std::fmt;

use super::model::Model;

/// The name of an independent object. Histories are split per key and every key is checked on
/// its own, which is sound because linearizability is compositional (a history is linearizable
/// iff its restriction to every object is).
pub type Key = String;

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<O> {
    /// The client received `output` at `time`, so the operation took effect exactly once,
    /// somewhere between its invocation and `time`.
    Returned {
        /// When the client received the response.
        time: u64,
        /// What the response said.
        output: O,
    },
    /// The client never learned the result (a timeout, a crash, or still in flight when the
    /// history ended): the operation may have taken effect at any time after its invocation,
    /// even after every other event, or never.
    Unknown,
}

/// One client operation on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<M: Model> {
    /// The client (Jepsen process) that issued it; used only in reports.
    pub client: u64,
    /// The object it acted on.
    pub key: Key,
    /// What was asked.
    pub input: M::Input,
    /// When the client sent the request.
    pub invoke_time: u64,
    /// When and how it ended.
    pub outcome: Outcome<M::Output>,
}

impl<M: Model> Operation<M> {
    /// An operation that completed with `output`.
    pub fn returned(
        client: u64,
        key: impl Into<Key>,
        input: M::Input,
        invoke_time: u64,
        return_time: u64,
        output: M::Output,
    ) -> Self {
        Operation {
            client,
            key: key.into(),
            input,
            invoke_time,
            outcome: Outcome::Returned {
                time: return_time,
                output,
            },
        }
    }

    /// An operation whose result nobody saw.
    pub fn unknown(client: u64, key: impl Into<Key>, input: M::Input, invoke_time: u64) -> Self {
        Operation {
            client,
            key: key.into(),
            input,
            invoke_time,
            outcome: Outcome::Unknown,
        }
    }

    /// The response time, or `None` when the outcome is unknown (the response time is then
    /// effectively +infinity).
    pub fn return_time(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Returned { time, .. } => Some(time),
            Outcome::Unknown => None,
        }
    }
}

impl<M: Model> fmt::Display for Operation<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "client {} {} on {:?} [t={}",
            self.client, self.input, self.key, self.invoke_time
        )?;
        match &self.outcome {
            Outcome::Returned { time, output } => write!(f, "..{time}] -> {output}"),
            Outcome::Unknown => write!(f, "..] -> unknown"),
        }
    }
}

/// A mistake in how a history was recorded (not a linearizability violation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistoryError {
    /// A client invoked an operation while its previous one was still pending.
    ClientBusy {
        /// The client.
        client: u64,
    },
    /// A completion, timeout or failure arrived for a client with nothing pending.
    NothingPending {
        /// The client.
        client: u64,
    },
    /// An operation returned before it was invoked.
    ReturnBeforeInvoke {
        /// The client.
        client: u64,
        /// Its invocation time.
        invoke_time: u64,
        /// Its (earlier) return time.
        return_time: u64,
    },
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryError::ClientBusy { client } => {
                write!(
                    f,
                    "client {client} invoked an operation while another was pending"
                )
            }
            HistoryError::NothingPending { client } => {
                write!(f, "client {client} has no pending operation to complete")
            }
            HistoryError::ReturnBeforeInvoke {
                client,
                invoke_time,
                return_time,
            } => write!(
                f,
                "operation of client {client} returned at {return_time}, before its invocation \
                 at {invoke_time}"
            ),
        }
    }
}

impl std::error::Error for HistoryError {}

/// A concurrent history: every operation with its real-time interval.
///
/// Build it either from whole [`Operation`]s ([`History::push`]) or from the event stream a
/// test driver sees ([`History::invoke`], then [`History::complete`], [`History::time_out`] or
/// [`History::discard`]). Operations still pending when the history is checked count as
/// [`Outcome::Unknown`].
///
/// Times are only compared with each other. Equal times are treated as concurrent (the
/// conservative reading), so give events distinct times (a global event counter works) to
/// express that one operation finished strictly before another began.
#[derive(Clone, Debug)]
pub struct History<M: Model> {
    ops: Vec<Operation<M>>,
    pending: BTreeMap<u64, Operation<M>>,
}

impl<M: Model> Default for History<M> {
    fn default() -> Self {
        History {
            ops: Vec::new(),
            pending: BTreeMap::new(),
        }
    }
}

impl<M: Model> History<M> {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a whole operation.
    pub fn push(&mut self, op: Operation<M>) -> Result<(), HistoryError> {
        if let Outcome::Returned { time, .. } = op.outcome {
            if time < op.invoke_time {
                return Err(HistoryError::ReturnBeforeInvoke {
                    client: op.client,
                    invoke_time: op.invoke_time,
                    return_time: time,
                });
            }
        }
        self.ops.push(op);
        Ok(())
    }

    /// Records that `client` sent `input` on `key` at `time`.
    pub fn invoke(
        &mut self,
        client: u64,
        key: impl Into<Key>,
        input: M::Input,
        time: u64,
    ) -> Result<(), HistoryError> {
        if self.pending.contains_key(&client) {
            return Err(HistoryError::ClientBusy { client });
        }
        self.pending
            .insert(client, Operation::unknown(client, key, input, time));
        Ok(())
    }

    /// Records that `client`'s pending operation returned `output` at `time`.
    pub fn complete(
        &mut self,
        client: u64,
        output: M::Output,
        time: u64,
    ) -> Result<(), HistoryError> {
        let Some(mut op) = self.pending.remove(&client) else {
            return Err(HistoryError::NothingPending { client });
        };
        op.outcome = Outcome::Returned { time, output };
        let result = self.push(op.clone());
        if result.is_err() {
            // Leave the history as it was so the caller can decide what to do.
            op.outcome = Outcome::Unknown;
            self.pending.insert(client, op);
        }
        result
    }

    /// Records that `client` gave up waiting: its operation may or may not take effect.
    pub fn time_out(&mut self, client: u64) -> Result<(), HistoryError> {
        let op = self
            .pending
            .remove(&client)
            .ok_or(HistoryError::NothingPending { client })?;
        self.ops.push(op);
        Ok(())
    }

    /// Records that `client`'s operation definitely did not take effect (e.g. it was rejected
    /// before reaching the log), so it is dropped from the history.
    pub fn discard(&mut self, client: u64) -> Result<(), HistoryError> {
        self.pending
            .remove(&client)
            .map(|_| ())
            .ok_or(HistoryError::NothingPending { client })
    }

    /// Every operation, finished ones first, then those still pending.
    pub fn iter(&self) -> impl Iterator<Item = &Operation<M>> {
        self.ops.iter().chain(self.pending.values())
    }

    /// The number of operations, including pending ones.
    pub fn len(&self) -> usize {
        self.ops.len() + self.pending.len()
    }

    /// Whether the history has no operations at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<M: Model> FromIterator<Operation<M>> for History<M> {
    /// Collects operations without validating their intervals; an operation that returns
    /// before it was invoked is treated as returning at its invocation.
    fn from_iter<I: IntoIterator<Item = Operation<M>>>(iter: I) -> Self {
        History {
            ops: iter.into_iter().collect(),
            pending: BTreeMap::new(),
        }
    }
}
