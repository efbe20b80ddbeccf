//! `keel-sim`: runs the deterministic simulator over many seeds, or replays one with its trace.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::time::Instant;

use clap::Parser;
use keel_sim::Mutation;
use keel_sim::{
    replay_command, run_catching, DiskReplacements, RunConfig, RunReport, StorageFaults,
};

#[derive(Parser, Debug)]
#[command(name = "keel-sim", about = "Deterministic cluster simulator for keel")]
struct Args {
    /// Run seeds 0..N.
    #[arg(long, conflicts_with = "seed")]
    seeds: Option<u64>,
    /// Run (replay) exactly this seed.
    #[arg(long)]
    seed: Option<u64>,
    /// First seed of a `--seeds` range (for soaks: `--first-seed 1000000 --seeds 100000`).
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Events simulated under faults per seed, before healing.
    #[arg(long, default_value_t = 20_000)]
    steps: u64,
    /// Print the event trace (use with `--seed`).
    #[arg(long)]
    trace: bool,
    /// Switch on a deliberately broken variant: of the protocol (commit-old-term,
    /// vote-before-durable, ack-before-durable, read-without-term-commit, install-below-commit,
    /// keep-conflicting-suffix) or of the code around it (apply-snapshot-over-pending, dedup-off,
    /// storage-complete-before-sync, snapshot-resume-skips-chunk, forward-retry-new-id,
    /// keep-departed-incarnations, clock-offset-midpoint, watch-ignored,
    /// pop-without-proposing, script-unwatched), or of storage-damage
    /// recovery (vote-below-promise, trust-damaged-tail, recovery-never-ends,
    /// prune-bootstrap-snapshot: with --storage-faults).
    #[arg(long)]
    mutation: Option<String>,
    /// Stop at the first violation.
    #[arg(long)]
    fail_fast: bool,
    /// Draw only 3- and 5-voter clusters that never shrink below three voters, as every seed did
    /// before membership of every size (replays seeds recorded then).
    #[arg(long)]
    classic_shapes: bool,
    /// A follower forwards its connection's refused writes one at a time, as every seed did
    /// before grouped forwarding (replays seeds recorded then)
    #[arg(long)]
    single_forwards: bool,
    /// In a quarter of the seeds, replace a member's disk under the same node id: removed,
    /// wiped, added back (`wipe.rs`). Shows the limits of a same-id rebuild (docs/sweeps.md).
    #[arg(long)]
    disk_replacements: bool,
    /// Like --disk-replacements, but the disk is wiped while its node is still a member.
    #[arg(long, conflicts_with = "disk_replacements")]
    unplanned_wipes: bool,
    /// Storage faults in every seed over the WAL instead of a quarter of them: members stopped,
    /// their disks damaged (lost tails, flipped bits in segments, snapshots and one promise
    /// copy), restarted to repair themselves from the cluster (`storage_faults.rs`).
    #[arg(long)]
    storage_faults: bool,
    /// No storage faults in any seed (replays runs recorded before they existed).
    #[arg(long, conflicts_with = "storage_faults")]
    no_storage_faults: bool,
    /// Without the queue workload (lists as queues, blocking pops, a stream's consumer group):
    /// replays runs recorded before it existed.
    #[arg(long)]
    no_queues: bool,
    /// Without scripts in the register clients' workload: replays runs recorded before them.
    #[arg(long)]
    no_scripts: bool,
    /// Worker threads (seeds are independent; output order is by seed).
    #[arg(long)]
    jobs: Option<usize>,
}

#[expect(clippy::too_many_lines)]
fn main() -> ExitCode {
    let args = Args::parse();
    let mutation = match args.mutation.as_deref() {
        None => None,
        Some(name) => match Mutation::from_name(name) {
            Some(m) => Some(m),
            None => {
                let known: Vec<&str> = Mutation::all().map(Mutation::name).collect();
                eprintln!("unknown mutation {name:?}; known: {}", known.join(", "));
                return ExitCode::from(2);
            }
        },
    };
    let (first, count) = match (args.seed, args.seeds) {
        (Some(s), _) => (s, 1),
        (None, Some(n)) => (args.first_seed, n),
        (None, None) => (args.first_seed, 300),
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    // Panics are reported per seed as violations; keep their default output to one line.
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(|l| l.to_string()).unwrap_or_default();
        eprintln!("panic at {location}");
    }));
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let next = AtomicU64::new(first);
    let end = first + count;
    let mut reports: Vec<RunReport> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let seed = next.fetch_add(1, Ordering::Relaxed);
                        if seed >= end {
                            break;
                        }
                        let report = run_catching(&RunConfig {
                            seed,
                            fault_steps: args.steps,
                            trace: args.trace,
                            mutation,
                            break_replay: false,
                            classic_shapes: args.classic_shapes,
                            single_forwards: args.single_forwards,
                            queues: !args.no_queues,
                            scripts: !args.no_scripts,
                            disk_replacements: if args.unplanned_wipes {
                                DiskReplacements::Unplanned
                            } else if args.disk_replacements {
                                DiskReplacements::Planned
                            } else {
                                DiskReplacements::Off
                            },
                            storage_faults: if args.storage_faults {
                                StorageFaults::All
                            } else if args.no_storage_faults {
                                StorageFaults::Off
                            } else {
                                StorageFaults::Share
                            },
                        });
                        if report.violation.is_some() && args.fail_fast {
                            stop.store(true, Ordering::Relaxed);
                        }
                        out.push(report);
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("simulator worker panicked"))
            .collect()
    });
    reports.sort_by_key(|r| r.seed);
    let elapsed = started.elapsed();
    let mut steps = 0;
    let mut violations = 0;
    let (mut ops, mut expired, mut holds, mut outliers) = (0, 0, 0, 0);
    let (mut watched_swapped, mut watched_aborted, mut grouped) = (0, 0, 0);
    let (mut scripts_applied, mut scripts_rerun) = (0, 0);
    let (mut storage_faults, mut repaired, mut damage_reports) = (0, 0, 0);
    let (mut released, mut lowered) = (0, 0);
    let mut membership = keel_sim::MembershipCoverage::default();
    let every_size = reports.iter().filter(|r| r.every_size).count();
    for r in &reports {
        membership.add(&r.membership);
        steps += r.steps;
        ops += r.ops_completed;
        expired += r.keys_expired_by_ticks;
        holds += r.clock_holds;
        outliers += r.clock_outliers;
        watched_swapped += r.watched_swapped;
        watched_aborted += r.watched_aborted;
        scripts_applied += r.scripts_applied;
        scripts_rerun += r.scripts_rerun;
        grouped += r.forwards_grouped;
        storage_faults += r.storage_faults;
        repaired += r.storage_repaired;
        damage_reports += r.damage_reports;
        released += r.promises_released;
        lowered += r.promises_lowered;
        for line in &r.trace {
            println!("{line}");
        }
        if let Some(v) = &r.violation {
            violations += 1;
            println!("seed {} violated {v}", r.seed);
            let mut replay = replay_command(r.seed, mutation, args.steps);
            for (flag, on) in [
                ("--classic-shapes", args.classic_shapes),
                ("--single-forwards", args.single_forwards),
                ("--unplanned-wipes", args.unplanned_wipes),
                ("--disk-replacements", args.disk_replacements),
                ("--storage-faults", args.storage_faults),
                ("--no-storage-faults", args.no_storage_faults),
                ("--no-queues", args.no_queues),
                ("--no-scripts", args.no_scripts),
            ] {
                if on {
                    replay.push(' ');
                    replay.push_str(flag);
                }
            }
            println!("  replay: {replay}");
        }
    }
    if args.seed.is_some() {
        if let Some(r) = reports.first() {
            println!(
                "seed {} steps {} ops_completed {} ops_unknown {} max_commit {} digest {:016x}",
                r.seed, r.steps, r.ops_completed, r.ops_unknown, r.commit_max, r.trace_digest
            );
        }
    }
    if let Some(r) = reports.iter().max_by_key(|r| r.history_ops) {
        println!(
            "largest_history: seed {} with {} operations checked in {:.1} ms",
            r.seed,
            r.history_ops,
            r.linearizability_check_us as f64 / 1000.0
        );
    }
    println!("membership: every_size_seeds={every_size} {membership}");
    let secs = elapsed.as_secs_f64().max(1e-9);
    println!(
        "elapsed_s={:.2} steps_per_s={:.0} seeds_per_min={:.0} client_ops={ops} \
         keys_expired_by_ticks={expired} clock_holds={holds} clock_outliers={outliers} \
         watched_swapped={watched_swapped} watched_aborted={watched_aborted} \
         scripts_applied={scripts_applied} scripts_rerun={scripts_rerun} \
         forwards_grouped={grouped} jobs={jobs}",
        secs,
        steps as f64 / secs,
        reports.len() as f64 * 60.0 / secs
    );
    let queue_sum = |f: fn(&RunReport) -> u64| reports.iter().map(f).sum::<u64>();
    println!(
        "queue_ops={} queue_deliveries={} stream_deliveries={} served_after_waiting={}",
        queue_sum(|r| r.queue_ops),
        queue_sum(|r| r.queue_deliveries),
        queue_sum(|r| r.stream_deliveries),
        queue_sum(|r| r.served_after_waiting),
    );
    println!(
        "storage_faults={storage_faults} damaged_nodes_repaired={repaired} \
         damage_reports={damage_reports} promises_released={released} promises_lowered={lowered}"
    );
    println!(
        "seeds={} steps={steps} violations={violations}",
        reports.len()
    );
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
