//! Clock offsets in a three-node cluster of `keel serve` processes, one of them started with its
//! wall clock three seconds ahead (libfaketime, Debian package `faketime`; its monotonic clock is
//! left alone, so its timers run as usual): the leader measures the offset on heartbeats, the
//! node reports it and holds its campaigns (`--max-clock-offset-ms`, default 500), and when the
//! leader dies the other node takes over while the one with the bad clock never leads.

mod process;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use process::Cluster;

const AHEAD_MS: i64 = 3_000;

/// libfaketime's preload library, wherever the distribution put it.
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketime.so.1")])
        .find(|path| path.exists());
    found.expect(
        "libfaketime is not installed: run `apt-get install -y faketime` (scripts/test installs it)",
    )
}

fn field(info: &HashMap<String, String>, key: &str) -> String {
    info.get(key).cloned().unwrap_or_default()
}

#[test]
fn a_node_whose_clock_is_off_reports_it_holds_its_campaigns_and_never_leads() {
    let mut cluster = Cluster::stopped("clock-offset", &[1, 2, 3], &[], &[]);
    let ahead = cluster.node_mut(3);
    ahead.env = vec![
        ("LD_PRELOAD".into(), libfaketime().display().to_string()),
        ("FAKETIME".into(), format!("+{}s", AHEAD_MS / 1000)),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ];
    // Nodes 1 and 2 elect a leader first, so the node with the bad clock starts as a follower.
    cluster.node_mut(1).spawn();
    cluster.node_mut(2).spawn();
    let first = cluster.leader_among(&[1, 2]);
    cluster.node_mut(3).spawn();

    let info3 = process::eventually("node 3 measured and held", || {
        let info = cluster.node(3).info()?;
        (field(&info, "campaigns_held") == "1").then_some(info)
    });
    let offset: i64 = field(&info3, "clock_offset_ms").parse().unwrap();
    assert!(
        (AHEAD_MS - 200..=AHEAD_MS).contains(&offset),
        "node 3 is told it is {offset} ms ahead: {info3:?}"
    );
    let leader_info = cluster.node(first).info().unwrap();
    let offsets = field(&leader_info, "follower_clock_offsets_ms");
    assert!(
        offsets
            .split(',')
            .any(|o| o.starts_with("3=2") || o.starts_with("3=3")),
        "the leader measured node 3: {offsets}"
    );
    assert_eq!(field(&leader_info, "clock_outlier"), "0");
    assert_eq!(field(&leader_info, "campaigns_held"), "0");

    // The leader dies: the other good node takes over, node 3 votes but never campaigns.
    cluster.node_mut(first).kill();
    let other = if first == 1 { 2 } else { 1 };
    let started = Instant::now();
    let next = cluster.leader_among(&[other, 3]);
    assert_eq!(next, other, "the node with the good clock leads");
    // Well past several election timeouts, node 3 still has not led (its hold outlasts them).
    while started.elapsed() < Duration::from_secs(5) {
        let info = cluster.node(3).info().unwrap_or_default();
        assert_ne!(field(&info, "role"), "leader", "node 3 led: {info:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(&cluster.node(3).log).unwrap();
    assert!(
        log.contains("it will not campaign"),
        "node 3 logged why it holds its campaigns:\n{}",
        process::log_tail(&cluster.node(3).log)
    );
}
