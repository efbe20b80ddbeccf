use bytes::Bytes;

use super::ScriptCache;
use crate::command::script::parse_script as parse;
use crate::command::{Command, LocalCommand};
use crate::command::{ScriptCommand, ScriptSource};

fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

fn parsed(words: &[&str]) -> Result<ScriptCommand, String> {
    match Command::parse(&args(words)) {
        Ok(Command::Local(LocalCommand::Script(script))) => Ok(script),
        Ok(other) => panic!("not a script command: {other:?}"),
        Err(error) => Err(error.to_string()),
    }
}

#[test]
fn eval_splits_keys_from_arguments() {
    assert_eq!(
        parsed(&["EVAL", "return 1", "2", "k1", "k2", "a1"]),
        Ok(ScriptCommand::Eval {
            source: ScriptSource::Body(Bytes::from_static(b"return 1")),
            keys: args(&["k1", "k2"]),
            args: args(&["a1"]),
            read_only: false,
        })
    );
    assert_eq!(
        parsed(&["evalsha_ro", "ABC", "0"]),
        Ok(ScriptCommand::Eval {
            source: ScriptSource::Sha(Bytes::from_static(b"ABC")),
            keys: Vec::new(),
            args: Vec::new(),
            read_only: true,
        })
    );
}

#[test]
fn eval_refuses_bad_key_counts_in_redis_s_words() {
    assert_eq!(
        parsed(&["EVAL", "return 1", "-1"]),
        Err("ERR Number of keys can't be negative".into())
    );
    assert_eq!(
        parsed(&["EVAL", "return 1", "3", "a", "b"]),
        Err("ERR Number of keys can't be greater than number of args".into())
    );
    assert_eq!(
        parsed(&["EVAL", "return 1", "x"]),
        Err("ERR value is not an integer or out of range".into())
    );
    assert!(parsed(&["EVAL", "return 1"]).is_err(), "arity");
}

#[test]
fn script_subcommands_parse_and_others_are_refused() {
    assert_eq!(
        parsed(&["SCRIPT", "load", "return 1"]),
        Ok(ScriptCommand::Load(Bytes::from_static(b"return 1")))
    );
    assert_eq!(
        parsed(&["SCRIPT", "EXISTS", "a", "b"]),
        Ok(ScriptCommand::Exists(args(&["a", "b"])))
    );
    assert_eq!(
        parsed(&["SCRIPT", "FLUSH", "ASYNC"]),
        Ok(ScriptCommand::Flush)
    );
    assert_eq!(parsed(&["SCRIPT", "KILL"]), Ok(ScriptCommand::Kill));
    assert!(parsed(&["SCRIPT", "KILL", "now"]).is_err());
    assert!(parsed(&["SCRIPT", "EXISTS"]).is_err());
    assert_eq!(
        parsed(&["SCRIPT", "DEBUG", "YES"]),
        Err("ERR unknown subcommand 'DEBUG'. Try SCRIPT HELP.".into())
    );
    assert_eq!(parse("script", &args(&["KILL"])), Ok(ScriptCommand::Kill));
}

#[test]
fn the_cache_is_bounded_and_keeps_loaded_scripts_longest() {
    let mut cache = ScriptCache::default();
    cache.insert("loaded".into(), Bytes::from_static(b"return 1"), true);
    for n in 0..super::CACHE_SCRIPTS_MAX + 10 {
        cache.insert(format!("eval{n}"), Bytes::from_static(b"return 2"), false);
    }
    assert_eq!(cache.len(), super::CACHE_SCRIPTS_MAX);
    assert!(
        cache.contains(b"LOADED"),
        "found by any case, kept over EVAL's"
    );
    assert!(
        !cache.contains(b"eval0"),
        "the oldest EVAL'd script went first"
    );
    assert!(cache.contains(format!("eval{}", super::CACHE_SCRIPTS_MAX + 9).as_bytes()));
    cache.clear();
    assert!(cache.is_empty());
    assert_eq!(cache.bytes(), 0);
}

#[test]
fn a_script_is_busy_past_the_threshold_until_it_ends_and_kill_reaches_it() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let registry = Arc::new(super::ScriptRegistry::default());
    let start = Instant::now();
    let threshold = Duration::from_millis(100);
    assert!(!registry.busy(start, threshold));
    let running = registry.start(start).expect("room");
    assert_eq!(registry.running(), 1);
    assert!(!registry.busy(start + Duration::from_millis(50), threshold));
    assert!(registry.busy(start + Duration::from_millis(150), threshold));
    assert!(
        !registry.busy(start + Duration::from_secs(60), Duration::ZERO),
        "0: never busy"
    );
    assert!(!running.killed());
    assert_eq!(registry.kill_all(), 1);
    assert!(running.killed());
    drop(running);
    assert_eq!(registry.running(), 0);
    assert!(!registry.busy(start + Duration::from_secs(60), threshold));
    assert_eq!(registry.kill_all(), 0);
    let all: Vec<_> = (0..super::SCRIPTS_RUNNING_MAX)
        .map(|_| registry.start(start).expect("room"))
        .collect();
    assert!(registry.start(start).is_none(), "bounded");
    drop(all);
    assert!(registry.start(start).is_some());
}

#[test]
fn closing_the_registry_kills_running_scripts_and_those_started_after() {
    use std::sync::Arc;
    use std::time::Instant;

    let registry = Arc::new(super::ScriptRegistry::default());
    let now = Instant::now();
    let running = registry.start(now).expect("room");
    let before = registry.start(now).expect("room");
    drop(before);
    assert!(!running.killed());
    registry.close();
    assert!(running.killed());
    let after = registry.start(now).expect("room");
    assert!(
        after.killed(),
        "a script starting after the close runs killed"
    );
}
