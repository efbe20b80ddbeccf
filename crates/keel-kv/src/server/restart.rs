//! Restarting the node process in place, to repair damage found while it runs (the scrub,
//! keel-runtime's `scrub.rs`): the process image is replaced by a fresh run of the same binary
//! with the same arguments, as a supervisor would restart it, and the start-up path
//! (`Wal::open_repairing`) sets the damaged files aside and recovers the rest from the cluster.
//!
//! The old process ends like a crash (kill -9): everything it acknowledged is already durable,
//! and its sockets and the data directory's descriptors close on exec. The process id stays the
//! same, so a supervisor watching it sees nothing stop.

use std::os::unix::process::CommandExt;

/// Replaces this process with a fresh run of itself; exits with status 75 if that fails.
pub fn restart_in_place(why: &str) -> ! {
    tracing::error!("{why}: restarting the process to repair it");
    // Straight to stderr as well: the logger's buffered lines die with the process image.
    eprintln!("keel: {why}: restarting the process to repair it");
    let error = match std::env::current_exe() {
        Ok(exe) => std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .exec(),
        Err(e) => e,
    };
    eprintln!("keel: {why}: restarting failed ({error}); stopping the process");
    std::process::exit(75)
}
