//! Forwarding a client's request to the leader's client port and relaying the reply.
//!
//! One lazily opened connection per client connection (so the leader sees the requests of one
//! client in order), named [`super::FORWARD_CLIENT_NAME`] so that the leader never forwards them
//! again.
//!
//! A write (or a transaction) goes under the request id this node gave it, its client
//! connection's dedup session and the write's seq, announced by `RAFT.FORWARD` just before it
//! (`command/forward.rs`); the leader proposes it under that id. `crate::forwarding` decides
//! whether and when it is sent again, always under that id: after a lost link, no reply in
//! time, or an answer that it was not applied. A retry finds the leader as the first forward
//! did: this node proposes the write again (under the same id, so if it leads by now the write is
//! simply applied here), and forwards it to the leader its refusal names. This shell only moves
//! bytes, waits and proposes; what a retry finds and what it answers is the decision module's.
//!
//! Reads and admin commands are forwarded once, as they are: a failure before anything was sent
//! is definitely not applied; after sending, an admin command's outcome is unknown and a read has
//! just failed.
//!
//! A transaction (EXEC refused with NotLeader) is forwarded as its whole group: `MULTI`, each
//! queued request, `RAFT.FORWARD`, `EXEC`, written at once; only EXEC's reply is relayed (the
//! leader validates and queues the commands again, so a command it rejects turns EXEC into its
//! `-EXECABORT`). A transaction retried after its first copy applied is not run again, and
//! answers the state machine's error saying that its replies are not kept.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use keel_runtime::ClientError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

use super::{ServerContext, FORWARD_CLIENT_NAME};
use crate::command::forward_request;
use crate::connection::{ClientConnection, Dispatch, NodeStatus};
use crate::forwarding::{ForwardedWrite, Next, Outcome, RequestId, RetryPolicy};
use crate::resp::{encode_request, parse_reply, Limits, Reply};
use crate::state_machine::{LogCommand, LoggedCommand};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

pub(super) use crate::forwarding::Forwarded;
use crate::forwarding::{group_with_id, EXEC, MULTI};

/// What forwarding needs of this node.
pub(super) trait Node {
    fn id(&self) -> u64;
    /// Where `id`'s clients reach it, as far as this node knows.
    fn client_addr(&self, id: u64) -> Option<String>;
    /// Proposes a log entry here: its result once applied, or why not.
    async fn propose(&self, entry: Bytes) -> Result<Bytes, ClientError>;
}

impl Node for ServerContext {
    fn id(&self) -> u64 {
        self.node_id
    }

    fn client_addr(&self, id: u64) -> Option<String> {
        ServerContext::client_addr(self, id)
    }

    async fn propose(&self, entry: Bytes) -> Result<Bytes, ClientError> {
        self.handle.propose(entry).await
    }
}

pub(super) struct Forwarder {
    link: Option<Link>,
    /// How much longer than the forwarding deadline a `RAFT.MEMBER` reply may take: the leader
    /// waits up to the catch-up timeout for a new member before it answers.
    membership_wait: Duration,
    /// The node's `requirepass`: the link to the leader authenticates with it (every node of a
    /// cluster is given the same one), whatever the forwarded client authenticated with here.
    password: Option<Bytes>,
    /// The node's request limits: what the leader, with the same, answers is parsed with them.
    limits: Limits,
    policy: RetryPolicy,
}

struct Link {
    leader: u64,
    stream: TcpStream,
    input: BytesMut,
    limits: Limits,
}

/// How one attempt at a write ended.
enum Attempt {
    /// The reply to the write (or an answer of this node's own: a retry is proposed here first).
    Answered(Reply),
    /// Nothing was sent; the refusal says why.
    NotSent(Reply),
    /// Sent, and no reply came in time.
    Lost,
}

pub(super) use crate::forwarding::{leader_address_unknown, leader_elsewhere};

fn leader_unreachable(leader: u64, addr: &str, why: &str) -> Reply {
    Reply::error(format!(
        "TRYAGAIN leader is node {leader} at {addr}, not reachable: {why}"
    ))
}

impl Forwarder {
    pub(super) fn new(membership_wait: Duration, password: Option<Bytes>, limits: Limits) -> Self {
        Forwarder {
            link: None,
            membership_wait,
            password,
            limits,
            policy: RetryPolicy::default(),
        }
    }

    fn deadline(&self) -> Duration {
        Duration::from_millis(self.policy.deadline_ms)
    }

    /// Forwards a read or an admin command once (`may_change`: whether it may change state, so
    /// that a failure after sending leaves its outcome unknown).
    pub(super) async fn forward(
        &mut self,
        leader: u64,
        addr: &str,
        args: &[Bytes],
        may_change: bool,
    ) -> Reply {
        let mut wait = self.deadline();
        if args[0].eq_ignore_ascii_case(b"raft.member") {
            wait += self.membership_wait;
        }
        let deadline = Instant::now() + wait;
        let link = match self.link_to(leader, addr, deadline).await {
            Ok(link) => link,
            Err(why) => return leader_unreachable(leader, addr, &why),
        };
        match link.exchange(&[args], deadline, |_, _| {}).await {
            Ok(reply) => reply,
            Err(why) => {
                self.link = None;
                if may_change {
                    Reply::error("TRYAGAIN outcome unknown")
                } else {
                    Reply::error(format!(
                        "TRYAGAIN forwarding to leader {leader} failed: {why}"
                    ))
                }
            }
        }
    }

    /// Forwards a write (or transaction) that `node` proposed under `id` and `leader` refused,
    /// retrying as [`RetryPolicy`] allows; its answer, or why there is none.
    pub(super) async fn forward_write(
        &mut self,
        node: &impl Node,
        leader: u64,
        addr: String,
        id: RequestId,
        request: Forwarded<'_>,
    ) -> Reply {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let now_ms = || u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (mut write, mut next) = ForwardedWrite::start(id, now_ms(), self.policy);
        let mut first = Some((leader, addr));
        // The answer of the last attempt that got one: relayed, or if no attempt applied the
        // write, the refusal the client gets.
        let mut answer = Reply::error("TRYAGAIN no leader");
        loop {
            next = match next {
                Next::Send { id, reply_by_ms } => {
                    let reply_by = at(reply_by_ms);
                    let attempt = match first.take() {
                        Some((leader, addr)) => {
                            self.send_with_id(&mut write, leader, &addr, id, request, reply_by)
                                .await
                        }
                        None => self.retry(node, &mut write, id, request, reply_by).await,
                    };
                    match attempt {
                        Attempt::Answered(reply) => {
                            let next = write.on_reply(now_ms(), &reply);
                            answer = reply;
                            next
                        }
                        Attempt::NotSent(refusal) => {
                            answer = refusal;
                            write.on_not_sent(now_ms())
                        }
                        Attempt::Lost => write.on_lost_link(now_ms()),
                    }
                }
                Next::Wait { until_ms } => {
                    tokio::time::sleep_until(at(until_ms)).await;
                    write.on_wake(now_ms())
                }
                Next::GiveUp(Outcome::Unknown) => return Reply::error("TRYAGAIN outcome unknown"),
                Next::Relay | Next::GiveUp(Outcome::NotApplied) => return answer,
            };
        }
    }

    /// A retry: proposed here again under `id`, and forwarded to the leader this node's refusal
    /// names, as the first attempt was.
    async fn retry(
        &mut self,
        node: &impl Node,
        write: &mut ForwardedWrite,
        id: RequestId,
        request: Forwarded<'_>,
        reply_by: Instant,
    ) -> Attempt {
        let Some((entry, local_replies)) =
            log_entry(id, request, &self.limits, super::wall_clock_ms())
        else {
            return Attempt::Answered(Reply::error(
                "ERR internal error: a forwarded request no longer parses",
            ));
        };
        match timeout_at(reply_by, node.propose(entry)).await {
            Err(_) => Attempt::Lost,
            Ok(Ok(result)) => Attempt::Answered(crate::connection::splice(
                super::connection::write_reply(&result),
                &local_replies,
            )),
            Ok(Err(ClientError::NotLeader {
                leader: Some(leader),
                ..
            })) if leader != node.id() => match node.client_addr(leader) {
                Some(addr) => {
                    self.send_with_id(write, leader, &addr, id, request, reply_by)
                        .await
                }
                None => Attempt::NotSent(leader_address_unknown(leader)),
            },
            Ok(Err(error)) => Attempt::Answered(super::error_reply(&error)),
        }
    }

    /// Sends `request` under `id` to `leader` and reads its reply until `reply_by`.
    async fn send_with_id(
        &mut self,
        write: &mut ForwardedWrite,
        leader: u64,
        addr: &str,
        id: RequestId,
        request: Forwarded<'_>,
        reply_by: Instant,
    ) -> Attempt {
        let link = match self.link_to(leader, addr, reply_by).await {
            Ok(link) => link,
            Err(why) => return Attempt::NotSent(leader_unreachable(leader, addr, &why)),
        };
        let prefix = forward_request(id);
        let group = group_with_id(request, &prefix);
        let prefix_at = group.len() - 2;
        let exchanged = link
            .exchange(&group, reply_by, |at, reply| {
                if at == prefix_at && *reply != Reply::OK {
                    write.on_id_refused();
                }
            })
            .await;
        match exchanged {
            Ok(reply) => Attempt::Answered(reply),
            Err(_) => {
                self.link = None;
                Attempt::Lost
            }
        }
    }

    /// The link to `leader`, opened (authenticated and named) if it is not open yet.
    async fn link_to(
        &mut self,
        leader: u64,
        addr: &str,
        deadline: Instant,
    ) -> Result<&mut Link, String> {
        let link = match self.link.take() {
            Some(link) if link.leader == leader => link,
            _ => self.open(leader, addr, deadline).await?,
        };
        Ok(self.link.insert(link))
    }

    async fn open(&self, leader: u64, addr: &str, deadline: Instant) -> Result<Link, String> {
        let connect_by = deadline.min(Instant::now() + CONNECT_TIMEOUT);
        let stream = timeout_at(connect_by, TcpStream::connect(addr))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let mut link = Link {
            leader,
            stream,
            input: BytesMut::new(),
            limits: self.limits,
        };
        if let Some(password) = &self.password {
            let auth = [
                Bytes::from_static(b"AUTH"),
                Bytes::from_static(b"default"),
                password.clone(),
            ];
            let reply = link.exchange(&[&auth], deadline, |_, _| {}).await?;
            if reply.is_error() {
                return Err(format!(
                    "the leader refused this node's password: {reply:?}"
                ));
            }
        }
        let setname = [
            Bytes::from_static(b"CLIENT"),
            Bytes::from_static(b"SETNAME"),
            Bytes::from_static(FORWARD_CLIENT_NAME.as_bytes()),
        ];
        let reply = link.exchange(&[&setname], deadline, |_, _| {}).await?;
        if reply.is_error() {
            return Err(format!("{reply:?}"));
        }
        Ok(link)
    }
}

/// The log entry of `request` under `id`, made as the client connection made it: its requests
/// dispatched again through a fresh protocol state (with the same limits, they parse and queue
/// as they did), stamped `now_ms` (this node's wall clock as it proposes it again). `None` if
/// they no longer make a write. With it, the replies a transaction's local commands got here, to
/// splice into the applied array (`crate::connection::splice`).
fn log_entry(
    id: RequestId,
    request: Forwarded<'_>,
    limits: &Limits,
    now_ms: u64,
) -> Option<(Bytes, Vec<(usize, Reply)>)> {
    let mut protocol = ClientConnection::new(0, "", *limits);
    let node = super::Fetched(NodeStatus::default(), false);
    let command = match request {
        Forwarded::Write(args) => match protocol.dispatch(args, &node) {
            Dispatch::Write(command) => (LoggedCommand::Write(command), Vec::new()),
            _ => return None,
        },
        Forwarded::Exec(queued) => {
            protocol.dispatch(&MULTI, &node);
            for args in queued {
                protocol.dispatch(args, &node);
            }
            match protocol.dispatch(&EXEC, &node) {
                Dispatch::Exec(transaction) => (transaction.logged(), transaction.local_replies),
                _ => return None,
            }
        }
    };
    let (command, local_replies) = command;
    Some((
        LogCommand::new(id.client_id, id.seq, now_ms, command).encode(),
        local_replies,
    ))
}

impl Link {
    /// Writes every request of `group` at once and reads one reply each until `deadline`,
    /// showing each to `each` with its position; returns the last.
    async fn exchange(
        &mut self,
        group: &[&[Bytes]],
        deadline: Instant,
        mut each: impl FnMut(usize, &Reply),
    ) -> Result<Reply, String> {
        let mut request = BytesMut::new();
        for args in group {
            encode_request(args, &mut request);
        }
        timeout_at(deadline, self.stream.write_all(&request))
            .await
            .map_err(|_| "the leader took nothing in time".to_string())?
            .map_err(|e| e.to_string())?;
        let mut last = None;
        for at in 0..group.len() {
            let reply = self.read_reply(deadline).await?;
            each(at, &reply);
            last = Some(reply);
        }
        last.ok_or_else(|| "nothing to send".to_string())
    }

    async fn read_reply(&mut self, deadline: Instant) -> Result<Reply, String> {
        timeout_at(deadline, async {
            loop {
                if let Some((reply, used)) =
                    parse_reply(&self.input, &self.limits).map_err(|e| e.to_string())?
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
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio::net::TcpListener;

    use super::*;
    use crate::forwarding::Answer;
    use crate::resp::Decoder;

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
    }

    const ANSWERS: Script = Script {
        hang_ups: 0,
        knows_forward: true,
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
        loop {
            while let Some((frame, used)) = decoder.decode(&input).unwrap() {
                input.advance(used);
                let name = frame.args[0].to_ascii_uppercase();
                log.lock().unwrap().push(frame.args);
                let reply: &[u8] = match &name[..] {
                    b"CLIENT" | b"MULTI" => b"+OK\r\n",
                    b"RAFT.FORWARD" if !script.knows_forward => {
                        b"-ERR unknown command 'RAFT.FORWARD'\r\n"
                    }
                    b"RAFT.FORWARD" => b"+OK\r\n",
                    _ if hang_up => {
                        // Let the rest of the group arrive, then hang up.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        while let Ok(Ok(n)) = tokio::time::timeout(
                            Duration::from_millis(50),
                            stream.read_buf(&mut input),
                        )
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
                stream.write_all(reply).await.unwrap();
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
            .filter(|r| crate::command::is_forward(r))
            .map(|r| crate::command::parse_forward(r).unwrap())
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
            hang_ups: 0,
            knows_forward: false,
        };
        let (reply, answered, _) = forward_to_fake(answers, 10_000, "SET k v").await;
        assert_eq!(reply, Reply::OK, "the write's own reply");
        let hangs_up = Script {
            hang_ups: usize::MAX,
            knows_forward: false,
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
            .forward(1, &addr, &request("GET n"), false)
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
                Answer::of(&super::super::error_reply(&error)),
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
        let prefix = forward_request(RequestId {
            client_id: u64::MAX,
            seq: u64::MAX,
        });
        let mut wire = BytesMut::new();
        for args in group_with_id(Forwarded::Write(&write), &prefix) {
            encode_request(args, &mut wire);
        }
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
            log_entry(ID, Forwarded::Write(&request("SET k v")), &limits, 1234).unwrap();
        assert!(none.is_empty());
        let decoded = LogCommand::decode(&set).unwrap();
        assert_eq!(
            (decoded.client_id, decoded.request_seq, decoded.stamp_ms),
            (ID.client_id, ID.seq, 1234)
        );
        let queued = vec![
            request("INCR n"),
            request("SELECT 0"),
            request("PING"),
            request("GET n"),
        ];
        let (exec, local) = log_entry(ID, Forwarded::Exec(&queued), &limits, 1234).unwrap();
        let LoggedCommand::Exec(commands) = LogCommand::decode(&exec).unwrap().command else {
            panic!("not a transaction")
        };
        assert_eq!(commands.len(), 3);
        assert_eq!(local, vec![(1, Reply::OK)], "SELECT's reply, answered here");
        assert_eq!(
            log_entry(ID, Forwarded::Write(&request("GET k")), &limits, 1234),
            None
        );
    }
}
