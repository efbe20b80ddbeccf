//! [`BlockedSignal`]: whether a connection is blocked (a blocking pop, XREAD or XREADGROUP with
//! BLOCK), and CLIENT UNBLOCK's request to end its wait.
//!
//! The request is taken only while the client waits, never while one of its attempts is in the
//! log: an attempt proposed is waited for, and if it served the client (elements taken, entries
//! delivered), that is its answer and the request is dropped; if it took nothing, the client
//! answers the request before it waits again. So an element is never both taken and answered
//! with the unblock reply. CLIENT UNBLOCK answers 1 in both cases: the client was blocked, and is
//! not any more.
//!
//! Without tokio (the simulator builds this crate): the connection's task waits through the
//! waker it leaves.

use std::sync::Mutex;
use std::task::{Poll, Waker};

/// How CLIENT UNBLOCK ends the wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnblockAs {
    /// Answered as on its timeout.
    Timeout,
    /// Answered `-UNBLOCKED client unblocked via CLIENT UNBLOCK`.
    Error,
}

/// What a blocked connection answers when CLIENT UNBLOCK ... ERROR ends its wait (Redis's words).
pub const UNBLOCKED_ERROR: &str = "UNBLOCKED client unblocked via CLIENT UNBLOCK";

/// One connection's blocked state; see the module documentation.
#[derive(Debug, Default)]
pub struct BlockedSignal {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    blocked: bool,
    requested: Option<UnblockAs>,
    waker: Option<Waker>,
}

impl BlockedSignal {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection blocks now.
    pub fn begin(&self) {
        let mut inner = self.lock();
        inner.blocked = true;
        inner.requested = None;
    }

    /// The connection's wait ended (answered, timed out, gone): a request not taken is dropped.
    pub fn end(&self) {
        let mut inner = self.lock();
        inner.blocked = false;
        inner.requested = None;
        inner.waker = None;
    }

    /// Whether the connection is blocked (CLIENT LIST's `b` flag).
    pub fn is_blocked(&self) -> bool {
        self.lock().blocked
    }

    /// CLIENT UNBLOCK: true if the connection is blocked and not asked already, and then asks
    /// it to end its wait as `how` says.
    pub fn unblock(&self, how: UnblockAs) -> bool {
        let mut inner = self.lock();
        if !inner.blocked || inner.requested.is_some() {
            return false;
        }
        inner.requested = Some(how);
        if let Some(waker) = inner.waker.take() {
            waker.wake();
        }
        true
    }

    /// Returns once CLIENT UNBLOCK asked (at once if it did already), with how.
    pub async fn requested(&self) -> UnblockAs {
        std::future::poll_fn(|cx| {
            let mut inner = self.lock();
            match inner.requested {
                Some(how) => Poll::Ready(how),
                None => {
                    if !inner
                        .waker
                        .as_ref()
                        .is_some_and(|w| w.will_wake(cx.waker()))
                    {
                        inner.waker = Some(cx.waker().clone());
                    }
                    Poll::Pending
                }
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;

    #[test]
    fn only_a_blocked_connection_is_unblocked_and_once() {
        let signal = BlockedSignal::default();
        assert!(!signal.unblock(UnblockAs::Timeout), "not blocked");
        signal.begin();
        assert!(signal.is_blocked());
        assert!(signal.unblock(UnblockAs::Error));
        assert!(!signal.unblock(UnblockAs::Timeout), "asked already");
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut wait = std::pin::pin!(signal.requested());
        assert_eq!(wait.as_mut().poll(&mut cx), Poll::Ready(UnblockAs::Error));
        signal.end();
        assert!(!signal.is_blocked());
        signal.begin();
        let mut wait = std::pin::pin!(signal.requested());
        assert_eq!(
            wait.as_mut().poll(&mut cx),
            Poll::Pending,
            "a new wait starts clean"
        );
    }
}
