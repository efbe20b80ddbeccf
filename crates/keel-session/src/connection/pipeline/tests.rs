use bytes::Bytes;
use keel_engine::ClientError;

use super::*;
use crate::connection::{NodeInfo, NodeReport};
use keel_redis::state_machine::{ApplyReply, WriteReply};
use keel_resp::Limits;

/// The wall clock the tests' batches are taken at.
const NOW_MS: u64 = 1_700_000_000_000;

struct NoNode;

impl NodeInfo for NoNode {
    fn status(&self) -> NodeReport {
        NodeReport::default()
    }
}

/// A connection as the server drives it; handles are numbers the tests choose.
struct Conn {
    protocol: ClientConnection,
    pipeline: Pipeline<u32, u32>,
}

fn conn() -> Conn {
    Conn {
        protocol: ClientConnection::new(1, "test", Limits::default()),
        pipeline: Pipeline::new(77),
    }
}

fn args(words: &str) -> Vec<Bytes> {
    words
        .split(' ')
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

impl Conn {
    /// Intake, dispatch and admission of one request.
    fn send(&mut self, words: &str) -> Option<Admission> {
        self.send_with(words, None)
    }

    fn send_with(&mut self, words: &str, given: Option<RequestId>) -> Option<Admission> {
        let args = args(words);
        let announced = match self.pipeline.intake(&args, &self.protocol) {
            Intake::Answered => return None,
            Intake::Dispatch(id) => id,
        };
        let dispatch = self.protocol.dispatch(&args, &NoNode);
        Some(self.pipeline.admit(Request {
            dispatch,
            args,
            given_id: given.or(announced),
        }))
    }

    /// Every reply that can leave now, and what the front waits for.
    fn released(&mut self) -> (Vec<Reply>, Release<u32, u32>) {
        let mut sent = Vec::new();
        loop {
            match self.pipeline.release() {
                Release::Send(reply) => sent.push(reply),
                other => return (sent, other),
            }
        }
    }
}

fn queued(admission: Option<Admission>) {
    assert!(
        matches!(admission, Some(Admission::Queued)),
        "{admission:?}"
    );
}

fn applied(reply: WriteReply) -> Bytes {
    ApplyReply::Write(reply).to_bytes()
}

fn not_leader(leader: Option<u64>) -> ClientError {
    ClientError::NotLeader {
        leader,
        leader_addr: None,
    }
}

fn decode(entry: &Bytes) -> LogCommand {
    LogCommand::decode(entry).expect("a valid entry")
}

#[test]
fn consecutive_writes_are_one_batch_in_request_order_under_the_next_seqs() {
    let mut c = conn();
    queued(c.send("SET a 1"));
    queued(c.send("PING"));
    queued(c.send("CAS a 1 2"));
    assert_eq!(c.pipeline.run(), Some(RunKind::Write));
    let batch = c.pipeline.take_batch(NOW_MS);
    let slots: Vec<u64> = batch.iter().map(|(slot, _)| *slot).collect();
    assert_eq!(slots, [0, 2]);
    let ids: Vec<(u64, u64)> = batch
        .iter()
        .map(|(_, e)| decode(e))
        .map(|e| (e.client_id, e.request_seq))
        .collect();
    assert_eq!(ids, [(77, 1), (77, 2)]);
    assert!(c.pipeline.take_batch(NOW_MS).is_empty(), "proposed once");
    c.pipeline.proposed([10, 11]);
    let (sent, front) = c.released();
    assert!(sent.is_empty());
    assert!(matches!(
        front,
        Release::Await(0, Some(InFlight::Write(10)))
    ));
    // The second write's outcome comes first; its reply waits for the first's, and PING's
    // answer leaves in between.
    c.pipeline
        .settle_write(2, Ok(applied(WriteReply::Integer(1))));
    assert!(matches!(c.pipeline.release(), Release::Await(0, None)));
    c.pipeline.settle_write(0, Ok(applied(WriteReply::Ok)));
    let (sent, front) = c.released();
    assert_eq!(sent, [Reply::OK, Reply::PONG, Reply::Integer(1)]);
    assert!(matches!(front, Release::Idle));
    assert_eq!(c.pipeline.run(), None);
}

#[test]
fn a_read_waits_for_the_earlier_writes_and_a_write_for_the_earlier_reads() {
    let mut c = conn();
    queued(c.send("SET a 1"));
    let Some(Admission::AfterAll(read)) = c.send("GET a") else {
        panic!("a read after a write must wait for it")
    };
    let batch = c.pipeline.take_batch(NOW_MS);
    assert_eq!(batch.len(), 1);
    c.pipeline.proposed([5]);
    assert!(matches!(
        c.pipeline.release(),
        Release::Await(0, Some(InFlight::Write(5)))
    ));
    c.pipeline.settle_write(0, Ok(applied(WriteReply::Ok)));
    let (sent, front) = c.released();
    assert_eq!(sent, [Reply::OK]);
    assert!(matches!(front, Release::Idle));
    let Admission::StartRead { slot, .. } = c.pipeline.admit(read) else {
        panic!("admitted once the writes are answered")
    };
    assert_eq!(
        slot, 1,
        "slots are numbered for the connection's whole life"
    );
    c.pipeline.read_started(slot, 9);
    assert!(matches!(
        c.send("GET b"),
        Some(Admission::StartRead { slot: 2, .. })
    ));
    assert!(
        matches!(c.send("DEL a"), Some(Admission::AfterAll(_))),
        "a write after reads waits for them"
    );
    assert!(matches!(
        c.pipeline.release(),
        Release::Await(1, Some(InFlight::Read(9)))
    ));
}

#[test]
fn local_answers_take_their_place_without_waiting() {
    let mut c = conn();
    assert!(matches!(
        c.send("GET a"),
        Some(Admission::StartRead { slot: 0, .. })
    ));
    queued(c.send("ECHO hi"));
    assert!(
        matches!(c.send("GET b"), Some(Admission::StartRead { slot: 2, .. })),
        "a local answer does not end the read run"
    );
    c.pipeline.settle(2, Ok(Reply::Null));
    c.pipeline
        .settle(0, Ok(Reply::Bulk(Bytes::from_static(b"1"))));
    let (sent, _) = c.released();
    assert_eq!(
        sent,
        [
            Reply::Bulk(Bytes::from_static(b"1")),
            Reply::Bulk(Bytes::from_static(b"hi")),
            Reply::Null
        ]
    );
}

#[test]
fn a_transaction_is_one_write_of_the_run_forwarded_as_its_requests() {
    let mut c = conn();
    queued(c.send("SET x 0"));
    queued(c.send("MULTI"));
    queued(c.send("GET a"));
    queued(c.send("SET a 2"));
    queued(c.send("EXEC"));
    let batch = c.pipeline.take_batch(NOW_MS);
    assert_eq!(batch.len(), 2, "the SET and the whole transaction");
    let exec = decode(&batch[1].1);
    assert_eq!(exec.request_seq, 2);
    assert!(matches!(exec.command, LoggedCommand::Exec(ref commands) if commands.len() == 2));
    c.pipeline.proposed([1, 2]);
    c.pipeline.settle_write(0, Ok(applied(WriteReply::Ok)));
    c.pipeline.settle_write(4, Err(not_leader(Some(3))));
    let (sent, front) = c.released();
    assert_eq!(
        sent,
        [
            Reply::OK,
            Reply::OK,
            Reply::Simple("QUEUED".into()),
            Reply::Simple("QUEUED".into())
        ]
    );
    let Release::Resolve { slot, relay, .. } = front else {
        panic!("the refused EXEC is resolved at the front: {front:?}")
    };
    assert_eq!(slot, 4);
    let id = RequestId {
        client_id: 77,
        seq: 2,
    };
    assert_eq!(
        relay,
        Relay::WithId(id, WriteRequest::Exec(vec![args("GET a"), args("SET a 2")]))
    );
}

#[test]
fn a_refused_write_is_resolved_only_once_everything_before_it_is_answered() {
    let mut c = conn();
    queued(c.send("SET a 1"));
    queued(c.send("SET b 2"));
    queued(c.send("SET c 3"));
    c.pipeline.take_batch(NOW_MS);
    c.pipeline.proposed([1, 2, 3]);
    // The engine refused the batch from its second entry on.
    c.pipeline.settle_write(2, Err(not_leader(Some(3))));
    c.pipeline.settle_write(1, Err(not_leader(Some(3))));
    assert!(matches!(
        c.pipeline.release(),
        Release::Await(0, Some(InFlight::Write(1)))
    ));
    c.pipeline.settle_write(0, Ok(applied(WriteReply::Ok)));
    let (sent, front) = c.released();
    assert_eq!(sent, [Reply::OK]);
    let Release::Resolve { slot: 1, error, .. } = front else {
        panic!("{front:?}")
    };
    assert_eq!(error, not_leader(Some(3)));
    // The next refused write waits for this one's resolution (its forward).
    assert!(matches!(c.pipeline.release(), Release::Await(1, None)));
    c.pipeline.answer(1, Reply::OK);
    let (sent, front) = c.released();
    assert_eq!(sent, [Reply::OK]);
    let Release::Resolve { slot: 2, relay, .. } = front else {
        panic!("{front:?}")
    };
    let id = RequestId {
        client_id: 77,
        seq: 3,
    };
    assert_eq!(
        relay,
        Relay::WithId(id, WriteRequest::Write(args("SET c 3")))
    );
}

/// A follower's pipelined writes, all refused: behind the one resolved, each next write's
/// handle is handed out, then its refusal, until a request that is no refused write (a read).
/// Their replies leave in request order however they were answered.
#[test]
fn the_refused_writes_behind_a_resolved_one_are_handed_out_to_be_forwarded_together() {
    let mut c = conn();
    queued(c.send("SET a 1"));
    queued(c.send("SET b 2"));
    queued(c.send("MULTI"));
    queued(c.send("INCR n"));
    queued(c.send("EXEC"));
    let Some(Admission::AfterAll(read)) = c.send("GET a") else {
        panic!("a read waits for the writes")
    };
    c.pipeline.take_batch(NOW_MS);
    c.pipeline.proposed([1, 2, 3]);
    c.pipeline.settle_write(0, Err(not_leader(Some(3))));
    let Release::Resolve { slot: 0, .. } = c.pipeline.release() else {
        panic!("the front is refused")
    };
    assert!(matches!(c.pipeline.behind(0), Behind::Await(1, 2)));
    // Handed out once: asked again before it is settled, there is nothing to do.
    assert!(matches!(c.pipeline.behind(0), Behind::Stop));
    c.pipeline.settle_write(1, Err(not_leader(Some(3))));
    let Behind::Refused {
        slot: 1,
        error,
        id,
        request,
    } = c.pipeline.behind(0)
    else {
        panic!("the second write is refused")
    };
    assert_eq!(error, not_leader(Some(3)));
    assert_eq!(
        id,
        RequestId {
            client_id: 77,
            seq: 2
        }
    );
    assert_eq!(request, WriteRequest::Write(args("SET b 2")));
    // MULTI and INCR (slots 2 and 3) were answered here (`+OK`, `+QUEUED`): no writes, they
    // end the run. EXEC is slot 4.
    assert!(matches!(c.pipeline.behind(1), Behind::Stop));
    // Answered out of order, released in order.
    c.pipeline.answer(1, Reply::Integer(2));
    c.pipeline.answer(0, Reply::OK);
    let (sent, front) = c.released();
    assert_eq!(
        sent,
        [
            Reply::OK,
            Reply::Integer(2),
            Reply::OK,
            Reply::simple("QUEUED")
        ]
    );
    assert!(matches!(front, Release::Await(4, Some(InFlight::Write(3)))));
    c.pipeline.settle_write(4, Err(not_leader(Some(3))));
    let Release::Resolve { slot: 4, .. } = c.pipeline.release() else {
        panic!("the transaction is refused")
    };
    assert!(
        matches!(c.pipeline.behind(4), Behind::Stop),
        "nothing behind"
    );
    c.pipeline.answer(4, Reply::Array(vec![Reply::Integer(1)]));
    let (sent, front) = c.released();
    assert_eq!(sent, [Reply::Array(vec![Reply::Integer(1)])]);
    assert!(matches!(front, Release::Idle));
    // The read comes in only now, and a read is never handed out as a write.
    let Admission::StartRead { slot: 5, .. } = c.pipeline.admit(read) else {
        panic!("the read starts")
    };
    assert!(matches!(c.pipeline.behind(4), Behind::Stop));
}

#[test]
fn a_refused_read_is_relayed_once_as_it_is() {
    let mut c = conn();
    let Some(Admission::StartRead { slot, .. }) = c.send("GET k") else {
        panic!()
    };
    c.pipeline.settle(slot, Err(not_leader(Some(2))));
    let Release::Resolve { relay, .. } = c.pipeline.release() else {
        panic!()
    };
    assert_eq!(relay, Relay::Once(args("GET k")));
}

#[test]
fn a_given_id_is_used_and_takes_no_seq_of_the_connection() {
    let mut c = conn();
    let given = RequestId {
        client_id: 5,
        seq: 40,
    };
    queued(c.send_with("SET a 1", Some(given)));
    queued(c.send("SET b 1"));
    let batch = c.pipeline.take_batch(NOW_MS);
    let ids: Vec<(u64, u64)> = batch
        .iter()
        .map(|(_, e)| decode(e))
        .map(|e| (e.client_id, e.request_seq))
        .collect();
    assert_eq!(ids, [(5, 40), (77, 1)]);
}

#[test]
fn raft_forward_announces_an_id_only_on_a_forwarding_connection() {
    let mut c = conn();
    // Anywhere else it goes on to be dispatched (an unknown command there).
    assert!(matches!(
        c.send("RAFT.FORWARD 9 4"),
        Some(Admission::Queued)
    ));
    queued(c.send(&format!("CLIENT SETNAME {}", command::FORWARD_CLIENT_NAME)));
    assert!(is_forwarding(&c.protocol));
    assert!(
        c.send("RAFT.FORWARD 9 4").is_none(),
        "answered +OK in place"
    );
    queued(c.send("SET a 1"));
    assert!(c.send("RAFT.FORWARD 9 5").is_none());
    assert!(c.send("GET a").is_none(), "only a write may follow it");
    let batch = c.pipeline.take_batch(NOW_MS);
    let entry = decode(&batch[0].1);
    assert_eq!((entry.client_id, entry.request_seq), (9, 4));
    c.pipeline.proposed([1]);
    c.pipeline
        .settle_write(batch[0].0, Ok(applied(WriteReply::Ok)));
    let (sent, _) = c.released();
    assert!(matches!(&sent[0], Reply::Error(e) if e.contains("unknown command")));
    // SETNAME, the first RAFT.FORWARD, the SET under its id, the second RAFT.FORWARD.
    assert_eq!(sent[1..5], [Reply::OK, Reply::OK, Reply::OK, Reply::OK]);
    assert!(sent[5].is_error(), "the GET after it is refused");
}

#[test]
fn quit_and_admin_commands_wait_for_everything_before_them() {
    let mut c = conn();
    queued(c.send("PING"));
    let Some(Admission::AfterAll(quit)) = c.send("QUIT") else {
        panic!("QUIT waits for the replies before it")
    };
    assert_eq!(c.released().0, [Reply::PONG]);
    assert!(matches!(c.pipeline.admit(quit), Admission::Close(reply) if reply == Reply::OK));
    let mut c = conn();
    assert!(matches!(c.send("GET a"), Some(Admission::StartRead { .. })));
    assert!(matches!(
        c.send("RAFT.SNAPSHOT"),
        Some(Admission::AfterAll(_))
    ));
    let mut c = conn();
    assert!(matches!(
        c.send("RAFT.SNAPSHOT"),
        Some(Admission::Admin(..))
    ));
}

#[test]
fn a_full_pipeline_must_be_answered_before_the_next_request() {
    let mut c = conn();
    for _ in 0..PIPELINE_REQUESTS_MAX - 1 {
        queued(c.send("PING"));
    }
    assert!(!c.pipeline.is_full());
    queued(c.send("PING"));
    assert!(c.pipeline.is_full());
    assert_eq!(c.released().0.len(), PIPELINE_REQUESTS_MAX);
    assert!(c.pipeline.is_empty());
}

#[test]
fn only_a_refusal_naming_another_leader_is_redirected() {
    assert_eq!(
        redirect(&not_leader(Some(2)), 1, false),
        Redirect::Forward(2)
    );
    assert_eq!(
        redirect(&not_leader(Some(2)), 1, true),
        Redirect::LeaderElsewhere(2),
        "never forwarded twice"
    );
    assert_eq!(redirect(&not_leader(Some(1)), 1, false), Redirect::Answer);
    assert_eq!(redirect(&not_leader(None), 1, false), Redirect::Answer);
    assert_eq!(redirect(&ClientError::Unknown, 1, false), Redirect::Answer);
}

#[test]
fn memory_and_status_checks() {
    let mut c = conn();
    let dispatch = |c: &mut Conn, words: &str| c.protocol.dispatch(&args(words), &NoNode);
    assert!(may_grow_memory(&dispatch(&mut c, "SET a 1")));
    assert!(!may_grow_memory(&dispatch(&mut c, "DEL a")));
    assert!(!may_grow_memory(&dispatch(&mut c, "GET a")));
    dispatch(&mut c, "MULTI");
    dispatch(&mut c, "DEL a");
    let only_del = dispatch(&mut c, "EXEC");
    assert!(!may_grow_memory(&only_del));
    dispatch(&mut c, "MULTI");
    dispatch(&mut c, "DEL a");
    dispatch(&mut c, "SET a 1");
    assert!(may_grow_memory(&dispatch(&mut c, "EXEC")));
    assert!(needs_node_status(&args("info")));
    assert!(needs_node_status(&args("RAFT.STATUS")));
    assert!(!needs_node_status(&args("PING")));
}

#[test]
fn a_batch_is_stamped_with_the_time_it_is_taken_not_the_time_its_writes_came() {
    let mut c = conn();
    queued(c.send("SET a 1"));
    queued(c.send("MULTI"));
    queued(c.send("INCR n"));
    queued(c.send("EXEC"));
    queued(c.send("SET b 2"));
    let batch = c.pipeline.take_batch(NOW_MS + 7);
    let stamps: Vec<u64> = batch.iter().map(|(_, e)| decode(e).stamp_ms).collect();
    assert_eq!(
        stamps,
        [NOW_MS + 7; 3],
        "every entry of the batch, the EXEC's included"
    );
    assert!(batch.iter().all(|(_, e)| e[0] == 2), "format version 2");
    c.pipeline.proposed([1, 2, 3]);
    for (slot, _) in &batch {
        c.pipeline.settle_write(*slot, Ok(applied(WriteReply::Ok)));
    }
    c.released();
    // The next run's batch gets the time it is taken at, even an earlier one (the clock is the
    // shell's: nothing here orders it).
    queued(c.send("SET c 3"));
    let later = c.pipeline.take_batch(NOW_MS - 5);
    assert_eq!(decode(&later[0].1).stamp_ms, NOW_MS - 5);
    assert_eq!(decode(&later[0].1).request_seq, 4);
}

#[test]
fn a_forwarded_write_is_stamped_by_the_node_that_proposes_it() {
    let mut c = conn();
    queued(c.send(&format!("CLIENT SETNAME {}", command::FORWARD_CLIENT_NAME)));
    assert!(c.send("RAFT.FORWARD 9 4").is_none());
    queued(c.send("SET a 1"));
    let batch = c.pipeline.take_batch(NOW_MS + 123);
    let entry = decode(&batch[0].1);
    assert_eq!(
        (entry.client_id, entry.request_seq, entry.stamp_ms),
        (9, 4, NOW_MS + 123)
    );
}

/// A read pipelined behind WATCH starts only once the watch point is back: started beside it,
/// it could be served from a state older than the point (on a follower the leader reads the
/// point and the follower the value), and an EXEC expecting that value would then run over a
/// change it never saw (simulator seed 16003627).
#[test]
fn requests_behind_a_watch_wait_for_its_watch_point() {
    let mut c = conn();
    let Some(Admission::StartRead { .. }) = c.send("WATCH a") else {
        panic!("WATCH reads its watch point");
    };
    let Some(Admission::AfterAll(get)) = c.send("GET a") else {
        panic!("the read behind the watch waits");
    };
    // Once the watch point is released, the read starts.
    c.pipeline.settle(
        0,
        Ok(Reply::Array(vec![Reply::Integer(5), Reply::Integer(1)])),
    );
    let (_, release) = c.released();
    assert!(matches!(release, Release::Watched { .. }), "{release:?}");
    assert!(matches!(c.pipeline.admit(get), Admission::StartRead { .. }));
    // A write behind a watch waits the same way.
    let mut c = conn();
    let Some(Admission::StartRead { .. }) = c.send("WATCH a") else {
        panic!("WATCH reads its watch point");
    };
    assert!(matches!(c.send("SET b 1"), Some(Admission::AfterAll(_))));
}
