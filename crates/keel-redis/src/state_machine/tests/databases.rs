//! Databases: every command in its entry's database, SELECT inside EXEC, SWAPDB, MOVE, COPY ...
//! DB, FLUSHDB and FLUSHALL, WATCH per (database, key), snapshots of several databases and the
//! formats from before databases.

use super::*;
use crate::command::WatchedKey;

impl Log {
    /// `command` as the next entry of this log's client, in database `db`.
    fn apply_in(&mut self, db: u32, command: impl Into<LoggedCommand>) -> ApplyReply {
        self.seq += 1;
        self.index += 1;
        let entry = LogCommand::new(1, self.seq, self.stamp_ms, command)
            .in_db(db)
            .encode();
        self.sm.apply(self.index, &entry).expect("valid entry")
    }

    fn write_in(&mut self, db: u32, command: WriteCommand) -> WriteReply {
        match self.apply_in(db, command) {
            ApplyReply::Write(reply) => reply,
            other => panic!("a write answered {other:?}"),
        }
    }

    fn get_in(&self, db: u32, key: &str) -> Reply {
        self.sm.read_in(db, &ReadCommand::Get { key: b(key) })
    }

    fn size_in(&self, db: u32) -> Reply {
        self.sm.read_in(db, &ReadCommand::DbSize)
    }
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(b(text))
}

#[test]
fn each_entry_runs_in_its_database() {
    let mut log = Log::new();
    log.write_in(0, set("k", "zero"));
    log.write_in(3, set("k", "three"));
    log.write_in(3, set("only3", "x"));
    assert_eq!(log.get_in(0, "k"), bulk("zero"));
    assert_eq!(log.get_in(3, "k"), bulk("three"));
    assert_eq!(log.get_in(5, "k"), Reply::Null);
    assert_eq!(
        (log.size_in(0), log.size_in(3)),
        (Reply::Integer(1), Reply::Integer(2))
    );
    assert_eq!(log.sm.len(), 3);
    assert_eq!(log.sm.keyspace(), vec![(0, 1, 0), (3, 2, 0)]);
    let keys = log.sm.read_in(3, &ReadCommand::Keys { pattern: b("*") });
    assert_eq!(keys, Reply::Array(vec![bulk("k"), bulk("only3")]));
    // FLUSHDB empties its own database only; FLUSHALL every one.
    log.write_in(3, WriteCommand::FlushDb);
    assert_eq!(
        (log.size_in(0), log.size_in(3)),
        (Reply::Integer(1), Reply::Integer(0))
    );
    log.write_in(7, set("k", "seven"));
    log.write_in(2, WriteCommand::FlushAll);
    assert!(log.sm.is_empty());
    assert_eq!(log.sm.state_digest(), 0);
}

#[test]
fn select_inside_exec_moves_the_rest_of_the_transaction() {
    let mut log = Log::new();
    let reply = log.apply_in(
        0,
        LoggedCommand::Exec(vec![
            QueuedCommand::Write(set("a", "in0")),
            QueuedCommand::Select(4),
            QueuedCommand::Write(set("a", "in4")),
            QueuedCommand::Read(ReadCommand::Get { key: b("a") }),
            QueuedCommand::Read(ReadCommand::DbSize),
        ]),
    );
    assert_eq!(
        reply,
        ApplyReply::Exec(vec![
            Reply::OK,
            Reply::OK,
            Reply::OK,
            bulk("in4"),
            Reply::Integer(1)
        ])
    );
    assert_eq!(log.get_in(0, "a"), bulk("in0"));
    assert_eq!(log.get_in(4, "a"), bulk("in4"));
}

#[test]
fn swapdb_exchanges_contents_and_touches_watched_keys_of_both() {
    let mut log = Log::new();
    log.write_in(0, set("a", "0"));
    log.write_in(1, set("b", "1"));
    let watch = |log: &Log, db, key: &str| WatchedKey {
        db,
        key: b(key),
        index: log.sm.applied_index(),
        time_ms: 0,
    };
    let (wa, wb, untouched) = (
        watch(&log, 0, "a"),
        watch(&log, 0, "b"),
        watch(&log, 0, "z"),
    );
    let digest = log.sm.state_digest();
    assert_eq!(
        log.write_in(0, WriteCommand::SwapDb { a: 0, b: 1 }),
        WriteReply::Ok
    );
    assert_eq!(
        (log.get_in(0, "b"), log.get_in(0, "a")),
        (bulk("1"), Reply::Null)
    );
    assert_eq!(log.get_in(1, "a"), bulk("0"));
    assert_ne!(
        log.sm.state_digest(),
        digest,
        "the same pairs in other databases"
    );
    // `a` left database 0 and `b` arrived: both changed there; `z` exists in neither.
    assert!(log.sm.watched_changed(&wa));
    assert!(log.sm.watched_changed(&wb));
    assert!(!log.sm.watched_changed(&untouched));
    // Swapping back restores the digest; swapping a database with itself changes nothing.
    log.write_in(5, WriteCommand::SwapDb { a: 1, b: 0 });
    assert_eq!(log.sm.state_digest(), digest);
    log.write_in(5, WriteCommand::SwapDb { a: 2, b: 2 });
    assert_eq!(log.sm.state_digest(), digest);
    // A restored copy holds the same, tombstones included.
    let restored = KvStateMachine::from_snapshot(&log.sm.snapshot()).expect("restores");
    assert_eq!(restored, log.sm);
}

#[test]
fn move_and_copy_between_databases_answer_as_redis() {
    let mut log = Log::new();
    log.write_in(0, set("k", "v"));
    log.write_in(2, set("taken", "there"));
    log.write_in(0, set("taken", "here"));
    let move_to = |key: &str, db| WriteCommand::Move { key: b(key), db };
    assert_eq!(log.write_in(0, move_to("k", 2)), WriteReply::Integer(1));
    assert_eq!(
        (log.get_in(0, "k"), log.get_in(2, "k")),
        (Reply::Null, bulk("v"))
    );
    assert_eq!(
        log.write_in(0, move_to("missing", 2)),
        WriteReply::Integer(0)
    );
    assert_eq!(log.write_in(0, move_to("taken", 2)), WriteReply::Integer(0));
    assert_eq!(log.get_in(0, "taken"), bulk("here"));
    assert_eq!(
        log.write_in(2, move_to("k", 2)),
        WriteReply::Error(WriteError::SameObject)
    );
    let copy = |source: &str, destination: &str, db| WriteCommand::Copy {
        source: b(source),
        destination: b(destination),
        replace: false,
        db,
    };
    assert_eq!(
        log.write_in(2, copy("k", "k", Some(9))),
        WriteReply::Integer(1)
    );
    assert_eq!(log.get_in(9, "k"), bulk("v"));
    assert_eq!(
        log.write_in(2, copy("k", "k", Some(9))),
        WriteReply::Integer(0)
    );
    assert_eq!(
        log.write_in(2, copy("k", "k", Some(2))),
        WriteReply::Error(WriteError::SameObject)
    );
}

#[test]
fn the_digest_tells_databases_apart() {
    let mut in0 = Log::new();
    let mut in1 = Log::new();
    in0.write_in(0, set("k", "v"));
    in1.write_in(1, set("k", "v"));
    assert_ne!(in0.sm.state_digest(), 0);
    assert_ne!(in0.sm.state_digest(), in1.sm.state_digest());
    assert_eq!(in0.sm.used_bytes(), in1.sm.used_bytes());
}

#[test]
fn snapshots_hold_every_database_and_database_0_alone_keeps_the_old_format() {
    let mut log = Log::new();
    log.stamp_ms = 1_000;
    log.write_in(0, set("zero", "0"));
    let only0 = log.sm.snapshot();
    assert_eq!(
        &only0[8..12],
        &6u32.to_le_bytes(),
        "version 6: an older build reads it"
    );
    log.write_in(3, set("three", "3"));
    log.write_in(3, set("gone", "x"));
    log.write_in(
        3,
        WriteCommand::Del {
            keys: vec![b("gone")],
        },
    );
    log.write_in(1023, set("last", "l"));
    let all = log.sm.snapshot();
    assert_eq!(&all[8..12], &7u32.to_le_bytes());
    let restored = KvStateMachine::from_snapshot(&all).expect("restores");
    assert_eq!(restored, log.sm);
    assert_eq!(restored.state_digest(), log.sm.state_digest());
    assert_eq!(
        restored.read_in(3, &ReadCommand::Get { key: b("three") }),
        bulk("3")
    );
    assert_eq!(
        restored.read_in(1023, &ReadCommand::DbSize),
        Reply::Integer(1)
    );
    // A version 6 snapshot (what a build before databases wrote) restores into database 0.
    let old = KvStateMachine::from_snapshot(&only0).expect("restores");
    assert_eq!(
        old.read_in(0, &ReadCommand::Get { key: b("zero") }),
        bulk("0")
    );
    assert_eq!(old.keyspace(), vec![(0, 1, 0)]);
    // A damaged database section is refused.
    let mut bad = all.clone();
    let at = bad.len() - 20;
    bad[at] ^= 1;
    assert!(KvStateMachine::from_snapshot(&bad).is_err());
}

#[test]
fn entries_of_database_0_keep_format_2_and_others_decode_with_their_database() {
    let entry = LogCommand::new(7, 1, 5, set("k", "v")).encode();
    assert_eq!(
        entry[0], 2,
        "database 0: the bytes a build before databases wrote"
    );
    assert_eq!(LogCommand::decode(&entry).expect("decodes").db, 0);
    let in5 = LogCommand::new(7, 1, 5, set("k", "v")).in_db(5);
    let encoded = in5.encode();
    assert_eq!(encoded[0], 3);
    assert_eq!(&encoded[25..29], &5u32.to_le_bytes());
    assert_eq!(LogCommand::decode(&encoded), Ok(in5));
    // A database past the bound does not decode.
    let mut far = encoded.to_vec();
    far[25..29].copy_from_slice(&DATABASES_MAX.to_le_bytes());
    assert_eq!(
        LogCommand::decode(&Bytes::from(far)),
        Err(DecodeError::DatabaseOutOfRange(DATABASES_MAX))
    );
    // Watched keys outside database 0, and SELECT inside EXEC, round-trip.
    let watched = LogCommand::new(
        7,
        2,
        5,
        LoggedCommand::WatchedExec {
            watched: vec![WatchedKey {
                db: 2,
                key: b("w"),
                index: 1,
                time_ms: 2,
            }],
            commands: vec![
                QueuedCommand::Select(2),
                QueuedCommand::Write(WriteCommand::FlushDb),
            ],
        },
    );
    assert_eq!(LogCommand::decode(&watched.encode()), Ok(watched));
    let swap = LogCommand::new(7, 3, 5, WriteCommand::SwapDb { a: 1, b: 2 });
    assert_eq!(LogCommand::decode(&swap.encode()), Ok(swap));
}

#[test]
fn a_tick_expires_a_key_in_every_database() {
    let mut log = Log::new();
    log.stamp_ms = 1_000;
    let with_deadline = |key: &str| WriteCommand::SetWith {
        key: b(key),
        value: b("v"),
        condition: SetCondition::Always,
        expiry: crate::command::Expiry::AtMs(1_500),
        get: false,
        command: crate::command::TtlCommand::Set,
    };
    log.write_in(0, with_deadline("k"));
    log.write_in(6, with_deadline("k"));
    log.write_in(6, with_deadline("j"));
    assert_eq!(log.sm.keys_with_deadline(), 3);
    assert_eq!(log.sm.keys_due(2_000, 10), vec![b("j"), b("k")]);
    log.stamp_ms = 2_000;
    let tick = log.apply_logged(0, 0, LoggedCommand::Tick(vec![b("j"), b("k")]));
    assert_eq!(tick, ApplyReply::Write(WriteReply::Integer(3)));
    assert!(log.sm.is_empty());
}

#[test]
fn keys_are_counted_and_listed_by_hash_slot_per_database() {
    let mut log = Log::new();
    for key in ["{user1000}.following", "{user1000}.followers", "other"] {
        log.write_in(2, set(key, "v"));
    }
    log.write_in(0, set("{user1000}.x", "v"));
    let slot = crate::slot::key_slot(b"user1000");
    assert_eq!(log.sm.count_keys_in_slot(2, slot), 2);
    assert_eq!(log.sm.count_keys_in_slot(0, slot), 1);
    assert_eq!(log.sm.count_keys_in_slot(9, slot), 0);
    assert_eq!(
        log.sm.keys_in_slot(2, slot, 10),
        vec![b("{user1000}.followers"), b("{user1000}.following")]
    );
    assert_eq!(log.sm.keys_in_slot(2, slot, 1).len(), 1);
    let restored = KvStateMachine::from_snapshot(&log.sm.snapshot()).expect("restores");
    assert_eq!(restored.count_keys_in_slot(2, slot), 2);
}

#[test]
fn a_filled_key_is_named_with_its_database() {
    let mut log = Log::new();
    log.sm.collect_filled_keys(true);
    let push = |key: &str| {
        let args: Vec<Bytes> = ["RPUSH", key, "x"].iter().map(|a| b(a)).collect();
        match crate::command::Command::parse(&args) {
            Ok(crate::command::Command::Write(write)) => write,
            other => panic!("{other:?}"),
        }
    };
    log.apply_in(0, push("q"));
    log.apply_in(9, push("q"));
    let waiting = crate::command::blocking::waiting_key;
    assert_eq!(
        log.sm.take_filled_keys(),
        [waiting(0, b"q"), waiting(9, b"q")]
    );
    assert_ne!(waiting(0, b"q"), waiting(9, b"q"));
}
