//! Expiry: deadlines computed in apply from the log's time, commands judged at T(i), tick
//! entries, WATCH tokens, and deadlines in the digest and in snapshots.

use super::*;
use crate::command::{ExpireCondition, Expiry, TtlCommand, TtlForm, WatchedKey};

pub(super) const T0: u64 = 1_700_000_000_000;

pub(super) fn set_px(key: &str, value: &str, ms: i64) -> WriteCommand {
    WriteCommand::SetWith {
        key: b(key),
        value: b(value),
        condition: SetCondition::Always,
        expiry: Expiry::AfterMs(ms),
        get: false,
        command: TtlCommand::Set,
    }
}

fn expire(key: &str, deadline: Expiry, condition: ExpireCondition) -> WriteCommand {
    WriteCommand::Expire {
        key: b(key),
        deadline,
        condition,
        command: TtlCommand::PExpire,
    }
}

fn incr(key: &str) -> WriteCommand {
    WriteCommand::IncrBy {
        key: b(key),
        delta: 1,
    }
}

pub(super) fn pttl(sm: &KvStateMachine, key: &str) -> Reply {
    sm.read(&ReadCommand::Ttl {
        key: b(key),
        form: TtlForm::RemainingMs,
    })
}

impl Log {
    pub(super) fn tick(&mut self, keys: &[&str]) -> WriteReply {
        let keys = keys.iter().map(|k| b(k)).collect();
        match self.apply_logged(0, 0, LoggedCommand::Tick(keys)) {
            ApplyReply::Write(reply) => reply,
            other => panic!("a tick answered {other:?}"),
        }
    }

    pub(super) fn value(&mut self, command: WriteCommand) -> Reply {
        self.seq += 1;
        match self.apply_logged(1, self.seq, command.into()) {
            ApplyReply::Value(reply) => reply,
            other => panic!("expected a value, got {other:?}"),
        }
    }
}

#[test]
fn a_key_exists_until_the_log_time_reaches_its_deadline() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    assert_eq!(log.apply(set_px("k", "v", 100)), WriteReply::Ok);
    assert_eq!(pttl(&log.sm, "k"), Reply::Integer(100));
    // An entry stamped 99 ms later: still there, 1 ms left.
    log.stamp_ms = T0 + 99;
    log.tick(&[]);
    assert_eq!(log.get("k"), Some(&b"v"[..]));
    assert_eq!(pttl(&log.sm, "k"), Reply::Integer(1));
    let ttl = log.sm.read(&ReadCommand::Ttl {
        key: b("k"),
        form: TtlForm::RemainingSeconds,
    });
    assert_eq!(ttl, Reply::Integer(0), "TTL rounds to the nearest second");
    // At the deadline it is gone for every command, though not yet removed.
    log.stamp_ms = T0 + 100;
    log.tick(&[]);
    assert_eq!(log.get("k"), None);
    assert_eq!(pttl(&log.sm, "k"), Reply::Integer(-2));
    let exists = log.sm.read(&ReadCommand::Exists { keys: vec![b("k")] });
    assert_eq!(exists, Reply::Integer(0));
    assert_eq!(
        log.sm.len(),
        1,
        "still held until a write or a tick removes it"
    );
    assert_eq!(log.sm.keys_due(T0 + 100, 10), vec![b("k")]);
    // The leader's tick names it: removed.
    assert_eq!(log.tick(&["k"]), WriteReply::Integer(1));
    assert_eq!(log.sm.len(), 0);
    assert_eq!(log.sm.keys_with_deadline(), 0);
    assert_eq!(log.sm.state_digest(), log_time_hash(T0 + 100));
}

#[test]
fn a_stamp_behind_the_log_time_never_shortens_or_stretches_a_ttl() {
    let mut log = Log::new();
    log.stamp_ms = T0 + 1_000;
    log.tick(&[]);
    // A new leader whose clock is 1 s behind: the TTL counts from the log's time, T0 + 1000.
    log.stamp_ms = T0;
    log.apply(set_px("k", "v", 500));
    let stamped = log.sm.read(&ReadCommand::Ttl {
        key: b("k"),
        form: TtlForm::AtMs,
    });
    assert_eq!(stamped, Reply::Integer((T0 + 1_500) as i64));
}

#[test]
fn a_tick_removes_only_what_has_expired_at_its_own_time() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    log.apply(set_px("a", "1", 10));
    log.apply(set_px("b", "2", 10));
    log.stamp_ms = T0 + 10;
    // "b" written again since the leader chose it: not expired, not removed.
    log.apply(set("b", "3"));
    assert_eq!(log.tick(&["a", "b", "missing"]), WriteReply::Integer(1));
    assert_eq!(log.get("a"), None);
    assert_eq!(log.get("b"), Some(&b"3"[..]));
    assert_eq!(pttl(&log.sm, "b"), Reply::Integer(-1));
    // A tick stamped before a deadline removes nothing.
    log.apply(set_px("c", "4", 50));
    log.stamp_ms = T0 + 20;
    assert_eq!(log.tick(&["c"]), WriteReply::Integer(0));
    assert_eq!(log.get("c"), Some(&b"4"[..]));
}

#[test]
fn writes_see_an_expired_key_as_absent_and_remove_it_first() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    log.apply(set_px("n", "41", 10));
    log.apply(set_px("s", "ab", 10));
    log.stamp_ms = T0 + 10;
    assert_eq!(log.apply(incr("n")), WriteReply::Integer(1));
    let append = WriteCommand::Append {
        key: b("s"),
        value: b("c"),
    };
    assert_eq!(log.apply(append), WriteReply::Integer(1));
    // Neither keeps the old deadline.
    assert_eq!(pttl(&log.sm, "n"), Reply::Integer(-1));
    assert_eq!(pttl(&log.sm, "s"), Reply::Integer(-1));
    log.apply(set_px("x", "1", 10));
    log.stamp_ms = T0 + 20;
    let nx = WriteCommand::Set {
        key: b("x"),
        value: b("2"),
        condition: SetCondition::IfAbsent,
    };
    assert_eq!(log.apply(nx), WriteReply::Ok);
    let del = WriteCommand::Del {
        keys: vec![b("gone")],
    };
    log.apply(set_px("gone", "1", 5));
    log.stamp_ms = T0 + 30;
    assert_eq!(
        log.apply(del),
        WriteReply::Integer(0),
        "DEL does not count it"
    );
    assert_eq!(log.sm.len(), 3);
}

#[test]
fn incr_and_append_keep_a_live_deadline_set_clears_it_and_keepttl_keeps_it() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    log.apply(set_px("n", "1", 1_000));
    log.apply(incr("n"));
    assert_eq!(pttl(&log.sm, "n"), Reply::Integer(1_000));
    let keep = WriteCommand::SetWith {
        key: b("n"),
        value: b("7"),
        condition: SetCondition::Always,
        expiry: Expiry::Keep,
        get: false,
        command: TtlCommand::Set,
    };
    log.apply(keep);
    assert_eq!(pttl(&log.sm, "n"), Reply::Integer(1_000));
    log.apply(set("n", "8"));
    assert_eq!(pttl(&log.sm, "n"), Reply::Integer(-1));
}

#[test]
fn expire_conditions_past_deadlines_and_persist() {
    use ExpireCondition::*;
    let mut log = Log::new();
    log.stamp_ms = T0;
    assert_eq!(
        log.apply(expire("k", Expiry::AfterMs(100), Always)),
        WriteReply::Integer(0),
        "no such key"
    );
    log.apply(set("k", "v"));
    let cases = [
        (Expiry::AfterMs(100), IfSome, 0, -1),
        (Expiry::AfterMs(100), IfLater, 0, -1),
        (Expiry::AfterMs(100), IfEarlierWithDeadline, 0, -1),
        (Expiry::AfterMs(100), IfNone, 1, 100),
        (Expiry::AfterMs(200), IfNone, 0, 100),
        (Expiry::AfterMs(200), IfEarlier, 0, 100),
        (Expiry::AfterMs(200), IfLater, 1, 200),
        (Expiry::AfterMs(50), IfEarlierWithDeadline, 1, 50),
        (Expiry::AtMs((T0 + 70) as i64), IfSome, 1, 70),
    ];
    for (deadline, condition, answer, ttl) in cases {
        assert_eq!(
            log.apply(expire("k", deadline, condition)),
            WriteReply::Integer(answer),
            "{deadline:?} {condition:?}"
        );
        assert_eq!(pttl(&log.sm, "k"), Reply::Integer(ttl));
    }
    assert_eq!(
        log.apply(WriteCommand::Persist { key: b("k") }),
        WriteReply::Integer(1)
    );
    assert_eq!(
        log.apply(WriteCommand::Persist { key: b("k") }),
        WriteReply::Integer(0)
    );
    // LT on a key without a deadline holds; a negative TTL deletes the key.
    assert_eq!(
        log.apply(expire("k", Expiry::AfterMs(-10), IfEarlier)),
        WriteReply::Integer(1)
    );
    assert_eq!(log.get("k"), None);
    assert_eq!(log.sm.len(), 0);
}

#[test]
fn a_deadline_that_overflows_at_apply_is_redis_s_error_and_changes_nothing() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    log.apply(set("k", "v"));
    let digest = log.sm.state_digest();
    let too_far = WriteCommand::Expire {
        key: b("k"),
        deadline: Expiry::AfterMs(i64::MAX - 1_000),
        condition: ExpireCondition::Always,
        command: TtlCommand::PExpire,
    };
    let reply = log.apply(too_far);
    assert_eq!(
        reply,
        WriteReply::Error(WriteError::InvalidExpireTime(TtlCommand::PExpire))
    );
    assert_eq!(
        reply.to_reply(),
        Reply::error("ERR invalid expire time in 'pexpire' command")
    );
    assert_eq!(log.sm.state_digest(), digest);
    // The error is remembered for a retry like any compact reply, and relays intact.
    let mut relayed = Vec::new();
    reply.encode(&mut relayed);
    assert_eq!(WriteReply::decode(&relayed), Some(reply));
}

#[test]
fn value_writes_answer_the_old_value_and_a_retry_says_it_applied() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    log.apply(set_px("k", "old", 1_000));
    let getset = WriteCommand::SetWith {
        key: b("k"),
        value: b("new"),
        condition: SetCondition::Always,
        expiry: Expiry::Clear,
        get: true,
        command: TtlCommand::GetSet,
    };
    assert_eq!(log.value(getset.clone()), Reply::Bulk(b("old")));
    assert_eq!(pttl(&log.sm, "k"), Reply::Integer(-1));
    // The same request id again: not run again, and the reply was not kept.
    let again = log.apply_logged(1, log.seq, getset.into());
    assert_eq!(again, ApplyReply::AppliedBefore);
    assert_eq!(log.get("k"), Some(&b"new"[..]));
    let getex = WriteCommand::GetEx {
        key: b("k"),
        expiry: Expiry::AfterMs(300),
    };
    assert_eq!(log.value(getex), Reply::Bulk(b("new")));
    assert_eq!(pttl(&log.sm, "k"), Reply::Integer(300));
    assert_eq!(
        log.value(WriteCommand::GetDel { key: b("k") }),
        Reply::Bulk(b("new"))
    );
    assert_eq!(log.value(WriteCommand::GetDel { key: b("k") }), Reply::Null);
    let nx_get = WriteCommand::SetWith {
        key: b("k"),
        value: b("v"),
        condition: SetCondition::IfPresent,
        expiry: Expiry::Clear,
        get: true,
        command: TtlCommand::Set,
    };
    assert_eq!(log.value(nx_get), Reply::Null);
    assert_eq!(log.get("k"), None, "XX did not hold: nothing set");
}

#[test]
fn msetnx_sets_all_or_nothing_and_flushall_empties_everything() {
    let mut log = Log::new();
    let pairs = |list: &[(&str, &str)]| WriteCommand::MSetNx {
        pairs: list.iter().map(|(k, v)| (b(k), b(v))).collect(),
    };
    assert_eq!(
        log.apply(pairs(&[("a", "1"), ("b", "2")])),
        WriteReply::Integer(1)
    );
    assert_eq!(
        log.apply(pairs(&[("b", "9"), ("c", "3")])),
        WriteReply::Integer(0)
    );
    assert_eq!(log.get("c"), None);
    log.stamp_ms = T0;
    log.apply(set_px("t", "1", 10));
    assert_eq!(log.apply(WriteCommand::FlushAll), WriteReply::Ok);
    assert!(log.sm.is_empty());
    assert_eq!(log.sm.keys_with_deadline(), 0);
    assert_eq!(log.sm.used_bytes(), 0);
    assert_eq!(log.sm.state_digest(), log_time_hash(T0));
}

/// A watch point as WATCH reads it: the applied index and log time now.
pub(super) fn watched_now(log: &Log, key: &str) -> WatchedKey {
    WatchedKey {
        db: 0,
        key: b(key),
        index: log.sm.applied_index(),
        time_ms: log.sm.log_time_ms(),
    }
}

#[test]
fn a_watched_key_changed_by_any_write_removal_or_expiry_but_not_by_others() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    let absent = watched_now(&log, "k");
    log.apply(set("other", "1"));
    assert!(!log.sm.watched_changed(&absent), "another key's change");
    log.apply(set_px("k", "v", 10));
    assert!(log.sm.watched_changed(&absent), "created since");
    let alive = watched_now(&log, "k");
    assert!(!log.sm.watched_changed(&alive));
    log.apply(set_px("k", "v", 10));
    assert!(
        log.sm.watched_changed(&alive),
        "the same value written again"
    );
    let alive = watched_now(&log, "k");
    log.stamp_ms = T0 + 10;
    log.tick(&[]);
    assert!(log.sm.watched_changed(&alive), "expired since");
    let expired = watched_now(&log, "k");
    assert!(
        !log.sm.watched_changed(&expired),
        "already expired when watched"
    );
    log.tick(&["k"]);
    // Removing a key that had expired before the watch counts too: a spurious abort only.
    assert!(log.sm.watched_changed(&expired));
    log.apply(set("k", "v"));
    let alive = watched_now(&log, "k");
    log.apply(WriteCommand::Del { keys: vec![b("k")] });
    assert!(log.sm.watched_changed(&alive), "deleted since");
    let gone = watched_now(&log, "k");
    assert!(!log.sm.watched_changed(&gone));
    log.apply(set("present", "1"));
    let present = watched_now(&log, "present");
    log.apply(WriteCommand::FlushAll);
    assert!(log.sm.watched_changed(&present), "FLUSHALL removed it");
    assert!(
        !log.sm.watched_changed(&gone),
        "FLUSHALL leaves a key that did not exist"
    );
}

#[test]
fn exec_with_watches_aborts_on_every_replica_alike_and_runs_nothing() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    log.apply(set("k", "1"));
    let watched = vec![watched_now(&log, "k")];
    let transaction = |watched: &Vec<WatchedKey>| LoggedCommand::WatchedExec {
        watched: watched.clone(),
        commands: vec![QueuedCommand::Write(set("k", "from-tx"))],
    };
    // Unchanged: it runs.
    log.seq += 1;
    let ran = log.apply_logged(1, log.seq, transaction(&watched));
    assert_eq!(ran, ApplyReply::Exec(vec![Reply::OK]));
    assert_eq!(log.get("k"), Some(&b"from-tx"[..]));
    // Changed since (by the transaction itself, here): aborted, nothing ran, null reply.
    log.seq += 1;
    let entry = LogCommand::new(1, log.seq, T0, transaction(&watched));
    let mut replica = log.sm.clone();
    let aborted = log.apply_logged(1, log.seq, transaction(&watched));
    assert_eq!(aborted, ApplyReply::ExecAborted);
    assert_eq!(aborted.into_reply(), Reply::NullArray);
    assert_eq!(log.get("k"), Some(&b"from-tx"[..]));
    // The entry round-trips, and a replica decides the same.
    let bytes = entry.encode();
    assert_eq!(LogCommand::decode(&bytes), Ok(entry));
    assert_eq!(
        replica.apply(log.index, &bytes),
        Ok(ApplyReply::ExecAborted)
    );
    assert_eq!(replica.state_digest(), log.sm.state_digest());
    // A transaction of watches only (its commands answered by the node) still checks them.
    let only_watches = LoggedCommand::WatchedExec {
        watched: vec![watched_now(&log, "k")],
        commands: Vec::new(),
    };
    log.seq += 1;
    assert_eq!(
        log.apply_logged(1, log.seq, only_watches),
        ApplyReply::Exec(Vec::new())
    );
    // A watch point in the log is read by RAFT.WATCHPOINT.
    assert_eq!(
        log.sm.read(&ReadCommand::WatchPoint),
        Reply::Array(vec![
            Reply::Integer(log.index as i64),
            Reply::Integer(T0 as i64)
        ])
    );
}

#[test]
fn replicas_with_different_histories_agree_on_deadlines_versions_and_tombstones() {
    // Leaders' clocks 2 s apart stamp the entries; one replica applies the whole log, others
    // restore a snapshot midway and apply the rest: the same state, digest and snapshot bytes.
    let mut stamps = [T0, T0 + 2_000, T0 - 1_500, T0 + 40, T0 + 2_500]
        .into_iter()
        .cycle();
    let entries: Vec<Bytes> = (0..80u64)
        .map(|i| {
            let key = b(&format!("k{}", i % 7));
            let command: LoggedCommand = match i % 6 {
                0 => set_px(&format!("k{}", i % 7), "v", 1_000 + i as i64).into(),
                1 => expire(
                    &format!("k{}", i % 7),
                    Expiry::AfterMs(10),
                    ExpireCondition::Always,
                )
                .into(),
                2 => WriteCommand::Del { keys: vec![key] }.into(),
                3 => LoggedCommand::Tick(vec![b("k0"), b("k1"), b("k2"), b("k3")]),
                4 => WriteCommand::GetDel { key }.into(),
                _ => WriteCommand::Set {
                    key,
                    value: b("w"),
                    condition: SetCondition::IfAbsent,
                }
                .into(),
            };
            let seq = if matches!(command, LoggedCommand::Tick(_)) {
                0
            } else {
                i + 1
            };
            let client = u64::from(seq != 0);
            LogCommand::new(client, seq, stamps.next().unwrap(), command).encode()
        })
        .collect();
    let full = assert_replicas_agree(&entries, |i| i % 25 == 10);
    assert!(full.keys_with_deadline() > 0 || !full.is_empty());
}

#[test]
fn the_digest_covers_deadlines() {
    let mut a = Log::new();
    let mut b_log = Log::new();
    a.stamp_ms = T0;
    b_log.stamp_ms = T0;
    a.apply(set_px("k", "v", 100));
    b_log.apply(set_px("k", "v", 200));
    assert_ne!(a.sm.state_digest(), b_log.sm.state_digest());
    b_log.apply(expire("k", Expiry::AfterMs(100), ExpireCondition::Always));
    assert_eq!(a.sm.state_digest(), b_log.sm.state_digest());
    a.apply(WriteCommand::Persist { key: b("k") });
    b_log.apply(set("k", "v"));
    assert_eq!(a.sm.state_digest(), b_log.sm.state_digest());
    assert_eq!(
        a.sm.state_digest(),
        digest::pair_hash(b"k", b"v") ^ log_time_hash(T0)
    );
}

#[test]
fn an_old_format_snapshot_restores_without_deadlines_and_a_tick_numbers_every_key() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    log.apply(set("a", "1"));
    log.apply(set("b", "2"));
    let v3 = snapshot::encode_version(&log.sm, 3);
    let mut old = KvStateMachine::from_snapshot(&v3).expect("version 3 is read");
    assert!(!old.versions_valid);
    assert!(
        old.wants_ticks(),
        "no deadline, but the versions need a tick"
    );
    assert!(!log.sm.wants_ticks());
    assert_eq!(old.get(b"a"), Some(&b"1"[..]));
    assert_eq!(old.state_digest(), log.sm.state_digest());
    let tick = LogCommand::new(0, 0, T0 + 1, LoggedCommand::Tick(Vec::new())).encode();
    old.apply(log.index + 1, &tick).unwrap();
    assert!(old.versions_valid);
    assert!(!old.wants_ticks());
    let at = |key: &str, index| WatchedKey {
        db: 0,
        key: b(key),
        index,
        time_ms: T0,
    };
    // Every key numbered at the tick: watched from before it, changed; from it on, not.
    assert!(old.watched_changed(&at("a", log.index)));
    assert!(!old.watched_changed(&at("a", log.index + 1)));
    assert!(old.watched_changed(&at("never", log.index)));
    assert!(!old.watched_changed(&at("never", log.index + 1)));
    // The flag travels in snapshots.
    let again = KvStateMachine::from_snapshot(&old.snapshot()).unwrap();
    assert_eq!(again, old);
}

#[test]
fn snapshots_refuse_tombstones_and_versions_out_of_bounds() {
    let mut log = Log::new();
    log.apply(set("a", "1"));
    log.apply(WriteCommand::Del { keys: vec![b("a")] });
    log.apply(set("b", "2"));
    let good = log.sm.snapshot();
    let restored = KvStateMachine::from_snapshot(&good).unwrap();
    assert_eq!(restored, log.sm);
    let watched = WatchedKey {
        db: 0,
        key: b("a"),
        index: 1,
        time_ms: 0,
    };
    assert!(restored.watched_changed(&watched), "deleted at 2");
    assert_eq!(
        restored.watched_changed(&watched),
        log.sm.watched_changed(&watched)
    );
    // The tombstone of "a" is the last 4 + 1 + 8 bytes before the checksum: make it 99, past
    // the applied index.
    let mut bad = good.clone();
    let at = bad.len() - 4 - 8;
    bad[at..at + 8].copy_from_slice(&99u64.to_le_bytes());
    let crc_at = bad.len() - 4;
    let crc = crc32c::crc32c(&bad[..crc_at]);
    bad[crc_at..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        KvStateMachine::from_snapshot(&bad),
        Err(SnapshotError::Malformed("a tombstone out of bounds"))
    );
}

/// What a lock holder gets across a failover, as docs/time.md states it ("Locks and leases"):
/// the log's time follows the leader's clock, so a new leader whose clock is E ahead makes a lock
/// expire up to E early in real time, and one whose clock is E behind leaves the log's time where
/// it was until its clock catches up, so the lock lasts up to E longer. Here E = 2 s, the
/// simulator's bound.
#[test]
fn a_lease_across_a_failover_to_a_clock_two_seconds_off_ends_within_two_seconds_of_its_deadline() {
    const E: u64 = 2_000;
    const LEASE: i64 = 30_000;
    // The real time (ms after the lock was taken) at which the lock is gone for every command,
    // when a leader whose clock reads `real + offset` ticks every 100 ms of real time from 1 s
    // on (the first leader, whose clock is right, took the lock at real time 0).
    let gone_at = |offset: i64| {
        let mut log = Log::new();
        log.stamp_ms = T0;
        log.apply(set_px("lock", "holder", LEASE));
        let mut real: i64 = 1_000;
        loop {
            log.stamp_ms = (T0 as i64 + real + offset) as u64;
            log.tick(&[]);
            if log.get("lock").is_none() {
                return real;
            }
            real += 100;
            assert!(real < 2 * LEASE, "the lock never ended");
        }
    };
    let on_time = gone_at(0);
    assert_eq!(on_time, LEASE);
    let ahead = gone_at(E as i64);
    assert_eq!(ahead, LEASE - E as i64, "a leader 2 s ahead: 2 s early");
    let behind = gone_at(-(E as i64));
    assert_eq!(behind, LEASE + E as i64, "a leader 2 s behind: 2 s late");
    // Never earlier or later than the offset allows.
    for offset in [-1_500, -700, 0, 300, 1_999] {
        let gone = gone_at(offset);
        assert!(
            (gone - (LEASE - offset)).abs() < 100,
            "offset {offset}: gone at {gone}"
        );
    }
}
