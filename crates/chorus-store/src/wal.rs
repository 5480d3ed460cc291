//! The write-ahead segment log: every `append` is one `write` of checksummed
//! frames to the current segment file, every durable point one `fdatasync`
//! (issue 13 item 2: "one write + at most one fdatasync per round"). The redb
//! tables are brought up to date from it in bulk (`Store::materialize`), once
//! per stable checkpoint or per `MATERIALIZE_EVERY_APPENDS` appends, instead
//! of one B-tree transaction per round.
//!
//! Layout: `wal/<segment, 16 hex digits>.log` in the data directory. One
//! frame per append, so an append is all or nothing as it was with one redb
//! transaction: `len: u32 LE | check: u64 LE | payload`, `check` the first 8
//! bytes of the payload's blake3 hash, the payload a postcard sequence of
//! `WalEntry` (the append's records). Segments
//! below the one recorded in the database (`META_WAL`) are already in the
//! tables and are deleted; the rest are replayed on open.
//!
//! A batch is written once per segment: a `Decided` whose batch went out
//! earlier in the same segment (in its `Accepted`, the normal case) is
//! written as `DecidedRef` and resolved on replay by digest.
//!
//! A crash can tear only the tail of the last segment (a frame cut short or
//! not yet on disk): replay stops at the first frame that is short or fails
//! its check, and the segment is truncated there. Damage anywhere else (in
//! a segment followed by another) is corruption, reported, never skipped.

use crate::error::{Result, StoreError};
use crate::schema::corrupt;
use chorus_core::{Batch, Cell, Digest};
use chorus_order::PersistRecord;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Directory of the segment files, inside the data directory.
pub const WAL_DIR_NAME: &str = "wal";
/// Frame header: length, then check.
pub(crate) const FRAME_HEADER: usize = 12;
/// Largest payload a frame may carry (a stable checkpoint's snapshot is the
/// largest record); a larger length in a header is damage, not a record.
pub(crate) const FRAME_PAYLOAD_MAX: usize = 1 << 30;

/// One frame's payload.
#[derive(Debug, Deserialize)]
pub(crate) enum WalEntry {
    Record(PersistRecord),
    /// A decided cell whose batch an earlier frame of this segment carries.
    DecidedRef {
        cell: Cell,
        digest: Digest,
    },
}

/// Serialises exactly like `WalEntry`, without cloning the record's batch.
#[derive(Serialize)]
enum WalEntryRef<'a> {
    Record(&'a PersistRecord),
    DecidedRef { cell: Cell, digest: Digest },
}

fn check_of(payload: &[u8]) -> u64 {
    let h = blake3::hash(payload);
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

fn segment_name(segment: u64) -> String {
    format!("{segment:016x}.log")
}

fn io_err(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The segment being appended to.
pub(crate) struct Wal {
    dir: PathBuf,
    segment: u64,
    path: PathBuf,
    file: File,
    /// Bytes of the segment (the next frame's offset).
    len: u64,
    /// Digests of the batches this segment already carries.
    batches: HashSet<Digest>,
    /// Encoding buffer, reused so an append allocates nothing once warm.
    buf: Vec<u8>,
    /// `fdatasync` the directory after creating a segment.
    sync_dir: bool,
}

/// What `Wal::replay` found on disk.
pub(crate) struct Replayed {
    pub records: Vec<PersistRecord>,
    /// Highest segment seen (the caller continues after it).
    pub last_segment: Option<u64>,
    /// Bytes cut off a torn tail.
    pub torn_bytes: u64,
}

impl Wal {
    pub fn dir_of(data_dir: &Path) -> PathBuf {
        data_dir.join(WAL_DIR_NAME)
    }

    /// The segment numbers present, in order.
    fn segments(dir: &Path) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io_err(dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| io_err(dir, e))?;
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".log")) else {
                continue;
            };
            if stem.len() == 16 {
                if let Ok(n) = u64::from_str_radix(stem, 16) {
                    out.push(n);
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Every record of the segments at or above `from`, in append order;
    /// segments below it are deleted (their records are in the tables). A
    /// torn tail of the last segment is cut off.
    pub fn replay(data_dir: &Path, from: u64) -> Result<Replayed> {
        let dir = Wal::dir_of(data_dir);
        let segments = Wal::segments(&dir)?;
        let mut out = Replayed {
            records: Vec::new(),
            last_segment: segments.last().copied(),
            torn_bytes: 0,
        };
        for (i, &segment) in segments.iter().enumerate() {
            let path = dir.join(segment_name(segment));
            if segment < from {
                std::fs::remove_file(&path).map_err(|e| io_err(&path, e))?;
                continue;
            }
            let bytes = std::fs::read(&path).map_err(|e| io_err(&path, e))?;
            let last = i + 1 == segments.len();
            let good = read_frames(&bytes, segment, &mut out.records)?;
            if good < bytes.len() {
                if !last {
                    return Err(corrupt(
                        "wal",
                        format!("{segment:016x}@{good}"),
                        "damaged frame in a segment followed by another",
                    ));
                }
                out.torn_bytes = (bytes.len() - good) as u64;
                tracing::warn!(
                    segment,
                    offset = good,
                    bytes = out.torn_bytes,
                    "wal: torn tail cut off"
                );
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| io_err(&path, e))?;
                f.set_len(good as u64).map_err(|e| io_err(&path, e))?;
                f.sync_all().map_err(|e| io_err(&path, e))?;
            }
        }
        Ok(out)
    }

    /// Start segment `segment` (empty), deleting every older one: the caller
    /// has made their records durable in the tables.
    pub fn start(data_dir: &Path, segment: u64, sync_dir: bool) -> Result<Wal> {
        let dir = Wal::dir_of(data_dir);
        std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        let path = dir.join(segment_name(segment));
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| io_err(&path, e))?;
        if sync_dir {
            // The new file's name must survive a machine crash with the
            // frames later synced into it.
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_err(&dir, e))?;
        }
        for old in Wal::segments(&dir)? {
            if old < segment {
                let p = dir.join(segment_name(old));
                std::fs::remove_file(&p).map_err(|e| io_err(&p, e))?;
            }
        }
        Ok(Wal {
            dir,
            segment,
            path,
            file,
            len: 0,
            batches: HashSet::new(),
            buf: Vec::new(),
            sync_dir,
        })
    }

    pub fn segment(&self) -> u64 {
        self.segment
    }

    /// Bytes in the current segment.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Bytes of every segment file on disk.
    pub fn disk_bytes(&self) -> u64 {
        Wal::segments(&self.dir)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| std::fs::metadata(self.dir.join(segment_name(s))).ok())
            .map(|m| m.len())
            .sum()
    }

    /// Write `records` as one frame with one `write` call. On error the
    /// segment is cut back to where it was, so a failed append leaves
    /// nothing behind.
    pub fn append(&mut self, records: &[PersistRecord]) -> Result<()> {
        self.buf.clear();
        let mut new_batches: Vec<Digest> = Vec::new();
        let mut entries: Vec<WalEntryRef<'_>> = Vec::with_capacity(records.len());
        for r in records {
            let entry = match r {
                PersistRecord::Decided { cell, digest, .. }
                    if self.batches.contains(digest) || new_batches.contains(digest) =>
                {
                    WalEntryRef::DecidedRef {
                        cell: *cell,
                        digest: *digest,
                    }
                }
                PersistRecord::Accepted { digest, .. } | PersistRecord::Decided { digest, .. } => {
                    new_batches.push(*digest);
                    WalEntryRef::Record(r)
                }
                _ => WalEntryRef::Record(r),
            };
            entries.push(entry);
        }
        self.buf.extend_from_slice(&[0u8; FRAME_HEADER]);
        let buf = std::mem::take(&mut self.buf);
        self.buf =
            postcard::to_extend(&entries, buf).map_err(|e| corrupt("wal", self.segment, e.to_string()))?;
        let payload_len = self.buf.len() - FRAME_HEADER;
        if payload_len > FRAME_PAYLOAD_MAX {
            return Err(corrupt(
                "wal",
                self.segment,
                format!("append of {payload_len} bytes exceeds the frame limit"),
            ));
        }
        let check = check_of(&self.buf[FRAME_HEADER..]);
        self.buf[..4].copy_from_slice(&(payload_len as u32).to_le_bytes());
        self.buf[4..FRAME_HEADER].copy_from_slice(&check.to_le_bytes());
        if let Err(e) = self.file.write_all(&self.buf) {
            // A short write may have left part of a frame: cut it off, so
            // the next append does not follow garbage (replay would stop
            // there and drop it).
            let _ = self.file.set_len(self.len);
            let _ = std::io::Seek::seek(&mut self.file, std::io::SeekFrom::Start(self.len));
            return Err(io_err(&self.path, e));
        }
        self.len += self.buf.len() as u64;
        self.batches.extend(new_batches);
        if self.buf.capacity() > 4 << 20 {
            // A snapshot passed through: do not keep its buffer for ever.
            self.buf = Vec::new();
        }
        Ok(())
    }

    /// Make every frame written so far durable (one `fdatasync`).
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync_data().map_err(|e| io_err(&self.path, e))
    }

    pub fn syncs_dir(&self) -> bool {
        self.sync_dir
    }
}

/// Decode the frames of one segment into `out`; returns the length of the
/// prefix of whole, checked frames (the rest is a torn tail or damage).
fn read_frames(bytes: &[u8], segment: u64, out: &mut Vec<PersistRecord>) -> Result<usize> {
    let mut batches: HashMap<Digest, Batch> = HashMap::new();
    let mut at = 0usize;
    while bytes.len() - at >= FRAME_HEADER {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let check = u64::from_le_bytes(bytes[at + 4..at + FRAME_HEADER].try_into().expect("8 bytes"));
        let body = at + FRAME_HEADER;
        if len > FRAME_PAYLOAD_MAX || bytes.len() - body < len {
            break;
        }
        let payload = &bytes[body..body + len];
        if check_of(payload) != check {
            break;
        }
        let key = format!("{segment:016x}@{at}");
        let entries: Vec<WalEntry> = crate::schema::decode("wal", &key, payload)?;
        for entry in entries {
            let record = match entry {
                WalEntry::Record(r) => {
                    if let PersistRecord::Accepted { digest, batch, .. }
                    | PersistRecord::Decided { digest, batch, .. } = &r
                    {
                        batches.entry(*digest).or_insert_with(|| batch.clone());
                    }
                    r
                }
                WalEntry::DecidedRef { cell, digest } => {
                    let Some(batch) = batches.get(&digest) else {
                        return Err(corrupt(
                            "wal",
                            key,
                            "decided cell refers to a batch the segment lacks",
                        ));
                    };
                    PersistRecord::Decided {
                        cell,
                        digest,
                        batch: batch.clone(),
                    }
                }
            };
            out.push(record);
        }
        at = body + len;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{LaneId, Slot, View};

    fn accepted(slot: u64) -> PersistRecord {
        let b = Batch::noop();
        PersistRecord::Accepted {
            lane: LaneId(0),
            view: View(1),
            slot: Slot(slot),
            digest: b.digest(),
            batch: b,
        }
    }

    fn decided(slot: u64) -> PersistRecord {
        let b = Batch::noop();
        PersistRecord::Decided {
            cell: Cell {
                lane: LaneId(0),
                slot: Slot(slot),
            },
            digest: b.digest(),
            batch: b,
        }
    }

    #[test]
    fn a_decided_batch_already_in_the_segment_is_written_as_a_reference() {
        let d = tempfile::tempdir().unwrap();
        let mut w = Wal::start(d.path(), 3, false).unwrap();
        w.append(&[accepted(0)]).unwrap();
        let after_accepted = w.len();
        w.append(&[decided(0)]).unwrap();
        let decided_frame = w.len() - after_accepted;
        assert!(
            decided_frame < after_accepted,
            "the reference is smaller than the batch"
        );
        let r = Wal::replay(d.path(), 3).unwrap();
        assert_eq!(r.records, vec![accepted(0), decided(0)]);
        assert_eq!((r.last_segment, r.torn_bytes), (Some(3), 0));
    }

    #[test]
    fn older_segments_are_deleted_on_start_and_skipped_on_replay() {
        let d = tempfile::tempdir().unwrap();
        let mut w = Wal::start(d.path(), 1, false).unwrap();
        w.append(&[accepted(0)]).unwrap();
        let mut w2 = Wal::start(d.path(), 2, false).unwrap();
        w2.append(&[accepted(1)]).unwrap();
        assert_eq!(Wal::segments(&Wal::dir_of(d.path())).unwrap(), vec![2]);
        assert_eq!(Wal::replay(d.path(), 2).unwrap().records, vec![accepted(1)]);
        assert_eq!(Wal::replay(d.path(), 3).unwrap().records, vec![]);
        assert!(Wal::segments(&Wal::dir_of(d.path())).unwrap().is_empty());
    }

    #[test]
    fn damage_before_the_last_segment_is_corruption() {
        let d = tempfile::tempdir().unwrap();
        let mut w = Wal::start(d.path(), 1, false).unwrap();
        w.append(&[accepted(0), accepted(1)]).unwrap();
        drop(w);
        // A second segment without deleting the first (as a crash between
        // the two steps of `start` would leave it).
        let dir = Wal::dir_of(d.path());
        std::fs::write(dir.join(segment_name(2)), b"").unwrap();
        let p = dir.join(segment_name(1));
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[FRAME_HEADER + 1] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        let e = Wal::replay(d.path(), 1).err().expect("damage is reported");
        assert!(e.is_corruption(), "{e}");
    }
}
