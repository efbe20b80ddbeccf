//! One client connection's protocol state, sans-IO: the part of the server that needs no
//! consensus. The runtime (or a test server) owns the socket and does:
//!
//! ```text
//! read bytes -> Decoder::decode -> ClientConnection::dispatch(args, node)
//!     Dispatch::Reply / ReplyAndClose   answered here (PING, HELLO, CLIENT, CONFIG GET, INFO, ...)
//!     Dispatch::Write(cmd)              propose LogCommand { client_id, seq, stamp_ms, cmd }
//!                                       (stamped when its batch is proposed: `pipeline.rs`),
//!                                       reply with the state machine's WriteReply
//!     Dispatch::Read(cmd)               linearizable read, reply with KvStateMachine::read
//!     Dispatch::Admin(cmd)              membership / transfer / snapshot, by the runtime
//!     Dispatch::Exec(transaction)       propose LogCommand { client_id, seq, stamp_ms,
//!                                       EXEC [commands] } (one entry), reply with the state
//!                                       machine's array reply
//! -> ClientConnection::encode(reply) in this connection's protocol version -> write bytes
//! ```
//!
//! Transactions (MULTI ... EXEC) are queued here, as Redis does: after `MULTI` (`+OK`) every
//! command is parsed and checked at once and answered `+QUEUED`: a data command (or PING / ECHO)
//! joins the log entry EXEC proposes; a command this node answers by itself (SELECT, INFO,
//! CONFIG GET, COMMAND, CLIENT GETNAME / ID / INFO, RAFT.STATUS, UNWATCH) is answered now and its
//! reply takes its place in EXEC's array ([`Transaction::local_replies`]). An invalid one
//! (unknown, wrong arity, syntax), one not allowed inside a transaction (HELLO, AUTH, CLIENT
//! SETNAME / SETINFO, CONFIG SET, RAFT.*, DEBUG: they change the connection, node or cluster),
//! or one over the queue bounds ([`Limits::multi_commands_max`], [`Limits::multi_bytes_max`]) is
//! answered with its error and aborts the transaction: `EXEC` then answers `-EXECABORT` and
//! nothing runs. `WATCH` inside a transaction is an error that leaves it as it was, as is a
//! nested `MULTI`. `DISCARD` drops the queue; `QUIT` closes the connection, queue and all. `EXEC`
//! of a queue with neither a data command nor a watched key answers the local replies here;
//! otherwise it becomes [`Dispatch::Exec`].
//!
//! WATCH outside a transaction is a read of the watch point: a linearizable read
//! (`RAFT.WATCHPOINT`: the applied index and log time; on a follower the leader reads it),
//! recorded per key by [`ClientConnection::watch_point`] when the pipeline releases it
//! ([`pipeline::Release::Watched`]); keel-redis's `state_machine/key_metadata.rs` decides. EXEC's
//! entry carries the watched keys ([`LoggedCommand::WatchedExec`], decided by the state
//! machine); a follower forwards them ahead of the queued requests as `RAFT.WATCHED`. [`splice`]
//! puts the local replies into EXEC's array by position; it is also where a forwarded
//! transaction's reply is assembled again.
//!
//! `requirepass`: before the password nothing but AUTH, HELLO ... AUTH and QUIT is served; the
//! comparison takes constant time.
//!
//! While [`NodeInfo::script_busy`] says a script has run past `busy-reply-threshold`, commands
//! are answered `-BUSY` (inside MULTI: aborting it, EXEC `-EXECABORT ... BUSY`). INFO and
//! RAFT.STATUS read the node through the [`NodeInfo`] trait.
//!
//! A protocol error from the decoder is answered with [`keel_resp::ProtocolError::to_reply`]
//! and closes this connection only.
//!
//! [`pipeline`] orders a connection's dispatched requests: which are proposed together, what
//! waits for what, and in which order the replies leave.

mod clients;
mod config;
mod info;
mod introspection;
pub mod monitor;
pub mod pipeline;
mod pubsub;
pub use pubsub::{Publish, Publishes};
mod stats;
pub mod unblock;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

pub use clients::{ClientRecord, ClientRegistry, Registration};
pub use config::{ConfigValues, SharedConfig, DATABASES_DEFAULT};
pub use info::{CpuTimes, FollowerInfo, MemberInfo, NodeReport};
pub use stats::{CommandStat, LocalStats, ServerStats, StatsSnapshot, RATE_SAMPLE_INTERVAL};

use keel_redis::command::blocking::BlockingPop;
use keel_redis::command::{
    AdminCommand, ClientCommand, Command, CommandError, HelloArgs, LocalCommand, QueuedCommand,
    ReadCommand, ScriptCommand, ScriptedExec, TransactionCommand, WatchedKey, WriteCommand,
};
use keel_redis::state_machine::LoggedCommand;
use keel_redis::REDIS_COMPAT_VERSION;
use keel_resp::{encode, Limits, ProtocolVersion, Reply};

/// What local commands may ask about the node. The runtime implements it; `status` is called only
/// by INFO and RAFT.STATUS.
pub trait NodeInfo {
    fn status(&self) -> NodeReport;

    /// Whether a script has run on the node for longer than `busy-reply-threshold`: then
    /// commands other than those [`allowed_while_busy`] answer `-BUSY` (`keel_redis::script`).
    fn script_busy(&self) -> bool {
        false
    }

    /// The node's wall clock in microseconds since the Unix epoch (`TIME`).
    fn wall_clock_us(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }
}

/// What to do with a request after [`ClientConnection::dispatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Answered locally: send it.
    Reply(Reply),
    /// Send the reply, then close the connection (QUIT).
    ReplyAndClose(Reply),
    /// Propose it to the log with this connection's request id.
    Write(WriteCommand),
    /// Serve it linearizably.
    Read(ReadCommand),
    /// For the runtime.
    Admin(AdminCommand),
    /// EXEC: propose the queued commands as one log entry, with this connection's next request
    /// id, and reply with the array the state machine returns.
    Exec(Transaction),
    /// EVAL and its family, SCRIPT: for the node's script runner (`keel_redis::script`).
    Script(keel_redis::command::ScriptCommand),
    /// A blocking pop outside MULTI (BLPOP, BLMOVE, BZPOPMIN, ..., XREAD and XREADGROUP with
    /// BLOCK): the client waits on this node until a key serves it or its timeout passes
    /// (`keel_redis::command::blocking`).
    Block(BlockingPop),
}

/// The commands queued between MULTI and EXEC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transaction {
    /// What the log entry carries, in order.
    pub commands: Vec<QueuedCommand>,
    /// Each queued request's arguments as received (same order, local ones included): a
    /// follower forwards the transaction to the leader as `MULTI`, these, `EXEC` (and the
    /// leader answers the local ones itself).
    pub requests: Vec<Vec<Bytes>>,
    /// The replies of the queued commands this node answered itself, each with its position in
    /// EXEC's array (ascending): spliced into the state machine's array ([`splice`]).
    pub local_replies: Vec<(usize, Reply)>,
    /// The keys the connection watched (WATCH before MULTI, or `RAFT.WATCHED` inside it from a
    /// follower): the state machine aborts the transaction if one changed since.
    pub watched: Vec<WatchedKey>,
    /// The PUBLISHes queued, each with its position in EXEC's array: published by the node
    /// that proposed the entry once it applied (never by the log: every replica applies it),
    /// their receivers spliced in as the local replies are ([`Publishes::publish`]).
    pub publishes: Publishes,
}

impl Transaction {
    /// What the log entry carries: the commands, and the watched keys if any.
    pub fn logged(&self) -> LoggedCommand {
        if self.watched.is_empty() {
            LoggedCommand::Exec(self.commands.clone())
        } else {
            LoggedCommand::WatchedExec {
                watched: self.watched.clone(),
                commands: self.commands.clone(),
            }
        }
    }

    /// The requests a follower forwards between `MULTI` and `EXEC`: the watched keys first
    /// (`RAFT.WATCHED key index time_ms ...`), then the queued requests.
    pub fn forwarded_requests(&self) -> Vec<Vec<Bytes>> {
        let mut requests = Vec::with_capacity(self.requests.len() + 1);
        if !self.watched.is_empty() {
            let mut watched = vec![Bytes::from_static(b"RAFT.WATCHED")];
            for w in &self.watched {
                watched.push(w.key.clone());
                watched.push(Bytes::from(w.index.to_string()));
                watched.push(Bytes::from(w.time_ms.to_string()));
            }
            requests.push(watched);
        }
        requests.extend(self.requests.iter().cloned());
        requests
    }
}

/// EXEC's reply: the state machine's array of the logged commands' replies, with the local
/// replies put back at their positions. Anything else (an error) is returned as it is.
pub fn splice(applied: Reply, local_replies: &[(usize, Reply)]) -> Reply {
    match applied {
        Reply::Array(mut replies) if !local_replies.is_empty() => {
            for (position, reply) in local_replies {
                replies.insert((*position).min(replies.len()), reply.clone());
            }
            Reply::Array(replies)
        }
        other => other,
    }
}

/// A connection's state between MULTI and EXEC / DISCARD.
#[derive(Clone, Debug, Default)]
struct Queue {
    transaction: Transaction,
    /// Argument bytes queued so far, each argument counted with [`QUEUED_ARG_OVERHEAD_BYTES`]
    /// more (bounded by [`Limits::multi_bytes_max`]).
    bytes: usize,
    /// An error was answered since MULTI: EXEC answers EXECABORT. Nothing more is stored.
    aborted: bool,
    /// A script was queued: EXEC hands the transaction to the script runner
    /// ([`ScriptCommand::Exec`]), which runs it whole as a script runs.
    scripted: bool,
    /// The database the last SELECT queued names: the connection's after EXEC.
    db: Option<u32>,
}

/// A script queued after a SELECT in the same transaction: the script runner runs the
/// transaction in the database it started in.
const SCRIPT_AFTER_SELECT: &str =
    "ERR keel does not run a script after SELECT in the same transaction";

const QUEUED: Reply = Reply::Simple(std::borrow::Cow::Borrowed("QUEUED"));

/// What one queued argument costs beyond its bytes (its handles in the queue), counted against
/// [`Limits::multi_bytes_max`] so that many empty arguments are bounded too.
pub const QUEUED_ARG_OVERHEAD_BYTES: usize = 32;

impl Queue {
    /// Answers `error` and marks the transaction aborted (its queue is freed now).
    fn abort(&mut self, error: CommandError) -> Dispatch {
        self.abort_with(error.to_reply())
    }

    fn abort_with(&mut self, reply: Reply) -> Dispatch {
        self.aborted = true;
        self.transaction = Transaction::default();
        self.bytes = 0;
        Dispatch::Reply(reply)
    }
}

/// Per-connection state: id, protocol version, name, library info.
#[derive(Clone, Debug)]
pub struct ClientConnection {
    id: u64,
    protocol: ProtocolVersion,
    name: Option<Bytes>,
    limits: Limits,
    /// `Some` between MULTI and EXEC / DISCARD.
    queue: Option<Queue>,
    /// The default user's password (`requirepass`); `None`: no password (Redis's `nopass`).
    requirepass: Option<Bytes>,
    /// Whether commands other than AUTH, HELLO ... AUTH and QUIT may run.
    authenticated: bool,
    /// The node's settings, as CONFIG GET reports them and CONFIG SET changes them.
    config: Arc<SharedConfig>,
    /// Keys watched since the last EXEC, DISCARD or UNWATCH, each with its watch point.
    watched: Vec<WatchedKey>,
    /// The database this connection's commands run in (`SELECT`; 0 at first).
    db: u32,
    /// WATCHes dispatched whose watch point has not come back yet ([`Self::watch_point`]).
    watches_pending: usize,
    /// What CLIENT LIST shows of this connection.
    record: Arc<ClientRecord>,
    /// The node's connections, for CLIENT LIST (`None`: this one only).
    registry: Option<Arc<ClientRegistry>>,
    /// The request being answered: its bytes as received and its arguments' bytes.
    current_request: (usize, usize),
    /// Set by CLIENT REPLY, taken by the server ([`Self::take_reply_mode`]).
    reply_mode: Option<keel_redis::command::ReplyMode>,
    /// The other connections CLIENT KILL killed, taken by the server ([`Self::take_killed`]).
    killed: Vec<u64>,
    /// The bound of this connection's monitor queue, should it send MONITOR.
    monitor_limit: usize,
    /// What the request just dispatched shows to the node's monitors, redacted (empty without
    /// monitors): sent by [`Self::show_to_monitors`] once the server has accepted it.
    monitored: Vec<Vec<Bytes>>,
    /// The node's counters, zeroed by CONFIG RESETSTAT.
    stats: Arc<ServerStats>,
    /// The node's pub/sub subscriptions (`crate::pubsub`; a connection alone has its own).
    pubsub: Arc<crate::pubsub::PubSub>,
    /// Test-only: a deliberately broken variant ([`Self::set_mutation`]).
    #[cfg(feature = "mutations")]
    mutation: Option<keel_redis::Mutation>,
}

/// Whether a request runs while a script is busy, as Redis lets through commands flagged
/// `allow_busy` (and answers a request that does not parse with its own error).
pub fn allowed_while_busy(parsed: &Result<Command, CommandError>) -> bool {
    match parsed {
        Err(_) => true,
        Ok(Command::Transaction(command)) => !matches!(command, TransactionCommand::Exec),
        Ok(Command::Local(
            LocalCommand::Auth { .. }
            | LocalCommand::Hello(_)
            | LocalCommand::Quit
            | LocalCommand::Shutdown
            | LocalCommand::Client(_),
        )) => true,
        Ok(Command::Local(LocalCommand::Script(script))) => script.allowed_while_busy(),
        Ok(_) => false,
    }
}

/// Whether a command this node answers may be queued in a transaction (answered at once, its
/// reply kept for EXEC's array). Those that change the connection (HELLO, AUTH, CLIENT SETNAME,
/// CLIENT SETINFO) are refused there: their effect would come before EXEC, not at it.
/// Whether a script command is queued in a transaction, to run at EXEC as Redis runs it
/// (`SCRIPT KILL` is refused there, as in Redis).
fn queued_in_transaction(command: &ScriptCommand) -> bool {
    !matches!(command, ScriptCommand::Kill | ScriptCommand::Exec(_))
}

fn answered_in_transaction(command: &LocalCommand) -> bool {
    match command {
        LocalCommand::Info(_)
        | LocalCommand::ConfigGet(_)
        | LocalCommand::Command(_)
        | LocalCommand::RaftStatus
        | LocalCommand::FunctionFlush
        | LocalCommand::FunctionList
        // TIME is answered at the time it is queued (Redis: at EXEC; a transaction's entry
        // runs at its log index, which has no wall clock of its own).
        | LocalCommand::Time => true,
        // Not allowed in a transaction, as in Redis.
        LocalCommand::Shutdown => false,
        // Queued: it runs at EXEC (`dispatch_queued`).
        LocalCommand::Select(_) => false,
        LocalCommand::Client(client) => matches!(
            client,
            ClientCommand::GetName
                | ClientCommand::Id
                | ClientCommand::Info
                | ClientCommand::List(_)
        ),
        // Its effect would come before EXEC, not at it (an invalid CONFIG SET, which has none,
        // is answered with its error: `dispatch_queued`).
        LocalCommand::ConfigSet(_) | LocalCommand::ConfigResetStat => false,
        // Refused inside a transaction in Redis's words (`dispatch_queued`).
        LocalCommand::Monitor => false,
        // PUBLISH is queued and published when the transaction applies; the others are
        // refused (`pubsub.rs`).
        LocalCommand::Publish { .. } | LocalCommand::PubSub => false,
        LocalCommand::Script(_) => false,
        // PING and ECHO join the log entry; QUIT closes the connection.
        LocalCommand::Ping(_)
        | LocalCommand::Echo(_)
        | LocalCommand::Quit
        | LocalCommand::Hello(_)
        | LocalCommand::Auth { .. } => false,
    }
}

/// What a pub/sub command would answer were it ever answered as another local command.
const PUBSUB_ELSEWHERE: &str = "ERR internal error: a pub/sub command reached the wrong handler";

/// Redis's words for a command before AUTH.
const NOAUTH: &str = "NOAUTH Authentication required.";
const NOAUTH_HELLO: &str = "NOAUTH HELLO must be called with the client already authenticated, \
     otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client \
     and select the RESP protocol version at the same time";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const AUTH_WITHOUT_PASSWORD: &str = "ERR AUTH <password> called without any password configured \
     for the default user. Are you sure your configuration is correct?";

impl ClientConnection {
    /// `id` is unique per node (CLIENT ID, HELLO's `id`); `limits` are reported by CONFIG GET.
    pub fn new(id: u64, peer_addr: impl Into<String>, limits: Limits) -> Self {
        ClientConnection {
            id,
            record: Arc::new(ClientRecord::new(id, peer_addr.into(), String::new(), -1)),
            registry: None,
            current_request: (0, 0),
            reply_mode: None,
            killed: Vec::new(),
            monitor_limit: monitor::MONITOR_QUEUE_BYTES_DEFAULT,
            monitored: Vec::new(),
            protocol: ProtocolVersion::Resp2,
            name: None,
            limits,
            queue: None,
            requirepass: None,
            authenticated: true,
            config: Arc::default(),
            watched: Vec::new(),
            watches_pending: 0,
            db: 0,
            stats: Arc::default(),
            pubsub: Arc::default(),
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// Test-only: switches on a deliberately broken variant (the simulator's `--mutation`).
    #[cfg(feature = "mutations")]
    pub fn set_mutation(&mut self, mutation: Option<keel_redis::Mutation>) {
        self.mutation = mutation;
    }

    /// Test-only: the `pop-without-proposing` mutation turns `LPOP k` and `RPOP k` into a read
    /// of the element they would take (`LINDEX`), answered from the node's state, nothing
    /// proposed.
    fn pop_as_read(&self, args: &[Bytes]) -> Option<Dispatch> {
        #[cfg(feature = "mutations")]
        if self.mutation == Some(keel_redis::Mutation::PopWithoutProposing) && args.len() == 2 {
            let at: &'static [u8] = if args[0].eq_ignore_ascii_case(b"lpop") {
                b"0"
            } else if args[0].eq_ignore_ascii_case(b"rpop") {
                b"-1"
            } else {
                return None;
            };
            let peek = [
                Bytes::from_static(b"LINDEX"),
                args[1].clone(),
                Bytes::from_static(at),
            ];
            if let Ok(Command::Read(read)) = Command::parse(&peek) {
                return Some(Dispatch::Read(read));
            }
        }
        let _ = args;
        None
    }

    /// Subscribes and publishes in `pubsub`, the node's (bounded like a monitor's queue:
    /// [`Self::with_monitor_limit`]).
    pub fn with_pubsub(mut self, pubsub: Arc<crate::pubsub::PubSub>) -> Self {
        self.pubsub = pubsub;
        self
    }

    /// Zeroes `stats` on CONFIG RESETSTAT (the node's counters, which INFO reports).
    pub fn with_stats(mut self, stats: Arc<ServerStats>) -> Self {
        self.stats = stats;
        self
    }

    /// Reports `config` in CONFIG GET and changes it with CONFIG SET.
    pub fn with_config(mut self, config: Arc<SharedConfig>) -> Self {
        self.config = config;
        self
    }

    /// Shows this connection as `record` (same id) and lists `registry`'s in CLIENT LIST.
    pub fn with_registry(
        mut self,
        record: Arc<ClientRecord>,
        registry: Arc<ClientRegistry>,
    ) -> Self {
        self.record = record;
        self.registry = Some(registry);
        self
    }

    /// Bounds the connection's monitor queue (after MONITOR), and its pub/sub queue, to `bytes`.
    pub fn with_monitor_limit(mut self, bytes: usize) -> Self {
        self.monitor_limit = bytes;
        self
    }

    /// Requires `AUTH` with `password` (for the user `default`) before anything else runs.
    pub fn with_requirepass(mut self, password: Option<Bytes>) -> Self {
        self.authenticated = password.is_none();
        self.requirepass = password;
        self
    }

    /// Whether `password` for `user` (`None`: the one-argument AUTH) is right, as Redis judges it
    /// with only the default user: without `requirepass` that user takes any password (`nopass`),
    /// but the one-argument form is an error, never a silent `+OK`.
    fn check_password(&self, user: Option<&[u8]>, password: &[u8]) -> Result<(), Reply> {
        let default_user = user.is_none_or(|u| u == b"default");
        match &self.requirepass {
            None if user.is_none() => Err(Reply::error(AUTH_WITHOUT_PASSWORD)),
            None if default_user => Ok(()),
            Some(expected) if default_user && constant_time_eq(expected, password) => Ok(()),
            _ => Err(Reply::error(WRONGPASS)),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn protocol(&self) -> ProtocolVersion {
        self.protocol
    }

    pub fn name(&self) -> Option<&Bytes> {
        self.name.as_ref()
    }

    /// Appends `reply` in this connection's protocol version.
    pub fn encode(&self, reply: &Reply, out: &mut BytesMut) {
        encode(reply, self.protocol, out);
    }

    /// Parses a request and answers it if it is local. `args` must not be empty (the server
    /// ignores empty frames without a reply, as Redis does).
    #[expect(clippy::too_many_lines)]
    pub fn dispatch(&mut self, args: &[Bytes], node: &dyn NodeInfo) -> Dispatch {
        let parsed = Command::parse(args);
        if !self.authenticated {
            match &parsed {
                Ok(Command::Local(LocalCommand::Auth { .. } | LocalCommand::Quit)) => {}
                Ok(Command::Local(LocalCommand::Hello(hello))) if hello.auth.is_some() => {}
                Ok(Command::Local(LocalCommand::Hello(_))) => {
                    return Dispatch::Reply(Reply::error(NOAUTH_HELLO))
                }
                // Before AUTH nothing else is told, not even whether a command exists.
                _ => return Dispatch::Reply(Reply::error(NOAUTH)),
            }
        }
        if let Some(dispatch) = self.dispatch_pubsub(args) {
            return dispatch;
        }
        if parsed.is_ok() {
            self.note_request(args);
        }
        // A monitor, like a replica in Redis, may not read or write keys.
        let parsed = match parsed {
            Ok(Command::Read(_) | Command::Write(_)) if self.record.monitor.is_on() => {
                Err(CommandError::MonitorKeyspace)
            }
            other => other,
        };
        let parsed = self.check_databases_named(parsed);
        self.monitored.clear();
        if !allowed_while_busy(&parsed) && node.script_busy() {
            return self.refuse_busy(&parsed);
        }
        if self.queue.is_some() {
            // Inside MULTI only what is not queued runs now, and is shown now.
            let runs_now = match &parsed {
                Ok(Command::Transaction(command)) => !matches!(
                    command,
                    TransactionCommand::Unwatch | TransactionCommand::Watched(_)
                ),
                Ok(Command::Local(LocalCommand::Quit)) => true,
                _ => false,
            };
            // EXEC shows the queued commands as they run, then itself; an aborted transaction
            // only EXEC (Redis's `execCommandAbort`).
            let exec = matches!(parsed, Ok(Command::Transaction(TransactionCommand::Exec)));
            let queued = match &self.queue {
                Some(queue) if exec && !queue.aborted && self.has_monitors() => {
                    queue.transaction.requests.clone()
                }
                _ => Vec::new(),
            };
            let dispatch = self.dispatch_queued(parsed, args, node);
            if matches!(
                dispatch,
                Dispatch::Exec(_) | Dispatch::Reply(Reply::Array(_))
            ) {
                for request in &queued {
                    self.monitor(request);
                }
            }
            if runs_now {
                self.monitor(args);
            }
            return dispatch;
        }
        if parsed.is_ok() {
            self.monitor(args);
        }
        match parsed {
            Err(error) => Dispatch::Reply(error.to_reply()),
            Ok(Command::Transaction(command)) => Dispatch::Reply(match command {
                TransactionCommand::Multi => {
                    self.queue = Some(Queue::default());
                    Reply::OK
                }
                TransactionCommand::Exec => CommandError::ExecWithoutMulti.to_reply(),
                TransactionCommand::Discard => CommandError::DiscardWithoutMulti.to_reply(),
                // A linearizable read of the watch point; `watch_point` records the keys.
                TransactionCommand::Watch(_) => {
                    self.watches_pending += 1;
                    return Dispatch::Read(ReadCommand::WatchPoint);
                }
                TransactionCommand::Unwatch => {
                    self.watched.clear();
                    Reply::OK
                }
                TransactionCommand::Watched(_) => CommandError::WatchedWithoutMulti.to_reply(),
            }),
            Ok(Command::Write(command)) => match BlockingPop::of_write(&command) {
                Some(pop) if pop.blocks() => Dispatch::Block(pop),
                _ => self.pop_as_read(args).unwrap_or(Dispatch::Write(command)),
            },
            Ok(Command::Read(command)) => match BlockingPop::of_read(&command) {
                Some(read) => Dispatch::Block(read),
                None => Dispatch::Read(command),
            },
            Ok(Command::Admin(command)) => Dispatch::Admin(command),
            Ok(Command::Local(LocalCommand::Quit)) => Dispatch::ReplyAndClose(Reply::OK),
            Ok(Command::Local(LocalCommand::Script(command))) => Dispatch::Script(command),
            Ok(Command::Local(command)) => Dispatch::Reply(self.answer(command, node)),
        }
    }

    /// `-BUSY` for a command sent while a script is busy; inside MULTI it aborts the
    /// transaction, and EXEC answers `-EXECABORT` with the reason (Redis's `rejectCommand`).
    fn refuse_busy(&mut self, parsed: &Result<Command, CommandError>) -> Dispatch {
        let busy = Reply::error(keel_redis::script::BUSY);
        if let Some(queue) = &mut self.queue {
            if matches!(parsed, Ok(Command::Transaction(TransactionCommand::Exec))) {
                self.queue = None;
                self.watched.clear();
                return Dispatch::Reply(Reply::error(format!(
                    "EXECABORT Transaction discarded because of: {}",
                    keel_redis::script::BUSY
                )));
            }
            queue.aborted = true;
            queue.transaction = Transaction::default();
            queue.bytes = 0;
        }
        Dispatch::Reply(busy)
    }

    /// The database this connection's commands run in (`SELECT`): what its writes' entries and
    /// its reads name.
    pub fn db(&self) -> u32 {
        self.db
    }

    /// Whether database `db` exists here: below `databases`.
    fn check_db(&self, db: u32) -> Result<(), CommandError> {
        match u64::from(db) < self.config.read().databases {
            true => Ok(()),
            false => Err(CommandError::DbIndexOutOfRange),
        }
    }

    /// A write naming a database (SWAPDB, MOVE, COPY ... DB) past `databases` is refused before
    /// anything runs, in Redis's words.
    fn check_databases_named(
        &self,
        parsed: Result<Command, CommandError>,
    ) -> Result<Command, CommandError> {
        if let Ok(Command::Write(write)) = &parsed {
            for db in write.databases_named() {
                self.check_db(db)?;
            }
        }
        parsed
    }

    /// Whether some connection of the node is a monitor.
    fn has_monitors(&self) -> bool {
        self.registry.as_ref().is_some_and(|r| r.has_monitors())
    }

    /// Records `args` to be shown to the node's monitors, if it is shown at all.
    fn monitor(&mut self, args: &[Bytes]) {
        if self.has_monitors() && monitor::shows(args) {
            self.monitored.push(monitor::redacted(args));
        }
    }

    /// Shows the request just dispatched to the node's monitors if `accepted` (the server
    /// refused it otherwise: past `maxmemory`, as Redis, which shows only what it runs).
    pub fn show_to_monitors(&mut self, accepted: bool) {
        let shown = std::mem::take(&mut self.monitored);
        if let (true, Some(registry)) = (accepted, &self.registry) {
            registry.feed_monitors(&self.record.addr, &shown);
        }
    }

    /// Whether the connection is between MULTI and EXEC / DISCARD.
    pub fn in_transaction(&self) -> bool {
        self.queue.is_some()
    }

    /// A request between MULTI and EXEC / DISCARD.
    #[expect(clippy::too_many_lines)]
    fn dispatch_queued(
        &mut self,
        parsed: Result<Command, CommandError>,
        args: &[Bytes],
        node: &dyn NodeInfo,
    ) -> Dispatch {
        // Answered now, its reply kept for EXEC's array.
        let local_reply = match &parsed {
            Ok(Command::Transaction(TransactionCommand::Unwatch)) => Some(Reply::OK),
            Ok(Command::Local(command)) if answered_in_transaction(command) => {
                Some(self.answer(command.clone(), node))
            }
            // Redis runs it at EXEC, where it fails in these words.
            Ok(Command::Local(LocalCommand::Monitor)) => Some(Reply::error(
                "ERR MONITOR isn't allowed for DENY BLOCKING client",
            )),
            // It would fail at EXEC too: its error takes its place there, as in Redis.
            Ok(Command::Local(LocalCommand::ConfigSet(pairs))) => {
                config::config_set_error(pairs, &self.limits, &self.config)
            }
            _ => None,
        };
        let selectable = match &parsed {
            Ok(Command::Local(LocalCommand::Select(db))) => self.check_db(*db),
            _ => Ok(()),
        };
        let queue = self.queue.as_mut().expect("called in a transaction");
        let mut publish = None;
        let command = match parsed {
            Ok(Command::Transaction(TransactionCommand::Exec)) => {
                let mut queue = self.queue.take().expect("in a transaction");
                if self.watches_pending > 0 {
                    // A WATCH sent in the same pipeline, not answered yet: its keys are not
                    // watched yet, and running the transaction without them could miss a
                    // change. Refused (and the watch ended), never run unwatched.
                    self.watched.clear();
                    return Dispatch::Reply(CommandError::ExecBeforeWatchAnswered.to_reply());
                }
                // EXEC ends the watch, whatever becomes of the transaction (as in Redis).
                let mut watched = std::mem::take(&mut self.watched);
                watched.append(&mut queue.transaction.watched);
                queue.transaction.watched = watched;
                let transaction = queue.transaction;
                // After EXEC the connection is in the database the transaction selected last.
                if let (false, Some(db)) = (queue.aborted, queue.db) {
                    self.db = db;
                }
                return if queue.aborted {
                    Dispatch::Reply(CommandError::ExecAbort.to_reply())
                } else if queue.scripted {
                    Dispatch::Script(ScriptCommand::Exec(Box::new(ScriptedExec {
                        requests: transaction.requests,
                        local_replies: transaction.local_replies,
                        watched: transaction.watched,
                    })))
                } else if transaction.commands.is_empty()
                    && transaction.watched.is_empty()
                    && transaction.publishes.is_empty()
                {
                    let replies = transaction.local_replies.into_iter();
                    Dispatch::Reply(Reply::Array(replies.map(|(_, reply)| reply).collect()))
                } else {
                    Dispatch::Exec(transaction)
                };
            }
            Ok(Command::Transaction(TransactionCommand::Discard)) => {
                self.queue = None;
                self.watched.clear();
                return Dispatch::Reply(Reply::OK);
            }
            // A follower's client's watched keys, sent with the transaction it forwards.
            Ok(Command::Transaction(TransactionCommand::Watched(watched))) => {
                let max = self.limits.multi_commands_max;
                if queue.transaction.watched.len() + watched.len() > max {
                    return queue.abort(CommandError::TooManyQueued { max });
                }
                // Watched where the forwarding link is: the follower's client's database.
                let db = self.db;
                let watched = watched.into_iter().map(|w| WatchedKey { db, ..w });
                queue.transaction.watched.extend(watched);
                return Dispatch::Reply(Reply::OK);
            }
            // As Redis: an error, but the transaction goes on.
            Ok(Command::Transaction(TransactionCommand::Multi)) => {
                return Dispatch::Reply(CommandError::NestedMulti.to_reply())
            }
            Ok(Command::Transaction(TransactionCommand::Watch(_))) => {
                return Dispatch::Reply(CommandError::WatchInMulti.to_reply())
            }
            Ok(Command::Local(LocalCommand::Quit)) => {
                self.queue = None;
                return Dispatch::ReplyAndClose(Reply::OK);
            }
            Ok(Command::Write(command)) => Some(QueuedCommand::Write(command)),
            Ok(Command::Read(command)) => Some(QueuedCommand::Read(command)),
            Ok(Command::Local(LocalCommand::Ping(None))) => Some(QueuedCommand::Ping),
            // Runs at EXEC, where the commands after it run in that database.
            Ok(Command::Local(LocalCommand::Select(db))) => match selectable {
                Ok(()) => {
                    queue.db = Some(db);
                    Some(QueuedCommand::Select(db))
                }
                Err(error) => return queue.abort(error),
            },
            Ok(Command::Local(LocalCommand::Ping(Some(message))))
            | Ok(Command::Local(LocalCommand::Echo(message))) => Some(QueuedCommand::Echo(message)),
            Ok(Command::Local(LocalCommand::Publish {
                shard,
                channel,
                message,
            })) => {
                publish = Some(Publish {
                    shard,
                    channel,
                    message,
                });
                None
            }
            Ok(_) if local_reply.is_some() => None,
            // Scripts run at EXEC, with the transaction (`ScriptCommand::Exec`).
            Ok(Command::Local(LocalCommand::Script(ScriptCommand::Eval { .. })))
                if queue.db.is_some() =>
            {
                return queue.abort_with(Reply::error(SCRIPT_AFTER_SELECT))
            }
            Ok(Command::Local(LocalCommand::Script(script))) if queued_in_transaction(&script) => {
                queue.scripted = true;
                None
            }
            Ok(Command::Local(_) | Command::Admin(_) | Command::Transaction(_)) => {
                return queue.abort(CommandError::NotAllowedInMulti)
            }
            Err(error) => return queue.abort(error),
        };
        if queue.aborted {
            // Checked, not stored: EXEC will discard everything anyway.
            return Dispatch::Reply(QUEUED);
        }
        let bytes: usize = args
            .iter()
            .map(|a| a.len() + QUEUED_ARG_OVERHEAD_BYTES)
            .sum();
        let max = &self.limits;
        if queue.transaction.requests.len() >= max.multi_commands_max {
            return queue.abort(CommandError::TooManyQueued {
                max: max.multi_commands_max,
            });
        }
        if queue.bytes.saturating_add(bytes) > max.multi_bytes_max {
            return queue.abort(CommandError::QueuedTooLarge {
                max: max.multi_bytes_max,
            });
        }
        queue.bytes += bytes;
        let transaction = &mut queue.transaction;
        let position = transaction.requests.len();
        if let Some(publish) = publish {
            transaction.publishes.0.push((position, publish));
        }
        match (command, local_reply) {
            (_, Some(reply)) => {
                transaction.local_replies.push((position, reply));
            }
            (Some(command), None) => transaction.commands.push(command),
            // A script, which the runner finds among the requests.
            (None, None) => {}
        }
        transaction.requests.push(args.to_vec());
        Dispatch::Reply(QUEUED)
    }

    /// WATCH's read came back: `point` is `[applied index, log time]` of the state it read (or
    /// the error that kept it from being read). Records `keys` as watched from that point and
    /// answers WATCH's reply.
    pub fn watch_point(&mut self, keys: &[Bytes], point: &Reply) -> Reply {
        self.watches_pending = self.watches_pending.saturating_sub(1);
        let Reply::Array(fields) = point else {
            return point.clone();
        };
        let (Some(Reply::Integer(index)), Some(Reply::Integer(time_ms))) =
            (fields.first(), fields.get(1))
        else {
            return Reply::error("ERR internal error: WATCH read no watch point");
        };
        // Bounded as a transaction is: a key watched counts as a queued command.
        if self.watched.len() + keys.len() > self.limits.multi_commands_max {
            return CommandError::TooManyQueued {
                max: self.limits.multi_commands_max,
            }
            .to_reply();
        }
        let db = self.db;
        self.watched.extend(keys.iter().map(|key| WatchedKey {
            db,
            key: key.clone(),
            index: *index as u64,
            time_ms: *time_ms as u64,
        }));
        Reply::OK
    }

    /// How many keys are watched now.
    pub fn watched_keys(&self) -> usize {
        self.watched.len()
    }

    fn answer(&mut self, command: LocalCommand, node: &dyn NodeInfo) -> Reply {
        debug_assert!(
            self.queue.is_none() || answered_in_transaction(&command),
            "a command that changes the connection is not answered inside a transaction"
        );
        match command {
            // `dispatch_pubsub` answers them before parsing, `dispatch_queued` inside MULTI.
            LocalCommand::Publish { .. } | LocalCommand::PubSub => Reply::error(PUBSUB_ELSEWHERE),
            LocalCommand::Ping(None) => Reply::PONG,
            LocalCommand::Ping(Some(message)) | LocalCommand::Echo(message) => Reply::Bulk(message),
            LocalCommand::Hello(hello) => self.hello(hello),
            LocalCommand::Command(query) => introspection::command_reply(&query),
            LocalCommand::Client(client) => self.client(client),
            LocalCommand::ConfigGet(patterns) => {
                config::config_get(&patterns, &self.limits, &self.config.read())
            }
            LocalCommand::ConfigSet(pairs) => {
                config::config_set(&pairs, &self.limits, &self.config)
            }
            LocalCommand::ConfigResetStat => {
                self.stats.reset();
                Reply::OK
            }
            LocalCommand::Select(db) => match self.check_db(db) {
                Ok(()) => {
                    self.db = db;
                    Reply::OK
                }
                Err(error) => error.to_reply(),
            },
            LocalCommand::Quit => Reply::OK,
            LocalCommand::Info(sections) => Reply::text(info::render(&node.status(), &sections)),
            LocalCommand::RaftStatus => Reply::text(info::render_raft(&node.status())),
            LocalCommand::Time => {
                let micros = node.wall_clock_us();
                Reply::Array(vec![
                    Reply::bulk((micros / 1_000_000).to_string()),
                    Reply::bulk((micros % 1_000_000).to_string()),
                ])
            }
            LocalCommand::Shutdown => Reply::error(
                "ERR SHUTDOWN is not supported: a keel node stops on SIGTERM or SIGINT \
                 (its data is durable already)",
            ),
            LocalCommand::FunctionFlush => Reply::OK,
            LocalCommand::FunctionList => Reply::Array(Vec::new()),
            LocalCommand::Monitor => {
                match &self.registry {
                    Some(registry) => registry.start_monitor(&self.record, self.monitor_limit),
                    // A connection alone: nothing to show but its own commands.
                    None => {
                        self.record.monitor.start(self.monitor_limit);
                    }
                }
                Reply::OK
            }
            LocalCommand::Auth { user, password } => {
                match self.check_password(user.as_deref(), &password) {
                    Ok(()) => {
                        self.authenticated = true;
                        Reply::OK
                    }
                    // A failed AUTH leaves the connection as it was (Redis does the same).
                    Err(reply) => reply,
                }
            }
            // `dispatch` hands scripts to the runner; a connection alone has none.
            LocalCommand::Script(_) => Reply::error("ERR scripts are not run here"),
        }
    }

    fn hello(&mut self, hello: HelloArgs) -> Reply {
        if let Some((user, password)) = &hello.auth {
            if let Err(reply) = self.check_password(Some(user), password) {
                return reply;
            }
            self.authenticated = true;
        }
        if let Some(version) = hello.protover {
            self.protocol = version;
            self.record.state().resp = version.number();
        }
        if let Some(name) = hello.setname {
            self.set_name(name);
        }
        let field = |k: &'static str, v: Reply| (Reply::text(k), v);
        Reply::Map(vec![
            field("server", Reply::text("keel")),
            field("version", Reply::text(REDIS_COMPAT_VERSION)),
            field("proto", Reply::Integer(self.protocol.number())),
            field("id", Reply::Integer(self.id as i64)),
            // "cluster" would make clients speak Redis Cluster (slots, MOVED); keel is one logical
            // server, so "standalone".
            field("mode", Reply::text("standalone")),
            // Every keel node accepts writes (followers forward them), so to a client every node
            // is a master.
            field("role", Reply::text("master")),
            field("modules", Reply::Array(Vec::new())),
        ])
    }
}

#[cfg(test)]
mod tests;

/// Compares without stopping at the first difference, so the time taken does not tell how much of
/// a guessed password was right (the length still shows).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
