//! WAL appends that bypass the page cache (`O_DIRECT`, Linux only).
//!
//! **Why.** With buffered writes every group commit pays twice: `pwrite` copies the frame into
//! the page cache, then `fdatasync` has the file system find the dirty pages and build the I/O.
//! Written directly, the frame goes to the device from our buffer and `fdatasync` is left to
//! flush the device's cache: on a loaded `keel up` the three storage threads used 29% of a core
//! instead of 41% at the same throughput (README, Performance).
//!
//! **How.** `O_DIRECT` needs the offset, the length and the buffer's address aligned to the
//! device's logical block. We align to [`BLOCK_BYTES`] (4 KiB, which covers 512-byte and 4 KiB
//! devices). A write of `data` at `offset` becomes one write of every block it touches; the bytes
//! of those blocks around `data` are the file's current bytes: the last block written is kept in
//! memory (an append continues the block where the previous one ended), any other is read back
//! from the file first.
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
    /// The block the last direct write ended in: its offset and current bytes.
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
        let span = (aligned_end - first) as usize;
        let last = aligned_end - BLOCK;
        if self.scratch.len() < span + BLOCK_BYTES {
            self.scratch.resize(span + BLOCK_BYTES, 0);
        }
        let skew = self.scratch.as_ptr().align_offset(BLOCK_BYTES);
        let window = &mut self.scratch[skew..skew + span];
        // The first block's bytes before `data`; the last block's after it, unless the last
        // block is the first and was just filled.
        let first_filled = offset > first;
        if first_filled {
            fill_block(
                &mut window[..BLOCK_BYTES],
                first,
                &self.last_block,
                buffered,
            )?;
        }
        if end < aligned_end && !(first_filled && last == first) {
            let at = (last - first) as usize;
            fill_block(&mut window[at..], last, &self.last_block, buffered)?;
        }
        window[(offset - first) as usize..(end - first) as usize].copy_from_slice(data);
        debug_assert_eq!(window.as_ptr() as usize % BLOCK_BYTES, 0);
        self.file.write_all_at(window, first)?;
        let tail: &[u8; BLOCK_BYTES] = window[span - BLOCK_BYTES..].try_into().expect("a block");
        match &mut self.last_block {
            Some((at, bytes)) => {
                *at = last;
                bytes.copy_from_slice(tail);
            }
            None => self.last_block = Some((last, Box::new(*tail))),
        }
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
