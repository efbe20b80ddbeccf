//! [`KvAdapter`]: the key-value state machine as `keel_engine::StateMachine`, the one the runtime
//! runs and the simulator drives.
//!
//! An entry that does not decode is applied as the same no-op on every replica, logged, and
//! answers its proposer an error (a forged entry must not crash-loop the cluster). [`SmStats`]
//! is what INFO reads. With the `mutations` feature, `KvStateMachine::set_mutation(DedupOff)`
//! makes the state machine ignore request ids.

use std::collections::BTreeMap;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::state_machine::{ApplyReply, KvStateMachine, MemberAddrs, WriteError};
use crate::LogCommand;
use crate::WriteReply;

/// What INFO needs from the state machine without a quorum round or a trip through the apply
/// thread: updated after every apply and restore, read by any connection.
///
/// Published after every entry, so the figures are a sequence lock over atomics, not a mutex:
/// the applying thread (one at a time) writes without a read-modify-write, readers (INFO) retry
/// the rare read that overlapped a write.
#[derive(Debug, Default)]
pub struct SmStats {
    /// Odd while a write is under way; bumped twice per write.
    sequence: AtomicU64,
    fields: [AtomicU64; SM_STATS_FIELDS],
    /// The version of `members` (compared without the lock: only the writer changes it).
    members_version: AtomicU64,
    /// The members' recorded addresses, republished only when they changed.
    members: Mutex<Arc<BTreeMap<u64, MemberAddrs>>>,
    /// Each database that holds keys, once a database other than 0 was written to:
    /// `(index, keys, keys with a deadline)` ([`KvStateMachine::keyspace`]), republished only
    /// when it changed. Empty while database 0 is the only one (`keys` and `expires` say it).
    keyspace: Mutex<Arc<Vec<(u32, usize, usize)>>>,
}

const SM_STATS_FIELDS: usize = 6;

/// One consistent reading of [`SmStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmStatsValue {
    /// The last log index that carried a key-value command (no-ops and configuration entries do
    /// not reach the state machine, so the node's applied index may be higher).
    pub applied_index: u64,
    pub state_digest: u64,
    /// [`KvStateMachine::log_time_ms`]: the state machine's time at `applied_index`.
    pub log_time_ms: u64,
    pub keys: u64,
    /// Keys with a deadline (`KvStateMachine::keys_with_deadline`).
    pub expires: u64,
    /// [`KvStateMachine::used_bytes`]: what `maxmemory` bounds.
    pub used_bytes: u64,
}

impl SmStatsValue {
    fn to_fields(self) -> [u64; SM_STATS_FIELDS] {
        [
            self.applied_index,
            self.state_digest,
            self.log_time_ms,
            self.keys,
            self.expires,
            self.used_bytes,
        ]
    }

    fn from_fields(f: [u64; SM_STATS_FIELDS]) -> Self {
        SmStatsValue {
            applied_index: f[0],
            state_digest: f[1],
            log_time_ms: f[2],
            keys: f[3],
            expires: f[4],
            used_bytes: f[5],
        }
    }
}

impl SmStats {
    pub fn get(&self) -> SmStatsValue {
        loop {
            let before = self.sequence.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let fields = std::array::from_fn(|i| self.fields[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if self.sequence.load(Ordering::Relaxed) == before {
                return SmStatsValue::from_fields(fields);
            }
        }
    }

    /// Each database holding keys, by index, with its keys and keys with a deadline; empty
    /// while only database 0 was ever written to (see `keys` and `expires` then).
    pub fn keyspace(&self) -> Arc<Vec<(u32, usize, usize)>> {
        Arc::clone(&self.keyspace.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The members' addresses as last applied (`RAFT.MEMBER ADD`), by node id.
    pub fn member_addrs(&self) -> Arc<BTreeMap<u64, MemberAddrs>> {
        Arc::clone(&self.members.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Called by one thread at a time (the state machine's caller).
    fn publish(&self, sm: &KvStateMachine) {
        let value = SmStatsValue {
            applied_index: sm.applied_index(),
            state_digest: sm.state_digest(),
            log_time_ms: sm.log_time_ms(),
            keys: sm.len() as u64,
            expires: sm.keys_with_deadline() as u64,
            used_bytes: sm.used_bytes(),
        };
        self.store(value);
        if sm.databases_reached() > 1 {
            let keyspace = sm.keyspace();
            let mut published = self.keyspace.lock().unwrap_or_else(|e| e.into_inner());
            if **published != keyspace {
                *published = Arc::new(keyspace);
            }
        }
        if self.members_version.load(Ordering::Relaxed) != sm.member_addrs_version() {
            *self.members.lock().unwrap_or_else(|e| e.into_inner()) =
                Arc::new(sm.member_addrs().clone());
            self.members_version
                .store(sm.member_addrs_version(), Ordering::Relaxed);
        }
    }

    /// Writes `value` (one writer at a time).
    fn store(&self, value: SmStatsValue) {
        let sequence = self.sequence.load(Ordering::Relaxed);
        self.sequence.store(sequence + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        for (field, v) in self.fields.iter().zip(value.to_fields()) {
            field.store(v, Ordering::Relaxed);
        }
        self.sequence.store(sequence + 2, Ordering::Release);
    }
}

/// [`KvStateMachine`] behind `keel_engine::StateMachine`: entries are encoded
/// [`crate::LogCommand`]s, results encoded [`crate::WriteReply`]s.
#[derive(Debug)]
pub struct KvAdapter {
    sm: KvStateMachine,
    stats: Arc<SmStats>,
    filled: Option<Arc<dyn FilledKeysListener>>,
    key_events: Option<Arc<dyn KeyEventsListener>>,
}

/// Who hears that an applied entry filled a list or sorted set a client may wait on (the server's
/// blocked clients, `command/blocking.rs`). Called on the apply thread: it must not block.
///
/// A client that starts waiting while an entry is being applied may miss that entry's keys;
/// that is harmless as long as it registers before it proposes its first attempt, which comes
/// after that entry in the log and so sees what it filled.
pub trait FilledKeysListener: Send + Sync + std::fmt::Debug {
    /// Whether some client waits now; while none does, the state machine notes nothing.
    fn waiting(&self) -> bool;
    /// The keys the entry just applied filled (with repeats).
    fn filled(&self, keys: Vec<Bytes>);
    /// A snapshot replaced the whole state, or an entry changed whole databases (FLUSHDB,
    /// FLUSHALL, SWAPDB): any key may serve a blocked client now.
    fn restored(&self);
}

/// Who hears the keyspace events of each applied entry (`crate::notify`: the node's
/// `notify-keyspace-events` subscribers). Called on the apply thread: it must not block.
///
/// The listener decides when events are noted at all: only while it is [`Self::listening`],
/// which it must not be while the node replays at start what it applied before (an entry's
/// events are fired at most once per node: a replay would fire them again). A snapshot restore
/// fires nothing.
pub trait KeyEventsListener: Send + Sync + std::fmt::Debug {
    /// Whether the entry at `index` is to be noted: some event class is selected and the entry
    /// is live (not one the node applied before a restart).
    fn listening(&self, index: u64) -> bool;
    /// The events of the entry just applied, in order.
    fn events(&self, events: Vec<crate::notify::KeyEvent>);
}

impl KvAdapter {
    pub fn new(sm: KvStateMachine) -> Self {
        let stats = Arc::new(SmStats::default());
        stats.publish(&sm);
        KvAdapter {
            sm,
            stats,
            filled: None,
            key_events: None,
        }
    }

    /// Tells `listener` which keys each applied entry filled, while it has waiting clients.
    pub fn with_filled_keys_listener(mut self, listener: Arc<dyn FilledKeysListener>) -> Self {
        self.filled = Some(listener);
        self
    }

    /// Hands `listener` the keyspace events of each applied entry, while it listens.
    pub fn with_key_events_listener(mut self, listener: Arc<dyn KeyEventsListener>) -> Self {
        self.key_events = Some(listener);
        self
    }

    pub fn stats(&self) -> Arc<SmStats> {
        Arc::clone(&self.stats)
    }

    pub fn state(&self) -> &KvStateMachine {
        &self.sm
    }

    /// The state machine's time: the highest entry stamp applied so far, in ms since the Unix
    /// epoch (0: none), [`KvStateMachine::log_time_ms`]. Read-only: only applying entries moves
    /// it.
    pub fn log_time_ms(&self) -> u64 {
        self.sm.log_time_ms()
    }
}

/// A replica that cannot apply a committed entry or restore a snapshot must not go on: skipping
/// would diverge silently from the others. Stop the process (the WAL still holds everything).
/// Logged as a panic is (`fail_stop.rs`): to stderr first, then through `tracing`.
fn fatal(what: std::fmt::Arguments<'_>) -> ! {
    eprintln!("keel: fatal: {what}; stopping the process");
    tracing::error!("fatal: {what}; stopping the process");
    std::process::abort();
}

/// A [`crate::state_machine::SnapshotView`] as the runtime's snapshot writer.
struct KvSnapshotWriter(crate::state_machine::SnapshotView);

impl keel_engine::SnapshotWriter for KvSnapshotWriter {
    fn write_to(self: Box<Self>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.0.write_to(out)
    }
}

impl keel_engine::StateMachine for KvAdapter {
    fn apply(
        &mut self,
        at: keel_core::LogId,
        data: &Bytes,
    ) -> Result<Bytes, keel_engine::ApplyError> {
        let index = at.index;
        let waiting = self.filled.as_ref().is_some_and(|l| l.waiting());
        self.sm.collect_filled_keys(waiting);
        let listening = self.key_events.as_ref().is_some_and(|l| l.listening(index));
        self.sm.collect_key_events(listening);
        match self.sm.apply(index, data) {
            Ok(reply) => {
                if let (true, Some(listener)) = (waiting, &self.filled) {
                    let keys = self.sm.take_filled_keys();
                    if self.sm.take_every_key_filled() {
                        listener.restored();
                    } else if !keys.is_empty() {
                        listener.filled(keys);
                    }
                }
                if let (true, Some(listener)) = (listening, &self.key_events) {
                    let events = self.sm.take_key_events();
                    if !events.is_empty() {
                        listener.events(events);
                    }
                }
                if reply == ApplyReply::Write(WriteReply::Error(WriteError::UndecodableEntry)) {
                    // Every replica skips it alike; its proposer (if any) gets the error.
                    let reason = LogCommand::decode(data).err();
                    tracing::warn!(
                        index,
                        size_bytes = data.len(),
                        "committed entry {index} is not a key-value command this build can \
                         decode ({reason:?}); applied as a no-op"
                    );
                }
                self.stats.publish(&self.sm);
                Ok(reply.to_bytes())
            }
            Err(e) => fatal(format_args!("{e}")),
        }
    }

    /// A copy of the map (reference-counted values: pointers are copied, not bytes),
    /// serialized by the runtime on a snapshot thread while this one keeps applying.
    fn snapshot_view(&self) -> Box<dyn keel_engine::SnapshotWriter> {
        Box::new(KvSnapshotWriter(self.sm.snapshot_view()))
    }

    fn restore(
        &mut self,
        _last: keel_core::LogId,
        reader: &mut dyn std::io::Read,
    ) -> Result<(), keel_engine::RestoreError> {
        // The snapshot decoder works on one buffer: this state machine reads its snapshot whole.
        let mut data = Vec::new();
        reader.read_to_end(&mut data)?;
        match self.sm.restore(&data) {
            Ok(()) => {
                self.stats.publish(&self.sm);
                if let Some(listener) = &self.filled {
                    listener.restored();
                }
                Ok(())
            }
            Err(e) => fatal(format_args!("cannot restore the snapshot: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::command::{SetCondition, WriteCommand};
    use keel_engine::StateMachine;

    #[test]
    fn a_reading_of_the_stats_never_mixes_two_writes() {
        let stats = Arc::new(SmStats::default());
        let writer = {
            let stats = Arc::clone(&stats);
            std::thread::spawn(move || {
                for i in 1..=200_000u64 {
                    stats.store(SmStatsValue::from_fields([i; SM_STATS_FIELDS]));
                }
            })
        };
        let mut last = 0;
        while last < 200_000 {
            let fields = stats.get().to_fields();
            assert!(fields.iter().all(|&f| f == fields[0]), "torn: {fields:?}");
            assert!(fields[0] >= last, "went back from {last} to {}", fields[0]);
            last = fields[0];
        }
        writer.join().unwrap();
    }

    #[test]
    fn apply_returns_the_encoded_reply_and_snapshots_round_trip() {
        let mut a = KvAdapter::new(KvStateMachine::new());
        let set = WriteCommand::Set {
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"v"),
            condition: SetCondition::Always,
        };
        let entry = LogCommand::new(7, 1, 1_700_000_000_000, set).encode();
        let result = a
            .apply(keel_core::LogId::new(1, 3), &entry)
            .expect("applies");
        assert_eq!(WriteReply::decode(&result), Some(WriteReply::Ok));
        let stats = a.stats().get();
        assert_eq!(stats.applied_index, 3);
        assert_eq!(stats.log_time_ms, 1_700_000_000_000);
        assert_eq!(a.log_time_ms(), 1_700_000_000_000);
        assert_eq!(stats.keys, 1);
        assert_ne!(stats.state_digest, 0);
        // The same request id again is deduplicated: same reply, nothing changes.
        assert_eq!(
            WriteReply::decode(
                &a.apply(keel_core::LogId::new(1, 4), &entry)
                    .expect("applies")
            ),
            Some(WriteReply::Ok)
        );
        assert_eq!(a.stats().get().state_digest, stats.state_digest);

        let mut bytes = Vec::new();
        a.snapshot_view().write_to(&mut bytes).unwrap();
        assert_eq!(bytes, a.state().snapshot());
        let mut b = KvAdapter::new(KvStateMachine::new());
        b.restore(keel_core::LogId::new(1, 4), &mut &bytes[..])
            .expect("restores");
        assert_eq!(b.state(), a.state());
        assert_eq!(b.stats().get().state_digest, stats.state_digest);
        assert_eq!(b.stats().get().log_time_ms, stats.log_time_ms);
    }

    #[test]
    fn an_undecodable_entry_applies_as_a_no_op_and_answers_an_error() {
        let mut a = KvAdapter::new(KvStateMachine::new());
        let set = WriteCommand::Set {
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"v"),
            condition: SetCondition::Always,
        };
        a.apply(
            keel_core::LogId::new(1, 3),
            &LogCommand::new(7, 1, 0, set).encode(),
        )
        .expect("applies");
        let before = a.stats().get();
        let result = a
            .apply(
                keel_core::LogId::new(1, 4),
                &Bytes::from_static(b"not a command"),
            )
            .expect("applied as a no-op");
        let reply = ApplyReply::decode(&result).expect("a reply for the proposer");
        assert_eq!(
            reply,
            ApplyReply::Write(WriteReply::Error(WriteError::UndecodableEntry))
        );
        assert!(matches!(reply.into_reply(), keel_resp::Reply::Error(_)));
        let after = a.stats().get();
        assert_eq!(after.applied_index, 4);
        assert_eq!(
            (after.state_digest, after.keys),
            (before.state_digest, before.keys)
        );
    }

    /// A listener that hears entries past `live_after`.
    #[derive(Debug, Default)]
    struct Recorder {
        live_after: std::sync::atomic::AtomicU64,
        heard: Mutex<Vec<(u64, String)>>,
        applying: std::sync::atomic::AtomicU64,
    }

    impl KeyEventsListener for Recorder {
        fn listening(&self, index: u64) -> bool {
            self.applying.store(index, Ordering::Relaxed);
            index > self.live_after.load(Ordering::Relaxed)
        }

        fn events(&self, events: Vec<crate::notify::KeyEvent>) {
            let index = self.applying.load(Ordering::Relaxed);
            let mut heard = self.heard.lock().unwrap();
            heard.extend(events.into_iter().map(|e| (index, e.event.to_string())));
        }
    }

    #[test]
    fn key_events_reach_the_listener_only_for_the_entries_it_listens_to() {
        let recorder = Arc::new(Recorder::default());
        recorder.live_after.store(1, Ordering::Relaxed);
        let mut a = KvAdapter::new(KvStateMachine::new())
            .with_key_events_listener(Arc::clone(&recorder) as Arc<dyn KeyEventsListener>);
        for (index, key) in [(1, "replayed"), (2, "live")] {
            let set = WriteCommand::Set {
                key: Bytes::copy_from_slice(key.as_bytes()),
                value: Bytes::from_static(b"v"),
                condition: SetCondition::Always,
            };
            let entry = LogCommand::new(7, index, 0, set).encode();
            a.apply(keel_core::LogId::new(1, index), &entry)
                .expect("applies");
        }
        let heard = recorder.heard.lock().unwrap().clone();
        assert_eq!(heard, [(2, "new".to_string()), (2, "set".to_string())]);
        // A restore fires nothing, whatever it brings.
        let mut bytes = Vec::new();
        a.snapshot_view().write_to(&mut bytes).unwrap();
        a.restore(keel_core::LogId::new(1, 2), &mut &bytes[..])
            .expect("restores");
        assert_eq!(recorder.heard.lock().unwrap().len(), 2);
    }

    /// The simulator's `dedup-off` mutation: the same request id applies twice.
    #[cfg(feature = "mutations")]
    #[test]
    fn the_dedup_off_mutation_applies_a_retry_again() {
        let incr = |sm: KvStateMachine| {
            let mut a = KvAdapter::new(sm);
            let entry = LogCommand::new(
                7,
                1,
                0,
                WriteCommand::IncrBy {
                    key: Bytes::from_static(b"n"),
                    delta: 1,
                },
            )
            .encode();
            a.apply(keel_core::LogId::new(1, 1), &entry)
                .expect("applies");
            a.apply(keel_core::LogId::new(1, 2), &entry)
                .expect("applies");
            a.state().get(b"n").map(<[u8]>::to_vec)
        };
        assert_eq!(incr(KvStateMachine::new()), Some(b"1".to_vec()));
        let mut broken = KvStateMachine::new();
        broken.set_mutation(Some(crate::Mutation::DedupOff));
        assert_eq!(incr(broken), Some(b"2".to_vec()));
    }
}
