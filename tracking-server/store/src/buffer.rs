//! In-memory state shared by ingest, persistence and reads: the active generation of buffered
//! points, frozen generations waiting to be persisted, and the files each run has.

use crate::parquet_io::KeyIndex;
use crate::series::Series;
use object_store::path::Path as ObjectPath;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use trainlog_schema::{MetricKey, PointBatch, RunId};

/// Points of one run in one generation, per key in arrival order.
#[derive(Debug, Default)]
pub struct RunBuffer {
    pub project_id: i64,
    pub series: HashMap<MetricKey, Series>,
}

/// The points logged into one write-ahead log segment (or, after replay, several up to `wal_segment`).
#[derive(Debug)]
pub struct Generation {
    pub runs: HashMap<RunId, RunBuffer>,
    pub points: usize,
    pub wal_segment: u64,
    pub started: Instant,
}

impl Generation {
    pub fn new(wal_segment: u64) -> Self {
        Self { runs: HashMap::new(), points: 0, wal_segment, started: Instant::now() }
    }

    pub fn apply(&mut self, run: &RunId, project_id: i64, batch: &PointBatch) {
        let buf = match self.runs.get_mut(run) {
            Some(b) => b,
            None => self.runs.entry(run.clone()).or_insert_with(|| RunBuffer { project_id, series: HashMap::new() }),
        };
        let mut per_key: Vec<Series> = batch.keys.iter().map(|_| Series::default()).collect();
        for p in &batch.points {
            per_key[p.key as usize].push(p.step, p.timestamp_ms, p.value);
        }
        for (key, add) in batch.keys.iter().zip(per_key) {
            if add.is_empty() {
                continue;
            }
            let s = match buf.series.get_mut(key) {
                Some(s) => s,
                None => buf.series.entry(key.clone()).or_default(),
            };
            s.steps.extend_from_slice(&add.steps);
            s.timestamps.extend_from_slice(&add.timestamps);
            s.values.extend_from_slice(&add.values);
        }
        self.points += batch.points.len();
    }

    /// A normalized copy of one series, if this generation has it.
    pub fn series(&self, run: &RunId, key: &MetricKey) -> Option<Series> {
        let mut s = self.runs.get(run)?.series.get(key)?.clone();
        s.normalize();
        Some(s)
    }

    pub fn has_run(&self, run: &RunId) -> bool {
        self.runs.contains_key(run)
    }
}

/// One metric points file known to the catalog.
#[derive(Debug)]
pub struct FileMeta {
    pub path: ObjectPath,
    pub project_id: i64,
    pub ord: i64,
    pub rows: u64,
    pub bytes: u64,
    pub index: KeyIndex,
}

/// The files of one run, ordered by `ord`; `version` changes whenever the list does.
#[derive(Debug, Default, Clone)]
pub struct RunFiles {
    pub version: u64,
    pub files: Vec<Arc<FileMeta>>,
}

#[derive(Debug)]
pub struct State {
    pub active: Generation,
    pub frozen: VecDeque<Arc<Generation>>,
    pub files: HashMap<RunId, RunFiles>,
    pub next_version: u64,
}

impl State {
    /// Replaces `removed` files of `run` by `added` ones (those it does not list yet).
    pub fn swap_files(&mut self, run: &RunId, added: Vec<Arc<FileMeta>>, removed: &[ObjectPath]) {
        self.next_version += 1;
        let version = self.next_version;
        let entry = self.files.entry(run.clone()).or_default();
        entry.files.retain(|f| !removed.contains(&f.path));
        for file in added {
            if !entry.files.iter().any(|f| f.path == file.path) {
                entry.files.push(file);
            }
        }
        entry.files.sort_by_key(|f| f.ord);
        entry.version = version;
    }

    pub fn buffered(&self, run: &RunId) -> bool {
        self.active.has_run(run) || self.frozen.iter().any(|g| g.has_run(run))
    }
}
