//! The receiving side: which offers are taken, and what each chunk does to the partial file.

use std::io;
use std::path::{Path, PathBuf};

use keel_core::Index;
use keel_wal::snapshot::SnapshotFile;
use keel_wal::Fs;

use super::partial::{self, Partial};
use super::{
    AckStatus, ChunkHeader, PositionStatus, SnapshotAck, SnapshotId, SnapshotOffer, TransferError,
    REFUSALS_MAX,
};

/// A receiver's bounds.
#[derive(Clone, Copy, Debug)]
pub struct ReceiverLimits {
    /// The largest snapshot file accepted.
    pub snapshot_size_bytes_max: u64,
    /// The longest chunk accepted (checked before its data is read).
    pub chunk_bytes_max: u32,
    /// Received bytes are made durable at least this often.
    pub sync_interval_bytes: u64,
}

/// What the receiver decided for an offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfferDecision {
    /// Stream from `offset` (everything below it is durable here), writing under `ticket`.
    /// `discarded`: another snapshot's partial file was dropped for this one.
    Continue {
        /// Where the sender starts, in bytes (0: from the start).
        offset: u64,
        /// The connection's right to write the partial file, for its [`ReceiveSession`]; a
        /// later offer's ticket supersedes it.
        ticket: u64,
        /// Whether another snapshot's partial file was dropped.
        discarded: bool,
    },
    /// Answer the offer with this refusal (`NotNeeded`, `RefusedStale` or `RefusedTooLarge`).
    Refuse(PositionStatus),
}

/// The receiver's side, shared by its snapshot connections: the one partial transfer.
pub struct SnapshotReceiver<F: Fs> {
    fs: F,
    dir: PathBuf,
    /// The partial file left by an earlier run is read at the first offer, not at startup.
    loaded: bool,
    partial: Option<Partial<F>>,
    /// The snapshot received whole and handed to the node, until the node has handled it
    /// ([`SnapshotReceiver::settled`]): offered again meanwhile (the leader's core asked again
    /// before the install answer reached it), it is not needed.
    completed: Option<SnapshotId>,
    /// The ticket of the connection that may write the partial file: the one whose offer came
    /// last. An older connection still streaming the same snapshot (a deposed leader, or a
    /// sender that reconnected while its old connection drained) is superseded, so exactly one
    /// sender moves the file on and each sender's acknowledgements stay within what it sent.
    owner: u64,
    /// Length of the last chunk written (for the `snapshot-resume-skips-chunk` mutation).
    #[cfg(feature = "mutations")]
    last_chunk_len: u64,
    #[cfg(feature = "mutations")]
    mutation: Option<keel_core::Mutation>,
}

impl<F: Fs + Clone> SnapshotReceiver<F> {
    /// A receiver whose partial file lives in `dir` (the node's data directory).
    pub fn new(fs: F, dir: PathBuf) -> Self {
        SnapshotReceiver {
            fs,
            dir,
            loaded: false,
            partial: None,
            completed: None,
            owner: 0,
            #[cfg(feature = "mutations")]
            last_chunk_len: 0,
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// Test-only: a deliberately broken receiver (see `keel_core::Mutation`).
    #[cfg(feature = "mutations")]
    pub fn set_mutation(&mut self, mutation: Option<keel_core::Mutation>) {
        self.mutation = mutation;
    }

    /// The directory that holds the partial file.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Decides an offer. `floor`: the node's commit index (a snapshot at or below it is not
    /// needed).
    pub fn offer(
        &mut self,
        offer: &SnapshotOffer,
        floor: Index,
        limits: &ReceiverLimits,
    ) -> io::Result<OfferDecision> {
        if offer.id.index <= floor || self.completed.is_some_and(|c| c.same_snapshot(&offer.id)) {
            return Ok(OfferDecision::Refuse(PositionStatus::NotNeeded));
        }
        if offer.total_len_bytes > limits.snapshot_size_bytes_max {
            return Ok(OfferDecision::Refuse(PositionStatus::RefusedTooLarge));
        }
        if !self.loaded {
            self.partial = Partial::load(&self.fs, &self.dir)?;
            self.loaded = true;
        }
        let mut discarded = false;
        if let Some(p) = self.partial.as_mut() {
            if p.id.same_snapshot(&offer.id) && p.total_len_bytes == offer.total_len_bytes {
                // Same snapshot, whichever leader sends it: resume from what is durable.
                p.sync()?;
                p.id.leader_term = p.id.leader_term.max(offer.id.leader_term);
                #[cfg(feature = "mutations")]
                if self.mutation == Some(keel_core::Mutation::SnapshotResumeSkipsChunk)
                    && p.received > 0
                {
                    p.skip(self.last_chunk_len.max(1));
                }
                let offset = p.received;
                self.owner += 1;
                return Ok(OfferDecision::Continue {
                    offset,
                    ticket: self.owner,
                    discarded,
                });
            }
            if p.id.leader_term > offer.id.leader_term {
                return Ok(OfferDecision::Refuse(PositionStatus::RefusedStale));
            }
            discarded = true;
        }
        self.partial = None;
        self.partial = Some(Partial::create(
            &self.fs,
            &self.dir,
            offer.id,
            offer.total_len_bytes,
        )?);
        self.owner += 1;
        Ok(OfferDecision::Continue {
            offset: 0,
            ticket: self.owner,
            discarded,
        })
    }

    /// The node finished handling the snapshot it was last handed (installed it, or did not
    /// take it: not needed, refused, or not adopted by its storage). From now on only the
    /// commit-index floor answers an offer "not needed": a snapshot the core did not install
    /// is taken anew when a leader offers it again, instead of being refused forever.
    pub fn settled(&mut self) {
        self.completed = None;
    }

    /// Bytes of the partial transfer that would survive a crash now.
    pub fn durable(&self) -> u64 {
        self.partial.as_ref().map_or(0, |p| p.durable)
    }

    /// The partial transfer's snapshot and how much of it is written, if any.
    pub fn partial(&self) -> Option<(SnapshotId, u64)> {
        self.partial.as_ref().map(|p| (p.id, p.received))
    }

    /// A write or sync failed: the partial file can no longer be trusted.
    fn discard(&mut self) {
        self.partial = None;
        let _ = partial::discard(&self.fs, &self.dir);
    }
}

/// What happened to one chunk in the partial file.
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
    Complete(SnapshotFile),
    Failed(String),
}

impl<F: Fs + Clone> SnapshotReceiver<F> {
    fn write_chunk(
        &mut self,
        ticket: u64,
        header: &ChunkHeader,
        data: &[u8],
        limits: &ReceiverLimits,
    ) -> io::Result<Written> {
        if self.owner != ticket {
            return Ok(Written::Superseded);
        }
        let Some(p) = self.partial.as_mut() else {
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
        #[cfg(feature = "mutations")]
        {
            self.last_chunk_len = data.len() as u64;
        }
        let Some((total, whole_crc)) = header.last else {
            if p.received - p.durable >= limits.sync_interval_bytes {
                p.sync()?;
            }
            return Ok(Written::Accepted {
                received: p.received,
                durable: p.durable,
            });
        };
        let partial = self.partial.take().expect("checked above");
        if total != partial.total_len_bytes || whole_crc != partial.crc {
            let why = format!(
                "whole snapshot checksum {:#010x} / length {} differ from the sender's {whole_crc:#010x} / {total}",
                partial.crc, partial.received
            );
            drop(partial);
            partial::discard(&self.fs, &self.dir)?;
            return Ok(Written::Failed(why));
        }
        let id = partial.id;
        let path = partial.complete()?;
        // The snapshot file's own checksums (header, data) and position, before the node hears
        // of it. Only a file that passes is "just received": one that fails is taken anew when
        // offered again.
        match keel_wal::snapshot::verify_snapshot(&self.fs, &path) {
            Ok(file) if (file.meta.last.index, file.meta.last.term) == (id.index, id.term) => {
                self.completed = Some(id);
                Ok(Written::Complete(file))
            }
            Ok(_) => {
                let _ = self.fs.remove_file(&path);
                Ok(Written::Failed("snapshot file for another position".into()))
            }
            Err(why) => {
                let _ = self.fs.remove_file(&path);
                Ok(Written::Failed(why))
            }
        }
    }
}

/// What to answer a chunk with.
#[derive(Debug)]
pub enum ChunkAnswer {
    /// In flight behind a refused chunk: skipped, no answer (the sender resends from the
    /// refusal's offset).
    Silent,
    /// Send this acknowledgement (accepted, or resend from its offset) and go on.
    Ack(SnapshotAck),
    /// The whole snapshot is durable and verified (`file.path`, `file.meta`): hand it to the
    /// node, then send `ack` (complete) and end the connection.
    Complete {
        /// The verified snapshot file, under its received name.
        file: SnapshotFile,
        /// The acknowledgement to send, status `Complete`.
        ack: SnapshotAck,
    },
    /// This transfer cannot complete: send `ack` (failed) and end the connection. Either the
    /// whole snapshot failed verification (its file was discarded), or a chunk reached past the
    /// announced length (what was received before it is kept, checked chunk by chunk: a later
    /// offer of the same snapshot resumes from it, and the whole is verified at its end).
    Failed {
        /// What did not verify, for the log.
        why: String,
        /// The acknowledgement to send, status `Failed`.
        ack: SnapshotAck,
    },
    /// End the connection with this error.
    Close(TransferError),
}

/// One connection's receiving state after its offer was taken.
#[derive(Clone, Copy, Debug)]
pub struct ReceiveSession {
    id: SnapshotId,
    total_len_bytes: u64,
    ticket: u64,
    /// The offset this connection expects next.
    held: u64,
    /// The offset this connection last refused at: chunks already in flight after a refusal
    /// are skipped without an answer until the sender resends from there.
    refused_at: Option<u64>,
    refusals: u32,
}

impl ReceiveSession {
    /// A connection whose offer was answered `Continue { offset, ticket }`.
    pub fn new(offer: &SnapshotOffer, offset: u64, ticket: u64) -> Self {
        ReceiveSession {
            id: offer.id,
            total_len_bytes: offer.total_len_bytes,
            ticket,
            held: offset,
            refused_at: None,
            refusals: 0,
        }
    }

    fn ack(&self, status: AckStatus, received: u64, durable: u64) -> SnapshotAck {
        SnapshotAck {
            index: self.id.index,
            term: self.id.term,
            status,
            received,
            durable,
        }
    }

    /// Checks a chunk's header before its data is read: the snapshot offered, and a length
    /// bounded before anything is allocated for it.
    pub fn admit(
        &self,
        header: &ChunkHeader,
        limits: &ReceiverLimits,
    ) -> Result<(), TransferError> {
        if !header.id.same_snapshot(&self.id) {
            return Err(TransferError::Unexpected("chunk of another snapshot"));
        }
        if header.len_bytes > limits.chunk_bytes_max {
            return Err(TransferError::OversizeChunk {
                len_bytes: header.len_bytes,
                bytes_max: limits.chunk_bytes_max,
            });
        }
        Ok(())
    }

    /// Takes an admitted chunk's data. An I/O error means the partial file was discarded (it
    /// can no longer be trusted): end the connection with it.
    pub fn chunk<F: Fs + Clone>(
        &mut self,
        receiver: &mut SnapshotReceiver<F>,
        header: &ChunkHeader,
        data: &[u8],
        limits: &ReceiverLimits,
    ) -> io::Result<ChunkAnswer> {
        debug_assert_eq!(header.len_bytes as usize, data.len());
        let crc_ok = crc32c::crc32c(data) == header.crc;
        if header.offset != self.held || !crc_ok {
            if header.offset != self.held && self.refused_at == Some(self.held) {
                return Ok(ChunkAnswer::Silent);
            }
            self.refusals += 1;
            if self.refusals > REFUSALS_MAX {
                return Ok(ChunkAnswer::Close(TransferError::Refused(
                    "too many bad chunks",
                )));
            }
            self.refused_at = Some(self.held);
            let ack = self.ack(AckStatus::Resend, self.held, receiver.durable());
            return Ok(ChunkAnswer::Ack(ack));
        }
        let written = match receiver.write_chunk(self.ticket, header, data, limits) {
            Ok(w) => w,
            Err(e) => {
                receiver.discard();
                return Err(e);
            }
        };
        Ok(match written {
            Written::Accepted { received, durable } => {
                self.refusals = 0;
                self.refused_at = None;
                self.held = received;
                ChunkAnswer::Ack(self.ack(AckStatus::Accepted, received, durable))
            }
            Written::Misplaced { received, durable } => {
                // Defensive: this connection is the only writer, so `held` is the file's end.
                self.held = received;
                self.refused_at = Some(received);
                ChunkAnswer::Ack(self.ack(AckStatus::Resend, received, durable))
            }
            Written::Superseded => {
                ChunkAnswer::Close(TransferError::Refused("superseded by another transfer"))
            }
            Written::Failed(why) => ChunkAnswer::Failed {
                why,
                ack: self.ack(AckStatus::Failed, 0, 0),
            },
            Written::Complete(file) => {
                let total = self.total_len_bytes;
                ChunkAnswer::Complete {
                    file,
                    ack: self.ack(AckStatus::Complete, total, total),
                }
            }
        })
    }
}

/// Discards a partial transfer left in `dir` if it is for a snapshot at or below `index` (the
/// node's commit index at startup: the core would ignore it).
pub fn discard_stale_partial<F: Fs>(fs: &F, dir: &Path, index: Index) -> io::Result<()> {
    match partial::peek(fs, dir) {
        Some((id, _)) if id.index <= index => partial::discard(fs, dir),
        _ => Ok(()),
    }
}
