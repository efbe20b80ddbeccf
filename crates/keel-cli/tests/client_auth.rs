//! Clients authenticate as with Redis (`--requirepass`): real clients with their own password
//! options, against the leader and the followers (which forward on their own authenticated link),
//! and keel's admin commands with `--password` or `REDISCLI_AUTH`.

mod process;

use std::process::Command;

use process::{get, raw_request, set, Cluster};

const PASSWORD: &str = "correct horse battery staple";

fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("{program} is needed (scripts/test installs it): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
#[expect(clippy::too_many_lines)]
fn clients_authenticate_on_every_node_and_followers_forward_authenticated() {
    let mut cluster = Cluster::new("auth", &[1, 2, 3], &[], &["--requirepass", PASSWORD]);
    for node in &mut cluster.nodes {
        node.password = Some(PASSWORD.to_string());
    }
    let leader = cluster.leader();
    let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|&id| id != leader).collect();

    // Without AUTH nothing runs, on any node; a wrong password is refused.
    for id in [1, 2, 3] {
        let port = cluster.node(id).client_port;
        assert_eq!(
            raw_request(port, &["GET", "k"]).unwrap(),
            keel_resp::Reply::error("NOAUTH Authentication required.")
        );
        assert!(matches!(
            raw_request(port, &["AUTH", "wrong"]).unwrap(),
            keel_resp::Reply::Error(e) if e.starts_with("WRONGPASS")
        ));
    }

    // The Rust client with the password in its URL: writes through a follower are forwarded.
    set(cluster.node(followers[0]), "rust", "1");
    assert_eq!(
        get(cluster.node(followers[1]), "rust").as_deref(),
        Some("1")
    );

    // redis-cli -a, against a follower and the leader.
    for id in [followers[0], leader] {
        let port = cluster.node(id).client_port.to_string();
        let (ok, out) = run(
            "redis-cli",
            &[
                "-p",
                &port,
                "-a",
                PASSWORD,
                "--no-auth-warning",
                "SET",
                "cli",
                &port,
            ],
            &[],
        );
        assert!(ok && out.trim() == "OK", "redis-cli -a on node {id}: {out}");
        let (_, out) = run("redis-cli", &["-p", &port, "GET", "cli"], &[]);
        assert!(
            out.contains("NOAUTH"),
            "redis-cli without -a on node {id}: {out}"
        );
    }

    // redis-benchmark -a.
    let port = cluster.node(leader).client_port.to_string();
    let (ok, out) = run(
        "redis-benchmark",
        &[
            "-p", &port, "-a", PASSWORD, "-n", "200", "-c", "4", "-t", "set", "-q",
        ],
        &[],
    );
    assert!(ok && out.contains("SET"), "redis-benchmark -a: {out}");

    // redis-py with password=, through a follower.
    let port = cluster.node(followers[1]).client_port.to_string();
    let script = format!(
        "import redis\nr = redis.Redis(port={port}, password={PASSWORD:?})\nr.set('py', 'yes')\n\
         print(r.get('py').decode())"
    );
    let (ok, out) = run("python3", &["-c", &script], &[]);
    assert!(ok && out.trim() == "yes", "redis-py: {out}");

    // keel's admin commands: --password, or REDISCLI_AUTH as redis-cli reads it.
    let keel = env!("CARGO_BIN_EXE_keel");
    let addrs: Vec<String> = [1, 2, 3]
        .iter()
        .map(|&id| cluster.node(id).client_addr())
        .collect();
    let addrs = addrs.join(",");
    let (ok, out) = run(
        keel,
        &["status", "--addr", &addrs, "--password", PASSWORD],
        &[],
    );
    assert!(
        ok && out.contains("leader"),
        "keel status --password: {out}"
    );
    let (ok, out) = run(
        keel,
        &["status", "--addr", &addrs],
        &[("REDISCLI_AUTH", PASSWORD)],
    );
    assert!(
        ok && out.contains("leader"),
        "keel status with REDISCLI_AUTH: {out}"
    );
    let (ok, out) = run(
        keel,
        &["status", "--addr", &addrs],
        &[("REDISCLI_AUTH", "")],
    );
    assert!(
        !ok || out.contains("NOAUTH"),
        "keel status without the password: {out}"
    );
    let leader_addr = cluster.node(leader).client_addr();
    let (ok, out) = run(
        keel,
        &[
            "transfer",
            &followers[0].to_string(),
            "--addr",
            &leader_addr,
            "--password",
            PASSWORD,
        ],
        &[],
    );
    assert!(ok, "keel transfer --password: {out}");
    assert_eq!(get(cluster.node(leader), "py").as_deref(), Some("yes"));
}
