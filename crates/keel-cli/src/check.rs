//! `keel check --data-dir DIR`: verifies a stopped node's data directory offline — every log
//! segment, every snapshot file, the promise record — and says what is damaged. It prints the
//! log range, the snapshots (every older snapshot file too), the promise record, and one
//! `DAMAGE` line per finding. Read-only (keel-wal's `ReadOnlyFs`): it changes nothing, and works
//! on a read-only copy. Exit status: 0 clean, 1 damaged, 2 when the directory cannot be read at
//! all.
//!
//! The judgement is keel-wal's own (`keel_wal::inspect`, what `keel serve` refuses to start on);
//! this adds the older snapshot files a node would not read while a newer one verifies.

use std::path::Path;
use std::process::ExitCode;

use keel_wal::promise::SlotState;
use keel_wal::{Inspection, ReadOnlyFs};

/// Exit status of a damaged directory.
const EXIT_DAMAGED: u8 = 1;
/// Exit status when the directory could not be examined.
const EXIT_UNREADABLE: u8 = 2;

pub fn run(dir: &Path) -> ExitCode {
    if !dir.is_dir() {
        eprintln!("keel check: {} is not a directory", dir.display());
        return ExitCode::from(EXIT_UNREADABLE);
    }
    let report = match examine(dir) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("keel check: {}: {e}", dir.display());
            return ExitCode::from(EXIT_UNREADABLE);
        }
    };
    for line in &report.lines {
        println!("{line}");
    }
    if report.damage == 0 {
        println!("clean: a node may start from {}", dir.display());
        ExitCode::SUCCESS
    } else {
        println!(
            "damaged: {} finding(s); `keel serve` refuses to start from {} until it is repaired",
            report.damage,
            dir.display()
        );
        ExitCode::from(EXIT_DAMAGED)
    }
}

/// What `keel check` prints, and how many of its lines are damage.
pub struct CheckReport {
    pub lines: Vec<String>,
    pub damage: usize,
}

/// Examines `dir` read-only.
pub fn examine(dir: &Path) -> Result<CheckReport, keel_wal::WalError> {
    let fs = ReadOnlyFs;
    let inspection = keel_wal::inspect(&fs, dir)?;
    let mut lines = vec![
        log_line(&inspection),
        snapshot_line(&inspection),
        promise_line(&inspection),
    ];
    for (slot, state) in inspection.promise.slots.iter().enumerate() {
        if let SlotState::Corrupt(why) = state {
            lines.push(format!(
                "note: promise copy {slot} does not verify ({why}); the other copy is used, and \
                 the next write replaces this one"
            ));
        }
    }
    if let Some(torn) = &inspection.recovered.stats.torn_tail {
        lines.push(format!(
            "note: torn final write in {} at byte offset {}: never acknowledged, discarded when \
             the node starts",
            torn.path.display(),
            torn.offset
        ));
    }
    let mut damage = 0;
    for d in &inspection.damage {
        lines.push(format!("DAMAGE {d}"));
        damage += 1;
    }
    // Older snapshots than the one in use are not read by recovery, but a damaged one is still a
    // damaged file on this disk.
    let in_use = inspection
        .recovered
        .snapshot
        .as_ref()
        .map(|s| s.path.clone());
    let reported: Vec<_> = inspection
        .damage
        .iter()
        .filter_map(|d| d.path.clone())
        .collect();
    for (_, path) in keel_wal::snapshot::list_snapshots(&fs, dir)? {
        if Some(&path) == in_use.as_ref() || reported.contains(&path) {
            continue;
        }
        if let Err(why) = keel_wal::snapshot::verify_snapshot(&fs, &path) {
            lines.push(format!(
                "DAMAGE corrupt-snapshot: {why} ({}; an older snapshot, not in use)",
                path.display()
            ));
            damage += 1;
        }
    }
    Ok(CheckReport { lines, damage })
}

fn log_line(inspection: &Inspection) -> String {
    let state = &inspection.recovered.state;
    let stats = &inspection.recovered.stats;
    let hs = state.hard_state;
    let vote = hs.vote.map_or("none".to_string(), |v| v.to_string());
    let entries = match (state.entries.first(), state.entries.last()) {
        (Some(first), Some(last)) => format!(
            "entries {}..={} ({})",
            first.index,
            last.index,
            state.entries.len()
        ),
        _ => "no entries after the snapshot".to_string(),
    };
    let intact = if inspection.damage.is_empty() {
        ""
    } else {
        " (the intact prefix)"
    };
    format!(
        "log: {} segment(s), {} frame(s), {entries}{intact}; term {}, vote {vote}, commit {}",
        stats.segments, stats.frames, hs.term, hs.commit
    )
}

fn snapshot_line(inspection: &Inspection) -> String {
    match &inspection.recovered.snapshot {
        Some(file) => format!(
            "snapshot: {} ({} data bytes, {}), in use",
            file.meta.last,
            file.data_len_bytes,
            file.path.display()
        ),
        None => "snapshot: none usable".to_string(),
    }
}

fn promise_line(inspection: &Inspection) -> String {
    let read = &inspection.promise;
    if read.missing {
        return "promise: no promise file (a directory written before keel recorded one, or a \
                lost file: a lost tail cannot be detected)"
            .to_string();
    }
    let valid = read
        .slots
        .iter()
        .filter(|s| matches!(s, SlotState::Valid { .. }))
        .count();
    match read.newest() {
        Some((seq, promise)) => {
            format!("promise: {promise} (write {seq}; {valid} of 2 copies verify)")
        }
        None => "promise: unreadable (neither copy verifies)".to_string(),
    }
}
