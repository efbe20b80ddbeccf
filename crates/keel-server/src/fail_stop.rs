//! Fail-stop: a panic anywhere in a node process ends the process.
//!
//! Tokio catches a panic inside a task and only ends that task, and a panicking thread ends
//! alone: without this, a node whose task, storage thread or apply thread panicked would live
//! on half-dead — its listener still accepting, every request answered `-TRYAGAIN the node is
//! shutting down` — and a supervisor would see nothing wrong. A node that stops whole is one the
//! other replicas and the supervisor know how to handle: Raft tolerates a crash, and a restart
//! recovers from the WAL like after kill -9.
//!
//! The hook, installed by `keel serve` and `keel up`, runs on the panicking thread before any
//! unwinding (so before tokio catches it). It writes the reason straight to stderr first (the
//! logger may be what panicked, or may hold a lock the panicking thread holds), then through
//! `tracing` at error level, then aborts: no destructor or atexit handler of a process in an
//! unknown state runs, and where core dumps are enabled one is written. `DEBUG PANIC`, behind
//! `--enable-debug-command`, panics the node task through `Handle::debug_panic`, to test it.
//!
//! The deliberate stops keep their own exits: a node that stops itself (keel-runtime's
//! `failure.rs`: a storage error such as a failed fsync, damage the scrub found) makes the
//! process exit with the failure's status (70; 75 for damage a restart repairs) through
//! `keel::exit_on_failure`, installed by `launch.rs`; a committed entry or snapshot the
//! state machine cannot apply aborts (`adapter.rs`).

use std::backtrace::{Backtrace, BacktraceStatus};
use std::io::Write;
use std::panic::PanicHookInfo;

/// Installs the fail-stop panic hook for the whole process (replacing the default one).
pub fn install() {
    std::panic::set_hook(Box::new(|info| {
        let reason = describe(info);
        // Unlocked writes, one call each: nothing here may wait for a lock the panicking
        // thread could hold (stderr's lock is reentrant, so `eprintln!` would do too, but it
        // panics on a failed write).
        let backtrace = Backtrace::capture();
        let mut line = format!("keel: fatal: {reason}; stopping the process\n");
        if backtrace.status() == BacktraceStatus::Captured {
            line.push_str(&format!("{backtrace}\n"));
        }
        let _ = std::io::stderr().write_all(line.as_bytes());
        tracing::error!("fatal: {reason}; stopping the process");
        std::process::abort();
    }));
}

/// `panic in thread 'name' at file:line:column: message`.
fn describe(info: &PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic payload that is not text)");
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("unnamed");
    match info.location() {
        Some(at) => format!("panic in thread '{name}' at {at}: {message}"),
        None => format!("panic in thread '{name}': {message}"),
    }
}
