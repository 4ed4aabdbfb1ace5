//! Per-series summaries (last, min, max, count, sum) kept current on ingest. A point above the
//! series' last step folds in exactly. Any other point may replace an earlier one: it folds in
//! as a bound (min and max widen, the last value follows a rewritten last step) and marks the
//! summary stale, and a background task recomputes it exactly from the series. Reads never wait
//! for that: they answer the bound at once.
//!
//! Servers sharing a metadata database each fold the points they took into the stored summaries
//! (`MetricSummary::absorb`), so each keeps what it has not written yet (`pending`) apart from
//! its view of the whole series (`summary`), which decides whether a point appends or rewrites.
//! Reads answer the stored summaries with this server's pending points folded in.

use std::collections::{BTreeMap, HashMap, HashSet};
use trainlog_schema::{MetricKey, MetricSummary, PointBatch, RunId};

/// Points appended to a stale series that a recomputation may not have seen, kept until it
/// settles; past this many, the recomputation's result is dropped and it starts again.
const MAX_APPENDED_WHILE_STALE: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct Entry {
    /// The summary stored when the run was loaded, with every point this server took since.
    pub summary: MetricSummary,
    pub stale: bool,
    /// The points this server took since it last wrote the summary, to fold into the stored one,
    /// and the lowest step among them (`i64::MAX` for none).
    pub pending: MetricSummary,
    pub pending_first_step: i64,
    /// `summary` was recomputed from the whole series and replaces the stored one.
    pub replace: bool,
    /// Moves with every point that replaced or preceded an earlier step, every time the summary
    /// becomes stale, and every time a recomputation settles: a recomputation settles only if it
    /// has not moved since the recomputation read it, so one that raced with another (which
    /// settled and stopped keeping the appended points) or with a rewrite is dropped.
    pub generation: u64,
    /// Points appended (step above the last) while stale, in order, to fold into a recomputation
    /// made from an older snapshot of the series.
    appended_while_stale: Vec<(i64, i64, f64)>,
    /// More points were appended while stale than are kept.
    appended_overflow: bool,
}

impl Entry {
    fn new(summary: MetricSummary, stale: bool) -> Self {
        Self {
            summary,
            stale,
            pending: MetricSummary::EMPTY,
            pending_first_step: i64::MAX,
            replace: false,
            generation: 0,
            appended_while_stale: Vec::new(),
            appended_overflow: false,
        }
    }

    fn is_dirty(&self) -> bool {
        self.replace || !self.pending.is_empty()
    }

    /// Marks the summary to recompute. Becoming stale moves the generation: a recomputation
    /// that read it before, while the appended points were not kept, cannot settle.
    fn make_stale(&mut self) {
        if !self.stale {
            self.stale = true;
            self.generation += 1;
        }
    }
}

#[derive(Debug, Default)]
pub struct RunSummaries {
    pub project_id: i64,
    pub keys: HashMap<MetricKey, Entry>,
}

/// How one series' summary is written to the metadata store.
#[derive(Debug, Clone, Copy)]
pub enum SummaryWrite {
    /// Points taken since the last write, folded into the stored summary, and their lowest step:
    /// at or below the stored last step, another server may have written some of them too.
    Merge { pending: MetricSummary, first_step: i64 },
    /// A recomputed summary that replaces the stored one, and the points taken since the last
    /// write, to fold in instead when the replacement must wait.
    Replace { summary: MetricSummary, pending: MetricSummary, first_step: i64 },
}

#[derive(Debug, Clone)]
pub struct DirtySummary {
    pub run: RunId,
    pub project_id: i64,
    pub key: MetricKey,
    pub write: SummaryWrite,
}

#[derive(Debug, Default)]
pub struct Summaries {
    pub runs: HashMap<RunId, RunSummaries>,
    /// Runs with a dirty entry, so taking them costs what changed, not every run in memory.
    dirty_runs: HashSet<RunId>,
}

impl Summaries {
    pub fn is_loaded(&self, run: &RunId) -> bool {
        self.runs.contains_key(run)
    }

    /// Installs the summaries stored for a run, unless they are already in memory.
    pub fn load(&mut self, run: &RunId, project_id: i64, stored: BTreeMap<String, MetricSummary>) {
        self.runs.entry(run.clone()).or_insert_with(|| RunSummaries {
            project_id,
            keys: stored
                .into_iter()
                .map(|(k, summary)| {
                    // Rows stored before sums were kept have a NULL sum: recompute them on first read.
                    let stale = summary.sum.is_nan() && summary.sum_count == 0 && summary.count > 0;
                    (MetricKey::from_trusted(k), Entry::new(summary, stale))
                })
                .collect(),
        });
    }

    pub fn apply(&mut self, run: &RunId, project_id: i64, batch: &PointBatch) {
        let run_sums =
            self.runs.entry(run.clone()).or_insert_with(|| RunSummaries { project_id, keys: HashMap::new() });
        for key in &batch.keys {
            if !run_sums.keys.contains_key(key) {
                run_sums.keys.insert(key.clone(), Entry::new(MetricSummary::EMPTY, false));
            }
        }
        for p in &batch.points {
            let key = &batch.keys[p.key as usize];
            let Some(e) = run_sums.keys.get_mut(key) else {
                continue;
            };
            e.pending_first_step = e.pending_first_step.min(p.step);
            if e.summary.is_empty() {
                e.summary = MetricSummary::first(p.step, p.timestamp_ms, p.value);
                e.pending = e.summary;
            } else if p.step > e.summary.last_step {
                e.summary.push_newer(p.step, p.timestamp_ms, p.value);
                if e.pending.is_empty() {
                    e.pending = MetricSummary::first(p.step, p.timestamp_ms, p.value);
                } else {
                    e.pending.push_newer(p.step, p.timestamp_ms, p.value);
                }
                if e.stale {
                    if e.appended_while_stale.len() < MAX_APPENDED_WHILE_STALE {
                        e.appended_while_stale.push((p.step, p.timestamp_ms, p.value));
                    } else {
                        e.appended_overflow = true;
                    }
                }
            } else {
                let bound = MetricSummary::bound(p.step, p.timestamp_ms, p.value);
                e.summary.absorb(&bound);
                e.pending.absorb(&bound);
                e.stale = true;
                e.generation += 1;
            }
        }
        if !batch.points.is_empty() {
            self.dirty_runs.insert(run.clone());
        }
    }

    /// Takes what changed since the last call, to write.
    pub fn take_dirty(&mut self) -> Vec<DirtySummary> {
        let mut out = Vec::new();
        for run in self.dirty_runs.drain() {
            let Some(sums) = self.runs.get_mut(&run) else { continue };
            for (key, e) in &mut sums.keys {
                let pending = std::mem::replace(&mut e.pending, MetricSummary::EMPTY);
                let first_step = std::mem::replace(&mut e.pending_first_step, i64::MAX);
                let write = if std::mem::take(&mut e.replace) {
                    SummaryWrite::Replace { summary: e.summary, pending, first_step }
                } else if !pending.is_empty() {
                    SummaryWrite::Merge { pending, first_step }
                } else {
                    continue;
                };
                out.push(DirtySummary { run: run.clone(), project_id: sums.project_id, key: key.clone(), write });
            }
        }
        out
    }

    /// Puts back writes that failed, ahead of what was taken since.
    pub fn restore(&mut self, rows: &[DirtySummary]) {
        for row in rows {
            let Some(e) = self.runs.get_mut(&row.run).and_then(|r| r.keys.get_mut(&row.key)) else { continue };
            let (mut pending, first_step) = match row.write {
                SummaryWrite::Merge { pending, first_step } => (pending, first_step),
                SummaryWrite::Replace { pending, first_step, .. } => {
                    e.replace = true;
                    (pending, first_step)
                }
            };
            pending.absorb(&e.pending);
            e.pending = pending;
            e.pending_first_step = e.pending_first_step.min(first_step);
            self.dirty_runs.insert(row.run.clone());
        }
    }

    /// A replacement had to wait (another server holds points it could not see) and its
    /// pending points were folded in instead: recompute it again later.
    pub fn replacement_refused(&mut self, run: &RunId, key: &MetricKey) {
        if let Some(e) = self.runs.get_mut(run).and_then(|r| r.keys.get_mut(key)) {
            e.make_stale();
        }
    }

    /// Marks keys of a run stale, to recompute: the stored summary may count a step that several
    /// servers wrote.
    pub fn mark_stale(&mut self, run: &RunId, keys: &[String]) {
        if let Some(r) = self.runs.get_mut(run) {
            for key in keys {
                if let Some(e) = r.keys.get_mut(&MetricKey::from_trusted(key.clone())) {
                    e.make_stale();
                }
            }
        }
    }

    /// Stale keys of a run with their generation, read before the series is, to recompute.
    pub fn stale_keys(&self, run: &RunId) -> Vec<(MetricKey, u64)> {
        self.runs
            .get(run)
            .map(|r| r.keys.iter().filter(|(_, e)| e.stale).map(|(k, e)| (k.clone(), e.generation)).collect())
            .unwrap_or_default()
    }

    /// Runs with a stale key.
    pub fn runs_with_stale(&self) -> Vec<RunId> {
        self.runs.iter().filter(|(_, r)| r.keys.values().any(|e| e.stale)).map(|(id, _)| id.clone()).collect()
    }

    /// Installs a summary recomputed from a snapshot of the series taken after `generation` was
    /// read, unless the generation moved since: a rewrite came, the summary settled (another
    /// recomputation of it ran meanwhile), or it settled and became stale again. Points appended
    /// after the snapshot have steps above its last one: they fold in from the points kept while
    /// stale, which are kept from the moment it became stale, so from before the snapshot.
    pub fn settle(&mut self, run: &RunId, key: &MetricKey, generation: u64, summary: Option<MetricSummary>) {
        let Some(r) = self.runs.get_mut(run) else {
            return;
        };
        let Some(e) = r.keys.get_mut(key) else { return };
        if !e.stale || e.generation != generation {
            return;
        }
        // Whatever this one does, a recomputation still running read the points kept while
        // stale, which this one takes: it must not settle after it.
        e.generation += 1;
        let appended = std::mem::take(&mut e.appended_while_stale);
        if std::mem::take(&mut e.appended_overflow) {
            // Stays stale: recomputed again from a later snapshot.
            return;
        }
        let Some(mut s) = summary else {
            if appended.is_empty() && !e.is_dirty() {
                r.keys.remove(key);
            }
            return;
        };
        let snapshot_last_step = s.last_step;
        for (step, timestamp_ms, value) in appended.into_iter().filter(|p| p.0 > snapshot_last_step) {
            s.push_newer(step, timestamp_ms, value);
        }
        e.summary = s;
        e.stale = false;
        e.replace = true;
        self.dirty_runs.insert(run.clone());
    }

    /// Forgets a run's summaries, written or not: the run is gone.
    pub fn forget(&mut self, run: &RunId) {
        self.runs.remove(run);
        self.dirty_runs.remove(run);
    }

    /// Forgets a run's summaries if they are all written and exact (they load again on use).
    pub fn evict_clean(&mut self, run: &RunId) {
        if self.runs.get(run).is_some_and(|r| r.keys.values().all(|e| !e.is_dirty() && !e.stale)) {
            self.runs.remove(run);
        }
    }

    /// The stored summaries of a run with what this server has not written yet folded in, with
    /// only the keys `keep` accepts.
    pub fn overlay(
        &self,
        run: &RunId,
        mut stored: BTreeMap<String, MetricSummary>,
        keep: impl Fn(&str) -> bool,
    ) -> BTreeMap<String, MetricSummary> {
        stored.retain(|k, _| keep(k));
        if let Some(r) = self.runs.get(run) {
            for (key, e) in r.keys.iter().filter(|(k, _)| keep(k.as_str())) {
                if e.replace {
                    stored.insert(key.to_string(), e.summary);
                } else if !e.pending.is_empty() {
                    stored.entry(key.to_string()).or_insert(MetricSummary::EMPTY).absorb(&e.pending);
                }
            }
        }
        stored.retain(|_, s| s.count > 0);
        stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainlog_schema::BatchPoint;

    fn batch(points: &[(i64, f64)]) -> PointBatch {
        PointBatch {
            keys: vec![MetricKey::from_trusted("loss".into())],
            points: points
                .iter()
                .map(|&(step, value)| BatchPoint { key: 0, step, timestamp_ms: step * 10, value })
                .collect(),
        }
    }

    /// What a metadata store holding only this server's writes answers.
    #[derive(Default)]
    struct Stored(BTreeMap<String, MetricSummary>);

    impl Stored {
        fn write(&mut self, rows: &[DirtySummary]) {
            for row in rows {
                match row.write {
                    SummaryWrite::Merge { pending, .. } => {
                        self.0.entry(row.key.to_string()).or_insert(MetricSummary::EMPTY).absorb(&pending)
                    }
                    SummaryWrite::Replace { summary, .. } => {
                        self.0.insert(row.key.to_string(), summary);
                    }
                }
            }
        }

        fn read(&self, s: &Summaries, run: &RunId) -> MetricSummary {
            s.overlay(run, self.0.clone(), |_| true)["loss"]
        }
    }

    #[test]
    fn in_order_points_fold_in_exactly_and_rewrites_mark_stale() {
        let run = RunId::from_trusted("r".into());
        let mut s = Summaries::default();
        let mut stored = Stored::default();
        s.apply(&run, 1, &batch(&[(0, 3.0), (1, f64::NAN), (2, 1.0), (3, 2.0)]));
        let cur = stored.read(&s, &run);
        assert_eq!((cur.last, cur.min, cur.max, cur.count, cur.last_step), (2.0, 1.0, 3.0, 4, 3));
        assert!(s.stale_keys(&run).is_empty());
        stored.write(&s.take_dirty());
        assert_eq!(stored.read(&s, &run).count, 4, "written, nothing pending");
        s.apply(&run, 1, &batch(&[(2, 9.0)]));
        assert_eq!(s.stale_keys(&run).len(), 1);
        // Answered at once as a bound: the max widens, count and last stay.
        let bound = stored.read(&s, &run);
        assert_eq!((bound.last, bound.min, bound.max, bound.count), (2.0, 1.0, 9.0, 4));
        let written = s.take_dirty();
        assert_eq!(written.len(), 1, "the bound is written so search sees the new value");
        stored.write(&written);
        assert_eq!(stored.read(&s, &run).max, 9.0);
    }

    /// A failed write is put back and folds in ahead of what came since; another server's
    /// points in the stored summary stay counted.
    #[test]
    fn pending_points_fold_into_what_other_servers_stored_and_survive_a_failed_write() {
        let run = RunId::from_trusted("r".into());
        let mut s = Summaries::default();
        let mut stored = Stored::default();
        s.apply(&run, 1, &batch(&[(0, 3.0), (1, 2.0)]));
        let failed = s.take_dirty();
        s.apply(&run, 1, &batch(&[(2, 1.0)]));
        s.restore(&failed);
        // Another server wrote steps 10 and 11 meanwhile.
        stored.0.insert("loss".into(), MetricSummary::of_sorted(&[10, 11], &[100, 110], &[7.0, 8.0]).unwrap());
        let seen = stored.read(&s, &run);
        assert_eq!((seen.count, seen.last, seen.min, seen.max, seen.sum), (5, 8.0, 1.0, 8.0, 21.0));
        let written = s.take_dirty();
        assert_eq!(written.len(), 1);
        stored.write(&written);
        assert_eq!(stored.read(&s, &run).count, 5);
        assert!(s.take_dirty().is_empty());
    }

    #[test]
    fn a_recomputation_folds_in_points_appended_after_its_snapshot_and_yields_to_later_rewrites() {
        let run = RunId::from_trusted("r".into());
        let key = MetricKey::from_trusted("loss".into());
        let mut s = Summaries::default();
        s.apply(&run, 1, &batch(&[(0, 5.0), (1, 4.0), (2, 3.0)]));
        s.apply(&run, 1, &batch(&[(0, 1.0)]));
        let (_, generation) = s.stale_keys(&run)[0].clone();
        // The recomputation's snapshot holds steps 0..=2 with step 0 rewritten to 1.0; steps 3
        // and 4 arrive while it runs.
        s.apply(&run, 1, &batch(&[(3, 2.0), (4, 6.0)]));
        let snapshot = MetricSummary::of_sorted(&[0, 1, 2], &[0, 10, 20], &[1.0, 4.0, 3.0]);
        s.settle(&run, &key, generation, snapshot);
        assert!(s.stale_keys(&run).is_empty());
        let mut stored = Stored::default();
        let written = s.take_dirty();
        assert!(matches!(written[0].write, SummaryWrite::Replace { .. }), "a recomputation replaces the stored one");
        stored.write(&written);
        let exact = stored.read(&s, &run);
        assert_eq!((exact.last, exact.min, exact.max, exact.count, exact.last_step), (6.0, 1.0, 6.0, 5, 4));
        assert_eq!(exact.sum, 16.0);

        // A rewrite that comes while a recomputation runs makes its result stale on arrival.
        s.apply(&run, 1, &batch(&[(1, 0.5)]));
        let (_, generation) = s.stale_keys(&run)[0].clone();
        s.apply(&run, 1, &batch(&[(2, 0.25)]));
        s.settle(&run, &key, generation, MetricSummary::of_sorted(&[0], &[0], &[1.0]));
        assert_eq!(s.stale_keys(&run).len(), 1);
    }

    /// Two recomputations of one series overlap (the persister's and the maintenance task's):
    /// each read the series before points were appended. The first settles; the second, from
    /// its older snapshot, must not replace a summary that counts the points appended since.
    #[test]
    fn an_overlapping_recomputation_from_an_older_snapshot_never_drops_appended_points() {
        let run = RunId::from_trusted("r".into());
        let key = MetricKey::from_trusted("loss".into());
        let mut s = Summaries::default();
        s.apply(&run, 1, &batch(&[(0, 5.0), (1, 4.0), (2, 3.0)]));
        s.apply(&run, 1, &batch(&[(0, 1.0)]));
        // Both read the ticket, then the series as it is now: steps 0..=2, step 0 rewritten.
        let (_, first) = s.stale_keys(&run)[0].clone();
        let (_, second) = s.stale_keys(&run)[0].clone();
        let snapshot = || MetricSummary::of_sorted(&[0, 1, 2], &[0, 10, 20], &[1.0, 4.0, 3.0]);
        s.apply(&run, 1, &batch(&[(3, 2.0)]));
        s.settle(&run, &key, first, snapshot());
        // Appended after the first settled, before the second writes its result.
        s.apply(&run, 1, &batch(&[(4, 6.0), (5, 7.0)]));
        s.settle(&run, &key, second, snapshot());
        let mut stored = Stored::default();
        stored.write(&s.take_dirty());
        let exact = stored.read(&s, &run);
        assert_eq!((exact.count, exact.last_step, exact.last, exact.sum), (6, 5, 7.0, 23.0), "{exact:?}");
        assert!(s.stale_keys(&run).is_empty());

        // Stale again (another server flagged it): a recomputation that read its ticket before
        // the summary settled and was marked again must not settle either.
        s.apply(&run, 1, &batch(&[(1, 0.5)]));
        let (_, early) = s.stale_keys(&run)[0].clone();
        let (_, on_time) = s.stale_keys(&run)[0].clone();
        let rewritten = || MetricSummary::of_sorted(&[0, 1, 2, 3, 4, 5], &[0; 6], &[1.0, 0.5, 3.0, 2.0, 6.0, 7.0]);
        s.settle(&run, &key, on_time, rewritten());
        s.mark_stale(&run, &["loss".to_owned()]);
        s.apply(&run, 1, &batch(&[(6, 1.0)]));
        s.settle(&run, &key, early, rewritten());
        assert_eq!(s.stale_keys(&run).len(), 1, "the late result is dropped; the series stays to recompute");
        let (_, last) = s.stale_keys(&run)[0].clone();
        let fresh = MetricSummary::of_sorted(&[0, 1, 2, 3, 4, 5, 6], &[0; 7], &[1.0, 0.5, 3.0, 2.0, 6.0, 7.0, 1.0]);
        s.settle(&run, &key, last, fresh);
        stored.write(&s.take_dirty());
        let exact = stored.read(&s, &run);
        assert_eq!((exact.count, exact.last_step, exact.sum), (7, 6, 20.5), "{exact:?}");
    }
}
