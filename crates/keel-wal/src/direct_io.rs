//! WAL appends that bypass the page cache (`O_DIRECT`, Linux only).
//!
//! **Why.** With buffered writes every group commit pays twice: `pwrite` copies the frame into
//! the page cache, then `fdatasync` has the file system find the dirty pages and build the I/O.
//! Written directly, the frame goes to the device from our buffer and `fdatasync` is left to
//! flush the device's cache: on a loaded `keel up` the three storage threads used 29% of a core
//! instead of 41% at the same throughput (docs/performance-log.md, "The measurements").
//!
//! **How.** `O_DIRECT` needs the offset, the length and the buffer's address aligned to the
//! device's logical block. We align to [`BLOCK_BYTES`] (4 KiB, which covers 512-byte and 4 KiB
//! devices). A write of `data` at `offset` becomes one write of every block it touches; the bytes
//! of those blocks around `data` are the file's current bytes: the last block written is kept in
//! memory (an append continues the block where the previous one ended), any other is read back
//! from the file first. An append at the end of what the file holds
//! ([`crate::fs::FileHandle::write_at_end`], the WAL's frames) reads nothing after its data: the
//! rest of its last block is written as zeros, and so are the blocks ahead it is asked to
//! allocate. Reading those blocks would cost a read from the device once they are allocated (a
//! direct write leaves nothing of them in the page cache).
//!
//! **Failure model.** Rewriting a block rewrites bytes that may already be acknowledged, with
//! their same values. A write torn by a crash leaves each sector either old or new, and both hold
//! those bytes, so acknowledged data is as safe as with buffered writes, where the kernel also
//! writes back the whole page that holds the log's tail. Direct writes never change the file's
//! length: a write that would reach past it (a segment is preallocated, so this is only a file
//! whose length is not a multiple of the block) is left to the buffered path, which drops the
//! cached block it overlaps.
//!
//! The file keeps its buffered descriptor for everything else: reads (recovery), `set_len` and
//! `fdatasync` (one inode: it flushes what either descriptor wrote). Linux keeps the two coherent:
//! a direct write first writes back and then drops any cached pages of its range.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// The alignment of every direct write: offset, length and buffer address.
pub(crate) const BLOCK_BYTES: usize = 4096;
const BLOCK: u64 = BLOCK_BYTES as u64;

#[derive(Debug)]
pub(crate) struct DirectWriter {
    /// The same file, opened with `O_DIRECT`.
    file: File,
    /// The file's length as last set; direct writes stay at or below it.
    len_bytes: u64,
    /// A block whose current bytes are known, where the next append is expected to start: the
    /// last block of the last [`Self::write_at`], or the block where the data of the last
    /// [`Self::write_at_end`] ended. Its offset and bytes.
    last_block: Option<(u64, Box<[u8; BLOCK_BYTES]>)>,
    /// Scratch space, `BLOCK_BYTES` longer than the largest write so far so that an aligned
    /// window always fits (the address is aligned by offsetting into it, without `unsafe`).
    scratch: Vec<u8>,
}

impl DirectWriter {
    /// Opens `path` a second time with `O_DIRECT`. `None` if the file system does not support
    /// it (tmpfs, for one, refuses with `EINVAL`): the caller keeps writing through the page
    /// cache.
    pub(crate) fn open(path: &Path, len_bytes: u64) -> io::Result<Option<DirectWriter>> {
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(file) => Ok(Some(DirectWriter {
                file,
                len_bytes,
                last_block: None,
                scratch: Vec::new(),
            })),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `data` at `offset` directly, reading the bytes around it in the blocks it touches
    /// through `buffered` when they are not the cached last block. Returns `false`, having
    /// written nothing, when the write would reach past the file's length: the caller writes
    /// it buffered (see [`Self::forget_overlap`]).
    pub(crate) fn write_at(
        &mut self,
        buffered: &File,
        data: &[u8],
        offset: u64,
    ) -> io::Result<bool> {
        if data.is_empty() {
            return Ok(true);
        }
        let end = offset + data.len() as u64;
        let first = offset - offset % BLOCK;
        let aligned_end = end.div_ceil(BLOCK) * BLOCK;
        if aligned_end > self.len_bytes {
            return Ok(false);
        }
        let last = aligned_end - BLOCK;
        let cached = self.last_block.take();
        let window = window(&mut self.scratch, first, aligned_end);
        // The first block's bytes before `data`; the last block's after it, unless the last
        // block is the first and was just filled.
        let first_filled = offset > first;
        if first_filled {
            fill_block(&mut window[..BLOCK_BYTES], first, &cached, buffered)?;
        }
        if end < aligned_end && !(first_filled && last == first) {
            let at = (last - first) as usize;
            fill_block(&mut window[at..], last, &cached, buffered)?;
        }
        window[(offset - first) as usize..(end - first) as usize].copy_from_slice(data);
        self.file.write_all_at(window, first)?;
        self.last_block = remember(cached, window, first, last);
        Ok(true)
    }

    /// [`crate::fs::FileHandle::write_at_end`] directly: `data` at `offset`, then zeros up to
    /// `zeros_to`, in one write. Nothing is read past `data` (the caller owns those bytes), and
    /// the block where `data` ends is kept for the next append, which starts there. Returns
    /// `false`, having written nothing, as [`Self::write_at`] does.
    pub(crate) fn write_at_end(
        &mut self,
        buffered: &File,
        data: &[u8],
        offset: u64,
        zeros_to: u64,
    ) -> io::Result<bool> {
        let end = offset + data.len() as u64;
        let write_end = zeros_to.max(end);
        if write_end == offset {
            return Ok(true);
        }
        let first = offset - offset % BLOCK;
        let aligned_end = write_end.div_ceil(BLOCK) * BLOCK;
        if aligned_end > self.len_bytes {
            return Ok(false);
        }
        let cached = self.last_block.take();
        let window = window(&mut self.scratch, first, aligned_end);
        if offset > first {
            fill_block(&mut window[..BLOCK_BYTES], first, &cached, buffered)?;
        }
        let data_end = (end - first) as usize;
        window[(offset - first) as usize..data_end].copy_from_slice(data);
        window[data_end..].fill(0);
        self.file.write_all_at(window, first)?;
        // A block-aligned end leaves the next append nothing to fill.
        let end_block = end - end % BLOCK;
        self.last_block = if end_block == end {
            None
        } else {
            remember(cached, window, first, end_block)
        };
        Ok(true)
    }

    /// A buffered write of `[offset, offset + len)` makes the cached block stale if it overlaps.
    pub(crate) fn forget_overlap(&mut self, offset: u64, len: u64) {
        if let Some((at, _)) = self.last_block {
            if offset < at + BLOCK && at < offset + len {
                self.last_block = None;
            }
        }
    }

    pub(crate) fn set_len(&mut self, len_bytes: u64) {
        self.len_bytes = len_bytes;
        if self
            .last_block
            .as_ref()
            .is_some_and(|(at, _)| at + BLOCK > len_bytes)
        {
            self.last_block = None;
        }
    }
}

/// Scratch space kept between writes whatever their size (larger, it is kept only while the
/// writes stay within a quarter of it).
const SCRATCH_KEPT_BYTES: usize = 16 << 20;

/// The block-aligned part of `scratch` that stands for the file's bytes `[first, aligned_end)`,
/// growing `scratch` first if needed: it is kept `BLOCK_BYTES` longer than the largest window so
/// far, so an aligned window always fits (the address is aligned by offsetting into it, without
/// `unsafe`).
fn window(scratch: &mut Vec<u8>, first: u64, aligned_end: u64) -> &mut [u8] {
    let span = (aligned_end - first) as usize;
    if scratch.len() < span + BLOCK_BYTES {
        scratch.resize(span + BLOCK_BYTES, 0);
    } else if scratch.len() > SCRATCH_KEPT_BYTES.max(4 * (span + BLOCK_BYTES)) {
        // Grown by a rare large frame (one large entry): not kept for ordinary ones.
        *scratch = vec![0; span + BLOCK_BYTES];
    }
    let skew = scratch.as_ptr().align_offset(BLOCK_BYTES);
    let window = &mut scratch[skew..skew + span];
    debug_assert_eq!(window.as_ptr() as usize % BLOCK_BYTES, 0);
    window
}

/// The block at `at` of a window written at `first`, kept (reusing `cached`'s allocation).
fn remember(
    cached: Option<(u64, Box<[u8; BLOCK_BYTES]>)>,
    window: &[u8],
    first: u64,
    at: u64,
) -> Option<(u64, Box<[u8; BLOCK_BYTES]>)> {
    let from = (at - first) as usize;
    let block: &[u8; BLOCK_BYTES] = window[from..from + BLOCK_BYTES]
        .try_into()
        .expect("a block");
    Some(match cached {
        Some((_, mut bytes)) => {
            bytes.copy_from_slice(block);
            (at, bytes)
        }
        None => (at, Box::new(*block)),
    })
}

/// Fills `block` with the file's bytes at `at`: from the cached last block if it is that one,
/// else read back (zeros past the end of what the file holds).
fn fill_block(
    block: &mut [u8],
    at: u64,
    cached: &Option<(u64, Box<[u8; BLOCK_BYTES]>)>,
    buffered: &File,
) -> io::Result<()> {
    let block = &mut block[..BLOCK_BYTES];
    if let Some((cached_at, bytes)) = cached {
        if *cached_at == at {
            block.copy_from_slice(&bytes[..]);
            return Ok(());
        }
    }
    let done = crate::fs::read_full_at(buffered, block, at)?;
    block[done..].fill(0);
    Ok(())
}
