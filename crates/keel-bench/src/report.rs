//! Results of a run: merging per-connection histograms, the table, the JSON, the progress bar.

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use comfy_table::{presets, CellAlignment, Table};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::conn::{new_histogram, ConnectionTally};
use super::{BenchConfig, Shared, Stop};

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencySummary {
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub us_max: u64,
    pub mean_us: f64,
}

impl LatencySummary {
    fn of(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            p50_us: histogram.value_at_quantile(0.50),
            p90_us: histogram.value_at_quantile(0.90),
            p99_us: histogram.value_at_quantile(0.99),
            p999_us: histogram.value_at_quantile(0.999),
            us_max: histogram.max(),
            mean_us: histogram.mean(),
        }
    }
}

/// Measured replies of one kind (GET, SET or both).
#[derive(Clone, Debug)]
pub struct OpStats {
    /// Replies received, error replies included.
    pub replies: u64,
    pub errors: u64,
    pub latency: LatencySummary,
}

impl OpStats {
    fn of(histogram: &Histogram<u64>, errors: u64) -> Self {
        OpStats {
            replies: histogram.len(),
            errors,
            latency: LatencySummary::of(histogram),
        }
    }
}

/// Everything a run measured.
#[derive(Clone, Debug)]
pub struct BenchReport {
    pub targets: Vec<String>,
    pub connections: usize,
    pub pipeline: usize,
    pub value_size_bytes: usize,
    pub keys: u64,
    pub read_ratio: f64,
    /// SETs' TTL (0: none) and the fraction of writes that are PEXPIRE.
    pub ttl_ms: u64,
    pub expire_ratio: f64,
    /// From the end of the warmup to the last reply.
    pub elapsed: Duration,
    pub get: OpStats,
    pub set: OpStats,
    pub all: OpStats,
    /// The first error reply seen, as a sample.
    pub first_error: Option<String>,
    /// One line per connection that failed, with its reason.
    pub connection_failures: Vec<String>,
    /// Measured requests sent on failed connections and never answered.
    pub lost_requests: u64,
}

impl BenchReport {
    pub(crate) fn from_outcomes(
        config: &BenchConfig,
        measure_start: Instant,
        outcomes: Vec<ConnectionTally>,
    ) -> Self {
        let mut get = new_histogram();
        let mut set = new_histogram();
        let (mut get_errors, mut set_errors, mut lost) = (0, 0, 0);
        let mut first_error = None;
        let mut failures = Vec::new();
        let mut finished = measure_start;
        for outcome in outcomes {
            get.add(&outcome.get_latency).expect("same bounds");
            set.add(&outcome.set_latency).expect("same bounds");
            get_errors += outcome.get_errors;
            set_errors += outcome.set_errors;
            lost += outcome.lost;
            first_error = first_error.or(outcome.first_error);
            failures.extend(outcome.failure);
            finished = finished.max(outcome.finished_at);
        }
        let mut all = get.clone();
        all.add(&set).expect("same bounds");
        BenchReport {
            targets: config.targets.clone(),
            connections: config.connections,
            pipeline: config.pipeline,
            value_size_bytes: config.value_size_bytes,
            keys: config.keys,
            read_ratio: config.read_ratio,
            ttl_ms: config.ttl_ms,
            expire_ratio: config.expire_ratio,
            elapsed: finished.saturating_duration_since(measure_start),
            get: OpStats::of(&get, get_errors),
            set: OpStats::of(&set, set_errors),
            all: OpStats::of(&all, get_errors + set_errors),
            first_error,
            connection_failures: failures,
            lost_requests: lost,
        }
    }

    pub fn throughput_per_s(&self) -> f64 {
        rate(self.all.replies, self.elapsed)
    }

    /// A human-readable summary: one settings line, then a table per operation.
    pub fn to_table(&self) -> String {
        let mut table = Table::new();
        table.load_preset(presets::UTF8_FULL_CONDENSED);
        table.set_header(vec![
            "op", "replies", "errors", "ops/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms",
        ]);
        let ms = |us: u64| format!("{:.3}", us as f64 / 1000.0);
        let rows = [("GET", &self.get), ("SET", &self.set), ("all", &self.all)];
        for (name, stats) in rows {
            if stats.replies == 0 && name != "all" {
                continue;
            }
            let l = &stats.latency;
            table.add_row(vec![
                name.to_string(),
                stats.replies.to_string(),
                stats.errors.to_string(),
                format!("{:.0}", rate(stats.replies, self.elapsed)),
                ms(l.p50_us),
                ms(l.p90_us),
                ms(l.p99_us),
                ms(l.p999_us),
                ms(l.us_max),
            ]);
        }
        for column in table.column_iter_mut().skip(1) {
            column.set_cell_alignment(CellAlignment::Right);
        }
        let mut out = format!(
            "keel bench: {} | {} connections, pipeline {}, {}-byte values, {} keys, read ratio {}, TTL {} ms, expire ratio {} | {:.3} s measured\n",
            self.targets.join(","),
            self.connections,
            self.pipeline,
            self.value_size_bytes,
            self.keys,
            self.read_ratio,
            self.ttl_ms,
            self.expire_ratio,
            self.elapsed.as_secs_f64(),
        );
        let _ = writeln!(out, "{table}");
        if let Some(error) = &self.first_error {
            let _ = writeln!(out, "first error reply: {error}");
        }
        for failure in &self.connection_failures {
            let _ = writeln!(out, "connection failed: {failure}");
        }
        if self.lost_requests > 0 {
            let _ = writeln!(
                out,
                "requests lost on failed connections: {}",
                self.lost_requests
            );
        }
        out
    }

    /// One flat JSON object (written by hand: no serde for a dozen numbers).
    pub fn to_json(&self) -> String {
        let mut fields: Vec<(String, String)> = vec![
            ("targets".into(), json_string(&self.targets.join(","))),
            ("connections".into(), self.connections.to_string()),
            ("pipeline".into(), self.pipeline.to_string()),
            ("value_size_bytes".into(), self.value_size_bytes.to_string()),
            ("keys".into(), self.keys.to_string()),
            ("read_ratio".into(), json_number(self.read_ratio)),
            ("ttl_ms".into(), self.ttl_ms.to_string()),
            ("expire_ratio".into(), json_number(self.expire_ratio)),
            ("elapsed_s".into(), json_number(self.elapsed.as_secs_f64())),
            ("requests".into(), self.all.replies.to_string()),
            ("errors".into(), self.all.errors.to_string()),
            (
                "throughput_per_s".into(),
                json_number(self.throughput_per_s()),
            ),
        ];
        for (prefix, stats) in [("", &self.all), ("get_", &self.get), ("set_", &self.set)] {
            if !prefix.is_empty() {
                fields.push((format!("{prefix}requests"), stats.replies.to_string()));
                fields.push((format!("{prefix}errors"), stats.errors.to_string()));
            }
            let l = &stats.latency;
            for (name, value) in [
                ("p50_us", l.p50_us),
                ("p90_us", l.p90_us),
                ("p99_us", l.p99_us),
                ("p999_us", l.p999_us),
                ("max_us", l.us_max),
            ] {
                fields.push((format!("{prefix}{name}"), value.to_string()));
            }
            fields.push((format!("{prefix}mean_us"), json_number(l.mean_us)));
        }
        fields.push((
            "connection_failures".into(),
            self.connection_failures.len().to_string(),
        ));
        fields.push(("lost_requests".into(), self.lost_requests.to_string()));
        fields.push((
            "first_error".into(),
            self.first_error
                .as_deref()
                .map_or_else(|| "null".to_string(), json_string),
        ));
        let body: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("{}:{v}", json_string(k)))
            .collect();
        format!("{{{}}}", body.join(","))
    }
}

fn rate(count: u64, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        0.0
    } else {
        count as f64 / elapsed.as_secs_f64()
    }
}

/// JSON has no NaN or infinity; our numbers are finite, but never emit invalid JSON.
fn json_number(x: f64) -> String {
    if x.is_finite() {
        format!("{}", (x * 1000.0).round() / 1000.0)
    } else {
        "null".to_string()
    }
}

fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Starts the progress bar task, if wanted and stderr is a terminal. It ends when `done` is set.
pub(crate) fn spawn_progress(
    config: &BenchConfig,
    shared: Arc<Shared>,
    done: Arc<AtomicBool>,
) -> Option<tokio::task::JoinHandle<()>> {
    use std::io::IsTerminal;
    if !config.progress || !std::io::stderr().is_terminal() {
        return None;
    }
    let (length, by_time) = match config.stop {
        Stop::After(d) => (d.as_millis() as u64, true),
        Stop::Requests(n) => (n, false),
    };
    let bar = ProgressBar::with_draw_target(Some(length), ProgressDrawTarget::stderr());
    let template = if by_time {
        "{spinner} {elapsed_precise} [{bar:40}] {percent:>3}% {msg}"
    } else {
        "{spinner} {elapsed_precise} [{bar:40}] {pos}/{len} {msg}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        while !done.load(Ordering::Relaxed) {
            tick.tick().await;
            let now = Instant::now();
            let completed = shared.completed.load(Ordering::Relaxed);
            if now < shared.measure_start {
                bar.set_message("warming up");
                continue;
            }
            let measured = now.duration_since(shared.measure_start);
            bar.set_position(if by_time {
                measured.as_millis() as u64
            } else {
                completed
            });
            bar.set_message(format!(
                "{completed} replies, {:.0} ops/s",
                rate(completed, measured)
            ));
        }
        bar.finish_and_clear();
    }))
}
