//! Deleting a run for good. The metadata store drops the run's rows and records the purge in one
//! transaction; from then on the run's points are dropped wherever they still are (the buffer, a
//! frozen generation on its way to a file, a log segment replayed after a crash), and its metric
//! files and artifacts are deleted from the object store. A deletion that fails, or that a crash
//! interrupts, is retried in the background until the purge is recorded as finished.

use super::*;
use futures::TryStreamExt;
use trainlog_meta::PurgedRun;

/// What deleting a run for good did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeOutcome {
    pub project_id: i64,
    /// Metric files and artifacts deleted from the object store.
    pub objects_deleted: usize,
    /// Some objects could not be deleted yet; the background tries again (counted in
    /// `purge_failures`).
    pub objects_pending: bool,
}

impl MetricsStore {
    /// Deletes an archived run for good: its rows (see `MetaStore::purge_run`, whose refusals
    /// this answers), its buffered points, its metric files and its artifacts.
    pub async fn purge_run(&self, run: &RunId) -> Result<PurgeOutcome> {
        let inner = &self.inner;
        let purged = {
            // No file of the run is between its upload and its catalog entry, no compaction
            // reads it and no summary of it is being written while its rows go.
            let _persisting = inner.persist_lock.lock().await;
            let _summaries = inner.summary_sync_lock.write().await;
            let meta = inner.meta.clone();
            let id = run.clone();
            let purged = blocking(move || Ok(meta.purge_run(&id)?)).await?;
            inner.forget_purged(run);
            self.console.purge(run).await;
            purged
        };
        self.project_changed(purged.project_id);
        let (objects_deleted, objects_pending) = match inner.delete_purged_objects(&purged).await {
            Ok(n) => (n, false),
            Err(e) => {
                bump(&inner.counters.purge_failures);
                tracing::error!(run = %run, "deleting a purged run's objects failed, will retry: {e}");
                (0, true)
            }
        };
        Ok(PurgeOutcome { project_id: purged.project_id, objects_deleted, objects_pending })
    }

    /// Deletes the objects of every purge not yet finished (after a crash or a failed deletion).
    pub async fn finish_purges(&self) -> Result<usize> {
        self.inner.finish_purges().await
    }
}

impl Inner {
    pub(super) fn is_purged(&self, run: &RunId) -> bool {
        read(&self.purged).contains(run)
    }

    /// Drops a purged run from memory: its buffered points in the active generation, its files,
    /// summaries, cached series and pending compaction. Points in frozen generations are skipped
    /// when those are persisted.
    fn forget_purged(&self, run: &RunId) {
        let mut purged = write(&self.purged);
        purged.insert(run.clone());
        {
            let mut state = write(&self.state);
            if let Some(buffer) = state.active.runs.remove(run) {
                let points: usize = buffer.series.values().map(Series::len).sum();
                state.active.points -= points;
                self.buffered_points.fetch_sub(points, Ordering::Relaxed);
            }
            state.files.remove(run);
        }
        drop(purged);
        lock(&self.summaries).forget(run);
        lock(&self.cache).forget_run(run);
        lock(&self.compact_wanted).remove(run);
        lock(&self.missing_files).remove(run);
    }

    /// Deletes a purged run's metric files and artifacts, then records the purge as finished.
    async fn delete_purged_objects(&self, purged: &PurgedRun) -> Result<usize> {
        let mut deleted = 0;
        for prefix in objects::run_prefixes(purged.project_id, purged.id.as_str()) {
            let listed: Vec<object_store::ObjectMeta> = self.objects.list(Some(&prefix)).try_collect().await?;
            for object in listed {
                match self.objects.delete(&object.location).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        deleted += self.media().delete_unreferenced(purged.project_id).await?;
        let meta = self.meta.clone();
        let id = purged.id.clone();
        blocking(move || Ok(meta.purge_finished(&id)?)).await?;
        bump(&self.counters.purged_runs);
        Ok(deleted)
    }

    /// `MetricsStore::finish_purges`; a failure is counted in `purge_failures`.
    pub(super) async fn finish_purges(&self) -> Result<usize> {
        let outcome = self.finish_pending_purges().await;
        if outcome.is_err() {
            bump(&self.counters.purge_failures);
        }
        outcome
    }

    async fn finish_pending_purges(&self) -> Result<usize> {
        let meta = self.meta.clone();
        let pending = blocking(move || Ok(meta.purges_pending()?)).await?;
        for purged in &pending {
            self.delete_purged_objects(purged).await?;
        }
        Ok(pending.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainlog_schema::{ArtifactPath, BatchPoint, ProjectName};

    fn loss(steps: std::ops::Range<i64>) -> PointBatch {
        let points = steps.map(|step| BatchPoint { key: 0, step, timestamp_ms: step, value: step as f64 }).collect();
        PointBatch { keys: vec![MetricKey::parse("key", "loss").unwrap()], points }
    }

    async fn objects_under(store: &MetricsStore, project_id: i64, run: &RunId) -> usize {
        let mut n = 0;
        for prefix in objects::run_prefixes(project_id, run.as_str()) {
            let listed: Vec<object_store::ObjectMeta> =
                store.inner.objects.list(Some(&prefix)).try_collect().await.unwrap();
            n += listed.len();
        }
        n
    }

    /// A run's console lines go with it: the written file, and lines still buffered, which are
    /// never written, also after a restart replays the console's log.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_purged_runs_console_lines_are_deleted_and_the_buffered_ones_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Arc::new(MetaStore::open(&dir.path().join("meta.db")).unwrap());
        let config = StoreConfig::new(dir.path().to_owned(), None);
        let store = MetricsStore::open(config.clone(), meta.clone()).await.unwrap();
        let new =
            trainlog_meta::NewRun { project: Some(ProjectName::parse("project", "p").unwrap()), ..Default::default() };
        let (run, _) = meta.create_run(&new).unwrap();
        let lines = |from: u64| {
            let mut b = crate::console::ConsoleBatch::new("p1".into(), "n".into(), 0, 1);
            for seq in from..from + 10 {
                b.push(seq, seq as i64, None, trainlog_schema::console::ConsoleStream::Stdout, "a line");
            }
            b
        };
        store.append_lines(&run.id, run.project_id, lines(0)).await.unwrap();
        store.flush().await.unwrap();
        store.append_lines(&run.id, run.project_id, lines(10)).await.unwrap();
        assert_eq!(objects_under(&store, run.project_id, &run.id).await, 1, "one console file written");

        meta.set_run_deleted(&run.id, true).unwrap();
        store.purge_run(&run.id).await.unwrap();
        store.flush().await.unwrap();
        assert_eq!(objects_under(&store, run.project_id, &run.id).await, 0);
        assert!(store.console().lines(&run.id, run.project_id).await.unwrap().is_empty());
        assert!(store.append_lines(&run.id, run.project_id, lines(20)).await.is_err());

        // A crash before the buffered lines' segment went: the log replays them, and they stay unwritten.
        drop(store);
        let store = MetricsStore::open(config, meta).await.unwrap();
        store.flush().await.unwrap();
        assert_eq!(objects_under(&store, run.project_id, &run.id).await, 0);
        store.shutdown().await.unwrap();
    }

    /// A crash after the purge's transaction and before its deletes leaves the run's objects
    /// behind: the next start deletes them and records the purge as finished.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn objects_a_crash_left_behind_a_purge_are_deleted_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Arc::new(MetaStore::open(&dir.path().join("meta.db")).unwrap());
        let config = StoreConfig::new(dir.path().to_owned(), None);
        let store = MetricsStore::open(config.clone(), meta.clone()).await.unwrap();
        let new =
            trainlog_meta::NewRun { project: Some(ProjectName::parse("project", "p").unwrap()), ..Default::default() };
        let (run, _) = meta.create_run(&new).unwrap();
        let (other, _) = meta.create_run(&new).unwrap();
        for r in [&run, &other] {
            store.append(&r.id, r.project_id, loss(0..100)).await.unwrap();
            store.flush().await.unwrap();
            let location =
                crate::ArtifactStore::location(r.project_id, &r.id, &ArtifactPath::parse("path", "a.txt").unwrap())
                    .unwrap();
            let body = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"hi"))]);
            store.artifacts().upload(&location, body).await.unwrap();
        }
        store.shutdown().await.unwrap();
        assert_eq!(objects_under(&store, run.project_id, &run.id).await, 2);

        meta.set_run_deleted(&run.id, true).unwrap();
        meta.purge_run(&run.id).unwrap();
        assert_eq!(meta.purges_pending().unwrap().len(), 1);

        let store = MetricsStore::open(config, meta.clone()).await.unwrap();
        // The start-up task finishes it by itself.
        for _ in 0..500 {
            if meta.purges_pending().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(objects_under(&store, run.project_id, &run.id).await, 0);
        assert_eq!(objects_under(&store, other.project_id, &other.id).await, 2, "the other run keeps its objects");
        assert_eq!(meta.purges_pending().unwrap(), vec![]);
        assert_eq!(store.finish_purges().await.unwrap(), 0);
        let refused = store.append(&run.id, run.project_id, loss(100..101)).await.unwrap_err();
        assert!(matches!(refused, Error::Meta(trainlog_meta::Error::NotFound { .. })), "{refused}");
        store.shutdown().await.unwrap();
    }
}
