//! Giving memory the node freed back to the OS.
//!
//! A thread asks mimalloc every second to return freed memory whose purge is due, so buffers a
//! quiet node let go of leave its resident set.

use std::time::Duration;

// Part of mimalloc's API (`mimalloc.h`), linked in with the allocator (the `mimalloc` crate
// does not wrap it).
unsafe extern "C" {
    fn mi_collect(force: bool);
}

/// mimalloc gives freed memory back to the OS only when some later allocation or free on the
/// same arena notices the purge delay passed. A node that has just let go of large buffers
/// (clients' query or output buffers) and then goes quiet would keep them resident forever:
/// so a thread asks every second, which costs one look at the arenas.
pub fn return_freed_memory() {
    const INTERVAL: Duration = Duration::from_secs(1);
    let spawned = std::thread::Builder::new()
        .name("keel-memory".into())
        .spawn(|| loop {
            std::thread::sleep(INTERVAL);
            // SAFETY: mi_collect has no preconditions; `false` only purges what is due.
            unsafe { mi_collect(false) };
        });
    if let Err(e) = spawned {
        eprintln!("keel: cannot start the memory thread ({e}): freed memory is returned later");
    }
}
