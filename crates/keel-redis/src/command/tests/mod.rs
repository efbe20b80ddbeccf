use bytes::Bytes;

use super::*;
use keel_resp::ProtocolVersion;

fn parse(line: &str) -> Result<Command, CommandError> {
    let args: Vec<Bytes> = line
        .split(' ')
        .filter(|w| !w.is_empty())
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect();
    Command::parse(&args)
}

fn error(line: &str) -> String {
    parse(line).expect_err(line).to_string()
}

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

#[test]
fn arity_errors_use_redis_wording() {
    assert_eq!(
        error("GET"),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        error("get a b"),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        error("SET k"),
        "ERR wrong number of arguments for 'set' command"
    );
    assert_eq!(
        error("MSET a 1 b"),
        "ERR wrong number of arguments for 'mset' command"
    );
    assert_eq!(
        error("PING a b"),
        "ERR wrong number of arguments for 'ping' command"
    );
    assert_eq!(
        error("CAS k v"),
        "ERR wrong number of arguments for 'cas' command"
    );
    assert_eq!(
        error("DBSIZE x"),
        "ERR wrong number of arguments for 'dbsize' command"
    );
    assert_eq!(
        error("CLIENT SETNAME"),
        "ERR wrong number of arguments for 'client|setname' command"
    );
    assert_eq!(
        error("CONFIG GET"),
        "ERR wrong number of arguments for 'config|get' command"
    );
}

#[test]
fn unknown_commands_quote_their_arguments() {
    assert_eq!(
        error("FOO a bb"),
        "ERR unknown command 'FOO', with args beginning with: 'a' 'bb' "
    );
    assert_eq!(
        error("foo"),
        "ERR unknown command 'foo', with args beginning with: "
    );
    // The preview is bounded.
    let long = format!("FOO {}", "x".repeat(1000));
    assert!(error(&long).len() < 300);
    assert_eq!(Command::parse(&[]), Err(CommandError::Empty));
}

#[test]
fn names_are_case_insensitive_and_classified() {
    let cases = [
        ("get k", CommandClass::Read),
        ("MGET a b", CommandClass::Read),
        ("exists a a", CommandClass::Read),
        ("StrLen k", CommandClass::Read),
        ("dbsize", CommandClass::Read),
        ("set k v", CommandClass::Write),
        ("del a b", CommandClass::Write),
        ("incr k", CommandClass::Write),
        ("append k v", CommandClass::Write),
        ("mset a 1 b 2", CommandClass::Write),
        ("cas k a b", CommandClass::Write),
        ("ping", CommandClass::Local),
        ("info raft", CommandClass::Local),
        ("raft.status", CommandClass::Local),
        ("select 0", CommandClass::Local),
        ("raft.snapshot", CommandClass::Admin),
        ("raft.transfer 2", CommandClass::Admin),
        ("debug panic", CommandClass::Admin),
    ];
    for (line, class) in cases {
        assert_eq!(parse(line).unwrap().class(), class, "{line}");
    }
    for spec in COMMAND_TABLE {
        assert_eq!(spec.name, spec.name.to_lowercase());
    }
}

#[test]
fn set_options() {
    let set = |cond| {
        Ok(Command::Write(WriteCommand::Set {
            key: b("k"),
            value: b("v"),
            condition: cond,
        }))
    };
    assert_eq!(parse("SET k v"), set(SetCondition::Always));
    assert_eq!(parse("SET k v nx"), set(SetCondition::IfAbsent));
    assert_eq!(parse("SET k v XX"), set(SetCondition::IfPresent));
    assert_eq!(parse("SET k v NX NX"), set(SetCondition::IfAbsent));
    assert_eq!(error("SET k v NX XX"), "ERR syntax error");
    assert_eq!(error("SET k v BOGUS"), "ERR syntax error");
    assert_eq!(error("SET k v EX"), "ERR syntax error");
    let with = |condition, expiry, get| {
        Ok(Command::Write(WriteCommand::SetWith {
            key: b("k"),
            value: b("v"),
            condition,
            expiry,
            get,
            command: TtlCommand::Set,
        }))
    };
    use SetCondition::{Always, IfAbsent};
    assert_eq!(parse("SET k v KEEPTTL"), with(Always, Expiry::Keep, false));
    assert_eq!(
        parse("SET k v ex 10"),
        with(Always, Expiry::AfterMs(10_000), false)
    );
    assert_eq!(
        parse("SET k v NX px 10 GET"),
        with(IfAbsent, Expiry::AfterMs(10), true)
    );
    assert_eq!(
        parse("SET k v EXAT 1700000000"),
        with(Always, Expiry::AtMs(1_700_000_000_000), false)
    );
    assert_eq!(
        parse("SET k v PXAT 5 GET"),
        with(Always, Expiry::AtMs(5), true)
    );
    assert_eq!(parse("SET k v GET"), with(Always, Expiry::Clear, true));
    for line in [
        "SET k v EX 1 PX 1",
        "SET k v EX 1 KEEPTTL",
        "SET k v KEEPTTL PX 2",
    ] {
        assert_eq!(error(line), "ERR syntax error", "{line}");
    }
    for line in [
        "SET k v EX 0",
        "SET k v PX -1",
        "SET k v EX 10000000000000000",
        "SET k v EX -9999999999999999",
    ] {
        assert_eq!(
            error(line),
            "ERR invalid expire time in 'set' command",
            "{line}"
        );
    }
    assert_eq!(
        error("SET k v EX ten"),
        "ERR value is not an integer or out of range"
    );
}

#[test]
#[expect(clippy::too_many_lines)]
fn expiry_commands() {
    let expire = |deadline, condition, command| {
        Ok(Command::Write(WriteCommand::Expire {
            key: b("k"),
            deadline,
            condition,
            command,
        }))
    };
    use ExpireCondition::*;
    assert_eq!(
        parse("EXPIRE k 10"),
        expire(Expiry::AfterMs(10_000), Always, TtlCommand::Expire)
    );
    assert_eq!(
        parse("PEXPIRE k -5 lt"),
        expire(Expiry::AfterMs(-5), IfEarlier, TtlCommand::PExpire)
    );
    assert_eq!(
        parse("EXPIREAT k 7 XX"),
        expire(Expiry::AtMs(7_000), IfSome, TtlCommand::ExpireAt)
    );
    assert_eq!(
        parse("PEXPIREAT k 7 NX"),
        expire(Expiry::AtMs(7), IfNone, TtlCommand::PExpireAt)
    );
    assert_eq!(
        parse("EXPIRE k 1 GT XX"),
        expire(Expiry::AfterMs(1_000), IfLater, TtlCommand::Expire)
    );
    assert_eq!(
        parse("EXPIRE k 1 XX LT"),
        expire(
            Expiry::AfterMs(1_000),
            IfEarlierWithDeadline,
            TtlCommand::Expire
        )
    );
    assert_eq!(
        error("EXPIRE k 200 LT GT"),
        "ERR GT and LT options at the same time are not compatible"
    );
    for line in [
        "EXPIRE k 200 NX GT",
        "EXPIRE k 200 NX XX",
        "EXPIRE k 200 NX LT",
    ] {
        assert_eq!(
            error(line),
            "ERR NX and XX, GT or LT options at the same time are not compatible"
        );
    }
    assert_eq!(error("EXPIRE k 200 XX AB"), "ERR Unsupported option AB");
    assert_eq!(
        error("EXPIRE k 9223372036854776"),
        "ERR invalid expire time in 'expire' command"
    );
    assert_eq!(
        error("EXPIRE k -9223372036854776"),
        "ERR invalid expire time in 'expire' command"
    );
    assert_eq!(
        error("EXPIRE k x"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error("SETEX k 0 v"),
        "ERR invalid expire time in 'setex' command"
    );
    assert_eq!(
        error("PSETEX k -1 v"),
        "ERR invalid expire time in 'psetex' command"
    );
    assert_eq!(
        error("GETEX k EX 10000000000000000"),
        "ERR invalid expire time in 'getex' command"
    );
    assert_eq!(error("GETEX k bogus"), "ERR syntax error");
    assert_eq!(error("GETEX k EX 1 PX 2"), "ERR syntax error");
    assert_eq!(
        parse("GETEX k"),
        Ok(Command::Read(ReadCommand::Get { key: b("k") }))
    );
    assert_eq!(
        parse("GETEX k persist"),
        Ok(Command::Write(WriteCommand::GetEx {
            key: b("k"),
            expiry: Expiry::Clear
        }))
    );
    assert_eq!(
        parse("PTTL k"),
        Ok(Command::Read(ReadCommand::Ttl {
            key: b("k"),
            form: TtlForm::RemainingMs
        }))
    );
    assert_eq!(
        parse("FLUSHALL ASYNC"),
        Ok(Command::Write(WriteCommand::FlushAll))
    );
    assert_eq!(parse("flushdb"), Ok(Command::Write(WriteCommand::FlushDb)));
    assert_eq!(error("FLUSHDB now"), "ERR syntax error");
    assert_eq!(
        parse("SETNX k v"),
        Ok(Command::Write(WriteCommand::MSetNx {
            pairs: vec![(b("k"), b("v"))]
        }))
    );
    assert_eq!(
        error("MSETNX a 1 b"),
        "ERR wrong number of arguments for 'msetnx' command"
    );
}

#[test]
fn integer_arguments() {
    assert_eq!(
        parse("INCRBY k -5"),
        Ok(Command::Write(WriteCommand::IncrBy {
            key: b("k"),
            delta: -5
        }))
    );
    assert_eq!(
        parse("DECR k"),
        Ok(Command::Write(WriteCommand::IncrBy {
            key: b("k"),
            delta: -1
        }))
    );
    assert_eq!(
        parse("DECRBY k 3"),
        Ok(Command::Write(WriteCommand::IncrBy {
            key: b("k"),
            delta: -3
        }))
    );
    assert_eq!(
        error("INCRBY k x"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error("INCRBY k 1.5"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error("INCRBY k 9223372036854775808"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error("DECRBY k -9223372036854775808"),
        "ERR increment or decrement would overflow"
    );
    // A second count is too many arguments, in Redis's words (SPOP's is a syntax error).
    for (line, name) in [
        ("LPOP k 1 1", "lpop"),
        ("RPOP k 1 1", "rpop"),
        ("ZPOPMIN k 1 1", "zpopmin"),
    ] {
        assert_eq!(
            error(line),
            format!("ERR wrong number of arguments for '{name}' command")
        );
    }
    assert_eq!(error("SPOP k 1 1"), "ERR syntax error");
    assert_eq!(
        error("SELECT x"),
        "ERR value is not an integer or out of range"
    );
}

/// Database indexes: SELECT, MOVE and SWAPDB take 0 to below `DATABASES_MAX` (the connection
/// checks them against `databases`), and answer in Redis's words otherwise.
#[test]
fn database_arguments() {
    assert_eq!(
        parse("SELECT 0"),
        Ok(Command::Local(LocalCommand::Select(0)))
    );
    assert_eq!(
        parse("SELECT 15"),
        Ok(Command::Local(LocalCommand::Select(15)))
    );
    assert_eq!(error("SELECT 1024"), "ERR DB index is out of range");
    assert_eq!(error("SELECT -1"), "ERR DB index is out of range");
    assert_eq!(
        error("SELECT x"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        parse("MOVE k 3"),
        Ok(Command::Write(WriteCommand::Move { key: b("k"), db: 3 }))
    );
    assert_eq!(
        parse("SWAPDB 0 1"),
        Ok(Command::Write(WriteCommand::SwapDb { a: 0, b: 1 }))
    );
    assert_eq!(error("SWAPDB x 1"), "ERR invalid first DB index");
    assert_eq!(error("SWAPDB 1 x"), "ERR invalid second DB index");
    assert_eq!(error("SWAPDB 1 99999"), "ERR invalid second DB index");
}

#[test]
fn multi_key_commands() {
    assert_eq!(
        parse("MSET a 1 b 2"),
        Ok(Command::Write(WriteCommand::MSet {
            pairs: vec![(b("a"), b("1")), (b("b"), b("2"))]
        }))
    );
    assert_eq!(
        parse("DEL a b a"),
        Ok(Command::Write(WriteCommand::Del {
            keys: vec![b("a"), b("b"), b("a")]
        }))
    );
    assert_eq!(
        parse("CAS k old new"),
        Ok(Command::Write(WriteCommand::Cas {
            key: b("k"),
            expected: b("old"),
            new: b("new")
        }))
    );
}

#[test]
fn hello_arguments() {
    let hello = |line| match parse(line) {
        Ok(Command::Local(LocalCommand::Hello(h))) => h,
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(hello("HELLO"), HelloArgs::default());
    assert_eq!(hello("HELLO 3").protover, Some(ProtocolVersion::Resp3));
    assert_eq!(hello("hello 2").protover, Some(ProtocolVersion::Resp2));
    let full = hello("HELLO 3 AUTH default secret SETNAME app");
    assert_eq!(full.auth, Some((b("default"), b("secret"))));
    assert_eq!(full.setname, Some(b("app")));
    assert_eq!(error("HELLO 4"), "NOPROTO unsupported protocol version");
    assert_eq!(
        error("HELLO x"),
        "ERR Protocol version is not an integer or out of range"
    );
    assert_eq!(
        error("HELLO 3 AUTH onlyuser"),
        "ERR Syntax error in HELLO option 'AUTH'"
    );
    assert_eq!(
        error("HELLO 3 BOGUS"),
        "ERR Syntax error in HELLO option 'BOGUS'"
    );
}

#[test]
fn connection_subcommands() {
    assert_eq!(
        parse("COMMAND"),
        Ok(Command::Local(LocalCommand::Command(CommandQuery::All)))
    );
    assert_eq!(
        parse("command docs get"),
        Ok(Command::Local(LocalCommand::Command(CommandQuery::Docs(
            vec![b("get")]
        ))))
    );
    assert_eq!(
        error("COMMAND BOGUS"),
        "ERR unknown subcommand 'BOGUS'. Try COMMAND HELP."
    );
    assert_eq!(
        parse("CLIENT SETINFO lib-name redis-py"),
        Ok(Command::Local(LocalCommand::Client(
            ClientCommand::SetInfo {
                attribute: ClientAttribute::LibName,
                value: b("redis-py"),
            }
        )))
    );
    assert_eq!(
        error("CLIENT SETINFO color red"),
        "ERR Unrecognized option 'color'"
    );
    assert_eq!(
        error("CLIENT NOSUCH x"),
        "ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP."
    );
    let bad_name = Command::parse(&[b("CLIENT"), b("SETNAME"), b("a b")]);
    assert_eq!(bad_name, Err(CommandError::InvalidClientName));
    assert_eq!(
        parse("CONFIG GET save appendonly"),
        Ok(Command::Local(LocalCommand::ConfigGet(vec![
            b("save"),
            b("appendonly")
        ])))
    );
    assert_eq!(
        parse("CONFIG SET save x timeout 3"),
        Ok(Command::Local(LocalCommand::ConfigSet(vec![
            (b("save"), b("x")),
            (b("timeout"), b("3"))
        ])))
    );
    assert_eq!(
        error("CONFIG SET save"),
        "ERR wrong number of arguments for 'config|set' command"
    );
    assert_eq!(
        parse("CONFIG RESETSTAT"),
        Ok(Command::Local(LocalCommand::ConfigResetStat))
    );
    assert!(error("CONFIG REWRITE").starts_with("ERR CONFIG REWRITE is not supported"));
}

#[test]
#[expect(clippy::too_many_lines)]
fn raft_admin_commands() {
    assert_eq!(
        parse("RAFT.MEMBER ADD 4 127.0.0.1:7004 LEARNER"),
        Ok(Command::Admin(AdminCommand::MemberAdd {
            id: 4,
            peer_addr: "127.0.0.1:7004".into(),
            learner: true,
            client_addr: None,
        }))
    );
    for line in [
        "RAFT.MEMBER ADD 4 127.0.0.1:7004 LEARNER CLIENT node4.example:6379",
        "RAFT.MEMBER ADD 4 127.0.0.1:7004 client node4.example:6379 learner",
    ] {
        assert_eq!(
            parse(line),
            Ok(Command::Admin(AdminCommand::MemberAdd {
                id: 4,
                peer_addr: "127.0.0.1:7004".into(),
                learner: true,
                client_addr: Some("node4.example:6379".into()),
            })),
            "{line}"
        );
    }
    for line in [
        "RAFT.MEMBER ADD 4 127.0.0.1:7004 CLIENT",
        "RAFT.MEMBER ADD 4 127.0.0.1:7004 LEARNER LEARNER",
        "RAFT.MEMBER ADD 4 127.0.0.1:7004 CLIENT a:1 CLIENT b:2",
        "RAFT.MEMBER ADD 4 127.0.0.1:7004 VOTER",
    ] {
        assert_eq!(parse(line), Err(CommandError::Syntax), "{line}");
    }
    assert!(error("RAFT.MEMBER ADD 4 127.0.0.1:7004 CLIENT nope")
        .starts_with("ERR invalid client address"));
    assert!(error("RAFT.MEMBER ADD 4 127.0.0.1:7004 CLIENT :6379")
        .starts_with("ERR invalid client address"));
    assert_eq!(
        parse("raft.member add 4 node4:7004"),
        Ok(Command::Admin(AdminCommand::MemberAdd {
            id: 4,
            peer_addr: "node4:7004".into(),
            learner: false,
            client_addr: None,
        }))
    );
    assert_eq!(
        parse("RAFT.MEMBER REMOVE 2"),
        Ok(Command::Admin(AdminCommand::MemberRemove {
            id: 2,
            force: false
        }))
    );
    assert_eq!(
        parse("RAFT.MEMBER REMOVE 2 force"),
        Ok(Command::Admin(AdminCommand::MemberRemove {
            id: 2,
            force: true
        }))
    );
    assert_eq!(parse("RAFT.MEMBER REMOVE 2 NOW"), Err(CommandError::Syntax));
    assert_eq!(
        parse("RAFT.TRANSFER 3"),
        Ok(Command::Admin(AdminCommand::Transfer { id: 3 }))
    );
    assert_eq!(
        error("RAFT.TRANSFER 0"),
        "ERR invalid node id '0': expected a positive integer"
    );
    assert_eq!(
        error("RAFT.MEMBER ADD 4 nowhere"),
        "ERR invalid peer address 'nowhere': expected host:port"
    );
    assert_eq!(error("RAFT.MEMBER ADD 4 h:1 VOTER"), "ERR syntax error");
    assert_eq!(
        error("RAFT.MEMBER ADD 4"),
        "ERR wrong number of arguments for 'raft.member|add' command"
    );
    assert_eq!(
        error("RAFT.MEMBER JOIN 4"),
        "ERR unknown subcommand 'JOIN'. Try RAFT.MEMBER HELP."
    );
}

#[test]
fn debug_subcommands() {
    assert_eq!(
        parse("debug PANIC"),
        Ok(Command::Admin(AdminCommand::Debug(DebugCommand::Panic)))
    );
    // Unknown subcommands (and PANIC with arguments) parse, so that a node without
    // --enable-debug-command refuses every DEBUG alike.
    assert_eq!(
        parse("debug segfault"),
        Ok(Command::Admin(AdminCommand::Debug(DebugCommand::Unknown(
            "segfault".into()
        ))))
    );
    assert_eq!(
        parse("debug panic now"),
        Ok(Command::Admin(AdminCommand::Debug(DebugCommand::Unknown(
            "panic".into()
        ))))
    );
    assert_eq!(
        parse("debug"),
        Err(CommandError::WrongArity("debug".into()))
    );
}

#[test]
#[expect(clippy::too_many_lines)]
fn the_writes_refused_past_maxmemory_are_the_table_denyoom_ones() {
    for (line, name) in [
        ("SET k v", "set"),
        ("SET k v NX", "set"),
        ("DEL k", "del"),
        ("INCR k", "incr"),
        ("INCRBY k 2", "incrby"),
        ("DECR k", "decr"),
        ("DECRBY k 2", "decrby"),
        ("MSET k v", "mset"),
        ("APPEND k v", "append"),
        ("CAS k a b", "cas"),
        ("SETEX k 1 v", "setex"),
        ("PSETEX k 1 v", "psetex"),
        ("SETNX k v", "setnx"),
        ("MSETNX k v", "msetnx"),
        ("GETSET k v", "getset"),
        ("GETDEL k", "getdel"),
        ("GETEX k PERSIST", "getex"),
        ("EXPIRE k 1", "expire"),
        ("PEXPIRE k 1", "pexpire"),
        ("EXPIREAT k 1", "expireat"),
        ("PEXPIREAT k 1", "pexpireat"),
        ("PERSIST k", "persist"),
        ("FLUSHDB", "flushdb"),
        ("SWAPDB 0 1", "swapdb"),
        ("MOVE k 1", "move"),
        ("FLUSHALL", "flushall"),
        ("INCRBYFLOAT k 1.5", "incrbyfloat"),
        ("SETRANGE k 1 v", "setrange"),
        ("SETBIT k 7 1", "setbit"),
        ("RENAME a b", "rename"),
        ("RENAMENX a b", "renamenx"),
        ("COPY a b", "copy"),
        ("UNLINK a b", "unlink"),
        ("LPUSH k a", "lpush"),
        ("RPUSH k a", "rpush"),
        ("LPUSHX k a", "lpushx"),
        ("RPUSHX k a", "rpushx"),
        ("LPOP k", "lpop"),
        ("RPOP k 2", "rpop"),
        ("LSET k 0 a", "lset"),
        ("LREM k 0 a", "lrem"),
        ("LTRIM k 0 1", "ltrim"),
        ("LINSERT k BEFORE a b", "linsert"),
        ("RPOPLPUSH a b", "rpoplpush"),
        ("LMOVE a b LEFT RIGHT", "lmove"),
        ("HSET k f v", "hset"),
        ("HMSET k f v", "hmset"),
        ("HSETNX k f v", "hsetnx"),
        ("HDEL k f", "hdel"),
        ("HINCRBY k f 1", "hincrby"),
        ("HINCRBYFLOAT k f 1.5", "hincrbyfloat"),
        ("SADD k m", "sadd"),
        ("SREM k m", "srem"),
        ("SMOVE a b m", "smove"),
        ("SINTERSTORE d a b", "sinterstore"),
        ("SUNIONSTORE d a b", "sunionstore"),
        ("SDIFFSTORE d a b", "sdiffstore"),
        ("SPOP k", "spop"),
        ("ZADD k 1 m", "zadd"),
        ("ZREM k m", "zrem"),
        ("ZINCRBY k 1 m", "zincrby"),
        ("ZPOPMIN k", "zpopmin"),
        ("ZPOPMAX k", "zpopmax"),
        ("ZREMRANGEBYSCORE k 0 1", "zremrangebyscore"),
        ("ZREMRANGEBYRANK k 0 1", "zremrangebyrank"),
        ("SORT k STORE d", "sort"),
        ("LMPOP 1 k LEFT", "lmpop"),
        ("ZMPOP 1 k MIN", "zmpop"),
        ("BLPOP k 0", "blpop"),
        ("BRPOP k 0", "brpop"),
        ("BRPOPLPUSH a b 0", "brpoplpush"),
        ("BLMOVE a b LEFT RIGHT 0", "blmove"),
        ("BLMPOP 0 1 k LEFT", "blmpop"),
        ("BZPOPMIN k 0", "bzpopmin"),
        ("BZPOPMAX k 0", "bzpopmax"),
        ("BZMPOP 0 1 k MAX", "bzmpop"),
        ("RAFT.BLOCKED 0 0 BLPOP k 0", "raft.blocked"),
        ("XADD k * f v", "xadd"),
        ("XTRIM k MAXLEN 1", "xtrim"),
        ("XDEL k 1-0", "xdel"),
        ("XSETID k 1-0", "xsetid"),
        ("XGROUP CREATE k g $ MKSTREAM", "xgroup"),
        ("XREADGROUP GROUP g c STREAMS k >", "xreadgroup"),
        ("XACK k g 1-0", "xack"),
        ("XCLAIM k g c 0 1-0", "xclaim"),
        ("XAUTOCLAIM k g c 0 0", "xautoclaim"),
    ] {
        let Ok(Command::Write(command)) = parse(line) else {
            panic!("{line} is not a write")
        };
        let spec = CommandSpec::lookup(name.as_bytes()).unwrap();
        assert_eq!(
            command.may_grow_memory(),
            spec.flags.contains(&"denyoom"),
            "{line}"
        );
    }
    // Every write in the table is covered above.
    let writes = COMMAND_TABLE
        .iter()
        .filter(|spec| spec.class == CommandClass::Write)
        .count();
    assert_eq!(writes, 85);
}

fn args(line: &str) -> Vec<Bytes> {
    line.split(' ').map(b).collect()
}

fn forward_error(line: &str) -> String {
    parse_forward(&args(line)).expect_err(line).to_string()
}

#[test]
fn raft_forward_carries_a_request_id() {
    use crate::RequestId;
    let id = |client_id, seq| RequestId { client_id, seq };
    assert_eq!(parse_forward(&args("RAFT.FORWARD 0 1")), Ok(id(0, 1)));
    assert_eq!(
        parse_forward(&args(
            "raft.forward 18446744073709551615 18446744073709551615"
        )),
        Ok(id(u64::MAX, u64::MAX))
    );
    for sent in [id(0x5eed, 1), id(u64::MAX, 7), id(1, u64::MAX)] {
        let request = forward_request(sent);
        assert!(is_forward(&request));
        assert_eq!(parse_forward(&request), Ok(sent));
    }
    assert!(!is_forward(&args("SET k v")));
    assert!(!is_forward(&[]));
}

#[test]
fn a_malformed_raft_forward_is_an_error() {
    let arity = "ERR wrong number of arguments for 'raft.forward' command";
    for line in ["RAFT.FORWARD", "RAFT.FORWARD 1", "RAFT.FORWARD 1 2 SET k v"] {
        assert_eq!(forward_error(line), arity, "{line}");
    }
    let client_id = "ERR RAFT.FORWARD: the client id is not an unsigned 64-bit integer";
    let seq = "ERR RAFT.FORWARD: the seq is not a positive 64-bit integer";
    for bad in ["-1", "+1", "01", "1.5", "x", "0x10", "18446744073709551616"] {
        assert_eq!(forward_error(&format!("RAFT.FORWARD {bad} 1")), client_id);
        assert_eq!(forward_error(&format!("RAFT.FORWARD 1 {bad}")), seq);
    }
    assert_eq!(forward_error("RAFT.FORWARD 1 0"), seq, "seqs count from 1");
    let empty = [b("RAFT.FORWARD"), Bytes::new(), b("1")];
    assert_eq!(parse_forward(&empty).unwrap_err().to_string(), client_id);
    // Oversize: a number far longer than any u64 is refused by its length, not parsed.
    let long = "9".repeat(1 << 20);
    let oversize = [b("RAFT.FORWARD"), b("1"), b(&long)];
    assert_eq!(parse_forward(&oversize).unwrap_err().to_string(), seq);
}

#[test]
fn only_a_write_or_a_transactions_exec_takes_a_forwarded_id() {
    for line in ["SET k v", "incr n", "DEL a b", "CAS k a b", "MSET a 1"] {
        assert_eq!(may_follow_forward(&args(line), false), Ok(()), "{line}");
    }
    assert_eq!(may_follow_forward(&args("exec"), true), Ok(()));
    let refused = |line: &str, in_transaction| {
        may_follow_forward(&args(line), in_transaction)
            .expect_err(line)
            .to_string()
    };
    let not_a_write = "ERR RAFT.FORWARD: only a write may follow it";
    for line in [
        "GET k",
        "EXEC",
        "MULTI",
        "PING",
        "RAFT.MEMBER REMOVE 2",
        "NOSUCH x",
        "",
    ] {
        assert_eq!(refused(line, false), not_a_write, "{line}");
    }
    let not_exec = "ERR RAFT.FORWARD: inside a transaction only EXEC may follow it";
    for line in ["SET k v", "DISCARD", "GET k"] {
        assert_eq!(refused(line, true), not_exec, "{line}");
    }
    let nested = "ERR RAFT.FORWARD: nested: a request id is already waiting for its write";
    assert_eq!(refused("RAFT.FORWARD 1 2", false), nested);
    assert_eq!(refused("raft.forward 1 2", true), nested);
}

#[test]
fn raft_forward_is_no_command_clients_know() {
    assert!(error("RAFT.FORWARD 1 2").starts_with("ERR unknown command 'RAFT.FORWARD'"));
    assert!(CommandSpec::lookup(FORWARD.as_bytes()).is_none());
}

#[test]
fn function_flush_and_list_answer_that_there_are_no_functions() {
    for line in [
        "FUNCTION FLUSH",
        "function flush async",
        "FUNCTION FLUSH SYNC",
    ] {
        assert_eq!(
            parse(line),
            Ok(Command::Local(LocalCommand::FunctionFlush)),
            "{line}"
        );
    }
    assert_eq!(
        parse("FUNCTION LIST"),
        Ok(Command::Local(LocalCommand::FunctionList))
    );
    assert_eq!(error("FUNCTION FLUSH now"), "ERR syntax error");
    assert_eq!(
        error("FUNCTION LOAD x"),
        "ERR unknown subcommand 'LOAD'. Try FUNCTION HELP."
    );
}

mod strings_and_keys;
