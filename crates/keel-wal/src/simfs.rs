//! `SimFs`: an in-memory, deterministic file system that fails the way disks do.
//!
//! # The model
//!
//! Every file has a *durable* content (what survives a crash) and a *current* content (what reads
//! see). Every change — a write, a `set_len`, a create, a rename, a remove — is appended to one
//! global queue of unsynced changes, in issue order, and applied to the current state at once:
//!
//! - [`FileHandle::sync_data`] moves that file's queued writes and length changes into its durable
//!   content (fdatasync makes the data and the size needed to read it durable, nothing else),
//!   and with them every write of any file that [`FileHandle::write_back`] pushed to the device
//!   (the cache flush an fdatasync issues covers every write the device has completed);
//! - [`Fs::sync_dir`] moves the queued creates, renames and removes of that directory into the
//!   durable namespace. A file created and synced but whose directory was never synced is lost in
//!   a crash, as on Linux;
//! - [`SimFs::crash_with`] rebuilds the current state from the durable one plus whatever part of
//!   the queue the chosen [`Crash`] keeps, then empties the queue and invalidates every open
//!   handle. Synced changes are never lost, reordered or altered by a crash (the disk does not lie
//!   about fsync).
//!
//! Directories themselves are created durably by [`Fs::create_dir_all`] (the WAL creates its one
//! directory once, before anything else). Renames across directories are not modelled.
//!
//! Fault injection besides crashes: [`SimFs::flip_bit`] (silent corruption of stored bytes, durable
//! and current alike), [`SimFs::fail_next_sync`] (the next fsync reports an error and leaves the data
//! unsynced) and [`SimFs::kill_after_ops`] (the process "dies" after a given number of mutating
//! operations: every later operation fails until the crash), which is how tests crash at every
//! write and sync point.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fs::{FileHandle, Fs};

/// Sector size for [`Crash::Scramble`]: the unit a disk writes atomically.
pub const SECTOR_SIZE_BYTES: usize = 512;

/// What a crash keeps of the changes that were not yet synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crash {
    /// Every unsynced change is lost.
    LoseUnsynced,
    /// Unsynced changes reach the disk in issue order and the machine stops part-way: the first
    /// `ops` survive; the next one, if it is a write, survives torn after `torn_bytes` bytes; the
    /// rest are lost. `ops >= unsynced_ops()` keeps everything (a process crash: the page cache
    /// survives).
    KeepPrefix {
        /// How many unsynced changes, oldest first, survive whole.
        ops: usize,
        /// How many leading bytes of the change after them survive, if it is a write (clamped
        /// to the write's length; 0 loses it).
        torn_bytes: usize,
    },
    /// Writeback in any order (power loss after the OS flushed an arbitrary subset of dirty
    /// sectors): each unsynced directory change and each 512-byte sector of each unsynced write
    /// survives or not by a draw from `seed`.
    Scramble {
        /// Seeds the draws: the same seed over the same queue keeps the same sectors.
        seed: u64,
    },
}

/// A cheap handle to one simulated disk; clones share it.
#[derive(Clone, Debug, Default)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

/// An open file of a [`SimFs`].
#[derive(Debug)]
pub struct SimFile {
    fs: SimFs,
    inode: u64,
    /// Handles opened before a crash fail: the process that held them is gone.
    generation: u64,
}

#[derive(Debug)]
enum Change {
    Write {
        inode: u64,
        offset: u64,
        data: Vec<u8>,
        /// At the device ([`FileHandle::write_back`]): the next sync of any file makes it durable.
        pushed: bool,
    },
    SetLen {
        inode: u64,
        len_bytes: u64,
    },
    Link {
        path: PathBuf,
        inode: u64,
    },
    Unlink {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
}

impl Change {
    fn inode(&self) -> Option<u64> {
        match self {
            Change::Write { inode, .. } | Change::SetLen { inode, .. } => Some(*inode),
            _ => None,
        }
    }

    /// A write already at the device: any flush makes it durable.
    fn pushed(&self) -> bool {
        matches!(self, Change::Write { pushed: true, .. })
    }

    fn dir(&self) -> Option<&Path> {
        match self {
            Change::Link { path, .. }
            | Change::Unlink { path }
            | Change::Rename { to: path, .. } => path.parent(),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
struct Inode {
    current: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    generation: u64,
    next_inode: u64,
    inodes: BTreeMap<u64, Inode>,
    dirs: BTreeSet<PathBuf>,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    unsynced: Vec<Change>,
    mutating_ops: u64,
    /// Mutating operations allowed before the simulated process dies.
    ops_until_death: Option<u64>,
    dead: bool,
    fail_next_sync: bool,
    /// `sync_data` and `sync_dir` calls that succeeded: the flushes a real disk would do.
    syncs: u64,
}

fn dead_error() -> io::Error {
    io::Error::other("simulated process death: the disk is unreachable until the crash")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{}", path.display()))
}

impl State {
    /// Accounts for one mutating operation; fails once the process has "died".
    fn begin_op(&mut self) -> io::Result<()> {
        if self.dead {
            return Err(dead_error());
        }
        if let Some(left) = self.ops_until_death.as_mut() {
            if *left == 0 {
                self.dead = true;
                return Err(dead_error());
            }
            *left -= 1;
        }
        self.mutating_ops += 1;
        Ok(())
    }

    fn check_alive(&self, generation: u64) -> io::Result<()> {
        if self.dead || generation != self.generation {
            return Err(dead_error());
        }
        Ok(())
    }

    fn check_dir(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(dir) if self.dirs.contains(dir) => Ok(()),
            _ => Err(not_found(path)),
        }
    }

    fn apply(&mut self, change: &Change, durable: bool) {
        match change {
            Change::Write {
                inode,
                offset,
                data,
                ..
            } => {
                let node = self.inodes.entry(*inode).or_default();
                write_into(
                    if durable {
                        &mut node.durable
                    } else {
                        &mut node.current
                    },
                    *offset,
                    data,
                );
            }
            Change::SetLen { inode, len_bytes } => {
                let node = self.inodes.entry(*inode).or_default();
                let content = if durable {
                    &mut node.durable
                } else {
                    &mut node.current
                };
                content.resize(*len_bytes as usize, 0);
            }
            Change::Link { path, inode } => {
                self.names_mut(durable).insert(path.clone(), *inode);
            }
            Change::Unlink { path } => {
                self.names_mut(durable).remove(path);
            }
            Change::Rename { from, to } => {
                let names = self.names_mut(durable);
                // After a scrambled crash the source may never have been created.
                if let Some(inode) = names.remove(from) {
                    names.insert(to.clone(), inode);
                }
            }
        }
    }

    fn names_mut(&mut self, durable: bool) -> &mut BTreeMap<PathBuf, u64> {
        if durable {
            &mut self.durable_names
        } else {
            &mut self.names
        }
    }

    fn record(&mut self, change: Change) {
        self.apply(&change, false);
        self.unsynced.push(change);
    }

    /// Moves the queued changes selected by `pick` into the durable state, in order.
    fn make_durable(&mut self, pick: impl Fn(&Change) -> bool) {
        let mut queue = std::mem::take(&mut self.unsynced);
        // In place: the picked changes are applied in order and leave the queue; the rest keep
        // their order.
        queue.retain(|change| {
            if pick(change) {
                self.apply(change, true);
                false
            } else {
                true
            }
        });
        self.unsynced = queue;
    }
}

fn write_into(content: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let offset = offset as usize;
    let end = offset + data.len();
    if content.len() <= offset {
        // An append (after a gap of zeros, if any): no zero-fill of what `data` covers.
        content.resize(offset, 0);
        content.extend_from_slice(data);
        return;
    }
    if content.len() < end {
        content.resize(end, 0);
    }
    content[offset..end].copy_from_slice(data);
}

/// A small deterministic generator for [`Crash::Scramble`] (SplitMix64).
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SimFs {
    /// An empty disk: no directories, no files, nothing unsynced.
    pub fn new() -> Self {
        SimFs::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every mutation is a single
        // step), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mutating operations performed so far (create, write, set_len, sync, rename, remove,
    /// sync_dir). Tests use it to enumerate crash points.
    pub fn op_count(&self) -> u64 {
        self.lock().mutating_ops
    }

    /// Successful `sync_data` and `sync_dir` calls so far: the cache flushes a disk would do.
    pub fn sync_count(&self) -> u64 {
        self.lock().syncs
    }

    /// Changes issued but not yet synced.
    pub fn unsynced_ops(&self) -> usize {
        self.lock().unsynced.len()
    }

    /// Lets `ops` more mutating operations succeed; after that every operation fails, as if the
    /// process had died, until [`SimFs::crash_with`].
    pub fn kill_after_ops(&self, ops: u64) {
        self.lock().ops_until_death = Some(ops);
    }

    /// The next `sync_data` or `sync_dir` fails and leaves its data unsynced.
    pub fn fail_next_sync(&self) {
        self.lock().fail_next_sync = true;
    }

    /// Equivalent to `crash_with(Crash::LoseUnsynced)`.
    pub fn crash(&self) {
        self.crash_with(Crash::LoseUnsynced);
    }

    /// Stops the machine: what survives is the durable state plus the part of the unsynced
    /// changes that `crash` keeps. Every open handle becomes invalid; the disk is usable again.
    pub fn crash_with(&self, crash: Crash) {
        let mut st = self.lock();
        let queue = std::mem::take(&mut st.unsynced);
        match crash {
            Crash::LoseUnsynced => {}
            Crash::KeepPrefix { ops, torn_bytes } => {
                for (i, change) in queue.iter().enumerate() {
                    if i < ops {
                        st.apply(change, true);
                    } else if i == ops {
                        if let Change::Write {
                            inode,
                            offset,
                            data,
                            ..
                        } = change
                        {
                            let torn = Change::Write {
                                inode: *inode,
                                offset: *offset,
                                data: data[..torn_bytes.min(data.len())].to_vec(),
                                pushed: false,
                            };
                            st.apply(&torn, true);
                        }
                    }
                }
            }
            Crash::Scramble { seed } => {
                let mut rng = seed;
                for change in &queue {
                    match change {
                        Change::Write {
                            inode,
                            offset,
                            data,
                            ..
                        } => scramble_write(&mut st, &mut rng, *inode, *offset, data),
                        other => {
                            if next_random(&mut rng) % 2 == 0 {
                                st.apply(other, true);
                            }
                        }
                    }
                }
            }
        }
        // Rebuild the visible state from the durable one; drop files no name refers to.
        let live: BTreeSet<u64> = st.durable_names.values().copied().collect();
        st.inodes.retain(|id, _| live.contains(id));
        for node in st.inodes.values_mut() {
            let Inode { current, durable } = node;
            current.clone_from(durable);
        }
        st.names = st.durable_names.clone();
        st.generation += 1;
        st.dead = false;
        st.ops_until_death = None;
        st.fail_next_sync = false;
    }

    /// Flips one bit of a stored file, durably: silent corruption by the disk.
    pub fn flip_bit(&self, path: &Path, byte_offset: u64, bit: u8) -> io::Result<()> {
        assert!(bit < 8, "bit index {bit} out of range");
        let mut st = self.lock();
        let inode = *st.names.get(path).ok_or_else(|| not_found(path))?;
        let node = st.inodes.get_mut(&inode).expect("named inode exists");
        let at = byte_offset as usize;
        if at >= node.current.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "flip beyond the end of the file",
            ));
        }
        node.current[at] ^= 1 << bit;
        if at < node.durable.len() {
            node.durable[at] ^= 1 << bit;
        }
        Ok(())
    }

    /// The current content of `path`, if it exists.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.lock();
        let inode = st.names.get(path)?;
        Some(st.inodes[inode].current.clone())
    }

    /// Every file path that currently exists, sorted.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.lock().names.keys().cloned().collect()
    }
}

fn scramble_write(st: &mut State, rng: &mut u64, inode: u64, offset: u64, data: &[u8]) {
    let end = offset + data.len() as u64;
    let mut at = offset;
    while at < end {
        // Sectors are aligned to the file, not to the write.
        let sector_end = ((at / SECTOR_SIZE_BYTES as u64) + 1) * SECTOR_SIZE_BYTES as u64;
        let piece_end = sector_end.min(end);
        if next_random(rng) % 2 == 0 {
            let piece = &data[(at - offset) as usize..(piece_end - offset) as usize];
            st.apply(
                &Change::Write {
                    inode,
                    offset: at,
                    data: piece.to_vec(),
                    pushed: false,
                },
                true,
            );
        }
        at = piece_end;
    }
}

impl Fs for SimFs {
    type File = SimFile;

    fn create(&self, path: &Path) -> io::Result<SimFile> {
        let mut st = self.lock();
        st.begin_op()?;
        st.check_dir(path)?;
        if st.names.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}", path.display()),
            ));
        }
        let inode = st.next_inode;
        st.next_inode += 1;
        st.inodes.insert(inode, Inode::default());
        st.record(Change::Link {
            path: path.to_owned(),
            inode,
        });
        Ok(SimFile {
            fs: self.clone(),
            inode,
            generation: st.generation,
        })
    }

    fn open(&self, path: &Path) -> io::Result<SimFile> {
        let st = self.lock();
        st.check_alive(st.generation)?;
        let inode = *st.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(SimFile {
            fs: self.clone(),
            inode,
            generation: st.generation,
        })
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.lock();
        st.check_alive(st.generation)?;
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(st
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.check_alive(st.generation)?;
        for ancestor in dir.ancestors() {
            st.dirs.insert(ancestor.to_owned());
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        assert_eq!(
            from.parent(),
            to.parent(),
            "SimFs models renames within one directory only"
        );
        let mut st = self.lock();
        st.begin_op()?;
        if !st.names.contains_key(from) {
            return Err(not_found(from));
        }
        st.record(Change::Rename {
            from: from.to_owned(),
            to: to.to_owned(),
        });
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.begin_op()?;
        if !st.names.contains_key(path) {
            return Err(not_found(path));
        }
        st.record(Change::Unlink {
            path: path.to_owned(),
        });
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.begin_op()?;
        if std::mem::take(&mut st.fail_next_sync) {
            return Err(io::Error::other("injected fsync failure (directory)"));
        }
        st.syncs += 1;
        // A flush of the device's cache too.
        st.make_durable(|c| c.dir() == Some(dir) || c.pushed());
        Ok(())
    }
}

impl FileHandle for SimFile {
    fn len_bytes(&self) -> io::Result<u64> {
        let st = self.fs.lock();
        st.check_alive(self.generation)?;
        Ok(st.inodes[&self.inode].current.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let st = self.fs.lock();
        st.check_alive(self.generation)?;
        let content = &st.inodes[&self.inode].current;
        let start = (offset as usize).min(content.len());
        let n = buf.len().min(content.len() - start);
        buf[..n].copy_from_slice(&content[start..start + n]);
        Ok(n)
    }

    fn read_vec_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let st = self.fs.lock();
        st.check_alive(self.generation)?;
        let content = &st.inodes[&self.inode].current;
        let start = (offset as usize).min(content.len());
        let n = len.min(content.len() - start);
        // Copied straight out: no zero-filled buffer first.
        Ok(content[start..start + n].to_vec())
    }

    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.fs.lock();
        st.check_alive(self.generation)?;
        st.begin_op()?;
        st.record(Change::Write {
            inode: self.inode,
            offset,
            data: buf.to_vec(),
            pushed: false,
        });
        Ok(())
    }

    fn set_len(&mut self, len_bytes: u64) -> io::Result<()> {
        let mut st = self.fs.lock();
        st.check_alive(self.generation)?;
        st.begin_op()?;
        st.record(Change::SetLen {
            inode: self.inode,
            len_bytes,
        });
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut st = self.fs.lock();
        st.check_alive(self.generation)?;
        st.begin_op()?;
        if std::mem::take(&mut st.fail_next_sync) {
            return Err(io::Error::other("injected fsync failure"));
        }
        st.syncs += 1;
        let inode = self.inode;
        // The device's cache flush: this file's writes, and every write already at the device.
        st.make_durable(|c| c.inode() == Some(inode) || c.pushed());
        Ok(())
    }

    fn write_back(&mut self) -> io::Result<bool> {
        let mut st = self.fs.lock();
        st.check_alive(self.generation)?;
        for change in &mut st.unsynced {
            if let Change::Write { inode, pushed, .. } = change {
                if *inode == self.inode {
                    *pushed = true;
                }
            }
        }
        Ok(true)
    }
}
