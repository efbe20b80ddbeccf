//! keel's answer to the fault table of "Protocol-Aware Recovery for Consensus-Based Storage"
//! (FAST'18): for each kind of damage to each on-disk structure, made to one node's directory
//! while it is down — a follower stopped cleanly, or the leader killed — the outcome. Every row
//! is one test; docs/disk-faults.md's table ("The fault table") reports them.
//!
//! - **repaired**: the node starts, sets aside what is damaged, recovers the rest from the
//!   cluster by itself, and ends whole: every acknowledged write on every node, the nodes'
//!   state digests equal, `keel check` clean once it is stopped;
//! - **refused**: the node will not start (it cannot know what it promised) and says why; the
//!   other two serve on with every acknowledged write.
//!
//! Nothing here is ever data loss or a wrong answer: that is what each test asserts.

mod process;

use std::path::Path;

use process::disk::{
    active_segment, flip_acknowledged_record, flip_byte_in, flip_newest_snapshot, keel_check,
    zero_fill_tail,
};
use process::{eventually, get, set, Cluster, DEADLINE};

/// The keys written before the damage. With `--snapshot-threshold 100` the newest snapshot
/// covers at most index 301 (the leader's no-op is index 1): the last 50 writes are in the log
/// alone, so the lost tail always takes acknowledged entries no snapshot holds. (With 300 keys a
/// node could snapshot index 301, its last entry, just before it stopped; its tail then held
/// nothing a snapshot did not, and recovery rightly reported no damage.)
const KEYS: usize = 350;

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// A byte flipped in an acknowledged record of the active segment.
    RecordFlipped,
    /// The active segment's last 16 KiB read back as zeros (a disk that lied about flushes).
    TailLost,
    /// The active segment deleted.
    SegmentDeleted,
    /// A byte flipped in the newest snapshot.
    NewestSnapshotFlipped,
    /// A byte flipped in every snapshot.
    EverySnapshotFlipped,
    /// A byte flipped in one copy of the promise record.
    OnePromiseCopyFlipped,
    /// A byte flipped in both copies of the promise record.
    BothPromiseCopiesFlipped,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Follower,
    Leader,
}

fn damage(dir: &Path, fault: Fault) {
    let promise = dir.join("promise");
    match fault {
        Fault::RecordFlipped => flip_acknowledged_record(dir),
        Fault::TailLost => {
            zero_fill_tail(dir, 16 << 10);
        }
        Fault::SegmentDeleted => {
            let (segment, _) = active_segment(dir);
            std::fs::remove_file(segment).unwrap();
        }
        Fault::NewestSnapshotFlipped => {
            flip_newest_snapshot(dir);
        }
        Fault::EverySnapshotFlipped => {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|x| x == "snap") {
                    let len = std::fs::metadata(&path).unwrap().len() as usize;
                    flip_byte_in(&path, len / 2);
                }
            }
        }
        // Inside each 320-byte slot (slots at 0 and 4096), in the recorded fields.
        Fault::OnePromiseCopyFlipped => flip_byte_in(&promise, 20),
        Fault::BothPromiseCopiesFlipped => {
            flip_byte_in(&promise, 20);
            flip_byte_in(&promise, 4096 + 20);
        }
    }
}

/// What the node's log names on the way up (`None`: nothing to report, one copy of the promise
/// still verifies).
fn expected_finding(fault: Fault) -> Option<&'static str> {
    match fault {
        Fault::RecordFlipped => Some("corrupt-log"),
        // The last segment gone: the log ends (here: before it starts) below the promise.
        Fault::TailLost | Fault::SegmentDeleted => Some("lost-tail"),
        Fault::NewestSnapshotFlipped | Fault::EverySnapshotFlipped => Some("corrupt-snapshot"),
        Fault::OnePromiseCopyFlipped => None,
        Fault::BothPromiseCopiesFlipped => Some("corrupt-promise"),
    }
}

fn expected_refusal(fault: Fault) -> bool {
    matches!(fault, Fault::BothPromiseCopiesFlipped)
}

/// Writes, stops the target (a follower cleanly, the leader with kill -9), damages its
/// directory, writes more through whoever leads, restarts it, and checks the outcome.
fn run(name: &str, fault: Fault, target: Target) {
    let mut cluster = Cluster::new(name, &[1, 2, 3], &[], &["--snapshot-threshold", "100"]);
    let leader = cluster.leader();
    let victim = match target {
        Target::Leader => leader,
        Target::Follower => (1..=3).find(|id| *id != leader).unwrap(),
    };
    for i in 0..KEYS {
        set(cluster.node(leader), &format!("key-{i}"), &"v".repeat(100));
    }
    cluster.converged(&[1, 2, 3], KEYS as u64);
    match target {
        Target::Follower => {
            cluster.node(victim).signal("TERM");
            assert!(cluster.node_mut(victim).wait_exit(DEADLINE).is_some());
        }
        Target::Leader => {
            // Idle for longer than the promise record's idle flush (10 ms) first: a kill then
            // loses nothing the record does not name.
            std::thread::sleep(std::time::Duration::from_millis(200));
            cluster.node_mut(victim).kill();
        }
    }
    let dir = cluster.node(victim).data_dir.clone();
    damage(&dir, fault);
    let others: Vec<u64> = (1..=3).filter(|id| *id != victim).collect();
    let leader = cluster.leader_among(&others);
    for i in 0..20 {
        set(cluster.node(leader), &format!("after-{i}"), "1");
    }
    cluster.node_mut(victim).spawn();

    if expected_refusal(fault) {
        let status = cluster.node_mut(victim).wait_exit(DEADLINE);
        assert!(
            status.is_some_and(|s| !s.success()),
            "{fault:?}: the node must refuse to start: {status:?}"
        );
        let log = std::fs::read_to_string(&cluster.node(victim).log).unwrap();
        assert!(log.contains("corrupt-promise"), "{fault:?}: {log}");
        // The other two serve on with everything.
        set(cluster.node(leader), "still-serving", "1");
        cluster.converged(&others, KEYS as u64 + 21);
        for id in others {
            assert_every_write(&cluster, id);
        }
        return;
    }

    eventually("the damaged node whole", || {
        let node = cluster.node(victim);
        (node.info_u64("recovering") == Some(0) && node.info_u64("applied_index")? > 0)
            .then_some(())
    });
    let log = std::fs::read_to_string(&cluster.node(victim).log).unwrap();
    match expected_finding(fault) {
        Some(kind) => assert!(
            log.contains("is damaged") && log.contains(kind),
            "{fault:?} {target:?}: no {kind} in the log:\n{log}"
        ),
        None => assert!(!log.contains("is damaged"), "{fault:?} {target:?}:\n{log}"),
    }
    set(cluster.node(leader), "after-restart", "1");
    let (applied, _) = cluster.converged(&[1, 2, 3], KEYS as u64 + 22);
    assert!(
        applied > KEYS as u64 + 21,
        "{fault:?} {target:?}: {applied}"
    );
    for id in 1..=3 {
        assert_every_write(&cluster, id);
    }
    cluster.node(victim).signal("TERM");
    assert!(cluster.node_mut(victim).wait_exit(DEADLINE).is_some());
    let (code, report) = keel_check(&dir);
    assert_eq!(code, Some(0), "{fault:?} {target:?}, repaired:\n{report}");
}

/// Every write the test made reads back through node `id`'s client port (a linearizable read:
/// this also shows the node serves).
fn assert_every_write(cluster: &Cluster, id: u64) {
    let node = cluster.node(id);
    for i in 0..KEYS {
        assert_eq!(
            get(node, &format!("key-{i}")).as_deref(),
            Some(&*"v".repeat(100)),
            "node {id} key-{i}"
        );
    }
    for i in 0..20 {
        assert_eq!(
            get(node, &format!("after-{i}")).as_deref(),
            Some("1"),
            "node {id} after-{i}"
        );
    }
}

macro_rules! fault_rows {
    ($($name:ident: $fault:ident, $target:ident;)*) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name), Fault::$fault, Target::$target);
            }
        )*
    };
}

fault_rows! {
    record_flipped_on_a_follower: RecordFlipped, Follower;
    record_flipped_on_the_leader: RecordFlipped, Leader;
    tail_lost_on_a_follower: TailLost, Follower;
    tail_lost_on_the_leader: TailLost, Leader;
    segment_deleted_on_a_follower: SegmentDeleted, Follower;
    segment_deleted_on_the_leader: SegmentDeleted, Leader;
    newest_snapshot_flipped_on_a_follower: NewestSnapshotFlipped, Follower;
    newest_snapshot_flipped_on_the_leader: NewestSnapshotFlipped, Leader;
    every_snapshot_flipped_on_a_follower: EverySnapshotFlipped, Follower;
    every_snapshot_flipped_on_the_leader: EverySnapshotFlipped, Leader;
    one_promise_copy_flipped_on_a_follower: OnePromiseCopyFlipped, Follower;
    one_promise_copy_flipped_on_the_leader: OnePromiseCopyFlipped, Leader;
    both_promise_copies_flipped_on_a_follower: BothPromiseCopiesFlipped, Follower;
    both_promise_copies_flipped_on_the_leader: BothPromiseCopiesFlipped, Leader;
}

/// Two of three nodes damaged at different places while the whole cluster is down — one with a
/// flipped record, the other with a flipped snapshot and a lost tail — and the third intact:
/// started together, both repair from it, and nothing acknowledged is lost.
#[test]
fn two_nodes_damaged_at_different_places_both_repair() {
    let mut cluster = Cluster::new(
        "two_nodes_damaged",
        &[1, 2, 3],
        &[],
        &["--snapshot-threshold", "100"],
    );
    let leader = cluster.leader();
    for i in 0..KEYS {
        set(cluster.node(leader), &format!("key-{i}"), &"v".repeat(100));
    }
    for i in 0..20 {
        set(cluster.node(leader), &format!("after-{i}"), "1");
    }
    cluster.converged(&[1, 2, 3], KEYS as u64 + 20);
    for id in 1..=3 {
        cluster.node(id).signal("TERM");
        assert!(cluster.node_mut(id).wait_exit(DEADLINE).is_some());
    }
    let damaged = [1, 2];
    damage(&cluster.node(1).data_dir.clone(), Fault::RecordFlipped);
    let dir = cluster.node(2).data_dir.clone();
    damage(&dir, Fault::NewestSnapshotFlipped);
    damage(&dir, Fault::TailLost);
    for id in 1..=3 {
        cluster.node_mut(id).spawn();
    }
    eventually("both damaged nodes whole", || {
        damaged
            .iter()
            .all(|id| cluster.node(*id).info_u64("recovering") == Some(0))
            .then_some(())
    });
    let leader = cluster.leader();
    set(cluster.node(leader), "after-restart", "1");
    cluster.converged(&[1, 2, 3], KEYS as u64 + 22);
    for id in 1..=3 {
        assert_every_write(&cluster, id);
    }
    for id in damaged {
        let log = std::fs::read_to_string(&cluster.node(id).log).unwrap();
        assert!(log.contains("is damaged"), "node {id}:\n{log}");
        cluster.node(id).signal("TERM");
        assert!(cluster.node_mut(id).wait_exit(DEADLINE).is_some());
        let (code, report) = keel_check(&cluster.node(id).data_dir);
        assert_eq!(code, Some(0), "node {id}, repaired:\n{report}");
    }
}

/// A flipped record in an older, sealed segment (segments are 128 MiB: 140 values of 1 MiB fill
/// one and start the next): the node sets that segment and the later one aside, and recovers
/// everything from the leader.
#[test]
fn older_segment_record_flipped_on_a_follower() {
    let mut cluster = Cluster::new("older_segment", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let victim = (1..=3).find(|id| *id != leader).unwrap();
    let value = "x".repeat(1 << 20);
    for i in 0..140 {
        set(cluster.node(leader), &format!("big-{i}"), &value);
    }
    cluster.converged(&[1, 2, 3], 140);
    cluster.node(victim).signal("TERM");
    assert!(cluster.node_mut(victim).wait_exit(DEADLINE).is_some());
    let dir = cluster.node(victim).data_dir.clone();
    let first = dir.join("00000000000000000001.wal");
    let (active, _) = active_segment(&dir);
    assert_ne!(active, first, "the log reaches past its first segment");
    flip_byte_in(&first, 64 << 20);
    let (code, report) = keel_check(&dir);
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains("DAMAGE corrupt-log"), "{report}");

    cluster.node_mut(victim).spawn();
    eventually("whole again", || {
        let node = cluster.node(victim);
        (node.info_u64("recovering") == Some(0) && node.info_u64("applied_index")? >= 140)
            .then_some(())
    });
    set(cluster.node(leader), "after", "1");
    cluster.converged(&[1, 2, 3], 141);
    for i in [0, 70, 139] {
        assert_eq!(
            get(cluster.node(victim), &format!("big-{i}")).map(|v| v.len()),
            Some(1 << 20),
            "big-{i}"
        );
    }
    let log = std::fs::read_to_string(&cluster.node(victim).log).unwrap();
    assert!(log.contains("corrupt-log"), "{log}");
    cluster.node(victim).signal("TERM");
    // (The scrub is reading the 128 MiB segments meanwhile: a stop must not read as damage.)
    assert!(cluster.node_mut(victim).wait_exit(DEADLINE).is_some());
    let log = std::fs::read_to_string(&cluster.node(victim).log).unwrap();
    assert!(!log.contains("the scrub found damage"), "{log}");
    let (code, report) = keel_check(&dir);
    assert_eq!(code, Some(0), "repaired:\n{report}");
}
