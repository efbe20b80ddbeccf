//! CLIENT LIST / CLIENT INFO: each connection's record, in Redis's line format.
//!
//! A connection publishes what CLIENT LIST reports of it (name, last command, last activity) in
//! its [`ClientRecord`]; the node's [`ClientRegistry`] holds the records of the connections it
//! serves, so any connection can list them all. The list is bounded by `maxclients`.
//!
//! CLIENT KILL sets the killed connection's kill signal, which the server's session waits on
//! beside the socket (polled first, and checked after each request, so nothing after the kill is
//! served), and hands the connections it killed to the killing session, which answers once they
//! have closed (at most 1 s), as Redis frees them before it replies. CLIENT REPLY hands its mode
//! to the session, which sends every earlier reply first.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;

use super::monitor::{self, MonitorFeed};
use super::unblock::UnblockAs;
use super::ClientConnection;
use crate::pubsub::Kind;
use keel_redis::command::{ClientAttribute, ClientCommand, ClientFilter, KillFilters, ReplyMode};
use keel_resp::Reply;

/// What one connection shows in CLIENT LIST.
#[derive(Debug)]
pub struct ClientRecord {
    pub id: u64,
    /// The client's address, `ip:port`.
    pub addr: String,
    /// The address it connected to, `ip:port` (empty when unknown).
    pub laddr: String,
    /// The socket's file descriptor (-1 when unknown).
    pub fd: i64,
    created: Instant,
    state: Mutex<ClientState>,
    /// Set by CLIENT KILL; the connection's task waits for it ([`Self::killed`]), woken through
    /// the waker it left (std only: this module is built without tokio for the simulator).
    kill_flag: AtomicBool,
    kill_waker: Mutex<Option<std::task::Waker>>,
    /// The commands the node's clients run, once this connection sent MONITOR
    /// (`monitor.rs`); the connection's task sends them.
    pub monitor: MonitorFeed,
    /// Its pub/sub subscriptions and the messages they bring (`crate::pubsub`); the connection's
    /// task sends them.
    pub pubsub: crate::pubsub::PubSubFeed,
    /// Whether it is blocked, and CLIENT UNBLOCK's request (`unblock.rs`).
    pub blocked: super::unblock::BlockedSignal,
}

/// The fields a connection changes as it runs.
#[derive(Clone, Debug)]
pub struct ClientState {
    pub name: String,
    pub lib_name: String,
    pub lib_version: String,
    /// The last command run, as Redis names it (`client|list`; empty before the first).
    pub last_command: CommandName,
    pub last_active: Instant,
    pub resp: i64,
}

impl ClientRecord {
    pub fn new(id: u64, addr: String, laddr: String, fd: i64) -> Self {
        let now = Instant::now();
        ClientRecord {
            id,
            addr,
            laddr,
            fd,
            kill_flag: AtomicBool::new(false),
            kill_waker: Mutex::new(None),
            monitor: MonitorFeed::default(),
            pubsub: Default::default(),
            blocked: Default::default(),
            created: now,
            state: Mutex::new(ClientState {
                name: String::new(),
                lib_name: String::new(),
                lib_version: String::new(),
                last_command: CommandName::default(),
                last_active: now,
                resp: 2,
            }),
        }
    }

    /// Tells the connection's task to close once it has sent what it was answered.
    pub fn kill(&self) {
        self.kill_flag.store(true, Ordering::Release);
        let waker = self
            .kill_waker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Whether [`Self::kill`] was called.
    pub fn is_killed(&self) -> bool {
        self.kill_flag.load(Ordering::Acquire)
    }

    /// Returns once [`Self::kill`] was called (at once if it was already).
    pub async fn killed(&self) {
        std::future::poll_fn(|cx| {
            if self.kill_flag.load(Ordering::Acquire) {
                return std::task::Poll::Ready(());
            }
            {
                let mut waker = self.kill_waker.lock().unwrap_or_else(|e| e.into_inner());
                // Polled on every wait of the connection: the waker is cloned only when it changed.
                if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *waker = Some(cx.waker().clone());
                }
            }
            // Checked again once the waker is in place: a kill in between is not lost.
            if self.kill_flag.load(Ordering::Acquire) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }

    /// The changing fields (nothing panics while holding the lock, so poisoning is ignored).
    pub fn state(&self) -> MutexGuard<'_, ClientState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Redis's CLIENT LIST line (without its newline). `current` is the request being answered
    /// when the line describes the connection answering it: its bytes are in the query buffer
    /// (`qbuf`) and its arguments in `argv-mem`; `multi` is the queued commands' count, -1
    /// outside a transaction.
    pub fn line(&self, now: Instant, current: Option<(usize, usize)>, multi: i64) -> String {
        let state = self.state().clone();
        let (qbuf, argv_mem) = current.unwrap_or((0, 0));
        let mut line = String::with_capacity(320);
        let _ = write!(
            line,
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db=0 sub={} psub={} \
             ssub={} multi={multi} qbuf={qbuf} qbuf-free=0 argv-mem={argv_mem} multi-mem=0 rbs=0 \
             rbp=0 obl=0 oll=0 omem=0 tot-mem={qbuf} events=r cmd={} user=default redir=-1 \
             resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            state.name,
            now.duration_since(self.created).as_secs(),
            now.duration_since(state.last_active).as_secs(),
            match (
                self.monitor.is_on(),
                multi >= 0,
                self.pubsub.is_subscribed()
            ) {
                (true, _, _) => "O",
                (false, true, _) => "x",
                (false, false, true) => "P",
                (false, false, false) if self.blocked.is_blocked() => "b",
                (false, false, false) => "N",
            },
            self.pubsub.count(Kind::Channel),
            self.pubsub.count(Kind::Pattern),
            self.pubsub.count(Kind::Shard),
            if state.last_command.is_empty() {
                "NULL"
            } else {
                state.last_command.as_str()
            },
            state.resp,
            state.lib_name,
            state.lib_version,
        );
        line
    }
}

/// The records of the connections a node serves, by id.
#[derive(Debug, Default)]
pub struct ClientRegistry {
    clients: Mutex<BTreeMap<u64, Arc<ClientRecord>>>,
    /// The connections that sent MONITOR (a subset of `clients`), and how many they are (read
    /// without the lock: most commands run with none).
    monitors: Mutex<Vec<Arc<ClientRecord>>>,
    monitor_count: AtomicUsize,
}

/// A registered connection: dropping it removes the record.
pub struct Registration {
    registry: Arc<ClientRegistry>,
    id: u64,
}

impl ClientRegistry {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<ClientRecord>>> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn register(self: &Arc<Self>, record: Arc<ClientRecord>) -> Registration {
        let id = record.id;
        self.lock().insert(id, record);
        Registration {
            registry: Arc::clone(self),
            id,
        }
    }

    fn monitors(&self) -> MutexGuard<'_, Vec<Arc<ClientRecord>>> {
        self.monitors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `record` a monitor whose queue holds at most `limit` bytes (once).
    pub fn start_monitor(&self, record: &Arc<ClientRecord>, limit: usize) {
        if record.monitor.start(limit) {
            let mut monitors = self.monitors();
            monitors.push(Arc::clone(record));
            self.monitor_count.store(monitors.len(), Ordering::Release);
        }
    }

    /// Shows `requests`, run by the client at `addr`, to every monitor (`monitor.rs`).
    pub fn feed_monitors(&self, addr: &str, requests: &[Vec<Bytes>]) {
        if requests.is_empty() || !self.has_monitors() {
            return;
        }
        let monitors = self.monitors().clone();
        monitor::feed(&monitors, addr, requests);
    }

    /// Whether some connection of the node is a monitor.
    pub fn has_monitors(&self) -> bool {
        self.monitor_count.load(Ordering::Acquire) > 0
    }

    /// Whether the connection `id` is still served (its task has not ended).
    pub fn contains(&self, id: u64) -> bool {
        self.lock().contains_key(&id)
    }

    /// The connections served and not killed: INFO's `connected_clients`. A killed connection
    /// is gone for CLIENT KILL and for INFO alike, even while its task is still closing it.
    pub fn live(&self) -> usize {
        self.lock().values().filter(|r| !r.is_killed()).count()
    }

    /// The records, by id (the order Redis lists them in).
    pub fn records(&self) -> Vec<Arc<ClientRecord>> {
        self.lock().values().cloned().collect()
    }

    /// The record of connection `id`, if it is this node's.
    pub fn record(&self, id: u64) -> Option<Arc<ClientRecord>> {
        self.lock().get(&id).cloned()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let removed = self.registry.lock().remove(&self.id);
        if removed.is_some_and(|record| record.monitor.is_on()) {
            let mut monitors = self.registry.monitors();
            monitors.retain(|record| record.id != self.id);
            self.registry
                .monitor_count
                .store(monitors.len(), Ordering::Release);
        }
    }
}

/// What a request takes in Redis's query buffer: its RESP array encoding.
pub fn request_bytes(args: &[Bytes]) -> usize {
    let header = 3 + decimal_digits(args.len());
    header
        + args
            .iter()
            .map(|a| 1 + decimal_digits(a.len()) + 2 + a.len() + 2)
            .sum::<usize>()
}

/// The number of digits of `n` in decimal (counted, not formatted: this runs on every request).
fn decimal_digits(n: usize) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Commands whose first argument is a subcommand, which Redis names with them (`client|list`).
const CONTAINERS: [&[u8]; 5] = [b"client", b"config", b"command", b"function", b"debug"];

/// A command's name as CLIENT LIST shows it (`get`, `client|list`), held inline: it is recorded
/// on every request, which must not allocate for it. Longer names (none of Redis's) are cut.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CommandName {
    len: u8,
    bytes: [u8; COMMAND_NAME_BYTES_MAX],
}

const COMMAND_NAME_BYTES_MAX: usize = 46;

impl Default for CommandName {
    fn default() -> Self {
        CommandName {
            len: 0,
            bytes: [0; COMMAND_NAME_BYTES_MAX],
        }
    }
}

impl CommandName {
    /// Redis's name of the command `args` run, lowercased.
    pub fn of(args: &[Bytes]) -> Self {
        let mut name = CommandName::default();
        let Some(command) = args.first() else {
            return name;
        };
        name.push(command);
        let is_container = CONTAINERS.iter().any(|c| c.eq_ignore_ascii_case(command));
        if let Some(sub) = args.get(1).filter(|_| is_container) {
            name.push(b"|");
            name.push(sub);
        }
        name
    }

    fn push(&mut self, part: &[u8]) {
        let at = self.len as usize;
        let taken = part.len().min(COMMAND_NAME_BYTES_MAX - at);
        for (to, from) in self.bytes[at..at + taken].iter_mut().zip(part) {
            // Shown as text: a byte that is not ASCII is shown as `?`.
            *to = if from.is_ascii() {
                from.to_ascii_lowercase()
            } else {
                b'?'
            };
        }
        self.len = (at + taken) as u8;
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).expect("only ASCII is kept")
    }
}

impl From<&str> for CommandName {
    fn from(name: &str) -> Self {
        let mut command = CommandName::default();
        command.push(name.as_bytes());
        command
    }
}

impl std::fmt::Debug for CommandName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ClientConnection {
    /// Records a valid request as the one being answered (`cmd`, `idle`, `qbuf`).
    pub(super) fn note_request(&mut self, args: &[Bytes]) {
        let argv_bytes = args.iter().map(Bytes::len).sum();
        self.current_request = (request_bytes(args), argv_bytes);
        let mut state = self.record.state();
        state.last_command = CommandName::of(args);
        state.last_active = Instant::now();
    }

    /// What CLIENT LIST shows of this connection (the server waits on its kill signal).
    pub fn record(&self) -> &Arc<ClientRecord> {
        &self.record
    }

    /// The mode a CLIENT REPLY answered since the last call asked for: the server applies it
    /// once every earlier reply is sent, before this one's.
    pub fn take_reply_mode(&mut self) -> Option<ReplyMode> {
        self.reply_mode.take()
    }

    pub(super) fn set_name(&mut self, name: Bytes) {
        self.record.state().name = String::from_utf8_lossy(&name).into_owned();
        self.name = (!name.is_empty()).then_some(name);
    }

    /// The other connections the last CLIENT KILL killed (bounded by the node's connections):
    /// the server waits for them to close before it answers, so that what the client asks next
    /// (`INFO clients`, CLIENT LIST) no longer counts them, as in Redis, where CLIENT KILL frees
    /// them before it replies.
    pub fn take_killed(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.killed)
    }

    pub(super) fn client(&mut self, command: ClientCommand) -> Reply {
        match command {
            ClientCommand::SetName(name) => {
                self.set_name(name);
                Reply::OK
            }
            ClientCommand::GetName => match &self.name {
                Some(name) => Reply::Bulk(name.clone()),
                None => Reply::Null,
            },
            ClientCommand::SetInfo { attribute, value } => {
                let value = String::from_utf8_lossy(&value).into_owned();
                let mut state = self.record.state();
                match attribute {
                    ClientAttribute::LibName => state.lib_name = value,
                    ClientAttribute::LibVersion => state.lib_version = value,
                }
                Reply::OK
            }
            ClientCommand::Id => Reply::Integer(self.id as i64),
            ClientCommand::Info => {
                Reply::text(self.client_line(&self.record, Instant::now()) + "\n")
            }
            ClientCommand::List(filter) => Reply::text(self.client_list(&filter)),
            ClientCommand::Reply(mode) => {
                self.reply_mode = Some(mode);
                Reply::OK
            }
            ClientCommand::KillAddr(addr) => {
                let filters = KillFilters {
                    id: None,
                    addr: Some(addr),
                    laddr: None,
                    matches_none: false,
                    skip_me: false,
                };
                match self.kill(&filters) {
                    0 => Reply::error("ERR No such client"),
                    _ => Reply::OK,
                }
            }
            ClientCommand::Kill(filters) => Reply::Integer(self.kill(&filters) as i64),
            ClientCommand::Unblock { id, error } => {
                let how = if error {
                    UnblockAs::Error
                } else {
                    UnblockAs::Timeout
                };
                let target = match &self.registry {
                    Some(registry) => registry.record(id),
                    None => (self.record.id == id).then(|| Arc::clone(&self.record)),
                };
                Reply::Integer(i64::from(target.is_some_and(|r| r.blocked.unblock(how))))
            }
        }
    }

    /// Kills the node's connections that match `filters` (this one's task closes it after
    /// sending this reply); returns how many.
    fn kill(&mut self, filters: &KillFilters) -> usize {
        let records = match &self.registry {
            Some(registry) => registry.records(),
            None => vec![Arc::clone(&self.record)],
        };
        let spared = |record: &ClientRecord| {
            filters.matches_none || (filters.skip_me && record.id == self.id)
        };
        // A connection killed already is on its way out: neither counted nor killed again (the
        // session may not have closed it yet when the next CLIENT KILL comes).
        let matching = records.iter().filter(|record| {
            !spared(record)
                && !record.is_killed()
                && filters.id.is_none_or(|id| id == record.id)
                && filters.addr.as_ref().is_none_or(|a| *a == record.addr)
                && filters.laddr.as_ref().is_none_or(|a| *a == record.laddr)
        });
        let mut killed = 0;
        for record in matching {
            record.kill();
            killed += 1;
            if record.id != self.id {
                self.killed.push(record.id);
            }
        }
        killed
    }

    /// The line of `record`, with this connection's request when it is this connection's.
    fn client_line(&self, record: &ClientRecord, now: Instant) -> String {
        if record.id != self.id {
            return record.line(now, None, -1);
        }
        let multi = self
            .queue
            .as_ref()
            .map_or(-1, |q| q.transaction.requests.len() as i64);
        record.line(now, Some(self.current_request), multi)
    }

    /// CLIENT LIST: one line per connection of the node (bounded by `maxclients`), each ended
    /// by a newline.
    fn client_list(&self, filter: &ClientFilter) -> String {
        let records = match &self.registry {
            Some(registry) => registry.records(),
            None => vec![Arc::clone(&self.record)],
        };
        let now = Instant::now();
        let mut list = String::new();
        for record in records.iter().filter(|r| filter.admits(r.id)) {
            list.push_str(&self.client_line(record, now));
            list.push('\n');
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_redis_s_fields_in_redis_s_order() {
        let record = ClientRecord::new(7, "127.0.0.1:5000".into(), "127.0.0.1:6379".into(), 9);
        record.state().last_command = "client|list".into();
        let args = [Bytes::from_static(b"client"), Bytes::from_static(b"list")];
        assert_eq!(request_bytes(&args), 26);
        let line = record.line(Instant::now(), Some((26, 10)), -1);
        assert!(
            line.starts_with(
                "id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=9 name= age=0 idle=0 flags=N \
                 db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=26 qbuf-free=0 argv-mem=10 multi-mem=0"
            ),
            "{line}"
        );
        assert!(
            line.contains("events=r cmd=client|list user=default redir=-1 resp=2"),
            "{line}"
        );
    }

    #[test]
    fn kill_signals_the_matching_records_and_hands_over_the_others() {
        let registry = Arc::new(ClientRegistry::default());
        let records: Vec<Arc<ClientRecord>> = (1..=3)
            .map(|id| Arc::new(ClientRecord::new(id, format!("a{id}"), String::new(), -1)))
            .collect();
        let _registrations: Vec<Registration> = records
            .iter()
            .map(|r| registry.register(Arc::clone(r)))
            .collect();
        let mut me = ClientConnection::new(1, "a1", keel_resp::Limits::default())
            .with_registry(Arc::clone(&records[0]), Arc::clone(&registry));
        let all = KillFilters {
            id: None,
            addr: None,
            laddr: None,
            matches_none: false,
            skip_me: false,
        };
        assert_eq!(me.kill(&all), 3);
        assert!(records.iter().all(|r| r.is_killed()));
        // Its own connection closes after this reply; the server waits for the others.
        assert_eq!(me.take_killed(), [2, 3]);
        assert!(me.take_killed().is_empty());
    }

    #[test]
    fn a_dropped_registration_removes_the_record() {
        let registry = Arc::new(ClientRegistry::default());
        let first = registry.register(Arc::new(ClientRecord::new(1, "a".into(), "".into(), -1)));
        let second = registry.register(Arc::new(ClientRecord::new(2, "b".into(), "".into(), -1)));
        assert_eq!(registry.records().len(), 2);
        drop(first);
        assert!(!registry.contains(1) && registry.contains(2));
        let ids: Vec<u64> = registry.records().iter().map(|r| r.id).collect();
        assert_eq!(ids, [2]);
        drop(second);
        assert!(registry.records().is_empty());
    }

    #[test]
    fn command_names_are_lowercased_with_their_subcommand_and_bounded() {
        let name = |args: &[&str]| {
            let args: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
            CommandName::of(&args).as_str().to_owned()
        };
        assert_eq!(name(&["SET", "Key", "Value"]), "set");
        assert_eq!(name(&["Client", "LIST"]), "client|list");
        assert_eq!(name(&["config", "get", "maxmemory"]), "config|get");
        assert_eq!(name(&["get", "client"]), "get");
        assert_eq!(name(&["caf\u{e9}"]), "caf??");
        let long = "x".repeat(100);
        assert_eq!(name(&["client", &long]).len(), COMMAND_NAME_BYTES_MAX);
        assert!(CommandName::default().is_empty());
    }

    #[test]
    fn request_bytes_counts_the_resp_encoding() {
        for args in [
            vec![Bytes::from_static(b"get"), Bytes::from_static(b"k")],
            vec![Bytes::from(vec![b'v'; 9]), Bytes::from(vec![b'v'; 10])],
            (0..12).map(|_| Bytes::from(vec![b'a'; 1000])).collect(),
        ] {
            let mut encoded = format!("*{}\r\n", args.len()).into_bytes();
            for arg in &args {
                encoded.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
                encoded.extend_from_slice(arg);
                encoded.extend_from_slice(b"\r\n");
            }
            assert_eq!(request_bytes(&args), encoded.len());
        }
        assert_eq!(decimal_digits(0), 1);
        assert_eq!(decimal_digits(9), 1);
        assert_eq!(decimal_digits(10), 2);
        assert_eq!(decimal_digits(usize::MAX), 20);
    }
}
