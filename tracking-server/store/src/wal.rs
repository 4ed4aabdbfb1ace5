//! The write-ahead log: numbered segment files of checksummed records, one record per batch.
//! Replay cuts a torn or corrupt tail instead of failing. Points and console lines share the
//! log, each record tagged with its kind, so one fsync makes both durable.

use crate::{io_err, lock, Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use trainlog_schema::{BatchPoint, MetricKey, PointBatch, RunId};

pub(crate) const KIND_POINTS: u8 = 1;
const HEADER_LEN: usize = 8;
const MAX_RECORD: usize = 1 << 30;

/// A batch as logged: which run, in which project, and its points.
#[derive(Debug, Clone, PartialEq)]
pub struct WalRecord {
    pub run: RunId,
    pub project_id: i64,
    pub batch: PointBatch,
}

pub fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}.wal"))
}

/// Segment numbers present in `dir`, ascending.
pub fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err("listing the write-ahead log"))? {
        let entry = entry.map_err(io_err("listing the write-ahead log"))?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".wal")) else {
            continue;
        };
        if let Ok(n) = stem.parse() {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Appends one encoded record (header and payload) for `record` to `out`.
pub fn encode(out: &mut Vec<u8>, run: &RunId, project_id: i64, batch: &PointBatch) {
    frame(out, |out| {
        out.push(KIND_POINTS);
        put_str(out, run.as_str());
        out.extend_from_slice(&project_id.to_le_bytes());
        out.extend_from_slice(&(batch.keys.len() as u32).to_le_bytes());
        for key in &batch.keys {
            put_str(out, key.as_str());
        }
        out.extend_from_slice(&(batch.points.len() as u32).to_le_bytes());
        out.reserve(batch.points.len() * 28);
        for p in &batch.points {
            out.extend_from_slice(&p.key.to_le_bytes());
            out.extend_from_slice(&p.step.to_le_bytes());
            out.extend_from_slice(&p.timestamp_ms.to_le_bytes());
            out.extend_from_slice(&p.value.to_bits().to_le_bytes());
        }
    })
}

/// Appends one record to `out`: the header (payload length, checksum), then what `payload` writes.
pub(crate) fn frame(out: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    payload(out);
    let payload_len = (out.len() - start - HEADER_LEN) as u32;
    let crc = crc32fast::hash(&out[start + HEADER_LEN..]);
    out[start..start + 4].copy_from_slice(&payload_len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub(crate) struct Cursor<'a> {
    pub(crate) buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.buf.len() < n {
            return None;
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Some(head)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take(4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes)
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.take(8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
    }
    pub(crate) fn string(&mut self) -> Option<String> {
        let n = self.u16()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

/// Reads a record of points; None for anything else.
pub(crate) fn decode_points(payload: &[u8]) -> Option<WalRecord> {
    let mut c = Cursor { buf: payload };
    if c.u8()? != KIND_POINTS {
        return None;
    }
    let run = RunId::from_trusted(c.string()?);
    let project_id = c.u64()? as i64;
    let n_keys = c.u32()? as usize;
    let mut keys = Vec::with_capacity(n_keys.min(1 << 16));
    for _ in 0..n_keys {
        keys.push(MetricKey::from_trusted(c.string()?));
    }
    let n_points = c.u32()? as usize;
    if c.buf.len() != n_points * 28 {
        return None;
    }
    let mut points = Vec::with_capacity(n_points);
    for _ in 0..n_points {
        let key = c.u32()?;
        if key as usize >= keys.len() {
            return None;
        }
        points.push(BatchPoint {
            key,
            step: c.u64()? as i64,
            timestamp_ms: c.u64()? as i64,
            value: f64::from_bits(c.u64()?),
        });
    }
    Some(WalRecord { run, project_id, batch: PointBatch { keys, points } })
}

/// Reads every whole record of a segment that has a valid checksum and that `decode` reads;
/// truncates the file after the last one, and answers how many bytes it cut.
pub fn replay_with<T>(path: &Path, decode: impl Fn(&[u8]) -> Option<T>) -> Result<(Vec<T>, u64)> {
    let mut data = Vec::new();
    File::open(path).and_then(|mut f| f.read_to_end(&mut data)).map_err(io_err("reading a write-ahead log segment"))?;
    let mut records = Vec::new();
    let mut offset = 0usize;
    while offset < data.len() {
        let Some(header) = data.get(offset..offset + HEADER_LEN) else {
            break;
        };
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if len > MAX_RECORD {
            break;
        }
        let Some(payload) = data.get(offset + HEADER_LEN..offset + HEADER_LEN + len) else {
            break;
        };
        if crc32fast::hash(payload) != crc {
            break;
        }
        let Some(record) = decode(payload) else {
            break;
        };
        records.push(record);
        offset += HEADER_LEN + len;
    }
    let mut cut_bytes = 0;
    if offset < data.len() {
        cut_bytes = (data.len() - offset) as u64;
        let file = OpenOptions::new().write(true).open(path).map_err(io_err("opening a write-ahead log segment"))?;
        file.set_len(offset as u64).map_err(io_err("cutting a torn write-ahead log tail"))?;
        file.sync_all().map_err(io_err("syncing a write-ahead log segment"))?;
    }
    Ok((records, cut_bytes))
}

/// The segment being appended to.
pub struct Segment {
    pub number: u64,
    file: File,
    /// Bytes of whole, synced records: a failed write is cut back to this length.
    len: u64,
    /// False once a failed write could not be cut back: the file may end in a torn record, so
    /// nothing more may be appended to it.
    sound: bool,
}

impl Segment {
    pub fn create(dir: &Path, number: u64) -> Result<Self> {
        let path = segment_path(dir, number);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_err("creating a write-ahead log segment"))?;
        sync_dir(dir)?;
        let len = file.metadata().map_err(io_err("reading a write-ahead log segment"))?.len();
        Ok(Self { number, file, len, sound: true })
    }

    /// Whether records may still be appended: false after a failed write that could not be cut
    /// back to its last whole record.
    pub fn is_sound(&self) -> bool {
        self.sound
    }

    /// Writes encoded records and waits until they are on disk. On failure the segment is cut
    /// back to its last whole record, so later records never follow a torn one; when even that
    /// fails, the segment refuses every later append.
    pub fn append_durable(&mut self, bytes: &[u8]) -> Result<()> {
        if !self.sound {
            return Err(Error::Io {
                context: "appending to a write-ahead log segment that a failed write left torn",
                source: std::io::Error::other("the segment is closed to appends"),
            });
        }
        let written = self
            .file
            .write_all(bytes)
            .map_err(io_err("writing the write-ahead log"))
            .and_then(|()| self.file.sync_data().map_err(io_err("syncing the write-ahead log")));
        match written {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                if self.file.set_len(self.len).and_then(|()| self.file.sync_data()).is_err() {
                    self.sound = false;
                }
                Err(e)
            }
        }
    }
}

/// Appends a group of encoded records durably. A segment that a failed write left torn takes
/// nothing more (records after a torn one would be cut at replay although they were
/// acknowledged): the group then goes to the segment `next` opens, which takes its place.
pub fn append_group(segment: &mut Segment, bytes: &[u8], next: impl FnOnce(&Segment) -> Result<Segment>) -> Result<()> {
    if !segment.is_sound() {
        *segment = next(segment)?;
    }
    segment.append_durable(bytes)
}

/// Which segments of the log are still needed. Points and console lines are written to files
/// each on its own schedule, and each reports the lowest segment still holding records of its
/// kind that no file has yet; a segment below both is removed. A kind's mark only rises.
pub struct Retention {
    dir: PathBuf,
    marks: Mutex<Marks>,
}

#[derive(Debug, Clone, Copy)]
struct Marks {
    points: u64,
    lines: u64,
}

impl Retention {
    pub fn new(dir: PathBuf, points: u64, lines: u64) -> Self {
        Self { dir, marks: Mutex::new(Marks { points, lines }) }
    }

    /// The points of every segment below `segment` are in files.
    pub fn points_below(&self, segment: u64) -> Result<()> {
        self.raise(|m| m.points = m.points.max(segment))
    }

    /// The console lines of every segment below `segment` are in files.
    pub fn lines_below(&self, segment: u64) -> Result<()> {
        self.raise(|m| m.lines = m.lines.max(segment))
    }

    /// Raises both marks at once (a mark never falls), then removes what no kind needs.
    pub fn raise_marks(&self, points: u64, lines: u64) -> Result<()> {
        self.raise(|m| {
            m.points = m.points.max(points);
            m.lines = m.lines.max(lines);
        })
    }

    fn raise(&self, change: impl FnOnce(&mut Marks)) -> Result<()> {
        let mut marks = lock(&self.marks);
        change(&mut marks);
        let below = marks.points.min(marks.lines);
        for n in list_segments(&self.dir)?.into_iter().filter(|&n| n < below) {
            match std::fs::remove_file(segment_path(&self.dir, n)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_err("removing a write-ahead log segment whose records are in files")(e))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err("syncing the write-ahead log folder"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize) -> PointBatch {
        PointBatch {
            keys: vec![MetricKey::from_trusted("loss".into()), MetricKey::from_trusted("acc".into())],
            points: (0..n)
                .map(|i| BatchPoint {
                    key: (i % 2) as u32,
                    step: i as i64,
                    timestamp_ms: 1000 + i as i64,
                    value: i as f64 * 0.5,
                })
                .collect(),
        }
    }

    #[test]
    fn records_round_trip_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunId::from_trusted("r1".into());
        let mut seg = Segment::create(dir.path(), 1).unwrap();
        let mut buf = Vec::new();
        encode(&mut buf, &run, 7, &batch(10));
        encode(&mut buf, &run, 7, &batch(3));
        seg.append_durable(&buf).unwrap();
        let mut torn = Vec::new();
        encode(&mut torn, &run, 7, &batch(5));
        seg.append_durable(&torn[..torn.len() - 9]).unwrap();
        let path = segment_path(dir.path(), 1);
        let before = std::fs::metadata(&path).unwrap().len();

        let (records, cut_bytes) = replay_with(&path, decode_points).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].batch, batch(10));
        assert_eq!(records[1].project_id, 7);
        assert_eq!(cut_bytes, (torn.len() - 9) as u64);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), before - cut_bytes);
        assert_eq!(replay_with(&path, decode_points).unwrap().0.len(), 2);
    }

    #[test]
    fn a_segment_whose_failed_write_cannot_be_cut_back_refuses_later_appends() {
        let dir = tempfile::tempdir().unwrap();
        // Writes to /dev/full fail with "no space", and it cannot be truncated either.
        std::os::unix::fs::symlink("/dev/full", segment_path(dir.path(), 1)).unwrap();
        let mut seg = Segment::create(dir.path(), 1).unwrap();
        let mut buf = Vec::new();
        encode(&mut buf, &RunId::from_trusted("r1".into()), 1, &batch(4));
        let first = seg.append_durable(&buf).unwrap_err();
        assert!(first.is_disk_full(), "{first}");
        assert!(!seg.is_sound());
        assert!(seg.append_durable(&buf).is_err());

        let mut fine = Segment::create(dir.path(), 2).unwrap();
        fine.append_durable(&buf).unwrap();
        assert!(fine.is_sound());
    }

    #[test]
    fn a_segment_is_removed_once_both_kinds_are_below_it() {
        let dir = tempfile::tempdir().unwrap();
        for n in 1..=5 {
            Segment::create(dir.path(), n).unwrap();
        }
        let retention = Retention::new(dir.path().to_owned(), 1, 1);
        retention.points_below(4).unwrap();
        assert_eq!(list_segments(dir.path()).unwrap(), vec![1, 2, 3, 4, 5], "lines still need them all");
        retention.lines_below(3).unwrap();
        assert_eq!(list_segments(dir.path()).unwrap(), vec![3, 4, 5]);
        retention.lines_below(2).unwrap();
        retention.raise_marks(2, 6).unwrap();
        assert_eq!(list_segments(dir.path()).unwrap(), vec![4, 5], "a mark never falls");
    }

    #[test]
    fn a_flipped_bit_stops_replay_at_that_record() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunId::from_trusted("r1".into());
        let mut buf = Vec::new();
        encode(&mut buf, &run, 1, &batch(4));
        let first_len = buf.len();
        encode(&mut buf, &run, 1, &batch(4));
        buf[first_len + 20] ^= 0x10;
        Segment::create(dir.path(), 3).unwrap().append_durable(&buf).unwrap();
        let (records, _) = replay_with(&segment_path(dir.path(), 3), decode_points).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(list_segments(dir.path()).unwrap(), vec![3]);
    }
}
