//! Client sessions as an embedder uses them (`keel_runtime::sessions`): a request proposed many
//! times applies once and is answered alike; replicas fed the same entries write the same
//! snapshot and carry on alike after a restore; idle sessions expire by the log's time; the
//! bounds hold; malformed entries are refused; and on real nodes, a session's retries apply once.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use keel_core::{Index, LogId, NodeId};
use keel_runtime::sessions::{
    Deduplicated, Envelope, Refusal, RetryPolicy, Session, SessionError, ENVELOPE_HEADER_LEN,
    ENVELOPE_VERSION, SESSIONS_MAX, UNACKNOWLEDGED_RESULTS_MAX,
};
use keel_runtime::{
    wall_clock_ms, ApplyError, ClientError, Handle, Node, NodeConfig, RestoreError, SnapshotWriter,
    StateMachine,
};

mod common;

const WAIT: Duration = Duration::from_secs(20);
/// A proposer's clock: some moment of 2023, in ms since the Unix epoch.
const T0: u64 = 1_700_000_000_000;
const MINUTE: u64 = 60_000;

/// Adds the little-endian u64 of each entry; answers the new total; refuses anything else.
#[derive(Clone, Debug, Default)]
struct Tally {
    total: u64,
    applied: u64,
}

impl StateMachine for Tally {
    fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, ApplyError> {
        let Ok(add) = data[..].try_into().map(u64::from_le_bytes) else {
            return Err(ApplyError::Refused(Bytes::from_static(b"not a u64")));
        };
        self.total += add;
        self.applied += 1;
        Ok(Bytes::copy_from_slice(&self.total.to_le_bytes()))
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        let mut bytes = self.total.to_le_bytes().to_vec();
        bytes.extend_from_slice(&self.applied.to_le_bytes());
        Box::new(bytes)
    }

    fn restore(&mut self, _last: LogId, data: &mut dyn std::io::Read) -> Result<(), RestoreError> {
        let mut bytes = [0u8; 16];
        data.read_exact(&mut bytes)?;
        self.total = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        self.applied = u64::from_le_bytes(bytes[8..].try_into().unwrap());
        Ok(())
    }
}

fn add(n: u64) -> Bytes {
    Bytes::copy_from_slice(&n.to_le_bytes())
}

fn total(answer: &Bytes) -> u64 {
    u64::from_le_bytes(answer[..].try_into().expect("a u64 answer"))
}

/// Request `seq` of `session` adding `n`, every earlier one acknowledged, stamped `time_ms`.
fn request(session: u64, seq: u64, time_ms: u64, n: u64) -> Bytes {
    Envelope::request(session, seq, seq, time_ms, add(n)).encode()
}

/// The session layer's refusal in an apply's answer.
fn refusal(answer: Result<Bytes, ApplyError>) -> Refusal {
    match answer {
        Err(ApplyError::Refused(bytes)) => Refusal::decode(&bytes).expect("a session refusal"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A replica fed entries one by one, at consecutive log indexes, as the apply pipeline does.
struct Replica {
    machine: Deduplicated<Tally>,
    next_index: Index,
}

impl Replica {
    fn new(timeout: Duration) -> Replica {
        Replica {
            machine: Deduplicated::with_session_timeout(Tally::default(), timeout),
            next_index: 1,
        }
    }

    fn apply(&mut self, entry: &Bytes) -> Result<Bytes, ApplyError> {
        let index = self.next_index;
        self.next_index += 1;
        self.machine.apply(LogId::new(1, index), entry)
    }

    /// Registers a session at `time_ms`: its id.
    fn register(&mut self, time_ms: u64) -> u64 {
        total(
            &self
                .apply(&Envelope::register(time_ms).encode())
                .expect("registered"),
        )
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        self.machine.snapshot_view().write_to(&mut bytes).unwrap();
        bytes
    }

    fn inner(&self) -> &Tally {
        self.machine.inner()
    }
}

#[test]
fn a_request_applied_twice_applies_once_and_is_answered_alike() {
    let mut replica = Replica::new(Duration::from_secs(3600));
    let session = replica.register(T0);
    assert_eq!(session, 1, "the session id is the register's log index");

    let entry = request(session, 1, T0, 5);
    let first = replica.apply(&entry);
    let copy = replica.apply(&entry);
    assert_eq!(first, Ok(add(5)));
    assert_eq!(copy, first, "the copy is answered with the first answer");
    assert_eq!(
        replica.inner().applied,
        1,
        "the inner machine applied it once"
    );

    // An inner refusal is kept and replayed as a refusal, the inner machine untouched.
    let refused = Envelope::request(session, 2, 2, T0, Bytes::from_static(b"?")).encode();
    let reason = Refusal::Inner(Bytes::from_static(b"not a u64"));
    assert_eq!(refusal(replica.apply(&refused)), reason);
    assert_eq!(refusal(replica.apply(&refused)), reason);
    assert_eq!(replica.inner().applied, 1);

    // Once acknowledged (request 3 says 1 and 2 were answered), a late copy applies nothing.
    assert_eq!(replica.apply(&request(session, 3, T0, 1)), Ok(add(6)));
    assert_eq!(refusal(replica.apply(&entry)), Refusal::AlreadyAnswered);
    assert_eq!(replica.inner().total, 6);
}

/// Entries of several sessions: copies, a refusal, acknowledgements, a malformed entry, a clock
/// that goes back, a close.
fn some_entries() -> Vec<Bytes> {
    let mut entries = vec![Envelope::register(T0).encode()]; // session 1
    entries.push(Envelope::register(T0 + 10).encode()); // session 2
    entries.push(Envelope::register(T0 + 20).encode()); // session 3
    for seq in 1..=5 {
        // Session 1 sends each request twice.
        entries.push(request(1, seq, T0 + 100 * seq, seq));
        entries.push(request(1, seq, T0 + 100 * seq, seq));
        // Session 2 pipelines, acknowledging nothing: its answers are kept.
        entries.push(Envelope::request(2, seq, 1, T0 - 5 * MINUTE, add(10)).encode());
    }
    entries.push(Envelope::request(1, 6, 6, T0 + 700, Bytes::from_static(b"?")).encode());
    entries.push(Bytes::from_static(b"\x01\x02short"));
    entries.push(Envelope::close(3, T0 + 800).encode());
    entries
}

#[test]
fn replicas_write_the_same_snapshot_and_a_restored_one_carries_on_alike() {
    let timeout = Duration::from_secs(600);
    let (mut a, mut b) = (Replica::new(timeout), Replica::new(timeout));
    for entry in some_entries() {
        assert_eq!(a.apply(&entry), b.apply(&entry));
    }
    let snapshot = a.snapshot();
    assert_eq!(snapshot, b.snapshot(), "byte for byte");
    assert_eq!(a.machine.session_count(), 2, "session 3 closed");
    assert_eq!(a.machine.unacknowledged_results(2), Some(5));

    let mut restored = Replica::new(timeout);
    restored
        .machine
        .restore(LogId::ZERO, &mut &snapshot[..])
        .expect("restored");
    restored.next_index = a.next_index;
    assert_eq!(restored.snapshot(), snapshot);
    assert_eq!(restored.inner().total, a.inner().total);

    // After the restore, alike on both: a copy of a request answered and acknowledged before
    // it is refused, a copy of one not acknowledged is answered, new ones apply, and a session
    // idle past the timeout expires.
    let later = [
        request(1, 5, T0 + 900, 5),
        Envelope::request(2, 3, 1, T0 + 900, add(10)).encode(),
        request(1, 7, T0 + 1_000, 7),
        Envelope::request(2, 6, 6, T0 + 9 * MINUTE, add(10)).encode(),
        // Session 1 was last active at T0 + 1 s: idle past the 10 minutes by now.
        request(1, 8, T0 + 11 * MINUTE, 8),
    ];
    let before = a.inner().applied;
    for entry in &later {
        assert_eq!(restored.apply(entry), a.apply(entry));
    }
    assert_eq!(
        a.inner().applied,
        before + 2,
        "only requests 1/7 and 2/6 applied"
    );
    assert_eq!(
        refusal(a.apply(&request(1, 9, T0 + 11 * MINUTE, 1))),
        Refusal::SessionExpired
    );
    assert_eq!(restored.snapshot(), a.snapshot());
}

#[test]
fn an_idle_session_expires_by_log_time_and_an_active_one_does_not() {
    let mut replica = Replica::new(Duration::from_secs(3600));
    let active = replica.register(T0);
    let idle = replica.register(T0);
    assert!(replica
        .apply(&request(active, 1, T0 + 40 * MINUTE, 1))
        .is_ok());
    // 70 minutes in: `active` was idle 30 of them, `idle` 70.
    assert!(replica
        .apply(&request(active, 2, T0 + 70 * MINUTE, 1))
        .is_ok());
    assert_eq!(replica.machine.session_count(), 1);
    assert_eq!(
        refusal(replica.apply(&request(idle, 1, T0 + 70 * MINUTE, 1))),
        Refusal::SessionExpired
    );
    assert_eq!(
        replica.inner().applied,
        2,
        "the expired session's request did not apply"
    );
}

#[test]
fn the_log_time_never_goes_back_when_a_proposer_s_clock_does() {
    let mut replica = Replica::new(Duration::from_secs(3600));
    let session = replica.register(T0 + 30 * MINUTE);
    let other = replica.register(T0 + 30 * MINUTE);
    // A proposer whose clock is an hour behind: the log time stays, and the session counts as
    // active now, not an hour ago.
    assert!(replica
        .apply(&request(session, 1, T0 - 30 * MINUTE, 1))
        .is_ok());
    assert_eq!(replica.machine.log_time_ms(), T0 + 30 * MINUTE);
    assert!(replica
        .apply(&request(session, 2, T0 + 80 * MINUTE, 1))
        .is_ok());
    assert_eq!(replica.machine.log_time_ms(), T0 + 80 * MINUTE);
    // Another clock far behind touches `other`, at the log time: it is not expired later on
    // the strength of its stale stamp...
    assert!(replica.apply(&request(other, 1, T0, 1)).is_ok());
    assert!(replica
        .apply(&request(other, 2, T0 + 81 * MINUTE, 1))
        .is_ok());
    // ...and expiry goes on as the log time moves.
    assert_eq!(
        refusal(replica.apply(&request(session, 3, T0 + 141 * MINUTE, 1))),
        Refusal::SessionExpired
    );
    assert_eq!(replica.machine.log_time_ms(), T0 + 141 * MINUTE);
}

#[test]
fn too_many_sessions_are_refused_until_one_closes() {
    let mut replica = Replica::new(Duration::from_secs(3600));
    for _ in 0..SESSIONS_MAX {
        replica.register(T0);
    }
    let over = replica.apply(&Envelope::register(T0).encode());
    assert_eq!(refusal(over), Refusal::TooManySessions);
    assert_eq!(replica.machine.session_count(), SESSIONS_MAX);
    assert!(replica.apply(&Envelope::close(1, T0).encode()).is_ok());
    let id = replica.register(T0);
    assert_eq!(id, replica.next_index - 1, "registered at its own index");
}

#[test]
fn too_many_unacknowledged_answers_are_refused_until_acknowledged() {
    let mut replica = Replica::new(Duration::from_secs(3600));
    let session = replica.register(T0);
    let max = UNACKNOWLEDGED_RESULTS_MAX as u64;
    // A pipelining client that acknowledges nothing.
    for seq in 1..=max {
        let entry = Envelope::request(session, seq, 1, T0, add(1)).encode();
        assert!(replica.apply(&entry).is_ok());
    }
    let over = Envelope::request(session, max + 1, 1, T0, add(1)).encode();
    assert_eq!(
        refusal(replica.apply(&over)),
        Refusal::TooManyUnacknowledged
    );
    assert_eq!(
        replica.inner().applied,
        max,
        "the refused request did not apply"
    );
    // Acknowledging all but the last two makes room, and drops those answers.
    let entry = Envelope::request(session, max + 1, max - 1, T0, add(1)).encode();
    assert!(replica.apply(&entry).is_ok());
    assert_eq!(replica.machine.unacknowledged_results(session), Some(3));
}

#[test]
fn memory_stays_bounded_over_ten_thousand_requests() {
    let mut replica = Replica::new(Duration::from_secs(3600));
    let session = replica.register(T0);
    let mut snapshot_len = None;
    for seq in 1..=10_000 {
        let entry = request(session, seq, T0 + seq, 1);
        assert_eq!(replica.apply(&entry), Ok(add(seq)));
        assert_eq!(replica.machine.unacknowledged_results(session), Some(1));
        if seq == 100 {
            snapshot_len = Some(replica.snapshot().len());
        }
    }
    assert_eq!(
        Some(replica.snapshot().len()),
        snapshot_len,
        "the table did not grow"
    );
}

#[test]
fn a_malformed_entry_is_refused_and_changes_nothing() {
    let mut replica = Replica::new(Duration::from_secs(3600));
    let session = replica.register(T0);
    let before = replica.snapshot();
    let valid = request(session, 1, T0 + MINUTE, 1);
    let mut unknown_version = valid.to_vec();
    unknown_version[0] = 9;
    let mut malformed = vec![Bytes::new(), Bytes::from(unknown_version)];
    malformed.extend((1..ENVELOPE_HEADER_LEN).map(|length| valid.slice(..length)));
    for entry in &malformed {
        assert!(
            matches!(refusal(replica.apply(entry)), Refusal::Malformed(_)),
            "{entry:?}"
        );
    }
    assert_eq!(
        replica.snapshot(),
        before,
        "nothing changed, not even the log time"
    );
    assert_eq!(replica.inner().applied, 0);

    // Pseudo-random bytes, half of them with the version byte right: refused, never a panic.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for length in 0..4_000 {
        let mut bytes = Vec::new();
        for _ in 0..length % 64 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            bytes.push((state >> 56) as u8);
        }
        if length % 2 == 0 && !bytes.is_empty() {
            bytes[0] = ENVELOPE_VERSION;
        }
        let entry = Bytes::from(bytes);
        let answer = replica.apply(&entry);
        assert!(
            matches!(
                refusal(answer),
                Refusal::Malformed(_) | Refusal::SessionExpired
            ),
            "{entry:?}"
        );
    }
    assert_eq!(replica.inner().applied, 0);
}

type Handles = BTreeMap<NodeId, Handle<Deduplicated<Tally>>>;

fn tally() -> Deduplicated<Tally> {
    Deduplicated::new(Tally::default())
}

async fn inner_tally(handle: &Handle<Deduplicated<Tally>>) -> Tally {
    handle
        .read(|machine: &Deduplicated<Tally>| machine.inner().clone())
        .await
        .expect("a read")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_an_applied_request_applies_once_on_a_node() {
    let dir = common::scratch_dir("sessions-copy");
    let (node, handle) = common::one_voter(&dir, tally, WAIT).await;
    let handles: Handles = BTreeMap::from([(1, handle.clone())]);
    let mut session = Session::open(handles.clone()).await.expect("opened");
    assert_eq!(session.propose(add(2)).await.map(|t| total(&t)), Ok(2));

    // Request 2 proposed twice through the bare handle, as by a client whose first answer
    // was lost: two entries in the log, one application.
    let entry = request(session.id(), 2, wall_clock_ms(), 3);
    let first = handle.propose(entry.clone()).await.expect("applied");
    let copy = handle.propose(entry).await.expect("answered");
    assert_eq!((total(&first), total(&copy)), (5, 5));

    // Request 3 proposed and its answer dropped unawaited; the session, resumed at that number,
    // retries it and gets the answer of the first application.
    let lost = request(session.id(), 3, wall_clock_ms(), 4);
    let appended = handle.propose_tracked(lost).await.expect("appended");
    let index = appended.log_id().index;
    drop(appended);
    common::wait_applied(&handle, index, WAIT).await;
    let mut resumed = Session::resume(handles, session.id(), 3);
    assert_eq!(resumed.propose(add(4)).await.map(|t| total(&t)), Ok(9));

    let state = inner_tally(&handle).await;
    assert_eq!(
        (state.total, state.applied),
        (9, 3),
        "each request applied once"
    );
    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_of_requests_whose_outcome_was_in_doubt_apply_once() {
    let dir = common::scratch_dir("sessions-doubt");
    let (node, handle) = common::one_voter(&dir, tally, WAIT).await;
    let handles: Handles = BTreeMap::from([(1, handle.clone())]);
    // So short a timeout that answers come too late (`Unknown`), or the request is dropped
    // from the queue unproposed (`NotProposed`); either way the client cannot tell.
    let hasty: Handles =
        BTreeMap::from([(1, handle.with_request_timeout(Duration::from_millis(1)))]);
    let quick_retries = RetryPolicy {
        attempts: 5,
        backoff_min: Duration::from_millis(1),
        backoff_max: Duration::from_millis(1),
    };
    let id = Session::open(handles.clone()).await.expect("opened").id();
    let applied_before = handle.status().await.expect("status").raft.applied;
    for seq in 1..=10 {
        let mut hasty_session = Session::resume(hasty.clone(), id, seq).with_retry(quick_retries);
        match hasty_session.propose(add(1)).await {
            Ok(answer) => assert_eq!(total(&answer), seq),
            Err(SessionError::Client(ClientError::Unknown | ClientError::NotProposed)) => {}
            Err(other) => panic!("request {seq}: {other}"),
        }
        // The patient retry of the same request: answered with the total after its one
        // application, whatever the hasty attempts did.
        let mut patient = Session::resume(handles.clone(), id, seq);
        let answer = patient.propose(add(1)).await.expect("answered");
        assert_eq!(total(&answer), seq, "request {seq} applied once");
    }
    let entries = handle.status().await.expect("status").raft.applied - applied_before;
    assert!(
        entries > 10,
        "some hasty attempts reached the log ({entries} entries)"
    );
    let state = inner_tally(&handle).await;
    assert_eq!((state.total, state.applied), (10, 10));
    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_on_a_node_and_its_client_is_told() {
    let dir = common::scratch_dir("sessions-expiry");
    let short = || Deduplicated::with_session_timeout(Tally::default(), Duration::from_millis(300));
    let (node, handle) = common::one_voter(&dir, short, WAIT).await;
    let handles: Handles = BTreeMap::from([(1, handle.clone())]);
    let mut idle = Session::open(handles.clone()).await.expect("opened");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The register moves the log time past the idle session's timeout.
    let mut active = Session::open(handles.clone()).await.expect("opened");
    assert_eq!(
        idle.propose(add(1)).await,
        Err(SessionError::SessionExpired)
    );
    assert_eq!(active.propose(add(1)).await.map(|t| total(&t)), Ok(1));

    // A closed session is unknown too.
    let id = active.id();
    active.close().await.expect("closed");
    let mut closed = Session::resume(handles, id, 2);
    assert_eq!(
        closed.propose(add(1)).await,
        Err(SessionError::SessionExpired)
    );
    assert_eq!(inner_tally(&handle).await.applied, 1);
    node.shutdown().await;
    common::remove_scratch_dir(&dir);
}

fn three_node_config(
    dir: &std::path::Path,
    addrs: &BTreeMap<NodeId, std::net::SocketAddr>,
    id: NodeId,
) -> NodeConfig {
    let mut config = NodeConfig::new(id, 0x5e55, dir.join(format!("n{id}")));
    config.peer_listen_addr = addrs[&id];
    config.peers = addrs.clone();
    config.initial_members = vec![1, 2, 3];
    config.tick_ms = 10;
    // Elections after 300-600 ms of silence, so that a loaded machine keeps its leader.
    config.raft.election_timeout_ticks = 30;
    config.raft.heartbeat_interval_ticks = 3;
    config.request_timeout_ms = 2_000;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_follows_the_leader_across_a_failover_and_applies_each_request_once() {
    let dir = common::scratch_dir("sessions-failover");
    let addrs: BTreeMap<NodeId, _> = (1..=3).map(|id| (id, common::free_addr())).collect();
    let mut nodes: BTreeMap<NodeId, Node<Deduplicated<Tally>>> = BTreeMap::new();
    for id in 1..=3 {
        let node = common::start_node(|| three_node_config(&dir, &addrs, id), tally, WAIT).await;
        nodes.insert(id, node);
    }
    let handles: Handles = nodes.iter().map(|(&id, n)| (id, n.handle())).collect();
    let patient = RetryPolicy {
        attempts: 60,
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(200),
    };
    let leader = common::leader(&nodes, WAIT).await;
    let mut session = Session::open(handles)
        .await
        .expect("opened")
        .with_retry(patient);
    for n in 1..=20 {
        if n == 11 {
            // The leader stops mid-session: the session finds the next one.
            nodes.remove(&leader).expect("running").stop().await;
        }
        let answer = session.propose(add(1)).await.expect("answered");
        assert_eq!(total(&answer), n, "request {n} applied once");
    }
    let new_leader = common::leader(&nodes, WAIT).await;
    assert_ne!(new_leader, leader);
    let state = inner_tally(&nodes[&new_leader].handle()).await;
    assert_eq!((state.total, state.applied), (20, 20));
    common::stop_nodes_and_remove_dir(&mut nodes, &dir);
}
