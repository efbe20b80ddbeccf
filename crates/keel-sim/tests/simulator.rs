//! The simulator as a whole: determinism, a clean sweep, and the mutations it must catch.

use std::process::Command;

use keel_sim::params::Params;
use keel_sim::{run, DiskReplacements, MembershipCoverage, RunConfig, StorageFaults};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// A seed recorded before a follower forwarded its connection's refused writes together: it
/// replays as it ran then (`--single-forwards`), so that it still takes the path that found its
/// bug.
fn recorded(seed: u64) -> RunConfig {
    RunConfig {
        single_forwards: true,
        ..config(seed, false)
    }
}

fn config(seed: u64, trace: bool) -> RunConfig {
    RunConfig {
        seed,
        fault_steps: 20_000,
        trace,
        mutation: None,
        break_replay: false,
        classic_shapes: false,
        single_forwards: false,
        disk_replacements: DiskReplacements::Off,
        storage_faults: StorageFaults::Share,
        queues: false,
        scripts: false,
    }
}

#[test]
fn same_seed_gives_byte_identical_trace() {
    for seed in [3, 11] {
        let a = run(&config(seed, true));
        let b = run(&config(seed, true));
        assert!(a.trace.len() > 1000, "trace too short to mean anything");
        assert_eq!(a.trace, b.trace, "seed {seed} diverged");
        assert_eq!(a.trace_digest, b.trace_digest);
        assert_eq!(a.steps, b.steps);
    }
}

#[test]
fn different_seeds_explore_different_runs() {
    let a = run(&config(1, false));
    let b = run(&config(2, false));
    assert_ne!(a.trace_digest, b.trace_digest);
}

#[test]
fn tracing_does_not_change_the_run() {
    let traced = run(&config(5, true));
    let quiet = run(&config(5, false));
    assert_eq!(traced.trace_digest, quiet.trace_digest);
    assert!(quiet.trace.is_empty());
}

/// Every node reads its own skewed, drifting wall clock and stamps what it proposes with it;
/// the state machines' time advanced with the run and stayed within what the clocks read (the
/// state-digest invariant, checked at every applied index, covers the time: replicas agreed).
#[test]
fn nodes_clocks_differ_and_the_log_time_advances() {
    use keel_sim::clock::{DRIFT_PPM_MAX, EPOCH_BASE_MS, OFFSET_MS_MAX};
    for seed in [3, 7, 11] {
        let p = params(seed);
        assert_eq!(p.clocks.len(), p.node_count);
        let at_start: Vec<u64> = p.clocks.iter().map(|c| c.wall_ms(0)).collect();
        assert!(
            at_start.iter().any(|&t| t != at_start[0]),
            "seed {seed}: every clock reads the same: {:?}",
            p.clocks
        );
        assert!(p
            .clocks
            .iter()
            .all(|c| c.offset_ms.abs() <= OFFSET_MS_MAX && c.drift_ppm.abs() <= DRIFT_PPM_MAX));
        let report = run(&config(seed, false));
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?}",
            report.violation
        );
        let end_max = p
            .clocks
            .iter()
            .map(|c| c.wall_ms(report.end_time))
            .max()
            .unwrap();
        let start_max = *at_start.iter().max().unwrap();
        assert!(
            report.log_time_ms > start_max,
            "seed {seed}: the log time {} never passed what the clocks read at the start ({}, \
             run ended at {})",
            report.log_time_ms,
            start_max,
            report.end_time
        );
        assert!(
            report.log_time_ms <= end_max,
            "seed {seed}: a stamp from the future"
        );
        assert!(report.log_time_ms >= EPOCH_BASE_MS - OFFSET_MS_MAX as u64);
    }
}

#[test]
fn sweep_of_seeds_has_no_violation_and_makes_progress() {
    let (mut committed, mut expired, mut holds) = (0, 0, 0);
    let (mut swapped, mut aborted, mut grouped) = (0, 0, 0);
    for seed in 1000..1030 {
        let report = run(&config(seed, false));
        let single = run(&recorded(seed));
        assert_eq!(
            single.forwards_grouped, 0,
            "seed {seed}: --single-forwards grouped"
        );
        if let Some(v) = &report.violation {
            panic!(
                "seed {seed}: {v}\nreplay: {}",
                keel_sim::replay_command(seed, None, 20_000)
            );
        }
        assert!(
            report.ops_completed > 0,
            "seed {seed} completed no client operation"
        );
        committed += report.commit_max;
        expired += report.keys_expired_by_ticks;
        holds += report.clock_holds;
        swapped += report.watched_swapped;
        aborted += report.watched_aborted;
        grouped += report.forwards_grouped;
    }
    assert!(
        committed > 30 * 20,
        "too little progress: {committed} entries over 30 seeds"
    );
    // The leaders' short-lived keys expire, and ticks remove them (`time.rs`).
    assert!(
        expired > 30,
        "ticks removed {expired} expired keys over 30 seeds"
    );
    // Clocks drawn apart: some nodes hold their campaigns, and the cluster stays live.
    assert!(
        holds > 10,
        "{holds} campaign holds for clock offsets over 30 seeds"
    );
    // Watched transactions both apply and abort (`client.rs`).
    assert!(
        swapped > 30 && aborted > 3,
        "watched transactions over 30 seeds: {swapped} applied, {aborted} aborted"
    );
    // Followers forward pipelined writes together (`connection.rs`), as the server does.
    assert!(
        grouped > 30,
        "{grouped} writes forwarded with the one before them over 30 seeds"
    );
}

fn keel_sim(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel-sim"))
        .args(args)
        .output()
        .expect("run keel-sim");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success(), stdout)
}

fn summary(stdout: &str) -> &str {
    stdout.lines().last().unwrap_or_default()
}

#[test]
fn binary_exits_zero_and_prints_summary_when_clean() {
    let (ok, stdout) = keel_sim(&["--seeds", "10"]);
    assert!(ok, "clean run failed:\n{stdout}");
    let last = summary(&stdout);
    assert!(last.starts_with("seeds=10 steps="), "{last}");
    assert!(last.ends_with(" violations=0"), "{last}");
}

#[test]
fn binary_rejects_unknown_mutation() {
    let out = Command::new(env!("CARGO_BIN_EXE_keel-sim"))
        .args(["--mutation", "no-such-bug", "--seeds", "1"])
        .output()
        .expect("run keel-sim");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mutation"));
}

/// Each deliberately broken core must be caught within 3,000 seeds, with a replay command. The
/// seeds run in a fixed order (`--fail-fast` stops at the first violation), so where each is
/// caught is deterministic: the others by seed 20; commit-old-term (Figure 8) needs a rare
/// sequence of leader changes and is caught at seed 52.
fn assert_mutation_caught(name: &str) {
    let (ok, stdout) = keel_sim(&["--mutation", name, "--seeds", "3000", "--fail-fast"]);
    assert!(!ok, "mutation {name} went unnoticed:\n{}", summary(&stdout));
    let last = summary(&stdout);
    assert!(!last.ends_with(" violations=0"), "{last}");
    assert!(stdout.contains(" violated "), "{stdout}");
    assert!(
        stdout.contains(&format!("--mutation {name}")),
        "failure must print its replay command"
    );
}

#[test]
fn catches_mutation_commit_old_term() {
    assert_mutation_caught("commit-old-term");
}

#[test]
fn catches_mutation_vote_before_durable() {
    assert_mutation_caught("vote-before-durable");
}

#[test]
fn catches_mutation_ack_before_durable() {
    assert_mutation_caught("ack-before-durable");
}

#[test]
fn catches_mutation_read_without_term_commit() {
    assert_mutation_caught("read-without-term-commit");
}

#[test]
fn catches_mutation_install_below_commit() {
    assert_mutation_caught("install-below-commit");
}

#[test]
fn catches_mutation_keep_conflicting_suffix() {
    assert_mutation_caught("keep-conflicting-suffix");
}

/// Runtime mutations: branches in keel-engine, keel-wal, keel-redis and keel-session code the server runs, each caught within
/// 500 seeds (`--fail-fast` makes where deterministic). A restore that overtakes queued entries
/// is refused by the applier's order check, which the server turns into a fail-stop; a state
/// machine that ignores request ids applies a client's retry twice, which the linearizability
/// checker reports, and so does a follower that retries a forwarded write under a new request id;
/// a storage worker that reports a write durable before writing it loses acknowledged entries in
/// a crash, which the checkers report; a receiver that resumes a snapshot transfer one chunk past
/// what it holds assembles a snapshot whose whole checksum fails, which nothing in the simulated
/// world (no corrupting network, nothing lost below a synced offset) can explain.
fn assert_runtime_mutation_caught(name: &str) {
    assert_runtime_mutation_caught_with(name, &[]);
}

fn assert_runtime_mutation_caught_with(name: &str, extra: &[&str]) {
    let mut args = vec!["--mutation", name, "--seeds", "500", "--fail-fast"];
    args.extend_from_slice(extra);
    let (ok, stdout) = keel_sim(&args);
    assert!(!ok, "mutation {name} went unnoticed:\n{}", summary(&stdout));
    assert!(stdout.contains(" violated "), "{stdout}");
    assert!(stdout.contains(&format!("--mutation {name}")), "{stdout}");
}

#[test]
fn catches_mutation_apply_snapshot_over_pending() {
    assert_runtime_mutation_caught("apply-snapshot-over-pending");
}

#[test]
fn catches_mutation_dedup_off() {
    assert_runtime_mutation_caught("dedup-off");
}

#[test]
fn catches_mutation_forward_retry_new_id() {
    assert_runtime_mutation_caught("forward-retry-new-id");
}

#[test]
fn catches_mutation_storage_complete_before_sync() {
    assert_runtime_mutation_caught("storage-complete-before-sync");
}

#[test]
fn catches_mutation_snapshot_resume_skips_chunk() {
    assert_runtime_mutation_caught("snapshot-resume-skips-chunk");
}

/// A leader that reports the middle of a follower's measured clock-offset interval overstates
/// the offset whenever delays are lopsided (`clock_watch.rs`).
#[test]
fn catches_mutation_clock_offset_midpoint() {
    assert_runtime_mutation_caught("clock-offset-midpoint");
}

/// A node that answers `LPOP`/`RPOP` from its own state without proposing the pop delivers an
/// element that stays in the list: the queue workload's delivery checker sees it delivered twice
/// (or delivered and still there).
#[test]
fn catches_mutation_pop_without_proposing() {
    assert_runtime_mutation_caught("pop-without-proposing");
}

/// A script whose writes are proposed without watching the keys it read is not atomic: a write
/// between its read and its commit is lost or overwritten, which the linearizability checker sees.
#[test]
fn catches_mutation_script_unwatched() {
    assert_runtime_mutation_caught("script-unwatched");
}

/// The queue workload (on by default; the pinned runs leave it off) runs clean, and does what it
/// is there for: elements and stream entries delivered, blocking pops served after they waited
/// for a fill.
#[test]
fn queue_workload_runs_clean_and_delivers() {
    let (mut ops, mut delivered, mut streamed, mut woken) = (0, 0, 0, 0);
    for seed in 2000..2012 {
        let report = run(&RunConfig {
            queues: true,
            ..config(seed, false)
        });
        if let Some(v) = &report.violation {
            panic!(
                "seed {seed}: {v}\nreplay: {}",
                keel_sim::replay_command(seed, None, 20_000)
            );
        }
        ops += report.queue_ops;
        delivered += report.queue_deliveries;
        streamed += report.stream_deliveries;
        woken += report.served_after_waiting;
    }
    assert!(ops > 12 * 50, "too few queue operations answered: {ops}");
    assert!(delivered > 0 && streamed > 0, "{delivered} {streamed}");
    assert!(woken > 0, "no blocking pop was served after it waited");
}

/// The register clients' scripts (on by default; the pinned runs leave them off) run clean, and
/// do what they are there for: scripts whose writes applied, and scripts run again because a
/// key they touched changed while they ran (the watched transaction that carries a script's
/// writes aborted).
#[test]
fn script_workload_runs_clean_applies_and_reruns() {
    let (mut applied, mut rerun) = (0, 0);
    for seed in 3000..3012 {
        let report = run(&RunConfig {
            scripts: true,
            ..config(seed, false)
        });
        if let Some(v) = &report.violation {
            panic!(
                "seed {seed}: {v}\nreplay: {}",
                keel_sim::replay_command(seed, None, 20_000)
            );
        }
        applied += report.scripts_applied;
        rerun += report.scripts_rerun;
    }
    assert!(applied > 12, "too few scripts applied: {applied}");
    assert!(rerun > 0, "no script ran again after a change");
}

/// A watched EXEC that runs although its key changed since the WATCH answers a compare-and-set
/// whose expected value was gone: the linearizability checker sees it.
#[test]
fn catches_mutation_watch_ignored() {
    assert_runtime_mutation_caught("watch-ignored");
}

/// Storage-fault mutations, with storage faults in every seed over the WAL: a recovering node
/// that votes for a log below what it had promised, and a recovery that trusts a log which
/// lost its tail, each let a leader be elected without an entry the damaged node had
/// acknowledged toward its commit (leader completeness; both caught at seed 4).
#[test]
fn catches_mutation_vote_below_promise() {
    assert_runtime_mutation_caught_with("vote-below-promise", &["--storage-faults"]);
}

#[test]
fn catches_mutation_trust_damaged_tail() {
    assert_runtime_mutation_caught_with("trust-damaged-tail", &["--storage-faults"]);
}

/// A recovering node that never leaves recovery is safe — it only stops campaigning — so only
/// the `damaged node whole` invariant can see it.
#[test]
fn catches_mutation_recovery_never_ends() {
    assert_runtime_mutation_caught_with("recovery-never-ends", &["--storage-faults"]);
}

/// A WAL that prunes the bootstrap snapshot leaves a node whose newer snapshots were all damaged
/// and set aside nothing that records the initial configuration: it replays its log as a member
/// of nothing, which the `configuration agreement` invariant sees (at seed 20).
#[test]
fn catches_mutation_prune_bootstrap_snapshot() {
    assert_runtime_mutation_caught_with("prune-bootstrap-snapshot", &["--storage-faults"]);
}

/// A gate that never forgets a departed member's storage refuses it for good once it is added
/// back with a new disk: shown with same-id disk replacements on.
#[test]
fn catches_mutation_keep_departed_incarnations() {
    assert_runtime_mutation_caught_with("keep-departed-incarnations", &["--disk-replacements"]);
}

/// S24: a state machine whose applied index ran ahead of its effects skips an entry on replay
/// after a restart; the replicas' digests then differ at one applied index, which the simulator
/// reports.
#[test]
fn catches_a_replay_that_skips_an_entry() {
    let caught = (0..200u64).find_map(|seed| {
        let report = run(&RunConfig {
            break_replay: true,
            ..config(seed, false)
        });
        report.violation.filter(|v| v.invariant == "state digest")
    });
    let violation = caught.expect("200 seeds of crash-restarts never exposed the skipped entry");
    assert!(violation.detail.contains("applied index"), "{violation}");
}

/// Regressions found by a 3,000-seed sweep. 101991, 101739 and 100625: a local snapshot older
/// than a received one (saved but not installed) made the harness drop the data of the core's
/// own snapshot, which the core then asked it to send. 100182: a vote rule that kept
/// bootstrapped members with an empty log from voting left a five-voter cluster, two of whose
/// members had never heard from a leader, without a leader for good. 308768: a member removed
/// while it was down, with neither pre-vote nor check-quorum, never learned that the joint
/// configuration was left and deposed every leader with its elections (the harness now retires
/// removed members in that configuration, as the liveness promise requires one of the two).
/// 419728: a snapshot's answer lost just before the healing; the leader waits out the snapshot
/// timeout before probing again, which the stated bound did not include. 631361: a leader's
/// write limit fell below entries it had written (a probing follower replicating again), the next
/// write rewrote them while they counted as durable, and a crash during it lost a committed
/// entry. 611887: the checker demanded an entry committed in term 26 of a leader of term 25
/// elected late (Raft promises it only to later terms). 716358: the harness retired a learner
/// added just before the healing, going by a stale leader's configuration; the next leader
/// waited for it forever (it now retires only by a configuration no later leader can undo).
/// Found with membership of every size: 268, a two-voter cluster removed its leader, which
/// crashed after appending C(new) that the other voter never got; the leader, outside C(new),
/// never campaigned and the other voter needed its vote: no leader ever again (the core now
/// lets a node campaign while its removal is not known committed, Raft thesis 4.2.2). 439,
/// with neither pre-vote nor check-quorum, a member being removed by a committed joint
/// configuration, too far behind to win, deposed every leader of the two remaining voters
/// before it could commit; no leader meant nothing was ever retired (the harness now also
/// retires by the committed configuration).
/// Found once the simulator ran the server's engine and storage worker (a follower that already
/// holds a snapshot refuses it as not needed, which the leader takes as a failed transfer): 94,
/// 175, 187 and 227, the leader went back to probing from the follower's match index, below its
/// purged log, so it sent the snapshot again, refused again, forever (the core now probes from
/// just after the snapshot that was on its way, as etcd-raft does); 6030, probing from after the
/// leader's newest snapshot instead asked for an entry the follower could not have. 6018352 and
/// 6044978 (a 50,000-seed sweep): the probe after a refused snapshot waited for the next
/// heartbeat, and the follower's "lagging" heartbeat answer sent the leader back to its match
/// index first, so it asked for the snapshot again, forever (the probe now leaves at once).
/// The first list was recorded when every seed drew 3 or 5 voters: those seeds replay with
/// `classic_shapes` (`--classic-shapes`), which draws their parameters as then.
#[test]
fn regression_seeds_pass() {
    for seed in [
        100_182, 100_625, 101_739, 101_991, 308_768, 419_728, 611_887, 631_361, 716_358,
    ] {
        let report = run(&RunConfig {
            classic_shapes: true,
            ..recorded(seed)
        });
        assert!(!report.every_size);
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?}",
            report.violation
        );
    }
    for seed in [268, 439] {
        let report = run(&RunConfig {
            disk_replacements: DiskReplacements::Off,
            ..recorded(seed)
        });
        assert!(report.every_size);
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?}",
            report.violation
        );
    }
    // 46, 287, 1135, 2157, 3782: a snapshot received whole but not installed (a stale leader's,
    // or one the core no longer took) made its receiver answer every later offer of it "not
    // needed", and the follower never caught up (found when the simulator began running the
    // engine's transfer code).
    // 8003380: a removed-then-readded member with a stale log kept campaigning (it is a voter
    // in its committed configuration), and each of its vote requests restarted the up-to-date
    // node's election timer, so it always took its own vote first: no leader without pre-vote.
    // 1029 (once leaders ticked for expiry): the same with the stale member's refusals, whose
    // newer term restarted the up-to-date candidate's timer; eighteen elections, no leader.
    // 16003627, 16007333, 16007368, 16013861, 16021439, 16026334 (sweep 36, the first with
    // watched transactions): a GET pipelined behind WATCH started beside it and, on a follower,
    // was served from a state older than the leader's watch point; the EXEC then ran over a
    // change its client never saw (requests behind a WATCH now wait for its watch point).
    // 16100008, 16106396, 16109467, 16111507, 16111550, 16115077, 16119338, 16120255, 16120337,
    // 16127135 (sweep 37, the simulated client's bug): a watch refused on a connection that was
    // then lost with its node left the client's "close after this attempt" set; the next
    // attempt's watch, answered on a new connection, closed it, and the transaction went out
    // on another connection, unwatched, over a change its client never saw.
    // 21044417 (sweep 47): a member re-added with a stale log believed itself removed but not
    // known removed, so it kept campaigning (thesis 4.2.2) for a configuration whose only other
    // voter was gone; each refusal of its own vote made the up-to-date candidate lose and
    // restarted that candidate's timer, so the stale member always timed out first: 120
    // elections, no leader (a lost election now keeps the timer its campaign started).
    // 21041481 (sweep 50): a node crashed between adopting a snapshot of a later term and the
    // write that installs it; it restarted in the snapshot's term, counted it durable although
    // storage held the older one, and storage refused the unsynced write that first named it.
    // 22848696 (sweep 69): a node that joined from entries (index 1 on, before the leader's
    // first snapshot) never received the bootstrap configuration, took a snapshot before its
    // own AddVoter entry with an empty configuration in it, and, leading later, installed that
    // snapshot on a member (a node now takes no snapshot where it knows no configuration).
    for seed in [
        46, 94, 175, 187, 227, 287, 1029, 1135, 2157, 3782, 6030, 6_018_352, 6_044_978, 8_003_380,
        16_003_627, 16_007_333, 16_007_368, 16_013_861, 16_021_439, 16_026_334, 16_100_008,
        16_106_396, 16_109_467, 16_111_507, 16_111_550, 16_115_077, 16_119_338, 16_120_255,
        16_120_337, 16_127_135, 21_041_481, 21_044_417, 22_848_696,
    ] {
        let report = run(&RunConfig {
            disk_replacements: DiskReplacements::Off,
            ..recorded(seed)
        });
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?}",
            report.violation
        );
    }
}

/// Found when the simulator began replacing disks, each a liveness failure of the handshake
/// gate's decisions (each fails with that decision reverted):
/// 3 and 15: a removed member still running re-pinned its old storage at its peers, which then
/// refused its new disk for good (only members' incarnations are remembered now); 547 and 834:
/// a member that caught up from a snapshot covering another's removal and return never learned
/// it had left and refused its new disk (a snapshot that skipped configuration entries forgets
/// every incarnation); 1226 and 1346: a member that missed the removal, or was itself out of the
/// configuration meanwhile, refused the rebuilt member once it led, so it never caught up to
/// learn of the removal (from changed storage, what promises nothing is heard: entries,
/// heartbeats, snapshots, vote requests); 12002654: a member that missed the removal refused the
/// rebuilt member's vote requests where its vote was needed, so no one could lead (vote
/// requests were added to what passes).
#[test]
fn disk_replacement_regression_seeds_pass() {
    // And two of the simulator's own: 12015520, the nemesis added the member back before its
    // disk was wiped, so it was wiped as a member (now only `repair_wiped` moves it);
    // 12005276, a late copy of an InstallSnapshot reached the wiped disk (now dropped when the
    // disk lacks the snapshot, as the runtime's transport only steps one beside its file).
    for seed in [
        3, 15, 547, 834, 1226, 1346, 12_002_654, 12_015_520, 12_005_276,
    ] {
        assert!(params(seed).wipe_weight > 0, "seed {seed} replaces no disk");
        let report = run(&RunConfig {
            disk_replacements: DiskReplacements::Planned,
            ..recorded(seed)
        });
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?}",
            report.violation
        );
    }
}

/// Storage faults (`storage_faults.rs`) in every seed over the WAL: members are stopped, their
/// disks damaged, and they repair themselves; every run stays safe and live, and every damaged
/// member ends whole. The same seed replays the same faults.
#[test]
fn storage_faults_are_repaired_and_replay() {
    let (mut faults, mut repaired, mut reports) = (0, 0, 0);
    let seeds: Vec<u64> = (0..).filter(|&s| params(s).use_wal).take(12).collect();
    let mut most = (0, 0);
    for &seed in &seeds {
        let report = run(&RunConfig {
            storage_faults: StorageFaults::All,
            ..config(seed, false)
        });
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?}",
            report.violation
        );
        faults += report.storage_faults;
        most = most.max((report.storage_faults, seed));
        repaired += report.storage_repaired;
        reports += report.damage_reports;
    }
    assert!(
        faults > 12,
        "{faults} storage faults over {} seeds",
        seeds.len()
    );
    assert!(
        reports > faults / 2,
        "{reports} damage reports for {faults} faults"
    );
    // A damaged node still down or removed at the end need not be whole: nearly all are.
    assert!(
        repaired + 2 >= faults,
        "{repaired} of {faults} damaged nodes whole"
    );
    let traced = |seed| {
        run(&RunConfig {
            storage_faults: StorageFaults::All,
            ..config(seed, true)
        })
    };
    let (a, b) = (traced(most.1), traced(most.1));
    assert_eq!(a.storage_faults, most.0);
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.trace_digest, b.trace_digest);
}

/// Found by the first sweep with storage faults, each a bug of keel-wal's repair (each fails
/// with its fix reverted). 4, 6 and 20: a lost tail that left the log ending below the newest
/// snapshot dropped the reset that moves the log past the snapshot, so the WAL's last index
/// stayed below it ("persisted commit beyond its durable log"). 17, 53 and 68: after a repaired
/// lost tail the promise kept its floor until the log reached the floor's index, while the core
/// ended its recovery at a log at least as up to date in Raft's order (a later term below that
/// index), and the floor's end was not flushed: the next open reported a lost tail on a whole
/// node. 1950 and 2142, the harness's: in a joint configuration whose outgoing half keeps all
/// but one member, it shut down (retired) the member being removed while a staying member was
/// recovering and refused its vote to every whole candidate; the outgoing half had no majority
/// left (a damaged member no longer counts as one that stays).
#[test]
fn storage_fault_regression_seeds_pass() {
    for seed in [4, 6, 17, 20, 53, 68, 1950, 2142] {
        assert_damaged_and_clean(&RunConfig {
            storage_faults: StorageFaults::All,
            ..recorded(seed)
        });
    }
}

/// Issue 20, found by sweeps 50 to 52 (each fails without repair from peers): a recovering node
/// whose promise only a learner's log reached (it may not campaign), or no log at all (the node
/// led that term and lost its own tail), while the whole nodes that could campaign needed its
/// vote: no leader, ever. In 21014950 the learner's log holds the promise and the node fetches
/// its entries from it; in 22001847, 22091803 and 22140785 it fetches what peers hold of the
/// promised term, and the peers that lack the rest, from a later term, show that no commit can
/// have counted it: the node lets go of its promise. 21079861 (sweep 54, on the first version):
/// the node led the promised term and still held some of its entries, far beyond its commit
/// index; asked from the commit index, its peers could not tell their older entries from its
/// lost ones (its own entries of the promised term now count as known). 21022969 (sweep 54) and
/// 5169 with every seed faulted (sweep 55) waited for good on the second version: the committed
/// entries the node lacked were in its peers' snapshots only, or its peers held entries of older
/// terms where its lost ones had been; they pass since the promise record keeps the former log's
/// terms and compacted peers report their commit point (the node lowers its promise to it). The
/// seeds' runs changed with the promise record's format, so keel-core's
/// `node/tests/repair_terms.rs` scripts both shapes as the regressions. 22974257, 23274161 and
/// 23318452 (sweeps 73 and 79, as found: grouped forwards) waited for good: peers compacted the
/// lost range, so the node asked from a reported commit point it did not hold and could take no
/// entries, while the only log reaching its promise was a learner's (or none); they pass since
/// peers say how far they hold the lost log and the node lowers its promise to the furthest
/// entry a quorum may hold (`node/tests/repair_holds.rs` scripts the shape).
#[test]
fn recovery_without_a_leader_seeds_pass() {
    for seed in [
        21_014_950, 21_022_969, 21_079_861, 22_001_847, 22_091_803, 22_140_785,
    ] {
        assert_damaged_and_clean(&recorded(seed));
    }
    for seed in [22_974_257, 23_274_161, 23_318_452] {
        assert_damaged_and_clean(&config(seed, false));
    }
    assert_damaged_and_clean(&RunConfig {
        storage_faults: StorageFaults::All,
        ..recorded(5169)
    });
}

/// A recovering node that lets go of its promise on the first peer that lacks its entries,
/// whatever that peer's term and whatever the quorums, helps elect a leader without a committed
/// entry it had acknowledged.
#[test]
fn catches_mutation_release_promise_early() {
    assert_runtime_mutation_caught_with("release-promise-early", &["--storage-faults"]);
}

/// Runs `run_config`: it must have damaged a disk and end without a violation.
fn assert_damaged_and_clean(run_config: &RunConfig) {
    let seed = run_config.seed;
    let report = run(run_config);
    assert!(report.storage_faults > 0, "seed {seed} damaged no disk");
    assert!(
        report.violation.is_none(),
        "seed {seed}: {:?}",
        report.violation
    );
}

/// Found by a soak with the default share of storage faults: a lost tail that uncovered entries
/// of an older term, which a truncation had replaced with the entries the node then
/// acknowledged, reached past the snapshot with a different term at its index; recovery dropped
/// that suffix as an interrupted install's and excused the promise because its index fell in the
/// dropped range, though it named another term: the node came back as if whole, voted for a
/// log without entry 33/203, and leader completeness broke. A promise is excused only when the
/// dropped suffix holds that very entry now (keel-wal `damage.rs`).
#[test]
fn storage_fault_soak_regression_seed_passes() {
    // The default share of storage faults, as the soak ran it.
    assert_damaged_and_clean(&recorded(21_028_449));
}

/// Wiping a member's disk before it is removed loses committed entries when a peer that never
/// heard its old storage counts its new vote: the known limit docs/operating.md states
/// ("Replacing a member's disk"). The simulator shows it (so the planned procedure's clean runs
/// mean something).
#[test]
fn an_unplanned_disk_loss_shows_the_known_limit() {
    let lost = (0..300u64).find_map(|seed| {
        let report = run(&RunConfig {
            disk_replacements: DiskReplacements::Unplanned,
            ..config(seed, false)
        });
        report.violation.map(|v| (seed, v))
    });
    let (seed, v) = lost.expect("no unplanned wipe lost anything in 300 seeds");
    assert!(
        [
            "leader completeness",
            "election safety",
            "state machine safety"
        ]
        .contains(&v.invariant),
        "seed {seed}: {v:?}"
    );
}

fn params(seed: u64) -> Params {
    Params::draw(seed, &mut ChaCha8Rng::seed_from_u64(seed))
}

/// Half the seeds draw membership of every size; clusters start with 1 to 5 voters, 3 and 5
/// still the most common, and every size has a slot to grow into.
#[test]
fn parameters_draw_every_cluster_size() {
    let mut by_size = [0u32; 6];
    let mut every_size = 0;
    for seed in 0..4000 {
        let p = params(seed);
        assert!((1..=5).contains(&p.initial_voters), "seed {seed}: {p:?}");
        by_size[p.initial_voters] += 1;
        if p.every_size {
            every_size += 1;
            assert_eq!(p.min_voters, 1);
            assert!(p.membership_weight > 0, "seed {seed}");
            assert!(p.node_count >= 5.max(p.initial_voters + 1), "seed {seed}");
        } else {
            assert!(
                p.initial_voters == 3 || p.initial_voters == 5,
                "seed {seed}"
            );
            assert_eq!(p.min_voters, 3);
        }
    }
    assert!((1800..=2200).contains(&every_size), "{every_size} of 4000");
    for size in [1, 2, 4] {
        assert!((350..=650).contains(&by_size[size]), "{by_size:?}");
    }
    assert!(by_size[3] > 1500 && by_size[5] > 600, "{by_size:?}");
}

/// The membership changes the seeds draw reach every size from one voter to five and every step
/// between them, both ways, remove the leader, add, promote and remove learners and add removed
/// nodes back, and every one of those runs stays safe and live. Counted from the configurations
/// the runs committed, so a nemesis that stopped drawing some of them fails here.
#[test]
fn membership_changes_cover_every_size_and_transition() {
    let mut total = MembershipCoverage::default();
    let seeds: Vec<u64> = (0..).filter(|&s| params(s).every_size).take(40).collect();
    for &seed in &seeds {
        let report = run(&config(seed, false));
        if let Some(v) = &report.violation {
            panic!(
                "seed {seed}: {v}\nreplay: {}",
                keel_sim::replay_command(seed, None, 20_000)
            );
        }
        assert!(report.every_size);
        total.add(&report.membership);
    }
    for size in 1..=5 {
        assert!(
            total.sizes.get(&size).copied().unwrap_or(0) > 0,
            "size {size} never committed: {total}"
        );
    }
    for (from, to) in [
        (1, 2),
        (2, 1),
        (2, 3),
        (3, 2),
        (3, 4),
        (4, 3),
        (4, 5),
        (5, 4),
    ] {
        assert!(
            total.transition(from, to) > 0,
            "{from}->{to} never committed: {total}"
        );
    }
    assert!(total.leader_removed > 0, "{total}");
    assert!(total.learner_added > 0, "{total}");
    assert!(total.learner_promoted > 0, "{total}");
    assert!(total.learner_removed > 0, "{total}");
    assert!(total.voter_added_directly > 0, "{total}");
    assert!(total.removed_readded > 0, "{total}");
}

/// The seeds that keep the three- or five-voter shape never go below three voters, as before.
#[test]
fn classic_seeds_keep_at_least_three_voters() {
    let seeds: Vec<u64> = (0..)
        .filter(|&s| {
            let p = params(s);
            !p.every_size && p.membership_weight > 0
        })
        .take(10)
        .collect();
    let mut changes = 0;
    for &seed in &seeds {
        let report = run(&config(seed, false));
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?}",
            report.violation
        );
        assert!(!report.every_size);
        let m = &report.membership;
        assert!(m.sizes.keys().all(|&s| s >= 3), "seed {seed}: {m}");
        changes += m.transitions.values().sum::<u64>();
    }
    assert!(changes > 0, "no membership change in {} seeds", seeds.len());
}

/// Seed 3001668 of a sweep at 100,000 steps under faults: two voters with 65 entries committed
/// and, after the healing, a leader with 690 uncommitted entries to ship one per round trip
/// before its own could commit. The liveness bound counted only committed entries; it now
/// counts the longest log.
#[test]
fn long_uncommitted_log_converges_within_the_bound() {
    let report = run(&RunConfig {
        fault_steps: 100_000,
        ..recorded(3_001_668)
    });
    assert!(report.every_size);
    assert!(report.violation.is_none(), "{:?}", report.violation);
    assert!(report.steps > 100_000);
}

/// Runs whose every event is pinned: refactoring the simulator (issue: the simulator as a library
/// for embedders) must leave them byte for byte as they are, and a change that alters a run on
/// purpose updates its line here and says why in its commit. Each is (what it covers, the
/// configuration, steps, trace digest); the digest covers every event, traced or not
/// (`tracing_does_not_change_the_run`).
#[test]
fn pinned_runs_are_unchanged() {
    let every_fault = |seed| RunConfig {
        storage_faults: StorageFaults::All,
        ..config(seed, false)
    };
    let pinned: [(&str, RunConfig, u64, u64); 9] = [
        ("defaults", config(0, false), 20160, 0x802c_3c2a_1502_3f58),
        ("defaults", config(3, false), 26240, 0xabdf_3b1c_dede_eafb),
        ("defaults", config(42, false), 20128, 0x236e_3b55_de85_8cfe),
        (
            "defaults",
            config(1017, false),
            27728,
            0xb75f_dcf7_635a_203f,
        ),
        (
            "classic shapes, single forwards",
            RunConfig {
                classic_shapes: true,
                ..recorded(716_358)
            },
            20432,
            0x2639_3b7b_0def_9124,
        ),
        (
            "single forwards, storage faults",
            RunConfig {
                storage_faults: StorageFaults::All,
                ..recorded(53)
            },
            20464,
            0x34b6_2b4b_1374_45df,
        ),
        (
            "storage faults",
            every_fault(4),
            20272,
            0xd29e_061c_0364_3f2c,
        ),
        (
            "planned disk replacements",
            RunConfig {
                disk_replacements: DiskReplacements::Planned,
                ..config(7, false)
            },
            27648,
            0x1143_c356_8624_f79c,
        ),
        (
            "unplanned disk replacements",
            RunConfig {
                disk_replacements: DiskReplacements::Unplanned,
                ..config(9, false)
            },
            20112,
            0x0d88_1fc5_18db_ea81,
        ),
    ];
    let mut changed = Vec::new();
    for (what, config, steps, digest) in pinned {
        let report = run(&config);
        assert!(report.violation.is_none(), "{what}: {:?}", report.violation);
        if (report.steps, report.trace_digest) != (steps, digest) {
            changed.push(format!(
                "{what} (seed {}): steps {} digest {:#018x}, pinned {steps} {digest:#018x}",
                config.seed, report.steps, report.trace_digest
            ));
        }
    }
    assert!(changed.is_empty(), "runs changed:\n{}", changed.join("\n"));
}
