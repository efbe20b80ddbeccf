//! Many seeds of an embedder's workload: [`check`] from `cargo test`, [`sweep`] on many threads
//! with a summary.

use std::fmt;
use std::ops::Range;
use std::panic::RefUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{simulate, Workload, WorkloadReport};
use crate::invariants::Violation;
use crate::world::RunConfig;

/// Failing seeds a summary keeps the reports of (the rest are counted).
const FAILURES_KEPT: usize = 8;
/// Lines of the trace a failing seed's report shows.
const TRACE_TAIL_LINES: usize = 40;

/// What a sweep of many seeds found.
#[derive(Debug)]
pub struct SweepSummary {
    pub seeds: u64,
    /// Seeds whose run broke a check, and the reports of the first of them (lowest seeds).
    pub failed: u64,
    pub failures: Vec<WorkloadReport>,
    /// Events simulated over all seeds, and the operations' outcomes.
    pub steps: u64,
    pub ops_completed: u64,
    pub ops_unknown: u64,
    pub ops_not_applied: u64,
    pub elapsed: Duration,
}

impl fmt::Display for SweepSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        writeln!(
            f,
            "seeds={} failed={} steps={} steps_per_s={:.0} ops_completed={} ops_unknown={} \
             ops_not_applied={} elapsed_s={secs:.2}",
            self.seeds,
            self.failed,
            self.steps,
            self.steps as f64 / secs,
            self.ops_completed,
            self.ops_unknown,
            self.ops_not_applied,
        )?;
        for report in &self.failures {
            if let Some(v) = &report.violation {
                writeln!(f, "seed {}: {v}", report.seed)?;
            }
        }
        Ok(())
    }
}

/// Runs `seeds` of `make()`'s workload on `jobs` threads (each seed on its own: a workload per
/// seed, made by `make`), and sums them up. A panic in a seed is a failure of that seed.
pub fn sweep<W: Workload>(
    make: impl Fn() -> W + Sync + RefUnwindSafe,
    seeds: Range<u64>,
    steps: u64,
    jobs: usize,
) -> SweepSummary {
    let started = Instant::now();
    let next = AtomicU64::new(seeds.start);
    let summary = Mutex::new(SweepSummary {
        seeds: seeds.end.saturating_sub(seeds.start),
        failed: 0,
        failures: Vec::new(),
        steps: 0,
        ops_completed: 0,
        ops_unknown: 0,
        ops_not_applied: 0,
        elapsed: Duration::ZERO,
    });
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= seeds.end {
                    return;
                }
                let cfg = RunConfig {
                    fault_steps: steps,
                    ..RunConfig::new(seed)
                };
                let report = simulate_catching(&make, &cfg);
                let mut s = summary.lock().expect("no sweep thread panics holding it");
                s.steps += report.steps;
                s.ops_completed += report.ops_completed as u64;
                s.ops_unknown += report.ops_unknown as u64;
                s.ops_not_applied += report.ops_not_applied as u64;
                if report.violation.is_some() {
                    s.failed += 1;
                    s.failures.push(report);
                    s.failures.sort_by_key(|r| r.seed);
                    s.failures.truncate(FAILURES_KEPT);
                }
            });
        }
    });
    let mut summary = summary
        .into_inner()
        .expect("no sweep thread panics holding it");
    summary.elapsed = started.elapsed();
    summary
}

/// Runs `make()`'s workload over the seeds the environment names, and panics with the lowest
/// failing seed's report: the broken check, what it means, the last lines of its trace and how
/// to replay it.
///
/// `KEEL_SIM_SEEDS` (default 8) seeds from `KEEL_SIM_FIRST_SEED` (default 0); `KEEL_SIM_SEED`
/// runs that one seed alone; `KEEL_SIM_STEPS` sets the events under faults per seed (default
/// 20,000); `KEEL_SIM_JOBS` the threads (default 1). The summary is printed to stdout
/// (`cargo test -- --nocapture` shows it).
pub fn check<W: Workload>(make: impl Fn() -> W + Sync + RefUnwindSafe) {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds = match var("KEEL_SIM_SEED") {
        Some(seed) => seed..seed + 1,
        None => {
            let first = var("KEEL_SIM_FIRST_SEED").unwrap_or(0);
            first..first + var("KEEL_SIM_SEEDS").unwrap_or(8)
        }
    };
    let steps = var("KEEL_SIM_STEPS").unwrap_or(20_000);
    let jobs = var("KEEL_SIM_JOBS").unwrap_or(1) as usize;
    let summary = sweep(&make, seeds, steps, jobs);
    print!("{summary}");
    let Some(first) = summary.failures.first() else {
        return;
    };
    let (seed, violation) = (first.seed, first.violation.clone().expect("a failure"));
    let cfg = RunConfig {
        fault_steps: steps,
        trace: true,
        ..RunConfig::new(seed)
    };
    let traced = simulate_catching(&make, &cfg);
    let tail = traced.trace.len().saturating_sub(TRACE_TAIL_LINES);
    panic!(
        "{} of {} seeds failed; the first, seed {seed}: {violation}\n{}\nlast {} lines of its \
         trace:\n{}\nreplay it alone: KEEL_SIM_SEED={seed} KEEL_SIM_STEPS={steps} cargo test",
        summary.failed,
        summary.seeds,
        explain(violation.invariant),
        traced.trace.len() - tail,
        traced.trace[tail..].join("\n"),
    );
}

/// What a broken check says about an embedder's machine or model.
pub fn explain(invariant: &str) -> &'static str {
    match invariant {
        "state digest" => {
            "Replicas that applied the same entries hold different states: apply must depend only \
             on the state and the entry (no clock, random source or hash-map order), restore must \
             rebuild what the snapshot holds, and the digest (by default the snapshot's bytes) \
             must not depend on anything else (a HashMap written in iteration order does)."
        }
        "apply answers agree" => {
            "Replicas answered the same entry differently: apply reads something besides the \
             state and the entry, or a replica restored from a snapshot lacks part of the state \
             (a field the snapshot leaves out)."
        }
        "snapshot round trip" => {
            "A snapshot restored into a fresh machine is not the state it was taken from: the \
             snapshot leaves something out, or restore rebuilds it differently."
        }
        "linearizability" => {
            "No order of the operations, each taking effect between its call and its answer, \
             explains what the clients were told under the model: the machine, the workload's \
             reading of its answers, or the model is wrong. The report names the operation whose \
             answer no order explains and the states it could have seen."
        }
        "panic" => {
            "The state machine, the workload or the model panicked (or keel did: report it)."
        }
        _ => "An invariant of keel itself broke: report it with the seed.",
    }
}

/// [`simulate`], with a panic (in the embedder's machine or in keel) reported as a violation.
fn simulate_catching<W: Workload>(
    make: &(impl Fn() -> W + std::panic::RefUnwindSafe),
    cfg: &RunConfig,
) -> WorkloadReport {
    std::panic::catch_unwind(|| simulate(make(), cfg)).unwrap_or_else(|payload| {
        let detail = crate::panic_message(payload.as_ref());
        WorkloadReport {
            seed: cfg.seed,
            steps: 0,
            violation: Some(Violation {
                invariant: "panic",
                detail,
            }),
            ops_completed: 0,
            ops_unknown: 0,
            ops_not_applied: 0,
            trace: Vec::new(),
            trace_digest: 0,
        }
    })
}
