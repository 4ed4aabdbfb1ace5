//! The read path: a series merged from its files, frozen generations and the active one, with a
//! cache of decoded series and page-range reads of long ones.

use super::*;

pub(super) struct CachedSeries {
    version: u64,
    series: Arc<Series>,
    last_used: u64,
}

#[derive(Default)]
pub(super) struct SeriesCache {
    entries: HashMap<(RunId, MetricKey), CachedSeries>,
    bytes: usize,
    clock: u64,
}

/// Rows of a series, over all its files, above which a step range missing from the cache is
/// read from the pages that hold it rather than by reading the whole series.
pub(super) const RANGE_READ_MIN_ROWS: u64 = 4 * parquet_io::DATA_PAGE_ROWS as u64;

/// Reads an object whole, counting the request and its latency.
pub(super) async fn get_object(
    objects: &Arc<dyn ObjectStore>,
    counters: &Counters,
    path: &ObjectPath,
) -> Result<bytes::Bytes> {
    let started = Instant::now();
    let outcome = match objects.get(path).await {
        Ok(got) => got.bytes().await,
        Err(e) => Err(e),
    };
    counters.object_store_call(started.elapsed(), &outcome);
    Ok(outcome?)
}

impl SeriesCache {
    /// Drops every cached series of a run.
    pub(super) fn forget_run(&mut self, run: &RunId) {
        let mut freed = 0;
        self.entries.retain(|(r, _), e| {
            let keep = r != run;
            if !keep {
                freed += e.series.heap_bytes();
            }
            keep
        });
        self.bytes -= freed;
    }
}

impl Inner {
    /// Reads a metric file of `run`. A file the object store lost while the catalog still
    /// names it is reported (counted, logged, listed by `missing_files`) and read as empty, so
    /// the rest of the series still reads; a file that compaction replaced meanwhile is
    /// `NotFound`, and the read starts again with the new file list.
    pub(super) async fn metric_file(&self, run: &RunId, path: &ObjectPath) -> Result<Option<bytes::Bytes>> {
        match get_object(&self.objects, &self.counters, path).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e @ Error::ObjectStore(object_store::Error::NotFound { .. }))
                if self.still_catalogued(run, path) && !self.catalog_names(path).await? =>
            {
                // Another server's compaction replaced it: the read starts again on the new list.
                self.refresh_files(run).await?;
                Err(e)
            }
            Err(Error::ObjectStore(object_store::Error::NotFound { .. })) if self.still_catalogued(run, path) => {
                let first_report = lock(&self.missing_files).entry(run.clone()).or_default().insert(path.to_string());
                if first_report {
                    bump(&self.counters.missing_files);
                    tracing::error!(run = %run, file = %path, "a metric file in the catalog is missing from the object store; its points are left out of reads");
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn catalog_names(&self, path: &ObjectPath) -> Result<bool> {
        let (meta, path) = (self.meta.clone(), path.to_string());
        blocking(move || Ok(meta.has_metric_file(&path)?)).await
    }

    /// Brings a run's file list up to the catalog in the database, where servers sharing it
    /// record the files they persist and compact. A list that changed here while the catalog
    /// was read is left alone: it is at least as new.
    pub(super) async fn refresh_files(&self, run: &RunId) -> Result<()> {
        let seen = read(&self.state).files.get(run).map(|f| f.version);
        let (meta, id) = (self.meta.clone(), run.clone());
        let rows = blocking(move || Ok(meta.run_files(id.as_str())?)).await?;
        let (added, removed) = {
            let state = read(&self.state);
            let held = state.files.get(run).map(|f| f.files.as_slice()).unwrap_or_default();
            if state.files.get(run).map(|f| f.version) != seen {
                return Ok(());
            }
            let added: Vec<_> = rows.iter().filter(|r| !held.iter().any(|f| f.path.as_ref() == r.path)).collect();
            let removed: Vec<ObjectPath> = held
                .iter()
                .filter(|f| !rows.iter().any(|r| r.path == f.path.as_ref()))
                .map(|f| f.path.clone())
                .collect();
            if added.is_empty() && removed.is_empty() {
                return Ok(());
            }
            let added = added.into_iter().map(file_meta).collect::<Result<Vec<_>>>()?;
            (added, removed)
        };
        let mut state = write(&self.state);
        if state.files.get(run).map(|f| f.version) == seen {
            state.swap_files(run, added, &removed);
        }
        Ok(())
    }

    pub(super) fn still_catalogued(&self, run: &RunId, path: &ObjectPath) -> bool {
        read(&self.state).files.get(run).is_some_and(|f| f.files.iter().any(|m| &m.path == path))
    }

    pub(super) async fn series(&self, run: &RunId, key: &MetricKey, range: StepRange) -> Result<Series> {
        // Compaction swaps a run's file list before deleting the old files: a read that still
        // held the old list finds a file gone, and retries with the new list.
        let mut attempts = 0;
        loop {
            match self.series_once(run, key, range).await {
                Err(Error::ObjectStore(object_store::Error::NotFound { .. })) if attempts < 3 => attempts += 1,
                other => return other,
            }
        }
    }

    pub(super) async fn series_once(&self, run: &RunId, key: &MetricKey, range: StepRange) -> Result<Series> {
        self.refresh_files(run).await?;
        // Buffer and file list are captured under one lock, so a generation being persisted
        // is seen either as buffered points or as its file, never as neither.
        let (mut layers, files) = {
            let state = read(&self.state);
            let mut layers = Vec::new();
            for g in &state.frozen {
                layers.extend(g.series(run, key));
            }
            layers.extend(state.active.series(run, key));
            (layers, state.files.get(run).cloned().unwrap_or_default())
        };
        // The files' points are already restricted to `range`; buffered layers are whole.
        let from_files = self.file_series(run, key, &files, range).await?;
        if layers.is_empty() {
            return Ok(from_files);
        }
        let mut all = Vec::with_capacity(layers.len() + 1);
        all.push(from_files);
        all.append(&mut layers);
        // Merging a long series takes a while: on the blocking pool, as decoding does.
        blocking(move || {
            let merged = Series::merge(all);
            Ok(if range == StepRange::default() { merged } else { merged.slice(range) })
        })
        .await
    }

    /// The points of a run's files for one key within `range`. A whole series is read into the
    /// cache, and a step range comes out of the cached series when it is there. On a miss, a
    /// range of a long series is read from the pages that hold it, without filling the cache;
    /// a short series is read whole and cached, as later ranges of it cost no more to slice.
    pub(super) async fn file_series(
        &self,
        run: &RunId,
        key: &MetricKey,
        files: &RunFiles,
        range: StepRange,
    ) -> Result<Series> {
        let with_key: Vec<Arc<FileMeta>> =
            files.files.iter().filter(|f| f.index.contains_key(key.as_str())).cloned().collect();
        if with_key.is_empty() {
            return Ok(Series::default());
        }
        let cache_key = (run.clone(), key.clone());
        let cached = {
            let mut cache = lock(&self.cache);
            cache.clock += 1;
            let clock = cache.clock;
            match cache.entries.get_mut(&cache_key) {
                Some(hit) if hit.version == files.version => {
                    hit.last_used = clock;
                    Some(hit.series.clone())
                }
                _ => None,
            }
        };
        if let Some(series) = cached {
            return blocking(move || Ok(series.slice(range))).await;
        }
        let rows: u64 = with_key.iter().map(|f| f.index[key.as_str()].rows).sum();
        if range != StepRange::default() && rows > RANGE_READ_MIN_ROWS {
            let in_range = with_key.iter().filter_map(|f| {
                let r = *f.index.get(key.as_str())?;
                range.overlaps(r.min_step, r.max_step).then(|| (f.path.clone(), r))
            });
            let loads = in_range.map(|(path, r)| async move {
                match self.metric_file(run, &path).await? {
                    Some(bytes) => blocking(move || parquet_io::read_rows_in_range(bytes, r, range)).await,
                    None => Ok(Series::default()),
                }
            });
            let layers = futures::future::try_join_all(loads).await?;
            return blocking(move || Ok(Series::merge(layers))).await;
        }
        let loads = with_key.iter().map(|f| {
            let f = f.clone();
            let key = key.to_string();
            async move {
                let r = f.index[&key];
                match self.metric_file(run, &f.path).await? {
                    Some(bytes) => blocking(move || parquet_io::read_rows(bytes, r.first_row, r.rows)).await,
                    None => Ok(Series::default()),
                }
            }
        });
        let layers = futures::future::try_join_all(loads).await?;
        let series = Arc::new(blocking(move || Ok(Series::merge(layers))).await?);
        let size = series.heap_bytes();
        if size <= self.config.cache_bytes / 4 {
            let mut cache = lock(&self.cache);
            let clock = cache.clock;
            if let Some(old) = cache
                .entries
                .insert(cache_key, CachedSeries { version: files.version, series: series.clone(), last_used: clock })
            {
                cache.bytes -= old.series.heap_bytes();
            }
            cache.bytes += size;
            while cache.bytes > self.config.cache_bytes {
                let Some(victim) = cache.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone()) else {
                    break;
                };
                if let Some(e) = cache.entries.remove(&victim) {
                    cache.bytes -= e.series.heap_bytes();
                }
            }
        }
        blocking(move || {
            Ok(if range == StepRange::default() { Arc::unwrap_or_clone(series) } else { series.slice(range) })
        })
        .await
    }
}
