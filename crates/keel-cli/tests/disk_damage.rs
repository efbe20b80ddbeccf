//! Storage faults beyond crashes (issue 20): a node whose disk lost acknowledged writes says so
//! and recovers them from the cluster by itself, and `keel check` reports the damage offline.
//! The loss is made as a disk with a volatile cache makes it: the end of the active segment reads
//! back as zeros, which without the promise record looked exactly like a log that simply ended
//! there.
//!
//! Every wait is a retry loop with a generous deadline; nothing asserts a latency.

mod process;

use process::disk::{
    files_ending_in, flip_acknowledged_record, flip_newest_snapshot, keel_check, zero_fill_tail,
};
use process::{eventually, get, set, Cluster, DEADLINE};

#[test]
fn a_node_whose_disk_lost_its_tail_says_so_and_repairs_itself_from_the_cluster() {
    let mut cluster = Cluster::new("disk-damage", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let victim = if leader == 3 { 2 } else { 3 };
    for i in 0..300 {
        set(cluster.node(leader), &format!("key-{i}"), &"v".repeat(100));
    }
    // Stopped cleanly (SIGTERM): everything it acknowledged is on its disk and promised.
    cluster.node(victim).signal("TERM");
    let status = cluster.node_mut(victim).wait_exit(DEADLINE);
    assert!(status.is_some(), "node {victim} did not stop on SIGTERM");
    let dir = cluster.node(victim).data_dir.clone();

    let (code, report) = keel_check(&dir);
    assert_eq!(code, Some(0), "a healthy directory:\n{report}");
    assert!(report.contains("clean:"), "{report}");
    assert!(report.contains("promise: term"), "{report}");

    // The disk loses the last 16 KiB of the log it had reported flushed.
    zero_fill_tail(&dir, 16 << 10);

    let (code, report) = keel_check(&dir);
    assert_eq!(code, Some(1), "a damaged directory:\n{report}");
    let finding = report
        .lines()
        .find(|l| l.starts_with("DAMAGE lost-tail:"))
        .unwrap_or_else(|| panic!("no lost-tail finding:\n{report}"));
    assert!(
        finding.contains("acknowledged entries are gone"),
        "{finding}"
    );
    assert!(report.contains("damaged: 1 finding(s)"), "{report}");

    // Restarted, the node opens its intact prefix and recovers the rest from the cluster by
    // itself, saying so, instead of serving a shorter log as if nothing happened.
    cluster.node_mut(victim).spawn();
    let log = cluster.node(victim).log.clone();
    eventually("the damage named in the log", || {
        let text = std::fs::read_to_string(&log).ok()?;
        (text.contains("is damaged") && text.contains("lost-tail")).then_some(())
    });
    // Writes go on meanwhile, and the node becomes whole again.
    for i in 0..20 {
        set(cluster.node(leader), &format!("after-{i}"), "1");
    }
    eventually("whole again", || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains("whole again").then_some(())
    });
    assert_eq!(cluster.node(victim).info_u64("recovering"), Some(0));
    let (applied, _) = cluster.converged(&[1, 2, 3], 300);
    assert!(applied >= 320, "{applied}");
    assert_eq!(
        get(cluster.node(victim), "key-299").as_deref(),
        Some(&*"v".repeat(100))
    );

    // Stopped again, its directory is clean: the log holds everything it had promised.
    cluster.node(victim).signal("TERM");
    assert!(cluster.node_mut(victim).wait_exit(DEADLINE).is_some());
    let (code, report) = keel_check(&dir);
    assert_eq!(code, Some(0), "repaired:\n{report}");
}

/// Two of three disks lost their tails (a power loss on volatile caches) while the third node is
/// down: the two must not elect a leader between them on logs shorter than they promised
/// (unavailable, not wrong), nor repair each other (each may have lost more than it knows). When
/// the third returns, the two recover what they lost — from it as leader, or one of them from it
/// as a peer first, which then leads with the other's vote — and every acknowledged write is there
/// on every node.
#[test]
fn two_nodes_with_lost_tails_wait_for_the_third_and_then_lose_nothing() {
    let mut cluster = Cluster::new("disk-damage-two", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    for i in 0..300 {
        set(cluster.node(leader), &format!("key-{i}"), &"v".repeat(100));
    }
    let (applied, _) = cluster.converged(&[1, 2, 3], 300);
    for id in [1, 2, 3] {
        cluster.node(id).signal("TERM");
        assert!(cluster.node_mut(id).wait_exit(DEADLINE).is_some());
    }
    // Nodes 1 and 2 lose different amounts of their logs' ends.
    zero_fill_tail(&cluster.node(1).data_dir.clone(), 8 << 10);
    zero_fill_tail(&cluster.node(2).data_dir.clone(), 24 << 10);
    cluster.node_mut(1).spawn();
    cluster.node_mut(2).spawn();
    eventually("both recovering", || {
        let recovering = [1, 2].map(|id| cluster.node(id).info_u64("recovering"));
        (recovering == [Some(1), Some(1)]).then_some(())
    });
    // Several election timeouts: no leader between the two.
    let quiet_until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while std::time::Instant::now() < quiet_until {
        for id in [1, 2] {
            let info = cluster.node(id).info().unwrap_or_default();
            assert_ne!(
                info.get("role").map(String::as_str),
                Some("leader"),
                "node {id} leads on a log shorter than it promised"
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    cluster.node_mut(3).spawn();
    eventually("both whole again", || {
        let recovering = [1, 2].map(|id| cluster.node(id).info_u64("recovering"));
        (recovering == [Some(0), Some(0)]).then_some(())
    });
    let new_leader = cluster.leader();
    set(cluster.node(new_leader), "after", "1");
    let (now_applied, _) = cluster.converged(&[1, 2, 3], applied + 1);
    assert!(now_applied > applied);
    for id in [1, 2, 3] {
        for i in [0, 150, 299] {
            assert_eq!(
                get(cluster.node(id), &format!("key-{i}")).as_deref(),
                Some(&*"v".repeat(100)),
                "node {id} key-{i}"
            );
        }
    }
}

/// Three nodes taking a snapshot every 100 entries (with `extra_args`), 400 keys written and
/// applied everywhere: the cluster, its leader and a follower.
fn snapshotting_cluster_with_400_keys(name: &str, extra_args: &[&str]) -> (Cluster, u64, u64) {
    let mut args = vec!["--snapshot-threshold", "100"];
    args.extend_from_slice(extra_args);
    let cluster = Cluster::new(name, &[1, 2, 3], &[], &args);
    let leader = cluster.leader();
    let victim = if leader == 3 { 2 } else { 3 };
    for i in 0..400 {
        set(cluster.node(leader), &format!("key-{i}"), &"v".repeat(100));
    }
    cluster.converged(&[1, 2, 3], 400);
    (cluster, leader, victim)
}

/// Rot in an acknowledged log record and in the newest snapshot of a stopped follower: it sets
/// both aside (renamed `.damaged`), starts on what is intact, recovers the rest from the cluster,
/// and its state agrees with the others'.
#[test]
fn a_node_with_a_corrupt_record_and_a_corrupt_snapshot_repairs_itself() {
    let (mut cluster, leader, victim) = snapshotting_cluster_with_400_keys("disk-damage-rot", &[]);
    cluster.node(victim).signal("TERM");
    assert!(cluster.node_mut(victim).wait_exit(DEADLINE).is_some());
    let dir = cluster.node(victim).data_dir.clone();
    flip_newest_snapshot(&dir);
    flip_acknowledged_record(&dir);
    let (code, report) = keel_check(&dir);
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains("DAMAGE corrupt-snapshot"), "{report}");

    cluster.node_mut(victim).spawn();
    let log = cluster.node(victim).log.clone();
    eventually("whole again", || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains("whole again").then_some(())
    });
    set(cluster.node(leader), "after", "1");
    let (applied, _) = cluster.converged(&[1, 2, 3], 401);
    assert!(applied > 400);
    assert_eq!(
        get(cluster.node(victim), "key-7").as_deref(),
        Some(&*"v".repeat(100))
    );
    let aside: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".damaged"))
        .collect();
    assert!(
        aside.iter().any(|n| n.ends_with(".snap.damaged"))
            && aside.iter().any(|n| n.ends_with(".wal.damaged")),
        "{aside:?}"
    );
}

/// Rot in a running follower's snapshot, which nothing reads until a restart: the background
/// scrub finds it (twice, a second apart), the process restarts itself in place (same process
/// id), sets the file aside on the way up, and the node is whole and in agreement again.
#[test]
fn the_scrub_finds_rot_in_a_running_node_and_the_node_repairs_itself() {
    let (mut cluster, leader, victim) = snapshotting_cluster_with_400_keys(
        "disk-damage-scrub",
        &["--scrub-rate-mib-s", "64", "--scrub-interval-ms", "200"],
    );
    let pid = cluster.node(victim).pid();
    let dir = cluster.node(victim).data_dir.clone();
    let log = cluster.node(victim).log.clone();
    // The damage must be in the newest snapshot (damage in an older one is set aside without a
    // restart): wait for a snapshot of the 400 keys, which the follower may still be writing
    // when the cluster has converged, and for a clean pass over it. Its snapshots fall where
    // its apply batches end past each 100 entries (at 105, 205, 305, say), so it may have none
    // at 400 or later until more is written: one more write each time it has not.
    let newest_index = || -> Option<u64> {
        let newest = files_ending_in(&dir, "snap").pop()?;
        let name = newest.file_name()?.to_str()?;
        name.strip_prefix("snapshot-")?.get(..20)?.parse().ok()
    };
    let mut fillers = 0;
    eventually("a snapshot at index 400 or later on disk", || {
        if newest_index().is_some_and(|index| index >= 400) {
            return Some(());
        }
        if fillers < 200 {
            set(cluster.node(leader), &format!("filler-{fillers}"), "1");
            fillers += 1;
        }
        None
    });
    let passes = cluster.node(victim).info_u64("scrub_passes").unwrap_or(0);
    eventually("a clean scrub pass over it", || {
        (cluster.node(victim).info_u64("scrub_passes")? > passes).then_some(())
    });
    assert_eq!(cluster.node(victim).info_u64("scrub_damage_found"), Some(0));
    let newest = flip_newest_snapshot(&dir);

    eventually("the scrub's finding and the restart", || {
        let text = std::fs::read_to_string(&log).ok()?;
        (text.contains("the scrub found damage on disk")
            && text.contains("restarting the process to repair it"))
        .then_some(())
    });
    eventually("the damaged snapshot set aside", || {
        let mut aside = std::path::PathBuf::from(&newest).into_os_string();
        aside.push(".damaged");
        std::path::Path::new(&aside).exists().then_some(())
    });
    cluster.node_mut(victim).assert_alive();
    assert_eq!(cluster.node(victim).pid(), pid, "restarted in place");
    set(cluster.node(leader), "after", "1");
    let (applied, _) = cluster.converged(&[1, 2, 3], 401);
    assert!(applied > 400);
    assert_eq!(
        get(cluster.node(victim), "key-7").as_deref(),
        Some(&*"v".repeat(100))
    );
    assert_eq!(cluster.node(victim).info_u64("recovering"), Some(0));
    // Stopped, its directory checks clean.
    cluster.node(victim).signal("TERM");
    assert!(cluster.node_mut(victim).wait_exit(DEADLINE).is_some());
    let (code, report) = keel_check(&dir);
    assert_eq!(code, Some(0), "repaired:\n{report}");
}
