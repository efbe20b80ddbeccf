//! Forwarding against fake leaders on real sockets: groups, retries under the same id, lost
//! links, leaders that ignore ids.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;

use super::*;
use keel_redis::command::forward_request;
use keel_resp::Decoder;
use keel_session::forwarding::Answer;

type Received = Arc<Mutex<Vec<Vec<Bytes>>>>;

const ID: RequestId = RequestId {
    client_id: 0xfeed_f00d,
    seq: 42,
};

/// How a fake leader treats a connection.
#[derive(Clone, Copy)]
struct Script {
    /// This many connections hang up once they got a request other than CLIENT, MULTI or
    /// RAFT.FORWARD (an outcome the forwarder cannot know); later ones answer.
    hang_ups: usize,
    /// Whether it knows `RAFT.FORWARD` (a leader of an older build does not).
    knows_forward: bool,
    /// Replies after `CLIENT` are held until a connection has sent this many writes (SET,
    /// INCR, EXEC): a sender that waits for a write's reply before it sends the next never
    /// gets one.
    hold_writes: usize,
}

const ANSWERS: Script = Script {
    hang_ups: 0,
    knows_forward: true,
    hold_writes: 0,
};

/// A fake leader on a free port: records every request; answers CLIENT, MULTI, SET and
/// RAFT.FORWARD `+OK`, INCR `:1`, EXEC `*2 :1 $1 v`, anything else `+QUEUED`.
async fn fake_leader(script: Script) -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let received: Received = Arc::default();
    let log = Arc::clone(&received);
    let connections = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let hang_up = connections.fetch_add(1, Ordering::Relaxed) < script.hang_ups;
            tokio::spawn(serve_fake(stream, hang_up, script, Arc::clone(&log)));
        }
    });
    (addr, received)
}

async fn serve_fake(mut stream: TcpStream, hang_up: bool, script: Script, log: Received) {
    let mut decoder = Decoder::new(Limits::default());
    let mut input = BytesMut::new();
    let mut held: Vec<u8> = Vec::new();
    let mut writes = 0;
    loop {
        while let Some((frame, used)) = decoder.decode(&input).unwrap() {
            input.advance(used);
            let name = frame.args[0].to_ascii_uppercase();
            log.lock().unwrap().push(frame.args);
            if matches!(&name[..], b"SET" | b"INCR" | b"EXEC") {
                writes += 1;
            }
            let reply: &[u8] = match &name[..] {
                b"CLIENT" | b"MULTI" => b"+OK\r\n",
                b"RAFT.FORWARD" if !script.knows_forward => {
                    b"-ERR unknown command 'RAFT.FORWARD'\r\n"
                }
                b"RAFT.FORWARD" => b"+OK\r\n",
                _ if hang_up => {
                    // Let the rest of the group arrive, then hang up.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    while let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_millis(50), stream.read_buf(&mut input))
                            .await
                    {
                        if n == 0 {
                            break;
                        }
                    }
                    while let Some((frame, used)) = decoder.decode(&input).unwrap() {
                        input.advance(used);
                        log.lock().unwrap().push(frame.args);
                    }
                    return;
                }
                b"SET" => b"+OK\r\n",
                b"INCR" => b":1\r\n",
                b"EXEC" => b"*2\r\n:1\r\n$1\r\nv\r\n",
                _ => b"+QUEUED\r\n",
            };
            held.extend_from_slice(reply);
            if writes >= script.hold_writes || name == b"CLIENT" {
                stream.write_all(&held).await.unwrap();
                held.clear();
            }
        }
        if stream.read_buf(&mut input).await.unwrap() == 0 {
            return;
        }
    }
}

/// Node 2, a follower of node 1 (at `leader_addr`): proposing here is refused, naming node 1.
struct Follower {
    leader_addr: String,
    proposals: AtomicUsize,
}

impl Follower {
    fn of(leader_addr: &str) -> Follower {
        Follower {
            leader_addr: leader_addr.to_string(),
            proposals: AtomicUsize::new(0),
        }
    }
}

impl Node for Follower {
    fn id(&self) -> u64 {
        2
    }

    fn client_addr(&self, id: u64) -> Option<String> {
        (id == 1).then(|| self.leader_addr.clone())
    }

    async fn propose(&self, _entry: Bytes) -> Result<Bytes, ClientError> {
        self.proposals.fetch_add(1, Ordering::Relaxed);
        Err(ClientError::NotLeader {
            leader: Some(1),
            leader_addr: None,
        })
    }
}

/// A forwarder whose writes give up after `deadline_ms`.
fn forwarder(deadline_ms: u64) -> Forwarder {
    let mut forwarder = Forwarder::new(Duration::ZERO, None, Limits::default());
    forwarder.policy.deadline_ms = deadline_ms;
    forwarder
}

fn request(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

fn names(received: &Received) -> Vec<String> {
    let received = received.lock().unwrap();
    received
        .iter()
        .map(|r| String::from_utf8_lossy(&r[0]).into_owned())
        .collect()
}

/// The ids every `RAFT.FORWARD` received carried.
fn ids(received: &Received) -> Vec<RequestId> {
    let received = received.lock().unwrap();
    received
        .iter()
        .filter(|r| keel_redis::command::is_forward(r))
        .map(|r| keel_redis::command::parse_forward(r).unwrap())
        .collect()
}

/// Forwards `request` from `node`, giving up after `deadline_ms`.
async fn forward_from(node: &Follower, deadline_ms: u64, request: Forwarded<'_>) -> Reply {
    let addr = node.leader_addr.clone();
    forwarder(deadline_ms)
        .forward_write(node, 1, addr, ID, request)
        .await
}

/// Forwards the write `line` from a follower of a fake leader playing `script`: its answer,
/// what the fake received, and the follower.
async fn forward_to_fake(
    script: Script,
    deadline_ms: u64,
    line: &str,
) -> (Reply, Received, Follower) {
    let (addr, received) = fake_leader(script).await;
    let node = Follower::of(&addr);
    let reply = forward_from(&node, deadline_ms, Forwarded::Write(&request(line))).await;
    (reply, received, node)
}

#[tokio::test]
async fn a_transaction_is_forwarded_as_one_group_under_its_id_and_only_exec_is_relayed() {
    let (addr, received) = fake_leader(ANSWERS).await;
    let queued = vec![request("INCR n"), request("GET n")];
    let reply = forward_from(&Follower::of(&addr), 1_000, Forwarded::Exec(&queued)).await;
    assert_eq!(
        reply,
        Reply::Array(vec![Reply::Integer(1), Reply::bulk(&b"v"[..])])
    );
    let received = received.lock().unwrap().clone();
    let expected: Vec<Vec<Bytes>> = [
        "CLIENT SETNAME",
        "MULTI",
        "INCR n",
        "GET n",
        "RAFT.FORWARD 4277006349 42",
        "EXEC",
    ]
    .iter()
    .map(|l| request(l))
    .collect();
    assert_eq!(received[0][..2], expected[0][..]);
    assert_eq!(received[1..], expected[1..]);
}

#[tokio::test]
async fn a_write_whose_link_is_lost_is_sent_again_under_its_id_and_answered() {
    let script = Script {
        hang_ups: 2,
        ..ANSWERS
    };
    let (reply, received, node) = forward_to_fake(script, 10_000, "INCR n").await;
    assert_eq!(reply, Reply::Integer(1));
    assert_eq!(ids(&received), [ID, ID, ID]);
    // Each retry asked this node first, which named the leader again.
    assert_eq!(node.proposals.load(Ordering::Relaxed), 2);
}

/// Ids `seq..seq + n` of the test's session.
fn ids_from(seq: u64, n: usize) -> Vec<RequestId> {
    (0..n as u64)
        .map(|i| RequestId {
            client_id: ID.client_id,
            seq: seq + i,
        })
        .collect()
}

/// Forwards writes `lines` together, under consecutive ids from [`ID`].
async fn forward_group(node: &Follower, deadline_ms: u64, lines: &[&str]) -> Vec<Reply> {
    let requests: Vec<Vec<Bytes>> = lines.iter().map(|l| request(l)).collect();
    let writes: Vec<(RequestId, Forwarded<'_>)> = ids_from(ID.seq, lines.len())
        .into_iter()
        .zip(&requests)
        .map(|(id, args)| (id, Forwarded::Write(args)))
        .collect();
    forwarder(deadline_ms)
        .forward_writes(node, 1, node.leader_addr.clone(), &writes)
        .await
}

/// Forwards writes `lines` together from a follower of a fake leader playing `script`: their
/// answers, what the fake received, and the follower.
async fn forward_group_to_fake(
    script: Script,
    deadline_ms: u64,
    lines: &[&str],
) -> (Vec<Reply>, Received, Follower) {
    let (addr, received) = fake_leader(script).await;
    let node = Follower::of(&addr);
    let replies = forward_group(&node, deadline_ms, lines).await;
    (replies, received, node)
}

/// A leader that answers nothing until it has all three writes: only a forwarder that sends
/// a group's writes before their replies come is answered (one sent at a time would wait
/// past its deadline: `TRYAGAIN outcome unknown`).
#[tokio::test]
async fn a_group_of_writes_goes_to_the_leader_at_once_and_each_gets_its_own_reply() {
    let script = Script {
        hold_writes: 3,
        ..ANSWERS
    };
    let (replies, received, node) =
        forward_group_to_fake(script, 1_000, &["SET a 1", "INCR n", "SET b 2"]).await;
    assert_eq!(replies, [Reply::OK, Reply::Integer(1), Reply::OK]);
    assert_eq!(ids(&received), ids_from(ID.seq, 3));
    assert_eq!(
        names(&received),
        [
            "CLIENT",
            "RAFT.FORWARD",
            "SET",
            "RAFT.FORWARD",
            "INCR",
            "RAFT.FORWARD",
            "SET"
        ]
    );
    assert_eq!(node.proposals.load(Ordering::Relaxed), 0, "no retry");
}

/// A group larger than one piece of the exchange's writes (`EXCHANGE_WRITE_BYTES`) still goes
/// whole before any reply.
#[tokio::test]
async fn a_group_of_large_writes_goes_in_pieces_and_is_answered() {
    let script = Script {
        hold_writes: 3,
        ..ANSWERS
    };
    let value = "v".repeat(EXCHANGE_WRITE_BYTES / 2 + 1);
    let lines: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|key| format!("SET {key} {value}"))
        .collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (replies, received, _) = forward_group_to_fake(script, 2_000, &lines).await;
    assert_eq!(replies, [Reply::OK, Reply::OK, Reply::OK]);
    let received = received.lock().unwrap();
    let values: Vec<usize> = received
        .iter()
        .filter(|r| r[0].as_ref() == b"SET")
        .map(|r| r[2].len())
        .collect();
    assert_eq!(values, [value.len(); 3]);
}

/// The link fails with the whole group sent and no write answered: each write is sent again
/// on its own, in order, under its own id, and answered.
#[tokio::test]
async fn a_group_whose_link_is_lost_is_retried_write_by_write_under_the_same_ids() {
    let script = Script {
        hang_ups: 1,
        ..ANSWERS
    };
    let (replies, received, node) =
        forward_group_to_fake(script, 10_000, &["SET a 1", "INCR n", "SET b 2"]).await;
    assert_eq!(replies, [Reply::OK, Reply::Integer(1), Reply::OK]);
    let group = ids_from(ID.seq, 3);
    let expected: Vec<RequestId> = group.iter().chain(&group).copied().collect();
    assert_eq!(ids(&received), expected);
    assert_eq!(
        node.proposals.load(Ordering::Relaxed),
        3,
        "each retry asked here first"
    );
}

#[tokio::test]
async fn a_write_lost_until_its_deadline_is_an_unknown_outcome() {
    let script = Script {
        hang_ups: usize::MAX,
        ..ANSWERS
    };
    let (reply, received, _) = forward_to_fake(script, 600, "SET k v").await;
    assert_eq!(reply, Reply::error("TRYAGAIN outcome unknown"));
    let sent = ids(&received);
    assert!(sent.len() >= 2, "{sent:?}");
    assert!(sent.iter().all(|&id| id == ID), "{sent:?}");
}

#[tokio::test]
async fn a_leader_that_ignores_the_id_gets_the_write_once() {
    let answers = Script {
        knows_forward: false,
        ..ANSWERS
    };
    let (reply, answered, _) = forward_to_fake(answers, 10_000, "SET k v").await;
    assert_eq!(reply, Reply::OK, "the write's own reply");
    let hangs_up = Script {
        hang_ups: usize::MAX,
        knows_forward: false,
        ..ANSWERS
    };
    let (reply, lost, node) = forward_to_fake(hangs_up, 10_000, "SET k v").await;
    assert_eq!(reply, Reply::error("TRYAGAIN outcome unknown"));
    for received in [answered, lost] {
        assert_eq!(names(&received), ["CLIENT", "RAFT.FORWARD", "SET"]);
    }
    assert_eq!(node.proposals.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn an_unreachable_leader_is_a_definite_failure() {
    let addr = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let node = Follower::of(&addr);
    let read = forwarder(1_000)
        .forward(1, &addr, &[&request("GET n")[..]], false)
        .await;
    let write = forward_from(&node, 400, Forwarded::Write(&request("INCR n"))).await;
    for reply in [read, write] {
        let Reply::Error(error) = reply else {
            panic!("not an error")
        };
        assert!(error.starts_with("TRYAGAIN leader is node 1"), "{error}");
        assert!(error.contains("not reachable"), "{error}");
    }
    assert!(
        node.proposals.load(Ordering::Relaxed) >= 1,
        "the write was retried"
    );
}

/// What the leader answers a forwarding connection, as the decision module reads it.
#[test]
fn every_refusal_a_leader_answers_is_told_apart() {
    let refusals = [
        (
            ClientError::NotLeader {
                leader: None,
                leader_addr: None,
            },
            Answer::NotApplied,
        ),
        (ClientError::Busy("pending proposals"), Answer::NotApplied),
        (ClientError::Unknown, Answer::MaybeApplied),
        (ClientError::Shutdown, Answer::MaybeApplied),
        (ClientError::Rejected("no".into()), Answer::Final),
    ];
    for (error, answer) in refusals {
        assert_eq!(
            Answer::of(&keel_redis::command::client_error_reply(&error)),
            answer,
            "{error:?}"
        );
    }
    assert_eq!(Answer::of(&leader_elsewhere(3, "h:1")), Answer::NotApplied);
    assert_eq!(Answer::of(&leader_address_unknown(3)), Answer::NotApplied);
}

/// The id goes as a request of its own, so a write the front door took within its limits
/// reaches the leader's decoder, with the same limits, unchanged.
#[test]
fn a_write_at_the_request_limits_crosses_to_the_leader_unchanged() {
    let limits = Limits::default();
    let mut write = vec![Bytes::from_static(b"DEL")];
    write.resize(limits.args_max, Bytes::from_static(b"k"));
    let id = RequestId {
        client_id: u64::MAX,
        seq: u64::MAX,
    };
    let prefix = forward_request(id);
    let wire = encoded(id, Forwarded::Write(&write));
    let mut decoder = Decoder::new(limits);
    let (first, used) = decoder.decode(&wire).unwrap().unwrap();
    assert_eq!(first.args, prefix);
    let (second, rest) = decoder.decode(&wire[used..]).unwrap().unwrap();
    assert_eq!(second.args, write);
    assert_eq!(used + rest, wire.len());
}

#[test]
fn a_retry_proposes_the_entry_the_client_connection_proposed() {
    let limits = Limits::default();
    let (set, none) =
        log_entry(ID, Forwarded::Write(&request("SET k v")), &limits, 1234, 0).unwrap();
    assert!(none.is_empty());
    let decoded = LogCommand::decode(&set).unwrap();
    assert_eq!(
        (decoded.client_id, decoded.request_seq, decoded.stamp_ms),
        (ID.client_id, ID.seq, 1234)
    );
    let queued = vec![
        request("INCR n"),
        request("UNWATCH"),
        request("PING"),
        request("GET n"),
    ];
    let (exec, local) = log_entry(ID, Forwarded::Exec(&queued), &limits, 1234, 0).unwrap();
    let LoggedCommand::Exec(commands) = LogCommand::decode(&exec).unwrap().command else {
        panic!("not a transaction")
    };
    assert_eq!(commands.len(), 3);
    assert_eq!(
        local,
        vec![(1, Reply::OK)],
        "UNWATCH's reply, answered here"
    );
    // A retry of a write in another database is proposed in it.
    let (in3, _) = log_entry(ID, Forwarded::Write(&request("SET k v")), &limits, 1234, 3).unwrap();
    assert_eq!(LogCommand::decode(&in3).unwrap().db, 3);
    assert_eq!(
        log_entry(ID, Forwarded::Write(&request("GET k")), &limits, 1234, 0),
        None
    );
}

/// What `send_group` writes for `request` under `id`.
fn encoded(id: RequestId, request: Forwarded<'_>) -> BytesMut {
    let mut wire = BytesMut::new();
    for part in wire_parts(id, request) {
        match part {
            WirePart::Announce(id) => encode_forward_request(id, &mut wire),
            WirePart::Request(args) => encode_request(args, &mut wire),
        }
    }
    wire
}

/// The announcement is encoded without allocating, byte for byte as the request
/// `forward_request` makes; a transaction goes as MULTI, its requests, the announcement, EXEC.
#[test]
fn a_transaction_crosses_as_multi_its_requests_the_id_and_exec() {
    for (client_id, seq) in [(0, 1), (7, 10), (u64::MAX, u64::MAX), (1 << 63, 99)] {
        let id = RequestId { client_id, seq };
        let mut direct = BytesMut::new();
        encode_forward_request(id, &mut direct);
        let mut via_args = BytesMut::new();
        encode_request(&forward_request(id), &mut via_args);
        assert_eq!(direct, via_args);
    }
    let queued = vec![request("INCR n"), request("GET n")];
    let wire = encoded(ID, Forwarded::Exec(&queued));
    let mut decoder = Decoder::new(Limits::default());
    let mut at = 0;
    let mut requests = Vec::new();
    while at < wire.len() {
        let (frame, used) = decoder.decode(&wire[at..]).unwrap().unwrap();
        requests.push(frame.args);
        at += used;
    }
    let expected: Vec<Vec<Bytes>> = vec![
        MULTI.to_vec(),
        queued[0].clone(),
        queued[1].clone(),
        forward_request(ID).to_vec(),
        EXEC.to_vec(),
    ];
    assert_eq!(requests, expected);
}
