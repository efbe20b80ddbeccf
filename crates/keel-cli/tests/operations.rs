//! Operating `keel serve` as a real process: the Prometheus endpoint, JSON logs, `--config FILE`,
//! and graceful shutdown on SIGTERM (exit status 0, every acknowledged write still there after a
//! restart; a leader hands leadership over first).
//!
//! Every wait is a retry loop with a generous deadline; nothing asserts a latency.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use keel_resp::Reply;

mod process;

use process::{
    eventually, free_port, raw_get as get, raw_request as request, raw_set as set, TempDir,
    DEADLINE,
};

/// A `keel` process, its stderr in a file; killed (SIGKILL) on drop if still running.
struct Keel {
    child: Child,
    stderr: PathBuf,
}

impl Keel {
    fn spawn(args: &[String], stderr: &Path) -> Keel {
        let log = std::fs::File::create(stderr).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start keel");
        Keel {
            child,
            stderr: stderr.to_path_buf(),
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits for the process to exit (within the deadline).
    fn wait_exit(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "keel did not exit; stderr:\n{}",
                self.stderr()
            );
            sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Keel {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn status_field(port: u16, key: &str) -> Option<String> {
    match request(port, &["RAFT.STATUS"]).ok()? {
        Reply::Bulk(text) => String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.trim().to_string()),
        _ => None,
    }
}

fn wait_leader(port: u16) {
    eventually("the node to lead", || {
        (status_field(port, "role").as_deref() == Some("leader")).then_some(())
    });
}

/// The body of `GET /metrics`, if the endpoint answers 200.
fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8(response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.")
        .then(|| head.split(' ').nth(1) == Some("200"))?
        .then(|| body.to_string())
}

/// The value of the sample `name{labels}` (labels exactly as rendered, e.g. `node="1"`).
fn sample(body: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Arguments for a one-node cluster.
fn one_node_args(dir: &Path, client_port: u16, peer_port: u16) -> Vec<String> {
    vec![
        "serve".into(),
        "--id".into(),
        "1".into(),
        "--data-dir".into(),
        dir.join("node-1").display().to_string(),
        "--client-addr".into(),
        format!("127.0.0.1:{client_port}"),
        "--initial-cluster".into(),
        format!("1=127.0.0.1:{peer_port}"),
    ]
}

#[test]
#[expect(clippy::too_many_lines)]
fn metrics_endpoint_serves_node_metrics_that_move() {
    let dir = TempDir::new("metrics");
    let (client_port, peer_port, metrics_port) = (free_port(), free_port(), free_port());
    let mut args = one_node_args(&dir.0, client_port, peer_port);
    args.extend(["--metrics-addr".into(), format!("127.0.0.1:{metrics_port}")]);
    let node = Keel::spawn(&args, &dir.0.join("stderr.log"));
    wait_leader(client_port);

    let body = eventually("the metrics endpoint", || scrape(metrics_port));
    for name in [
        "keel_proposals_total",
        "keel_commit_latency_seconds",
        "keel_fsync_latency_seconds",
        "keel_storage_batch_writes",
        "keel_storage_batch_entries",
        "keel_leader_changes_total",
        "keel_snapshots_taken_total",
        "keel_snapshots_sent_total",
        "keel_snapshots_installed_total",
        "keel_term",
        "keel_commit_index",
        "keel_applied_index",
        "keel_apply_lag_entries",
    ] {
        assert!(
            body.contains(&format!("# TYPE {name} ")),
            "{name} missing from:\n{body}\nstderr:\n{}",
            node.stderr()
        );
    }
    // Latency metrics are real histograms (buckets), not summaries.
    assert!(
        body.contains("# TYPE keel_commit_latency_seconds histogram"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE keel_fsync_latency_seconds histogram"),
        "{body}"
    );
    let node_label = "node=\"1\"";
    let leader_changes = sample(&body, "keel_leader_changes_total", node_label);
    assert!(leader_changes >= Some(1.0), "{body}");
    let proposals_before = sample(&body, "keel_proposals_total", node_label).unwrap_or(0.0);

    const WRITES: usize = 20;
    for i in 0..WRITES {
        set(client_port, &format!("k{i}"), "v");
    }
    assert!(matches!(
        request(client_port, &["RAFT.SNAPSHOT"]).unwrap(),
        Reply::Integer(i) if i > 0
    ));
    let body = eventually("the counters to move", || {
        let body = scrape(metrics_port)?;
        let proposals = sample(&body, "keel_proposals_total", node_label)?;
        let snapshots = sample(&body, "keel_snapshots_taken_total", node_label)?;
        (proposals >= proposals_before + WRITES as f64 && snapshots >= 1.0).then_some(body)
    });
    let fsyncs = sample(&body, "keel_fsync_latency_seconds_count", node_label);
    assert!(fsyncs >= Some(1.0), "no fsync samples:\n{body}");
    let commits = sample(&body, "keel_commit_latency_seconds_count", node_label);
    assert!(
        commits >= Some(WRITES as f64),
        "commit latency samples:\n{body}"
    );
    let le_inf = format!("{node_label},le=\"+Inf\"");
    assert!(
        sample(&body, "keel_fsync_latency_seconds_bucket", &le_inf) >= Some(1.0),
        "{body}"
    );
    let commit_index = sample(&body, "keel_commit_index", node_label).unwrap();
    assert!(commit_index >= WRITES as f64, "{body}");
    assert!(
        sample(&body, "keel_term", node_label) >= Some(1.0),
        "{body}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = TempDir::new("json");
    let (client_port, peer_port) = (free_port(), free_port());
    let mut args = one_node_args(&dir.0, client_port, peer_port);
    args.extend(["--log-format".into(), "json".into()]);
    let mut node = Keel::spawn(&args, &dir.0.join("stderr.log"));
    wait_leader(client_port);
    set(client_port, "a", "1");
    node.terminate();
    assert!(node.wait_exit().success(), "stderr:\n{}", node.stderr());

    let stderr = node.stderr();
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 3, "too few log lines:\n{stderr}");
    for line in &lines {
        assert!(
            line.starts_with('{') && line.ends_with('}'),
            "not a JSON object: {line}"
        );
        assert!(line.contains("\"level\":\""), "no level: {line}");
        assert!(line.contains("\"message\":\""), "no message: {line}");
        assert!(line.contains("\"timestamp\":\""), "no timestamp: {line}");
    }
    // The key events are there: serving, leadership, shutdown.
    assert!(stderr.contains("serving clients"), "{stderr}");
    assert!(stderr.contains("leader"), "{stderr}");
    assert!(stderr.contains("shut down cleanly"), "{stderr}");
}

#[test]
fn config_file_starts_a_node_flags_override_it_and_unknown_keys_fail() {
    let dir = TempDir::new("config");
    let (file_client_port, flag_client_port, peer_port) = (free_port(), free_port(), free_port());
    let config = dir.0.join("keel.toml");
    std::fs::write(
        &config,
        format!(
            "# one node\n\
             id = 1\n\
             data-dir = \"{}\"\n\
             client-addr = \"127.0.0.1:{file_client_port}\"\n\
             initial-cluster = \"1=127.0.0.1:{peer_port}\"\n\
             election-timeout-ms = 300\n\
             log-format = \"json\"\n",
            dir.0.join("node-1").display()
        ),
    )
    .unwrap();
    let mut node = Keel::spawn(
        &[
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            // Overrides the file's client address.
            "--client-addr".into(),
            format!("127.0.0.1:{flag_client_port}"),
        ],
        &dir.0.join("stderr.log"),
    );
    wait_leader(flag_client_port);
    set(flag_client_port, "from-config", "yes");
    assert_eq!(get(flag_client_port, "from-config"), Reply::bulk("yes"));
    assert!(
        TcpStream::connect(("127.0.0.1", file_client_port)).is_err(),
        "the file's client address should have been overridden"
    );
    // The file's log format took effect.
    assert!(
        node.stderr().lines().all(|l| l.starts_with('{')),
        "{}",
        node.stderr()
    );
    node.terminate();
    assert!(node.wait_exit().success(), "stderr:\n{}", node.stderr());

    // An unknown key: a failure that names the key, before anything starts.
    let bad = dir.0.join("bad.toml");
    std::fs::write(&bad, "id = 1\nshard-count = 3\n").unwrap();
    let mut node = Keel::spawn(
        &["serve".into(), "--config".into(), bad.display().to_string()],
        &dir.0.join("bad-stderr.log"),
    );
    let status = node.wait_exit();
    assert!(!status.success(), "an unknown key must fail");
    let stderr = node.stderr();
    assert!(stderr.contains("shard-count"), "{stderr}");
    assert!(stderr.contains("unknown field"), "{stderr}");

    // A missing required setting is named too.
    let empty = dir.0.join("empty.toml");
    std::fs::write(&empty, "client-addr = \"127.0.0.1:1\"\n").unwrap();
    let mut node = Keel::spawn(
        &[
            "serve".into(),
            "--config".into(),
            empty.display().to_string(),
        ],
        &dir.0.join("empty-stderr.log"),
    );
    assert!(!node.wait_exit().success());
    assert!(
        node.stderr().contains("--id is required"),
        "{}",
        node.stderr()
    );
}

#[test]
fn sigterm_exits_zero_and_a_restart_has_every_acknowledged_write() {
    let dir = TempDir::new("sigterm");
    let (client_port, peer_port) = (free_port(), free_port());
    let args = one_node_args(&dir.0, client_port, peer_port);
    let mut node = Keel::spawn(&args, &dir.0.join("stderr.log"));
    wait_leader(client_port);
    const WRITES: usize = 200;
    for i in 0..WRITES {
        set(client_port, &format!("k{i}"), &i.to_string());
    }
    let started = Instant::now();
    node.terminate();
    let status = node.wait_exit();
    assert!(
        status.success(),
        "exit status {status:?}; stderr:\n{}",
        node.stderr()
    );
    // The shutdown bound is 5 s; generous here for a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(
        node.stderr().contains("shut down cleanly"),
        "{}",
        node.stderr()
    );

    let node = Keel::spawn(&args, &dir.0.join("stderr-2.log"));
    wait_leader(client_port);
    for i in 0..WRITES {
        assert_eq!(
            get(client_port, &format!("k{i}")),
            Reply::bulk(i.to_string()),
            "k{i} lost; stderr:\n{}",
            node.stderr()
        );
    }
}

#[test]
#[expect(clippy::too_many_lines)]
fn sigterm_on_a_leader_hands_leadership_over_and_exits_zero() {
    let dir = TempDir::new("handoff");
    let ids = [1u64, 2, 3];
    let client_ports: Vec<u16> = ids.iter().map(|_| free_port()).collect();
    let peer_ports: Vec<u16> = ids.iter().map(|_| free_port()).collect();
    let list = |ports: &[u16]| {
        ids.iter()
            .zip(ports)
            .map(|(id, port)| format!("{id}=127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut nodes: Vec<Keel> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let args = vec![
                "serve".to_string(),
                "--id".into(),
                id.to_string(),
                "--data-dir".into(),
                dir.0.join(format!("node-{id}")).display().to_string(),
                "--client-addr".into(),
                format!("127.0.0.1:{}", client_ports[i]),
                "--peer-addr".into(),
                format!("127.0.0.1:{}", peer_ports[i]),
                "--initial-cluster".into(),
                list(&peer_ports),
                "--client-peers".into(),
                list(&client_ports),
            ];
            Keel::spawn(&args, &dir.0.join(format!("stderr-{id}.log")))
        })
        .collect();
    let leader = eventually("a leader", || {
        client_ports
            .iter()
            .position(|&p| status_field(p, "role").as_deref() == Some("leader"))
    });
    for i in 0..20 {
        set(client_ports[leader], &format!("k{i}"), "v");
    }
    // Every node has applied the writes, so any of them can take over at once.
    eventually("replication", || {
        client_ports
            .iter()
            .all(|&p| {
                status_field(p, "applied_index")
                    .and_then(|a| a.parse::<u64>().ok())
                    .is_some_and(|a| a >= 20)
            })
            .then_some(())
    });

    nodes[leader].terminate();
    let status = nodes[leader].wait_exit();
    let stderr = nodes[leader].stderr();
    assert!(
        status.success(),
        "exit status {status:?}; stderr:\n{stderr}"
    );
    assert!(stderr.contains("handing leadership over"), "{stderr}");

    // The others lead on and hold every write.
    let survivors: Vec<u16> = (0..3)
        .filter(|&i| i != leader)
        .map(|i| client_ports[i])
        .collect();
    let new_leader = eventually("a new leader", || {
        survivors
            .iter()
            .copied()
            .find(|&p| status_field(p, "role").as_deref() == Some("leader"))
    });
    set(new_leader, "after", "1");
    for i in 0..20 {
        assert_eq!(get(new_leader, &format!("k{i}")), Reply::bulk("v"));
    }
}
