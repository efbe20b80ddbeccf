//! A write forwarded by a follower whose link to the leader is lost after sending is sent again
//! under the same request id, and applies exactly once (issue 18), with real `keel serve`
//! processes:
//!
//! - the follower reaches the leaders through a proxy of this test's that passes a forwarded
//!   write (a transaction, a group of pipelined writes) to the leader, swallows the leader's
//!   replies and cuts the link;
//! - INCRs stream through a follower while the leader is SIGSTOPped and while leadership moves:
//!   every INCR answers the counter's next value, and none answers `outcome unknown`.
//!
//! Every wait is a retry loop with a deadline; nothing asserts a latency.

mod process;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use keel_resp::Reply;
use keel_resp::{encode_request, parse_reply, Limits};
use process::{eventually, eventually_within, poll_within, Cluster};

/// Longer than a forward may take (its deadline is 15 s), so that only the server's answer ends
/// a request.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// One client connection speaking RESP, request after request.
struct Client {
    stream: TcpStream,
    input: Vec<u8>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
        Client {
            stream,
            input: Vec::new(),
        }
    }

    fn call(&mut self, args: &[&str]) -> Reply {
        let mut out = bytes::BytesMut::new();
        encode_request(args, &mut out);
        self.stream.write_all(&out).unwrap();
        read_reply(&mut self.stream, &mut self.input).expect("a reply")
    }

    /// Sends `requests` in one write and reads their replies.
    fn pipeline(&mut self, requests: &[&[&str]]) -> Vec<Reply> {
        let mut out = bytes::BytesMut::new();
        for args in requests {
            encode_request(args, &mut out);
        }
        self.stream.write_all(&out).unwrap();
        requests
            .iter()
            .map(|_| read_reply(&mut self.stream, &mut self.input).expect("a reply"))
            .collect()
    }
}

/// The next reply on `stream`, with `input` holding what was read beyond it; `None` once the
/// stream ends.
fn read_reply(stream: &mut TcpStream, input: &mut Vec<u8>) -> Option<Reply> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((reply, used)) = parse_reply(input, &Limits::default()).unwrap() {
            input.drain(..used);
            return Some(reply);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => input.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Proxies in front of nodes' client ports. Armed with a number of replies, the next connection
/// that carries a `RAFT.FORWARD` passes its requests on, reads that many replies from the node,
/// drops them and closes both sides: the follower has sent its write and will never know what
/// came of it.
#[derive(Clone, Default)]
struct Cutter {
    /// Replies to swallow on the next forwarded write.
    armed: Arc<Mutex<Option<usize>>>,
    cuts: Arc<AtomicUsize>,
}

impl Cutter {
    fn arm(&self, replies: usize) {
        *self.armed.lock().unwrap() = Some(replies);
    }

    /// A proxy to `upstream`: the port it listens on.
    fn proxy(&self, upstream: u16) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cutter = self.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let cutter = cutter.clone();
                thread::spawn(move || cutter.relay(client, upstream));
            }
        });
        port
    }

    fn relay(&self, mut client: TcpStream, upstream: u16) {
        let Ok(mut node) = TcpStream::connect(("127.0.0.1", upstream)) else {
            return;
        };
        // Replies to swallow before cutting; 0: pass them on.
        let swallow = Arc::new(AtomicUsize::new(0));
        let (mut to_node, mut from_node) = (node.try_clone().unwrap(), client.try_clone().unwrap());
        let requests = {
            let swallow = Arc::clone(&swallow);
            let armed = Arc::clone(&self.armed);
            thread::spawn(move || {
                let mut chunk = [0u8; 64 * 1024];
                loop {
                    let n = match client.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let carries_id = chunk[..n]
                        .windows(b"RAFT.FORWARD".len())
                        .any(|w| w == b"RAFT.FORWARD");
                    if carries_id {
                        if let Some(replies) = armed.lock().unwrap().take() {
                            swallow.store(replies, Ordering::SeqCst);
                        }
                    }
                    if to_node.write_all(&chunk[..n]).is_err() {
                        break;
                    }
                }
                let _ = to_node.shutdown(Shutdown::Write);
            })
        };
        let mut input = Vec::new();
        let mut swallowed = 0;
        let mut chunk = [0u8; 64 * 1024];
        loop {
            let n = match node.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let replies = swallow.load(Ordering::SeqCst);
            if replies == 0 {
                if from_node.write_all(&chunk[..n]).is_err() {
                    break;
                }
                continue;
            }
            input.extend_from_slice(&chunk[..n]);
            while let Some((_, used)) = parse_reply(&input, &Limits::default()).unwrap() {
                input.drain(..used);
                swallowed += 1;
            }
            if swallowed >= replies {
                self.cuts.fetch_add(1, Ordering::SeqCst);
                let _ = from_node.shutdown(Shutdown::Both);
                let _ = node.shutdown(Shutdown::Both);
                break;
            }
        }
        let _ = from_node.shutdown(Shutdown::Both);
        let _ = requests.join();
    }
}

/// Asks the leader to hand leadership to `to` until every running node names it.
fn transfer(cluster: &Cluster, to: u64) {
    eventually_within(
        &format!("leadership to move to {to}"),
        Duration::from_secs(60),
        || {
            let current = cluster.leader();
            if current == to {
                return Some(());
            }
            let port = cluster.node(current).client_port;
            let _ = process::raw_request(port, &["RAFT.TRANSFER", &to.to_string()]);
            poll_within(Duration::from_secs(5), || {
                (cluster.leader() == to).then_some(())
            })
        },
    );
}

#[test]
fn a_forwarded_write_whose_reply_is_lost_is_sent_again_and_applied_once() {
    let mut cluster = Cluster::stopped("forward-cut", &[1, 2, 3], &[], &[]);
    let cutter = Cutter::default();
    // Node 3 reaches the others' client ports only through the proxies.
    let peers: Vec<String> = [1, 2]
        .iter()
        .map(|&id| {
            format!(
                "{id}=127.0.0.1:{}",
                cutter.proxy(cluster.node(id).client_port)
            )
        })
        .collect();
    cluster
        .node_mut(3)
        .set_arg("--client-peers", &peers.join(","));
    for id in [1, 2, 3] {
        cluster.node_mut(id).spawn();
    }
    if cluster.leader() == 3 {
        transfer(&cluster, 1);
    }
    let mut client = Client::connect(cluster.node(3).client_port);
    let mut incr = || client.call(&["INCR", "n"]);
    eventually("a first INCR through node 3", || match incr() {
        Reply::Integer(1) => Some(()),
        Reply::Error(e) if e.starts_with("TRYAGAIN") => None,
        other => panic!("INCR: {other:?}"),
    });

    // RAFT.FORWARD's +OK and INCR's reply swallowed: the leader applied it, node 3 cannot know.
    cutter.arm(2);
    assert_eq!(
        incr(),
        Reply::Integer(2),
        "the retry is answered as the first copy was"
    );
    assert_eq!(cutter.cuts.load(Ordering::SeqCst), 1);
    assert_eq!(incr(), Reply::Integer(3));

    // A transaction: MULTI, two QUEUED, RAFT.FORWARD and EXEC swallowed.
    cutter.arm(5);
    assert_eq!(client.call(&["MULTI"]), Reply::OK);
    for _ in 0..2 {
        assert_eq!(client.call(&["INCR", "n"]), Reply::simple("QUEUED"));
    }
    match client.call(&["EXEC"]) {
        Reply::Error(e) => assert!(e.contains("was applied already"), "{e}"),
        other => panic!("EXEC retried after it applied: {other:?}"),
    }
    assert_eq!(cutter.cuts.load(Ordering::SeqCst), 2);
    assert_eq!(client.call(&["INCR", "n"]), Reply::Integer(6));

    // Ten pipelined INCRs, forwarded together; the link is cut once the first one's replies
    // were swallowed, whatever the leader applied of the rest by then. Each is sent again
    // under its id: every INCR answers its own value, in request order, and applies once.
    cutter.arm(2);
    let incrs = vec![&["INCR", "n"][..]; 10];
    let values: Vec<Reply> = (7..17).map(Reply::Integer).collect();
    assert_eq!(client.pipeline(&incrs), values);
    assert_eq!(cutter.cuts.load(Ordering::SeqCst), 3);
    assert_eq!(client.call(&["INCR", "n"]), Reply::Integer(17));
    let leader = cluster.leader();
    assert_eq!(
        process::raw_get(cluster.node(leader).client_port, "n"),
        Reply::bulk("17")
    );
}

/// INCRs through node `via` on one connection, one after the other, until `stop`: each value
/// answered, in order; definite refusals (`TRYAGAIN` other than an unknown outcome) are
/// retried, since they applied nothing; anything else is recorded as a failure.
fn incr_stream(
    port: u16,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
) -> thread::JoinHandle<(Vec<i64>, Vec<String>)> {
    thread::spawn(move || {
        let mut client = Client::connect(port);
        let (mut values, mut failures) = (Vec::new(), Vec::new());
        while !stop.load(Ordering::SeqCst) {
            match client.call(&["INCR", "counter"]) {
                Reply::Integer(value) => {
                    values.push(value);
                    answered.fetch_add(1, Ordering::SeqCst);
                }
                Reply::Error(e) if e.starts_with("TRYAGAIN") && e != "TRYAGAIN outcome unknown" => {
                    thread::sleep(Duration::from_millis(20));
                }
                other => failures.push(format!("{other:?}")),
            }
        }
        (values, failures)
    })
}

#[test]
fn incrs_through_a_follower_apply_once_while_the_leader_stops_and_leadership_moves() {
    let cluster = Cluster::new("forward-stop", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let via = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let stream = incr_stream(
        cluster.node(via).client_port,
        Arc::clone(&stop),
        Arc::clone(&answered),
    );
    let answers_beyond = |count: u64| {
        let target = answered.load(Ordering::SeqCst) + count;
        eventually(&format!("{count} more INCRs answered"), || {
            (answered.load(Ordering::SeqCst) >= target).then_some(())
        });
    };
    answers_beyond(20);

    // Stopped right after an answer: the next INCR is on its way to it.
    let seen = answered.load(Ordering::SeqCst);
    eventually("an INCR answered", || {
        (answered.load(Ordering::SeqCst) > seen).then_some(())
    });
    cluster.node(leader).signal("STOP");
    answers_beyond(20);
    cluster.node(leader).signal("CONT");
    answers_beyond(10);

    // Leadership moves back to the node that was stopped (it caught up meanwhile), and on.
    transfer(&cluster, leader);
    answers_beyond(10);
    let other = [1, 2, 3]
        .into_iter()
        .find(|&id| id != leader && id != via)
        .unwrap();
    transfer(&cluster, other);
    answers_beyond(10);

    stop.store(true, Ordering::SeqCst);
    let (values, failures) = stream.join().unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    // Each INCR answers the value before it plus one: none applied twice, none lost.
    if let Some(at) = (0..values.len()).find(|&i| values[i] != i as i64 + 1) {
        panic!(
            "INCR {} answered {} (answers around it: {:?})",
            at + 1,
            values[at],
            &values[at.saturating_sub(2)..(at + 3).min(values.len())]
        );
    }
    let leader = cluster.leader();
    assert_eq!(
        process::raw_get(cluster.node(leader).client_port, "counter"),
        Reply::bulk(values.len().to_string())
    );
}
