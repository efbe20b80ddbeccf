//! Test-only helpers for process-level tests: `keel serve` children on free loopback ports in a
//! temporary directory (both cleaned up on drop, even when the test fails), a Redis client per
//! node (the `redis` crate, sync API), `INFO raft` parsing, and retry loops with generous
//! deadlines (nothing here asserts a latency).

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::{BTreeMap, HashMap};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

pub mod disk;

/// How long any wait may take before the test fails. Generous: debug builds on a shared 2-core
/// machine.
pub const DEADLINE: Duration = Duration::from_secs(30);
/// Socket read/write timeout of test clients.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A loopback port for a server process to bind later, drawn below the kernel's ephemeral range
/// (32768 and up by default) so no outgoing connection can be handed it meanwhile; each test
/// process walks its own sequence (from its id) and checks each port by binding it.
///
/// A port free now may be drawn by another test process before this one's server binds it
/// (test binaries and, under nextest, single tests run as parallel processes): each port drawn
/// is claimed in a file named after it in a directory all test processes share, created only if
/// absent, and holding the claimant's process id. A claim whose process is gone is taken over.
pub fn free_port() -> u16 {
    const FIRST_PORT: u64 = 10_000;
    const PORTS: u64 = 32_768 - FIRST_PORT;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let start = u64::from(std::process::id()).wrapping_mul(7_919) % PORTS;
    loop {
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = (FIRST_PORT + (start + next) % PORTS) as u16;
        if claim_port(port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Claims `port` for this process among the test processes of this machine (see
/// [`free_port`]). False if another live process holds it.
fn claim_port(port: u16) -> bool {
    let dir = std::env::temp_dir().join("keel-test-ports");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(port.to_string());
    let me = std::process::id().to_string();
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => {
                use std::io::Write;
                return file.write_all(me.as_bytes()).is_ok();
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                if holder == me {
                    return true;
                }
                let alive = holder.is_empty() || Path::new("/proc").join(holder.trim()).exists();
                if alive {
                    // Held (or being written) by a live process.
                    return false;
                }
                // Its claimant is gone: the claim is stale; remove it and try once more.
                let _ = std::fs::remove_file(&path);
            }
            Err(_) => return true, // no shared directory: fall back to the bind check alone
        }
    }
    false
}

/// Retries `f` every 50 ms until it returns `Some` or `deadline` passes (then panics naming
/// `what`).
pub fn eventually_within<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        sleep(Duration::from_millis(50));
    }
}

/// Like [`eventually_within`], but gives up with `None` instead of failing the test.
pub fn poll_within<T>(deadline: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(value) = f() {
            return Some(value);
        }
        if start.elapsed() >= deadline {
            return None;
        }
        sleep(Duration::from_millis(50));
    }
}

pub fn eventually<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    eventually_within(what, DEADLINE, f)
}

/// One connection that sends requests and keeps each reply's raw bytes: what a server wrote,
/// to compare byte for byte.
pub struct Raw {
    pub stream: std::net::TcpStream,
    input: Vec<u8>,
}

impl Raw {
    pub fn connect(port: u16) -> Raw {
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        Raw {
            stream,
            input: Vec::new(),
        }
    }

    /// The reply to `line` (arguments split on spaces), as the bytes the server wrote.
    pub fn request(&mut self, line: &str) -> String {
        let args: Vec<&str> = line.split(' ').collect();
        self.request_args(&args)
    }

    /// The reply to the request of `args`, as the bytes the server wrote.
    pub fn request_args(&mut self, args: &[&str]) -> String {
        self.send(args);
        self.read_one(&args.join(" "))
    }

    /// Sends one request of `args` without waiting for its reply.
    pub fn send(&mut self, args: &[&str]) {
        use std::io::Write;
        let mut out = bytes::BytesMut::new();
        keel_resp::encode_request(args, &mut out);
        self.stream.write_all(&out).expect("write");
    }

    /// The next reply, as the bytes the server wrote (`line` names the request in a failure).
    pub fn read_one(&mut self, line: &str) -> String {
        use std::io::Read;
        loop {
            let limits = keel_resp::Limits::default();
            if let Some((_, used)) = keel_resp::parse_reply(&self.input, &limits).expect("RESP") {
                let reply = String::from_utf8_lossy(&self.input[..used]).into_owned();
                self.input.drain(..used);
                return reply;
            }
            let mut buf = [0u8; 4096];
            let n = self.stream.read(&mut buf).expect("read");
            assert!(n > 0, "the server closed the connection after {line}");
            self.input.extend_from_slice(&buf[..n]);
        }
    }
}

/// One request, one reply, over a fresh connection, with keel's own RESP codec (no client
/// library in between: what the bytes on the wire say).
pub fn raw_request(port: u16, args: &[&str]) -> Result<keel_resp::Reply, String> {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .map_err(|e| e.to_string())?;
    let mut out = bytes::BytesMut::new();
    keel_resp::encode_request(args, &mut out);
    stream.write_all(&out).map_err(|e| e.to_string())?;
    let mut input = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let limits = keel_resp::Limits::default();
        if let Some((reply, _)) =
            keel_resp::parse_reply(&input, &limits).map_err(|e| e.to_string())?
        {
            return Ok(reply);
        }
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed".into());
        }
        input.extend_from_slice(&chunk[..n]);
    }
}

/// A numeric field of `INFO <section>` on `port`, waited for until the node answers it.
pub fn info_field(port: u16, section: &str, key: &str) -> u64 {
    eventually(&format!("INFO {section} {key}"), || {
        match raw_request(port, &["INFO", section]).ok()? {
            keel_resp::Reply::Bulk(text) => String::from_utf8_lossy(&text)
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}:")).map(str::to_string))?
                .trim()
                .parse()
                .ok(),
            _ => None,
        }
    })
}

/// Runs `program` (in `dir`, if given) to completion and returns its stdout and stderr; fails
/// the test, showing both, if it cannot start or exits unsuccessfully.
pub fn run_program(program: &str, args: &[&str], dir: Option<&Path>) -> (String, String) {
    let mut command = Command::new(program);
    command.args(args);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let out = command.output().unwrap_or_else(|e| {
        panic!("run {program}: {e} (scripts/test installs the tools tests run)")
    });
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    (stdout, stderr)
}

/// SET over [`raw_request`] until acknowledged (TRYAGAIN while leadership settles is fine;
/// nothing else is).
pub fn raw_set(port: u16, key: &str, value: &str) {
    use keel_resp::Reply;
    eventually("a successful SET", || {
        match raw_request(port, &["SET", key, value]) {
            Ok(Reply::Simple(s)) if s == "OK" => Some(()),
            Ok(Reply::Error(e)) if e.starts_with("TRYAGAIN") => None,
            Ok(other) => panic!("SET {key}: unexpected reply {other:?}"),
            Err(_) => None,
        }
    });
}

/// GET over [`raw_request`], retried while there is no leader.
pub fn raw_get(port: u16, key: &str) -> keel_resp::Reply {
    use keel_resp::Reply;
    eventually("a GET", || match raw_request(port, &["GET", key]) {
        Ok(Reply::Error(e)) if e.starts_with("TRYAGAIN") => None,
        Ok(reply) => Some(reply),
        Err(_) => None,
    })
}

/// A directory under the system temp dir, unique to this process and call, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("keel-{prefix}-{}-{nanos}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One `keel serve` process (or none while stopped). Its stderr goes to `<data dir>.log`, whose
/// tail is printed if the test fails.
pub struct Node {
    pub id: u64,
    pub client_port: u16,
    pub peer_port: u16,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub args: Vec<String>,
    /// The `--requirepass` this node was given, for the test's own clients.
    pub password: Option<String>,
    /// Environment variables the process is started with, beside the test's own.
    pub env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Node {
    pub fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    pub fn peer_addr(&self) -> String {
        format!("127.0.0.1:{}", self.peer_port)
    }

    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "node {} already running", self.id);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start keel serve");
        self.child = Some(child);
    }

    /// Sets `flag`'s value in this node's `keel serve` arguments (replaced, or appended).
    pub fn set_arg(&mut self, flag: &str, value: &str) {
        match self.args.iter().position(|a| a == flag) {
            Some(at) => self.args[at + 1] = value.to_string(),
            None => self.args.extend([flag.to_string(), value.to_string()]),
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Panics if the process exited on its own.
    pub fn assert_alive(&mut self) {
        let id = self.id;
        let child = self.child.as_mut().expect("node was started");
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "node {id} exited ({status}); log tail:\n{}",
                log_tail(&self.log)
            );
        }
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits (at most `deadline`) for the process to exit on its own; `None` if it is still
    /// running then. An exited process is no longer this node's.
    pub fn wait_exit(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut().expect("node was started");
        let status = poll_within(deadline, || child.try_wait().unwrap())?;
        self.child = None;
        Some(status)
    }

    /// kill -9, and wait for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends a signal by name (`STOP`, `CONT`) with kill(1).
    pub fn signal(&self, name: &str) {
        let pid = self.child.as_ref().expect("node running").id();
        let status = Command::new("kill")
            .args([format!("-{name}"), pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} {pid} failed");
    }

    pub fn client(&self) -> redis::Client {
        let auth = self
            .password
            .as_ref()
            .map_or(String::new(), |p| format!(":{p}@"));
        redis::Client::open(format!("redis://{auth}127.0.0.1:{}/", self.client_port)).unwrap()
    }

    /// A connection with read and write timeouts.
    pub fn connect(&self) -> redis::RedisResult<redis::Connection> {
        let con = self.client().get_connection_with_timeout(IO_TIMEOUT)?;
        con.set_read_timeout(Some(IO_TIMEOUT))?;
        con.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(con)
    }

    /// `INFO raft` as a map, or None if the node does not answer.
    pub fn info(&self) -> Option<HashMap<String, String>> {
        let mut con = self.connect().ok()?;
        let text: String = redis::cmd("INFO").arg("raft").query(&mut con).ok()?;
        Some(
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect(),
        )
    }

    pub fn info_u64(&self, key: &str) -> Option<u64> {
        self.info()?.get(key)?.parse().ok()
    }

    /// (applied_index, state_digest), read from one INFO reply.
    pub fn applied_and_digest(&self) -> Option<(u64, String)> {
        let info = self.info()?;
        Some((
            info.get("applied_index")?.parse().ok()?,
            info.get("state_digest")?.clone(),
        ))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.child.is_some() && std::thread::panicking() {
            eprintln!("--- node {} log tail ---\n{}", self.id, log_tail(&self.log));
        }
        self.kill();
    }
}

pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Nodes of one cluster: `voters` form the first configuration; `spares` get their ports and
/// arguments but are not started (they join later with `RAFT.MEMBER ADD`). Nodes get only the
/// documented flags (id, data dir, client and peer address, initial cluster): a follower learns
/// the leader's client address from the cluster itself to forward to it.
pub struct Cluster {
    pub nodes: Vec<Node>,
    // Dropped after the nodes (fields drop in declaration order): the processes are gone before
    // their directory is removed.
    pub dir: TempDir,
}

impl Cluster {
    pub fn new(name: &str, voters: &[u64], spares: &[u64], extra_args: &[&str]) -> Cluster {
        let mut cluster = Cluster::stopped(name, voters, spares, extra_args);
        for node in cluster.nodes.iter_mut().filter(|n| voters.contains(&n.id)) {
            node.spawn();
        }
        cluster
    }

    /// Like [`Cluster::new`], but no node is started: a test may change a node's arguments
    /// (see [`Node::set_arg`]) before it spawns it.
    pub fn stopped(name: &str, voters: &[u64], spares: &[u64], extra_args: &[&str]) -> Cluster {
        let dir = TempDir::new(name);
        let ids: Vec<u64> = voters.iter().chain(spares).copied().collect();
        let ports: BTreeMap<u64, (u16, u16)> = ids
            .iter()
            .map(|&id| (id, (free_port(), free_port())))
            .collect();
        let list = |ids: &[u64], pick: fn(&(u16, u16)) -> u16| {
            ids.iter()
                .map(|id| format!("{id}=127.0.0.1:{}", pick(&ports[id])))
                .collect::<Vec<_>>()
                .join(",")
        };
        // A joining node is given the existing members' peer addresses as its
        // --initial-cluster: that is the only way it learns where they are. Since its data dir is
        // empty it also bootstraps their first configuration, in which it is not a member, so
        // it never campaigns; the leader then adds it.
        let initial_cluster = list(voters, |p| p.1);
        let nodes = ids
            .iter()
            .map(|&id| {
                let (client_port, peer_port) = ports[&id];
                let data_dir = dir.path().join(format!("node-{id}"));
                let mut args: Vec<String> = vec![
                    "serve".into(),
                    "--id".into(),
                    id.to_string(),
                    "--data-dir".into(),
                    data_dir.display().to_string(),
                    "--client-addr".into(),
                    format!("127.0.0.1:{client_port}"),
                    "--peer-addr".into(),
                    format!("127.0.0.1:{peer_port}"),
                    "--initial-cluster".into(),
                    initial_cluster.clone(),
                ];
                args.extend(extra_args.iter().map(|s| s.to_string()));
                Node {
                    id,
                    client_port,
                    peer_port,
                    log: dir.path().join(format!("node-{id}.log")),
                    data_dir,
                    args,
                    password: None,
                    env: Vec::new(),
                    child: None,
                }
            })
            .collect();
        Cluster { nodes, dir }
    }

    pub fn node(&self, id: u64) -> &Node {
        self.nodes.iter().find(|n| n.id == id).expect("known node")
    }

    pub fn node_mut(&mut self, id: u64) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .expect("known node")
    }

    pub fn running(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.is_running())
    }

    /// The id of a running node that reports itself leader, once every running node in `among`
    /// (all running nodes if empty) names it as leader.
    pub fn leader_among(&self, among: &[u64]) -> u64 {
        eventually("an agreed leader", || {
            let views: Vec<(u64, HashMap<String, String>)> = self
                .running()
                .filter(|n| among.is_empty() || among.contains(&n.id))
                .map(|n| Some((n.id, n.info()?)))
                .collect::<Option<_>>()?;
            let leader = views
                .iter()
                .find(|(_, info)| info.get("role").map(String::as_str) == Some("leader"))?
                .0;
            views
                .iter()
                .all(|(_, info)| info.get("leader_id") == Some(&leader.to_string()))
                .then_some(leader)
        })
    }

    pub fn leader(&self) -> u64 {
        self.leader_among(&[])
    }

    /// Every node in `ids` at the same applied index (at least `min_applied`) with the same
    /// digest.
    pub fn converged(&self, ids: &[u64], min_applied: u64) -> (u64, String) {
        eventually_within("convergence", Duration::from_secs(60), || {
            let views: Vec<(u64, String)> = ids
                .iter()
                .map(|&id| self.node(id).applied_and_digest())
                .collect::<Option<_>>()?;
            let first = views[0].clone();
            (first.0 >= min_applied && views.iter().all(|v| *v == first)).then_some(first)
        })
    }
}

/// Whether a Redis error says "try again" (no leader yet, or the outcome is unknown), or the
/// connection failed: both mean retry.
pub fn retryable(e: &redis::RedisError) -> bool {
    e.code() == Some("TRYAGAIN")
        || e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
}

/// Runs `cmd` against `node` until it succeeds; a retryable error (see [`retryable`]) retries on
/// a new connection, any other error fails the test.
pub fn query<T: redis::FromRedisValue>(node: &Node, cmd: &redis::Cmd) -> T {
    let mut last = String::new();
    eventually_within(&format!("{cmd:?} on node {}", node.id), DEADLINE, || {
        let result = node.connect().and_then(|mut con| cmd.query::<T>(&mut con));
        match result {
            Ok(value) => Some(value),
            Err(e) if retryable(&e) => {
                last = e.to_string();
                None
            }
            Err(e) => panic!("{cmd:?} on node {}: {e} (last retry: {last})", node.id),
        }
    })
}

pub fn set(node: &Node, key: &str, value: &str) {
    let reply: String = query(node, redis::cmd("SET").arg(key).arg(value));
    assert_eq!(reply, "OK", "SET {key} on node {}", node.id);
}

pub fn get(node: &Node, key: &str) -> Option<String> {
    query(node, redis::cmd("GET").arg(key))
}

/// Runs an admin command until it answers OK. Besides the usual retries, "a membership change is
/// in progress" is retried: the previous change may still be leaving its joint configuration.
pub fn admin(node: &Node, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let mut last = String::new();
    eventually_within(
        &format!("{args:?} on node {}", node.id),
        DEADLINE,
        || match node
            .connect()
            .and_then(|mut con| cmd.query::<String>(&mut con))
        {
            Ok(reply) if reply == "OK" => Some(()),
            Ok(other) => panic!("{args:?}: unexpected reply {other:?}"),
            Err(e) if retryable(&e) || e.to_string().contains("in progress") => {
                last = e.to_string();
                None
            }
            Err(e) => panic!("{args:?} on node {}: {e} (last retry: {last})", node.id),
        },
    )
}
