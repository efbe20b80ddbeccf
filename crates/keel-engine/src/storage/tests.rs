use keel_core::{HardState, Write};

use super::{Completion, LogStore, StorageCommand, StorageWorker, GROUP_COMMIT_WRITES_MAX};

/// Records every batch and adoption, in order.
#[derive(Default)]
struct Recorder {
    log: Vec<String>,
    fail_next: bool,
}

impl LogStore for Recorder {
    type Error = String;
    type Adoption = u64;
    type Adopted = u64;

    fn write_batch(&mut self, writes: &[Write]) -> Result<(), String> {
        if std::mem::take(&mut self.fail_next) {
            return Err("sync failed".into());
        }
        let ids: Vec<String> = writes.iter().map(|w| w.id.to_string()).collect();
        self.log.push(format!("batch {}", ids.join(",")));
        Ok(())
    }

    fn adopt(&mut self, snapshot: u64) -> Result<Option<u64>, String> {
        self.log.push(format!("adopt {snapshot}"));
        Ok((snapshot % 2 == 0).then_some(snapshot))
    }
}

fn write(id: u64) -> StorageCommand<u64> {
    StorageCommand::Write(Write {
        id,
        install: None,
        entries: Vec::new(),
        hard_state: Some(HardState::default()),
        purge_to: None,
        sync: true,
        release_promise: false,
        lower_promise_to: None,
    })
}

#[test]
fn writes_queued_meanwhile_share_one_batch_up_to_an_adoption() {
    let mut w = StorageWorker::new(Recorder::default());
    for cmd in [
        write(1),
        write(2),
        write(3),
        StorageCommand::Adopt(4),
        write(5),
    ] {
        w.submit(cmd);
    }
    assert_eq!(
        w.in_flight().map(|w| w.id).collect::<Vec<_>>(),
        [1, 2, 3, 5]
    );
    assert_eq!(w.run_next(), Some(Ok(Completion::Persisted(3))));
    assert_eq!(w.run_next(), Some(Ok(Completion::Adopted(4))));
    assert_eq!(w.run_next(), Some(Ok(Completion::Persisted(5))));
    assert_eq!(w.run_next(), None);
    assert_eq!(w.store().log, ["batch 1,2,3", "adopt 4", "batch 5"]);
    w.submit(StorageCommand::Adopt(7));
    assert_eq!(w.run_next(), Some(Ok(Completion::NotAdopted)));
}

#[test]
fn a_batch_is_bounded() {
    let mut w = StorageWorker::new(Recorder::default());
    for id in 1..=GROUP_COMMIT_WRITES_MAX as u64 + 1 {
        w.submit(write(id));
    }
    let max = GROUP_COMMIT_WRITES_MAX as u64;
    assert_eq!(w.run_next(), Some(Ok(Completion::Persisted(max))));
    assert_eq!(w.run_next(), Some(Ok(Completion::Persisted(max + 1))));
}

#[test]
fn a_failed_sync_reports_no_completion() {
    let mut w = StorageWorker::new(Recorder {
        fail_next: true,
        ..Recorder::default()
    });
    w.submit(write(1));
    assert_eq!(w.run_next(), Some(Err("sync failed".to_string())));
    assert!(w.store().log.is_empty());
}

/// The simulator's `storage-complete-before-sync`: a batch is reported durable while it is still
/// only in the worker, written with the next unit of work.
#[cfg(feature = "mutations")]
#[test]
fn the_mutated_worker_reports_before_it_writes() {
    let mut w = StorageWorker::with_mutation(
        Recorder::default(),
        Some(keel_core::Mutation::StorageCompleteBeforeSync),
    );
    w.submit(write(1));
    assert_eq!(w.run_next(), Some(Ok(Completion::Persisted(1))));
    assert!(w.store().log.is_empty(), "reported, not written");
    assert_eq!(w.in_flight().map(|w| w.id).collect::<Vec<_>>(), [1]);
    w.submit(StorageCommand::Adopt(2));
    assert_eq!(w.run_next(), Some(Ok(Completion::Adopted(2))));
    assert_eq!(w.store().log, ["batch 1", "adopt 2"]);
}
