use bytes::Bytes;
use keel_core::{Entry, EntryPayload, LogId, SnapshotMeta};

use super::{Applier, ApplyItem, ApplyQueue, PipelineError, SnapshotPolicy};
use crate::state_machine::{ApplyError, RestoreError, SnapshotWriter, StateMachine};

const MIB: u64 = 1 << 20;

fn policy() -> SnapshotPolicy {
    SnapshotPolicy {
        entries_max: 1_000_000,
        bytes_max: 256 * MIB,
        bytes_min: 16 * MIB,
        log_to_state_ratio: 4,
    }
}

#[test]
fn a_small_state_waits_for_the_minimum() {
    let p = policy();
    assert!(!p.due(1000, 16 * MIB - 1, 1024));
    assert!(p.due(1000, 16 * MIB, 1024));
}

#[test]
fn a_larger_state_waits_for_its_multiple() {
    let p = policy();
    assert!(!p.due(1000, 40 * MIB - 1, 10 * MIB));
    assert!(p.due(1000, 40 * MIB, 10 * MIB));
}

#[test]
fn the_maximum_caps_a_huge_state_and_entries_cap_tiny_entries() {
    let p = policy();
    assert!(p.due(1000, 256 * MIB, 1 << 40));
    assert!(!p.due(1000, 256 * MIB - 1, 1 << 40));
    assert!(p.due(1_000_000, 0, 0));
    assert!(!p.due(999_999, 0, 0));
}

#[test]
fn ratio_zero_leaves_the_minimum_and_no_overflow() {
    let p = SnapshotPolicy {
        log_to_state_ratio: 0,
        ..policy()
    };
    assert!(p.due(1, 16 * MIB, 1 << 40));
    let p = SnapshotPolicy {
        log_to_state_ratio: u64::MAX,
        ..policy()
    };
    assert!(p.due(1, 256 * MIB, u64::MAX));
}

/// A state machine that records the data it applied, in order; it refuses `r` (changing
/// nothing), fails on `!`, and cannot restore an empty snapshot.
#[derive(Default)]
struct Log(Vec<u8>);

impl StateMachine for Log {
    fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, ApplyError> {
        match &data[..] {
            b"r" => return Err(ApplyError::Refused(Bytes::from_static(b"no r"))),
            b"!" => return Err(ApplyError::Fatal("its disk is gone".into())),
            _ => {}
        }
        self.0.extend_from_slice(data);
        Ok(Bytes::copy_from_slice(&self.0))
    }
    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(self.0.clone())
    }
    fn restore(&mut self, _last: LogId, data: &mut dyn std::io::Read) -> Result<(), RestoreError> {
        let mut bytes = Vec::new();
        data.read_to_end(&mut bytes)
            .map_err(|e| RestoreError(e.to_string()))?;
        if bytes.is_empty() {
            return Err(RestoreError("an empty snapshot".into()));
        }
        self.0 = bytes;
        Ok(())
    }
}

fn entry(index: u64, byte: u8) -> Entry {
    Entry {
        index,
        term: 1,
        payload: EntryPayload::Normal(Bytes::copy_from_slice(&[byte])),
    }
}

fn meta(index: u64) -> SnapshotMeta {
    SnapshotMeta {
        last: LogId::new(1, index),
        ..SnapshotMeta::initial(Default::default())
    }
}

#[test]
fn entries_apply_in_order_and_answer_their_proposers() {
    let mut a = Applier::new(Log::default(), 0, policy());
    let mut answers = Vec::new();
    a.apply_entries(
        vec![(entry(1, b'a'), Some(10)), (entry(2, b'b'), None)],
        |e, reply, result, _| answers.push((e.index, reply, result)),
    )
    .unwrap();
    assert_eq!(a.applied(), 2);
    assert_eq!(a.state().0, b"ab");
    assert_eq!(answers[0], (1, Some(10), Ok(Bytes::from_static(b"a"))));
    assert_eq!(answers[1], (2, None, Ok(Bytes::from_static(b"ab"))));
}

#[test]
fn a_refused_entry_is_applied_unchanged_and_a_fatal_one_is_not_applied() {
    let mut a = Applier::new(Log::default(), 0, policy());
    let mut answers = Vec::new();
    let stopped = a.apply_entries(
        vec![
            (entry(1, b'a'), Some(1)),
            (entry(2, b'r'), Some(2)),
            (entry(3, b'b'), Some(3)),
            (entry(4, b'!'), Some(4)),
            (entry(5, b'c'), Some(5)),
        ],
        |e, reply, result, _| answers.push((e.index, reply, result)),
    );
    // The refusal reaches its proposer and counts as applied; the state did not change.
    assert_eq!(answers[1], (2, Some(2), Err(Bytes::from_static(b"no r"))));
    assert_eq!(answers[2], (3, Some(3), Ok(Bytes::from_static(b"ab"))));
    // The fatal error stops the batch before its entry: 4 and 5 are not applied.
    assert_eq!(
        stopped,
        Err(PipelineError::StateMachine {
            index: 4,
            message: "its disk is gone".into()
        })
    );
    assert_eq!(
        (answers.len(), a.applied(), &a.state().0[..]),
        (3, 3, &b"ab"[..])
    );
    // A failed restore leaves the applied index and the state where they were.
    assert!(matches!(
        a.restore(&meta(9), &mut &b""[..]),
        Err(PipelineError::StateMachine { index: 9, .. })
    ));
    assert_eq!((a.applied(), &a.state().0[..]), (3, &b"ab"[..]));
}

#[test]
fn a_gap_a_repeat_or_a_restore_behind_is_refused_and_changes_nothing() {
    let mut a = Applier::new(Log::default(), 0, policy());
    let none: Option<u8> = None;
    a.apply_entries(vec![(entry(1, b'a'), none)], |_, _, _, _| {})
        .unwrap();
    let gap = a.apply_entries(vec![(entry(3, b'c'), none)], |_, _, _, _| {});
    assert_eq!(
        gap,
        Err(PipelineError::OutOfOrder {
            index: 3,
            applied: 1
        })
    );
    let repeat = a.apply_entries(vec![(entry(1, b'a'), none)], |_, _, _, _| {});
    assert!(matches!(repeat, Err(PipelineError::OutOfOrder { .. })));
    assert_eq!(
        a.restore(&meta(1), &mut &b"zz"[..]),
        Err(PipelineError::RestoreBehind {
            index: 1,
            applied: 1
        })
    );
    assert_eq!((a.applied(), &a.state().0[..]), (1, &b"a"[..]));
    a.restore(&meta(5), &mut &b"abcde"[..]).unwrap();
    assert_eq!((a.applied(), &a.state().0[..]), (5, &b"abcde"[..]));
    a.apply_entries(vec![(entry(6, b'f'), none)], |_, _, _, _| {})
        .unwrap();
    assert_eq!(a.state().0, b"abcdef");
}

#[test]
fn a_snapshot_is_due_by_the_policy_and_taking_one_restarts_the_count() {
    let mut a = Applier::new(
        Log::default(),
        0,
        SnapshotPolicy {
            entries_max: 2,
            ..policy()
        },
    );
    let none: Option<u8> = None;
    a.apply_entries(vec![(entry(1, b'a'), none)], |_, _, _, _| {})
        .unwrap();
    assert!(!a.snapshot_due(0));
    a.apply_entries(vec![(entry(2, b'b'), none)], |_, _, _, _| {})
        .unwrap();
    assert!(a.snapshot_due(0));
    let (index, view) = a.take_snapshot();
    let mut bytes = Vec::new();
    view.write_to(&mut bytes).unwrap();
    assert_eq!((index, &bytes[..]), (2, &b"ab"[..]));
    assert!(!a.snapshot_due(0));
}

type Item = ApplyItem<u8, u8, u8>;

fn kinds(q: &mut ApplyQueue<u8, u8, u8>) -> String {
    let mut out = String::new();
    while let Some(item) = q.pop() {
        out.push(match item {
            Item::Entries(_) => 'E',
            Item::Restore { .. } => 'R',
            Item::Read(_) => 'r',
            Item::Snapshot => 'S',
        });
    }
    out
}

#[test]
fn the_queue_keeps_log_order() {
    let mut q = ApplyQueue::default();
    q.push(Item::Entries(vec![(entry(1, b'a'), None)]));
    q.push(Item::Read(1));
    q.push(Item::Restore {
        meta: meta(9),
        snapshot: 0,
    });
    q.push(Item::Snapshot);
    assert_eq!(q.len(), 4);
    assert_eq!(kinds(&mut q), "ErRS");
    assert!(q.is_empty());
}

/// The mutation the simulator must catch: a restore overtakes the entries queued before it, and
/// the applier then refuses them.
#[cfg(feature = "mutations")]
#[test]
fn the_mutated_queue_lets_a_restore_overtake_and_the_applier_refuses_what_follows() {
    let mut q = ApplyQueue::with_mutation(Some(keel_core::Mutation::ApplySnapshotOverPending));
    q.push(Item::Entries(vec![(entry(1, b'a'), None)]));
    q.push(Item::Restore {
        meta: meta(9),
        snapshot: 0,
    });
    let mut a = Applier::new(Log::default(), 0, policy());
    let Some(Item::Restore { meta, .. }) = q.pop() else {
        panic!("the restore comes first")
    };
    a.restore(&meta, &mut &b"snapshot"[..]).unwrap();
    let Some(Item::Entries(batch)) = q.pop() else {
        panic!("then the entries")
    };
    assert!(a.apply_entries(batch, |_, _, _, _| {}).is_err());
}
