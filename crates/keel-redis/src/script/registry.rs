//! A node's scripts: the cache `EVALSHA` runs from ([`ScriptCache`]), and the scripts running now
//! ([`ScriptRegistry`]), which `-BUSY` and `SCRIPT KILL` look at. The cache is bounded; each
//! running script is kept with its kill flag and start time.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{CACHE_BYTES_MAX, CACHE_SCRIPTS_MAX, SCRIPTS_RUNNING_MAX};

/// Scripts by SHA-1 (lowercase hex), bounded: past [`CACHE_SCRIPTS_MAX`] scripts or
/// [`CACHE_BYTES_MAX`] bytes the oldest one `EVAL` added goes (one `SCRIPT LOAD` added stays
/// until only loaded scripts are left; then the oldest of those goes).
#[derive(Debug, Default)]
pub struct ScriptCache {
    bodies: HashMap<String, (Bytes, bool)>,
    /// SHA-1s in the order they were added.
    order: VecDeque<String>,
    bytes: usize,
}

impl ScriptCache {
    /// Adds `body` under `sha` (`loaded`: by `SCRIPT LOAD`, kept longer).
    pub fn insert(&mut self, sha: String, body: Bytes, loaded: bool) {
        if let Some(entry) = self.bodies.get_mut(&sha) {
            entry.1 |= loaded;
            return;
        }
        self.bytes += body.len();
        self.bodies.insert(sha.clone(), (body, loaded));
        self.order.push_back(sha);
        while self.bodies.len() > CACHE_SCRIPTS_MAX || self.bytes > CACHE_BYTES_MAX {
            if !self.evict_oldest() {
                break;
            }
        }
    }

    fn evict_oldest(&mut self) -> bool {
        let position = self
            .order
            .iter()
            .position(|sha| self.bodies.get(sha).is_some_and(|(_, loaded)| !loaded))
            .or(if self.order.is_empty() { None } else { Some(0) });
        let Some(position) = position else {
            return false;
        };
        let Some(sha) = self.order.remove(position) else {
            return false;
        };
        if let Some((body, _)) = self.bodies.remove(&sha) {
            self.bytes -= body.len();
        }
        true
    }

    /// The script whose SHA-1 is `sha` (hex, any case).
    pub fn get(&self, sha: &[u8]) -> Option<Bytes> {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.bodies.get(&sha).map(|(body, _)| body.clone())
    }

    pub fn contains(&self, sha: &[u8]) -> bool {
        self.get(sha).is_some()
    }

    pub fn clear(&mut self) {
        *self = ScriptCache::default();
    }

    pub fn len(&self) -> usize {
        self.bodies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bodies.is_empty()
    }

    /// The bytes of the scripts kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// One script running on the node: when it started, and the flag that kills it.
#[derive(Debug)]
struct Running {
    id: u64,
    started: Instant,
    kill: Arc<AtomicBool>,
}

/// The node's scripts: its cache and the scripts running now.
#[derive(Debug, Default)]
pub struct ScriptRegistry {
    cache: Mutex<ScriptCache>,
    running: Mutex<Vec<Running>>,
    /// `running.len()`, read without the lock: every request asks whether a script is busy.
    running_count: AtomicUsize,
    next_id: Mutex<u64>,
    /// Set when the node shuts down: every script is killed, those starting after included, so
    /// that none outlives the runtime its reads go through.
    closed: AtomicBool,
}

/// A script registered as running until this is dropped.
#[derive(Debug)]
pub struct RunningScript {
    registry: Arc<ScriptRegistry>,
    id: u64,
    kill: Arc<AtomicBool>,
}

impl RunningScript {
    /// The flag the script's Lua state polls.
    pub fn kill_flag(&self) -> &AtomicBool {
        &self.kill
    }

    pub fn shared_kill_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.kill)
    }

    pub fn killed(&self) -> bool {
        self.kill.load(Ordering::Relaxed)
    }
}

impl Drop for RunningScript {
    fn drop(&mut self) {
        let mut running = lock(&self.registry.running);
        running.retain(|r| r.id != self.id);
        self.registry
            .running_count
            .store(running.len(), Ordering::Release);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl ScriptRegistry {
    pub fn cache(&self) -> MutexGuard<'_, ScriptCache> {
        lock(&self.cache)
    }

    /// Registers a script as running, or `None` when [`SCRIPTS_RUNNING_MAX`] already are.
    pub fn start(self: &Arc<Self>, now: Instant) -> Option<RunningScript> {
        let mut running = lock(&self.running);
        if running.len() >= SCRIPTS_RUNNING_MAX {
            return None;
        }
        let id = {
            let mut next = lock(&self.next_id);
            *next += 1;
            *next
        };
        let kill = Arc::new(AtomicBool::new(self.closed.load(Ordering::Acquire)));
        running.push(Running {
            id,
            started: now,
            kill: Arc::clone(&kill),
        });
        self.running_count.store(running.len(), Ordering::Release);
        Some(RunningScript {
            registry: Arc::clone(self),
            id,
            kill,
        })
    }

    /// Whether some script has run longer than `threshold` at `now` (0: never busy).
    pub fn busy(&self, now: Instant, threshold: Duration) -> bool {
        !threshold.is_zero()
            && self.running_count.load(Ordering::Acquire) > 0
            && lock(&self.running)
                .iter()
                .any(|r| now.saturating_duration_since(r.started) > threshold)
    }

    /// At shutdown: kills every script running, and every script started from now on at its
    /// first poll of the kill flag (nothing of a killed script is proposed).
    pub fn close(&self) {
        // Under the lock, so that a script starting meanwhile either sees the flag or is killed.
        let running = lock(&self.running);
        self.closed.store(true, Ordering::Release);
        for script in running.iter() {
            script.kill.store(true, Ordering::Relaxed);
        }
    }

    /// Kills every script running: how many there were.
    pub fn kill_all(&self) -> usize {
        let running = lock(&self.running);
        for script in running.iter() {
            script.kill.store(true, Ordering::Relaxed);
        }
        running.len()
    }

    /// How many scripts run now.
    pub fn running(&self) -> usize {
        self.running_count.load(Ordering::Acquire)
    }
}
