//! Forwarding a client's request to the leader's client port and relaying the reply.
//!
//! One lazily opened connection per client connection (so the leader sees the requests of one
//! client in order), named [`super::FORWARD_CLIENT_NAME`] so that the leader never forwards them
//! again. A forward that fails before anything was sent is definitely not applied; one that fails
//! after sending a write has an unknown outcome and is never resent.
//!
//! A transaction (EXEC refused with NotLeader) is forwarded as its whole group: `MULTI`, each
//! queued request, `EXEC`, written at once; only EXEC's reply is relayed (the leader validates and
//! queues the commands again, so a command it rejects turns EXEC into its `-EXECABORT`). It
//! counts as a write: a failure after sending is `-TRYAGAIN outcome unknown`.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::FORWARD_CLIENT_NAME;
use crate::resp::{encode_request, parse_reply, Limits, Reply};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longer than the runtime's request timeout, so the leader's own answer (`-TRYAGAIN outcome
/// unknown`) normally arrives first.
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Default)]
pub(super) struct Forwarder {
    link: Option<Link>,
    /// How much longer than [`REPLY_TIMEOUT`] a `RAFT.MEMBER` reply may take: the leader waits
    /// up to the catch-up timeout for a new member before it answers.
    membership_wait: Duration,
    /// The node's `requirepass`: the link to the leader authenticates with it (every node of a
    /// cluster is given the same one), whatever the forwarded client authenticated with here.
    password: Option<Bytes>,
}

struct Link {
    leader: u64,
    stream: TcpStream,
    input: BytesMut,
}

#[derive(Debug)]
enum Failure {
    /// Nothing was sent: the request was not applied.
    NotSent(String),
    /// Sent, no reply: it may have been applied.
    Unknown(String),
}

impl Forwarder {
    pub(super) fn new(membership_wait: Duration, password: Option<Bytes>) -> Self {
        Forwarder {
            link: None,
            membership_wait,
            password,
        }
    }

    pub(super) async fn forward(
        &mut self,
        leader: u64,
        addr: &str,
        args: &[Bytes],
        is_write: bool,
        limits: &Limits,
    ) -> Reply {
        self.forward_group(leader, addr, &[args], is_write, limits)
            .await
    }

    /// Forwards a transaction (the queued requests of MULTI ... EXEC); relays EXEC's reply.
    pub(super) async fn forward_transaction(
        &mut self,
        leader: u64,
        addr: &str,
        queued: &[Vec<Bytes>],
        limits: &Limits,
    ) -> Reply {
        let multi = [Bytes::from_static(b"MULTI")];
        let exec = [Bytes::from_static(b"EXEC")];
        let mut group: Vec<&[Bytes]> = Vec::with_capacity(queued.len() + 2);
        group.push(&multi);
        group.extend(queued.iter().map(Vec::as_slice));
        group.push(&exec);
        self.forward_group(leader, addr, &group, true, limits).await
    }

    /// Sends `group` in one write and relays the reply to its last request.
    async fn forward_group(
        &mut self,
        leader: u64,
        addr: &str,
        group: &[&[Bytes]],
        is_write: bool,
        limits: &Limits,
    ) -> Reply {
        match self.try_forward(leader, addr, group, limits).await {
            Ok(reply) => reply,
            Err(failure) => {
                self.link = None;
                match failure {
                    Failure::NotSent(why) => Reply::error(format!(
                        "TRYAGAIN leader is node {leader} at {addr}, not reachable: {why}"
                    )),
                    Failure::Unknown(_) if is_write => Reply::error("TRYAGAIN outcome unknown"),
                    Failure::Unknown(why) => Reply::error(format!(
                        "TRYAGAIN forwarding to leader {leader} failed: {why}"
                    )),
                }
            }
        }
    }

    async fn try_forward(
        &mut self,
        leader: u64,
        addr: &str,
        group: &[&[Bytes]],
        limits: &Limits,
    ) -> Result<Reply, Failure> {
        if self.link.as_ref().is_none_or(|l| l.leader != leader) {
            self.link = None;
            let stream = timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
                .await
                .map_err(|_| Failure::NotSent("connect timed out".into()))?
                .map_err(|e| Failure::NotSent(e.to_string()))?;
            let _ = stream.set_nodelay(true);
            let mut link = Link {
                leader,
                stream,
                input: BytesMut::new(),
            };
            if let Some(password) = &self.password {
                let auth = [
                    Bytes::from_static(b"AUTH"),
                    Bytes::from_static(b"default"),
                    password.clone(),
                ];
                let reply = link
                    .round_trip(&auth, limits)
                    .await
                    .map_err(Failure::NotSent)?;
                if reply.is_error() {
                    return Err(Failure::NotSent(format!(
                        "the leader refused this node's password: {reply:?}"
                    )));
                }
            }
            let reply = link
                .round_trip(
                    &[
                        Bytes::from_static(b"CLIENT"),
                        Bytes::from_static(b"SETNAME"),
                        Bytes::from_static(FORWARD_CLIENT_NAME.as_bytes()),
                    ],
                    limits,
                )
                .await
                .map_err(Failure::NotSent)?;
            if reply.is_error() {
                return Err(Failure::NotSent(format!("{reply:?}")));
            }
            self.link = Some(link);
        }
        let wait = match group.last().and_then(|args| args.first()) {
            Some(name) if name.eq_ignore_ascii_case(b"raft.member") => {
                REPLY_TIMEOUT + self.membership_wait
            }
            _ => REPLY_TIMEOUT,
        };
        let link = self.link.as_mut().expect("link opened above");
        link.exchange(group, limits, wait)
            .await
            .map_err(Failure::Unknown)
    }
}

impl Link {
    async fn round_trip(&mut self, args: &[Bytes], limits: &Limits) -> Result<Reply, String> {
        self.exchange(&[args], limits, REPLY_TIMEOUT).await
    }

    /// Writes every request of `group` at once, reads one reply each, returns the last.
    async fn exchange(
        &mut self,
        group: &[&[Bytes]],
        limits: &Limits,
        wait: Duration,
    ) -> Result<Reply, String> {
        let mut request = BytesMut::new();
        for args in group {
            encode_request(args, &mut request);
        }
        self.stream
            .write_all(&request)
            .await
            .map_err(|e| e.to_string())?;
        let mut last = None;
        for _ in group {
            last = Some(self.read_reply(limits, wait).await?);
        }
        last.ok_or_else(|| "nothing to send".to_string())
    }

    async fn read_reply(&mut self, limits: &Limits, wait: Duration) -> Result<Reply, String> {
        timeout(wait, async {
            loop {
                if let Some((reply, used)) =
                    parse_reply(&self.input, limits).map_err(|e| e.to_string())?
                {
                    self.input.advance(used);
                    return Ok(reply);
                }
                if self
                    .stream
                    .read_buf(&mut self.input)
                    .await
                    .map_err(|e| e.to_string())?
                    == 0
                {
                    return Err("the leader closed the connection".to_string());
                }
            }
        })
        .await
        .map_err(|_| "no reply in time".to_string())?
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::net::TcpListener;

    use super::*;
    use crate::resp::Decoder;

    type Received = Arc<Mutex<Vec<Vec<Bytes>>>>;

    /// A fake leader on a free port: records every request; answers CLIENT and MULTI `+OK`, EXEC
    /// `*2 :1 $1 v`, anything else `+QUEUED`. With `hang_up`, it closes the connection instead of
    /// answering anything after CLIENT SETNAME (an outcome the forwarder cannot know).
    async fn fake_leader(hang_up: bool) -> (String, Received) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let received: Received = Arc::default();
        let log = Arc::clone(&received);
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut decoder = Decoder::new(Limits::default());
            let mut input = BytesMut::new();
            loop {
                while let Some((frame, used)) = decoder.decode(&input).unwrap() {
                    input.advance(used);
                    let name = frame.args[0].to_ascii_uppercase();
                    log.lock().unwrap().push(frame.args);
                    let reply: &[u8] = match &name[..] {
                        b"CLIENT" => b"+OK\r\n",
                        _ if hang_up => {
                            // Let the rest of the group arrive, then hang up.
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            while let Ok(Ok(n)) =
                                timeout(Duration::from_millis(50), stream.read_buf(&mut input))
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
                        b"MULTI" => b"+OK\r\n",
                        b"EXEC" => b"*2\r\n:1\r\n$1\r\nv\r\n",
                        _ => b"+QUEUED\r\n",
                    };
                    stream.write_all(reply).await.unwrap();
                }
                if stream.read_buf(&mut input).await.unwrap() == 0 {
                    return;
                }
            }
        });
        (addr, received)
    }

    fn request(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    #[tokio::test]
    async fn a_transaction_is_forwarded_as_one_group_and_only_exec_is_relayed() {
        let (addr, received) = fake_leader(false).await;
        let mut forwarder = Forwarder::default();
        let queued = vec![request("INCR n"), request("GET n")];
        let reply = forwarder
            .forward_transaction(1, &addr, &queued, &Limits::default())
            .await;
        assert_eq!(
            reply,
            Reply::Array(vec![Reply::Integer(1), Reply::bulk(&b"v"[..])])
        );
        let received = received.lock().unwrap().clone();
        let expected: Vec<Vec<Bytes>> = ["CLIENT SETNAME", "MULTI", "INCR n", "GET n", "EXEC"]
            .iter()
            .map(|l| request(l))
            .collect();
        assert_eq!(received[0][..2], expected[0][..]);
        assert_eq!(received[1..], expected[1..]);
    }

    #[tokio::test]
    async fn a_lost_transaction_is_an_unknown_outcome_and_never_resent() {
        let (addr, received) = fake_leader(true).await;
        let mut forwarder = Forwarder::default();
        let queued = vec![request("SET k v")];
        let reply = forwarder
            .forward_transaction(1, &addr, &queued, &Limits::default())
            .await;
        assert_eq!(reply, Reply::error("TRYAGAIN outcome unknown"));
        let received = received.lock().unwrap().clone();
        let names: Vec<&[u8]> = received.iter().map(|r| r[0].as_ref()).collect();
        assert_eq!(names, [&b"CLIENT"[..], b"MULTI", b"SET", b"EXEC"]);
    }

    #[tokio::test]
    async fn an_unreachable_leader_is_a_definite_failure() {
        let addr = {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap().to_string()
        };
        let reply = Forwarder::default()
            .forward_transaction(1, &addr, &[request("INCR n")], &Limits::default())
            .await;
        let Reply::Error(error) = reply else {
            panic!("not an error")
        };
        assert!(error.starts_with("TRYAGAIN leader is node 1"), "{error}");
        assert!(error.contains("not reachable"), "{error}");
    }
}
