//! Chunked, checksummed, resumable snapshot transfer on a connection of its own (wire format in
//! the `wire` module documentation, "Snapshot channel"). The decisions — what the receiver
//! accepts, writes, resumes and hands over, what the sender streams and rewinds, when it gives
//! up — are keel-engine's (`keel_engine::transfer`), which the simulator runs too; this file
//! moves their frames over TCP, with timeouts and pacing.
//!
//! - **Sender**: one task per follower (`Ready::send_snapshots`). It opens the snapshot file once
//!   (a newer snapshot pruning it meanwhile does not matter), offers it, learns the offset the
//!   receiver durably holds, and streams chunks read from the file one at a time: chunks of
//!   `snapshot_chunk_size_bytes` (1 MiB by default), a CRC32C each, at most
//!   `snapshot_window_chunks` (4) unacknowledged, so memory is a few chunks, never the snapshot;
//!   the final chunk carries the whole length and CRC32C. A dropped connection or a timeout
//!   reconnects and resumes from the receiver's durable offset, at most 5 times
//!   (`keel_engine::transfer::RESUME_ATTEMPTS_MAX`); then the core hears `snapshot_send_failed`.
//!   The core's own snapshot timeout asks again: a running transfer of the same snapshot is
//!   kept, one of an older snapshot replaced, and all are aborted when the node stops leading.
//!   Optional pacing: `snapshot_send_rate_bytes_per_sec`.
//! - **Receiver**: the engine's `SnapshotReceiver` (one partial transfer, in the node's data
//!   directory) behind a mutex shared by the snapshot connections. Chunks go to
//!   `incoming.snap.part` in the data directory; every `snapshot_sync_interval_bytes` (16 MiB),
//!   and before answering an offer, it is fsynced and `incoming.snap.state` records the durable
//!   offset and its CRC (keel-engine's `transfer/partial.rs`). That pair is the durable
//!   "installing" state (S35): it never touches the log or the state machine, so the follower
//!   keeps following Appends, and may vote, meanwhile. An oversize chunk length closes the
//!   connection before anything is allocated. Complete, whole-checksummed, fsynced and verified
//!   as a snapshot file, the snapshot is moved out of the partial slot and handed to the node;
//!   the storage thread adopts it as the newest snapshot (rename, directory fsync), and only then
//!   is `InstallSnapshot` stepped into the core. Its install write (log reset) and the restore
//!   follow, and a crash anywhere in between restarts from the newest snapshot file (S05 rules in
//!   keel-wal).
//!
//! File I/O runs in `spawn_blocking`, never on the tokio workers that carry heartbeats.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_core::{GroupId, NodeId, SnapshotMeta, Term};
use keel_engine::transfer::{
    self, AckStep, ChunkAnswer, OfferDecision, ReceiveSession, ReceiverLimits, SendSession,
    SnapshotReceiver, TransferError,
};
use keel_wal::{FileHandle, Fs, StdFs};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout};

use super::record::FrameWriter;
use super::{read_frame, AbortOnDrop, Inbound, TransportConfig, TransportError};
use crate::wire::{
    self, Body, SnapshotAck, SnapshotId, SnapshotOffer, SnapshotPosition, SNAPSHOT_CHANNEL_VERSION,
    SNAPSHOT_CONTROL_FRAME_BYTES_MAX,
};

/// Counters of snapshot transfers, for tests, benchmarks and status.
#[derive(Debug, Default)]
pub struct SnapshotCounters {
    /// Chunk data bytes written to receivers, resent chunks counted again.
    pub bytes_sent: AtomicU64,
    /// Chunk data bytes received and accepted (refused and skipped chunks not counted).
    pub bytes_received: AtomicU64,
    /// Transfers (sent or received) that resumed from a non-zero offset, and the bytes skipped.
    pub resumed: AtomicU64,
    /// The bytes those resumed transfers did not send again (their start offsets, summed).
    pub resumed_bytes: AtomicU64,
    /// Chunks refused by a receiver (counted by both sides: a sender's Resend acks, a receiver's
    /// refusals).
    pub chunks_refused: AtomicU64,
    /// Partial files a receiver discarded: replaced by an offer of another snapshot, or after a
    /// failed write or fsync.
    pub partials_discarded: AtomicU64,
    /// Transfers this node sent to the end (the receiver holds the whole snapshot).
    pub sends_completed: AtomicU64,
    /// Transfers this node received whole, durable and verified.
    pub receives_completed: AtomicU64,
}

/// A reading of [`SnapshotCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotTransferStats {
    /// See [`SnapshotCounters::bytes_sent`].
    pub bytes_sent: u64,
    /// See [`SnapshotCounters::bytes_received`].
    pub bytes_received: u64,
    /// See [`SnapshotCounters::resumed`].
    pub resumed: u64,
    /// See [`SnapshotCounters::resumed_bytes`].
    pub resumed_bytes: u64,
    /// See [`SnapshotCounters::chunks_refused`].
    pub chunks_refused: u64,
    /// See [`SnapshotCounters::partials_discarded`].
    pub partials_discarded: u64,
    /// See [`SnapshotCounters::sends_completed`].
    pub sends_completed: u64,
    /// See [`SnapshotCounters::receives_completed`].
    pub receives_completed: u64,
}

impl SnapshotCounters {
    /// A reading of every counter. Each is read on its own (relaxed), so a reading taken while
    /// transfers run need not be consistent across counters.
    pub fn get(&self) -> SnapshotTransferStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SnapshotTransferStats {
            bytes_sent: r(&self.bytes_sent),
            bytes_received: r(&self.bytes_received),
            resumed: r(&self.resumed),
            resumed_bytes: r(&self.resumed_bytes),
            chunks_refused: r(&self.chunks_refused),
            partials_discarded: r(&self.partials_discarded),
            sends_completed: r(&self.sends_completed),
            receives_completed: r(&self.receives_completed),
        }
    }
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn blocking_err(e: tokio::task::JoinError) -> TransportError {
    TransportError::Io(std::io::Error::other(e))
}

/// Whether a transfer that stopped without completing is resumed on a new connection.
fn retryable(e: &TransportError) -> bool {
    matches!(e, TransportError::Io(_) | TransportError::Timeout(_))
}

impl From<TransferError> for TransportError {
    fn from(e: TransferError) -> Self {
        match e {
            TransferError::Refused(why) => TransportError::Refused(why),
            TransferError::Unexpected(what) => TransportError::Unexpected(what),
            // Retried from zero, like a lost connection.
            TransferError::CorruptWhole => TransportError::Io(std::io::Error::other(e.to_string())),
            TransferError::OversizeChunk {
                len_bytes,
                bytes_max,
            } => wire::WireError::Oversize {
                len_bytes: len_bytes.into(),
                bytes_max: bytes_max.into(),
            }
            .into(),
        }
    }
}

type SnapFile = <StdFs as Fs>::File;

/// Where a snapshot goes: the peer `to` at `addr`, offered as `group`'s by the leader of
/// `leader_term`.
pub(super) struct Destination {
    pub group: GroupId,
    pub to: NodeId,
    pub addr: std::net::SocketAddr,
    pub leader_term: Term,
}

/// Streams the snapshot file at `path` (for `meta`) to its destination, resuming after dropped
/// connections. Resolves once the receiver has the whole snapshot durably and handed it to its
/// node.
pub(super) async fn send(
    config: Arc<TransportConfig>,
    counters: Arc<SnapshotCounters>,
    destination: Destination,
    meta: SnapshotMeta,
    path: PathBuf,
) -> Result<(), TransportError> {
    let Destination {
        group,
        to,
        addr,
        leader_term,
    } = destination;
    let file = tokio::task::spawn_blocking(move || StdFs.open(&path))
        .await
        .map_err(blocking_err)??;
    let file = Arc::new(file);
    let offer = SnapshotOffer {
        version: SNAPSHOT_CHANNEL_VERSION,
        group,
        id: SnapshotId {
            leader_term,
            index: meta.last.index,
            term: meta.last.term,
        },
        total_len_bytes: file.len_bytes()?,
    };
    let mut attempt = 0;
    loop {
        let result = async {
            let (rd, wr) = super::connect(&config, to, addr, wire::Channel::Snapshot).await?;
            stream_to(&config, &counters, rd, wr, offer, file.clone()).await
        }
        .await;
        match result {
            Ok(()) => {
                add(&counters.sends_completed, 1);
                return Ok(());
            }
            Err(e) if retryable(&e) => {
                let Some(backoff_ms) =
                    transfer::resume_backoff_ms(attempt, config.reconnect_backoff_min_ms)
                else {
                    return Err(e);
                };
                attempt += 1;
                tracing::info!(%addr, "snapshot {} transfer interrupted ({e}); resuming", meta.last);
                sleep(Duration::from_millis(backoff_ms)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// CRC32C of the file's first `len` bytes (to resume the whole-file checksum).
async fn prefix_crc(file: Arc<SnapFile>, len: u64) -> Result<u32, TransportError> {
    tokio::task::spawn_blocking(move || -> std::io::Result<u32> {
        let mut buf = vec![0u8; (1 << 20).min(len as usize)];
        let (mut at, mut crc) = (0u64, 0u32);
        while at < len {
            let n = ((len - at) as usize).min(buf.len());
            read_exact_at(&file, &mut buf[..n], at)?;
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            at += n as u64;
        }
        Ok(crc)
    })
    .await
    .map_err(blocking_err)?
    .map_err(TransportError::Io)
}

fn read_exact_at(file: &SnapFile, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    let n = file.read_at(buf, at)?;
    if n != buf.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "snapshot file shorter than when opened",
        ));
    }
    Ok(())
}

/// One connection's worth of a transfer: offer, position, chunks until complete.
#[expect(clippy::too_many_lines)]
pub(super) async fn stream_to<R, W>(
    c: &TransportConfig,
    counters: &SnapshotCounters,
    rd: R,
    mut wr: FrameWriter<W>,
    offer: SnapshotOffer,
    file: Arc<SnapFile>,
) -> Result<(), TransportError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let (id, total) = (offer.id, offer.total_len_bytes);
    let wait = Duration::from_millis(c.snapshot_timeout_ms);
    wire::encode_offer(&offer, wr.buf());
    timeout(wait, wr.send())
        .await
        .map_err(|_| TransportError::Timeout("snapshot offer"))??;
    let mut rd = BufReader::new(rd);
    let position = match timeout(wait, read_frame(&mut rd, SNAPSHOT_CONTROL_FRAME_BYTES_MAX))
        .await
        .map_err(|_| TransportError::Timeout("snapshot position"))??
    {
        Some(Body::SnapshotPosition(p)) => p,
        None => {
            return Err(TransportError::Unexpected(
                "end of stream before a position",
            ))
        }
        Some(_) => return Err(TransportError::Unexpected("frame instead of a position")),
    };
    let offset = SendSession::position_offset(id, total, &position)?;
    if offset > 0 {
        add(&counters.resumed, 1);
        add(&counters.resumed_bytes, offset);
    }

    // Acknowledgements are read by a task of their own, so the sender never stops reading while
    // it writes (no deadlock on full socket buffers).
    let (acks_tx, mut acks) = mpsc::channel::<Result<SnapshotAck, TransportError>>(64);
    let reader = tokio::spawn(async move {
        loop {
            let frame = read_frame(&mut rd, SNAPSHOT_CONTROL_FRAME_BYTES_MAX).await;
            let ack = match frame {
                Ok(Some(Body::SnapshotAck(a))) => Ok(a),
                Ok(None) => Err(TransportError::Io(std::io::ErrorKind::UnexpectedEof.into())),
                Ok(Some(_)) => Err(TransportError::Unexpected("frame instead of an ack")),
                Err(e) => Err(e),
            };
            let stop = ack.is_err();
            if acks_tx.send(ack).await.is_err() || stop {
                return;
            }
        }
    });
    let _reader = AbortOnDrop(reader);

    let rate = c.snapshot_send_rate_bytes_per_sec;
    let started = Instant::now();
    let mut paced_bytes = 0u64;
    let prefix_crc = prefix_crc(file.clone(), offset).await?;
    let mut session = SendSession::new(
        id,
        total,
        offset,
        prefix_crc,
        c.snapshot_chunk_size_bytes,
        c.snapshot_window_chunks,
    );
    let mut chunk = Vec::new();
    loop {
        while let Some((at, len)) = session.next_chunk() {
            chunk.resize(len, 0);
            let (f, mut data) = (file.clone(), std::mem::take(&mut chunk));
            chunk = tokio::task::spawn_blocking(move || {
                read_exact_at(&f, &mut data, at).map(|()| data)
            })
            .await
            .map_err(blocking_err)??;
            let header = session.chunk_sent(&chunk);
            // Header and data in one write (and, when sealed, one record: the tag covers both).
            wire::encode_chunk_header(&header, wr.buf());
            wr.buf().extend_from_slice(&chunk);
            timeout(wait, wr.send())
                .await
                .map_err(|_| TransportError::Timeout("snapshot chunk write"))??;
            add(&counters.bytes_sent, len as u64);
            if rate > 0 {
                paced_bytes += len as u64;
                let due = Duration::from_secs_f64(paced_bytes as f64 / rate as f64);
                if let Some(ahead) = due.checked_sub(started.elapsed()) {
                    sleep(ahead).await;
                }
            }
        }
        let ack = timeout(wait, acks.recv())
            .await
            .map_err(|_| TransportError::Timeout("snapshot acknowledgement"))?
            .ok_or(TransportError::Unexpected("acknowledgements ended"))??;
        if ack.status == wire::AckStatus::Resend {
            add(&counters.chunks_refused, 1);
        }
        if session.on_ack(&ack)? == AckStep::Complete {
            return Ok(());
        }
    }
}

/// The receiver's side, shared by the node's snapshot connections: the engine's receiver, if
/// the node takes snapshots (it has a directory for them).
pub(super) type SharedReceiver = Arc<Mutex<Option<SnapshotReceiver<StdFs>>>>;

pub(super) fn shared_receiver(c: &TransportConfig) -> SharedReceiver {
    let receiver = c
        .snapshot_dir
        .clone()
        .map(|dir| SnapshotReceiver::new(StdFs, dir));
    Arc::new(Mutex::new(receiver))
}

fn limits(c: &TransportConfig) -> ReceiverLimits {
    ReceiverLimits {
        snapshot_size_bytes_max: c.snapshot_size_bytes_max,
        chunk_bytes_max: c
            .snapshot_chunk_size_bytes_max
            .min(wire::SNAPSHOT_CHUNK_BYTES_LIMIT),
        sync_interval_bytes: c.snapshot_sync_interval_bytes,
    }
}

/// Runs `f` on the receiver on a blocking thread (it reads, writes and syncs files).
async fn with_receiver<T: Send + 'static>(
    state: &SharedReceiver,
    f: impl FnOnce(&mut SnapshotReceiver<StdFs>) -> T + Send + 'static,
) -> Result<T, TransportError> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        let mut guard = state.lock().unwrap_or_else(|e| e.into_inner());
        let receiver = guard.as_mut().expect("checked before serving");
        f(receiver)
    })
    .await
    .map_err(blocking_err)
}

/// Serves one snapshot connection after its handshake: reads from `stream`, answers on `wr`.
#[allow(clippy::too_many_arguments)]
#[expect(clippy::too_many_lines)]
pub(super) async fn receive<R, W>(
    c: &TransportConfig,
    state: &SharedReceiver,
    counters: &Arc<SnapshotCounters>,
    floor: &AtomicU64,
    from: NodeId,
    stream: &mut R,
    wr: &mut FrameWriter<W>,
    inbound: &mpsc::Sender<Inbound>,
) -> Result<(), TransportError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if lock_receiver(state).is_none() {
        return Err(TransportError::Refused(
            "this node takes no snapshots (no directory)",
        ));
    }
    let wait = Duration::from_millis(c.snapshot_timeout_ms);
    let offer = match timeout(wait, read_frame(stream, SNAPSHOT_CONTROL_FRAME_BYTES_MAX))
        .await
        .map_err(|_| TransportError::Timeout("snapshot offer"))??
    {
        Some(Body::SnapshotOffer(o)) => o,
        None => return Ok(()),
        Some(_) => return Err(TransportError::Unexpected("frame instead of an offer")),
    };
    let position = |status, offset| SnapshotPosition {
        index: offer.id.index,
        term: offer.id.term,
        status,
        offset,
    };
    let limits = limits(c);
    let floor = floor.load(Ordering::Relaxed);
    let decision = with_receiver(state, move |r| r.offer(&offer, floor, &limits)).await??;
    let mut session = match decision {
        OfferDecision::Continue {
            offset,
            ticket,
            discarded,
        } => {
            if discarded {
                add(&counters.partials_discarded, 1);
            }
            if offset > 0 {
                add(&counters.resumed, 1);
                add(&counters.resumed_bytes, offset);
            }
            wire::encode_position(&position(wire::PositionStatus::Continue, offset), wr.buf());
            wr.send().await?;
            ReceiveSession::new(&offer, offset, ticket)
        }
        OfferDecision::Refuse(status) => {
            wire::encode_position(&position(status, 0), wr.buf());
            wr.send().await?;
            return Ok(());
        }
    };

    let mut data = Vec::new();
    loop {
        let header = match timeout(wait, read_frame(stream, SNAPSHOT_CONTROL_FRAME_BYTES_MAX))
            .await
            .map_err(|_| TransportError::Timeout("snapshot chunk"))??
        {
            Some(Body::SnapshotChunk(h)) => h,
            // The sender went away; what was written stays for a resume.
            None => return Ok(()),
            Some(_) => return Err(TransportError::Unexpected("frame instead of a chunk")),
        };
        // Bounded before anything is allocated for it.
        session.admit(&header, &limits)?;
        data.resize(header.len_bytes as usize, 0);
        timeout(wait, tokio::io::AsyncReadExt::read_exact(stream, &mut data))
            .await
            .map_err(|_| TransportError::Timeout("snapshot chunk data"))??;
        let buf = std::mem::take(&mut data);
        let (answer, s, buf) = with_receiver(state, move |r| {
            let answer = session.chunk(r, &header, &buf, &limits);
            (answer, session, buf)
        })
        .await?;
        session = s;
        data = buf;
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                // A failed write or fsync: the engine discarded the partial file.
                add(&counters.partials_discarded, 1);
                return Err(e.into());
            }
        };
        match answer {
            ChunkAnswer::Silent => continue,
            ChunkAnswer::Ack(ack) => {
                if ack.status == wire::AckStatus::Accepted {
                    add(&counters.bytes_received, header.len_bytes as u64);
                } else {
                    add(&counters.chunks_refused, 1);
                }
                wire::encode_ack(&ack, wr.buf());
            }
            ChunkAnswer::Close(e) => return Err(e.into()),
            ChunkAnswer::Failed { why, ack } => {
                tracing::warn!(from, "snapshot transfer failed verification: {why}");
                wire::encode_ack(&ack, wr.buf());
                let _ = timeout(wait, wr.send()).await;
                return Ok(());
            }
            ChunkAnswer::Complete { file, ack } => {
                add(&counters.bytes_received, header.len_bytes as u64);
                add(&counters.receives_completed, 1);
                let handed = inbound
                    .send(Inbound::Snapshot {
                        group: offer.group,
                        from,
                        term: offer.id.leader_term,
                        meta: file.meta,
                        path: file.path,
                    })
                    .await;
                if handed.is_err() {
                    return Ok(()); // the node is gone
                }
                wire::encode_ack(&ack, wr.buf());
                let _ = timeout(wait, wr.send()).await;
                return Ok(());
            }
        }
        timeout(wait, wr.send())
            .await
            .map_err(|_| TransportError::Timeout("snapshot ack"))??;
    }
}

fn lock_receiver(
    state: &SharedReceiver,
) -> std::sync::MutexGuard<'_, Option<SnapshotReceiver<StdFs>>> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Discards a partial transfer left in `dir` if it is for a snapshot at or below `index` (the
/// node's commit index at startup: the core would ignore it).
pub fn discard_stale_partial(dir: &std::path::Path, index: u64) -> std::io::Result<()> {
    transfer::discard_stale_partial(&StdFs, dir, index)
}

#[cfg(test)]
mod tests;
