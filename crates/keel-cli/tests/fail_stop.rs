//! Fail-stop (issue 17): a panic in a node process ends the process with a non-zero status and
//! a log line saying why; the rest of the cluster goes on. The panic is triggered with
//! `DEBUG PANIC`, which only a node started with `--enable-debug-command` runs.
//!
//! Every wait is a retry loop with a generous deadline; nothing asserts a latency.

mod process;

use std::os::unix::process::ExitStatusExt;

use keel_resp::Reply;
use process::{get, log_tail, raw_request, set, Cluster, DEADLINE};

#[test]
fn a_panic_stops_the_node_process_and_the_others_keep_serving() {
    let mut cluster = Cluster::stopped("fail-stop", &[1, 2, 3], &[], &[]);
    // Nodes 1 and 2 allow DEBUG; node 3 runs with the default (refused).
    for id in [1, 2] {
        cluster
            .node_mut(id)
            .args
            .push("--enable-debug-command".into());
    }
    for id in [1, 2, 3] {
        cluster.node_mut(id).spawn();
    }
    let leader = cluster.leader();
    set(cluster.node(3), "before", "1");

    // Without the flag: refused in Redis's words, and the node stays up and serving.
    let refused = raw_request(cluster.node(3).client_port, &["DEBUG", "PANIC"]).unwrap();
    match &refused {
        Reply::Error(e) => assert!(
            e.starts_with("ERR DEBUG command not allowed.") && e.contains("enable-debug-command"),
            "{e}"
        ),
        other => panic!("DEBUG PANIC without the flag answered {other:?}"),
    }
    cluster.node_mut(3).assert_alive();
    set(cluster.node(3), "refused", "still serving");

    // A panic where it hurts most: the leader's node task, if the leader allows DEBUG.
    let victim = if leader == 3 { 1 } else { leader };
    let survivors: Vec<u64> = [1, 2, 3].into_iter().filter(|&id| id != victim).collect();
    // The connection dies with the process: whatever this answers (nothing), it is not a reply
    // from a node that lived on.
    let answered = raw_request(cluster.node(victim).client_port, &["DEBUG", "PANIC"]);
    assert!(
        !matches!(&answered, Ok(Reply::Error(e)) if e.starts_with("TRYAGAIN")),
        "a half-dead node answered {answered:?}"
    );
    let log = cluster.node(victim).log.clone();
    let status = cluster
        .node_mut(victim)
        .wait_exit(DEADLINE)
        .unwrap_or_else(|| {
            panic!(
                "node {victim} still runs after DEBUG PANIC; log tail:\n{}",
                log_tail(&log)
            )
        });
    assert!(!status.success(), "node {victim} exited with {status}");
    // abort(): SIGABRT, so a supervisor sees a crash (and a core dump where enabled).
    assert_eq!(status.signal(), Some(libc_sigabrt()), "{status}");
    let text = std::fs::read_to_string(&log).unwrap();
    // Straight to stderr, with where and why ...
    assert!(
        text.contains("keel: fatal: panic in thread")
            && text.contains("panic requested (Handle::debug_panic)")
            && text.contains("driver.rs:"),
        "the log does not say why node {victim} stopped:\n{}",
        log_tail(&log)
    );
    // ... and through the logger, at error level.
    assert!(
        text.lines()
            .any(|l| l.contains("ERROR") && l.contains("fatal: panic in thread")),
        "no error-level log line:\n{}",
        log_tail(&log)
    );

    // The other two elect a leader (if needed) and commit writes.
    cluster.leader_among(&survivors);
    for &id in &survivors {
        set(cluster.node(id), &format!("after-{id}"), "committed");
    }
    for &id in &survivors {
        assert_eq!(get(cluster.node(id), "before").as_deref(), Some("1"));
        for &other in &survivors {
            assert_eq!(
                get(cluster.node(id), &format!("after-{other}")).as_deref(),
                Some("committed")
            );
        }
    }
}

/// SIGABRT on Linux and the BSDs.
fn libc_sigabrt() -> i32 {
    6
}
