//! The RESP server: one node of the runtime behind a TCP listener for Redis clients.
//!
//! ```text
//! socket -> Decoder -> ClientConnection::dispatch
//!     Reply          sent as is (INFO / RAFT.STATUS get a fresh NodeReport first)
//!     Write          propose LogCommand { client_id, seq, stamp_ms, cmd } (stamp_ms: this
//!                    node's wall clock when the batch is proposed); the result is a WriteReply
//!     Read           Handle::read (ReadIndex, linearizable)
//!     Admin          Handle::add_learner / promote / remove / transfer_leadership / snapshot_now
//!   NotLeader -> forward the request to the leader's client address over a per-connection RESP
//!                connection and relay the reply; otherwise (address unknown, or the request
//!                was itself forwarded) `-TRYAGAIN leader is node N at <client addr>`,
//!                `-TRYAGAIN leader is node N; its client address is unknown` or
//!                `-TRYAGAIN no leader`.
//! ```
//!
//! What connections share lives here ([`ServerContext`]): the status INFO reports (with the
//! counters, `getrusage` CPU times and the leader's follower progress), the admin commands, the
//! connection count and the sampled rates.
//!
//! The leader's client address ([`ServerContext::client_addr`]): `client_peers`
//! (`--client-peers`, an override) if it names the leader, else the client address
//! `RAFT.MEMBER ADD ... CLIENT` recorded through the log (replicated, so every member has it),
//! else what the runtime learned from handshakes (every member announces its client address in
//! the handshakes of its peer connections, and a leader connects to every member).
//!
//! Replies of one connection leave in request order; pipelined requests overlap (runs of writes
//! are proposed as one batch, runs of reads share ReadIndex rounds): see `connection.rs`.
//!
//! Request ids: every connection draws a random 64-bit client id and numbers its writes 1, 2, ...
//! A write on the leader is proposed once: a timeout answers `-TRYAGAIN outcome unknown`. A write
//! a follower forwards keeps the id the follower gave it (`RAFT.FORWARD <client-id> <seq>` just
//! before it): after a lost link, no reply in time or a not-leader answer it is sent again under
//! that id until answered or its deadline passes (`leader_link.rs`, decided by
//! `keel_session::forwarding`), and the state machine's deduplication applies it once.

pub mod blocked;
mod buffers;
pub mod config;
mod connection;
pub mod fail_stop;
pub mod launch;
mod leader_link;
pub mod limits;
mod membership;
mod notify;
pub mod protected;
mod pubsub;
mod restart;
mod socket;
mod time;

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use keel::{ClientError, Handle};
use tokio::net::TcpListener;

pub use keel_redis::adapter::{KvAdapter, SmStats, SmStatsValue};
pub use keel_session::connection::DATABASES_DEFAULT;
pub use limits::ClientLimits;
use limits::{AcceptErrors, ServerShared};

use keel_redis::command::{AdminCommand, DebugCommand};
use keel_resp::{Limits, Reply};
use keel_session::connection::{
    ClientRegistry, ConfigValues, CpuTimes, FollowerInfo, MemberInfo, NodeInfo, NodeReport,
    ServerStats, SharedConfig, RATE_SAMPLE_INTERVAL,
};

pub(crate) use keel_redis::command::FORWARD_CLIENT_NAME;

/// Everything the connections of one node share.
pub struct ServerContext {
    pub node_id: u64,
    pub handle: Handle<KvAdapter>,
    pub stats: Arc<SmStats>,
    pub limits: Limits,
    /// Peer addresses as this node knows them (initial cluster, members added through it).
    pub peer_addrs: Mutex<BTreeMap<u64, String>>,
    /// Client addresses given on the command line (`--client-peers`): they override what the
    /// runtime learns from handshakes.
    pub client_addrs: BTreeMap<u64, String>,
    /// How `RAFT.MEMBER ADD` waits for a new member to catch up.
    pub catch_up: membership::CatchUp,
    /// `--requirepass`: clients authenticate with `AUTH` before anything else runs.
    pub requirepass: Option<Bytes>,
    /// `--enable-debug-command`: whether `DEBUG` runs (otherwise it is refused, as in Redis).
    pub enable_debug_command: bool,
    pub client_limits: ClientLimits,
    /// `--protected-mode`: without `requirepass`, clients from other hosts than loopback and the
    /// members' are refused (`protected.rs`).
    pub protected_mode: bool,
    /// `--maxmemory` (0: no limit): past it the leader refuses writes that may grow memory.
    /// The value at start: CONFIG SET changes [`Self::config`]'s, which is the one in force.
    pub maxmemory: u64,
    /// `--databases`: how many databases clients may SELECT.
    pub databases: u64,
    /// `--time-tick-ms`: how far the log's time may lag the leader's clock (`keel_redis::expiry`).
    pub time_tick_ms: u64,
    /// Members' host names, resolved (for protected mode).
    member_hosts: protected::ResolvedHosts,
    /// The settings in force: CONFIG GET reports them, CONFIG SET changes them (`maxmemory`,
    /// `timeout`, `maxclients`); filled from the ones above by [`Self::report_config`].
    pub config: Arc<SharedConfig>,
    /// Connections and their buffers, as the bounds count them.
    shared: Arc<ServerShared>,
    /// What CLIENT LIST shows of each connection.
    client_registry: Arc<ClientRegistry>,
    /// The node's pub/sub subscriptions (`pubsub.rs`).
    pub pubsub: Arc<keel_session::pubsub::PubSub>,
    /// The counters INFO reports (stats, commandstats, errorstats); CONFIG RESETSTAT zeroes them.
    pub server_stats: Arc<ServerStats>,
    /// The background scrub's counters (`keel::scrub`), for INFO.
    pub scrub: Arc<keel::scrub::ScrubCounters>,
    /// The script cache and the scripts running (`keel_redis::script`).
    pub scripts: Arc<keel_redis::script::ScriptRegistry>,
    /// Held by a script running again after a conflict, so that such runs do not conflict
    /// with each other (`connection/script_runner.rs`).
    pub script_turn: tokio::sync::Mutex<()>,
    /// The clients waiting in a blocking pop (`connection/blocking.rs`); the state machine's
    /// apply wakes them.
    pub blocked: Arc<blocked::BlockedClients>,
    next_connection_id: AtomicU64,
}

impl ServerContext {
    pub fn new(
        node_id: u64,
        handle: Handle<KvAdapter>,
        stats: Arc<SmStats>,
        peer_addrs: BTreeMap<u64, String>,
        client_addrs: BTreeMap<u64, String>,
    ) -> Self {
        ServerContext {
            node_id,
            handle,
            stats,
            limits: Limits::default(),
            peer_addrs: Mutex::new(peer_addrs),
            client_addrs,
            catch_up: membership::CatchUp::default(),
            requirepass: None,
            enable_debug_command: false,
            client_limits: ClientLimits::default(),
            protected_mode: true,
            maxmemory: 0,
            databases: keel_session::connection::DATABASES_DEFAULT,
            time_tick_ms: keel_redis::expiry::TIME_TICK_MS_DEFAULT,
            member_hosts: protected::ResolvedHosts::default(),
            config: Arc::default(),
            shared: Arc::default(),
            client_registry: Arc::default(),
            pubsub: Arc::default(),
            server_stats: Arc::default(),
            scrub: Arc::default(),
            scripts: Arc::default(),
            script_turn: tokio::sync::Mutex::new(()),
            blocked: Arc::default(),
            next_connection_id: AtomicU64::new(1),
        }
    }

    /// This node's status for INFO: the runtime's view, then the state machine's (in that order,
    /// so `state_digest` is the digest at the reported `applied_index`: every key-value entry at
    /// or below the runtime's applied index is already in the stats read after it).
    #[expect(clippy::too_many_lines)]
    pub async fn node_status(&self) -> NodeReport {
        let runtime = self.handle.status().await;
        let stats = self.stats.get();
        let peer_addrs = self
            .peer_addrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut status = NodeReport {
            node_id: self.node_id,
            role: "unknown".into(),
            applied_index: stats.applied_index,
            state_digest: stats.state_digest,
            log_time_ms: stats.log_time_ms,
            keyspace: self.stats.keyspace().to_vec(),
            keys: stats.keys,
            expires: stats.expires,
            connected_clients: self.client_registry.live() as u64,
            blocked_clients: self.blocked.blocked() as u64,
            maxclients: self.config.read().maxclients,
            client_query_buffers_bytes: self.shared.query_buffers_bytes.load(Ordering::Relaxed)
                as u64,
            used_memory: stats.used_bytes,
            used_memory_rss: resident_bytes().unwrap_or(0),
            maxmemory: self.config.read().maxmemory,
            stats: keel_session::connection::StatsSnapshot {
                pubsub_channels: self.pubsub.channel_count() as u64,
                pubsub_patterns: self.pubsub.numpat() as u64,
                ..self.server_stats.snapshot()
            },
            cpu: cpu_times(),
            scrub_passes: self.scrub.passes.load(Ordering::Relaxed),
            scrub_damage_found: self.scrub.damage_found.load(Ordering::Relaxed),
            ..NodeReport::default()
        };
        let Ok(runtime) = runtime else {
            return status;
        };
        let raft = &runtime.raft;
        let membership = &raft.membership;
        status.role = if membership.is_learner(self.node_id) {
            "learner".into()
        } else {
            format!("{:?}", raft.role).to_ascii_lowercase()
        };
        status.term = raft.term;
        status.leader_id = raft.leader;
        status.commit_index = raft.commit;
        status.applied_index = raft.applied.max(stats.applied_index);
        status.snapshot_index = raft.snapshot.index;
        // The runtime does not report the log's first index; with no entries kept behind the
        // snapshot it is the one after it (the log may hold up to snapshot_trailing more).
        status.first_log_index = raft.snapshot.index + 1;
        status.last_log_index = raft.last_log_id.index;
        status.clock_offset_ms = runtime.clock.offset_ms;
        status.campaigns_held = runtime.clock.campaigns_held;
        status.heartbeat_gap_max_ms = runtime.clock.heartbeat_gap_max_ms;
        status.clock_outlier = runtime.clock.outlier;
        status.recovering_to = raft.recovering_to.map(|promised| promised.index);
        status.follower_clock_offsets = runtime.clock.follower_offsets.clone();
        status.members = membership
            .members()
            .into_iter()
            .map(|id| MemberInfo {
                id,
                peer_addr: self.peer_addr(id, &peer_addrs),
                client_addr: self.client_addr(id).unwrap_or_default(),
                voter: !membership.is_learner(id),
            })
            .collect();
        status.followers = runtime
            .progress
            .iter()
            .map(|p| FollowerInfo {
                id: p.id,
                client_addr: self.client_addr(p.id).unwrap_or_default(),
                match_index: p.match_index,
                replicating: p.replicating,
                recently_active: p.recently_active,
            })
            .collect();
        status
    }
}

impl ServerContext {
    /// Fills [`Self::config`] from the settings (call once they are all set).
    pub fn report_config(&mut self) {
        let maxclients = self.client_limits.maxclients as u64;
        self.config = Arc::new(SharedConfig::new(ConfigValues {
            maxclients,
            maxclients_max: maxclients,
            timeout_seconds: self.client_limits.idle_timeout.map_or(0, |t| t.as_secs()),
            maxmemory: self.maxmemory,
            databases: self.databases,
            protected_mode: self.protected_mode,
            ..ConfigValues::default()
        }));
    }

    /// Whether a write that may grow memory (`may_grow`) is refused here: past `maxmemory`, on
    /// the leader. The leader decides; a follower proposes as usual, is told it does not lead,
    /// and forwards the write to the leader, which checks its own figure. The runtime is asked
    /// who leads only when this node's data is past the limit, so writes cost nothing extra
    /// below it.
    async fn out_of_memory(&self, may_grow: bool) -> bool {
        let maxmemory = self.config.maxmemory();
        if maxmemory == 0 || !may_grow || self.stats.get().used_bytes <= maxmemory {
            return false;
        }
        self.handle
            .status()
            .await
            .is_ok_and(|status| status.raft.leader == Some(self.node_id))
    }

    /// Whether protected mode can refuse anyone here (on, and no password).
    fn protecting(&self) -> bool {
        self.protected_mode && self.requirepass.is_none()
    }

    /// Whether protected mode refuses a client connecting from `peer`.
    fn protected_mode_refuses(&self, peer: std::net::IpAddr) -> bool {
        protected::refuses(
            self.protected_mode,
            self.requirepass.is_some(),
            peer,
            |ip| {
                let mut names = Vec::new();
                self.member_hosts.contains(ip) || self.member_ips(&mut names).contains(&ip)
            },
        )
    }

    /// The IP literals among the members' addresses as this node knows them (see
    /// `protected.rs`); the host names in `names`.
    fn member_ips(&self, names: &mut Vec<String>) -> std::collections::HashSet<std::net::IpAddr> {
        let given = self
            .peer_addrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let recorded = self.stats.member_addrs();
        let announced = self.handle.client_addrs();
        let recorded_addrs: Vec<String> = recorded
            .values()
            .flat_map(|a| [&a.peer, &a.client])
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let addrs = given
            .values()
            .chain(self.client_addrs.values())
            .chain(announced.values())
            .chain(recorded_addrs.iter())
            .map(String::as_str);
        protected::hosts(addrs, names)
    }

    /// Resolves the members' host names every [`protected::RESOLVE_INTERVAL`] (while protected
    /// mode can refuse anyone).
    async fn resolve_member_hosts(&self) {
        if !self.protecting() {
            return;
        }
        loop {
            let mut names = Vec::new();
            self.member_ips(&mut names);
            names.sort();
            names.dedup();
            let mut resolved = std::collections::HashSet::new();
            for name in names {
                let lookup = tokio::net::lookup_host(format!("{name}:0"));
                if let Ok(Ok(addrs)) =
                    tokio::time::timeout(protected::RESOLVE_INTERVAL, lookup).await
                {
                    resolved.extend(addrs.map(|a| a.ip().to_canonical()));
                }
            }
            self.member_hosts.replace(resolved);
            tokio::time::sleep(protected::RESOLVE_INTERVAL).await;
        }
    }

    /// Where `id`'s clients reach it: the command line's override, else the address recorded
    /// with its membership change (`RAFT.MEMBER ADD ... CLIENT`, replicated), else what it
    /// announced in its peer handshakes.
    pub fn client_addr(&self, id: u64) -> Option<String> {
        self.client_addrs
            .get(&id)
            .cloned()
            .or_else(|| self.recorded_client_addr(id))
            .or_else(|| self.handle.client_addr(id))
    }

    /// The client address recorded with `id`'s membership change, if one was given.
    fn recorded_client_addr(&self, id: u64) -> Option<String> {
        let recorded = self.stats.member_addrs();
        let client = &recorded.get(&id)?.client;
        (!client.is_empty()).then(|| String::from_utf8_lossy(client).into_owned())
    }

    /// Where `id`'s peers reach it: as given to this node, else as recorded with its membership
    /// change.
    fn peer_addr(&self, id: u64, given: &BTreeMap<u64, String>) -> String {
        given.get(&id).cloned().unwrap_or_else(|| {
            self.stats
                .member_addrs()
                .get(&id)
                .map(|addrs| String::from_utf8_lossy(&addrs.peer).into_owned())
                .unwrap_or_default()
        })
    }
}

/// A `NodeInfo` answering with a status fetched beforehand (INFO is synchronous in the protocol
/// layer, the runtime's status is not).
struct Fetched(NodeReport, bool);

impl NodeInfo for Fetched {
    fn status(&self) -> NodeReport {
        self.0.clone()
    }

    fn script_busy(&self) -> bool {
        self.1
    }
}

impl ServerContext {
    /// Whether a script has run here longer than `busy-reply-threshold` (`keel_redis::script`).
    fn script_busy(&self) -> bool {
        if self.scripts.running() == 0 {
            // The common case, without the config's lock or the clock.
            return false;
        }
        let threshold_ms = self.config.read().busy_reply_threshold_ms;
        self.scripts.busy(
            std::time::Instant::now(),
            std::time::Duration::from_millis(threshold_ms),
        )
    }
}

/// This node's wall clock in ms since the Unix epoch: the stamp of every entry it proposes
/// (`state_machine/log_command.rs`), read when the entry is proposed. A clock set before the
/// epoch reads 0, "no time" (the state machine's time then stays where the log left it).
pub(crate) use keel::wall_clock_ms;

/// A random 64-bit id per client connection (the request-id namespace in the log).
fn random_client_id() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Accepts client connections until the task is aborted. Beyond `maxclients` a new connection
/// is told so and closed; failed accepts (out of file descriptors, ...) are retried after a
/// pause and logged at most once a second.
pub async fn serve(listener: TcpListener, ctx: Arc<ServerContext>) {
    tokio::join!(
        accept(listener, &ctx),
        ctx.resolve_member_hosts(),
        time::keep_time(&ctx),
        sample_rates(&ctx.server_stats)
    );
}

/// Samples the counters for INFO's `instantaneous_*` rates, as Redis does ten times a second.
async fn sample_rates(stats: &ServerStats) {
    let mut interval = tokio::time::interval(RATE_SAMPLE_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        stats.sample(std::time::Instant::now());
    }
}

async fn accept(listener: TcpListener, ctx: &Arc<ServerContext>) {
    let mut errors = AcceptErrors::default();
    let mut denied = AcceptErrors::default();
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                if ctx.protected_mode_refuses(peer.ip()) {
                    if let Some(count) = denied.record(std::time::Instant::now()) {
                        tracing::warn!(
                            node = ctx.node_id,
                            client = %peer,
                            "protected mode: refused {count} client connection(s) from other \
                             hosts than loopback and the cluster's members since the last \
                             report (set --requirepass, or --protected-mode no)"
                        );
                    }
                    connection::refuse(stream, &ctx.shared, protected::DENIED);
                    continue;
                }
                let Some(slot) = ctx.shared.admit(ctx.config.read().maxclients as usize) else {
                    ctx.server_stats.connection_rejected();
                    connection::refuse(stream, &ctx.shared, MAXCLIENTS_REACHED);
                    continue;
                };
                ctx.server_stats.connection_received();
                let ctx = Arc::clone(ctx);
                tokio::spawn(async move {
                    let _slot = slot;
                    let _ = connection::serve_connection(stream, peer, &ctx).await;
                });
            }
            Err(e) => {
                if let Some(failures) = errors.record(std::time::Instant::now()) {
                    tracing::warn!(
                        node = ctx.node_id,
                        failures,
                        "accepting a client connection failed: {e} ({failures} failed since the \
                         last report; retrying every {ACCEPT_BACKOFF:?})"
                    );
                }
                // Out of file descriptors and the like: back off instead of spinning.
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// The CPU time of this process and of its children (`getrusage`).
fn cpu_times() -> Option<CpuTimes> {
    fn usage(who: libc::c_int) -> Option<(u64, u64)> {
        // SAFETY: getrusage only writes the struct it is given, which is plain data.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut usage) } != 0 {
            return None;
        }
        let us = |t: libc::timeval| {
            u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec).unwrap_or(0)
        };
        Some((us(usage.ru_stime), us(usage.ru_utime)))
    }
    let (sys_us, user_us) = usage(libc::RUSAGE_SELF)?;
    let (children_sys_us, children_user_us) = usage(libc::RUSAGE_CHILDREN)?;
    Some(CpuTimes {
        sys_us,
        user_us,
        children_sys_us,
        children_user_us,
    })
}

/// The process's resident set, from `/proc/self/status` (`None` where there is none).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Redis's words for a write refused past `maxmemory`.
pub(crate) const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Redis's words.
const MAXCLIENTS_REACHED: &str = "ERR max number of clients reached";

/// Pause after a failed accept.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

async fn admin(ctx: &ServerContext, command: AdminCommand) -> Result<Reply, ClientError> {
    match command {
        AdminCommand::MemberAdd {
            id,
            peer_addr,
            learner,
            client_addr,
        } => membership::add(ctx, id, peer_addr, learner, client_addr).await,
        AdminCommand::MemberRemove { id, force } => membership::remove(ctx, id, force).await,
        AdminCommand::Transfer { id } => {
            ctx.handle.transfer_leadership(id).await?;
            Ok(Reply::OK)
        }
        AdminCommand::Snapshot { save } => {
            let index = ctx.handle.snapshot_now().await?;
            // SAVE answers as Redis does: every acknowledged write was durable already.
            Ok(if save {
                Reply::OK
            } else {
                Reply::Integer(index as i64)
            })
        }
        AdminCommand::Debug(command) => debug(ctx, command).await,
    }
}

/// Redis 7's refusal, with keel's way of allowing it (keel has no "local" setting).
const DEBUG_NOT_ALLOWED: &str =
    "ERR DEBUG command not allowed. If the enable-debug-command option \
     is off (the default), you need to set it (--enable-debug-command, or enable-debug-command = \
     true in the configuration file), and then restart the server.";

async fn debug(ctx: &ServerContext, command: DebugCommand) -> Result<Reply, ClientError> {
    if !ctx.enable_debug_command {
        return Ok(Reply::error(DEBUG_NOT_ALLOWED));
    }
    match command {
        DebugCommand::Panic => {
            tracing::warn!(node = ctx.node_id, "DEBUG PANIC: panicking the node task");
            ctx.handle.debug_panic().await?;
            Ok(Reply::OK)
        }
        DebugCommand::Unknown(subcommand) => Ok(Reply::error(format!(
            "ERR unknown subcommand '{subcommand}'. keel's DEBUG knows only PANIC."
        ))),
    }
}
