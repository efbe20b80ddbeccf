//! The file layer: every byte the WAL reads or writes goes through [`Fs`], so a simulated disk
//! ([`crate::SimFs`]) can lose, tear and corrupt exactly what a real one can, and the simulator's
//! crashes exercise the real WAL code.
//!
//! The trait is deliberately small: positional reads and writes, `set_len`, `sync_data`, and the
//! four directory operations the WAL needs (list, rename, remove, sync). Directory entries
//! (create, rename, remove) are durable only after [`Fs::sync_dir`] on their parent; file contents
//! and length only after [`FileHandle::sync_data`].
//!
//! Three implementations: [`StdFs`] (real files: fdatasync, directory fsync; on Linux the WAL's
//! segments are written with `O_DIRECT`, whole 4 KiB blocks around each write, the block where
//! the log ends kept in memory, nothing read back after a frame: `direct_io.rs`), [`ReadOnlyFs`]
//! (real files opened for reading only, every change refused: what `keel check` reads through)
//! and [`crate::SimFs`] (in memory: loses unsynced writes, tears the last write at any byte,
//! writes sectors back out of order, flips bits, fails a sync).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// A file system the WAL can run on.
pub trait Fs {
    /// The handle [`Fs::create`] and [`Fs::open`] return.
    type File: FileHandle;

    /// Creates a new, empty file; fails if `path` exists. The new name is durable only after
    /// [`Fs::sync_dir`] on its parent.
    fn create(&self, path: &Path) -> io::Result<Self::File>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Self::File>;
    /// The names (not paths) of the regular files directly in `dir`, in any order.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Atomically renames `from` to `to` (same directory), replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file at `path`; the removal is durable only after [`Fs::sync_dir`] on its
    /// parent.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes every earlier create, rename and remove in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// An open file.
pub trait FileHandle {
    /// The file's length in bytes as written so far, durable or not.
    fn len_bytes(&self) -> io::Result<u64>;
    /// Reads into `buf` from `offset` until `buf` is full or the file ends; returns the bytes read.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// The first offset at or after `offset` where the file may hold data: every byte before it
    /// lies in a hole, which reads as zeros. `None` when only holes lie from `offset` to the
    /// end. Lets recovery skip a preallocated segment's unwritten tail instead of reading it
    /// (128 MiB of zeros by default). The default knows of no holes: everything may be data.
    fn next_data(&self, offset: u64) -> io::Result<Option<u64>> {
        Ok(Some(offset))
    }

    /// Reads up to `len` bytes from `offset` into a new buffer, as [`FileHandle::read_at`]
    /// does; shorter only where the file ends.
    fn read_vec_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let n = self.read_at(&mut buf, offset)?;
        buf.truncate(n);
        Ok(buf)
    }
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// An append at the end of what the file holds: writes `buf` at `offset`, then zeros up to
    /// `zeros_to` (nothing more if `zeros_to` is not past `buf`). Everything from `offset` on is
    /// the caller's to overwrite (it holds nothing the caller will read back), so a direct
    /// writer (see `direct_io.rs`) fills the rest of the last block with zeros instead of
    /// reading it first.
    ///
    /// The zeros change nothing a reader sees where the file already reads as zeros; they get
    /// the file system to allocate those blocks now, so that the writes that reach them later
    /// (and their `sync_data`) need no allocation.
    fn write_at_end(&mut self, buf: &[u8], offset: u64, zeros_to: u64) -> io::Result<()> {
        write_then_zeros(self, buf, offset, zeros_to)
    }
    /// Sets the file's length; new bytes read as zeros.
    fn set_len(&mut self, len_bytes: u64) -> io::Result<()>;
    /// Makes the file's contents and length durable (fdatasync). An error here is fatal for the
    /// caller: after a failed fsync the kernel may already have dropped the dirty pages, so
    /// retrying can report success for data that is gone.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Starts sending this file's written data to the device, without waiting for it and without
    /// flushing the device's cache: a hint that [`FileHandle::write_back`] will follow.
    fn start_write_back(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Waits until this file's written data has reached the device (its volatile cache at
    /// least), without flushing that cache, so that the next cache flush on the device, which
    /// the next `sync_data` of *any* file of this file system issues, makes the data durable. No
    /// metadata goes with it: only for data in place in blocks the file already has. Returns
    /// `false` where the platform cannot do this; the caller must then `sync_data` the file
    /// itself.
    fn write_back(&mut self) -> io::Result<bool> {
        Ok(false)
    }
    /// Asks that later writes bypass the page cache where the platform and file system allow
    /// it (`O_DIRECT` on Linux, see `direct_io.rs`). What reads return and what `sync_data`
    /// makes durable do not change. Returns whether writes now go directly.
    fn write_directly(&mut self) -> io::Result<bool> {
        Ok(false)
    }
    /// Asks the operating system to forget the clean cached pages of this file, so that the
    /// next reads come from the device (the scrub, `scrub.rs`). A hint: nothing if unsupported.
    fn drop_cached_pages(&self) {}
}

/// The real file system (std::fs).
#[derive(Clone, Copy, Debug, Default)]
pub struct StdFs;

impl Fs for StdFs {
    type File = StdFile;

    fn create(&self, path: &Path) -> io::Result<StdFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(StdFile::new(file, path))
    }

    fn open(&self, path: &Path) -> io::Result<StdFile> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(StdFile::new(file, path))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Some(name) = entry.file_name().to_str() {
                    names.push(name.to_owned());
                }
            }
        }
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        // On Linux a directory opened read-only can be fsynced; this is how its entries are made
        // durable.
        File::open(dir)?.sync_all()
    }
}

/// The real file system, read-only: files are opened for reading only, and every change (create,
/// rename, remove, a directory sync) is refused, so that an offline check (`keel check`, through
/// [`crate::inspect`]) can never change what it examines, and works on a read-only mount.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOnlyFs;

fn read_only(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{}: opened read-only", path.display()),
    )
}

impl Fs for ReadOnlyFs {
    type File = StdFile;

    fn create(&self, path: &Path) -> io::Result<StdFile> {
        Err(read_only(path))
    }

    fn open(&self, path: &Path) -> io::Result<StdFile> {
        let file = OpenOptions::new().read(true).open(path)?;
        Ok(StdFile::new(file, path))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        StdFs.list_dir(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        Err(read_only(dir))
    }

    fn rename(&self, from: &Path, _to: &Path) -> io::Result<()> {
        Err(read_only(from))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        Err(read_only(path))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        Err(read_only(dir))
    }
}

/// A file of [`StdFs`] (or [`ReadOnlyFs`]: then writes fail).
#[derive(Debug)]
pub struct StdFile {
    file: File,
    /// Where it was opened, to open it again for direct writes.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    path: std::path::PathBuf,
    #[cfg(target_os = "linux")]
    direct: Option<crate::direct_io::DirectWriter>,
}

impl StdFile {
    fn new(file: File, path: &Path) -> StdFile {
        StdFile {
            file,
            path: path.to_path_buf(),
            #[cfg(target_os = "linux")]
            direct: None,
        }
    }
}

impl FileHandle for StdFile {
    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        read_full_at(&self.file, buf, offset)
    }

    /// `lseek(2)` with `SEEK_DATA`. Moving the descriptor's offset harms nothing: every read
    /// and write here is positional. A file system that cannot tell (`EINVAL`) reads as all
    /// data.
    #[cfg(target_os = "linux")]
    fn next_data(&self, offset: u64) -> io::Result<Option<u64>> {
        use std::os::fd::AsRawFd;
        let Ok(at) = libc::off_t::try_from(offset) else {
            return Ok(Some(offset));
        };
        // SAFETY: a valid descriptor owned by `self.file`; the call reads no memory of ours.
        let found = unsafe { libc::lseek(self.file.as_raw_fd(), at, libc::SEEK_DATA) };
        if let Ok(found) = u64::try_from(found) {
            return Ok(Some(found.max(offset)));
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            _ => Ok(Some(offset)),
        }
    }

    fn drop_cached_pages(&self) {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid descriptor owned by `self.file`; the call only drops clean pages.
            unsafe {
                libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }

    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some(direct) = &mut self.direct {
            if direct.write_at(&self.file, buf, offset)? {
                return Ok(());
            }
            direct.forget_overlap(offset, buf.len() as u64);
        }
        let mut done = 0;
        while done < buf.len() {
            match positional_write(&self.file, &buf[done..], offset + done as u64) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn write_at_end(&mut self, buf: &[u8], offset: u64, zeros_to: u64) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some(direct) = &mut self.direct {
            if direct.write_at_end(&self.file, buf, offset, zeros_to)? {
                return Ok(());
            }
        }
        write_then_zeros(self, buf, offset, zeros_to)
    }

    fn set_len(&mut self, len_bytes: u64) -> io::Result<()> {
        self.file.set_len(len_bytes)?;
        #[cfg(target_os = "linux")]
        if let Some(direct) = &mut self.direct {
            direct.set_len(len_bytes);
        }
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    #[cfg(target_os = "linux")]
    fn start_write_back(&mut self) -> io::Result<()> {
        sync_file_range(&self.file, libc::SYNC_FILE_RANGE_WRITE)
    }

    /// `sync_file_range(2)`: wait for writeback already under way, start it for every dirty page,
    /// wait for that too. A write the device has completed is in what its next cache flush
    /// (`REQ_PREFLUSH`, which fdatasync issues on every Linux file system that honours it)
    /// makes durable.
    #[cfg(target_os = "linux")]
    fn write_back(&mut self) -> io::Result<bool> {
        sync_file_range(
            &self.file,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )?;
        Ok(true)
    }

    #[cfg(target_os = "linux")]
    fn write_directly(&mut self) -> io::Result<bool> {
        if self.direct.is_none() {
            let len_bytes = self.file.metadata()?.len();
            self.direct = crate::direct_io::DirectWriter::open(&self.path, len_bytes)?;
        }
        Ok(self.direct.is_some())
    }
}

/// The whole file, with `flags`.
#[cfg(target_os = "linux")]
fn sync_file_range(file: &File, flags: libc::c_uint) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: a plain system call on a descriptor `file` keeps open; no memory is passed.
        let rc = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, flags) };
        if rc == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Zeros written per call by [`write_zeros`].
const ZEROS_CHUNK_BYTES: usize = 64 << 10;
static ZEROS: [u8; ZEROS_CHUNK_BYTES] = [0; ZEROS_CHUNK_BYTES];

/// [`FileHandle::write_at_end`] as two plain writes: `buf`, then the zeros after it.
fn write_then_zeros<H: FileHandle + ?Sized>(
    file: &mut H,
    buf: &[u8],
    offset: u64,
    zeros_to: u64,
) -> io::Result<()> {
    file.write_at(buf, offset)?;
    write_zeros(file, offset + buf.len() as u64, zeros_to)
}

/// Writes zeros over `[from, to)` (nothing if `to <= from`), a chunk at a time.
pub(crate) fn write_zeros<H: FileHandle + ?Sized>(
    file: &mut H,
    from: u64,
    to: u64,
) -> io::Result<()> {
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS_CHUNK_BYTES as u64) as usize;
        file.write_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Reads into all of `buf` from `offset`, or up to the end of the file; returns the bytes read.
pub(crate) fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match positional_read(file, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(unix)]
fn positional_read(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}

#[cfg(unix)]
fn positional_write(file: &File, buf: &[u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::write_at(file, buf, offset)
}

#[cfg(windows)]
fn positional_read(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}

#[cfg(windows)]
fn positional_write(file: &File, buf: &[u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_write(file, buf, offset)
}
