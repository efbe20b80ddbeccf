//! The WAL's error type. Two families matter to a caller:
//!
//! - **Fatal** ([`WalError::is_fatal`]): an I/O error on the write path, above all a failed fsync.
//!   The process must stop. Never retry: after a failed fsync Linux may already have dropped the
//!   dirty pages and marked them clean, so a second fsync can succeed for data that is gone
//!   ("fsyncgate", PostgreSQL 2018). The `Wal` refuses every later call with
//!   [`WalError::Poisoned`].
//! - **Corruption** ([`WalError::is_corruption`]): recovery found acknowledged data damaged. The
//!   node must not start from this directory as if nothing happened: it would advertise a shorter
//!   log than it acknowledged (docs/SCENARIOS.md S36). Repair from peers or rebuild as a new member.
//!   Opening reports it as [`WalError::Damaged`], every finding with the intact prefix
//!   ([`WalError::damage`]); the typed corruption errors below name the spot inside it.

use std::io;
use std::path::PathBuf;

use keel_core::{Index, LogId};

/// Everything the WAL and its recovery fail with. [`WalError::is_fatal`] and
/// [`WalError::is_corruption`] sort the variants into the two families above;
/// [`WalError::InvalidRequest`] is in neither.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A file-system call other than an fsync failed: a read, a write, a listing, or creating,
    /// renaming or removing a file. Fatal wherever it happens ([`WalError::is_fatal`]): on the
    /// write path the WAL no longer knows what the file holds.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory the call was on.
        path: PathBuf,
        /// The error the file layer reported.
        source: io::Error,
    },

    /// An fsync (`fdatasync` of a file, or fsync of a directory) failed. Fatal, and never to be
    /// retried: the kernel may already have dropped the unsynced pages and marked them clean.
    #[error(
        "fsync failed on {path}: {source}; the process must stop (never retry: the kernel may \
         already have dropped the unsynced data)"
    )]
    SyncFailed {
        /// The file or directory whose fsync failed.
        path: PathBuf,
        /// The error the file layer reported.
        source: io::Error,
    },

    /// An earlier call failed fatally; the [`Wal`](crate::Wal) refuses every later call that
    /// writes, since it no longer knows what is durable. Restart the process.
    #[error("the WAL is unusable after an earlier fatal error; restart the process")]
    Poisoned,

    /// A segment's 64-byte header fails its magic, checksum, version or sequence number check, or
    /// the file is shorter than a header or not the length its header records (recovery step 2).
    /// A header is fsynced before the segment gets its final name, so this is corruption, never a
    /// tear.
    #[error("corrupt segment header in {path}: {reason}")]
    CorruptHeader {
        /// The segment file.
        path: PathBuf,
        /// Which check failed, for a person to read.
        reason: String,
    },

    /// Damage inside a segment that cannot be a torn final write (recovery steps 3 and 4): a frame
    /// that verifies but breaks the log's rules, or a spot that does not verify with a valid frame
    /// after it, in a sealed segment, or in a completely written last frame. Recovery refuses to
    /// truncate it: the frames there may have been acknowledged.
    #[error(
        "corrupt record in {path} at byte offset {offset}: {reason}; entries from index {index} on \
         may be affected (acknowledged data: refusing to truncate it)"
    )]
    CorruptRecord {
        /// The segment file.
        path: PathBuf,
        /// Byte offset in the file of the damaged frame, or of the first byte after the segment's
        /// valid frames.
        offset: u64,
        /// The first log index the damaged record may hold (one past the last intact entry).
        index: Index,
        /// What is wrong there, for a person to read.
        reason: String,
    },

    /// The segments do not form one log (recovery step 1): a segment number missing between two
    /// present ones, a segment without records before one with records, numbering that does not
    /// start at 1 although no segment holds records. The string says which, for a person to read.
    #[error("corrupt log structure: {0}")]
    CorruptLog(String),

    /// A snapshot file fails its checks: in recovery, no snapshot file verifies although some exist
    /// (`path` is then the newest); when adopting or reading one, its header or data does not
    /// verify.
    #[error("corrupt snapshot {path}: {reason}")]
    CorruptSnapshot {
        /// The snapshot file, or the temporary file offered for adoption.
        path: PathBuf,
        /// Which check failed, for a person to read.
        reason: String,
    },

    /// The log starts after the index following the newest usable snapshot (recovery step 6): the
    /// entries in between are gone, purged past a snapshot that was since lost or skipped as
    /// corrupt.
    #[error(
        "the log starts at index {log_first_index} but the newest usable snapshot covers only up \
         to {snapshot} (skipped as corrupt: {skipped:?}): entries in between are gone"
    )]
    SnapshotBehindLog {
        /// Position of the newest snapshot that verified: 0/0 when none is on disk.
        snapshot: LogId,
        /// The first index the log holds.
        log_first_index: Index,
        /// The newer snapshot files passed over because they do not verify, newest first.
        skipped: Vec<PathBuf>,
    },

    /// A call against the WAL's rules, refused without poisoning it: entries that do not continue
    /// the log, a term going back, an unsynced term or vote change, a commit beyond the last index,
    /// a purge, reset or install beyond the durable snapshot, a snapshot older than the newest, an
    /// adopted file that cannot be opened, snapshot data over the configured maximum, or a
    /// configuration [`WalConfig::validate`](crate::WalConfig::validate) refuses. Not fatal. The
    /// string says which, for a person to read.
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// Recovery found damage: acknowledged data lost or corrupt, a corrupt snapshot or promise
    /// record. Nothing on disk was changed. The report lists every finding and holds the intact
    /// prefix (see `damage.rs`).
    #[error("damaged data directory, refusing to start from it as if nothing happened: {0}")]
    Damaged(Box<crate::damage::DamageReport>),
}

impl WalError {
    /// The process must stop (see the module documentation).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            WalError::Io { .. } | WalError::SyncFailed { .. } | WalError::Poisoned
        )
    }

    /// Recovery found damaged acknowledged data or an inconsistent layout.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            WalError::CorruptHeader { .. }
                | WalError::CorruptRecord { .. }
                | WalError::CorruptLog(_)
                | WalError::CorruptSnapshot { .. }
                | WalError::SnapshotBehindLog { .. }
                | WalError::Damaged(_)
        )
    }

    /// The damage report, if recovery found damage.
    pub fn damage(&self) -> Option<&crate::damage::DamageReport> {
        match self {
            WalError::Damaged(report) => Some(report),
            _ => None,
        }
    }
}

/// The crate's result type, with [`WalError`] as the error unless another is named.
pub type Result<T, E = WalError> = std::result::Result<T, E>;

/// Attaches a path to an I/O error.
pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> WalError {
    // The path is converted (for a borrowed one: copied) only if there is an error: recovery
    // attaches it to every read.
    move |source| WalError::Io {
        path: path.into(),
        source,
    }
}

/// Attaches a path to a failed fsync.
pub(crate) fn sync_err(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> WalError {
    move |source| WalError::SyncFailed {
        path: path.into(),
        source,
    }
}
