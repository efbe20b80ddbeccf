//! A replicated key-value store with an HTTP API: one node per process.
//!
//! Every node is started with the same `--nodes` list, each node's id, its peer address (Raft
//! traffic) and its HTTP address; the ids of that list are the voters of a new cluster.
//!
//! ```sh
//! nodes=1=127.0.0.1:9081/127.0.0.1:8081,2=127.0.0.1:9082/127.0.0.1:8082,3=127.0.0.1:9083/127.0.0.1:8083
//! cargo run -p keel --example http_kv -- --id 1 --nodes $nodes --data-dir data/kv-1
//! ```
//!
//! `PUT /kv/{key}` (the body is the value), `GET /kv/{key}` (a linearizable read) and
//! `DELETE /kv/{key}` are served by the leader; a follower redirects them there (307), and
//! answers 503 while it knows no leader. `GET /status` shows the node's role, term and leader.
//! A key over 1 KiB or a value over 1 MiB is refused (413); a request whose outcome is unknown
//! (it timed out, or leadership changed) answers 504. Ctrl-C stops the node cleanly.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use keel::{
    ApplyError, ClientError, Handle, LogId, Node, NodeConfig, NodeId, RestoreError, SnapshotWriter,
    StateMachine,
};

/// Shared by every node of the cluster: nodes of another cluster are refused at their handshake.
const CLUSTER_ID: u64 = 0x6874_7470_6b76;
const KEY_BYTES_MAX: usize = 1 << 10;
const VALUE_BYTES_MAX: usize = 1 << 20;

/// The first byte of every entry and snapshot, so that a later build still reads what this one
/// wrote (the log outlives the binary).
const FORMAT_VERSION: u8 = 1;
const PUT: u8 = 1;
const DELETE: u8 = 2;

#[derive(Default)]
struct KvStore(BTreeMap<String, Bytes>);

/// An entry: `[version, PUT or DELETE, key length (u32 LE), key, value]`.
fn encode(op: u8, key: &str, value: &[u8]) -> Bytes {
    let mut entry = Vec::with_capacity(6 + key.len() + value.len());
    entry.extend_from_slice(&[FORMAT_VERSION, op]);
    entry.extend_from_slice(&(key.len() as u32).to_le_bytes());
    entry.extend_from_slice(key.as_bytes());
    entry.extend_from_slice(value);
    entry.into()
}

fn decode(entry: &Bytes) -> Option<(u8, String, Bytes)> {
    let (header, _) = entry.split_first_chunk::<6>()?;
    let [version, op, key_len @ ..] = *header;
    let key_end = 6 + u32::from_le_bytes(key_len) as usize;
    let key = String::from_utf8(entry.get(6..key_end)?.to_vec()).ok()?;
    (version == FORMAT_VERSION).then(|| (op, key, entry.slice(key_end..)))
}

impl StateMachine for KvStore {
    /// A put answers nothing; a delete answers `[1]` if the key was there, `[0]` if not.
    fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, ApplyError> {
        match decode(data) {
            Some((PUT, key, value)) => {
                self.0.insert(key, value);
                Ok(Bytes::new())
            }
            Some((DELETE, key, _)) => {
                Ok(Bytes::from(vec![u8::from(self.0.remove(&key).is_some())]))
            }
            // Refused alike on every node; the state is unchanged.
            _ => Err(ApplyError::Refused(Bytes::from_static(b"not a kv entry"))),
        }
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        // Cheap: the clone shares every value's bytes.
        Box::new(KvSnapshot(self.0.clone()))
    }

    fn restore(&mut self, _last: LogId, data: &mut dyn Read) -> Result<(), RestoreError> {
        let mut header = [0u8; 9];
        data.read_exact(&mut header)?;
        let [version, pairs @ ..] = header;
        if version != FORMAT_VERSION {
            return Err(RestoreError(format!("snapshot format {version} unknown")));
        }
        let mut map = BTreeMap::new();
        for _ in 0..u64::from_le_bytes(pairs) {
            let key = String::from_utf8(read_field(data, KEY_BYTES_MAX)?)
                .map_err(|_| RestoreError("a key is not UTF-8".into()))?;
            map.insert(key, Bytes::from(read_field(data, VALUE_BYTES_MAX)?));
        }
        self.0 = map;
        Ok(())
    }
}

/// A snapshot: `[version, pairs (u64 LE)]`, then each pair in key order (the same bytes on
/// every node): `[key length (u32 LE), key, value length (u32 LE), value]`.
struct KvSnapshot(BTreeMap<String, Bytes>);

impl SnapshotWriter for KvSnapshot {
    fn write_to(self: Box<Self>, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(&[FORMAT_VERSION])?;
        out.write_all(&(self.0.len() as u64).to_le_bytes())?;
        for (key, value) in &self.0 {
            for field in [key.as_bytes(), value] {
                out.write_all(&(field.len() as u32).to_le_bytes())?;
                out.write_all(field)?;
            }
        }
        Ok(())
    }
}

/// A length-prefixed field, refused past `max` bytes rather than allocated.
fn read_field(data: &mut dyn Read, max: usize) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    data.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(io::Error::other(format!("a field of {len} bytes")));
    }
    let mut field = vec![0u8; len];
    data.read_exact(&mut field)?;
    Ok(field)
}

#[derive(Clone)]
struct App {
    handle: Handle<KvStore>,
    /// Every node's HTTP address, to send clients to the leader.
    http_addrs: Arc<Addrs>,
}

impl App {
    /// Proposes a put or a delete of `key`; a key over its bound is refused before proposing.
    /// (A value over its bound never gets here: the body limit answers 413 while reading it.)
    async fn propose(&self, op: u8, key: &str, value: &[u8], uri: &Uri) -> Result<Bytes, Response> {
        if key.len() > KEY_BYTES_MAX {
            return Err((StatusCode::PAYLOAD_TOO_LARGE, "a key is at most 1 KiB\n").into_response());
        }
        let result = self.handle.propose(encode(op, key, value)).await;
        result.map_err(|error| self.refusal(error, uri))
    }

    /// The answer to a request this node did not carry out.
    fn refusal(&self, error: ClientError, uri: &Uri) -> Response {
        use StatusCode as S;
        let leader = match error {
            ClientError::NotLeader { leader, .. } => leader,
            ClientError::Unknown => {
                let why = "timed out: the outcome is unknown (a write may have been applied)\n";
                return (S::GATEWAY_TIMEOUT, why).into_response();
            }
            ClientError::Busy(_) | ClientError::NotProposed | ClientError::Shutdown => {
                return (S::SERVICE_UNAVAILABLE, format!("{error}\n")).into_response();
            }
            _ => return (S::INTERNAL_SERVER_ERROR, format!("{error}\n")).into_response(),
        };
        match leader.and_then(|id| self.http_addrs.get(&id)) {
            Some(addr) => {
                let location = format!("http://{addr}{uri}");
                (S::TEMPORARY_REDIRECT, [(header::LOCATION, location)]).into_response()
            }
            None => (S::SERVICE_UNAVAILABLE, "no leader known: retry shortly\n").into_response(),
        }
    }
}

async fn put(
    State(app): State<App>,
    Path(key): Path<String>,
    uri: Uri,
    value: Bytes,
) -> Result<StatusCode, Response> {
    app.propose(PUT, &key, &value, &uri).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn get_value(
    State(app): State<App>,
    Path(key): Path<String>,
    uri: Uri,
) -> Result<Bytes, Response> {
    let value = app.handle.read(move |kv: &KvStore| kv.0.get(&key).cloned());
    let value = value.await.map_err(|error| app.refusal(error, &uri))?;
    value.ok_or(StatusCode::NOT_FOUND.into_response())
}

async fn delete(
    State(app): State<App>,
    Path(key): Path<String>,
    uri: Uri,
) -> Result<StatusCode, Response> {
    let existed = app.propose(DELETE, &key, b"", &uri).await?;
    Ok(match existed[..] {
        [1] => StatusCode::NO_CONTENT,
        _ => StatusCode::NOT_FOUND,
    })
}

/// Answered from the node's watch of its role, term and leader: quick, even without a leader.
async fn status(State(app): State<App>) -> String {
    let view = app.handle.watch().borrow().clone();
    let leader = view
        .leader
        .and_then(|id| Some((id, app.http_addrs.get(&id)?)));
    let leader = match leader {
        Some((id, addr)) => format!("{id} at http://{addr}"),
        None => "none known".into(),
    };
    let role = format!("{:?}", view.role).to_lowercase();
    format!("role: {role}\nterm: {}\nleader: {leader}\n", view.term)
}

type Addrs = BTreeMap<NodeId, SocketAddr>;

struct Args {
    id: NodeId,
    /// Every node's address for Raft traffic.
    peers: Addrs,
    /// Every node's HTTP address.
    http_addrs: Addrs,
    data_dir: PathBuf,
}

const USAGE: &str = "usage: http_kv --id ID --nodes ID=PEER_ADDR/HTTP_ADDR,... --data-dir DIR";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut id, mut nodes, mut data_dir) = (None, None, None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--id" => id = Some(value.parse().map_err(|_| "--id takes a number")?),
            "--nodes" => nodes = Some(parse_nodes(&value).ok_or("--nodes: see the usage")?),
            "--data-dir" => data_dir = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let (Some(id), Some((peers, http_addrs)), Some(data_dir)) = (id, nodes, data_dir) else {
        return Err("--id, --nodes and --data-dir are required".into());
    };
    if !peers.contains_key(&id) {
        return Err(format!("node {id} is not in --nodes"));
    }
    Ok(Args {
        id,
        peers,
        http_addrs,
        data_dir,
    })
}

/// `ID=PEER_ADDR/HTTP_ADDR,...`: the peer addresses and the HTTP addresses.
fn parse_nodes(list: &str) -> Option<(Addrs, Addrs)> {
    let (mut peers, mut http_addrs) = (BTreeMap::new(), BTreeMap::new());
    for node in list.split(',') {
        let (id, addrs) = node.split_once('=')?;
        let (peer, http) = addrs.split_once('/')?;
        let id: NodeId = id.parse().ok()?;
        peers.insert(id, peer.parse().ok()?);
        http_addrs.insert(id, http.parse().ok()?);
    }
    Some((peers, http_addrs))
}

/// Runs the node and its HTTP server until Ctrl-C.
async fn serve(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = NodeConfig::new(args.id, CLUSTER_ID, &args.data_dir);
    config.peer_listen_addr = args.peers[&args.id];
    // Used only on an empty data directory: a restarted node resumes its cluster.
    config.initial_members = args.peers.keys().copied().collect();
    config.peers = args.peers;
    let node = Node::start(config, KvStore::default()).await?;
    // A node that cannot go on (its disk failed) ends the process, for a supervisor to restart.
    keel::exit_on_failure(&node);

    let http_addr = args.http_addrs[&args.id];
    let app = App {
        handle: node.handle(),
        http_addrs: Arc::new(args.http_addrs),
    };
    let router = Router::new()
        .route("/kv/{key}", get(get_value).put(put).delete(delete))
        .route("/status", get(status))
        .layer(DefaultBodyLimit::max(VALUE_BYTES_MAX))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(http_addr).await?;
    eprintln!("node {}: serving HTTP on {http_addr}", args.id);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    node.shutdown().await;
    eprintln!("node {}: stopped", args.id);
    Ok(())
}

#[tokio::main]
async fn main() {
    let args = parse_args(std::env::args().skip(1)).unwrap_or_else(|error| {
        eprintln!("{error}\n{USAGE}");
        std::process::exit(2);
    });
    if let Err(error) = serve(args).await {
        eprintln!("http_kv: {error}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use keel::{LogId, NodeId, StateMachine};

    use super::{encode, parse_args, serve, KvStore, DELETE, KEY_BYTES_MAX, PUT, VALUE_BYTES_MAX};

    #[test]
    fn a_snapshot_is_the_pairs_in_key_order_and_restores_the_store() {
        let mut store = KvStore::default();
        let entries = [
            encode(PUT, "b", b"2"),
            encode(PUT, "a", b"1"),
            encode(DELETE, "b", b""),
        ];
        for (index, entry) in (1..).zip(&entries) {
            store.apply(LogId::new(1, index), entry).expect("applied");
        }
        assert!(store
            .apply(LogId::new(1, 4), &Bytes::from_static(b"junk"))
            .is_err());
        let mut snapshot = Vec::new();
        store.snapshot_view().write_to(&mut snapshot).unwrap();
        let pairs = 1u64.to_le_bytes();
        let expected = [&[1][..], &pairs, &[1, 0, 0, 0, b'a', 1, 0, 0, 0, b'1']].concat();
        assert_eq!(snapshot, expected);
        let mut restored = KvStore::default();
        restored
            .restore(LogId::new(1, 3), &mut &snapshot[..])
            .expect("restored");
        assert_eq!(restored.0, store.0);
    }

    /// Makes `node_process` run a node: its command-line arguments, one a line.
    const NODE_ARGS: &str = "HTTP_KV_TEST_NODE_ARGS";

    /// One node of `three_processes_keep_every_acknowledged_write`, in a process of its own
    /// (this test binary, started again with `NODE_ARGS`) until it is killed.
    #[test]
    #[ignore = "a node process, started by three_processes_keep_every_acknowledged_write"]
    fn node_process() {
        let Ok(args) = std::env::var(NODE_ARGS) else {
            return;
        };
        let args = parse_args(args.lines().map(String::from)).expect("valid arguments");
        // Ends with the test that started it, however that ends: its end closes our stdin.
        std::thread::spawn(|| {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            std::process::exit(0);
        });
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(serve(args)).expect("the node runs");
    }

    /// Three node processes; every one still running is killed when this is dropped, and their
    /// directory removed unless the test failed (it keeps their logs).
    struct Cluster {
        dir: PathBuf,
        /// The `--nodes` argument.
        nodes: String,
        http_addrs: BTreeMap<NodeId, String>,
        processes: BTreeMap<NodeId, Child>,
    }

    impl Cluster {
        fn new() -> Cluster {
            let dir = std::env::temp_dir().join(format!("keel-http-kv-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            // Ports the system hands out, held until all six are drawn (so they differ), then
            // released for the nodes to bind.
            let mut held = Vec::new();
            let mut free_addr = || {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                held.push(listener);
                addr
            };
            let (mut nodes, mut http_addrs) = (Vec::new(), BTreeMap::new());
            for id in 1..=3 {
                let (peer, http) = (free_addr(), free_addr());
                nodes.push(format!("{id}={peer}/{http}"));
                http_addrs.insert(id, http.to_string());
            }
            let nodes = nodes.join(",");
            Cluster {
                dir,
                nodes,
                http_addrs,
                processes: BTreeMap::new(),
            }
        }

        fn start(&mut self, id: NodeId) {
            let data_dir = self.dir.join(format!("node-{id}"));
            let args = format!(
                "--id\n{id}\n--nodes\n{}\n--data-dir\n{}",
                self.nodes,
                data_dir.display()
            );
            let log_path = self.dir.join(format!("node-{id}.log"));
            let log = std::fs::File::options()
                .create(true)
                .append(true)
                .open(log_path);
            let process = Command::new(std::env::current_exe().unwrap())
                .args(["tests::node_process", "--exact", "--ignored", "--nocapture"])
                .env(NODE_ARGS, args)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(log.unwrap())
                .spawn()
                .unwrap();
            self.processes.insert(id, process);
        }

        /// SIGKILL: the node gets no chance to tidy up.
        fn kill(&mut self, id: NodeId) {
            let mut process = self.processes.remove(&id).expect("running");
            process.kill().unwrap();
            process.wait().unwrap();
        }

        /// The first node of `among` whose status shows `wanted`, once one does.
        fn await_status(&self, among: &[NodeId], wanted: &str) -> NodeId {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                for &id in among {
                    let status = request(&self.http_addrs[&id], "GET", "/status", "");
                    if status.is_ok_and(|reply| reply.body.contains(wanted)) {
                        return id;
                    }
                }
                assert!(Instant::now() < deadline, "no {wanted:?} among {among:?}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }

        /// A request to node `id`, as `curl -L` sends it: following redirects to the leader, and
        /// asking again while no leader is known (503).
        fn call(&self, id: NodeId, method: &str, path: &str, body: &str) -> Reply {
            let deadline = Instant::now() + Duration::from_secs(30);
            let (mut addr, mut path) = (self.http_addrs[&id].clone(), path.to_string());
            loop {
                let reply = request(&addr, method, &path, body).expect("the node answers");
                match reply.status {
                    307 => {
                        let location = reply.location.expect("a redirect says where");
                        let url = location.strip_prefix("http://").expect("an http URL");
                        let (host, rest) = url.split_at(url.find('/').expect("a path"));
                        (addr, path) = (host.to_string(), rest.to_string());
                    }
                    503 if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    _ => return reply,
                }
            }
        }

        fn put(&self, id: NodeId, key: &str, value: &str) -> u16 {
            self.call(id, "PUT", &format!("/kv/{key}"), value).status
        }

        fn delete(&self, id: NodeId, key: &str) -> u16 {
            self.call(id, "DELETE", &format!("/kv/{key}"), "").status
        }

        /// Asserts what node `id` answers for each key: its value, or 404 for `None`.
        fn assert_values(&self, id: NodeId, expected: &BTreeMap<String, Option<String>>) {
            for (key, value) in expected {
                let reply = self.call(id, "GET", &format!("/kv/{key}"), "");
                let status = if value.is_some() { 200 } else { 404 };
                assert_eq!(reply.status, status, "GET {key} at node {id}");
                let value = value.as_deref().unwrap_or_default();
                assert!(reply.body == value, "GET {key} at node {id}: another value");
            }
        }
    }

    impl Drop for Cluster {
        fn drop(&mut self) {
            for process in self.processes.values_mut() {
                let _ = process.kill();
                let _ = process.wait();
            }
            if std::thread::panicking() {
                eprintln!("the nodes' logs are in {}", self.dir.display());
            } else {
                let _ = std::fs::remove_dir_all(&self.dir);
            }
        }
    }

    struct Reply {
        status: u16,
        location: Option<String>,
        body: String,
    }

    /// One HTTP/1.1 request on a connection of its own.
    fn request(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<Reply> {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let length = body.len();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes())?;
        stream.write_all(body.as_bytes())?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let (head, body) = response.split_once("\r\n\r\n").expect("a response");
        let status = head[9..12].parse().expect("a status code");
        let location = head
            .lines()
            .find_map(|line| line.strip_prefix("location: "));
        let location = location.map(String::from);
        Ok(Reply {
            status,
            location,
            body: body.to_string(),
        })
    }

    #[test]
    fn three_processes_keep_every_acknowledged_write() {
        let mut cluster = Cluster::new();
        for id in 1..=3 {
            cluster.start(id);
        }
        let first_leader = cluster.await_status(&[1, 2, 3], "role: leader");
        let follower = (1..=3).find(|&id| id != first_leader).unwrap();

        // A follower sends clients to the leader.
        let redirect = request(&cluster.http_addrs[&follower], "PUT", "/kv/k0", "v0").unwrap();
        let leader_url = format!("http://{}/kv/k0", cluster.http_addrs[&first_leader]);
        assert_eq!(
            (redirect.status, redirect.location),
            (307, Some(leader_url))
        );

        let mut expected = BTreeMap::new();
        for i in 0..10 {
            let (key, value) = (format!("k{i}"), format!("v{i}"));
            assert_eq!(cluster.put(first_leader, &key, &value), 204);
            expected.insert(key, Some(value));
        }
        assert_eq!(cluster.delete(follower, "k0"), 204);
        assert_eq!(cluster.delete(follower, "k0"), 404);
        expected.insert("k0".into(), None);
        let largest = "v".repeat(VALUE_BYTES_MAX);
        assert_eq!(cluster.put(follower, "largest", &largest), 204);
        expected.insert("largest".into(), Some(largest));
        for id in 1..=3 {
            cluster.assert_values(id, &expected);
        }

        // Too large: refused before anything is proposed.
        let long_key = "k".repeat(KEY_BYTES_MAX + 1);
        assert_eq!(cluster.put(first_leader, &long_key, "v"), 413);
        let too_large = "v".repeat(VALUE_BYTES_MAX + 1);
        assert_eq!(cluster.put(first_leader, "k1", &too_large), 413);

        // The leader dies: the two others elect one of them, which has every acknowledged write.
        cluster.kill(first_leader);
        let survivors: Vec<NodeId> = (1..=3).filter(|&id| id != first_leader).collect();
        let leader = cluster.await_status(&survivors, "role: leader");
        assert_eq!(cluster.put(leader, "after", "failover"), 204);
        expected.insert("after".into(), Some("failover".into()));
        for &id in &survivors {
            cluster.assert_values(id, &expected);
        }

        // The old leader restarts on its data directory. With the third node gone, a write
        // commits only once the restarted node holds the whole log: it caught up.
        cluster.start(first_leader);
        cluster.await_status(&[first_leader], &format!("leader: {leader} at"));
        let third = survivors.into_iter().find(|&id| id != leader).unwrap();
        cluster.kill(third);
        assert_eq!(cluster.put(first_leader, "last", "caught up"), 204);
        expected.insert("last".into(), Some("caught up".into()));
        cluster.assert_values(first_leader, &expected);
    }
}
