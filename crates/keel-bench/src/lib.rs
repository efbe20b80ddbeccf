//! `keel bench`: a closed-loop RESP load generator.
//!
//! N connections (spread round-robin over the targets), each keeping `pipeline` requests in flight:
//! a new request is sent as soon as a reply arrives. Requests are `SET key value` or `GET key`
//! (chosen by `read_ratio`) on keys `key:000000000000`.. drawn uniformly from `keys`, the same key
//! format as `redis-benchmark`, so it works against any RESP server.
//!
//! `keel bench` runs it on one client thread by default (`--threads`), as `redis-benchmark`
//! does: on a small machine shared with the server, more would compete for the cores being
//! measured.
//!
//! Phases: an optional warmup (requests sent, not measured), then the measured phase, ended by a
//! duration or a request count; in-flight replies are then drained. Latency is from encoding a
//! request to parsing its reply, recorded in microseconds in HDR histograms (3 significant digits),
//! reported as percentiles in a table or JSON.
//!
//! Bounds: every loop ends by count or time. Each connection gives up if it gets no reply and
//! cannot write for `reply_timeout`; the settings are validated against the limits below.
//! Error replies are counted, not fatal. A connection that fails (refused, reset, timed out,
//! unparseable reply) is reported with its reason; the others carry on.

mod conn;
mod report;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

pub use report::{BenchReport, LatencySummary, OpStats};

pub const CONNECTIONS_MAX: usize = 10_000;
pub const PIPELINE_MAX: usize = 10_000;
pub const VALUE_SIZE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Keys are written with 12 digits.
pub const KEYS_MAX: u64 = 1_000_000_000_000;
pub const DURATION_MAX: Duration = Duration::from_secs(24 * 3600);

/// When the measured phase ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    After(Duration),
    Requests(u64),
}

/// Everything `keel bench` takes.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// `host:port` targets; connection i goes to target i mod len.
    pub targets: Vec<String>,
    pub connections: usize,
    /// Requests in flight per connection.
    pub pipeline: usize,
    pub value_size_bytes: usize,
    /// Size of the key space.
    pub keys: u64,
    /// Fraction of requests that are GET (the rest are writes), 0.0..=1.0.
    pub read_ratio: f64,
    /// SETs carry `PX ttl_ms` when above 0.
    pub ttl_ms: u64,
    /// Fraction of the writes that are `PEXPIRE key ttl_ms` (needs `ttl_ms`), 0.0..=1.0.
    pub expire_ratio: f64,
    pub stop: Stop,
    pub warmup: Duration,
    /// A connection fails when it has neither received nor sent anything for this long.
    pub reply_timeout: Duration,
    pub connect_timeout: Duration,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// Seeds the key and operation choices.
    pub seed: u64,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            targets: vec!["127.0.0.1:6379".to_string()],
            connections: 50,
            pipeline: 1,
            value_size_bytes: 100,
            keys: 100_000,
            read_ratio: 0.0,
            ttl_ms: 0,
            expire_ratio: 0.0,
            stop: Stop::After(Duration::from_secs(10)),
            warmup: Duration::ZERO,
            reply_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            progress: false,
            seed: 1,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("invalid bench settings: {0}")]
    Invalid(String),
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
}

impl BenchConfig {
    pub fn validate(&self) -> Result<(), BenchError> {
        let invalid = |m: String| Err(BenchError::Invalid(m));
        if self.targets.is_empty() {
            return invalid("no target address".into());
        }
        if !(1..=CONNECTIONS_MAX).contains(&self.connections) {
            return invalid(format!("connections must be 1..={CONNECTIONS_MAX}"));
        }
        if !(1..=PIPELINE_MAX).contains(&self.pipeline) {
            return invalid(format!("pipeline must be 1..={PIPELINE_MAX}"));
        }
        if self.value_size_bytes > VALUE_SIZE_BYTES_MAX {
            return invalid(format!(
                "value size must be at most {VALUE_SIZE_BYTES_MAX} bytes"
            ));
        }
        if !(1..=KEYS_MAX).contains(&self.keys) {
            return invalid(format!("keys must be 1..={KEYS_MAX}"));
        }
        if !(0.0..=1.0).contains(&self.read_ratio) {
            return invalid("read ratio must be between 0.0 and 1.0".into());
        }
        if !(0.0..=1.0).contains(&self.expire_ratio)
            || (self.expire_ratio > 0.0 && self.ttl_ms == 0)
        {
            return invalid("expire ratio must be between 0.0 and 1.0, and needs a TTL".into());
        }
        match self.stop {
            Stop::After(d) if d.is_zero() || d > DURATION_MAX => {
                return invalid("duration must be positive and at most 24h".into())
            }
            Stop::Requests(0) => return invalid("requests must be positive".into()),
            _ => {}
        }
        if self.warmup > DURATION_MAX || self.reply_timeout.is_zero() {
            return invalid("warmup must be at most 24h and the reply timeout positive".into());
        }
        Ok(())
    }
}

/// State shared by the connections of one run.
pub(crate) struct Shared {
    /// Measured replies so far (for the progress bar).
    completed: AtomicU64,
    /// Requests left to send in `Stop::Requests` mode.
    budget: AtomicU64,
    measure_start: Instant,
    /// End of the measured phase in `Stop::After` mode.
    deadline: Option<Instant>,
}

impl Shared {
    /// Whether a request sent `now` is inside the measured phase, and may be sent at all.
    /// Returns (send, measured).
    fn admit(&self, now: Instant) -> (bool, bool) {
        if now < self.measure_start {
            return (true, false);
        }
        let send = match self.deadline {
            Some(deadline) => now < deadline,
            None => self
                .budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                .is_ok(),
        };
        (send, send)
    }
}

/// Runs a benchmark to completion. Fails only if the settings are invalid or a connection cannot
/// be opened; failures during the run are in the report.
pub async fn run(config: &BenchConfig) -> Result<BenchReport, BenchError> {
    config.validate()?;
    let mut streams = Vec::with_capacity(config.connections);
    for i in 0..config.connections {
        let addr = &config.targets[i % config.targets.len()];
        let connect = tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr));
        let stream = match connect.await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                return Err(BenchError::Connect {
                    addr: addr.clone(),
                    reason: e.to_string(),
                })
            }
            Err(_) => {
                return Err(BenchError::Connect {
                    addr: addr.clone(),
                    reason: format!("timed out after {:?}", config.connect_timeout),
                })
            }
        };
        // Requests are small and latency is what we measure: no Nagle delay.
        let _ = stream.set_nodelay(true);
        streams.push((addr.clone(), stream));
    }

    let start = Instant::now();
    let measure_start = start + config.warmup;
    let shared = Arc::new(Shared {
        completed: AtomicU64::new(0),
        budget: AtomicU64::new(match config.stop {
            Stop::Requests(n) => n,
            Stop::After(_) => 0,
        }),
        measure_start,
        deadline: match config.stop {
            Stop::After(d) => Some(measure_start + d),
            Stop::Requests(_) => None,
        },
    });

    let done = Arc::new(AtomicBool::new(false));
    let progress = report::spawn_progress(config, Arc::clone(&shared), Arc::clone(&done));

    let mut tasks = Vec::with_capacity(streams.len());
    for (i, (addr, stream)) in streams.into_iter().enumerate() {
        let plan = conn::Plan::new(config, i, addr);
        tasks.push(tokio::spawn(conn::run(stream, plan, Arc::clone(&shared))));
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await.expect("bench connection task panicked"));
    }
    done.store(true, Ordering::Relaxed);
    if let Some(progress) = progress {
        let _ = progress.await;
    }
    Ok(BenchReport::from_outcomes(config, measure_start, outcomes))
}
