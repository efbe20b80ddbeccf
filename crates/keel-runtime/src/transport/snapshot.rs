//! Chunked, checksummed, resumable snapshot transfer on a connection of its own (wire format in
//! the `wire` module documentation, "Snapshot channel"; the receiver's durable partial file in
//! `partial.rs`).
//!
//! - **Sender**: opens the snapshot file once (a newer snapshot pruning it meanwhile does not
//!   matter), offers it, learns the offset the receiver durably holds, and streams chunks read
//!   from the file one at a time with at most `snapshot_window_chunks` unacknowledged: memory is
//!   a few chunks, never the snapshot. A dropped connection or a timeout reconnects and resumes
//!   from the receiver's durable offset, a bounded number of times.
//! - **Receiver**: one partial transfer at a time (any connection may continue it if it offers
//!   the same snapshot); chunks are checked (length bound before allocating, CRC32C) and written
//!   in order; a corrupt or misplaced chunk is answered with the offset held, and the sender
//!   resends from there. Complete, whole-checksummed, fsynced and verified as a snapshot file, it
//!   is handed to the node, which adopts it as its newest snapshot and only then steps
//!   `InstallSnapshot` into its core.
//!
//! File I/O runs in `spawn_blocking`, never on the tokio workers that carry heartbeats.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_core::{NodeId, SnapshotMeta, Term};
use keel_wal::{FileHandle, Fs, StdFs};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout};

use super::partial::{self, Partial};
use super::record::FrameWriter;
use super::{read_frame, AbortOnDrop, Inbound, TransportConfig, TransportError};
use crate::wire::{
    self, AckStatus, Body, ChunkHeader, PositionStatus, SnapshotAck, SnapshotId, SnapshotOffer,
    SnapshotPosition, SNAPSHOT_CHANNEL_VERSION, SNAPSHOT_CONTROL_FRAME_BYTES_MAX,
};

/// Reconnections (each resuming from the receiver's durable offset) before a transfer is given
/// up and reported failed to the core.
const RESUME_ATTEMPTS_MAX: u32 = 5;
/// Consecutive refused chunks before a side gives up the connection.
const REFUSALS_MAX: u32 = 16;

/// Counters of snapshot transfers, for tests, benchmarks and status.
#[derive(Debug, Default)]
pub struct SnapshotCounters {
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    /// Transfers (sent or received) that resumed from a non-zero offset, and the bytes skipped.
    pub resumed: AtomicU64,
    pub resumed_bytes: AtomicU64,
    pub chunks_refused: AtomicU64,
    pub partials_discarded: AtomicU64,
    pub sends_completed: AtomicU64,
    pub receives_completed: AtomicU64,
}

/// A reading of [`SnapshotCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotTransferStats {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub resumed: u64,
    pub resumed_bytes: u64,
    pub chunks_refused: u64,
    pub partials_discarded: u64,
    pub sends_completed: u64,
    pub receives_completed: u64,
}

impl SnapshotCounters {
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

/// Why a transfer stopped without completing.
fn retryable(e: &TransportError) -> bool {
    matches!(e, TransportError::Io(_) | TransportError::Timeout(_))
}

type SnapFile = <StdFs as Fs>::File;

/// Streams the snapshot file at `path` (for `meta`, as leader of `leader_term`) to the peer at
/// `to` at `addr`, resuming after dropped connections. Resolves once the receiver has the whole snapshot
/// durably and handed it to its node.
pub(super) async fn send(
    config: Arc<TransportConfig>,
    counters: Arc<SnapshotCounters>,
    to: NodeId,
    addr: std::net::SocketAddr,
    leader_term: Term,
    meta: SnapshotMeta,
    path: PathBuf,
) -> Result<(), TransportError> {
    let id = SnapshotId {
        leader_term,
        index: meta.last.index,
        term: meta.last.term,
    };
    let file = tokio::task::spawn_blocking(move || StdFs.open(&path))
        .await
        .map_err(blocking_err)??;
    let file = Arc::new(file);
    let total = file.len_bytes()?;
    let mut attempt = 0;
    loop {
        let result = async {
            let (rd, wr) = super::connect(&config, to, addr, wire::Channel::Snapshot).await?;
            stream_to(&config, &counters, rd, wr, id, file.clone(), total).await
        }
        .await;
        match result {
            Ok(()) => {
                add(&counters.sends_completed, 1);
                return Ok(());
            }
            Err(e) if retryable(&e) && attempt < RESUME_ATTEMPTS_MAX => {
                attempt += 1;
                tracing::info!(%addr, "snapshot {} transfer interrupted ({e}); resuming", meta.last);
                sleep(Duration::from_millis(
                    config.reconnect_backoff_min_ms << attempt.min(6),
                ))
                .await;
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
pub(super) async fn stream_to<R, W>(
    c: &TransportConfig,
    counters: &SnapshotCounters,
    rd: R,
    mut wr: FrameWriter<W>,
    id: SnapshotId,
    file: Arc<SnapFile>,
    total: u64,
) -> Result<(), TransportError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let wait = Duration::from_millis(c.snapshot_timeout_ms);
    wire::encode_offer(
        &SnapshotOffer {
            version: SNAPSHOT_CHANNEL_VERSION,
            id,
            total_len_bytes: total,
        },
        wr.buf(),
    );
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
    if (position.index, position.term) != (id.index, id.term) || position.offset >= total {
        return Err(TransportError::Unexpected("position for another snapshot"));
    }
    match position.status {
        PositionStatus::Continue => {}
        PositionStatus::RefusedStale => {
            return Err(TransportError::Refused(
                "a later leader's transfer is in progress",
            ))
        }
        PositionStatus::RefusedTooLarge => {
            return Err(TransportError::Refused(
                "snapshot larger than the receiver accepts",
            ))
        }
        // Reported as a failure so the leader's core probes the follower at once.
        PositionStatus::NotNeeded => {
            return Err(TransportError::Refused("the follower no longer needs it"))
        }
    }
    if position.offset > 0 {
        add(&counters.resumed, 1);
        add(&counters.resumed_bytes, position.offset);
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

    let chunk_size = c.snapshot_chunk_size_bytes.max(1) as u64;
    let window_bytes = chunk_size * c.snapshot_window_chunks.max(1) as u64;
    let rate = c.snapshot_send_rate_bytes_per_sec;
    let started = Instant::now();
    let mut paced_bytes = 0u64;
    let mut sent = position.offset;
    let mut acked = position.offset;
    let mut crc = prefix_crc(file.clone(), sent).await?;
    // (offset, CRC32C of the prefix up to it) at every chunk boundary not yet acknowledged, to
    // rewind on a refusal without rereading the file.
    let mut boundaries: std::collections::VecDeque<(u64, u32)> = [(sent, crc)].into();
    let mut refusals = 0;
    let mut chunk = Vec::new();
    loop {
        while sent < total && sent - acked < window_bytes {
            let len = (total - sent).min(chunk_size) as usize;
            chunk.resize(len, 0);
            let (f, mut data, at) = (file.clone(), std::mem::take(&mut chunk), sent);
            chunk = tokio::task::spawn_blocking(move || {
                read_exact_at(&f, &mut data, at).map(|()| data)
            })
            .await
            .map_err(blocking_err)??;
            let chunk_crc = crc32c::crc32c(&chunk);
            crc = crc32c::crc32c_append(crc, &chunk);
            let end = sent + len as u64;
            let header = ChunkHeader {
                id,
                offset: sent,
                len_bytes: len as u32,
                crc: chunk_crc,
                last: (end == total).then_some((total, crc)),
            };
            // Header and data in one write (and, when sealed, one record: the tag covers both).
            wire::encode_chunk_header(&header, wr.buf());
            wr.buf().extend_from_slice(&chunk);
            timeout(wait, wr.send())
                .await
                .map_err(|_| TransportError::Timeout("snapshot chunk write"))??;
            add(&counters.bytes_sent, len as u64);
            sent = end;
            boundaries.push_back((sent, crc));
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
        if (ack.index, ack.term) != (id.index, id.term) || ack.received > sent {
            return Err(TransportError::Unexpected(
                "acknowledgement for another snapshot",
            ));
        }
        match ack.status {
            AckStatus::Accepted => {
                refusals = 0;
                acked = acked.max(ack.received);
                while boundaries.len() > 1 && boundaries[0].0 < acked {
                    boundaries.pop_front();
                }
            }
            AckStatus::Resend => {
                refusals += 1;
                add(&counters.chunks_refused, 1);
                if refusals > REFUSALS_MAX {
                    return Err(TransportError::Refused("too many chunks refused"));
                }
                let Some(&(at, at_crc)) = boundaries.iter().find(|(o, _)| *o == ack.received)
                else {
                    return Err(TransportError::Unexpected("resend from an unknown offset"));
                };
                while boundaries.back().is_some_and(|(o, _)| *o > at) {
                    boundaries.pop_back();
                }
                sent = at;
                acked = at;
                crc = at_crc;
            }
            AckStatus::Complete => return Ok(()),
            // The receiver discarded the partial file: a retry starts from zero.
            AckStatus::Failed => {
                return Err(TransportError::Io(std::io::Error::other(
                    "the receiver found the whole snapshot corrupt",
                )))
            }
        }
    }
}

/// The receiver's side, shared by its snapshot connections: the one partial transfer.
#[derive(Default)]
pub(super) struct ReceiverState {
    loaded: bool,
    partial: Option<Partial>,
    /// The last snapshot received whole: offered again (the leader's core asked again before
    /// the install answer reached it), it is not needed.
    completed: Option<SnapshotId>,
    /// The ticket of the connection that may write the partial file: the one whose offer came
    /// last. An older connection still streaming the same snapshot (a deposed leader, or a
    /// sender that reconnected while its old connection drained) is superseded, so exactly one
    /// sender moves the file on and each sender's acknowledgements stay within what it sent.
    owner: u64,
}

pub(super) type SharedReceiver = Arc<Mutex<ReceiverState>>;

/// What the receiver decided for an offer.
enum Decision {
    /// Stream from this offset, writing under this ticket.
    Continue {
        offset: u64,
        ticket: u64,
    },
    Refuse(PositionStatus),
}

fn lock(state: &SharedReceiver) -> std::sync::MutexGuard<'_, ReceiverState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn decide(
    state: &SharedReceiver,
    dir: &Path,
    offer: &SnapshotOffer,
    counters: &SnapshotCounters,
) -> std::io::Result<Decision> {
    // Runs on a blocking thread; `counters` are atomics.
    let mut st = lock(state);
    if !st.loaded {
        st.partial = Partial::load(dir)?;
        st.loaded = true;
    }
    if st.completed.is_some_and(|c| c.same_snapshot(&offer.id)) {
        return Ok(Decision::Refuse(PositionStatus::NotNeeded));
    }
    if let Some(p) = st.partial.as_mut() {
        if p.id.same_snapshot(&offer.id) && p.total_len_bytes == offer.total_len_bytes {
            // Same snapshot, whichever leader sends it: resume from what is durable.
            p.sync()?;
            p.id.leader_term = p.id.leader_term.max(offer.id.leader_term);
            let offset = p.received;
            st.owner += 1;
            return Ok(Decision::Continue {
                offset,
                ticket: st.owner,
            });
        }
        if p.id.leader_term > offer.id.leader_term {
            return Ok(Decision::Refuse(PositionStatus::RefusedStale));
        }
        add(&counters.partials_discarded, 1);
    }
    st.partial = None;
    st.partial = Some(Partial::create(dir, offer.id, offer.total_len_bytes)?);
    st.owner += 1;
    Ok(Decision::Continue {
        offset: 0,
        ticket: st.owner,
    })
}

/// What happened to one chunk.
enum Written {
    Accepted {
        received: u64,
        durable: u64,
    },
    /// Not at the offset held.
    Misplaced {
        received: u64,
        durable: u64,
    },
    /// A later offer (another snapshot, or the same from a newer connection) took the slot.
    Superseded,
    Complete {
        path: PathBuf,
        meta: SnapshotMeta,
    },
    Failed(String),
}

fn write_chunk(
    state: &SharedReceiver,
    ticket: u64,
    c: &TransportConfig,
    header: &ChunkHeader,
    data: &[u8],
) -> std::io::Result<Written> {
    let mut st = lock(state);
    if st.owner != ticket {
        return Ok(Written::Superseded);
    }
    let Some(p) = st.partial.as_mut() else {
        return Ok(Written::Superseded);
    };
    debug_assert!(p.id.same_snapshot(&header.id), "checked against the offer");
    if header.offset != p.received {
        return Ok(Written::Misplaced {
            received: p.received,
            durable: p.durable,
        });
    }
    let end = header.offset + data.len() as u64;
    if end > p.total_len_bytes || (header.last.is_some() != (end == p.total_len_bytes)) {
        return Ok(Written::Failed("chunk past the announced length".into()));
    }
    p.write_chunk(data)?;
    let Some((total, whole_crc)) = header.last else {
        if p.received - p.durable >= c.snapshot_sync_interval_bytes {
            p.sync()?;
        }
        return Ok(Written::Accepted {
            received: p.received,
            durable: p.durable,
        });
    };
    let partial = st.partial.take().expect("checked above");
    if total != partial.total_len_bytes || whole_crc != partial.crc {
        let why = format!(
            "whole snapshot checksum {:#010x} / length {} differ from the sender's {whole_crc:#010x} / {total}",
            partial.crc, partial.received
        );
        drop(partial);
        partial::discard(&c_dir(c))?;
        return Ok(Written::Failed(why));
    }
    let id = partial.id;
    let path = partial.complete()?;
    st.completed = Some(id);
    // The snapshot file's own checksums (header, data) and position, before the node hears of it.
    match keel_wal::snapshot::verify_snapshot(&StdFs, &path) {
        Ok(file) if (file.meta.last.index, file.meta.last.term) == (id.index, id.term) => {
            Ok(Written::Complete {
                path,
                meta: file.meta,
            })
        }
        Ok(_) => {
            let _ = std::fs::remove_file(&path);
            Ok(Written::Failed("snapshot file for another position".into()))
        }
        Err(why) => {
            let _ = std::fs::remove_file(&path);
            Ok(Written::Failed(why))
        }
    }
}

fn c_dir(c: &TransportConfig) -> PathBuf {
    c.snapshot_dir.clone().expect("checked before serving")
}

/// Serves one snapshot connection after its handshake: reads from `stream`, answers on `wr`.
#[allow(clippy::too_many_arguments)]
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
    let Some(dir) = c.snapshot_dir.clone() else {
        return Err(TransportError::Refused(
            "this node takes no snapshots (no directory)",
        ));
    };
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
    let decision = if offer.id.index <= floor.load(Ordering::Relaxed) {
        Decision::Refuse(PositionStatus::NotNeeded)
    } else if offer.total_len_bytes > c.snapshot_size_bytes_max {
        Decision::Refuse(PositionStatus::RefusedTooLarge)
    } else {
        let (st, d, o, k) = (state.clone(), dir.clone(), offer, counters.clone());
        tokio::task::spawn_blocking(move || decide(&st, &d, &o, &k))
            .await
            .map_err(blocking_err)??
    };
    let (mut held, ticket) = match decision {
        Decision::Continue { offset, ticket } => (offset, ticket),
        Decision::Refuse(status) => {
            wire::encode_position(&position(status, 0), wr.buf());
            wr.send().await?;
            return Ok(());
        }
    };
    if held > 0 {
        add(&counters.resumed, 1);
        add(&counters.resumed_bytes, held);
    }
    wire::encode_position(&position(PositionStatus::Continue, held), wr.buf());
    wr.send().await?;

    let ack = |status, received, durable| SnapshotAck {
        index: offer.id.index,
        term: offer.id.term,
        status,
        received,
        durable,
    };
    let chunk_max = c
        .snapshot_chunk_size_bytes_max
        .min(wire::SNAPSHOT_CHUNK_BYTES_LIMIT);
    // The offset this connection last refused at: chunks already in flight after a refusal are
    // skipped without an answer until the sender resends from there.
    let mut refused_at: Option<u64> = None;
    let mut refusals = 0;
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
        if !header.id.same_snapshot(&offer.id) {
            return Err(TransportError::Unexpected("chunk of another snapshot"));
        }
        // Bounded before anything is allocated for it.
        if header.len_bytes > chunk_max {
            return Err(wire::WireError::Oversize {
                len_bytes: header.len_bytes.into(),
                max_bytes: chunk_max.into(),
            }
            .into());
        }
        data.resize(header.len_bytes as usize, 0);
        timeout(wait, tokio::io::AsyncReadExt::read_exact(stream, &mut data))
            .await
            .map_err(|_| TransportError::Timeout("snapshot chunk data"))??;
        let crc_ok = crc32c::crc32c(&data) == header.crc;
        if header.offset != held || !crc_ok {
            if header.offset != held && refused_at == Some(held) {
                continue; // in flight behind a refused chunk
            }
            refusals += 1;
            add(&counters.chunks_refused, 1);
            if refusals > REFUSALS_MAX {
                return Err(TransportError::Refused("too many bad chunks"));
            }
            refused_at = Some(held);
            let durable = lock(state).partial.as_ref().map_or(0, |p| p.durable);
            wire::encode_ack(&ack(AckStatus::Resend, held, durable), wr.buf());
            timeout(wait, wr.send())
                .await
                .map_err(|_| TransportError::Timeout("snapshot ack"))??;
            continue;
        }
        let (st, cfg, h, buf) = (state.clone(), c.clone(), header, std::mem::take(&mut data));
        let (written, buf) = tokio::task::spawn_blocking(move || {
            let w = write_chunk(&st, ticket, &cfg, &h, &buf);
            (w, buf)
        })
        .await
        .map_err(blocking_err)?;
        data = buf;
        let written = match written {
            Ok(w) => w,
            Err(e) => {
                // A failed write or fsync: the partial file can no longer be trusted.
                let (st, d) = (state.clone(), dir.clone());
                let _ = tokio::task::spawn_blocking(move || {
                    lock(&st).partial = None;
                    partial::discard(&d)
                })
                .await;
                add(&counters.partials_discarded, 1);
                return Err(e.into());
            }
        };
        match written {
            Written::Accepted { received, durable } => {
                add(&counters.bytes_received, header.len_bytes as u64);
                refusals = 0;
                refused_at = None;
                held = received;
                wire::encode_ack(&ack(AckStatus::Accepted, received, durable), wr.buf());
            }
            Written::Misplaced { received, durable } => {
                // Defensive: this connection is the only writer, so `held` is the file's end.
                held = received;
                refused_at = Some(held);
                wire::encode_ack(&ack(AckStatus::Resend, received, durable), wr.buf());
            }
            Written::Superseded => {
                return Err(TransportError::Refused("superseded by another transfer"))
            }
            Written::Failed(why) => {
                tracing::warn!(from, "snapshot transfer failed verification: {why}");
                wire::encode_ack(&ack(AckStatus::Failed, 0, 0), wr.buf());
                let _ = timeout(wait, wr.send()).await;
                return Ok(());
            }
            Written::Complete { path, meta } => {
                add(&counters.bytes_received, header.len_bytes as u64);
                add(&counters.receives_completed, 1);
                let total = offer.total_len_bytes;
                let handed = inbound
                    .send(Inbound::Snapshot {
                        from,
                        term: offer.id.leader_term,
                        meta,
                        path,
                    })
                    .await;
                if handed.is_err() {
                    return Ok(()); // the node is gone
                }
                wire::encode_ack(&ack(AckStatus::Complete, total, total), wr.buf());
                let _ = timeout(wait, wr.send()).await;
                return Ok(());
            }
        }
        timeout(wait, wr.send())
            .await
            .map_err(|_| TransportError::Timeout("snapshot ack"))??;
    }
}

/// Discards a partial transfer left in `dir` if it is for a snapshot at or below `index` (the
/// node's commit index at startup: the core would ignore it).
pub fn discard_stale_partial(dir: &Path, index: u64) -> std::io::Result<()> {
    match partial::peek(dir) {
        Some((id, _)) if id.index <= index => partial::discard(dir),
        _ => Ok(()),
    }
}
