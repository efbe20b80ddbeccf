//! Damage: what recovery found missing or corrupt among the data a node promised, as opposed to a
//! torn final write it never acknowledged.
//!
//! Recovery reads the log as far as it verifies (the *intact prefix*) and compares it with the
//! promise record ([`crate::promise`]). Each finding is a [`Damage`]:
//!
//! | kind                              | found when                                                       |
//! |-----------------------------------|------------------------------------------------------------------|
//! | [`DamageKind::LostTail`]          | the log, with its snapshot, ends below the promised entry, holds another term at its index, or has a term or vote behind the promised one (a disk that reported flushes it did not do; a deleted last segment) |
//! | [`DamageKind::CorruptLog`]        | a record, segment header or the segment sequence does not verify where only synced data can be (a flipped bit, a deleted middle segment): the rules of lib.rs, "Recovery, case by case" |
//! | [`DamageKind::CorruptSnapshot`]   | a snapshot file fails its checksums (also when an older one still verifies: the file is damaged) |
//! | [`DamageKind::CorruptPromise`]    | the promise file exists but neither copy verifies: what was promised is unknown |
//!
//! [`crate::Wal::open`] refuses a damaged directory with [`crate::WalError::Damaged`], which holds
//! every finding and the intact prefix, and changes nothing on disk; [`crate::recover::inspect`]
//! reports the same read-only (what `keel check` prints). The layer above decides what to do:
//! [`crate::Wal::open_repairing`] sets corrupt segments (with every later one) and corrupt
//! snapshots aside as `*.damaged` and opens what remains, a log that lost its tail, on its intact
//! prefix, reporting what was promised and the terms of the log that held it (`former_terms`,
//! for keel-core's repair); a corrupt promise record is still refused.
//!
//! # What stays undetectable
//!
//! - A disk that lost the promise file itself (or a whole directory entry written with it): a
//!   log without a promise file is taken for one written before the promise existed, and its
//!   lost tail is not seen. So is a disk that lost the promise's latest write *and* the log's tail
//!   together (the older copy promises less).
//! - Both copies lost to an older state together (a disk that rolls back a whole file): the
//!   promise then covers less than was acknowledged.
//! - A damaged newest copy with a valid older one: the older copy is used (it promises the state
//!   one write earlier); only the entries of that last write go unchecked. `keel check` reports
//!   the bad copy.
//! - Damage to entries the log still holds but that the checksums do not cover — none: every
//!   byte of a frame is covered. A flip that keeps a checksum valid (probability 2^-32 per
//!   damaged record) is not detected anywhere.

use std::path::{Path, PathBuf};
use std::time::Instant;

use keel_core::{HardState, Index, LogId, RecoveredState};

use crate::error::{Result, WalError};
use crate::fs::Fs;
use crate::promise::{read_promise, PromiseRead};
use crate::recover::{self, Assembled, Recovered, RecoveryStats, Scan};
use crate::snapshot::{self, LatestSnapshot};

/// What kind of damage recovery found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DamageKind {
    /// The log ends below the promise (or does not hold the promised entry, or its term and vote
    /// are behind the promised ones).
    LostTail,
    /// A record, a segment header or the sequence of segments does not verify where only synced
    /// data can be.
    CorruptLog,
    /// A snapshot file does not verify.
    CorruptSnapshot,
    /// The promise file exists but neither copy verifies.
    CorruptPromise,
}

impl DamageKind {
    /// The kind's name in kebab case (`lost-tail`, `corrupt-log`, ...), as [`Damage`]'s `Display`
    /// prints it.
    pub fn name(self) -> &'static str {
        match self {
            DamageKind::LostTail => "lost-tail",
            DamageKind::CorruptLog => "corrupt-log",
            DamageKind::CorruptSnapshot => "corrupt-snapshot",
            DamageKind::CorruptPromise => "corrupt-promise",
        }
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// What was found.
    pub kind: DamageKind,
    /// The last entry the promise record says was acknowledged (`None`: no readable promise).
    pub promised: Option<LogId>,
    /// The node holds an intact, contiguous state — snapshot, then log — up to this index.
    pub intact_through: Index,
    /// The damaged file, where one is to blame.
    pub path: Option<PathBuf>,
    /// Where in it, for a damaged record.
    pub offset: Option<u64>,
    /// What exactly is wrong, for a person to read.
    pub detail: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.detail)?;
        if let Some(path) = &self.path {
            write!(f, " ({}", path.display())?;
            if let Some(offset) = self.offset {
                write!(f, " at byte offset {offset}")?;
            }
            write!(f, ")")?;
        }
        match self.promised {
            Some(p) => write!(f, "; promised through {p}")?,
            None => write!(f, "; no readable promise")?,
        }
        write!(f, ", intact through index {}", self.intact_through)
    }
}

/// Everything recovery found wrong, and the intact prefix it could still read.
#[derive(Clone, Debug)]
pub struct DamageReport {
    /// Every finding.
    pub damage: Vec<Damage>,
    /// The intact prefix: the state up to the first damage, with the term and vote raised to the
    /// promised ones (a node never goes back on a vote, whatever its log lost).
    pub recovered: Recovered,
    /// The first index of each of the last terms of the log that held the promise, from the
    /// promise record (empty when it kept none: format version 1), for the node to tell its
    /// peers which of their entries are the ones it lost (keel-core's
    /// `RaftNode::start_recovering`).
    pub former_terms: Vec<LogId>,
}

impl DamageReport {
    /// The entry a node opened on this report's intact prefix must recover to before it may
    /// campaign or vote for a shorter log (keel-core's `RaftNode::start_recovering`): the
    /// highest promised entry any finding names. `None` when no finding names one (a directory
    /// written before the promise record existed): nothing says what was acknowledged. The one
    /// decision the runtime and the simulator both take from a report.
    pub fn recover_to(&self) -> Option<LogId> {
        self.damage.iter().filter_map(|d| d.promised).max()
    }
}

impl std::fmt::Display for DamageReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, d) in self.damage.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// A corruption error of the log scan as a finding; `None` for any other error.
pub(crate) fn log_damage(
    error: &WalError,
    promised: Option<LogId>,
    intact_through: Index,
) -> Option<Damage> {
    let (path, offset, detail) = match error {
        WalError::CorruptRecord {
            path,
            offset,
            reason,
            ..
        } => (Some(path.clone()), Some(*offset), reason.clone()),
        WalError::CorruptHeader { path, reason } => (
            Some(path.clone()),
            None,
            format!("segment header: {reason}"),
        ),
        WalError::CorruptLog(reason) => (None, None, reason.clone()),
        _ => return None,
    };
    Some(Damage {
        kind: DamageKind::CorruptLog,
        promised,
        intact_through,
        path,
        offset,
        detail,
    })
}

/// Compares the recovered (intact) state with the promise: a lost tail or a lost term or vote.
pub(crate) fn check_promise(recovered: &Recovered, promise: &PromiseRead) -> Vec<Damage> {
    let state = &recovered.state;
    let last = state.entries.last().map_or(state.snapshot, |e| e.log_id());
    let Some(p) = promise.promise() else {
        if !promise.unreadable() {
            return Vec::new();
        }
        let reasons: Vec<String> = promise.slots.iter().map(|s| format!("{s:?}")).collect();
        return vec![Damage {
            kind: DamageKind::CorruptPromise,
            promised: None,
            intact_through: last.index,
            path: None,
            offset: None,
            detail: format!(
                "neither copy of the promise record verifies ({})",
                reasons.join(", ")
            ),
        }];
    };
    let lost = |detail: String| Damage {
        kind: DamageKind::LostTail,
        promised: Some(p.acked),
        intact_through: last.index,
        path: None,
        offset: None,
        detail,
    };
    // A log that disagreed with its snapshot (an install interrupted before its reset reached the
    // log) had its entries after the snapshot dropped: never committed, so a promise naming one
    // of them — that very entry, its term included — is not lost. A promise naming another
    // entry at such an index is (a lost tail that uncovered entries an earlier truncation had
    // replaced: simulator seed 21028449).
    let stats = &recovered.stats;
    let discarded_through = state.snapshot.index + stats.discarded_conflicting_entries;
    let promise_discarded = p.acked.index > state.snapshot.index
        && p.acked.index <= discarded_through
        && stats
            .discarded_term_ends
            .iter()
            .find(|end| end.index >= p.acked.index)
            .is_some_and(|end| end.term == p.acked.term);
    let mut found = Vec::new();
    if p.acked.index > last.index && !promise_discarded {
        found.push(lost(format!(
            "the log ends at {last}, below the promised {}: {} acknowledged entries are gone",
            p.acked,
            p.acked.index - last.index
        )));
    } else if p.acked.index > state.snapshot.index && p.acked.index <= last.index {
        // Entries at or below the snapshot are covered by it, whatever term the promise names:
        // an entry the snapshot replaced was never committed.
        let at = (p.acked.index - state.snapshot.index - 1) as usize;
        let term = state.entries.get(at).map_or(0, |e| e.term);
        if term != p.acked.term {
            found.push(lost(format!(
                "the log holds index {} with term {term}, not the promised {}",
                p.acked.index, p.acked
            )));
        }
    }
    let hs = state.hard_state;
    if p.term > hs.term || (p.term == hs.term && p.vote.is_some() && hs.vote != p.vote) {
        found.push(lost(format!(
            "the log's term {} and vote {:?} are behind the promised term {} and vote {:?}",
            hs.term, hs.vote, p.term, p.vote
        )));
    }
    found
}

/// The term and vote of `hs`, raised to the promise's where it is ahead (never back on a vote).
pub(crate) fn with_promised_vote(hs: HardState, promise: &PromiseRead) -> HardState {
    match promise.promise() {
        Some(p) if p.term > hs.term => HardState {
            term: p.term,
            vote: p.vote,
            commit: hs.commit,
        },
        Some(p) if p.term == hs.term && hs.vote.is_none() => HardState { vote: p.vote, ..hs },
        _ => hs,
    }
}

/// The scan judged against the snapshot files and the promise.
pub(crate) struct Judged {
    pub assembled: Assembled,
    pub promise: PromiseRead,
    pub damage: Vec<Damage>,
}

/// Assembles the scanned log with the newest usable snapshot and lists every damage. With
/// damage, the assembled state is the intact prefix, its term and vote raised to the promise's.
///
/// `trust_tail` is the `trust-damaged-tail` mutation (the simulator's only): the log's end is
/// not compared with the promise, so a lost tail goes unreported.
pub(crate) fn judge<F: Fs>(
    fs: &F,
    dir: &Path,
    scan: &mut Scan,
    started: Instant,
    trust_tail: bool,
) -> Result<Judged> {
    let promise = read_promise(fs, dir)?;
    let promised = promise.promise().map(|p| p.acked);
    let latest = snapshot::find_latest_snapshot(fs, dir)?;
    let snapshot_damage = |path: Option<PathBuf>, detail: String| Damage {
        kind: DamageKind::CorruptSnapshot,
        promised,
        intact_through: 0,
        path,
        offset: None,
        detail,
    };
    let mut damage: Vec<Damage> = latest
        .skipped
        .iter()
        .map(|s| snapshot_damage(Some(s.path.clone()), s.reason.clone()))
        .collect();
    let log_error = scan.damage.take();
    let mut log_joined = true;
    let mut assembled = match recover::assemble(scan, latest.clone(), started) {
        Ok(assembled) => assembled,
        Err(e @ (WalError::SnapshotBehindLog { .. } | WalError::CorruptSnapshot { .. })) => {
            if matches!(e, WalError::SnapshotBehindLog { .. }) {
                // The snapshot that covered the purged log is gone or damaged.
                damage.push(snapshot_damage(None, e.to_string()));
            }
            log_joined = false;
            snapshot_only(scan, latest, started)
        }
        Err(e) => return Err(e),
    };
    let state = &assembled.recovered.state;
    let last = state
        .entries
        .last()
        .map_or(state.snapshot.index, |e| e.index);
    for d in &mut damage {
        d.intact_through = last;
    }
    match &log_error {
        Some(error) => damage.extend(log_damage(error, promised, last)),
        // A log that cannot be joined to a snapshot is already reported as lost.
        None if log_joined && !trust_tail => {
            damage.extend(check_promise(&assembled.recovered, &promise))
        }
        None => {}
    }
    if !damage.is_empty() {
        // The reset a log below (or at odds with) its snapshot needs stays: `open_repairing`
        // writes it so that disk and memory agree (a refusing open writes nothing anyway).
        let state = &mut assembled.recovered.state;
        state.hard_state = with_promised_vote(state.hard_state, &promise);
    }
    Ok(Judged {
        assembled,
        promise,
        damage,
    })
}

/// The newest usable snapshot alone (no log): the intact state when the log cannot be joined to
/// any snapshot.
fn snapshot_only(scan: &Scan, latest: LatestSnapshot, started: Instant) -> Assembled {
    let meta = latest
        .chosen
        .as_ref()
        .map(|s| s.meta.clone())
        .unwrap_or_else(|| keel_core::SnapshotMeta::initial(Default::default()));
    let hard_state = HardState {
        commit: meta.last.index,
        ..scan.replay.hard_state
    };
    let state = RecoveredState {
        hard_state,
        snapshot: meta.last,
        snapshot_membership: (*meta.membership).clone(),
        snapshot_term_history: meta.term_history,
        entries: Vec::new(),
        applied: meta.last.index,
    };
    Assembled {
        recovered: Recovered {
            state,
            snapshot: latest.chosen,
            trailing: Vec::new(),
            stats: RecoveryStats {
                segments: scan.segments.len(),
                frames: scan.frames,
                bytes_read: scan.bytes_read,
                duration: started.elapsed(),
                skipped_snapshots: latest.skipped,
                ..RecoveryStats::default()
            },
        },
        needs_reset: None,
    }
}
