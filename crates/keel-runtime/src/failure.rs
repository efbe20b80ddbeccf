//! How a node stops when it cannot go on, without taking the process with it.
//!
//! A failed fsync or write, a snapshot that cannot be read back, an order the apply pipeline
//! refuses, a panic in the state machine or in the node task: after any of these the node must
//! not say another word to its peers or its clients (a storage error retried could acknowledge
//! what is not on disk; docs/DESIGN.md section 3). A library must not decide for its process
//! either, so the node stops alone: the part that failed records a [`NodeFailure`] in the node's
//! [`FailureCell`] (the first one wins) and unwinds out of its thread or task without the panic
//! hook ([`std::panic::resume_unwind`], with the [`Halted`] payload); the node task, woken by the
//! cell, ends at once (its connections close, its pending requests fail with `Shutdown`), and the
//! storage and apply threads end with it. The embedder learns of it from
//! [`crate::Node::failed`] and decides: keel's server exits (fail-stop,
//! [`crate::exit_on_failure`]); an embedder may restart the node or the process.

use std::sync::{Arc, OnceLock};

use tokio::sync::watch;

/// Why a node stopped by itself.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeFailure {
    /// The disk failed a write, an fsync or a read the node cannot do without (the data
    /// directory is as the last successful fsync left it: restarting recovers from it).
    #[error("storage failed: {what}: {error}")]
    Storage {
        /// The step that failed (`write_batch`, `flush_promise`, `write a snapshot`, ...).
        what: &'static str,
        /// The error the step met.
        error: String,
    },
    /// A part of the node panicked: the state machine (on the apply thread, or on the node task
    /// that applies small batches itself) or keel.
    #[error("{thread} panicked: {message}")]
    Panicked {
        /// Where: `the node task`, `the apply thread` or `the storage thread`.
        thread: &'static str,
        /// The panic's message.
        message: String,
    },
    /// The state machine failed to apply the entry or restore the snapshot at `index`
    /// (`ApplyError::Fatal`, `RestoreError`): the applied index stays below it, and the next
    /// start applies or restores it again.
    #[error("the state machine failed at index {index}: {message}")]
    StateMachine {
        /// The entry or snapshot it failed on.
        index: keel_core::Index,
        /// Its error.
        message: String,
    },
    /// The apply pipeline was handed an item out of order: a bug, stopped before the state
    /// machine could diverge.
    #[error("apply pipeline: {0}")]
    Pipeline(String),
    /// The background scrub found damage on disk (`crate::scrub`): restarted, the node sets the
    /// damaged files aside and recovers them from the cluster.
    #[error("the scrub found damage on disk: {0}")]
    Damaged(String),
}

impl NodeFailure {
    /// The exit status a process that stops on this failure reports (fail-stop): 75
    /// (`EX_TEMPFAIL`) for damage a restart repairs, 70 (`EX_SOFTWARE`) otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            NodeFailure::Damaged(_) => 75,
            _ => 70,
        }
    }
}

/// The payload a failing part unwinds with: its failure is already recorded, nothing more to
/// report.
#[derive(Debug)]
pub(crate) struct Halted;

/// One node's failure, once recorded, and the signal the node task waits on.
#[derive(Debug)]
pub(crate) struct FailureCell {
    node: u64,
    failure: OnceLock<NodeFailure>,
    signal: watch::Sender<bool>,
}

impl FailureCell {
    pub(crate) fn new(node: u64) -> Arc<FailureCell> {
        Arc::new(FailureCell {
            node,
            failure: OnceLock::new(),
            signal: watch::Sender::new(false),
        })
    }

    /// Records `failure` (unless one was recorded first) and wakes the node task.
    pub(crate) fn record(&self, failure: NodeFailure) {
        if self.failure.set(failure.clone()).is_ok() {
            tracing::error!(node = self.node, "node stopped: {failure}");
        }
        self.signal.send_replace(true);
    }

    /// Records `failure` and unwinds out of the calling thread or task (see the module
    /// documentation): nothing after the failure runs.
    pub(crate) fn halt(&self, failure: NodeFailure) -> ! {
        self.record(failure);
        std::panic::resume_unwind(Box::new(Halted))
    }

    pub(crate) fn get(&self) -> Option<NodeFailure> {
        self.failure.get().cloned()
    }

    /// Resolves once a failure is recorded.
    pub(crate) async fn wait(&self) -> NodeFailure {
        let mut signal = self.signal.subscribe();
        loop {
            if let Some(failure) = self.get() {
                return failure;
            }
            if signal.changed().await.is_err() {
                // The sender lives in `self`: unreachable while `self` is borrowed.
                std::future::pending::<()>().await;
            }
        }
    }

    /// A receiver that changes once a failure is recorded (for the node task's `select!`).
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.signal.subscribe()
    }

    /// What a caught unwind means: nothing new if it was a [`Halted`] (already recorded),
    /// otherwise a panic of `thread`, recorded now.
    pub(crate) fn caught(&self, thread: &'static str, payload: Box<dyn std::any::Any + Send>) {
        if payload.is::<Halted>() {
            self.signal.send_replace(true);
            return;
        }
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        self.record(NodeFailure::Panicked { thread, message });
    }
}

/// Runs `f`, turning an unwind out of it into a recorded failure of `thread`.
pub(crate) fn guarded(cell: &FailureCell, thread: &'static str, f: impl FnOnce()) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        cell.caught(thread, payload);
    }
}

/// A future that turns an unwind out of the inner future into a recorded failure of `thread`
/// (the node task: a panic there must stop the node, not leave it without its task).
pub(crate) struct Guarded<F> {
    pub(crate) inner: std::pin::Pin<Box<F>>,
    pub(crate) cell: Arc<FailureCell>,
    pub(crate) thread: &'static str,
}

impl<F: std::future::Future<Output = ()>> std::future::Future for Guarded<F> {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let this = &mut *self;
        let inner = &mut this.inner;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => {
                this.cell.caught(this.thread, payload);
                std::task::Poll::Ready(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_wins_and_panics_are_named() {
        let cell = FailureCell::new(1);
        guarded(&cell, "apply", || panic!("boom"));
        guarded(&cell, "apply", || {
            cell.halt(NodeFailure::Storage {
                what: "fsync",
                error: "EIO".into(),
            })
        });
        assert_eq!(
            cell.get(),
            Some(NodeFailure::Panicked {
                thread: "apply",
                message: "boom".into()
            })
        );
    }

    #[test]
    fn a_halt_is_recorded_once_and_unwinds() {
        let cell = FailureCell::new(1);
        let mut after = false;
        guarded(&cell, "storage", || {
            cell.halt(NodeFailure::Damaged("segment 3".into()));
            #[allow(unreachable_code)]
            {
                after = true;
            }
        });
        assert!(!after, "nothing after a halt runs");
        assert_eq!(cell.get().map(|f| f.exit_code()), Some(75));
        assert!(*cell.subscribe().borrow());
    }
}
