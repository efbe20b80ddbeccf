//! Snapshot transfer between simulated nodes, decided by keel-engine's transfer code exactly as
//! the runtime's transport runs it: the sender's [`SendSession`] streams the snapshot file in
//! chunks with a window, the receiver's [`SnapshotReceiver`] keeps the partial transfer in a
//! durable partial file on the node's simulated file system (a crash loses what was not synced)
//! and resumes it for any connection that offers the same snapshot.
//!
//! The simulated world only carries frames: one connection is an ordered pair of frame streams
//! (TCP keeps order, so a frame never overtakes an earlier one of its direction); a lost frame, a
//! partition or a crash of either side breaks the connection, and the sender reconnects after
//! the engine's backoff and resumes from the receiver's durable offset, or gives up and reports
//! the failure to its core. A snapshot received whole goes to the node as in the runtime:
//! adopted through the storage worker if worth it, then stepped into the core.
//!
//! Nothing in the simulated network or below a synced offset corrupts bytes, so a whole
//! snapshot that fails its checksums is a bug in the transfer code: a violation.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use keel_core::{NodeId, SnapshotMeta, Term};
use keel_engine::transfer::{
    self, AckStep, ChunkAnswer, ChunkHeader, OfferDecision, PositionStatus, ReceiveSession,
    ReceiverLimits, SendSession, SnapshotAck, SnapshotId, SnapshotOffer, SnapshotPosition,
    TransferError,
};
use keel_engine::{Adoption, StorageCommand};
use keel_wal::{Fs, SimFs};
use rand::Rng;

use crate::disk::SnapshotAdoption;
use crate::user::User;
use crate::world::{Event, World};

/// The first reconnection's backoff, in simulated time (a tenth of a tick interval each).
const RESUME_BACKOFF_MIN: u64 = 5;
/// The sender's window, in chunks.
const WINDOW_CHUNKS: usize = 2;

/// The receiver's bounds: the simulator's snapshots are small, its chunks smaller.
pub(crate) fn receiver_limits() -> ReceiverLimits {
    ReceiverLimits {
        snapshot_size_bytes_max: 64 << 20,
        chunk_bytes_max: 1 << 20,
        sync_interval_bytes: 256,
    }
}

/// A frame on a snapshot connection.
pub(crate) enum Frame {
    Offer(SnapshotOffer),
    Chunk(ChunkHeader, Bytes),
    Position(SnapshotPosition),
    Ack(SnapshotAck),
    /// The receiver ended the connection with an error (the runtime sends a refusal frame).
    Refusal,
}

impl Frame {
    fn to_receiver(&self) -> bool {
        matches!(self, Frame::Offer(_) | Frame::Chunk(..))
    }
}

pub(crate) enum TransferEvent {
    Frame {
        conn: u64,
        frame: Frame,
    },
    /// The sender reconnects after a lost connection.
    Reconnect {
        from: NodeId,
        to: NodeId,
        send: u64,
    },
}

/// A leader's transfer of one snapshot to one follower, across connections.
struct Send {
    id: u64,
    term: Term,
    meta: SnapshotMeta,
    /// The snapshot file's bytes, as the runtime streams the file.
    file: Bytes,
    chunk_bytes: u32,
    /// Reconnections spent.
    attempts: u32,
    conn: Option<u64>,
}

struct Conn {
    from: NodeId,
    to: NodeId,
    send: u64,
    to_incarnation: u64,
    sender: Option<SendSession>,
    receiver: Option<ReceiveSession>,
    /// The arrival time of the last frame scheduled in each direction (to the receiver, to the
    /// sender): the next may not arrive before it.
    last_arrival: [u64; 2],
}

#[derive(Default)]
pub(crate) struct Transfers {
    sends: BTreeMap<(NodeId, NodeId), Send>,
    conns: BTreeMap<u64, Conn>,
    next_id: u64,
}

/// The bytes of the snapshot file the runtime would stream for `meta` and `data`.
fn snapshot_file_bytes(meta: &SnapshotMeta, data: &[u8]) -> Bytes {
    let fs = SimFs::new();
    let dir = Path::new("/snapshot");
    fs.create_dir_all(dir).expect("simulated file system");
    let mut w = keel_wal::create_snapshot_file(&fs, dir, meta).expect("snapshot file");
    std::io::Write::write_all(&mut w, data).expect("snapshot file");
    let path = w.finish().expect("snapshot file");
    Bytes::from(fs.read_file(&path).expect("just written"))
}

impl<U: User> World<U> {
    fn transfer_id(&mut self) -> u64 {
        self.transfers.next_id += 1;
        self.transfers.next_id
    }

    /// The core of `from` asks to send `meta` to `to`.
    pub(crate) fn start_transfer(
        &mut self,
        from: NodeId,
        to: NodeId,
        term: Term,
        meta: SnapshotMeta,
    ) {
        let running = self.transfers.sends.get(&(from, to)).map(|s| s.meta.last);
        if !transfer::starts_transfer(running, meta.last) {
            return;
        }
        self.drop_send(from, to);
        let Some(data) = self.nodes[(from - 1) as usize]
            .snapshot_data
            .get(&meta.last.index)
        else {
            let detail = format!(
                "node {from} must send snapshot {} it does not hold",
                meta.last
            );
            return self.violate("snapshot transfer", detail);
        };
        let file = snapshot_file_bytes(&meta, data);
        let chunks = u64::from(self.params.snapshot_chunks.max(1));
        let chunk_bytes = file.len().div_ceil(chunks as usize).max(1) as u32;
        self.trace_line(|| format!("snapshot {} n{from}->n{to} starts", meta.last));
        let id = self.transfer_id();
        let send = Send {
            id,
            term,
            meta,
            file,
            chunk_bytes,
            attempts: 0,
            conn: None,
        };
        self.transfers.sends.insert((from, to), send);
        self.connect(from, to);
    }

    /// A node stopped leading (or crashed): its transfers end, as the runtime aborts them.
    pub(crate) fn stop_sends(&mut self, from: NodeId) {
        let tos: Vec<NodeId> = self
            .transfers
            .sends
            .keys()
            .filter(|(f, _)| *f == from)
            .map(|(_, t)| *t)
            .collect();
        for to in tos {
            self.drop_send(from, to);
        }
    }

    fn drop_send(&mut self, from: NodeId, to: NodeId) {
        if let Some(send) = self.transfers.sends.remove(&(from, to)) {
            if let Some(conn) = send.conn {
                self.transfers.conns.remove(&conn);
            }
        }
    }

    /// Opens a connection for the transfer from `from` to `to` and offers the snapshot.
    fn connect(&mut self, from: NodeId, to: NodeId) {
        let conn = self.transfer_id();
        let send = self.transfers.sends.get_mut(&(from, to)).expect("running");
        send.conn = Some(conn);
        let offer = SnapshotOffer {
            version: 3,
            group: 0,
            id: SnapshotId {
                leader_term: send.term,
                index: send.meta.last.index,
                term: send.meta.last.term,
            },
            total_len_bytes: send.file.len() as u64,
        };
        let send_id = send.id;
        let to_incarnation = self.nodes[(to - 1) as usize].incarnation;
        self.transfers.conns.insert(
            conn,
            Conn {
                from,
                to,
                send: send_id,
                to_incarnation,
                sender: None,
                receiver: None,
                last_arrival: [0; 2],
            },
        );
        self.send_frame(conn, Frame::Offer(offer));
    }

    /// Puts `frame` on connection `conn`, after the frames before it in its direction. A lost
    /// frame breaks the connection (TCP loses connections, not frames in the middle of one).
    fn send_frame(&mut self, conn: u64, frame: Frame) {
        let loss = if self.healing {
            0.0
        } else {
            self.params.loss_probability
        };
        if self.rng.random_bool(loss) {
            return self.break_conn(conn);
        }
        let delay = self
            .rng
            .random_range(self.params.net_delay_min..=self.params.net_delay_max);
        let now = self.now;
        let Some(c) = self.transfers.conns.get_mut(&conn) else {
            return;
        };
        let direction = usize::from(!frame.to_receiver());
        let at = (now + delay).max(c.last_arrival[direction]);
        c.last_arrival[direction] = at;
        self.schedule(
            at - now,
            Event::Transfer(TransferEvent::Frame { conn, frame }),
        );
    }

    /// The connection is gone: the sender reconnects after its backoff, or gives up.
    fn break_conn(&mut self, conn: u64) {
        let Some(c) = self.transfers.conns.remove(&conn) else {
            return;
        };
        let (from, to) = (c.from, c.to);
        let Some(send) = self.transfers.sends.get_mut(&(from, to)) else {
            return;
        };
        if send.id != c.send {
            return;
        }
        send.conn = None;
        match transfer::resume_backoff_ms(send.attempts, RESUME_BACKOFF_MIN) {
            Some(backoff) => {
                send.attempts += 1;
                let send = send.id;
                self.schedule(
                    backoff,
                    Event::Transfer(TransferEvent::Reconnect { from, to, send }),
                );
            }
            None => self.send_failed(from, to, "connections lost"),
        }
    }

    /// The transfer ended without the receiver holding the snapshot: the core probes again.
    fn send_failed(&mut self, from: NodeId, to: NodeId, why: &str) {
        self.drop_send(from, to);
        self.trace_line(|| format!("snapshot n{from}->n{to} failed: {why}"));
        if let Some(raft) = self.nodes[(from - 1) as usize].raft.as_mut() {
            raft.snapshot_send_failed(to);
            self.drive(from);
        }
    }

    pub(crate) fn transfer_event(&mut self, event: TransferEvent) {
        match event {
            TransferEvent::Reconnect { from, to, send } => {
                let current = self.transfers.sends.get(&(from, to));
                if current.is_some_and(|s| s.id == send && s.conn.is_none()) {
                    self.trace_line(|| format!("snapshot n{from}->n{to} reconnects"));
                    self.connect(from, to);
                }
            }
            TransferEvent::Frame { conn, frame } => {
                let Some(c) = self.transfers.conns.get(&conn) else {
                    return; // the connection broke meanwhile
                };
                let (from, to) = (c.from, c.to);
                let receiver_lost = self.nodes[(to - 1) as usize].incarnation != c.to_incarnation
                    || self.nodes[(to - 1) as usize].raft.is_none();
                if receiver_lost || self.blocked.contains(&(from, to)) {
                    return self.break_conn(conn);
                }
                if frame.to_receiver() {
                    self.receiver_frame(conn, to, frame);
                } else {
                    self.sender_frame(conn, from, to, frame);
                }
            }
        }
    }

    fn receiver_frame(&mut self, conn: u64, to: NodeId, frame: Frame) {
        let limits = receiver_limits();
        let node = &mut self.nodes[(to - 1) as usize];
        match frame {
            Frame::Offer(offer) => {
                let floor = node.raft.as_ref().expect("checked").commit_index();
                let decision = match node.receiver.offer(&offer, floor, &limits) {
                    Ok(d) => d,
                    Err(_) => return self.break_conn(conn),
                };
                let (status, offset) = match decision {
                    OfferDecision::Continue { offset, ticket, .. } => {
                        let c = self.transfers.conns.get_mut(&conn).expect("checked");
                        c.receiver = Some(ReceiveSession::new(&offer, offset, ticket));
                        (PositionStatus::Continue, offset)
                    }
                    OfferDecision::Refuse(status) => (status, 0),
                };
                let position = SnapshotPosition {
                    index: offer.id.index,
                    term: offer.id.term,
                    status,
                    offset,
                };
                self.send_frame(conn, Frame::Position(position));
            }
            Frame::Chunk(header, data) => {
                let c = self.transfers.conns.get_mut(&conn).expect("checked");
                let Some(mut session) = c.receiver else {
                    return self.break_conn(conn);
                };
                if session.admit(&header, &limits).is_err() {
                    return self.break_conn(conn);
                }
                let answer = session.chunk(&mut node.receiver, &header, &data, &limits);
                if let Some(c) = self.transfers.conns.get_mut(&conn) {
                    c.receiver = Some(session);
                }
                match answer {
                    Err(_) => self.break_conn(conn),
                    Ok(ChunkAnswer::Silent) => {}
                    Ok(ChunkAnswer::Ack(ack)) => self.send_frame(conn, Frame::Ack(ack)),
                    Ok(ChunkAnswer::Close(_)) => self.send_frame(conn, Frame::Refusal),
                    Ok(ChunkAnswer::Failed { why, .. }) => {
                        let detail = format!("n{to} received a corrupt snapshot: {why}");
                        self.violate("snapshot transfer integrity", detail);
                    }
                    Ok(ChunkAnswer::Complete { file, ack }) => {
                        self.snapshot_received(conn, to, file);
                        self.send_frame(conn, Frame::Ack(ack));
                    }
                }
            }
            Frame::Position(_) | Frame::Ack(_) | Frame::Refusal => unreachable!("to the sender"),
        }
    }

    /// A snapshot arrived whole at `to`: adopted if worth it (as the runtime decides), made
    /// durable, then the core decides whether to install it.
    fn snapshot_received(&mut self, conn: u64, to: NodeId, file: keel_wal::SnapshotFile) {
        let c = &self.transfers.conns[&conn];
        let from = c.from;
        let term = self.transfers.sends.get(&(from, to)).map_or(0, |s| s.term);
        let node = &mut self.nodes[(to - 1) as usize];
        let fs = node.disk.transfer_fs();
        let data = keel_wal::snapshot::read_snapshot_data(&fs, &file, u64::MAX);
        let _ = fs.remove_file(&file.path);
        let data = match data {
            Ok(data) => Bytes::from(data),
            Err(e) => {
                let detail = format!("n{to} cannot read the snapshot it verified: {e}");
                return self.violate("snapshot transfer integrity", detail);
            }
        };
        let meta = file.meta;
        let index = meta.last.index;
        let raft = node.raft.as_ref().expect("checked");
        let saved = node.disk.snapshot_index();
        match keel_engine::adoption(raft, from, term, &meta, saved) {
            Adoption::Refused(e) => {
                let detail = format!("n{to} refused the snapshot {index} of n{from}: {e}");
                self.violate("peer message validation", detail);
            }
            Adoption::NotNeeded => {
                self.trace_line(|| format!("snapshot {index} n{from}->n{to} not needed"));
                self.nodes[(to - 1) as usize].receiver.settled();
            }
            Adoption::InstallSaved => {
                self.nodes[(to - 1) as usize].receiver.settled();
                let Some(saved) = self.nodes[(to - 1) as usize].disk.snapshot_meta() else {
                    let detail = format!("n{to} cannot read the snapshot its storage saved");
                    return self.violate("recovery", detail);
                };
                self.trace_line(|| {
                    format!(
                        "snapshot {index} n{from}->n{to}: installs the newer {} saved",
                        saved.last
                    )
                });
                let msg = keel_engine::install_message(to, from, term, saved);
                self.step_install(to, msg);
            }
            Adoption::Adopt => {
                self.trace_line(|| format!("snapshot {index} n{from}->n{to} delivered"));
                let adoption = SnapshotAdoption {
                    meta,
                    data,
                    from: Some((from, term)),
                };
                self.submit_storage(to, StorageCommand::Adopt(adoption));
            }
        }
    }

    fn sender_frame(&mut self, conn: u64, from: NodeId, to: NodeId, frame: Frame) {
        let Some(send) = self.transfers.sends.get(&(from, to)) else {
            self.transfers.conns.remove(&conn);
            return;
        };
        let id = SnapshotId {
            leader_term: send.term,
            index: send.meta.last.index,
            term: send.meta.last.term,
        };
        let total = send.file.len() as u64;
        let step = match frame {
            Frame::Position(position) => match SendSession::position_offset(id, total, &position) {
                Ok(offset) => {
                    if offset > 0 {
                        let last = send.meta.last;
                        self.trace_line(|| {
                            format!("snapshot {last} n{from}->n{to} resumes at {offset}")
                        });
                    }
                    let send = &self.transfers.sends[&(from, to)];
                    let prefix = crc32c::crc32c(&send.file[..offset as usize]);
                    let session = SendSession::new(
                        id,
                        total,
                        offset,
                        prefix,
                        send.chunk_bytes,
                        WINDOW_CHUNKS,
                    );
                    let c = self.transfers.conns.get_mut(&conn).expect("checked");
                    c.sender = Some(session);
                    Ok(AckStep::Continue)
                }
                Err(e) => Err(e),
            },
            Frame::Ack(ack) => {
                let c = self.transfers.conns.get_mut(&conn).expect("checked");
                match c.sender.as_mut() {
                    Some(session) => session.on_ack(&ack),
                    None => Err(TransferError::Unexpected("ack before a position")),
                }
            }
            Frame::Refusal => Err(TransferError::Refused("the receiver closed the connection")),
            Frame::Offer(_) | Frame::Chunk(..) => unreachable!("to the receiver"),
        };
        match step {
            Ok(AckStep::Continue) => self.send_chunks(conn, from, to),
            Ok(AckStep::Complete) => {
                self.transfers.conns.remove(&conn);
                self.transfers.sends.remove(&(from, to));
            }
            // Retried from zero on a new connection, like a lost one.
            Err(TransferError::CorruptWhole) => self.break_conn(conn),
            Err(e) => self.send_failed(from, to, &e.to_string()),
        }
    }

    /// Sends what the window allows.
    fn send_chunks(&mut self, conn: u64, from: NodeId, to: NodeId) {
        loop {
            let Some(c) = self.transfers.conns.get_mut(&conn) else {
                return;
            };
            let Some(session) = c.sender.as_mut() else {
                return;
            };
            let Some((at, len)) = session.next_chunk() else {
                return;
            };
            let file = &self.transfers.sends[&(from, to)].file;
            let data = file.slice(at as usize..at as usize + len);
            let header = session.chunk_sent(&data);
            self.send_frame(conn, Frame::Chunk(header, data));
        }
    }
}
