//! Turning arguments into a [`Command`].

use bytes::Bytes;

use super::blocking;
use super::collections::{self, Typed};
use super::parse_keys::{parse_expire, parse_getex, parse_set, parse_setex};
use super::parse_keyspace::{parse_copy, parse_scan};
use super::parse_strings::{
    bit_offset, parse_bitcount, parse_getrange, parse_incr_by_float, parse_lcs, parse_setbit,
    parse_setrange,
};
use super::sort::parse_sort;
use super::zsets;
use super::{streams, CollectionRead, StreamRead, XGROUP_HELP};
use super::{
    AdminCommand, ClientAttribute, ClientCommand, ClientFilter, Command, CommandError,
    CommandQuery, CommandSpec, DebugCommand, Expiry, HelloArgs, KillFilters, ListFilter,
    LocalCommand, ReadCommand, ReplyMode, SetCondition, TransactionCommand, TtlCommand, TtlForm,
    WatchedKey, WriteCommand,
};
use keel_resp::number::{parse_i64, parse_u64};
use keel_resp::ProtocolVersion;

/// How much of the arguments Redis quotes back in "unknown command" errors.
const UNKNOWN_PREVIEW_BYTES_MAX: usize = 128;

#[expect(clippy::too_many_lines)]
pub(super) fn parse(args: &[Bytes]) -> Result<Command, CommandError> {
    let Some(name) = args.first() else {
        return Err(CommandError::Empty);
    };
    let Some(spec) = CommandSpec::lookup(name) else {
        return Err(unknown_command(args));
    };
    if !spec.arity_ok(args.len()) {
        return Err(CommandError::WrongArity(spec.name.to_string()));
    }
    let rest = &args[1..];
    let key = || rest[0].clone();
    Ok(match spec.name {
        "get" => Command::Read(ReadCommand::Get { key: key() }),
        "mget" => Command::Read(ReadCommand::MGet {
            keys: rest.to_vec(),
        }),
        // TOUCH only counts the keys that exist here: there is no access time to update.
        "exists" | "touch" => Command::Read(ReadCommand::Exists {
            keys: rest.to_vec(),
        }),
        "strlen" => Command::Read(ReadCommand::StrLen { key: key() }),
        "dbsize" => Command::Read(ReadCommand::DbSize),
        "set" => Command::Write(parse_set(rest)?),
        // A removal is one step of the log either way: UNLINK is DEL.
        "del" | "unlink" => Command::Write(WriteCommand::Del {
            keys: rest.to_vec(),
        }),
        "incr" => incr_by(key(), 1),
        "decr" => incr_by(key(), -1),
        "incrby" => incr_by(key(), integer(&rest[1])?),
        "decrby" => {
            let amount = integer(&rest[1])?;
            // -i64::MIN does not exist; Redis reports it as an overflow too.
            incr_by(key(), amount.checked_neg().ok_or(CommandError::Overflow)?)
        }
        "mset" => Command::Write(WriteCommand::MSet {
            pairs: pairs(rest, spec)?,
        }),
        "append" => Command::Write(WriteCommand::Append {
            key: key(),
            value: rest[1].clone(),
        }),
        "cas" => Command::Write(WriteCommand::Cas {
            key: key(),
            expected: rest[1].clone(),
            new: rest[2].clone(),
        }),
        "setex" => Command::Write(parse_setex(rest, false)?),
        "psetex" => Command::Write(parse_setex(rest, true)?),
        "setnx" => Command::Write(WriteCommand::MSetNx {
            pairs: vec![(key(), rest[1].clone())],
        }),
        "msetnx" => Command::Write(WriteCommand::MSetNx {
            pairs: pairs(rest, spec)?,
        }),
        "getset" => Command::Write(WriteCommand::SetWith {
            key: key(),
            value: rest[1].clone(),
            condition: SetCondition::Always,
            expiry: Expiry::Clear,
            get: true,
            command: TtlCommand::GetSet,
        }),
        "getdel" => Command::Write(WriteCommand::GetDel { key: key() }),
        "getex" => match parse_getex(rest)? {
            Some(write) => Command::Write(write),
            None => Command::Read(ReadCommand::Get { key: key() }),
        },
        "expire" => Command::Write(parse_expire(rest, TtlCommand::Expire)?),
        "pexpire" => Command::Write(parse_expire(rest, TtlCommand::PExpire)?),
        "expireat" => Command::Write(parse_expire(rest, TtlCommand::ExpireAt)?),
        "pexpireat" => Command::Write(parse_expire(rest, TtlCommand::PExpireAt)?),
        "persist" => Command::Write(WriteCommand::Persist { key: key() }),
        "ttl" => ttl(key(), TtlForm::RemainingSeconds),
        "pttl" => ttl(key(), TtlForm::RemainingMs),
        "expiretime" => ttl(key(), TtlForm::AtSeconds),
        "pexpiretime" => ttl(key(), TtlForm::AtMs),
        "incrbyfloat" => Command::Write(parse_incr_by_float(rest)?),
        "setrange" => Command::Write(parse_setrange(rest)?),
        "setbit" => Command::Write(parse_setbit(rest)?),
        "getrange" | "substr" => Command::Read(parse_getrange(rest)?),
        "getbit" => Command::Read(ReadCommand::GetBit {
            key: key(),
            offset: bit_offset(&rest[1])?,
        }),
        "bitcount" => Command::Read(parse_bitcount(rest)?),
        "lcs" => Command::Read(parse_lcs(rest)?),
        "rename" | "renamenx" => Command::Write(WriteCommand::Rename {
            key: key(),
            new_key: rest[1].clone(),
            only_if_absent: spec.name == "renamenx",
        }),
        "copy" => Command::Write(parse_copy(rest)?),
        "type" => Command::Read(ReadCommand::Type { key: key() }),
        "randomkey" => Command::Read(ReadCommand::RandomKey),
        "keys" => Command::Read(ReadCommand::Keys {
            pattern: rest[0].clone(),
        }),
        "scan" => Command::Read(ReadCommand::Scan(parse_scan(rest)?)),
        "flushdb" | "flushall" => {
            let flush = match spec.name {
                "flushdb" => WriteCommand::FlushDb,
                _ => WriteCommand::FlushAll,
            };
            match rest {
                [] => Command::Write(flush),
                // Both run as one entry of the log: SYNC and ASYNC mean the same here.
                [mode] if is(mode, "SYNC") || is(mode, "ASYNC") => Command::Write(flush),
                _ => return Err(CommandError::Syntax),
            }
        }
        "swapdb" => Command::Write(WriteCommand::SwapDb {
            a: db_index(&rest[0]).map_err(|_| CommandError::Invalid("invalid first DB index"))?,
            b: db_index(&rest[1]).map_err(|_| CommandError::Invalid("invalid second DB index"))?,
        }),
        "move" => Command::Write(WriteCommand::Move {
            key: key(),
            db: db_index(&rest[1])?,
        }),
        "ping" => match rest {
            [] => local(LocalCommand::Ping(None)),
            [message] => local(LocalCommand::Ping(Some(message.clone()))),
            _ => return Err(CommandError::WrongArity(spec.name.to_string())),
        },
        "echo" => local(LocalCommand::Echo(rest[0].clone())),
        "hello" => local(LocalCommand::Hello(parse_hello(rest)?)),
        "command" => local(LocalCommand::Command(parse_command_query(rest)?)),
        "client" => local(LocalCommand::Client(parse_client(rest)?)),
        "config" => parse_config(rest)?,
        "select" => local(LocalCommand::Select(db_index(&rest[0])?)),
        "publish" | "spublish" => local(LocalCommand::Publish {
            shard: spec.name == "spublish",
            channel: rest[0].clone(),
            message: rest[1].clone(),
        }),
        "subscribe" | "psubscribe" | "ssubscribe" | "unsubscribe" | "punsubscribe"
        | "sunsubscribe" | "pubsub" => local(LocalCommand::PubSub),
        "quit" => local(LocalCommand::Quit),
        "info" => local(LocalCommand::Info(rest.to_vec())),
        "auth" => match rest {
            [password] => local(LocalCommand::Auth {
                user: None,
                password: password.clone(),
            }),
            [user, password] => local(LocalCommand::Auth {
                user: Some(user.clone()),
                password: password.clone(),
            }),
            _ => return Err(CommandError::Syntax),
        },
        "raft.status" => local(LocalCommand::RaftStatus),
        "monitor" => local(LocalCommand::Monitor),
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "script" => local(LocalCommand::Script(
            super::script::parse_script(spec.name, rest)?,
        )),
        "function" => match rest {
            [sub] if is(sub, "FLUSH") => local(LocalCommand::FunctionFlush),
            [sub, mode] if is(sub, "FLUSH") && (is(mode, "ASYNC") || is(mode, "SYNC")) => {
                local(LocalCommand::FunctionFlush)
            }
            [sub] if is(sub, "LIST") => local(LocalCommand::FunctionList),
            [sub, ..] if is(sub, "FLUSH") => return Err(CommandError::Syntax),
            [sub, ..] => {
                return Err(CommandError::UnknownSubcommand {
                    command: "FUNCTION",
                    subcommand: lossy(sub),
                })
            }
            [] => unreachable!("arity checked: at least one"),
        },
        "raft.member" => Command::Admin(parse_member(rest)?),
        "raft.transfer" => Command::Admin(AdminCommand::Transfer {
            id: node_id(&rest[0])?,
        }),
        "raft.snapshot" => Command::Admin(AdminCommand::Snapshot { save: false }),
        "save" => Command::Admin(AdminCommand::Snapshot { save: true }),
        "time" => local(LocalCommand::Time),
        "shutdown" => local(LocalCommand::Shutdown),
        "debug" => Command::Admin(AdminCommand::Debug(
            if is(&rest[0], "PANIC") && rest.len() == 1 {
                DebugCommand::Panic
            } else {
                DebugCommand::Unknown(lossy(&rest[0]))
            },
        )),
        "multi" => Command::Transaction(TransactionCommand::Multi),
        "exec" => Command::Transaction(TransactionCommand::Exec),
        "discard" => Command::Transaction(TransactionCommand::Discard),
        "watch" => Command::Transaction(TransactionCommand::Watch(rest.to_vec())),
        "unwatch" => Command::Transaction(TransactionCommand::Unwatch),
        "raft.watchpoint" => Command::Read(ReadCommand::WatchPoint),
        "raft.watched" => Command::Transaction(TransactionCommand::Watched(watched(rest)?)),
        "sort" | "sort_ro" => parse_sort(args, spec.name == "sort_ro")?,
        // XGROUP HELP reads nothing, and is answered as a read.
        "xgroup" if is(&rest[0], "HELP") => {
            streams_help_arity(rest)?;
            Command::Read(ReadCommand::Collection(Typed {
                op: CollectionRead::Stream(StreamRead::Help(XGROUP_HELP)),
                args: args.to_vec(),
            }))
        }
        name if collections::WRITES.contains(&name)
            || zsets::WRITES.contains(&name)
            || streams::WRITES.contains(&name)
            || blocking::NAMES.contains(&name) =>
        {
            Command::Write(WriteCommand::Collection(Typed {
                op: collections::parse_write(name, rest)?,
                args: args.to_vec(),
            }))
        }
        name if collections::READS.contains(&name)
            || zsets::READS.contains(&name)
            || streams::READS.contains(&name) =>
        {
            Command::Read(ReadCommand::Collection(Typed {
                op: collections::parse_read(name, rest)?,
                args: args.to_vec(),
            }))
        }
        other => unreachable!("command {other} is in the table but has no parser"),
    })
}

/// XGROUP HELP takes nothing more.
fn streams_help_arity(rest: &[Bytes]) -> Result<(), CommandError> {
    if rest.len() != 1 {
        return Err(CommandError::WrongArity("xgroup|help".to_string()));
    }
    Ok(())
}

fn local(command: LocalCommand) -> Command {
    Command::Local(command)
}

/// `key value [key value ...]` (MSET, MSETNX).
fn pairs(rest: &[Bytes], spec: &CommandSpec) -> Result<Vec<(Bytes, Bytes)>, CommandError> {
    if rest.len() % 2 != 0 {
        return Err(CommandError::WrongArity(spec.name.to_string()));
    }
    Ok(rest
        .chunks_exact(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect())
}

/// `key index time_ms [key index time_ms ...]`.
fn watched(rest: &[Bytes]) -> Result<Vec<WatchedKey>, CommandError> {
    if rest.len() % 3 != 0 {
        return Err(CommandError::WrongArity("raft.watched".to_string()));
    }
    rest.chunks_exact(3)
        .map(|w| {
            let number = |arg: &[u8]| parse_u64(arg).ok_or(CommandError::NotInteger);
            Ok(WatchedKey {
                db: 0,
                key: w[0].clone(),
                index: number(&w[1])?,
                time_ms: number(&w[2])?,
            })
        })
        .collect()
}

fn ttl(key: Bytes, form: TtlForm) -> Command {
    Command::Read(ReadCommand::Ttl { key, form })
}

fn incr_by(key: Bytes, delta: i64) -> Command {
    Command::Write(WriteCommand::IncrBy { key, delta })
}

pub(super) fn integer(arg: &[u8]) -> Result<i64, CommandError> {
    parse_i64(arg).ok_or(CommandError::NotInteger)
}

pub(super) fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

pub(super) fn lossy(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).into_owned()
}

fn unknown_command(args: &[Bytes]) -> CommandError {
    let mut name = lossy(&args[0]);
    truncate(&mut name, UNKNOWN_PREVIEW_BYTES_MAX);
    let mut args_preview = String::new();
    for arg in &args[1..] {
        if args_preview.len() >= UNKNOWN_PREVIEW_BYTES_MAX {
            break;
        }
        let mut shown = lossy(arg);
        truncate(&mut shown, UNKNOWN_PREVIEW_BYTES_MAX - args_preview.len());
        args_preview.push('\'');
        args_preview.push_str(&shown);
        args_preview.push_str("' ");
    }
    CommandError::Unknown { name, args_preview }
}

fn truncate(text: &mut String, bytes_max: usize) {
    if text.len() > bytes_max {
        let mut end = bytes_max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`.
fn parse_hello(rest: &[Bytes]) -> Result<HelloArgs, CommandError> {
    let mut hello = HelloArgs::default();
    let Some((version, mut options)) = rest.split_first() else {
        return Ok(hello);
    };
    hello.protover = Some(match parse_i64(version) {
        Some(2) => ProtocolVersion::Resp2,
        Some(3) => ProtocolVersion::Resp3,
        Some(_) => return Err(CommandError::NoProto),
        None => return Err(CommandError::ProtocolVersionNotInteger),
    });
    while let Some((option, after)) = options.split_first() {
        if is(option, "AUTH") && after.len() >= 2 {
            hello.auth = Some((after[0].clone(), after[1].clone()));
            options = &after[2..];
        } else if is(option, "SETNAME") && !after.is_empty() {
            hello.setname = Some(valid_client_name(&after[0])?);
            options = &after[1..];
        } else {
            return Err(CommandError::HelloSyntax(lossy(option)));
        }
    }
    Ok(hello)
}

/// Redis allows names of printable characters without spaces (`!` through `~`).
fn valid_client_name(name: &Bytes) -> Result<Bytes, CommandError> {
    if name.iter().all(|&b| (b'!'..=b'~').contains(&b)) {
        Ok(name.clone())
    } else {
        Err(CommandError::InvalidClientName)
    }
}

fn parse_command_query(rest: &[Bytes]) -> Result<CommandQuery, CommandError> {
    let Some((sub, names)) = rest.split_first() else {
        return Ok(CommandQuery::All);
    };
    let arity = |ok: bool, name: &str| {
        if ok {
            Ok(())
        } else {
            Err(CommandError::WrongArity(format!("command|{name}")))
        }
    };
    if is(sub, "COUNT") {
        arity(names.is_empty(), "count")?;
        Ok(CommandQuery::Count)
    } else if is(sub, "LIST") {
        Ok(CommandQuery::List(parse_list_filter(names)?))
    } else if is(sub, "GETKEYS") || is(sub, "GETKEYSANDFLAGS") {
        let flags = is(sub, "GETKEYSANDFLAGS");
        let name = if flags { "getkeysandflags" } else { "getkeys" };
        // Redis's arity (-4): the command and at least one of its arguments.
        arity(names.len() >= 2, name)?;
        Ok(CommandQuery::GetKeys {
            args: names.to_vec(),
            flags,
        })
    } else if is(sub, "DOCS") {
        Ok(CommandQuery::Docs(names.to_vec()))
    } else if is(sub, "INFO") {
        Ok(CommandQuery::Info(names.to_vec()))
    } else {
        Err(CommandError::UnknownSubcommand {
            command: "COMMAND",
            subcommand: lossy(sub),
        })
    }
}

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]`: anything else is
/// Redis's syntax error.
fn parse_list_filter(args: &[Bytes]) -> Result<ListFilter, CommandError> {
    match args {
        [] => Ok(ListFilter::All),
        [filterby, kind, value] if is(filterby, "FILTERBY") => {
            if is(kind, "MODULE") {
                Ok(ListFilter::Module(value.clone()))
            } else if is(kind, "ACLCAT") {
                Ok(ListFilter::AclCategory(value.clone()))
            } else if is(kind, "PATTERN") {
                Ok(ListFilter::Pattern(value.clone()))
            } else {
                Err(CommandError::Syntax)
            }
        }
        _ => Err(CommandError::Syntax),
    }
}

fn parse_client(rest: &[Bytes]) -> Result<ClientCommand, CommandError> {
    let (sub, args) = rest.split_first().expect("arity checked: at least one");
    let exact = |n: usize, name: &str| {
        if args.len() == n {
            Ok(())
        } else {
            Err(CommandError::WrongArity(format!("client|{name}")))
        }
    };
    if is(sub, "SETNAME") {
        exact(1, "setname")?;
        Ok(ClientCommand::SetName(valid_client_name(&args[0])?))
    } else if is(sub, "GETNAME") {
        exact(0, "getname")?;
        Ok(ClientCommand::GetName)
    } else if is(sub, "SETINFO") {
        exact(2, "setinfo")?;
        let attribute = if is(&args[0], "LIB-NAME") {
            ClientAttribute::LibName
        } else if is(&args[0], "LIB-VER") {
            ClientAttribute::LibVersion
        } else {
            return Err(CommandError::UnrecognizedOption(lossy(&args[0])));
        };
        // The same character rules as names (Redis checks both the same way).
        let value = valid_client_name(&args[1])?;
        Ok(ClientCommand::SetInfo { attribute, value })
    } else if is(sub, "ID") {
        exact(0, "id")?;
        Ok(ClientCommand::Id)
    } else if is(sub, "INFO") {
        exact(0, "info")?;
        Ok(ClientCommand::Info)
    } else if is(sub, "LIST") {
        parse_client_list(args).map(ClientCommand::List)
    } else if is(sub, "KILL") {
        parse_client_kill(args)
    } else if is(sub, "UNBLOCK") {
        parse_client_unblock(args)
    } else if is(sub, "REPLY") {
        exact(1, "reply")?;
        let modes = [
            ("ON", ReplyMode::On),
            ("OFF", ReplyMode::Off),
            ("SKIP", ReplyMode::Skip),
        ];
        let mode = modes.iter().find(|(word, _)| is(&args[0], word));
        mode.map(|&(_, mode)| ClientCommand::Reply(mode))
            .ok_or(CommandError::Syntax)
    } else {
        Err(CommandError::UnknownSubcommand {
            command: "CLIENT",
            subcommand: lossy(sub),
        })
    }
}

/// `CLIENT UNBLOCK id [TIMEOUT | ERROR]`, checked in Redis's order and words.
fn parse_client_unblock(args: &[Bytes]) -> Result<ClientCommand, CommandError> {
    let error = match args {
        [] => return Err(CommandError::WrongArity("client|unblock".to_string())),
        [_] => false,
        [_, how] if is(how, "TIMEOUT") => false,
        [_, how] if is(how, "ERROR") => true,
        [_, _] => {
            return Err(CommandError::Invalid(
                "CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
            ))
        }
        _ => {
            return Err(CommandError::SubcommandSyntax {
                command: "CLIENT",
                subcommand: "unblock".to_string(),
            })
        }
    };
    // Redis reads the id as a signed integer; no client has a negative one.
    let id = integer(&args[0])?;
    Ok(ClientCommand::Unblock {
        id: u64::try_from(id).unwrap_or(0),
        error,
    })
}

/// `CLIENT LIST [TYPE normal | master | replica | slave | pubsub] [ID id [id ...]]`.
fn parse_client_list(args: &[Bytes]) -> Result<ClientFilter, CommandError> {
    match args {
        [] => Ok(ClientFilter::All),
        [option, kind] if is(option, "TYPE") => {
            if is(kind, "NORMAL") {
                Ok(ClientFilter::All)
            } else if ["MASTER", "REPLICA", "SLAVE", "PUBSUB"]
                .iter()
                .any(|k| is(kind, k))
            {
                Ok(ClientFilter::None)
            } else {
                Err(CommandError::UnknownClientType(lossy(kind)))
            }
        }
        [option, ids @ ..] if is(option, "ID") && !ids.is_empty() => ids
            .iter()
            .map(|id| {
                parse_u64(id)
                    .filter(|&id| id > 0)
                    .ok_or(CommandError::InvalidClientId)
            })
            .collect::<Result<_, _>>()
            .map(ClientFilter::Ids),
        _ => Err(CommandError::Syntax),
    }
}

/// `CLIENT KILL ip:port`, or `CLIENT KILL [ID id] [TYPE type] [USER user] [ADDR ip:port]
/// [LADDR ip:port] [SKIPME yes | no]` (Redis's checks and words).
fn parse_client_kill(args: &[Bytes]) -> Result<ClientCommand, CommandError> {
    match args {
        [] => return Err(CommandError::WrongArity("client|kill".to_string())),
        [addr] => return Ok(ClientCommand::KillAddr(lossy(addr))),
        _ if args.len() % 2 != 0 => return Err(CommandError::Syntax),
        _ => {}
    }
    let mut filters = KillFilters {
        id: None,
        addr: None,
        laddr: None,
        matches_none: false,
        skip_me: true,
    };
    for pair in args.chunks(2) {
        let (option, value) = (&pair[0], &pair[1]);
        if is(option, "ID") {
            let id = parse_u64(value).filter(|&id| id > 0);
            filters.id = Some(id.ok_or(CommandError::KillClientId)?);
        } else if is(option, "TYPE") {
            filters.matches_none = match parse_client_list(&[option.clone(), value.clone()])? {
                ClientFilter::None => true,
                _ => filters.matches_none,
            };
        } else if is(option, "USER") {
            // The default user is the only one: it is every connection's.
            if !is(value, "default") {
                return Err(CommandError::NoSuchUser(lossy(value)));
            }
        } else if is(option, "ADDR") {
            filters.addr = Some(lossy(value));
        } else if is(option, "LADDR") {
            filters.laddr = Some(lossy(value));
        } else if is(option, "SKIPME") {
            filters.skip_me = if is(value, "YES") {
                true
            } else if is(value, "NO") {
                false
            } else {
                return Err(CommandError::Syntax);
            };
        } else {
            return Err(CommandError::Syntax);
        }
    }
    Ok(ClientCommand::Kill(filters))
}

fn parse_config(rest: &[Bytes]) -> Result<Command, CommandError> {
    let (sub, patterns) = rest.split_first().expect("arity checked: at least one");
    if is(sub, "GET") {
        if patterns.is_empty() {
            return Err(CommandError::WrongArity("config|get".to_string()));
        }
        Ok(local(LocalCommand::ConfigGet(patterns.to_vec())))
    } else if is(sub, "SET") {
        // Redis checks the count before the names.
        if patterns.len() < 2 || patterns.len() % 2 != 0 {
            return Err(CommandError::WrongArity("config|set".to_string()));
        }
        let pairs = patterns
            .chunks(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect();
        Ok(local(LocalCommand::ConfigSet(pairs)))
    } else if is(sub, "RESETSTAT") {
        if !patterns.is_empty() {
            return Err(CommandError::WrongArity("config|resetstat".to_string()));
        }
        Ok(local(LocalCommand::ConfigResetStat))
    } else if is(sub, "REWRITE") {
        Err(CommandError::Unsupported(
            "CONFIG REWRITE is not supported: keel is configured by its command line and config \
             file, which it never rewrites",
        ))
    } else {
        Err(CommandError::UnknownSubcommand {
            command: "CONFIG",
            subcommand: lossy(sub),
        })
    }
}

fn node_id(arg: &[u8]) -> Result<u64, CommandError> {
    parse_u64(arg)
        .filter(|&id| id > 0)
        .ok_or_else(|| CommandError::InvalidNodeId(lossy(arg)))
}

/// Longest `host:port` an admin command takes: the runtime's bound on an announced client address
/// (`keel_transport::wire::CLIENT_ADDR_BYTES_MAX`; a test checks they agree).
pub const ADDR_BYTES_MAX: usize = 300;

/// `host:port` with a non-empty host of printable ASCII and a numeric port, at most
/// [`ADDR_BYTES_MAX`] bytes; names are resolved by the runtime.
fn host_port(arg: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(arg).ok()?;
    let (host, port) = text.rsplit_once(':')?;
    let valid = text.len() <= ADDR_BYTES_MAX
        && !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_graphic())
        && port.parse::<u16>().is_ok();
    valid.then(|| text.to_string())
}

fn peer_addr(arg: &[u8]) -> Result<String, CommandError> {
    host_port(arg).ok_or_else(|| CommandError::InvalidPeerAddr(lossy(arg)))
}

fn client_addr(arg: &[u8]) -> Result<String, CommandError> {
    host_port(arg).ok_or_else(|| CommandError::InvalidClientAddr(lossy(arg)))
}

/// `RAFT.MEMBER ADD id peer-addr [LEARNER] [CLIENT client-addr]` (options in any order, each at
/// most once) | `RAFT.MEMBER REMOVE id [FORCE]`.
fn parse_member(rest: &[Bytes]) -> Result<AdminCommand, CommandError> {
    let (sub, args) = rest.split_first().expect("arity checked: at least two");
    if is(sub, "ADD") {
        let [id, peer, options @ ..] = args else {
            return Err(CommandError::WrongArity("raft.member|add".to_string()));
        };
        let (mut learner, mut client) = (false, None);
        let mut options = options.iter();
        while let Some(option) = options.next() {
            if is(option, "LEARNER") && !learner {
                learner = true;
            } else if is(option, "CLIENT") && client.is_none() {
                let addr = options.next().ok_or(CommandError::Syntax)?;
                client = Some(client_addr(addr)?);
            } else {
                return Err(CommandError::Syntax);
            }
        }
        Ok(AdminCommand::MemberAdd {
            id: node_id(id)?,
            peer_addr: peer_addr(peer)?,
            learner,
            client_addr: client,
        })
    } else if is(sub, "REMOVE") {
        let force = match args {
            [_] => false,
            [_, flag] if is(flag, "FORCE") => true,
            [_, _] => return Err(CommandError::Syntax),
            _ => return Err(CommandError::WrongArity("raft.member|remove".to_string())),
        };
        Ok(AdminCommand::MemberRemove {
            id: node_id(&args[0])?,
            force,
        })
    } else {
        Err(CommandError::UnknownSubcommand {
            command: "RAFT.MEMBER",
            subcommand: lossy(sub),
        })
    }
}

/// A database index: an integer (else Redis's integer error), from 0 to below
/// `DATABASES_MAX` (else `DB index is out of range`; the connection checks it against
/// `databases`).
pub(crate) fn db_index(arg: &Bytes) -> Result<u32, CommandError> {
    let n = integer(arg)?;
    match u32::try_from(n) {
        Ok(db) if db < crate::state_machine::DATABASES_MAX => Ok(db),
        _ => Err(CommandError::DbIndexOutOfRange),
    }
}
