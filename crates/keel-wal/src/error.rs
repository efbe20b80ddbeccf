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

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },

    #[error(
        "fsync failed on {path}: {source}; the process must stop (never retry: the kernel may \
         already have dropped the unsynced data)"
    )]
    SyncFailed { path: PathBuf, source: io::Error },

    #[error("the WAL is unusable after an earlier fatal error; restart the process")]
    Poisoned,

    #[error("corrupt segment header in {path}: {reason}")]
    CorruptHeader { path: PathBuf, reason: String },

    #[error(
        "corrupt record in {path} at byte offset {offset}: {reason}; entries from index {index} on \
         may be affected (acknowledged data: refusing to truncate it)"
    )]
    CorruptRecord {
        path: PathBuf,
        offset: u64,
        /// The first log index the damaged record may hold (one past the last intact entry).
        index: Index,
        reason: String,
    },

    #[error("corrupt log structure: {0}")]
    CorruptLog(String),

    #[error("corrupt snapshot {path}: {reason}")]
    CorruptSnapshot { path: PathBuf, reason: String },

    #[error(
        "the log starts at index {log_first_index} but the newest usable snapshot covers only up \
         to {snapshot} (skipped as corrupt: {skipped:?}): entries in between are gone"
    )]
    SnapshotBehindLog {
        snapshot: LogId,
        log_first_index: Index,
        skipped: Vec<PathBuf>,
    },

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
