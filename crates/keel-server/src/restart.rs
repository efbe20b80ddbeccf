//! Restarting the node process in place, to repair damage found while it runs (the scrub,
//! keel-runtime's `scrub.rs`): the process image is replaced by a fresh run of the same binary
//! with the same arguments, as a supervisor would restart it, and the start-up path
//! (`Wal::open_repairing`) sets the damaged files aside and recovers the rest from the cluster.
//! At most `RESTARTS_MAX` (3) restarts within an hour, counted across the runs in an environment
//! variable (`KEEL_REPAIR_RESTARTS`); then fail-stop.
//!
//! The old process ends like a crash (kill -9): everything it acknowledged is already durable,
//! and its sockets and the data directory's descriptors close on exec. The process id stays the
//! same, so a supervisor watching it sees nothing stop.

use std::os::unix::process::CommandExt;

/// Counts the restarts in place of this process's lineage: `<count>,<unix seconds of the first>`.
const RESTARTS_ENV: &str = "KEEL_REPAIR_RESTARTS";
/// At most this many restarts in place within [`RESTARTS_WINDOW_S`]: damage a restart does not
/// repair must stop the node (fail-stop, for an operator) rather than restart it forever.
const RESTARTS_MAX: u64 = 3;
const RESTARTS_WINDOW_S: u64 = 3600;

/// Replaces this process with a fresh run of itself; exits with status 75 if that fails, or if
/// it already restarted [`RESTARTS_MAX`] times within the hour.
pub fn restart_in_place(why: &str) -> ! {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (count, first_s) = restarts_so_far(std::env::var(RESTARTS_ENV).ok().as_deref(), now_s);
    if count >= RESTARTS_MAX {
        tracing::error!(
            "{why}, after {count} restarts to repair it within the hour: stopping the process \
             (run keel check --data-dir on the stopped node)"
        );
        eprintln!("keel: {why}, after {count} restarts to repair it: stopping the process");
        std::process::exit(75)
    }
    tracing::error!("{why}: restarting the process to repair it");
    // Straight to stderr as well: the logger's buffered lines die with the process image.
    eprintln!("keel: {why}: restarting the process to repair it");
    let error = match std::env::current_exe() {
        Ok(exe) => std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(RESTARTS_ENV, format!("{},{first_s}", count + 1))
            .exec(),
        Err(e) => e,
    };
    eprintln!("keel: {why}: restarting failed ({error}); stopping the process");
    std::process::exit(75)
}

/// The restarts recorded in `value` that fall within the window ending `now_s`: (count, start of
/// the window). A missing, malformed or expired record starts a new window.
fn restarts_so_far(value: Option<&str>, now_s: u64) -> (u64, u64) {
    let parsed = value.and_then(|v| {
        let (count, first) = v.split_once(',')?;
        Some((count.parse::<u64>().ok()?, first.parse::<u64>().ok()?))
    });
    match parsed {
        Some((count, first)) if now_s.saturating_sub(first) < RESTARTS_WINDOW_S => (count, first),
        _ => (0, now_s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_are_counted_within_the_hour_and_forgotten_after() {
        assert_eq!(restarts_so_far(None, 5000), (0, 5000));
        assert_eq!(restarts_so_far(Some("2,4000"), 5000), (2, 4000));
        assert_eq!(restarts_so_far(Some("3,4000"), 4000 + 3599), (3, 4000));
        assert_eq!(restarts_so_far(Some("3,4000"), 4000 + 3600), (0, 7600));
        assert_eq!(restarts_so_far(Some("garbage"), 10), (0, 10));
        assert_eq!(restarts_so_far(Some("1,x"), 10), (0, 10));
    }
}
