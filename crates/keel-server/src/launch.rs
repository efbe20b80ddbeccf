//! Starting a node with its client listener, and operating it: what `keel serve` and `keel up`
//! share. Logs (tracing-subscriber to stderr), the Prometheus endpoint, signals and graceful
//! shutdown live here; the config file in `config.rs`.
//!
//! Logs are human-readable or JSON. Graceful shutdown: stop accepting, a leader hands off
//! within [`HANDOFF_TIMEOUT`] (1 s), then `Node::shutdown` lets the node task end and the storage
//! thread finish its fsync, all within [`SHUTDOWN_TIMEOUT`] (5 s).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel::{Handle, Node, NodeConfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use super::config::{LogFormat, MemorySize, ServeSettings, YesNo};
use super::{serve, ClientLimits, KvAdapter, ServerContext};
use keel_redis::state_machine::KvStateMachine;

/// How long a leader that is shutting down tries to hand leadership to a follower.
pub const HANDOFF_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on a whole shutdown; past it the process exits anyway (with a warning).
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The cluster id `keel up` and `keel serve` use unless told otherwise ("keel" in ASCII).
pub const DEFAULT_CLUSTER_ID: u64 = 0x6b65_656c;

/// Everything one node needs.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub id: u64,
    pub cluster_id: u64,
    pub data_dir: PathBuf,
    pub client_addr: String,
    pub peer_addr: String,
    /// Every member's peer address (`--initial-cluster`). Its ids form the first configuration
    /// when the data directory is empty; the addresses are used on every start.
    pub initial_cluster: BTreeMap<u64, String>,
    /// Other nodes' client addresses (`--client-peers`): an override of what the nodes announce
    /// in their peer handshakes.
    pub client_peers: BTreeMap<u64, String>,
    /// Where other hosts' clients reach this node (`--advertise-client-addr`). Default: the
    /// client listener's address, or, when that is a wildcard (0.0.0.0, ::), the advertised peer
    /// host with the client port.
    pub advertise_client_addr: Option<String>,
    /// Where other nodes reach this one (`--advertise-peer-addr`). Default: the peer listener's
    /// address unless it is a wildcard.
    pub advertise_peer_addr: Option<String>,
    /// The cluster secret peers authenticate with (`--cluster-secret-file`), read once at start.
    pub cluster_secret_file: Option<PathBuf>,
    /// `--requirepass`: the password clients `AUTH` with.
    pub requirepass: Option<String>,
    pub election_timeout_ms: Option<u64>,
    pub heartbeat_ms: Option<u64>,
    pub snapshot_threshold: Option<u64>,
    pub snapshot_threshold_bytes: Option<u64>,
    pub snapshot_log_ratio: Option<u64>,
    pub snapshot_trailing: Option<u64>,
    /// `RAFT.MEMBER ADD`'s catch-up bound and wait (`--catch-up-entries`,
    /// `--catch-up-timeout-ms`).
    pub catch_up_entries: Option<u64>,
    pub catch_up_timeout_ms: Option<u64>,
    /// `--enable-debug-command`: answer `DEBUG PANIC` (a fail-stop test hook) instead of
    /// refusing every DEBUG.
    pub enable_debug_command: bool,
    /// `--maxclients`, `--timeout`, `--client-query-buffer-total-bytes`,
    /// `--client-output-buffer-limit-bytes`.
    pub client_limits: ClientLimits,
    /// `--protected-mode` (`protected.rs`).
    pub protected_mode: bool,
    /// `--maxmemory` in bytes (0: no limit).
    pub maxmemory: u64,
    /// `--databases`: how many databases clients may SELECT (1 to 1,024).
    pub databases: u64,
    /// `--time-tick-ms` (`keel_redis::expiry`); None: the default.
    pub time_tick_ms: Option<u64>,
    /// `--max-clock-offset-ms` (keel-engine's `ClockWatch`); None: the default.
    pub clock_offset_ms_max: Option<u64>,
    /// `--scrub-rate-mib-s` (0: off) and `--scrub-interval-ms`; None: the defaults.
    pub scrub_rate_mib_s: Option<u64>,
    pub scrub_interval_ms: Option<u64>,
}

/// A running node and its client listener.
pub struct RunningNode {
    pub id: u64,
    pub client_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    node: Node<KvAdapter>,
    accept: JoinHandle<()>,
    /// Closed when the node stops: no script outlives it.
    scripts: Arc<keel_redis::script::ScriptRegistry>,
}

impl RunningNode {
    /// Stops accepting clients, then stops the node (see `Node::stop`).
    pub async fn stop(self) {
        self.accept.abort();
        let _ = self.accept.await;
        self.scripts.close();
        self.node.stop().await;
    }

    /// Stops cleanly: no new client connections, then (with `hand_off`, if this node leads)
    /// leadership handed to the most caught-up voter within [`HANDOFF_TIMEOUT`], then the node
    /// (see `Node::shutdown`: its last write is made durable, peers are disconnected).
    pub async fn shutdown(self, hand_off: bool) {
        self.accept.abort();
        let _ = self.accept.await;
        self.scripts.close();
        if hand_off {
            hand_off_leadership(&self.node.handle(), self.id, HANDOFF_TIMEOUT).await;
        }
        self.node.shutdown().await;
        tracing::info!(node = self.id, "node stopped");
    }
}

/// Best effort: if `id` leads, transfer leadership to the voter with the highest match index and
/// wait (at most `limit`) until another node leads, so clients see a new leader at once rather
/// than after an election timeout.
async fn hand_off_leadership(handle: &Handle<KvAdapter>, id: u64, limit: Duration) {
    let started = Instant::now();
    let attempt = async {
        let status = handle.status().await.ok()?;
        if status.raft.leader != Some(id) {
            return None;
        }
        let membership = &status.raft.membership;
        let to = status
            .progress
            .iter()
            .filter(|p| p.id != id && membership.is_voter(p.id))
            .max_by_key(|p| p.match_index)?
            .id;
        tracing::info!(
            node = id,
            to,
            "leader shutting down: handing leadership over"
        );
        handle.transfer_leadership(to).await.ok()?;
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let status = handle.status().await.ok()?;
            if status.raft.leader != Some(id) {
                return Some(status.raft.leader);
            }
        }
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(Some(leader)) => tracing::info!(
            node = id,
            new_leader = ?leader,
            "leadership handed over in {:?}",
            started.elapsed()
        ),
        Ok(None) => {}
        Err(_) => tracing::warn!(
            node = id,
            "leadership not handed over within {limit:?}: stopping anyway"
        ),
    }
}

/// Shuts `nodes` down together (see [`RunningNode::shutdown`]), bounded by
/// [`SHUTDOWN_TIMEOUT`]; a second Ctrl-C or SIGTERM gives up at once. Returns whether every node
/// stopped cleanly in time.
pub async fn shutdown_nodes(nodes: Vec<RunningNode>, hand_off: bool) -> bool {
    let started = Instant::now();
    let tasks: Vec<_> = nodes
        .into_iter()
        .map(|node| tokio::spawn(node.shutdown(hand_off)))
        .collect();
    let all = async {
        for task in tasks {
            let _ = task.await;
        }
    };
    tokio::select! {
        done = tokio::time::timeout(SHUTDOWN_TIMEOUT, all) => match done {
            Ok(()) => {
                tracing::info!("shut down cleanly in {:?}", started.elapsed());
                true
            }
            Err(_) => {
                tracing::warn!(
                    "shutdown did not finish within {SHUTDOWN_TIMEOUT:?}: exiting anyway \
                     (acknowledged writes are durable already)"
                );
                false
            }
        },
        _ = shutdown_signal() => {
            tracing::warn!("second signal during shutdown: exiting at once");
            false
        }
    }
}

/// Sends logs to stderr: readable lines or JSON objects; the level from `level` (an EnvFilter
/// directive such as `info` or `keel_runtime=debug`), else `RUST_LOG`, else `info`.
pub fn init_logging(format: LogFormat, level: Option<&str>) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(level) => {
            EnvFilter::try_new(level).map_err(|e| format!("invalid log level '{level}': {e}"))?
        }
        None => match std::env::var(EnvFilter::DEFAULT_ENV) {
            Ok(env) if !env.trim().is_empty() => EnvFilter::try_new(&env)
                .map_err(|e| format!("invalid {}='{env}': {e}", EnvFilter::DEFAULT_ENV))?,
            _ => EnvFilter::new("info"),
        },
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Human => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| format!("cannot set up logging: {e}"))
}

/// Installs the Prometheus recorder (every histogram with buckets) and serves `GET /metrics` on
/// `addr`. Must run inside the tokio runtime; metrics of nodes started before are not recorded.
pub async fn serve_metrics(addr: &str) -> Result<SocketAddr, String> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    let addr = resolve(addr).await?;
    let mut builder = PrometheusBuilder::new().with_http_listener(addr);
    for (name, buckets) in keel::metrics::HISTOGRAMS {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(name.to_string()), buckets)
            .map_err(|e| format!("metrics buckets for {name}: {e}"))?;
    }
    builder
        .install()
        .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
    keel::metrics::describe();
    Ok(addr)
}

/// `1=host:port,2=host:port`.
pub fn parse_id_map(text: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut map = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| format!("'{item}': expected id=host:port"))?;
        let id: u64 = id
            .trim()
            .parse()
            .ok()
            .filter(|&id| id > 0)
            .ok_or_else(|| format!("'{item}': the id must be a positive integer"))?;
        let addr = addr.trim();
        if addr.rsplit_once(':').is_none() {
            return Err(format!("'{item}': expected id=host:port"));
        }
        if map.insert(id, addr.to_string()).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    Ok(map)
}

async fn resolve(addr: &str) -> Result<SocketAddr, String> {
    tokio::net::lookup_host(addr)
        .await
        .map_err(|e| format!("cannot resolve '{addr}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{addr}' resolves to no address"))
}

/// The seed of a node's election-timeout draws, from its id, its cluster, its process id and the
/// time it started. Different nodes must draw different sequences: two nodes with the same seed
/// draw the same timeouts, and once a split vote restarts both timers together they time out
/// together again, split again, and so on with no leader. Each input is mixed in through
/// SplitMix64's finalizer; XORing them raw let the id and the process id cancel out for nodes
/// started one after the other (ids 2 and 3 as processes p and p + 1, p even, drew the same).
pub fn raft_seed(id: u64, cluster_id: u64, pid: u32, started_ns: u64) -> u64 {
    fn mix(z: u64) -> u64 {
        let z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    mix(mix(mix(mix(id) ^ cluster_id) ^ u64::from(pid)) ^ started_ns)
}

fn ticks(ms: u64, tick_ms: u64) -> Result<u32, String> {
    u32::try_from(ms.div_ceil(tick_ms).max(1)).map_err(|_| format!("{ms} ms is too long"))
}

/// The client address this node announces to the others: the flag, else the listener's address
/// unless it is a wildcard, else the host other nodes reach it at (the advertised or listening
/// peer address) with the client port.
fn advertised_client_addr(
    options: &NodeOptions,
    listening: SocketAddr,
) -> Result<Option<String>, String> {
    if let Some(addr) = &options.advertise_client_addr {
        if !keel::valid_client_addr(addr) {
            return Err(format!(
                "--advertise-client-addr '{addr}': expected host:port"
            ));
        }
        return Ok(Some(addr.clone()));
    }
    if !listening.ip().is_unspecified() {
        return Ok(Some(listening.to_string()));
    }
    let peer = options
        .advertise_peer_addr
        .as_deref()
        .unwrap_or(&options.peer_addr);
    let host = peer.rsplit_once(':').map(|(host, _)| host);
    let wildcard = |host: &str| matches!(host, "0.0.0.0" | "[::]" | "::" | "");
    Ok(host
        .filter(|host| !wildcard(host))
        .map(|host| format!("{host}:{}", listening.port()))
        .filter(|addr| keel::valid_client_addr(addr)))
}

/// Raises the soft open-file limit to the hard one (as Redis does); returns the limit now in
/// force (`None` where there is none to read).
pub fn raise_open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit only read and write the struct given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            // SAFETY: as above.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                limit = raised;
            }
        }
        #[allow(clippy::unnecessary_cast)] // rlim_t is u64 on Linux, not everywhere.
        Some(limit.rlim_cur as u64)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Fits every node's `maxclients` into the process's open-file limit (raised first), the
/// nodes sharing it evenly (`keel up` runs three): lowered where it does not fit, with a
/// warning naming both numbers; an error if a node could serve no client at all. See
/// `limits.rs`.
pub fn fit_descriptors(nodes: &mut [NodeOptions]) -> Result<(), String> {
    let Some(limit) = raise_open_file_limit() else {
        return Ok(());
    };
    let count = nodes.len().max(1) as u64;
    let share = limit / count;
    for options in nodes {
        let members = options.initial_cluster.len();
        let wanted = options.client_limits.maxclients;
        let fits = super::limits::fit_maxclients(wanted, members, share)
            .map_err(|e| format!("node {}: {e}", options.id))?;
        if fits < wanted {
            tracing::warn!(
                node = options.id,
                "maxclients lowered from {wanted} to {fits}: the open file limit (ulimit -n) \
                 is {limit}{}, and each client may take {} descriptors besides the {} the node \
                 keeps for its peers, log and snapshots (raise the hard limit, or set \
                 --maxclients {fits} to silence this)",
                if share < limit {
                    format!(
                        ", {share} for each of {} nodes in this process",
                        limit / share
                    )
                } else {
                    String::new()
                },
                super::limits::DESCRIPTORS_PER_CLIENT,
                super::limits::reserved_descriptors(members),
            );
            options.client_limits.maxclients = fits;
        }
    }
    Ok(())
}

/// Recovers (or bootstraps) the node and starts serving clients.
#[expect(clippy::too_many_lines)]
pub async fn start(options: &NodeOptions) -> Result<RunningNode, String> {
    options
        .client_limits
        .validate(&keel_resp::Limits::default())?;
    let mut config = NodeConfig::new(options.id, options.cluster_id, options.data_dir.clone());
    config.peer_listen_addr = resolve(&options.peer_addr).await?;
    config.transport.cluster_secret = match &options.cluster_secret_file {
        Some(path) => Some(
            keel::load_cluster_secret(path).map_err(|e| format!("--cluster-secret-file {e}"))?,
        ),
        None => {
            tracing::warn!(
                node = options.id,
                "peers are not authenticated: anyone who reaches {} can speak Raft to this node \
                 (set --cluster-secret-file)",
                options.peer_addr
            );
            None
        }
    };
    if let Some(addr) = &options.advertise_peer_addr {
        config.transport.advertise_addr = Some(
            resolve(addr)
                .await
                .map_err(|e| format!("--advertise-peer-addr: {e}"))?,
        );
    }
    for (&id, addr) in &options.initial_cluster {
        config.peers.insert(id, resolve(addr).await?);
    }
    config.initial_members = options.initial_cluster.keys().copied().collect();
    if let Some(ms) = options.election_timeout_ms {
        config.raft.election_timeout_ticks = ticks(ms, config.tick_ms)?;
    }
    if let Some(ms) = options.heartbeat_ms {
        config.raft.heartbeat_interval_ticks = ticks(ms, config.tick_ms)?;
    }
    let tick_ms = time_tick_ms(options)?;
    if let Some(ms) = options.clock_offset_ms_max {
        if ms > CLOCK_OFFSET_MS_MAX_LIMIT {
            return Err(format!(
                "--max-clock-offset-ms {ms}: must be at most {CLOCK_OFFSET_MS_MAX_LIMIT} (0: measure only)"
            ));
        }
        config.clock_offset_ms_max = ms;
    }
    config.scrub = scrub_config(options)?;
    if let Some(n) = options.snapshot_threshold_bytes {
        config.snapshot_threshold_bytes = n.max(1);
    }
    if let Some(n) = options.snapshot_log_ratio {
        config.snapshot_log_ratio = n;
    }
    if let Some(n) = options.snapshot_threshold {
        config.snapshot_threshold_entries = n.max(1);
    }
    if let Some(n) = options.snapshot_trailing {
        config.raft.snapshot_trailing_entries = n;
    }
    config.raft.seed = raft_seed(
        options.id,
        options.cluster_id,
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    std::fs::create_dir_all(&options.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", options.data_dir.display()))?;

    let listener = TcpListener::bind(&options.client_addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", options.client_addr))?;
    let client_addr = listener.local_addr().map_err(|e| e.to_string())?;
    config.transport.advertise_client_addr = advertised_client_addr(options, client_addr)?;
    match &config.transport.advertise_client_addr {
        Some(addr) => tracing::info!(
            node = options.id,
            "clients of other nodes are sent to {addr}"
        ),
        None => tracing::warn!(
            node = options.id,
            "the client listener is a wildcard address and no peer host is known to announce: \
             other nodes cannot forward to this one while it leads (set --advertise-client-addr)"
        ),
    }
    let blocked = Arc::new(crate::blocked::BlockedClients::default());
    let pubsub = Arc::new(keel_session::pubsub::PubSub::default());
    let notifier = Arc::new(crate::notify::KeyspaceNotifier::new(Arc::clone(&pubsub)));
    let adapter = KvAdapter::new(KvStateMachine::new())
        .with_filled_keys_listener(Arc::clone(&blocked) as Arc<dyn keel_redis::FilledKeysListener>)
        .with_key_events_listener(Arc::clone(&notifier) as Arc<dyn keel_redis::KeyEventsListener>);
    let stats = adapter.stats();
    let mut node = Node::start(config, adapter).await.map_err(|e| match &e {
        keel::StartError::Damaged { dir, .. } => format!(
            "node {}: {e}; `keel check --data-dir {}` lists every finding",
            options.id,
            dir.display()
        ),
        _ => format!("node {}: {e}", options.id),
    })?;
    // Fail-stop: a node that stopped by itself (a storage error, a panic, damage the scrub
    // found) takes its process with it, for a supervisor to restart (`fail_stop.rs`).
    keel::exit_on_failure(&node);
    let mut ctx = ServerContext::new(
        options.id,
        node.handle(),
        stats,
        options.initial_cluster.clone(),
        options.client_peers.clone(),
    );
    ctx.blocked = blocked;
    ctx.pubsub = pubsub;
    if let Some(entries) = options.catch_up_entries {
        ctx.catch_up.entries = entries;
    }
    if let Some(ms) = options.catch_up_timeout_ms {
        ctx.catch_up.timeout = Duration::from_millis(ms);
    }
    ctx.enable_debug_command = options.enable_debug_command;
    ctx.client_limits = options.client_limits;
    ctx.requirepass = options
        .requirepass
        .as_ref()
        .map(|password| bytes::Bytes::copy_from_slice(password.as_bytes()));
    ctx.protected_mode = options.protected_mode;
    ctx.maxmemory = options.maxmemory;
    ctx.databases = options.databases;
    ctx.time_tick_ms = tick_ms;
    ctx.scrub = node.scrub_counters();
    super::pubsub::connect(&mut node, &ctx.pubsub);
    if ctx.protected_mode && ctx.requirepass.is_none() && !client_addr.ip().is_loopback() {
        tracing::warn!(
            node = options.id,
            "protected mode: no --requirepass, so clients connecting to {client_addr} from \
             other hosts than the cluster's members are refused (set --requirepass, or \
             --protected-mode no)"
        );
    }
    ctx.report_config();
    ctx.config.set_listener(client_addr);
    notifier.set_config(Arc::clone(&ctx.config));
    go_live_after_replay(node.handle(), notifier);
    let scripts = Arc::clone(&ctx.scripts);
    let accept = tokio::spawn(serve(listener, Arc::new(ctx)));
    Ok(RunningNode {
        id: options.id,
        client_addr,
        peer_addr: node.peer_addr(),
        node,
        accept,
        scripts,
    })
}

/// Makes `notifier` live once the node serves: the status is answered after the startup
/// replay, and names the last entry the log held then (`notify.rs`).
fn go_live_after_replay(
    handle: keel::Handle<KvAdapter>,
    notifier: Arc<crate::notify::KeyspaceNotifier>,
) {
    tokio::spawn(async move {
        loop {
            match handle.status().await {
                Ok(status) if status.serving => {
                    notifier.live_after(status.raft.last_log_id.index);
                    return;
                }
                // The node stopped: nothing is applied any more.
                Err(keel::ClientError::Shutdown) => return,
                // Still replaying (or slow to answer): ask again.
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    });
}

/// `--scrub-rate-mib-s` default: a pass over a default-sized log (a few 128 MiB segments and
/// its snapshots) takes about a minute, a small share of any disk's bandwidth.
const SCRUB_RATE_MIB_S_DEFAULT: u64 = 8;
/// Largest `--scrub-rate-mib-s`: 64 GiB/s, beyond any device (keeps the byte rate in range).
const SCRUB_RATE_MIB_S_MAX: u64 = 64 << 10;
const SCRUB_INTERVAL_MS_DEFAULT: u64 = 60_000;
/// Largest `--scrub-interval-ms`: a day.
const SCRUB_INTERVAL_MS_MAX: u64 = 86_400_000;

/// The scrub the node runs: damage both passes agree on restarts this process in place
/// ([`super::restart::restart_in_place`]), and on the way up `Wal::open_repairing` sets the
/// damaged files aside and the node recovers what it lacks from the cluster.
fn scrub_config(options: &NodeOptions) -> Result<keel::scrub::ScrubConfig, String> {
    let rate_mib_s = options.scrub_rate_mib_s.unwrap_or(SCRUB_RATE_MIB_S_DEFAULT);
    if rate_mib_s > SCRUB_RATE_MIB_S_MAX {
        return Err(format!(
            "--scrub-rate-mib-s {rate_mib_s}: must be at most {SCRUB_RATE_MIB_S_MAX} (0: no scrub)"
        ));
    }
    let interval_ms = options
        .scrub_interval_ms
        .unwrap_or(SCRUB_INTERVAL_MS_DEFAULT);
    if interval_ms > SCRUB_INTERVAL_MS_MAX {
        return Err(format!(
            "--scrub-interval-ms {interval_ms}: must be at most {SCRUB_INTERVAL_MS_MAX}"
        ));
    }
    Ok(keel::scrub::ScrubConfig {
        rate_bytes_per_s: rate_mib_s << 20,
        pause_between_passes: Duration::from_millis(interval_ms),
        on_damage: keel::scrub::OnDamage::Call(std::sync::Arc::new(|_| {
            super::restart::restart_in_place("the scrub found damage on disk")
        })),
    })
}

/// Largest `--max-clock-offset-ms`: an hour (beyond it the bound bounds nothing useful).
const CLOCK_OFFSET_MS_MAX_LIMIT: u64 = 3_600_000;

/// Longest `--time-tick-ms`: expiry may be late by about this much on an idle cluster.
const TIME_TICK_MS_MAX: u64 = 60_000;

fn time_tick_ms(options: &NodeOptions) -> Result<u64, String> {
    match options.time_tick_ms {
        None => Ok(keel_redis::expiry::TIME_TICK_MS_DEFAULT),
        Some(ms) if (1..=TIME_TICK_MS_MAX).contains(&ms) => Ok(ms),
        Some(ms) => Err(format!(
            "--time-tick-ms {ms}: must be between 1 and {TIME_TICK_MS_MAX}"
        )),
    }
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_maps_parse_and_reject_bad_items() {
        let map = parse_id_map("1=127.0.0.1:7001, 2=localhost:7002,").unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map[&2], "localhost:7002");
        assert!(parse_id_map("0=a:1").is_err());
        assert!(parse_id_map("1=a").is_err());
        assert!(parse_id_map("x=a:1").is_err());
        assert!(parse_id_map("1=a:1,1=b:2").is_err());
        assert!(parse_id_map("").unwrap().is_empty());
    }

    /// The nodes of a cluster started one after the other (consecutive process ids, even in the
    /// same nanosecond) get different seeds, whatever the process ids and the cluster.
    #[test]
    fn nodes_started_together_draw_different_election_timeouts() {
        for cluster_id in [0, 1, 0x5eed, u64::MAX] {
            for first_pid in 1_000..1_256u32 {
                for started_ns in [0, 1_796_616_104_062_033_691] {
                    let seeds: std::collections::BTreeSet<u64> = (0..3u32)
                        .map(|i| raft_seed(u64::from(i) + 1, cluster_id, first_pid + i, started_ns))
                        .collect();
                    assert_eq!(
                        seeds.len(),
                        3,
                        "pids from {first_pid}, cluster {cluster_id}"
                    );
                }
            }
        }
    }
}
