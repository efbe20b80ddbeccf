//! Test-only helpers: an in-process RESP server that serves the state machine directly (no
//! consensus: every write is "committed" at the next index the moment it arrives), and a
//! redis-server launcher. Not a user-facing mode: it exists to drive the codec, the command layer
//! and `keel bench` end to end.

#![allow(dead_code)] // each test binary uses a different subset

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use keel_redis::KvStateMachine;
use keel_redis::LogCommand;
use keel_redis::LoggedCommand;
use keel_resp::Reply;
use keel_resp::{Decoder, Limits};
use keel_session::ClientConnection;
use keel_session::Dispatch;
use keel_session::NodeInfo;
use keel_session::NodeReport;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    /// Answer every write with a READONLY error (to test error counting).
    pub reject_writes: bool,
    /// Close each connection after this many requests (to test connection failures).
    pub close_after_requests: Option<u64>,
    pub limits: Option<Limits>,
}

pub struct State {
    pub sm: Mutex<KvStateMachine>,
    next_index: AtomicU64,
    next_connection_id: AtomicU64,
    connections: AtomicU64,
    options: ServerOptions,
}

struct Node<'a>(&'a State);

impl NodeInfo for Node<'_> {
    fn status(&self) -> NodeReport {
        let sm = self.0.sm.lock().unwrap();
        NodeReport {
            node_id: 1,
            role: "leader".into(),
            term: 1,
            leader_id: Some(1),
            commit_index: sm.applied_index(),
            applied_index: sm.applied_index(),
            state_digest: sm.state_digest(),
            log_time_ms: sm.log_time_ms(),
            keys: sm.len() as u64,
            connected_clients: self.0.connections.load(Ordering::Relaxed),
            ..NodeReport::default()
        }
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub state: Arc<State>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

impl TestServer {
    pub async fn start(options: ServerOptions) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        TestServer::serve(listener, options)
    }

    pub fn serve(listener: TcpListener, options: ServerOptions) -> TestServer {
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            sm: Mutex::new(KvStateMachine::new()),
            next_index: AtomicU64::new(1),
            next_connection_id: AtomicU64::new(1),
            connections: AtomicU64::new(0),
            options,
        });
        let accept_state = Arc::clone(&state);
        let accept_task = tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                let state = Arc::clone(&accept_state);
                tokio::spawn(async move {
                    state.connections.fetch_add(1, Ordering::Relaxed);
                    let _ = serve_connection(stream, peer, &state).await;
                    state.connections.fetch_sub(1, Ordering::Relaxed);
                });
            }
        });
        TestServer {
            addr,
            state,
            accept_task,
        }
    }
}

#[expect(clippy::too_many_lines)]
async fn serve_connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    state: &State,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let limits = state.options.limits.unwrap_or_default();
    let id = state.next_connection_id.fetch_add(1, Ordering::Relaxed);
    let mut connection = ClientConnection::new(id, peer.to_string(), limits);
    let mut decoder = Decoder::new(limits);
    let mut input = BytesMut::with_capacity(16 * 1024);
    let mut output = BytesMut::new();
    let mut seq = 0u64;
    let mut served = 0u64;
    loop {
        if stream.read_buf(&mut input).await? == 0 {
            return Ok(());
        }
        loop {
            let (frame, used) = match decoder.decode(&input) {
                Ok(Some(decoded)) => decoded,
                Ok(None) => break,
                Err(error) => {
                    connection.encode(&error.to_reply(), &mut output);
                    stream.write_all(&output).await?;
                    return Ok(());
                }
            };
            input.advance(used);
            if frame.is_empty() {
                continue;
            }
            served += 1;
            if state.options.close_after_requests == Some(served) {
                stream.write_all(&output).await?;
                return Ok(());
            }
            let reply = match connection.dispatch(&frame.args, &Node(state)) {
                Dispatch::Reply(reply) => reply,
                Dispatch::ReplyAndClose(reply) => {
                    connection.encode(&reply, &mut output);
                    stream.write_all(&output).await?;
                    return Ok(());
                }
                Dispatch::Write(_) if state.options.reject_writes => {
                    Reply::error("READONLY You can't write against a read only replica.")
                }
                Dispatch::Write(command) => {
                    seq += 1;
                    let entry = LogCommand::new(id, seq, 0, command).encode();
                    let mut sm = state.sm.lock().unwrap();
                    let index = state.next_index.fetch_add(1, Ordering::Relaxed);
                    sm.apply(index, &entry).expect("valid entry").to_reply()
                }
                Dispatch::Exec(_) if state.options.reject_writes => {
                    Reply::error("READONLY You can't write against a read only replica.")
                }
                Dispatch::Exec(transaction) => {
                    seq += 1;
                    let command = LoggedCommand::Exec(transaction.commands);
                    let entry = LogCommand::new(id, seq, 0, command).encode();
                    let mut sm = state.sm.lock().unwrap();
                    let index = state.next_index.fetch_add(1, Ordering::Relaxed);
                    sm.apply(index, &entry).expect("valid entry").into_reply()
                }
                Dispatch::Read(command) => state.sm.lock().unwrap().read(&command),
                Dispatch::Admin(_) => Reply::error("ERR not available: the runtime is not built"),
                Dispatch::Script(_) | Dispatch::Block(_) => {
                    Reply::error("ERR not available: the runtime is not built")
                }
            };
            connection.encode(&reply, &mut output);
        }
        if !output.is_empty() {
            stream.write_all(&output).await?;
            output.clear();
        }
    }
}

/// A redis-server child process on a free loopback port, killed on drop.
pub struct RedisServer {
    pub port: u16,
    child: Child,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

impl RedisServer {
    /// Starts redis-server without persistence. Panics with an install hint if it is missing:
    /// CI installs it, so a missing binary is a broken environment, not a reason to skip.
    pub fn start() -> RedisServer {
        assert!(
            on_path("redis-server"),
            "redis-server is not installed: run `apt-get install -y redis-server redis-tools` \
             (CI's .ci/run installs them)"
        );
        // Another process may take the port between our probe and redis binding it: try a few.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            let mut server = RedisServer { port, child };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return server;
                }
                if server.child.try_wait().unwrap().is_some() {
                    break; // exited: port taken, retry with another
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = server.child.kill();
        }
        panic!("redis-server did not start listening");
    }
}

/// The value of a top-level field in the flat JSON `keel bench --json` prints.
pub fn json_field<'a>(json: &'a str, name: &str) -> &'a str {
    let key = format!("\"{name}\":");
    let start = json
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {json}"))
        + key.len();
    let rest = &json[start..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    &rest[..end]
}
