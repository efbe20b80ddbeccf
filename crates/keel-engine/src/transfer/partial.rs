//! The receiver's one partial snapshot: the durable "installing" state (scenario S35).
//!
//! Two files in the node's data directory, both ignored by the WAL:
//!
//! - `incoming.snap.part`: the first `received` bytes of the sender's snapshot file.
//! - `incoming.snap.state`: 60 bytes, rewritten in place after each sync of the data file:
//!
//! | offset | size | field                                                  |
//! |-------:|-----:|--------------------------------------------------------|
//! |      0 |    8 | magic `KEELPART`                                       |
//! |      8 |    4 | format version u32 = 1                                 |
//! |     12 |    8 | leader term u64                                        |
//! |     20 |    8 | snapshot index u64                                     |
//! |     28 |    8 | snapshot term u64                                      |
//! |     36 |    8 | total length u64                                       |
//! |     44 |    8 | durable offset u64 (data fsynced before this was written) |
//! |     52 |    4 | CRC32C of the data's first `durable` bytes             |
//! |     56 |    4 | CRC32C of bytes 0..56                                  |
//!
//! Crash model: the data file is fsynced before the state naming its new durable offset is
//! written, so a state that verifies never names bytes that were not durable. A torn or missing
//! state discards the partial transfer (it costs a retransmission, never correctness: the whole
//! checksum and the snapshot file's own checksums are verified before anything is installed).
//! Nothing here touches the log or the state machine; a node restarted mid-transfer comes back
//! with its old log and state and resumes (or discards) the transfer.
//!
//! Generic over [`keel_wal::Fs`]: the runtime runs it on the real file system, the simulator on
//! its fault-injecting one.

use std::io;
use std::path::{Path, PathBuf};

use keel_wal::{FileHandle, Fs};

use super::SnapshotId;

/// The data file's name in the data directory.
pub const PART_FILE_NAME: &str = "incoming.snap.part";
/// The state file's name in the data directory (layout in the module documentation).
pub const STATE_FILE_NAME: &str = "incoming.snap.state";
const STATE_MAGIC: [u8; 8] = *b"KEELPART";
const STATE_VERSION: u32 = 1;
const STATE_SIZE_BYTES: usize = 60;

/// A partial transfer on disk, open for appending.
pub struct Partial<F: Fs> {
    fs: F,
    dir: PathBuf,
    /// The snapshot being received.
    pub id: SnapshotId,
    /// The whole snapshot file's length, as offered.
    pub total_len_bytes: u64,
    part: F::File,
    state: F::File,
    /// Bytes written contiguously from the start.
    pub received: u64,
    /// The CRC32C of the first `received` bytes.
    pub crc: u32,
    /// Bytes fsynced and recorded in the state file.
    pub durable: u64,
}

fn encode_state(id: SnapshotId, total: u64, durable: u64, crc: u32) -> [u8; STATE_SIZE_BYTES] {
    let mut b = [0u8; STATE_SIZE_BYTES];
    b[0..8].copy_from_slice(&STATE_MAGIC);
    b[8..12].copy_from_slice(&STATE_VERSION.to_le_bytes());
    b[12..20].copy_from_slice(&id.leader_term.to_le_bytes());
    b[20..28].copy_from_slice(&id.index.to_le_bytes());
    b[28..36].copy_from_slice(&id.term.to_le_bytes());
    b[36..44].copy_from_slice(&total.to_le_bytes());
    b[44..52].copy_from_slice(&durable.to_le_bytes());
    b[52..56].copy_from_slice(&crc.to_le_bytes());
    let sum = crc32c::crc32c(&b[..56]);
    b[56..60].copy_from_slice(&sum.to_le_bytes());
    b
}

fn decode_state(b: &[u8; STATE_SIZE_BYTES]) -> Option<(SnapshotId, u64, u64, u32)> {
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    if b[0..8] != STATE_MAGIC || u32_at(8) != STATE_VERSION {
        return None;
    }
    if crc32c::crc32c(&b[..56]) != u32_at(56) {
        return None;
    }
    let id = SnapshotId {
        leader_term: u64_at(12),
        index: u64_at(20),
        term: u64_at(28),
    };
    Some((id, u64_at(36), u64_at(44), u32_at(52)))
}

fn remove_if_present<F: Fs>(fs: &F, path: &Path) -> io::Result<bool> {
    match fs.remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn open_if_present<F: Fs>(fs: &F, path: &Path) -> io::Result<Option<F::File>> {
    match fs.open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The state file's contents, if it exists and verifies.
fn read_state<F: Fs>(state: &F::File) -> io::Result<Option<(SnapshotId, u64, u64, u32)>> {
    let mut bytes = [0u8; STATE_SIZE_BYTES];
    let n = state.read_at(&mut bytes, 0)?;
    Ok((n == STATE_SIZE_BYTES)
        .then(|| decode_state(&bytes))
        .flatten())
}

/// Deletes whatever partial transfer `dir` holds.
pub fn discard<F: Fs>(fs: &F, dir: &Path) -> io::Result<()> {
    // The state first: a data file without a state is discarded on the next load.
    let a = remove_if_present(fs, &dir.join(STATE_FILE_NAME))?;
    let b = remove_if_present(fs, &dir.join(PART_FILE_NAME))?;
    if a || b {
        fs.sync_dir(dir)?;
    }
    Ok(())
}

/// The snapshot a partial transfer in `dir` is for and its durable offset, if one verifies
/// (without opening it for writing).
pub fn peek<F: Fs>(fs: &F, dir: &Path) -> Option<(SnapshotId, u64)> {
    let state = open_if_present(fs, &dir.join(STATE_FILE_NAME)).ok()??;
    let (id, _, durable, _) = read_state::<F>(&state).ok()??;
    Some((id, durable))
}

impl<F: Fs> Partial<F> {
    /// Loads the partial transfer `dir` holds, truncated to its durable offset; deletes
    /// leftovers that do not verify.
    pub fn load(fs: &F, dir: &Path) -> io::Result<Option<Partial<F>>>
    where
        F: Clone,
    {
        let Some(state) = open_if_present(fs, &dir.join(STATE_FILE_NAME))? else {
            discard(fs, dir)?;
            return Ok(None);
        };
        let Some((id, total, durable, crc)) = read_state::<F>(&state)? else {
            drop(state);
            discard(fs, dir)?;
            return Ok(None);
        };
        let Some(mut part) = open_if_present(fs, &dir.join(PART_FILE_NAME))? else {
            drop(state);
            discard(fs, dir)?;
            return Ok(None);
        };
        if part.len_bytes()? < durable || durable >= total {
            drop((state, part));
            discard(fs, dir)?;
            return Ok(None);
        }
        // Bytes past the durable offset may be torn: drop them.
        part.set_len(durable)?;
        Ok(Some(Partial {
            fs: fs.clone(),
            dir: dir.to_owned(),
            id,
            total_len_bytes: total,
            part,
            state,
            received: durable,
            crc,
            durable,
        }))
    }

    /// Starts a new partial transfer, discarding any other.
    pub fn create(fs: &F, dir: &Path, id: SnapshotId, total_len_bytes: u64) -> io::Result<Self>
    where
        F: Clone,
    {
        discard(fs, dir)?;
        let part = fs.create(&dir.join(PART_FILE_NAME))?;
        let mut state = fs.create(&dir.join(STATE_FILE_NAME))?;
        state.write_at(&encode_state(id, total_len_bytes, 0, 0), 0)?;
        state.sync_data()?;
        fs.sync_dir(dir)?;
        Ok(Partial {
            fs: fs.clone(),
            dir: dir.to_owned(),
            id,
            total_len_bytes,
            part,
            state,
            received: 0,
            crc: 0,
            durable: 0,
        })
    }

    /// Appends a verified chunk at `received`.
    pub fn write_chunk(&mut self, data: &[u8]) -> io::Result<()> {
        assert!(self.received + data.len() as u64 <= self.total_len_bytes);
        self.part.write_at(data, self.received)?;
        self.crc = crc32c::crc32c_append(self.crc, data);
        self.received += data.len() as u64;
        Ok(())
    }

    /// Test-only: the partial believes it holds `len` bytes more than were written (the
    /// `snapshot-resume-skips-chunk` mutation).
    #[cfg(feature = "mutations")]
    pub(super) fn skip(&mut self, len: u64) {
        self.received += len.min(self.total_len_bytes - self.received - 1);
    }

    /// Makes everything received durable and records it. Never records the whole length: a
    /// transfer completes only through [`Partial::complete`], which needs the final chunk's
    /// whole checksum.
    pub fn sync(&mut self) -> io::Result<()> {
        if self.received == self.durable || self.received >= self.total_len_bytes {
            return Ok(());
        }
        self.part.sync_data()?;
        let state = encode_state(self.id, self.total_len_bytes, self.received, self.crc);
        self.state.write_at(&state, 0)?;
        self.state.sync_data()?;
        self.durable = self.received;
        Ok(())
    }

    /// The transfer is whole and its checksum matched: fsync the data and move it out of the
    /// partial slot to `snapshot-{index}-{term}.received.snap.tmp` (a name the WAL deletes on open
    /// if a crash leaves it unadopted), so a new transfer cannot discard it before the node adopts
    /// it. Returns that path.
    pub fn complete(mut self) -> io::Result<PathBuf> {
        assert_eq!(self.received, self.total_len_bytes);
        self.part.sync_data()?;
        let to = self.dir.join(format!(
            "snapshot-{:020}-{:020}.received.snap.tmp",
            self.id.index, self.id.term
        ));
        remove_if_present(&self.fs, &to)?;
        drop(self.state);
        remove_if_present(&self.fs, &self.dir.join(STATE_FILE_NAME))?;
        drop(self.part);
        self.fs.rename(&self.dir.join(PART_FILE_NAME), &to)?;
        self.fs.sync_dir(&self.dir)?;
        Ok(to)
    }
}
