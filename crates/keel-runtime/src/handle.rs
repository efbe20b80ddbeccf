//! The client handle: what an application holds to use its node.
//!
//! A [`Handle`] proposes (`propose`; `propose_batch`: one step of the node, in order, refused
//! whole from the first refusal on), reads linearizably (`read`; `start_read` keeps many in
//! flight), reports status, changes membership, transfers leadership, takes a snapshot, shuts
//! the node down, and, with the `debug-hooks` feature, panics the node task on request
//! (`debug_panic`: a testing hook for fail-stop). Results come as [`Pending`] values with their
//! deadlines; [`DeadlineTimer`] is one timer for the requests a task awaits in turn.
//!
//! `ProposalRefusal` is the answer every proposal gets now, as the node task last published it
//! (keel-engine's `NodeEngine::proposal_refusal`: `NotLeader` on a serving follower of a known
//! leader). The handle gives it without queueing the proposal, so a follower's writes go on to
//! the leader without a round trip through its node task. `RefusalPublisher`, the node task's
//! side, withdraws it when the task ends, however it ends.
//!
//! The handle also reads and sets entries of the client address book (`client_addr`,
//! `set_client_addr`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use keel_core::{
    CommitStatus, FollowerProgress, GroupId, Index, LogId, Membership, MembershipChange, NodeId,
    Role, Status, Term,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::timeout;

use keel_transport::{ClientAddrs, NodeMessageSent, PeerTransport};

use crate::node_messages::{NodeMessageCounters, NodeMessageStats, NODE_MESSAGE_BYTES_MAX};

/// How a proposal's result reaches its proposer.
pub(crate) type ProposalReply = oneshot::Sender<Result<Bytes, ClientError>>;
/// A read runs against the state, or is told why it cannot.
pub(crate) type ReadFn<S> = Box<dyn FnOnce(Result<&S, ClientError>) + Send>;

pub use keel_engine::ClientError;

/// A node's status as the runtime sees it.
#[derive(Clone, Debug)]
pub struct NodeStatus {
    /// The protocol's view: role, term, leader, log positions, membership.
    pub raft: Status,
    /// On the leader: every follower's replication progress.
    pub progress: Vec<FollowerProgress>,
    /// Whether startup replay finished and the node serves clients.
    pub serving: bool,
    /// What startup replayed before serving.
    pub replay: ReplayStats,
    /// Peer messages the transport dropped because a peer's send queue was full or the peer
    /// unknown (Raft retransmits what matters).
    pub dropped_messages: u64,
    /// Peer messages dropped because no honest peer sends them (`RaftNode::validate`), or
    /// because they belong to another Raft group (`NodeConfig::group`).
    pub refused_messages: u64,
    /// Clock offsets measured on heartbeats and whether this node's campaigns are held.
    pub clock: keel_engine::ClockStatus,
}

/// What startup replayed through the apply pipeline before serving.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// The persisted commit index the node replayed to.
    pub target_index: Index,
    /// Entries applied by the replay.
    pub entries: u64,
    /// From the start of `Node::start` to the end of the replay.
    pub duration: Duration,
}

pub(crate) enum Request<S> {
    Propose {
        data: Bytes,
        reply: ProposalReply,
        /// Past this the node drops the request unproposed (`ClientError::NotProposed`): its
        /// caller has given up on it, and proposing it then would act behind the caller's back.
        deadline: tokio::time::Instant,
        /// For [`Handle::propose_tracked`]: where the entry was appended, sent as soon as it
        /// is, and the claim that decides between the node taking the request and its caller
        /// abandoning it.
        tracked: Option<(oneshot::Sender<LogId>, Arc<Claim>)>,
    },
    /// Proposed in order in one step of the node: either all reach the log in this order, or
    /// the ones refused are refused for a reason that held for the whole batch from its first
    /// refusal on (not leader, a bound reached). Dropped unproposed past the deadline.
    ProposeBatch(Vec<(Bytes, ProposalReply)>, tokio::time::Instant),
    /// [`Handle::commit_status`].
    CommitStatus(LogId, oneshot::Sender<CommitStatus>),
    Read(ReadFn<S>),
    Status(oneshot::Sender<NodeStatus>),
    Membership {
        change: MembershipChange,
        addr: Option<SocketAddr>,
        reply: ProposalReply,
    },
    Transfer {
        to: NodeId,
        reply: oneshot::Sender<Result<(), ClientError>>,
    },
    SnapshotNow(oneshot::Sender<Result<Index, ClientError>>),
    /// Stop the node task once the current step's write is handed to storage (`Node::shutdown`).
    Shutdown,
    /// Panic in the node task (see [`Handle::debug_panic`]); the sender is dropped unanswered.
    #[cfg(feature = "debug-hooks")]
    DebugPanic(oneshot::Sender<()>),
}

/// What a node is, as [`Handle::watch`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeView {
    /// The Raft group the node is a member of (`NodeConfig::group`): with many groups in one
    /// process, what tells their events apart.
    pub group: GroupId,
    /// Leader, follower, candidate, pre-candidate or learner.
    pub role: Role,
    /// The node's current term.
    pub term: Term,
    /// The leader this node knows of in `term`, itself included.
    pub leader: Option<NodeId>,
    /// The newest configuration in this node's log (in force once appended, committed or not:
    /// Raft's rule).
    pub membership: Arc<Membership>,
    /// Whether the node serves clients (false while it replays its log at start).
    pub serving: bool,
}

/// A proposal appended to the leader's log ([`Handle::propose_tracked`]).
#[must_use = "a proposal resolves only when awaited"]
pub struct Proposal {
    log_id: LogId,
    result: Pending<Bytes>,
}

impl Proposal {
    /// Where the entry was appended: ask [`Handle::commit_status`] what became of it.
    pub fn log_id(&self) -> LogId {
        self.log_id
    }

    /// The state machine's result once the entry is applied on this node; `Unknown` once the
    /// deadline (fixed when it was proposed) passed: then [`Handle::commit_status`] tells.
    pub async fn wait(self) -> Result<Bytes, ClientError> {
        self.result.wait().await
    }
}

/// Who decides a tracked proposal's fate at its deadline: the node, taking it from its queue, or
/// the caller, abandoning it. Whoever comes first wins; the other sees it.
#[derive(Debug, Default)]
pub(crate) struct Claim(std::sync::atomic::AtomicU8);

const CLAIM_QUEUED: u8 = 0;
const CLAIM_TAKEN: u8 = 1;
const CLAIM_ABANDONED: u8 = 2;

impl Claim {
    /// The node takes the request; false if its caller abandoned it first.
    pub(crate) fn take(&self) -> bool {
        self.settle(CLAIM_TAKEN)
    }

    /// The caller abandons the request; false if the node took it first.
    fn abandon(&self) -> bool {
        self.settle(CLAIM_ABANDONED)
    }

    fn settle(&self, to: u8) -> bool {
        self.0
            .compare_exchange(CLAIM_QUEUED, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Bound on the proposals of one [`Handle::propose_batch`] call.
pub const PROPOSE_BATCH_MAX: usize = 1024;

/// A request queued at the node whose result has not been awaited yet.
///
/// The deadline was fixed when the request was queued: waiting late does not extend it.
#[must_use = "a pending request resolves only when awaited"]
pub struct Pending<T> {
    state: PendingState<T>,
}

enum PendingState<T> {
    Queued {
        rx: oneshot::Receiver<Result<T, ClientError>>,
        deadline: tokio::time::Instant,
    },
    Failed(ClientError),
}

impl<T> Pending<T> {
    fn failed(error: ClientError) -> Self {
        Pending {
            state: PendingState::Failed(error),
        }
    }

    /// The result, or `Unknown` once the deadline passed.
    pub async fn wait(self) -> Result<T, ClientError> {
        match self.state {
            PendingState::Failed(error) => Err(error),
            PendingState::Queued { rx, deadline } => tokio::time::timeout_at(deadline, rx)
                .await
                .map_err(|_| ClientError::Unknown)?
                .map_err(|_| ClientError::Shutdown)?,
        }
    }

    /// [`Pending::wait`] with a timer that the caller keeps for the requests it awaits one
    /// after the other: the same result, without a timer of its own for each request.
    pub async fn wait_with(self, timer: &mut DeadlineTimer) -> Result<T, ClientError> {
        let (mut rx, deadline) = match self.state {
            PendingState::Failed(error) => return Err(error),
            PendingState::Queued { rx, deadline } => (rx, deadline),
        };
        loop {
            timer.arm_by(deadline);
            tokio::select! {
                biased;
                result = &mut rx => return result.map_err(|_| ClientError::Shutdown)?,
                () = timer.sleep.as_mut() => {
                    timer.armed_for = None;
                    if tokio::time::Instant::now() >= deadline {
                        return Err(ClientError::Unknown);
                    }
                }
            }
        }
    }
}

/// A timer for the deadlines of [`Pending`] requests awaited one after the other (see
/// [`Pending::wait_with`]).
///
/// A timer per request would be registered with the runtime's timer wheel and removed from it
/// again for every request (1.6% of the server's CPU samples with 50 connections). This one is moved only when
/// it would fire after the deadline awaited now, or when it fired: requests queued one after the
/// other have deadlines in the same order, so while they are answered in time it is armed once
/// per request timeout, not once per request. When it fires early for the request awaited, it
/// is armed again for that request's deadline.
pub struct DeadlineTimer {
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// The deadline the sleep is armed for; `None` once it fired (or before the first arm).
    armed_for: Option<tokio::time::Instant>,
}

impl DeadlineTimer {
    /// Must be called within a Tokio runtime with timers enabled.
    pub fn new() -> Self {
        DeadlineTimer {
            sleep: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
            armed_for: None,
        }
    }

    /// Makes the timer fire at `deadline` at the latest.
    fn arm_by(&mut self, deadline: tokio::time::Instant) {
        if self.armed_for.is_none_or(|at| at > deadline) {
            self.sleep.as_mut().reset(deadline);
            self.armed_for = Some(deadline);
        }
    }
}

impl Default for DeadlineTimer {
    fn default() -> Self {
        Self::new()
    }
}

/// The answer every proposal gets at this node now, as its node task last published it
/// ([`keel_engine::NodeEngine::proposal_refusal`]: `NotLeader` on a follower of a known leader).
/// A handle gives it to a proposal without queueing it for the node task, so a follower's writes
/// go on to the leader without a round trip through a task that could only refuse them. The
/// answer is the node's as of its last step: one that has just become leader may still refuse a
/// proposal it would take, which is then definitely not applied, as any refusal.
#[derive(Default)]
pub(crate) struct ProposalRefusal {
    /// Whether `refusal` holds one: read without the lock by every proposal.
    refusing: AtomicBool,
    refusal: Mutex<Option<ClientError>>,
}

impl ProposalRefusal {
    /// Called by the node task whenever the answer changes ([`RefusalPublisher`]).
    fn publish(&self, refusal: Option<ClientError>) {
        let mut held = self.refusal.lock().expect("proposal refusal lock");
        self.refusing.store(refusal.is_some(), Ordering::Release);
        *held = refusal;
    }

    fn current(&self) -> Option<ClientError> {
        if !self.refusing.load(Ordering::Acquire) {
            return None;
        }
        self.refusal.lock().expect("proposal refusal lock").clone()
    }
}

/// The node task's side of [`ProposalRefusal`]: publishes the answer when it changes, and
/// withdraws it when the task ends however it ends (stopped, aborted), so that proposals then
/// find the node gone (`Shutdown`) rather than a follower.
pub(crate) struct RefusalPublisher {
    shared: Arc<ProposalRefusal>,
    published: Option<ClientError>,
}

impl RefusalPublisher {
    pub(crate) fn new(shared: Arc<ProposalRefusal>) -> Self {
        RefusalPublisher {
            shared,
            published: None,
        }
    }

    pub(crate) fn publish(&mut self, refusal: Option<ClientError>) {
        if refusal != self.published {
            self.shared.publish(refusal.clone());
            self.published = refusal;
        }
    }
}

impl Drop for RefusalPublisher {
    fn drop(&mut self) {
        self.shared.publish(None);
    }
}

/// A cheap, cloneable handle to a running node.
pub struct Handle<S> {
    pub(crate) requests: mpsc::Sender<Request<S>>,
    pub(crate) request_timeout: Duration,
    pub(crate) client_addrs: Arc<ClientAddrs>,
    pub(crate) transport: Weak<dyn PeerTransport>,
    pub(crate) node_id: NodeId,
    pub(crate) node_message_counters: Arc<NodeMessageCounters>,
    pub(crate) proposal_refusal: Arc<ProposalRefusal>,
    pub(crate) view: watch::Receiver<NodeView>,
    pub(crate) applied: watch::Receiver<Index>,
}

impl<S> Clone for Handle<S> {
    fn clone(&self) -> Self {
        Handle {
            requests: self.requests.clone(),
            request_timeout: self.request_timeout,
            client_addrs: Arc::clone(&self.client_addrs),
            transport: Weak::clone(&self.transport),
            node_id: self.node_id,
            node_message_counters: Arc::clone(&self.node_message_counters),
            proposal_refusal: Arc::clone(&self.proposal_refusal),
            view: self.view.clone(),
            applied: self.applied.clone(),
        }
    }
}

impl<S> Handle<S> {
    /// The node's role, term, leader, membership and whether it serves, as they change: the
    /// receiver holds the newest [`NodeView`] and `changed()` resolves at each change (several
    /// changes between two looks are seen as the last). `changed()` fails once the node stopped
    /// (shut down, or failed: `Node::failed` says why). Watching costs the node nothing: it
    /// publishes a change whether anyone watches or not.
    pub fn watch(&self) -> watch::Receiver<NodeView> {
        let mut view = self.view.clone();
        view.mark_unchanged();
        view
    }

    /// The leader this node knows of (itself included), waiting up to the request timeout for
    /// one to be known: `NotLeader` with no hint if none is by then, `Shutdown` once the node
    /// stopped. Answered from the node's watch ([`Handle::watch`]), not by the node task. A
    /// leader known here may have been deposed meanwhile: a proposal it refuses answers
    /// `NotLeader`, certainly not applied, and can be sent again.
    pub async fn leader(&self) -> Result<NodeId, ClientError> {
        let mut view = self.view.clone();
        let known = timeout(self.request_timeout, async {
            view.wait_for(|v| v.leader.is_some())
                .await
                .map(|v| v.leader)
        })
        .await;
        match known {
            Ok(Ok(Some(leader))) => Ok(leader),
            Ok(Ok(None) | Err(_)) => Err(ClientError::Shutdown),
            Err(_) => Err(ClientError::NotLeader {
                leader: None,
                leader_addr: None,
            }),
        }
    }

    /// Waits until this node's state machine has applied its log through `index` (or restored a
    /// snapshot beyond it), up to the request timeout; resolves with the node's applied index.
    /// For a caller that wrote through the leader and next reads this node's state locally, or
    /// waits for a follower to catch up before it stops another node. It is not a linearizable
    /// read ([`Handle::read`] is): it says only that this node holds what the log holds through
    /// `index`. `Unknown` if the node had not applied it by the deadline, `Shutdown` once the
    /// node stopped. Answered from a watch, not by the node task.
    pub async fn wait_applied(&self, index: Index) -> Result<Index, ClientError> {
        let mut applied = self.applied.clone();
        let reached = timeout(self.request_timeout, async {
            applied.wait_for(|&at| at >= index).await.map(|at| *at)
        })
        .await;
        match reached {
            Ok(Ok(at)) => Ok(at),
            Ok(Err(_)) => Err(ClientError::Shutdown),
            Err(_) => Err(ClientError::Unknown),
        }
    }

    /// A handle to the same node whose requests have `timeout` instead of the node's
    /// `NodeConfig::request_timeout_ms` (queueing included): past it a request resolves with
    /// `Unknown` (or `NotProposed` when it never left the queue).
    pub fn with_request_timeout(&self, timeout: Duration) -> Handle<S> {
        Handle {
            request_timeout: timeout,
            ..self.clone()
        }
    }

    /// Where `id`'s clients reach it, as far as this node knows (its own advertised address,
    /// what members announced in their handshakes, what was set here). Answered locally.
    pub fn client_addr(&self, id: NodeId) -> Option<String> {
        self.client_addrs.get(id)
    }

    /// Every client address this node knows, by member.
    pub fn client_addrs(&self) -> BTreeMap<NodeId, String> {
        self.client_addrs.all()
    }

    /// Sends the node message `message` to peer `to`, or to every peer this node's transport
    /// knows with `None` (`crate::node_messages`): queued without waiting, never through the
    /// log, at most once. What it says: for how many peers it was queued and for how many
    /// dropped at once (a peer's queue full, the peer unknown; counted). Longer than
    /// [`NODE_MESSAGE_BYTES_MAX`]: [`ClientError::Rejected`], sent to nobody; the node stopped:
    /// [`ClientError::Shutdown`].
    pub fn send_node_message(
        &self,
        to: Option<NodeId>,
        message: Bytes,
    ) -> Result<NodeMessageSent, ClientError> {
        if message.len() > NODE_MESSAGE_BYTES_MAX {
            return Err(ClientError::Rejected(format!(
                "node message of {} bytes is longer than {NODE_MESSAGE_BYTES_MAX}",
                message.len()
            )));
        }
        let transport = self.transport.upgrade().ok_or(ClientError::Shutdown)?;
        let sent = transport.send_node_message(to, message);
        (self.node_message_counters).sent(self.node_id, sent.queued, sent.dropped);
        Ok(sent)
    }

    /// This node's node message counts since it started (`crate::node_messages`).
    pub fn node_message_stats(&self) -> NodeMessageStats {
        self.node_message_counters.get()
    }

    /// Records where `id`'s clients reach it, in this node's client address book (what
    /// [`client_addr`](Self::client_addr) answers): for a member whose address the application
    /// learned otherwise, e.g. given with the membership change that adds it, before the member
    /// announced one. Local to this node, not replicated; a later announcement by `id` itself
    /// (its `TransportConfig::advertise_client_addr`, in the handshake of a connection it opens
    /// here) replaces it.
    ///
    /// `addr` must be `host:port` (`keel_transport::wire::valid_client_addr`); anything else is
    /// refused with [`ClientError::Rejected`] and nothing is recorded.
    pub fn set_client_addr(&self, id: NodeId, addr: &str) -> Result<(), ClientError> {
        if !keel_transport::wire::valid_client_addr(addr) {
            return Err(ClientError::Rejected(format!(
                "client address {addr:?} is not host:port"
            )));
        }
        self.client_addrs.set(id, addr);
        Ok(())
    }
}

impl<S: Send + 'static> Handle<S> {
    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, ClientError>>) -> Request<S>,
    ) -> Result<T, ClientError> {
        let (tx, rx) = oneshot::channel();
        let request = make(tx);
        // The whole round trip, queueing included, is bounded: past it the outcome is unknown.
        timeout(self.request_timeout, async {
            self.requests
                .send(request)
                .await
                .map_err(|_| ClientError::Shutdown)?;
            rx.await.map_err(|_| ClientError::Shutdown)?
        })
        .await
        .map_err(|_| ClientError::Unknown)?
    }

    /// Proposes `data` and resolves with the state machine's result once it is applied here.
    pub async fn propose(&self, data: Bytes) -> Result<Bytes, ClientError> {
        if let Some(refusal) = self.proposal_refusal.current() {
            return Err(refusal);
        }
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        self.call(|reply| Request::Propose {
            data,
            reply,
            deadline,
            tracked: None,
        })
        .await
    }

    /// Proposes `data` and returns as soon as the leader appended it, with where
    /// ([`Proposal::log_id`]); the [`Proposal`] then resolves with the state machine's result.
    /// Whatever happens next (a timeout, a lost leader, a crash), the `LogId` says what became
    /// of the entry: [`Handle::commit_status`] answers, from any node, whether it committed.
    ///
    /// Fails without appending anything with `NotLeader`, `Busy`, `Rejected`, `Shutdown`, or
    /// `NotProposed` when the deadline passed before the node took the request (the node then
    /// never proposes it): every error here means the entry is not in any log.
    pub async fn propose_tracked(&self, data: Bytes) -> Result<Proposal, ClientError> {
        if let Some(refusal) = self.proposal_refusal.current() {
            return Err(refusal);
        }
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let (reply, mut result) = oneshot::channel();
        let (appended, mut log_id) = oneshot::channel();
        let claim = Arc::new(Claim::default());
        let request = Request::Propose {
            data,
            reply,
            deadline,
            tracked: Some((appended, Arc::clone(&claim))),
        };
        let appended = tokio::time::timeout_at(deadline, async {
            self.requests
                .send(request)
                .await
                .map_err(|_| ClientError::Shutdown)?;
            Ok::<_, ClientError>((&mut log_id).await)
        })
        .await;
        let appended = match appended {
            Ok(Err(error)) => return Err(error),
            Ok(Ok(appended)) => appended,
            // Too late: unless the node took the request meanwhile, it never will.
            Err(_) if claim.abandon() => return Err(ClientError::NotProposed),
            // The node took it and is deciding now: its answer is on its way.
            Err(_) => log_id.await,
        };
        match appended {
            Ok(log_id) => Ok(Proposal {
                log_id,
                result: Pending {
                    state: PendingState::Queued {
                        rx: result,
                        deadline,
                    },
                },
            }),
            // Refused before it was appended: the refusal is the answer.
            Err(_) => Err(match result.try_recv() {
                Ok(Err(error)) => error,
                _ => ClientError::Shutdown,
            }),
        }
    }

    /// What became of the entry at `log_id`, as this node knows it (keel-core's
    /// `RaftNode::commit_status`), also after the entry was compacted into a snapshot:
    /// `Committed` and `Overwritten` are final; `Pending` (not committed yet, may still be) and
    /// `Unknown` (this node never had that index) are not. On the leader the answer is exact;
    /// a follower's commit index may lag the leader's, so its `Pending` or `Unknown` may be
    /// stale: ask the leader, or read through it first ([`Handle::read`] is a read-index
    /// barrier) for an exact answer. A handle is its node's, so of one Raft group: the answer is
    /// about that group's log ([`NodeView::group`]).
    pub async fn commit_status(&self, log_id: LogId) -> Result<CommitStatus, ClientError> {
        let (tx, rx) = oneshot::channel();
        timeout(self.request_timeout, async {
            self.requests
                .send(Request::CommitStatus(log_id, tx))
                .await
                .map_err(|_| ClientError::Shutdown)?;
            rx.await.map_err(|_| ClientError::Shutdown)
        })
        .await
        .map_err(|_| ClientError::Unknown)?
    }

    /// Proposes every entry of `batch` in this order in one step of the node, and returns one
    /// pending result per entry (same order). Use it for pipelined writes of one client: the
    /// entries cannot be reordered among themselves, and an entry after a refused one is never
    /// applied before it (a refusal — not leader, a bound — holds for the rest of the batch).
    ///
    /// # Panics
    /// If `batch` holds more than [`PROPOSE_BATCH_MAX`] entries.
    pub async fn propose_batch(&self, batch: Vec<Bytes>) -> Vec<Pending<Bytes>> {
        assert!(
            batch.len() <= PROPOSE_BATCH_MAX,
            "proposal batch over its bound"
        );
        if let Some(refusal) = self.proposal_refusal.current() {
            return batch
                .iter()
                .map(|_| Pending::failed(refusal.clone()))
                .collect();
        }
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let mut pending = Vec::with_capacity(batch.len());
        let mut request = Vec::with_capacity(batch.len());
        for data in batch {
            let (tx, rx) = oneshot::channel();
            request.push((data, tx));
            pending.push(Pending {
                state: PendingState::Queued { rx, deadline },
            });
        }
        let sent = tokio::time::timeout_at(
            deadline,
            self.requests.send(Request::ProposeBatch(request, deadline)),
        );
        let error = match sent.await {
            Ok(Ok(())) => return pending,
            Ok(Err(_)) => ClientError::Shutdown,
            Err(_) => ClientError::Unknown,
        };
        pending
            .iter()
            .map(|_| Pending::failed(error.clone()))
            .collect()
    }

    /// Queues a linearizable read (see [`Handle::read`]) and returns it pending, so one client
    /// can have many reads in flight; reads queued one after the other are served in that order.
    pub async fn start_read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&S) -> R + Send + 'static,
    ) -> Pending<R> {
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let (tx, rx) = oneshot::channel();
        let request = Request::Read(Box::new(move |state: Result<&S, ClientError>| {
            let _ = tx.send(state.map(f));
        }));
        match tokio::time::timeout_at(deadline, self.requests.send(request)).await {
            Ok(Ok(())) => Pending {
                state: PendingState::Queued { rx, deadline },
            },
            Ok(Err(_)) => Pending::failed(ClientError::Shutdown),
            Err(_) => Pending::failed(ClientError::Unknown),
        }
    }

    /// Runs `f` against the state machine, linearizably (ReadIndex on the leader). `f` runs in
    /// the apply pipeline: on the apply thread, or on the node task when that thread is idle and
    /// recent reads took less than `NodeConfig::apply_inline_budget_us`. Keep it short (a lookup,
    /// not a scan of the whole state), or set that budget to 0.
    pub async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&S) -> R + Send + 'static,
    ) -> Result<R, ClientError> {
        self.call(|reply| {
            Request::Read(Box::new(move |state: Result<&S, ClientError>| {
                let _ = reply.send(state.map(f));
            }))
        })
        .await
    }

    /// The node's status, answered by its node task (so a node that answers is alive and
    /// stepping); `Shutdown` once it stopped.
    pub async fn status(&self) -> Result<NodeStatus, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request::Status(tx))
            .await
            .map_err(|_| ClientError::Shutdown)?;
        timeout(self.request_timeout, rx)
            .await
            .map_err(|_| ClientError::Unknown)?
            .map_err(|_| ClientError::Shutdown)
    }

    async fn change(
        &self,
        change: MembershipChange,
        addr: Option<SocketAddr>,
    ) -> Result<(), ClientError> {
        self.call(|reply| Request::Membership {
            change,
            addr,
            reply,
        })
        .await
        .map(|_| ())
    }

    /// Adds `id` (reachable at `addr`) as a learner; resolves once the change is applied here.
    pub async fn add_learner(&self, id: NodeId, addr: SocketAddr) -> Result<(), ClientError> {
        self.change(MembershipChange::AddLearner(id), Some(addr))
            .await
    }

    /// Makes a learner a voter (joint consensus; resolves when the joint entry is applied).
    pub async fn promote(&self, id: NodeId) -> Result<(), ClientError> {
        self.change(MembershipChange::AddVoter(id), None).await
    }

    /// Removes `id` from the configuration, voter or learner (joint consensus for a voter);
    /// resolves once the change is applied here. Removing the leader makes it step down once
    /// the change commits.
    pub async fn remove(&self, id: NodeId) -> Result<(), ClientError> {
        self.change(MembershipChange::Remove(id), None).await
    }

    /// Starts a leadership transfer to `to`; resolves once it started (not when it completed).
    pub async fn transfer_leadership(&self, to: NodeId) -> Result<(), ClientError> {
        self.call(|reply| Request::Transfer { to, reply }).await
    }

    /// Takes a snapshot now and resolves with its index once it is durable.
    pub async fn snapshot_now(&self) -> Result<Index, ClientError> {
        self.call(Request::SnapshotNow).await
    }

    /// Makes the node task panic, as a bug there would: a testing hook for what follows (the
    /// node stops with `NodeFailure::Panicked`, [`Node::failed`](crate::Node::failed) resolves;
    /// a process that exits on failure, or whose panic hook aborts, ends). Resolves with
    /// `Shutdown` if the process survives it.
    ///
    /// Only with the `debug-hooks` feature, which no production build needs: it is for an
    /// application's own fail-stop tests (keel's server answers `DEBUG PANIC` with it, and only
    /// when started with `--enable-debug-command`). Never let a client reach it without such an
    /// explicit opt-in.
    #[cfg(feature = "debug-hooks")]
    pub async fn debug_panic(&self) -> Result<(), ClientError> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request::DebugPanic(tx))
            .await
            .map_err(|_| ClientError::Shutdown)?;
        // Never answered: the sender is dropped when the panic unwinds, if the process lives on.
        let _ = rx.await;
        Err(ClientError::Shutdown)
    }

    /// Asks the node task to stop (see `Node::shutdown`); later requests fail with `Shutdown`.
    pub async fn shutdown(&self) {
        let _ = self.requests.send(Request::Shutdown).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;

    type Reply = oneshot::Sender<Result<u32, ClientError>>;

    fn pending(deadline: Instant) -> (Pending<u32>, Reply) {
        let (tx, rx) = oneshot::channel();
        let state = PendingState::Queued { rx, deadline };
        (Pending { state }, tx)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_shared_timer_answers_like_a_timer_per_request() {
        let start = Instant::now();
        let mut timer = DeadlineTimer::new();

        // Answered in time.
        let (p, tx) = pending(start + ms(100));
        tx.send(Ok(1)).unwrap();
        assert_eq!(p.wait_with(&mut timer).await, Ok(1));

        // The timer is armed for 100 ms; the next request's deadline is 300 ms. It fires at
        // 100 ms, which is not this request's deadline: the answer at 250 ms still arrives.
        let (p, tx) = pending(start + ms(300));
        tokio::spawn(async move {
            tokio::time::sleep_until(start + ms(250)).await;
            tx.send(Ok(2)).unwrap();
        });
        assert_eq!(p.wait_with(&mut timer).await, Ok(2));
        assert_eq!(Instant::now(), start + ms(250));

        // Not answered: Unknown at its deadline, not before, not later.
        let (p, _tx) = pending(start + ms(400));
        assert_eq!(p.wait_with(&mut timer).await, Err(ClientError::Unknown));
        assert_eq!(Instant::now(), start + ms(400));

        // An earlier deadline than the one armed for moves the timer earlier.
        let (late, _late_tx) = pending(start + ms(2_000));
        let waited = tokio::time::timeout(ms(50), late.wait_with(&mut timer)).await;
        assert!(waited.is_err(), "still waiting");
        let (p, _tx) = pending(start + ms(500));
        assert_eq!(p.wait_with(&mut timer).await, Err(ClientError::Unknown));
        assert_eq!(Instant::now(), start + ms(500));

        // A dropped sender is a shutdown; a failed request fails at once.
        let (p, tx) = pending(start + ms(900));
        drop(tx);
        assert_eq!(p.wait_with(&mut timer).await, Err(ClientError::Shutdown));
        let failed = Pending::<u32>::failed(ClientError::Shutdown);
        assert_eq!(
            failed.wait_with(&mut timer).await,
            Err(ClientError::Shutdown)
        );
        assert_eq!(Instant::now(), start + ms(500));
    }

    #[tokio::test]
    async fn a_published_refusal_answers_proposals_without_the_node_task() {
        // A handle whose node task holds its queue but never reads it.
        let (requests, mut queue) = mpsc::channel::<Request<()>>(8);
        let handle = Handle {
            requests,
            request_timeout: ms(50),
            client_addrs: Arc::default(),
            transport: Weak::<keel_transport::Transport>::new(),
            node_id: 1,
            node_message_counters: Arc::default(),
            proposal_refusal: Arc::default(),
            view: watch::channel(NodeView {
                group: 0,
                role: Role::Follower,
                term: 0,
                leader: None,
                membership: Arc::default(),
                serving: true,
            })
            .1,
            applied: watch::channel(0).1,
        };
        let not_leader = ClientError::NotLeader {
            leader: Some(2),
            leader_addr: Some("127.0.0.1:7002".parse().unwrap()),
        };
        handle.proposal_refusal.publish(Some(not_leader.clone()));
        assert_eq!(
            handle.propose(Bytes::from_static(b"x")).await,
            Err(not_leader.clone())
        );
        let batch = vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")];
        for pending in handle.propose_batch(batch.clone()).await {
            assert_eq!(pending.wait().await, Err(not_leader.clone()));
        }
        assert!(queue.try_recv().is_err(), "nothing reached the node task");

        // Withdrawn (the node leads, or knows no leader): proposals go to the node task again.
        handle.proposal_refusal.publish(None);
        let pendings = handle.propose_batch(batch).await;
        assert!(matches!(queue.try_recv(), Ok(Request::ProposeBatch(b, _)) if b.len() == 2));
        assert_eq!(pendings.len(), 2);
    }
}
