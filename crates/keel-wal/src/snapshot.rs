//! Snapshot files: the state machine's image at a log position, with the metadata the core needs
//! to restart from it (position, membership, term history). Layout in lib.rs ("Snapshot file").
//!
//! Saving is crash-atomic: write a temporary file, fsync it, rename it into place, fsync the
//! directory. A reader therefore sees either the old set of snapshots or the new one, never a
//! half-written file under a final name — unless the disk corrupts it later, which the two
//! checksums (header, data) catch.
//!
//! The header holds the position (index, term), the membership, the term history and the CRCs;
//! the newest `WalConfig::snapshots_kept` files are kept (and the bootstrap one). A large
//! snapshot is streamed into a temporary file ([`create_snapshot_file`], the header patched at
//! the end); a complete temporary file, streamed here or received whole from a leader, becomes
//! the newest snapshot with `Wal::adopt_snapshot` (header check, rename, directory fsync).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use keel_core::{LogId, Membership, SnapshotMeta};

use crate::codec::{self, get_u32, get_u64, put_u32, put_u64, ReadWal, Reader};
use crate::error::{io_err, sync_err, Result, WalError};
use crate::fs::{FileHandle, Fs};

/// The first 8 bytes of every snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"KEELSNAP";
/// The snapshot file format this build writes, and the only one it reads.
pub const SNAPSHOT_FORMAT_VERSION: u16 = 1;
/// Fixed part of the header, before membership and term history.
const FIXED_HEADER_SIZE_BYTES: usize = 48;
/// Bound on the variable header (membership + term history) checked before allocating.
pub const SNAPSHOT_HEADER_SIZE_BYTES_MAX: u32 = 64 << 20;
/// Data is checksummed and copied in pieces of this size.
const DATA_CHUNK_SIZE_BYTES: usize = 1 << 20;

/// Wraps a decoded configuration the way the core's [`SnapshotMeta`] holds it (one place to
/// change if that representation does).
fn snapshot_membership(membership: Membership) -> Arc<Membership> {
    Arc::new(membership)
}

/// The snapshot a brand-new cluster starts from: position 0/0, the initial voters, no data.
pub fn bootstrap_meta(voters: impl IntoIterator<Item = keel_core::NodeId>) -> SnapshotMeta {
    SnapshotMeta::initial(snapshot_membership(Membership::new_voters(voters)))
}

/// A snapshot file whose header verified: its data checksum too where it was found by
/// [`find_latest_snapshot`] or [`verify_snapshot`], not where [`adopt_snapshot_file`] put it in
/// place (the data is checked again whenever it is read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFile {
    /// Position, membership and term history, from the header.
    pub meta: SnapshotMeta,
    /// Where the file is: its final name once adopted or found, else the temporary one.
    pub path: PathBuf,
    /// Length of the data after the header, in bytes.
    pub data_len_bytes: u64,
    header_len_bytes: u64,
    data_crc: u32,
}

/// A snapshot file that failed verification and was passed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedSnapshot {
    /// The snapshot file passed over.
    pub path: PathBuf,
    /// Which check failed, for a person to read.
    pub reason: String,
}

/// The newest valid snapshot and the newer ones that were not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatestSnapshot {
    /// The newest snapshot file that verifies; `None` when none does, or there is none.
    pub chosen: Option<SnapshotFile>,
    /// The files newer than `chosen` that do not verify, newest first.
    pub skipped: Vec<SkippedSnapshot>,
}

/// The file name of the snapshot at `last`: `snapshot-{index:020}-{term:020}.snap`, zero-padded so
/// that names sort by index, then term.
pub fn snapshot_file_name(last: LogId) -> String {
    format!("snapshot-{:020}-{:020}.snap", last.index, last.term)
}

fn parse_snapshot_file_name(name: &str) -> Option<LogId> {
    let rest = name.strip_prefix("snapshot-")?.strip_suffix(".snap")?;
    let (index, term) = rest.split_once('-')?;
    Some(LogId::new(term.parse().ok()?, index.parse().ok()?))
}

/// Whether `name` is a snapshot being written or received (`snapshot-...snap.tmp`): recovery
/// ignores such files and open deletes them.
pub fn is_snapshot_temp_name(name: &str) -> bool {
    name.starts_with("snapshot-") && name.ends_with(".snap.tmp")
}

fn encode_header(meta: &SnapshotMeta, data: &[u8]) -> Vec<u8> {
    encode_header_for(meta, data.len() as u64, crc32c::crc32c(data))
}

/// The header of a snapshot whose data is `data_len` bytes with CRC32C `data_crc`. Its length
/// depends on `meta` only, so a streamed file can write it first and patch it at the end.
fn encode_header_for(meta: &SnapshotMeta, data_len: u64, data_crc: u32) -> Vec<u8> {
    let mut buf = Vec::new();
    buf.extend_from_slice(&SNAPSHOT_MAGIC);
    buf.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
    buf.extend_from_slice(&[0; 2]);
    put_u32(&mut buf, 0); // header length, patched below
    put_u64(&mut buf, meta.last.index);
    put_u64(&mut buf, meta.last.term);
    put_u64(&mut buf, data_len);
    put_u32(&mut buf, data_crc);
    put_u32(&mut buf, 0);
    debug_assert_eq!(buf.len(), FIXED_HEADER_SIZE_BYTES);
    codec::put_membership(&mut buf, &meta.membership);
    codec::put_log_ids(&mut buf, &meta.term_history);
    let header_len = u32::try_from(buf.len() + 4).expect("snapshot header fits u32");
    assert!(
        header_len <= SNAPSHOT_HEADER_SIZE_BYTES_MAX,
        "snapshot header too large"
    );
    buf[12..16].copy_from_slice(&header_len.to_le_bytes());
    let crc = crc32c::crc32c(&buf);
    put_u32(&mut buf, crc);
    buf
}

/// Snapshots in `dir`, oldest first, by (index, term).
pub fn list_snapshots<F: Fs>(fs: &F, dir: &Path) -> Result<Vec<(LogId, PathBuf)>> {
    let mut found: Vec<(LogId, PathBuf)> = fs
        .list_dir(dir)
        .map_err(io_err(dir))?
        .iter()
        .filter_map(|name| Some((parse_snapshot_file_name(name)?, dir.join(name))))
        .collect();
    found.sort_by_key(|(id, _)| (id.index, id.term));
    Ok(found)
}

/// Writes a snapshot durably under its final name, then deletes all but the newest `keep`.
pub fn save_snapshot<F: Fs>(
    fs: &F,
    dir: &Path,
    meta: &SnapshotMeta,
    data: &[u8],
    keep: usize,
) -> Result<PathBuf> {
    assert!(keep >= 1, "keep at least the snapshot just written");
    let name = snapshot_file_name(meta.last);
    let path = dir.join(&name);
    let temp = dir.join(format!("{name}.tmp"));
    if fs.open(&temp).is_ok() {
        // Left over by a crash during an earlier save of the same snapshot.
        fs.remove_file(&temp).map_err(io_err(&temp))?;
    }
    let header = encode_header(meta, data);
    let mut file = fs.create(&temp).map_err(io_err(&temp))?;
    file.write_at(&header, 0).map_err(io_err(&temp))?;
    file.write_at(data, header.len() as u64)
        .map_err(io_err(&temp))?;
    file.sync_data().map_err(sync_err(&temp))?;
    drop(file);
    fs.rename(&temp, &path).map_err(io_err(&path))?;
    fs.sync_dir(dir).map_err(sync_err(dir))?;

    prune_snapshots(fs, dir, &path, keep)?;
    Ok(path)
}

/// Reads and verifies one snapshot file: header checksum, length, and data checksum (streamed,
/// so a large snapshot is never held in memory here).
pub fn verify_snapshot<F: Fs>(fs: &F, path: &Path) -> std::result::Result<SnapshotFile, String> {
    let file = fs.open(path).map_err(|e| format!("open: {e}"))?;
    let verified = verify_snapshot_header(&file, path)?;
    verify_snapshot_data(&file, &verified)?;
    Ok(verified)
}

/// Verifies a snapshot file's header (magic, version, lengths, header checksum) and that the file
/// is as long as the header says, without reading the data.
pub fn verify_snapshot_header<H: FileHandle>(
    file: &H,
    path: &Path,
) -> std::result::Result<SnapshotFile, String> {
    let file_len = file.len_bytes().map_err(|e| format!("length: {e}"))?;
    let mut fixed = [0u8; FIXED_HEADER_SIZE_BYTES];
    let n = file
        .read_at(&mut fixed, 0)
        .map_err(|e| format!("read: {e}"))?;
    if n < FIXED_HEADER_SIZE_BYTES || fixed[..8] != SNAPSHOT_MAGIC {
        return Err("missing or bad magic".into());
    }
    let version = codec::get_u16(&fixed, 8);
    if version != SNAPSHOT_FORMAT_VERSION {
        return Err(format!("format version {version} is not supported"));
    }
    let header_len = get_u32(&fixed, 12);
    if header_len > SNAPSHOT_HEADER_SIZE_BYTES_MAX
        || (header_len as usize) < FIXED_HEADER_SIZE_BYTES + 4
        || u64::from(header_len) > file_len
    {
        return Err(format!("implausible header length {header_len}"));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_at(&mut header, 0)
        .map_err(|e| format!("read: {e}"))?;
    let crc_at = header.len() - 4;
    if crc32c::crc32c(&header[..crc_at]) != get_u32(&header, crc_at) {
        return Err("header checksum mismatch".into());
    }
    let last = LogId::new(get_u64(&header, 24), get_u64(&header, 16));
    let data_len = get_u64(&header, 32);
    let data_crc = get_u32(&header, 40);
    let header = Bytes::from(header);
    let mut r = Reader::range(header, FIXED_HEADER_SIZE_BYTES, crc_at);
    let membership = r.membership()?;
    let term_history = r.log_ids()?;
    if r.remaining() != 0 {
        return Err("header has trailing bytes".into());
    }
    if u64::from(header_len) + data_len != file_len {
        return Err(format!(
            "file is {file_len} bytes, header says {header_len} + {data_len}"
        ));
    }
    Ok(SnapshotFile {
        meta: SnapshotMeta {
            last,
            membership: snapshot_membership(membership),
            term_history,
        },
        path: path.to_owned(),
        data_len_bytes: data_len,
        header_len_bytes: u64::from(header_len),
        data_crc,
    })
}

/// Checks the data checksum of a file whose header verified, reading it in pieces.
pub fn verify_snapshot_data<H: FileHandle>(
    file: &H,
    verified: &SnapshotFile,
) -> std::result::Result<(), String> {
    let data_len = verified.data_len_bytes;
    let mut crc = 0u32;
    let mut buf = vec![0u8; DATA_CHUNK_SIZE_BYTES.min(data_len as usize)];
    let mut offset = 0u64;
    while offset < data_len {
        let n = ((data_len - offset) as usize).min(buf.len());
        file.read_at(&mut buf[..n], verified.header_len_bytes + offset)
            .map_err(|e| format!("read: {e}"))?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        offset += n as u64;
    }
    if crc != verified.data_crc {
        return Err("data checksum mismatch".into());
    }
    Ok(())
}

/// The newest snapshot that verifies, and every newer one that did not. Whether passing over a
/// corrupt newer snapshot is acceptable depends on the log (see `recover`), so this only reports.
pub fn find_latest_snapshot<F: Fs>(fs: &F, dir: &Path) -> Result<LatestSnapshot> {
    let mut latest = LatestSnapshot::default();
    for (_, path) in list_snapshots(fs, dir)?.into_iter().rev() {
        match verify_snapshot(fs, &path) {
            Ok(file) => {
                latest.chosen = Some(file);
                break;
            }
            Err(reason) => latest.skipped.push(SkippedSnapshot { path, reason }),
        }
    }
    Ok(latest)
}

/// Reads a verified snapshot's data into memory, checking its length bound first and its
/// checksum again (the file may have changed since it was verified).
pub fn read_snapshot_data<F: Fs>(
    fs: &F,
    file: &SnapshotFile,
    size_bytes_max: u64,
) -> Result<Vec<u8>> {
    let handle = fs.open(&file.path).map_err(io_err(&file.path))?;
    read_snapshot_data_from(&handle, file, size_bytes_max)
}

/// [`read_snapshot_data`] from a handle already open (a file opened before a newer snapshot
/// could prune it stays readable).
pub fn read_snapshot_data_from<H: FileHandle>(
    handle: &H,
    file: &SnapshotFile,
    size_bytes_max: u64,
) -> Result<Vec<u8>> {
    let corrupt = |reason: String| WalError::CorruptSnapshot {
        path: file.path.clone(),
        reason,
    };
    if file.data_len_bytes > size_bytes_max {
        return Err(WalError::InvalidRequest(format!(
            "snapshot data is {} bytes, over the configured maximum {size_bytes_max}",
            file.data_len_bytes
        )));
    }
    let mut data = vec![0u8; file.data_len_bytes as usize];
    let n = handle
        .read_at(&mut data, file.header_len_bytes)
        .map_err(io_err(&file.path))?;
    if n != data.len() {
        return Err(corrupt("data shorter than its header says".into()));
    }
    if crc32c::crc32c(&data) != file.data_crc {
        return Err(corrupt("data checksum mismatch".into()));
    }
    Ok(data)
}

/// A snapshot's data as a stream: [`std::io::Read`] over the data of an open snapshot file,
/// reading only what the caller asks for (memory bounded by the caller's buffer, whatever the
/// snapshot's size), its checksum computed as it goes. The read that reaches the end of the data
/// fails with `InvalidData` if the data does not match the header's checksum, and a file shorter
/// than its header says fails with `UnexpectedEof`: a state machine that reads to the end never
/// takes a damaged snapshot for a good one.
pub struct SnapshotDataReader<'h, H: FileHandle> {
    handle: &'h H,
    /// Where the data starts in the file (the header's length).
    start: u64,
    len_bytes: u64,
    read_bytes: u64,
    crc: u32,
    expected_crc: u32,
}

/// The data of `file` (verified header, opened as `handle`) as a stream.
pub fn data_reader<'h, H: FileHandle>(
    handle: &'h H,
    file: &SnapshotFile,
) -> SnapshotDataReader<'h, H> {
    SnapshotDataReader {
        handle,
        start: file.header_len_bytes,
        len_bytes: file.data_len_bytes,
        read_bytes: 0,
        crc: 0,
        expected_crc: file.data_crc,
    }
}

impl<H: FileHandle> std::io::Read for SnapshotDataReader<'_, H> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.len_bytes - self.read_bytes;
        if left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let got = self
            .handle
            .read_at(&mut buf[..want], self.start + self.read_bytes)?;
        if got == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "snapshot data shorter than its header says",
            ));
        }
        self.crc = crc32c::crc32c_append(self.crc, &buf[..got]);
        self.read_bytes += got as u64;
        if self.read_bytes == self.len_bytes && self.crc != self.expected_crc {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "snapshot data checksum mismatch",
            ));
        }
        Ok(got)
    }
}

/// Verifies an open snapshot file (header, then data checksum) and reads its data.
pub fn read_snapshot_handle<H: FileHandle>(
    handle: &H,
    path: &Path,
    size_bytes_max: u64,
) -> Result<(SnapshotFile, Vec<u8>)> {
    let file =
        verify_snapshot_header(handle, path).map_err(|reason| WalError::CorruptSnapshot {
            path: path.to_owned(),
            reason,
        })?;
    let data = read_snapshot_data_from(handle, &file, size_bytes_max)?;
    Ok((file, data))
}

/// Size of the write buffer of a [`SnapshotFileWriter`].
const WRITER_BUFFER_SIZE_BYTES: usize = 1 << 20;

/// Streams a snapshot into a temporary file (`snapshot-...snap.tmp`, deleted on open if a crash
/// leaves it) without holding its data in memory: the header is written first with placeholder
/// length and checksum and patched by [`SnapshotFileWriter::finish`], which also fsyncs. The
/// result becomes the snapshot with [`crate::Wal::adopt_snapshot`].
pub struct SnapshotFileWriter<H: FileHandle> {
    file: H,
    temp: PathBuf,
    meta: SnapshotMeta,
    header_len_bytes: u64,
    data_len_bytes: u64,
    crc: u32,
    buf: Vec<u8>,
}

/// Starts a streamed snapshot file for `meta` in `dir`.
pub fn create_snapshot_file<F: Fs>(
    fs: &F,
    dir: &Path,
    meta: &SnapshotMeta,
) -> Result<SnapshotFileWriter<F::File>> {
    let temp = dir.join(format!("{}.tmp", snapshot_file_name(meta.last)));
    if fs.open(&temp).is_ok() {
        fs.remove_file(&temp).map_err(io_err(&temp))?;
    }
    let header = encode_header_for(meta, 0, 0);
    let mut file = fs.create(&temp).map_err(io_err(&temp))?;
    file.write_at(&header, 0).map_err(io_err(&temp))?;
    Ok(SnapshotFileWriter {
        file,
        temp,
        meta: meta.clone(),
        header_len_bytes: header.len() as u64,
        data_len_bytes: 0,
        crc: 0,
        buf: Vec::with_capacity(WRITER_BUFFER_SIZE_BYTES),
    })
}

impl<H: FileHandle> SnapshotFileWriter<H> {
    fn flush_buf(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.file
            .write_at(&self.buf, self.header_len_bytes + self.data_len_bytes)?;
        self.crc = crc32c::crc32c_append(self.crc, &self.buf);
        self.data_len_bytes += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes the remaining data and the final header, fsyncs, and returns the temporary path.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.flush_buf().map_err(io_err(&self.temp))?;
        let header = encode_header_for(&self.meta, self.data_len_bytes, self.crc);
        debug_assert_eq!(header.len() as u64, self.header_len_bytes);
        self.file.write_at(&header, 0).map_err(io_err(&self.temp))?;
        self.file.sync_data().map_err(sync_err(&self.temp))?;
        Ok(self.temp)
    }
}

impl<H: FileHandle> std::io::Write for SnapshotFileWriter<H> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > WRITER_BUFFER_SIZE_BYTES {
            self.flush_buf()?;
        }
        if data.len() >= WRITER_BUFFER_SIZE_BYTES {
            self.file
                .write_at(data, self.header_len_bytes + self.data_len_bytes)?;
            self.crc = crc32c::crc32c_append(self.crc, data);
            self.data_len_bytes += data.len() as u64;
        } else {
            self.buf.extend_from_slice(data);
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.flush_buf()
    }
}

/// Makes a complete, synced snapshot file at `temp` (streamed by [`SnapshotFileWriter`] or
/// received from a leader) the snapshot of its position: verifies its header, renames it to its
/// final name, fsyncs the directory and keeps the newest `keep`.
pub fn adopt_snapshot_file<F: Fs>(
    fs: &F,
    dir: &Path,
    temp: &Path,
    keep: usize,
) -> Result<SnapshotFile> {
    assert!(keep >= 1, "keep at least the snapshot adopted");
    let handle = fs.open(temp).map_err(io_err(temp))?;
    let mut file =
        verify_snapshot_header(&handle, temp).map_err(|reason| WalError::CorruptSnapshot {
            path: temp.to_owned(),
            reason,
        })?;
    drop(handle);
    let path = dir.join(snapshot_file_name(file.meta.last));
    fs.rename(temp, &path).map_err(io_err(&path))?;
    fs.sync_dir(dir).map_err(sync_err(dir))?;
    file.path = path.clone();
    prune_snapshots(fs, dir, &path, keep)?;
    Ok(file)
}

/// Deletes all but the newest `keep` snapshot files (never `newest`, just put in place), and makes
/// the deletions durable. The bootstrap snapshot (position 0/0, no data) is never deleted: the
/// initial configuration lives nowhere else, and a node whose newer snapshots are all damaged
/// and set aside falls back to it — without it the node would replay its log under an empty
/// configuration and never campaign again (simulator seed 21072088).
fn prune_snapshots<F: Fs>(fs: &F, dir: &Path, newest: &Path, keep: usize) -> Result<()> {
    let all: Vec<(LogId, PathBuf)> = list_snapshots(fs, dir)?
        .into_iter()
        .filter(|(id, _)| *id != LogId::ZERO)
        .collect();
    let excess = all.len().saturating_sub(keep);
    for (_, old) in all.iter().take(excess) {
        if old != newest {
            fs.remove_file(old).map_err(io_err(old))?;
        }
    }
    if excess > 0 {
        fs.sync_dir(dir).map_err(sync_err(dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simfs::SimFs;

    fn meta(index: u64) -> SnapshotMeta {
        SnapshotMeta {
            last: LogId::new(2, index),
            membership: Arc::new(Membership::new_voters([1, 2, 3])),
            term_history: vec![LogId::new(1, 1), LogId::new(2, 5)],
        }
    }

    #[test]
    fn save_verify_prune_and_skip_corrupt() {
        let fs = SimFs::new();
        let dir = PathBuf::from("/s");
        fs.create_dir_all(&dir).unwrap();
        for i in [10, 20, 30] {
            save_snapshot(&fs, &dir, &meta(i), &[i as u8; 3000], 2).unwrap();
        }
        let all = list_snapshots(&fs, &dir).unwrap();
        assert_eq!(
            all.iter().map(|(id, _)| id.index).collect::<Vec<_>>(),
            [20, 30]
        );
        let latest = find_latest_snapshot(&fs, &dir).unwrap();
        let chosen = latest.chosen.unwrap();
        assert_eq!(chosen.meta, meta(30));
        assert_eq!(
            read_snapshot_data(&fs, &chosen, 1 << 20).unwrap(),
            [30u8; 3000]
        );

        fs.flip_bit(&all[1].1, 2000, 3).unwrap();
        let latest = find_latest_snapshot(&fs, &dir).unwrap();
        assert_eq!(latest.chosen.unwrap().meta, meta(20));
        assert_eq!(latest.skipped.len(), 1);
        assert!(latest.skipped[0].reason.contains("data checksum"));
    }

    #[test]
    fn a_streamed_file_equals_a_saved_one_and_is_adopted() {
        use std::io::Write as _;
        let fs = SimFs::new();
        let dir = PathBuf::from("/s");
        fs.create_dir_all(&dir).unwrap();
        save_snapshot(&fs, &dir, &meta(10), &[1u8; 100], 2).unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut w = create_snapshot_file(&fs, &dir, &meta(20)).unwrap();
        w.write_all(&data[..10]).unwrap();
        w.write_all(&data[10..2_500_000]).unwrap();
        w.write_all(&data[2_500_000..]).unwrap();
        let temp = w.finish().unwrap();
        assert!(is_snapshot_temp_name(
            temp.file_name().unwrap().to_str().unwrap()
        ));
        let adopted = adopt_snapshot_file(&fs, &dir, &temp, 2).unwrap();
        assert_eq!(adopted.meta, meta(20));
        let latest = find_latest_snapshot(&fs, &dir).unwrap().chosen.unwrap();
        assert_eq!(latest, adopted);
        assert_eq!(read_snapshot_data(&fs, &latest, 1 << 30).unwrap(), data);
        let handle = fs.open(&latest.path).unwrap();
        let (file, read) = read_snapshot_handle(&handle, &latest.path, 1 << 30).unwrap();
        assert_eq!((file, read), (latest, data));
    }

    #[test]
    fn names_round_trip() {
        let id = LogId::new(7, 12345);
        assert_eq!(parse_snapshot_file_name(&snapshot_file_name(id)), Some(id));
        assert_eq!(parse_snapshot_file_name("snapshot-x.snap"), None);
    }
}
