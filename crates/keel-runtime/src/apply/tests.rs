//! The apply pipeline's two paths: inline on the caller (the node task) when the thread is idle
//! and the item fits the budget, else the apply thread, always in log order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use keel_core::{Entry, EntryPayload, Index, LogId};
use tokio::sync::{mpsc, oneshot};

use super::{spawn, ApplyItem, ApplyWorker, SnapshotPolicy, SnapshotWriter, StateMachine};
use crate::event::Event;

/// Records which thread applied each index; sleeps `delay_ms` in each apply when set.
struct Recorder {
    applied: Arc<Mutex<Vec<(Index, String)>>>,
    delay_ms: Arc<AtomicU64>,
}

impl StateMachine for Recorder {
    fn apply(&mut self, at: LogId, _data: &Bytes) -> Result<Bytes, keel_engine::ApplyError> {
        let index = at.index;
        std::thread::sleep(Duration::from_millis(self.delay_ms.load(Ordering::Relaxed)));
        self.applied.lock().unwrap().push((index, caller()));
        Ok(Bytes::from(index.to_string()))
    }
    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(caller().into_bytes())
    }
    fn restore(
        &mut self,
        _last: LogId,
        _data: &mut dyn std::io::Read,
    ) -> Result<(), keel_engine::RestoreError> {
        Ok(())
    }
}

struct Harness {
    queue: ApplyWorker<Recorder>,
    applied: Arc<Mutex<Vec<(Index, String)>>>,
    delay_ms: Arc<AtomicU64>,
    events: mpsc::UnboundedReceiver<Event>,
    thread: Option<std::thread::JoinHandle<()>>,
    next: Index,
}

fn harness(inline_budget_ns: u64, policy: SnapshotPolicy) -> Harness {
    let applied = Arc::new(Mutex::new(Vec::new()));
    let delay_ms = Arc::new(AtomicU64::new(0));
    let (events_tx, events) = mpsc::unbounded_channel();
    let sm = Recorder {
        applied: Arc::clone(&applied),
        delay_ms: Arc::clone(&delay_ms),
    };
    let (queue, thread) = spawn(
        sm,
        0,
        policy,
        Arc::new(AtomicU64::new(0)),
        inline_budget_ns,
        events_tx,
        crate::failure::FailureCell::new(1),
    )
    .expect("spawn");
    Harness {
        queue,
        applied,
        delay_ms,
        events,
        thread: Some(thread),
        next: 1,
    }
}

fn no_snapshots() -> SnapshotPolicy {
    SnapshotPolicy {
        entries_max: u64::MAX,
        bytes_max: u64::MAX,
        bytes_min: u64::MAX,
        log_to_state_ratio: 0,
    }
}

impl Harness {
    /// Submits `count` entries of one byte as one batch and returns their replies.
    fn submit(&mut self, count: u64) -> Vec<oneshot::Receiver<Result<Bytes, crate::ClientError>>> {
        self.submit_sized(count, 1)
    }

    fn submit_sized(
        &mut self,
        count: u64,
        bytes_each: usize,
    ) -> Vec<oneshot::Receiver<Result<Bytes, crate::ClientError>>> {
        let (item, replies) = self.batch(count, bytes_each);
        self.queue.submit(item);
        replies
    }

    /// The next `count` entries of `bytes_each` bytes as one item, with their replies.
    fn batch(
        &mut self,
        count: u64,
        bytes_each: usize,
    ) -> (
        ApplyItem<Recorder>,
        Vec<oneshot::Receiver<Result<Bytes, crate::ClientError>>>,
    ) {
        let mut batch = Vec::new();
        let mut replies = Vec::new();
        for _ in 0..count {
            let (tx, rx) = oneshot::channel();
            let entry = Entry {
                index: self.next,
                term: 1,
                payload: EntryPayload::Normal(Bytes::from(vec![b'x'; bytes_each])),
            };
            self.next += 1;
            batch.push((entry, Some(tx)));
            replies.push(rx);
        }
        (ApplyItem::Entries(batch), replies)
    }

    /// Stops the thread (it finishes what it holds) and returns who applied what.
    fn finish(mut self) -> Vec<(Index, String)> {
        drop(self.queue);
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("apply thread");
        let applied = self.applied.lock().unwrap().clone();
        applied
    }
}

fn on(applied: &[(Index, String)], thread: &str) -> Vec<Index> {
    applied
        .iter()
        .filter(|(_, t)| t == thread)
        .map(|(i, _)| *i)
        .collect()
}

/// The name of the calling thread.
fn caller() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

#[test]
fn an_idle_pipeline_applies_a_small_batch_on_the_caller_and_replies_at_once() {
    let mut h = harness(1_000_000_000, no_snapshots());
    let mut replies = h.submit(3);
    // Applied before `submit` returned: the replies are already there.
    for (k, reply) in replies.iter_mut().enumerate() {
        assert_eq!(reply.try_recv().unwrap().unwrap(), (k + 1).to_string());
    }
    match h.events.try_recv() {
        Ok(Event::Applied { index: 3, .. }) => {}
        other => panic!("expected Applied(3), got {other:?}"),
    }
    let applied = h.finish();
    assert_eq!(on(&applied, &caller()), [1, 2, 3]);
}

#[test]
fn a_zero_budget_or_a_batch_over_it_or_over_64_kib_goes_to_the_apply_thread() {
    let mut h = harness(0, no_snapshots());
    h.submit(2);
    assert_eq!(on(&h.finish(), "keel-apply"), [1, 2]);

    // Before anything was measured an entry is assumed to cost 10 µs: 50 µs fits 5, not 6.
    let mut h = harness(50_000, no_snapshots());
    h.submit(6);
    assert_eq!(on(&h.finish(), "keel-apply"), [1, 2, 3, 4, 5, 6]);
    let mut h = harness(50_000, no_snapshots());
    h.submit(5);
    assert_eq!(on(&h.finish(), &caller()), [1, 2, 3, 4, 5]);

    // Whatever the budget, a batch carrying more than 64 KiB of data.
    let mut h = harness(1_000_000_000, no_snapshots());
    h.submit_sized(1, 64 * 1024);
    h.submit_sized(2, 32 * 1024 + 1);
    let applied = h.finish();
    assert_eq!(on(&applied, &caller()), [1]);
    assert_eq!(on(&applied, "keel-apply"), [2, 3]);
}

#[test]
fn items_wait_behind_queued_ones_and_apply_in_order() {
    let mut h = harness(1_000_000_000, no_snapshots());
    h.delay_ms.store(20, Ordering::Relaxed);
    // A batch the thread holds (and applies slowly): what follows must queue behind it, not
    // overtake it inline.
    let (held, _replies) = h.batch(1, 1);
    h.queue.enqueue(held);
    h.submit(1);
    h.submit(1);
    let applied = h.finish();
    let indexes: Vec<Index> = applied.iter().map(|(i, _)| *i).collect();
    assert_eq!(indexes, [1, 2, 3]);
    assert_eq!(on(&applied, "keel-apply"), [1, 2, 3]);
}

#[test]
fn a_snapshot_due_after_an_inline_batch_is_captured_on_the_apply_thread() {
    let policy = SnapshotPolicy {
        entries_max: 2,
        ..no_snapshots()
    };
    let mut h = harness(1_000_000_000, policy);
    h.submit(2);
    let mut events = Vec::new();
    while events.len() < 2 {
        events.push(h.events.blocking_recv().expect("event"));
    }
    let applied = h.finish();
    assert_eq!(on(&applied, &caller()), [1, 2]);
    let mut events = events.into_iter();
    assert!(matches!(
        events.next(),
        Some(Event::Applied { index: 2, .. })
    ));
    let Some(Event::SnapshotTaken { index: 2, view }) = events.next() else {
        panic!("expected the snapshot at 2");
    };
    // The recorder's view is the name of the thread that captured it.
    let mut captured_on = Vec::new();
    view.write_to(&mut captured_on).expect("write");
    assert_eq!(captured_on, b"keel-apply");
}

#[test]
fn nothing_runs_inline_while_an_item_is_queued_even_with_the_lock_free() {
    let mut h = harness(1_000_000_000, no_snapshots());
    // As if an item were in the channel, not yet taken by the thread (which would hold the lock
    // while applying it): the count alone must keep later items behind it.
    h.queue.shared.queued.fetch_add(1, Ordering::AcqRel);
    h.submit(1);
    assert_eq!(on(&h.finish(), "keel-apply"), [1]);
}

#[test]
fn a_read_runs_on_the_caller_when_idle_and_behind_queued_entries_otherwise() {
    let mut h = harness(1_000_000_000, no_snapshots());
    let read_on = |h: &Harness| {
        let (tx, rx) = std::sync::mpsc::channel();
        h.queue.submit(ApplyItem::Read(Box::new(move |state| {
            assert!(state.is_ok());
            tx.send(caller()).unwrap();
        })));
        rx
    };
    assert_eq!(
        read_on(&h).try_recv().unwrap(),
        caller(),
        "idle: run at once"
    );

    h.delay_ms.store(20, Ordering::Relaxed);
    let (held, _replies) = h.batch(1, 1);
    h.queue.enqueue(held);
    let behind = read_on(&h);
    assert_eq!(h.finish(), [(1, "keel-apply".to_string())]);
    assert_eq!(behind.recv().unwrap(), "keel-apply");
}
