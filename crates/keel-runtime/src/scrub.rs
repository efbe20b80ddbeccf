//! The scrub thread: keel-wal's scrub passes (`keel_wal::scrub`) over the node's data directory,
//! one after another with a pause between them, reads paced to a configured rate
//! ([`ScrubConfig::rate_bytes_per_s`]; off unless it is set).
//!
//! A finding is read again in a second pass, one second later (`CONFIRM_AFTER`), before anything
//! is done, so that a file changing under the first pass cannot pass for rot; what both passes find
//! is handed to [`ScrubConfig::on_damage`], an [`OnDamage`] action. Rot in a running node's files
//! harms nothing yet (the node replicates and applies from memory); the repair is a restart, on
//! which `Wal::open_repairing` sets the damaged files aside and the node recovers what it lacks
//! from the cluster. keel-server restarts itself that way; an embedder decides (the default,
//! [`OnDamage::Stop`], stops the node with `NodeFailure::Damaged`, whose exit code is 75 for a
//! process that exits on failure and a supervisor that restarts it).
//! [`ScrubCounters`] counts passes and findings for status.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::failure::{FailureCell, NodeFailure};
use keel_wal::{scrub_pass, set_aside_spare_snapshots, ReadOnlyFs, ScrubPass, StdFs, Throttled};

/// What the node does when the scrub finds damage both passes agree on.
#[derive(Clone)]
pub enum OnDamage {
    /// Log it and stop the node (`NodeFailure::Damaged`, see [`crate::Node::failed`]):
    /// restarted, it repairs itself.
    Stop,
    /// Call this (on the scrub thread). The node keeps running: the callback decides.
    Call(Arc<dyn Fn(&ScrubPass) + Send + Sync>),
}

impl std::fmt::Debug for OnDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OnDamage::Stop => write!(f, "Stop"),
            OnDamage::Call(_) => write!(f, "Call(..)"),
        }
    }
}

/// The background scrub (off unless `rate_bytes_per_s` is set).
#[derive(Clone, Debug)]
pub struct ScrubConfig {
    /// Reads are paced to at most this many bytes per second; 0: no scrub.
    pub rate_bytes_per_s: u64,
    /// The pause after each pass.
    pub pause_between_passes: Duration,
    /// What to do with damage both passes agree on.
    pub on_damage: OnDamage,
}

impl Default for ScrubConfig {
    fn default() -> Self {
        ScrubConfig {
            rate_bytes_per_s: 0,
            pause_between_passes: Duration::from_secs(60),
            on_damage: OnDamage::Stop,
        }
    }
}

/// How long the confirming pass waits after a finding: long enough for a purge or a snapshot
/// save racing the first pass to have finished.
const CONFIRM_AFTER: Duration = Duration::from_secs(1);

/// Counters of the scrub, shared with the metrics and `INFO`.
#[derive(Debug, Default)]
pub struct ScrubCounters {
    /// Passes over the data directory completed.
    pub passes: AtomicU64,
    /// Findings both passes agreed on (each handed to `on_damage`).
    pub damage_found: AtomicU64,
}

/// Starts the scrub thread if configured; it ends when `stop` is set.
pub(crate) fn spawn(
    node: keel_core::NodeId,
    dir: PathBuf,
    config: ScrubConfig,
    stop: Arc<AtomicBool>,
    counters: Arc<ScrubCounters>,
    failure: Arc<FailureCell>,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    if config.rate_bytes_per_s == 0 {
        return Ok(None);
    }
    let thread = std::thread::Builder::new()
        .name("keel-scrub".into())
        .spawn(move || run(node, &dir, &config, &stop, &counters, &failure))?;
    Ok(Some(thread))
}

#[expect(clippy::too_many_lines)]
fn run(
    node: keel_core::NodeId,
    dir: &std::path::Path,
    config: &ScrubConfig,
    stop: &Arc<AtomicBool>,
    counters: &ScrubCounters,
    failure: &FailureCell,
) {
    let fs = Throttled::new(ReadOnlyFs, config.rate_bytes_per_s, stop.clone());
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let first = match scrub_pass(&fs, dir) {
            Ok(pass) => pass,
            Err(e) => {
                if !stop.load(Ordering::Relaxed) {
                    tracing::warn!(node, "scrub pass failed (tried again later): {e}");
                }
                pause(config.pause_between_passes, stop);
                continue;
            }
        };
        if stop.load(Ordering::Relaxed) {
            // A pass cut short by the stop reads its interrupted reads as unreadable files:
            // nothing it found means anything.
            return;
        }
        counters.passes.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            node,
            "scrub pass in {:?}: {} sealed segment(s), {} snapshot(s), {} finding(s)",
            started.elapsed(),
            first.segments_read,
            first.snapshots_read,
            first.findings.len()
        );
        if !first.is_clean() {
            pause(CONFIRM_AFTER, stop);
            let confirmed = confirm(&fs, dir, &first);
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if let Some(mut confirmed) = confirmed {
                counters
                    .damage_found
                    .fetch_add(confirmed.findings.len() as u64, Ordering::Relaxed);
                for finding in &confirmed.findings {
                    tracing::error!(node, "the scrub found damage on disk: {finding}");
                }
                // Damaged spare snapshots are set aside here: no restart would look at them.
                match set_aside_spare_snapshots(&StdFs, dir, &mut confirmed) {
                    Ok(spares) => {
                        for path in spares {
                            tracing::warn!(
                                node,
                                "set aside the damaged older snapshot {} (the node uses only the \
                                 newest)",
                                path.display()
                            );
                        }
                    }
                    Err(e) => tracing::warn!(node, "setting damaged snapshots aside: {e}"),
                }
                if confirmed.is_clean() {
                    pause(config.pause_between_passes, stop);
                    continue;
                }
                match &config.on_damage {
                    OnDamage::Stop => {
                        tracing::error!(
                            node,
                            "stopping the node: restarted, it sets the damaged files aside and \
                             recovers from the cluster"
                        );
                        let findings: Vec<String> =
                            confirmed.findings.iter().map(ToString::to_string).collect();
                        failure.record(NodeFailure::Damaged(findings.join("; ")));
                        return;
                    }
                    OnDamage::Call(handler) => handler(&confirmed),
                }
            }
        }
        pause(config.pause_between_passes, stop);
    }
}

/// A second pass; what it finds in the files the first one named (or both found nowhere in
/// particular). `None` when the second pass fails or no longer sees them.
fn confirm(
    fs: &Throttled<ReadOnlyFs>,
    dir: &std::path::Path,
    first: &ScrubPass,
) -> Option<ScrubPass> {
    let mut second = scrub_pass(fs, dir).ok()?;
    second
        .findings
        .retain(|d| first.findings.iter().any(|f| f.path == d.path));
    (!second.is_clean()).then_some(second)
}

fn pause(duration: Duration, stop: &AtomicBool) {
    let until = Instant::now() + duration;
    while !stop.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}
