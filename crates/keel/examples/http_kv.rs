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
//! `DELETE /kv/{key}` are served by the leader; a follower redirects them there (307). `GET
//! /status` shows the node's role, term, leader and applied index. Ctrl-C stops the node cleanly.

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
    ApplyError, ClientError, Handle, Index, Node, NodeConfig, NodeId, RestoreError, SnapshotWriter,
    StateMachine,
};

/// Nodes of another cluster are refused at their handshake.
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
    fn apply(&mut self, _index: Index, data: &Bytes) -> Result<Bytes, ApplyError> {
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

    fn restore(&mut self, data: &mut dyn Read) -> Result<(), RestoreError> {
        let mut header = [0u8; 9];
        data.read_exact(&mut header)?;
        if header[0] != FORMAT_VERSION {
            return Err(RestoreError(format!(
                "snapshot format {} unknown",
                header[0]
            )));
        }
        let mut map = BTreeMap::new();
        for _ in 0..u64::from_le_bytes(header[1..].try_into().expect("8 bytes")) {
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
    http_addrs: Arc<BTreeMap<NodeId, SocketAddr>>,
}

impl App {
    async fn propose(&self, entry: Bytes, uri: &Uri) -> Result<Bytes, Response> {
        self.handle
            .propose(entry)
            .await
            .map_err(|e| self.refusal(e, uri))
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

fn key_too_long(key: &str) -> Result<(), Response> {
    match key.len() {
        0..=KEY_BYTES_MAX => Ok(()),
        _ => Err((StatusCode::PAYLOAD_TOO_LARGE, "a key is at most 1 KiB\n").into_response()),
    }
}

async fn put(State(app): State<App>, Path(key): Path<String>, uri: Uri, value: Bytes) -> Response {
    // Values over the bound never get here: the body limit answers 413 while reading them.
    let written = async {
        key_too_long(&key)?;
        app.propose(encode(PUT, &key, &value), &uri).await
    };
    match written.await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(response) => response,
    }
}

async fn get_value(State(app): State<App>, Path(key): Path<String>, uri: Uri) -> Response {
    match app
        .handle
        .read(move |kv: &KvStore| kv.0.get(&key).cloned())
        .await
    {
        Ok(Some(value)) => value.into_response(),
        Ok(None) => StatusCode::NOT_FOUND.into_response(),
        Err(error) => app.refusal(error, &uri),
    }
}

async fn delete(State(app): State<App>, Path(key): Path<String>, uri: Uri) -> Response {
    let deleted = async {
        key_too_long(&key)?;
        app.propose(encode(DELETE, &key, b""), &uri).await
    };
    match deleted.await {
        Ok(existed) if existed[..] == [1] => StatusCode::NO_CONTENT.into_response(),
        Ok(_) => StatusCode::NOT_FOUND.into_response(),
        Err(response) => response,
    }
}

async fn status(State(app): State<App>) -> Response {
    let status = match app.handle.status().await {
        Ok(status) => status.raft,
        Err(error) => {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")).into_response()
        }
    };
    let leader = match status.leader {
        Some(id) => match app.http_addrs.get(&id) {
            Some(addr) => format!("{id} at http://{addr}"),
            None => id.to_string(),
        },
        None => "none known".into(),
    };
    let role = format!("{:?}", status.role).to_lowercase();
    let (id, term, applied) = (status.id, status.term, status.applied);
    format!("node: {id}\nrole: {role}\nterm: {term}\nleader: {leader}\napplied: {applied}\n")
        .into_response()
}

/// Each node's addresses, as `--nodes` lists them.
struct Addrs {
    peer: SocketAddr,
    http: SocketAddr,
}

struct Args {
    id: NodeId,
    nodes: BTreeMap<NodeId, Addrs>,
    data_dir: PathBuf,
}

const USAGE: &str = "usage: http_kv --id ID --nodes ID=PEER_ADDR/HTTP_ADDR,... --data-dir DIR";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut id, mut nodes, mut data_dir) = (None, None, None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--id" => {
                id = Some(
                    value
                        .parse()
                        .map_err(|_| format!("--id {value}: not an id"))?,
                )
            }
            "--nodes" => nodes = Some(parse_nodes(&value)?),
            "--data-dir" => data_dir = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let (Some(id), Some(nodes), Some(data_dir)) = (id, nodes, data_dir) else {
        return Err("--id, --nodes and --data-dir are required".into());
    };
    if !nodes.contains_key(&id) {
        return Err(format!("node {id} is not in --nodes"));
    }
    Ok(Args {
        id,
        nodes,
        data_dir,
    })
}

fn parse_nodes(list: &str) -> Result<BTreeMap<NodeId, Addrs>, String> {
    let parse = |node: &str| {
        let (id, addrs) = node.split_once('=')?;
        let (peer, http) = addrs.split_once('/')?;
        let addrs = Addrs {
            peer: peer.parse().ok()?,
            http: http.parse().ok()?,
        };
        Some((id.parse().ok()?, addrs))
    };
    list.split(',')
        .map(|node| parse(node).ok_or(format!("--nodes: {node:?} is not ID=PEER_ADDR/HTTP_ADDR")))
        .collect()
}

/// Runs the node and its HTTP server until Ctrl-C.
async fn serve(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let me = &args.nodes[&args.id];
    let mut config = NodeConfig::new(args.id, CLUSTER_ID, &args.data_dir);
    config.peer_listen_addr = me.peer;
    config.peers = args
        .nodes
        .iter()
        .map(|(&id, node)| (id, node.peer))
        .collect();
    // Used only on an empty data directory: a restarted node resumes its cluster.
    config.initial_members = args.nodes.keys().copied().collect();
    let node = Node::start(config, KvStore::default()).await?;
    // A node that cannot go on (its disk failed) ends the process, for a supervisor to restart.
    keel::exit_on_failure(&node);

    let http_addrs = args
        .nodes
        .iter()
        .map(|(&id, node)| (id, node.http))
        .collect();
    let app = App {
        handle: node.handle(),
        http_addrs: Arc::new(http_addrs),
    };
    let router = Router::new()
        .route("/kv/{key}", get(get_value).put(put).delete(delete))
        .route("/status", get(status))
        .layer(DefaultBodyLimit::max(VALUE_BYTES_MAX))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(me.http).await?;
    eprintln!(
        "node {}: HTTP on {}, peers on {}",
        args.id, me.http, me.peer
    );
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
