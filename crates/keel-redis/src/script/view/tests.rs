use bytes::Bytes;
use keel_engine::ClientError;

use super::{Effects, Fetch, ScriptView, ViewFailure, ViewLimits};
use crate::command::Command;
use crate::script::lua::Redis;
use crate::state_machine::{ApplyReply, KvStateMachine, LogCommand, LoggedCommand};
use keel_resp::Reply;

/// The replicated state, applied to entry by entry, that the script's keys come from.
struct Replicated {
    sm: KvStateMachine,
    next_index: u64,
    next_seq: u64,
    fetches: u32,
    refuse: Option<ClientError>,
}

impl Replicated {
    fn new() -> Self {
        Replicated {
            sm: KvStateMachine::new(),
            next_index: 1,
            next_seq: 1,
            fetches: 0,
            refuse: None,
        }
    }

    fn apply(&mut self, command: LoggedCommand) -> ApplyReply {
        let entry = LogCommand {
            db: 0,
            client_id: 7,
            request_seq: self.next_seq,
            stamp_ms: 1_000 + self.next_index,
            command,
        };
        self.next_seq += 1;
        let index = self.next_index;
        self.next_index += 1;
        self.sm.apply(index, &entry.encode()).expect("applies")
    }

    fn write(&mut self, args: &[&str]) -> ApplyReply {
        match Command::parse(&args_of(args)) {
            Ok(Command::Write(write)) => self.apply(LoggedCommand::Write(write)),
            other => panic!("not a write: {other:?}"),
        }
    }

    /// What proposing the effects does: the watched transaction, applied.
    fn commit(&mut self, effects: Effects) -> ApplyReply {
        self.apply(LoggedCommand::WatchedExec {
            watched: effects.watched,
            commands: effects.writes,
        })
    }
}

impl Fetch for Replicated {
    fn fetch(
        &mut self,
        keys: Vec<Bytes>,
        scratch: &mut KvStateMachine,
    ) -> Result<(u64, u64), ClientError> {
        if let Some(error) = &self.refuse {
            return Err(error.clone());
        }
        self.fetches += 1;
        for key in &keys {
            self.sm.copy_key_into(0, key, scratch);
        }
        Ok((self.sm.applied_index(), self.sm.log_time_ms()))
    }

    fn wall_clock_us(&self) -> u64 {
        1_234_567_890
    }
}

fn args_of(args: &[&str]) -> Vec<Bytes> {
    args.iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect()
}

const LIMITS: ViewLimits = ViewLimits {
    commands_max: 64,
    bytes_max: 1 << 20,
};

fn call(view: &mut ScriptView<'_>, args: &[&str]) -> Reply {
    view.call(args_of(args))
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(text.as_bytes()))
}

#[test]
fn a_script_reads_its_own_writes_and_the_replicated_state_waits_for_the_commit() {
    let mut replicated = Replicated::new();
    replicated.write(&["SET", "counter", "41"]);
    let mut view = ScriptView::new(false, LIMITS, &mut replicated);
    assert_eq!(call(&mut view, &["INCR", "counter"]), Reply::Integer(42));
    assert_eq!(call(&mut view, &["GET", "counter"]), bulk("42"));
    assert_eq!(call(&mut view, &["SET", "other", "x"]), Reply::OK);
    let effects = view.finish().expect("effects");
    assert_eq!(effects.writes.len(), 2);
    assert_eq!(effects.requests[0], args_of(&["INCR", "counter"]));
    let watched: Vec<&[u8]> = effects.watched.iter().map(|w| &w.key[..]).collect();
    assert_eq!(watched, vec![&b"counter"[..], &b"other"[..]]);
    assert_eq!(replicated.sm.get(b"counter"), Some(&b"41"[..]));

    let applied = replicated.commit(effects);
    assert_eq!(
        applied,
        ApplyReply::Exec(vec![Reply::Integer(42), Reply::OK]),
        "the writes answer at the commit what they answered in the script"
    );
    assert_eq!(replicated.sm.get(b"counter"), Some(&b"42"[..]));
}

#[test]
fn a_key_changed_between_the_copy_and_the_commit_aborts_the_effects() {
    let mut replicated = Replicated::new();
    replicated.write(&["SET", "lock", "token-a"]);
    let mut view = ScriptView::new(false, LIMITS, &mut replicated);
    assert_eq!(call(&mut view, &["GET", "lock"]), bulk("token-a"));
    assert_eq!(call(&mut view, &["DEL", "lock"]), Reply::Integer(1));
    let effects = view.finish().expect("effects");
    // Another client takes the lock over before the script's transaction applies.
    replicated.write(&["SET", "lock", "token-b"]);
    assert_eq!(replicated.commit(effects), ApplyReply::ExecAborted);
    assert_eq!(replicated.sm.get(b"lock"), Some(&b"token-b"[..]));
}

#[test]
fn an_absent_key_that_appears_before_the_commit_aborts_the_effects() {
    let mut replicated = Replicated::new();
    replicated.write(&["SET", "unrelated", "1"]);
    let mut view = ScriptView::new(false, LIMITS, &mut replicated);
    assert_eq!(
        call(&mut view, &["SETNX", "fresh", "mine"]),
        Reply::Integer(1)
    );
    let effects = view.finish().expect("effects");
    replicated.write(&["SET", "fresh", "theirs"]);
    assert_eq!(replicated.commit(effects), ApplyReply::ExecAborted);
    assert_eq!(replicated.sm.get(b"fresh"), Some(&b"theirs"[..]));
}

#[test]
fn keys_are_copied_once_and_a_script_without_keys_fetches_nothing() {
    let mut replicated = Replicated::new();
    {
        let mut view = ScriptView::new(false, LIMITS, &mut replicated);
        assert_eq!(call(&mut view, &["PING"]), Reply::PONG);
        assert_eq!(call(&mut view, &["ECHO", "hi"]), bulk("hi"));
        assert_eq!(
            call(&mut view, &["TIME"]),
            Reply::Array(vec![bulk("1234"), bulk("567890")])
        );
        assert_eq!(view.finish().expect("effects").fetches, 0);
    }
    assert_eq!(replicated.fetches, 0);
    let mut view = ScriptView::new(false, LIMITS, &mut replicated);
    call(&mut view, &["GET", "a"]);
    call(&mut view, &["SET", "a", "1"]);
    call(&mut view, &["MGET", "a", "b"]);
    let effects = view.finish().expect("effects");
    assert_eq!(effects.fetches, 2, "a, then b");
    assert_eq!(effects.watched.len(), 2);
}

#[test]
fn commands_that_reach_unnamed_keys_or_the_server_are_refused() {
    let mut replicated = Replicated::new();
    let mut view = ScriptView::new(false, LIMITS, &mut replicated);
    for args in [
        &["KEYS", "*"][..],
        &["SCAN", "0"],
        &["DBSIZE"],
        &["RANDOMKEY"],
        &["FLUSHALL"],
        &["FLUSHDB"],
        &["SORT", "list", "BY", "weight_*"],
        &["SORT", "list", "GET", "#", "GET", "data_*"],
    ] {
        let reply = call(&mut view, args);
        assert!(
            matches!(&reply, Reply::Error(e) if e.contains("cannot be called from a script")),
            "{args:?}: {reply:?}"
        );
    }
    for args in [
        &["CONFIG", "SET", "timeout", "1"][..],
        &["MULTI"],
        &["EVAL", "return 1", "0"],
        &["CLIENT", "ID"],
    ] {
        assert_eq!(
            call(&mut view, args),
            Reply::error("ERR This Redis command is not allowed from script"),
            "{args:?}"
        );
    }
    assert!(call(&mut view, &["NOSUCHCOMMAND"]).is_error());
    // SORT without patterns reads only the key it names.
    assert_eq!(
        call(&mut view, &["SORT", "list", "BY", "nosort"]),
        Reply::Array(Vec::new())
    );
    let effects = view
        .finish()
        .expect("refusals are the script's errors, not failures");
    assert!(effects.writes.is_empty());
}

#[test]
fn a_read_only_script_may_not_write() {
    let mut replicated = Replicated::new();
    let mut view = ScriptView::new(true, LIMITS, &mut replicated);
    assert_eq!(
        call(&mut view, &["SET", "a", "1"]),
        Reply::error("ERR Write commands are not allowed from read-only scripts.")
    );
    assert_eq!(call(&mut view, &["GET", "a"]), Reply::Null);
    assert!(view.finish().expect("effects").writes.is_empty());
}

#[test]
fn spop_is_logged_as_the_srem_of_what_it_popped() {
    let mut replicated = Replicated::new();
    replicated.write(&["SADD", "set", "a", "b", "c"]);
    let mut view = ScriptView::new(false, LIMITS, &mut replicated);
    let Reply::Bulk(popped) = call(&mut view, &["SPOP", "set"]) else {
        panic!("one member");
    };
    let effects = view.finish().expect("effects");
    let mut srem = args_of(&["SREM", "set"]);
    srem.push(popped.clone());
    assert_eq!(effects.requests, vec![srem]);
    replicated.commit(effects);
    assert_eq!(
        replicated.sm.read(
            &match Command::parse(&args_of(&["SISMEMBER", "set", "x"])) {
                Ok(Command::Read(read)) => read,
                other => panic!("{other:?}"),
            }
        ),
        Reply::Integer(0)
    );
    let scard = match Command::parse(&args_of(&["SCARD", "set"])) {
        Ok(Command::Read(read)) => read,
        other => panic!("{other:?}"),
    };
    assert_eq!(replicated.sm.read(&scard), Reply::Integer(2));
    let ismember = match Command::parse(&[Bytes::from_static(b"SISMEMBER"), "set".into(), popped]) {
        Ok(Command::Read(read)) => read,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        replicated.sm.read(&ismember),
        Reply::Integer(0),
        "the member the script saw"
    );
}

#[test]
fn effects_beyond_a_transaction_s_bounds_fail_the_script() {
    let mut replicated = Replicated::new();
    let limits = ViewLimits {
        commands_max: 2,
        bytes_max: 1 << 20,
    };
    let mut view = ScriptView::new(false, limits, &mut replicated);
    assert_eq!(call(&mut view, &["SET", "a", "1"]), Reply::OK);
    assert_eq!(call(&mut view, &["SET", "b", "1"]), Reply::OK);
    assert!(call(&mut view, &["SET", "c", "1"]).is_error());
    // Every later call fails alike: nothing of the script can be proposed.
    assert!(call(&mut view, &["GET", "a"]).is_error());
    assert!(matches!(view.finish(), Err(ViewFailure::TooLarge(_))));
}

#[test]
fn a_failed_fetch_fails_the_script_with_the_runtime_s_reason() {
    let mut replicated = Replicated::new();
    replicated.refuse = Some(ClientError::NotLeader {
        leader: Some(2),
        leader_addr: None,
    });
    let mut view = ScriptView::new(false, LIMITS, &mut replicated);
    assert!(call(&mut view, &["GET", "a"]).is_error());
    assert!(matches!(
        view.finish(),
        Err(ViewFailure::Fetch(ClientError::NotLeader { .. }))
    ));
}

#[test]
fn an_expired_key_is_absent_in_the_script_as_on_the_replicas() {
    let mut replicated = Replicated::new();
    // Expires 5 ms after its entry's time; the next entries move the log's time past it.
    replicated.write(&["SET", "lease", "x", "PX", "5"]);
    for _ in 0..10 {
        replicated.write(&["SET", "clock", "tick"]);
    }
    let mut view = ScriptView::new(false, LIMITS, &mut replicated);
    assert_eq!(call(&mut view, &["GET", "lease"]), Reply::Null);
    assert_eq!(call(&mut view, &["SET", "lease", "y", "NX"]), Reply::OK);
    let effects = view.finish().expect("effects");
    assert!(matches!(replicated.commit(effects), ApplyReply::Exec(_)));
    assert_eq!(replicated.sm.get(b"lease"), Some(&b"y"[..]));
}
