//! The `keel` binary.
//!
//! `keel bench` works today. `up`, `serve`, `status`, `member` and `transfer` take their final
//! flags (DESIGN.md section 5) but are placeholders until the runtime exists: they say so and exit
//! with status 2.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use keel_kv::bench::{self, BenchConfig, Stop};

/// Exit status of the commands that need the runtime.
const EXIT_NOT_AVAILABLE: u8 = 2;

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

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start a local three-node cluster in the foreground (client ports 6379-6381).
    Up(UpArgs),
    /// Run one node.
    Serve(ServeArgs),
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
}

#[derive(Args, Debug)]
struct UpArgs {
    /// Where the three nodes keep their data (running again resumes the same cluster).
    #[arg(long, default_value = "./keel-data")]
    data_dir: PathBuf,
    #[command(flatten)]
    tunables: Tunables,
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
    /// A TOML file with the same keys as these flags.
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    tunables: Tunables,
}

#[derive(Args, Debug)]
struct Tunables {
    #[arg(long)]
    election_timeout_ms: Option<u64>,
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Take a snapshot after this many entries.
    #[arg(long)]
    snapshot_threshold: Option<u64>,
    /// Entries kept in the log behind a snapshot, for slow followers.
    #[arg(long)]
    snapshot_trailing: Option<u64>,
}

#[derive(Args, Debug)]
struct AdminTarget {
    /// A node's client address.
    #[arg(long, default_value = "127.0.0.1:6379")]
    addr: String,
}

#[derive(Subcommand, Debug)]
enum MemberAction {
    /// Add a node (as a learner with --learner).
    Add {
        id: u64,
        peer_addr: String,
        #[arg(long)]
        learner: bool,
        #[command(flatten)]
        target: AdminTarget,
    },
    /// Remove a node.
    Remove {
        id: u64,
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
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
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
        Cmd::Up(_) => not_available("up"),
        Cmd::Serve(_) => not_available("serve"),
        Cmd::Status(_) => not_available("status"),
        Cmd::Member { .. } => not_available("member"),
        Cmd::Transfer { .. } => not_available("transfer"),
    }
}

fn not_available(command: &str) -> ExitCode {
    eprintln!("keel {command}: not available yet: the runtime is not built");
    ExitCode::from(EXIT_NOT_AVAILABLE)
}

fn run_bench(args: BenchArgs) -> ExitCode {
    let config = BenchConfig {
        targets: args.addr.into_iter().filter(|a| !a.is_empty()).collect(),
        connections: args.connections,
        pipeline: args.pipeline,
        value_size_bytes: args.value_size,
        keys: args.keys,
        read_ratio: args.read_ratio,
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
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        runtime.worker_threads(threads.max(1));
    }
    let runtime = match runtime.enable_all().build() {
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
