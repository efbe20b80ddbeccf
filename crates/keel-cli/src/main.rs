//! The `keel` binary.
//!
//! `keel serve` runs one node, `keel up` a local three-node cluster in one process; `keel status`,
//! `keel member` and `keel transfer` talk RESP to running nodes; `keel bench` is a load generator
//! that works against any RESP server; `keel check` verifies a stopped node's data directory.
//!
//! `keel recover --force-new-cluster` makes a stopped node the single voter of a new
//! configuration, offline (`run_recover`, calling `keel_runtime::recover::force_new_cluster`).

/// mimalloc rather than the system allocator: the runtime frees many small buffers on another
/// thread than the one that allocated them (entries, replies, frames), which glibc's malloc
/// handles poorly. Measured +15-25% on `keel bench` against `keel up` (docs/performance-log.md,
/// "The measurements").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod admin;
mod check;
mod memory;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use keel_bench::{self as bench, BenchConfig, Stop};
use keel_server::launch::{self, LogFormat, NodeOptions, ServeSettings, DEFAULT_CLUSTER_ID};

#[derive(Parser, Debug)]
#[command(
    name = "keel",
    version,
    about = "keel: a Raft-replicated key-value server speaking RESP"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start a local three-node cluster in the foreground (client ports 6379-6381).
    Up(UpArgs),
    /// Run one node.
    Serve(Box<ServeArgs>),
    /// Show every member of a cluster: role, term, commit, applied, lag.
    Status(AdminTarget),
    /// Add or remove a cluster member.
    Member {
        #[command(subcommand)]
        action: MemberAction,
    },
    /// Transfer leadership to a node.
    Transfer {
        /// The node that should lead.
        id: u64,
        #[command(flatten)]
        target: AdminTarget,
    },
    /// Closed-loop RESP load generator; works against any RESP server (keel or redis-server).
    Bench(BenchArgs),
    /// Offline repair of a stopped node's data directory (see docs/operating.md, "When a quorum
    /// is lost for good").
    Recover(RecoverArgs),
    /// Verify a stopped node's data directory offline (log, snapshots, promise record) and say
    /// what is damaged, without changing anything. Exit status 0: clean; 1: damaged.
    Check(CheckArgs),
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// The stopped node's data directory.
    #[arg(long)]
    data_dir: PathBuf,
}

#[derive(Args, Debug)]
struct RecoverArgs {
    /// The stopped node's data directory.
    #[arg(long)]
    data_dir: PathBuf,
    /// The node's id.
    #[arg(long)]
    id: u64,
    /// Make this node the single voter of a new configuration, from its own log. Only when the
    /// other members are gone for good: every entry in this node's log will commit.
    #[arg(long)]
    force_new_cluster: bool,
}

#[derive(Args, Debug)]
struct UpArgs {
    /// Where the three nodes keep their data (running again resumes the same cluster).
    #[arg(long, default_value = "./keel-data")]
    data_dir: PathBuf,
    #[command(flatten)]
    tunables: Tunables,
    #[command(flatten)]
    ops: OpsArgs,
}

/// Logs and metrics, for `keel serve` and `keel up`.
#[derive(Args, Debug)]
struct OpsArgs {
    /// Log lines on stderr: `human` (default) or `json` (one object per line).
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// Log filter, e.g. `info`, `debug`, `keel_runtime=debug,info` (default: RUST_LOG, else
    /// info).
    #[arg(long)]
    log_level: Option<String>,
    /// Serve Prometheus metrics at http://host:port/metrics (off when not given). With `keel
    /// up`, one endpoint for the three nodes (each metric has a `node` label).
    #[arg(long)]
    metrics_addr: Option<String>,
    /// Async worker threads (1 to 1024; default: one per core). docs/performance-log.md has what
    /// one worker did on a 2-core machine shared by `keel up` and its client.
    #[arg(long)]
    worker_threads: Option<usize>,
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// This node's id (a positive integer).
    #[arg(long)]
    id: Option<u64>,
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address for Redis clients, host:port.
    #[arg(long)]
    client_addr: Option<String>,
    /// Address for the other nodes, host:port.
    #[arg(long)]
    peer_addr: Option<String>,
    /// `1=host:port,2=host:port,...`: the first configuration, used only when the data dir is
    /// empty.
    #[arg(long)]
    initial_cluster: Option<String>,
    /// `1=host:port,2=host:port,...`: the other nodes' client addresses, overriding what they
    /// announce (every node announces its own to the others, so forwarding needs no list).
    #[arg(long)]
    client_peers: Option<String>,
    /// Where other hosts' clients reach this node, host:port (needed when --client-addr is a
    /// wildcard such as 0.0.0.0 and the peer host is not the client host) [default: the client
    /// address, or the peer host with the client port].
    #[arg(long)]
    advertise_client_addr: Option<String>,
    /// Where the other nodes reach this node, host:port (needed when --peer-addr is a wildcard)
    /// [default: the peer address].
    #[arg(long)]
    advertise_peer_addr: Option<String>,
    /// A file holding the cluster secret (at least 32 bytes, readable by this user only): peers
    /// must prove they know it, and every peer frame is authenticated. Without it anyone who
    /// reaches the peer port can speak Raft to this node.
    #[arg(long)]
    cluster_secret_file: Option<PathBuf>,
    /// Clients must `AUTH` with this password (user `default`) before anything else, as with
    /// Redis's `requirepass`. Give every node of a cluster the same one: followers forward with it.
    #[arg(long)]
    requirepass: Option<String>,
    /// A TOML file with the same keys as these flags (`data-dir = "..."`); flags given here
    /// override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Allow the DEBUG command (DEBUG PANIC panics the node: for testing fail-stop). Off by
    /// default, as in Redis: DEBUG is then refused.
    #[arg(long)]
    enable_debug_command: bool,
    #[command(flatten)]
    clients: ClientArgs,
    #[command(flatten)]
    tunables: Tunables,
    #[command(flatten)]
    ops: OpsArgs,
}

/// Bounds on what clients may take of a node (docs/operating.md, "Client bounds and memory").
#[derive(Args, Debug)]
struct ClientArgs {
    /// Most client connections served at once; beyond, a new one is answered `-ERR max number
    /// of clients reached` and closed [default: 10000].
    #[arg(long)]
    maxclients: Option<usize>,
    /// Close a client idle for this many seconds (0: never) [default: 0].
    #[arg(long)]
    timeout: Option<u64>,
    /// Bound on all client connections' input buffers together; a connection whose request
    /// would go past it is answered an error and closed [default: 1073741824 (1 GiB)].
    #[arg(long)]
    client_query_buffer_total_bytes: Option<usize>,
    /// Bound on the replies one client has not read; a client that stops reading is closed
    /// once past it [default: 268435456 (256 MiB)].
    #[arg(long)]
    client_output_buffer_limit_bytes: Option<usize>,
    /// yes: without --requirepass, serve only clients connecting from loopback or from a
    /// cluster member's host; others are answered `-DENIED ...` and closed [default: yes].
    #[arg(long, value_name = "yes|no")]
    protected_mode: Option<launch::YesNo>,
    /// Refuse writes that may grow memory (`-OOM ...`) while the data takes more than this:
    /// bytes, or Redis's units (100mb, 4gb) [default: 0, no limit].
    #[arg(long, value_name = "BYTES")]
    maxmemory: Option<launch::MemorySize>,
    /// Only `noeviction` (writes refused past --maxmemory, nothing evicted).
    #[arg(long)]
    maxmemory_policy: Option<String>,
    /// How many databases clients may SELECT, from 1 to 1024 [default: 16].
    #[arg(long, value_name = "N")]
    databases: Option<u64>,
}

#[derive(Args, Debug)]
struct Tunables {
    /// Election timeout, randomised per node between this and twice this.
    #[arg(long)]
    election_timeout_ms: Option<u64>,
    /// Leader heartbeat interval.
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// The leader commits a tick entry when the log's time is this far behind its clock (the
    /// log's time is what expiry is judged by) [default: 100].
    #[arg(long)]
    time_tick_ms: Option<u64>,
    /// A node whose clock is further than this from its leader's (measured on heartbeats) does
    /// not campaign; 0 only measures [default: 500].
    #[arg(long = "max-clock-offset-ms", value_name = "MAX_CLOCK_OFFSET_MS")]
    clock_offset_ms_max: Option<u64>,
    /// The background scrub re-reads the data directory's sealed log segments and snapshots at
    /// most this fast, in MiB/s, and restarts the node to repair what it finds; 0: no scrub
    /// [default: 8].
    #[arg(long)]
    scrub_rate_mib_s: Option<u64>,
    /// The pause between two scrub passes [default: 60000].
    #[arg(long)]
    scrub_interval_ms: Option<u64>,
    /// Take a snapshot after at most this many entries applied since the last one [default:
    /// 1000000].
    #[arg(long)]
    snapshot_threshold: Option<u64>,
    /// ... or at most this many bytes of entry data [default: 268435456 (256 MiB)].
    #[arg(long)]
    snapshot_threshold_bytes: Option<u64>,
    /// ... and before that, once the entry data since the last snapshot is this multiple of its
    /// size, and at least 16 MiB (0: only the thresholds) [default: 4].
    #[arg(long)]
    snapshot_log_ratio: Option<u64>,
    /// Entries kept in the log behind a snapshot, for slow followers.
    #[arg(long)]
    snapshot_trailing: Option<u64>,
    /// Peers with another cluster id are refused [default: 1801807212].
    #[arg(long)]
    cluster_id: Option<u64>,
    /// RAFT.MEMBER ADD promotes a new member once its log is at most this many entries behind
    /// the leader's [default: 1000].
    #[arg(long)]
    catch_up_entries: Option<u64>,
    /// ... and gives up after this long (the member stays a learner) [default: 60000].
    #[arg(long)]
    catch_up_timeout_ms: Option<u64>,
}

#[derive(Args, Debug)]
struct AdminTarget {
    /// Nodes' client addresses (repeat the flag or give a comma list); admin commands go to the
    /// first that answers, `status` asks every one.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:6379")]
    addr: Vec<String>,
    /// The nodes' `requirepass` (else the environment's `REDISCLI_AUTH`, as redis-cli).
    #[arg(long)]
    password: Option<String>,
}

impl AdminTarget {
    fn password(&self) -> Option<String> {
        self.password
            .clone()
            .or_else(|| std::env::var("REDISCLI_AUTH").ok())
    }
}

#[derive(Subcommand, Debug)]
enum MemberAction {
    /// Add a node: as a learner, then, once caught up, as a voter (only a learner with
    /// --learner).
    Add {
        id: u64,
        peer_addr: String,
        #[arg(long)]
        learner: bool,
        /// Where the node's clients reach it (recorded for every member to forward to).
        #[arg(long)]
        client: Option<String>,
        #[command(flatten)]
        target: AdminTarget,
    },
    /// Remove a node.
    Remove {
        id: u64,
        /// Even if the members left could not form a quorum with those that are up.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        target: AdminTarget,
    },
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Target host:port; repeat the flag or give a comma list to spread connections over several.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:6379")]
    addr: Vec<String>,
    /// Concurrent connections.
    #[arg(long, short = 'c', default_value_t = 50)]
    connections: usize,
    /// Requests in flight per connection.
    #[arg(long, short = 'P', default_value_t = 1)]
    pipeline: usize,
    /// Bytes per SET value.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Size of the key space.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Fraction of GETs (the rest are SETs), 0.0 to 1.0.
    #[arg(long, default_value_t = 0.0)]
    read_ratio: f64,
    /// Give every SET a TTL of this many ms (`SET key value PX ms`); 0: none.
    #[arg(long, default_value_t = 0)]
    ttl_ms: u64,
    /// Fraction of the writes that are `PEXPIRE key ttl` instead of SET (needs --ttl-ms),
    /// 0.0 to 1.0; counted with the SETs as writes.
    #[arg(long, default_value_t = 0.0)]
    expire_ratio: f64,
    /// How long to measure, e.g. 10s, 500ms, 2m (ignored with --requests).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Measure this many requests instead of a duration.
    #[arg(long, short = 'n')]
    requests: Option<u64>,
    /// Run unmeasured for this long first.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    warmup: Duration,
    /// A connection fails after this long without a reply.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Worker threads of the load generator (at most 64). One by default, as redis-benchmark:
    /// on a small machine shared with the server, every extra client thread competes with the
    /// server's threads for the cores it measures.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Seed for the key and operation choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the results as one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long, short = 'q')]
    quiet: bool,
}

/// `10s`, `250ms`, `2m`, `1h`, or a bare number of seconds (fractions allowed).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration '{text}': expected e.g. 10s, 500ms, 2m"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown duration unit '{other}': use ms, s, m or h"
            ))
        }
    };
    if !seconds.is_finite() || seconds > bench::DURATION_MAX.as_secs_f64() {
        return Err(format!("duration '{text}' is longer than 24h"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Bench(args) => run_bench(args),
        Cmd::Up(args) => run_up(args),
        Cmd::Serve(args) => run_serve(*args),
        Cmd::Status(target) => admin::status(&target.addr, target.password().as_deref()),
        Cmd::Member { action } => match action {
            MemberAction::Add {
                id,
                peer_addr,
                learner,
                client,
                target,
            } => {
                let mut args = vec!["RAFT.MEMBER".to_string(), "ADD".into(), id.to_string()];
                args.push(peer_addr);
                if learner {
                    args.push("LEARNER".into());
                }
                if let Some(client) = client {
                    args.extend(["CLIENT".into(), client]);
                }
                admin::command_waiting(
                    &target.addr,
                    &args,
                    admin::MEMBER_ADD_TIMEOUT,
                    target.password().as_deref(),
                )
            }
            MemberAction::Remove { id, force, target } => {
                let mut args = vec!["RAFT.MEMBER".into(), "REMOVE".into(), id.to_string()];
                if force {
                    args.push("FORCE".into());
                }
                admin::command(&target.addr, &args, target.password().as_deref())
            }
        },
        Cmd::Transfer { id, target } => admin::command(
            &target.addr,
            &["RAFT.TRANSFER".into(), id.to_string()],
            target.password().as_deref(),
        ),
        Cmd::Recover(args) => run_recover(args),
        Cmd::Check(args) => check::run(&args.data_dir),
    }
}

fn run_recover(args: RecoverArgs) -> ExitCode {
    if !args.force_new_cluster {
        eprintln!("keel recover: say what to do: --force-new-cluster is the one recovery there is");
        return ExitCode::FAILURE;
    }
    match keel_runtime::recover::force_new_cluster(&args.data_dir, args.id) {
        Ok(done) => {
            println!(
                "node {} is now the single voter of a new configuration (entry {}/{}; it was \
                 {:?}); start it with `keel serve` as before, then add new members with empty \
                 data directories",
                args.id, done.entry.term, done.entry.index, done.previous
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("keel recover: {}: {e}", args.data_dir.display());
            ExitCode::FAILURE
        }
    }
}

/// Bound on `--worker-threads`.
const WORKER_THREADS_MAX: usize = 1024;

fn tokio_runtime(command: &str, worker_threads: Option<usize>) -> Option<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = worker_threads {
        if !(1..=WORKER_THREADS_MAX).contains(&threads) {
            eprintln!(
                "keel {command}: --worker-threads {threads} is out of range: 1 to \
                 {WORKER_THREADS_MAX}"
            );
            return None;
        }
        builder.worker_threads(threads);
    }
    match builder.enable_all().build() {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            eprintln!("keel {command}: cannot start the async runtime: {e}");
            None
        }
    }
}

/// The flags over the config file (if any).
fn serve_settings(args: ServeArgs) -> Result<ServeSettings, String> {
    let flags = ServeSettings {
        id: args.id,
        data_dir: args.data_dir,
        client_addr: args.client_addr,
        peer_addr: args.peer_addr,
        initial_cluster: args.initial_cluster,
        client_peers: args.client_peers,
        advertise_client_addr: args.advertise_client_addr,
        advertise_peer_addr: args.advertise_peer_addr,
        cluster_secret_file: args.cluster_secret_file,
        requirepass: args.requirepass,
        election_timeout_ms: args.tunables.election_timeout_ms,
        heartbeat_ms: args.tunables.heartbeat_ms,
        time_tick_ms: args.tunables.time_tick_ms,
        clock_offset_ms_max: args.tunables.clock_offset_ms_max,
        scrub_rate_mib_s: args.tunables.scrub_rate_mib_s,
        scrub_interval_ms: args.tunables.scrub_interval_ms,
        snapshot_threshold: args.tunables.snapshot_threshold,
        snapshot_threshold_bytes: args.tunables.snapshot_threshold_bytes,
        snapshot_log_ratio: args.tunables.snapshot_log_ratio,
        snapshot_trailing: args.tunables.snapshot_trailing,
        cluster_id: args.tunables.cluster_id,
        catch_up_entries: args.tunables.catch_up_entries,
        catch_up_timeout_ms: args.tunables.catch_up_timeout_ms,
        metrics_addr: args.ops.metrics_addr,
        log_format: args.ops.log_format,
        log_level: args.ops.log_level,
        worker_threads: args.ops.worker_threads,
        enable_debug_command: args.enable_debug_command.then_some(true),
        maxclients: args.clients.maxclients,
        timeout: args.clients.timeout,
        client_query_buffer_total_bytes: args.clients.client_query_buffer_total_bytes,
        client_output_buffer_limit_bytes: args.clients.client_output_buffer_limit_bytes,
        protected_mode: args.clients.protected_mode,
        maxmemory: args.clients.maxmemory,
        maxmemory_policy: args.clients.maxmemory_policy,
        databases: args.clients.databases,
    };
    let file = match &args.config {
        Some(path) => ServeSettings::load(path)?,
        None => ServeSettings::default(),
    };
    Ok(flags.over(file))
}

fn run_serve(args: ServeArgs) -> ExitCode {
    keel_server::fail_stop::install();
    memory::return_freed_memory();
    let (settings, options) = match serve_settings(args).and_then(|settings| {
        let options = settings.node_options()?;
        Ok((settings, options))
    }) {
        Ok(both) => both,
        Err(e) => {
            eprintln!("keel serve: {e}");
            return ExitCode::FAILURE;
        }
    };
    let format = settings.log_format.unwrap_or_default();
    if let Err(e) = launch::init_logging(format, settings.log_level.as_deref()) {
        eprintln!("keel serve: {e}");
        return ExitCode::FAILURE;
    }
    let Some(runtime) = tokio_runtime("serve", settings.worker_threads) else {
        return ExitCode::FAILURE;
    };
    let code = runtime.block_on(async {
        if let Some(addr) = &settings.metrics_addr {
            match launch::serve_metrics(addr).await {
                Ok(addr) => tracing::info!("metrics at http://{addr}/metrics"),
                Err(e) => {
                    tracing::error!("keel serve: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        let mut options = options;
        if let Err(e) = launch::fit_descriptors(std::slice::from_mut(&mut options)) {
            tracing::error!("keel serve: {e}");
            return ExitCode::FAILURE;
        }
        let node = match launch::start(&options).await {
            Ok(node) => node,
            Err(e) => {
                tracing::error!("keel serve: {e}");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(
            node = node.id,
            "node {} serving clients on {}, peers on {} (data in {})",
            node.id,
            node.client_addr,
            node.peer_addr,
            options.data_dir.display()
        );
        launch::shutdown_signal().await;
        tracing::info!(node = node.id, "signal received: shutting down");
        if launch::shutdown_nodes(vec![node], true).await {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    });
    // Whatever is still running (a stuck thread after a timed-out shutdown) is not waited for.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

/// Client and peer ports of `keel up`'s nodes 1, 2, 3.
const UP_CLIENT_PORT_BASE: u16 = 6378;
const UP_PEER_PORT_BASE: u16 = 7378;

#[expect(clippy::too_many_lines)]
fn run_up(args: UpArgs) -> ExitCode {
    keel_server::fail_stop::install();
    memory::return_freed_memory();
    let ids = [1u64, 2, 3];
    let client = |id: u64| format!("127.0.0.1:{}", UP_CLIENT_PORT_BASE + id as u16);
    let peer = |id: u64| format!("127.0.0.1:{}", UP_PEER_PORT_BASE + id as u16);
    let initial_cluster: BTreeMap<u64, String> = ids.iter().map(|&id| (id, peer(id))).collect();
    let format = args.ops.log_format.unwrap_or_default();
    if let Err(e) = launch::init_logging(format, args.ops.log_level.as_deref()) {
        eprintln!("keel up: {e}");
        return ExitCode::FAILURE;
    }
    let Some(runtime) = tokio_runtime("up", args.ops.worker_threads) else {
        return ExitCode::FAILURE;
    };
    let code = runtime.block_on(async {
        if let Some(addr) = &args.ops.metrics_addr {
            match launch::serve_metrics(addr).await {
                Ok(addr) => tracing::info!("metrics of the three nodes at http://{addr}/metrics"),
                Err(e) => {
                    tracing::error!("keel up: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        let mut all_options = Vec::new();
        for id in ids {
            all_options.push(NodeOptions {
                id,
                cluster_id: args.tunables.cluster_id.unwrap_or(DEFAULT_CLUSTER_ID),
                data_dir: args.data_dir.join(format!("node-{id}")),
                client_addr: client(id),
                peer_addr: peer(id),
                initial_cluster: initial_cluster.clone(),
                // Learned from the nodes' handshakes, as a `keel serve` cluster does.
                client_peers: BTreeMap::new(),
                advertise_client_addr: None,
                advertise_peer_addr: None,
                cluster_secret_file: None,
                requirepass: None,
                election_timeout_ms: args.tunables.election_timeout_ms,
                heartbeat_ms: args.tunables.heartbeat_ms,
                time_tick_ms: args.tunables.time_tick_ms,
                clock_offset_ms_max: args.tunables.clock_offset_ms_max,
                scrub_rate_mib_s: args.tunables.scrub_rate_mib_s,
                scrub_interval_ms: args.tunables.scrub_interval_ms,
                snapshot_threshold: args.tunables.snapshot_threshold,
                snapshot_threshold_bytes: args.tunables.snapshot_threshold_bytes,
                snapshot_log_ratio: args.tunables.snapshot_log_ratio,
                snapshot_trailing: args.tunables.snapshot_trailing,
                catch_up_entries: args.tunables.catch_up_entries,
                catch_up_timeout_ms: args.tunables.catch_up_timeout_ms,
                enable_debug_command: false,
                client_limits: keel_server::ClientLimits::default(),
                // Loopback only: protected mode never refuses anyone here.
                protected_mode: true,
                maxmemory: 0,
                databases: keel_server::DATABASES_DEFAULT,
            });
        }
        if let Err(e) = launch::fit_descriptors(&mut all_options) {
            tracing::error!("keel up: {e}");
            return ExitCode::FAILURE;
        }
        let mut nodes = Vec::new();
        for options in &all_options {
            match launch::start(options).await {
                Ok(node) => nodes.push(node),
                Err(e) => {
                    tracing::error!("keel up: {e}");
                    for node in nodes {
                        node.stop().await;
                    }
                    return ExitCode::FAILURE;
                }
            }
        }
        println!(
            "keel up: a three-node cluster is running (data in {}).",
            args.data_dir.display()
        );
        for node in &nodes {
            println!(
                "  node {}: clients {}, peers {}",
                node.id, node.client_addr, node.peer_addr
            );
        }
        println!("Connect with:  redis-cli -p 6379");
        println!("Cluster state: keel status --addr 127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381");
        println!("Press Ctrl-C to stop.");
        launch::shutdown_signal().await;
        tracing::info!("signal received: shutting down the three nodes");
        // The whole cluster stops: no point handing leadership around.
        if launch::shutdown_nodes(nodes, false).await {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    });
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

/// Bound on `keel bench --threads`.
const BENCH_THREADS_MAX: usize = 64;

fn run_bench(args: BenchArgs) -> ExitCode {
    let config = BenchConfig {
        targets: args.addr.into_iter().filter(|a| !a.is_empty()).collect(),
        connections: args.connections,
        pipeline: args.pipeline,
        value_size_bytes: args.value_size,
        keys: args.keys,
        read_ratio: args.read_ratio,
        ttl_ms: args.ttl_ms,
        expire_ratio: args.expire_ratio,
        stop: match args.requests {
            Some(n) => Stop::Requests(n),
            None => Stop::After(args.duration),
        },
        warmup: args.warmup,
        reply_timeout: args.timeout,
        progress: !args.quiet && !args.json,
        seed: args.seed,
        ..BenchConfig::default()
    };
    if let Err(e) = config.validate() {
        eprintln!("keel bench: {e}");
        return ExitCode::FAILURE;
    }
    if !(1..=BENCH_THREADS_MAX).contains(&args.threads) {
        eprintln!(
            "keel bench: --threads {} is out of range: 1 to {BENCH_THREADS_MAX}",
            args.threads
        );
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("keel bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = match runtime.block_on(bench::run(&config)) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("keel bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    if report.connection_failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        for failure in &report.connection_failures {
            eprintln!("keel bench: connection failed: {failure}");
        }
        ExitCode::FAILURE
    }
}
