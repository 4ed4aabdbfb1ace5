//! Persisting: frozen generations written as Parquet files, made durable and recorded in the
//! catalog; runs tables; the start-up sweep of files a crash left unrecorded.

use super::*;

pub(super) fn catalog_row(
    run: &RunId,
    path: &ObjectPath,
    ord: i64,
    rows: u64,
    bytes: u64,
    index_json: String,
) -> MetricFileRow {
    MetricFileRow {
        path: path.to_string(),
        run_id: run.to_string(),
        ord,
        rows: rows as i64,
        bytes: bytes as i64,
        key_index: index_json,
    }
}

/// A catalog row as the store holds it.
pub(super) fn file_meta(row: &MetricFileRow) -> Result<Arc<FileMeta>> {
    Ok(Arc::new(FileMeta {
        path: ObjectPath::from(row.path.as_str()),
        project_id: project_of_path(&row.path),
        ord: row.ord,
        rows: row.rows as u64,
        bytes: row.bytes as u64,
        index: key_index_from_json(&row.key_index)?,
    }))
}

/// Whether `path` has the exact layout of a metric file, `projects/{id}/metrics/{run}/{20 digits}.parquet`.
pub(super) fn is_metric_file_path(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    matches!(parts.as_slice(), ["projects", project, "metrics", run, file]
        if project.bytes().all(|b| b.is_ascii_digit())
            && !run.is_empty()
            && file.strip_suffix(".parquet").is_some_and(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit())))
}

/// The number in a metric file's name.
fn file_number(path: &str) -> Option<i64> {
    path.rsplit('/').next()?.strip_suffix(".parquet")?.parse().ok()
}

fn project_of_path(path: &str) -> i64 {
    path.split('/').nth(1).and_then(|p| p.parse().ok()).unwrap_or(0)
}

impl Inner {
    /// Writes an object, counting the request and its latency.
    pub(super) async fn put_object(&self, path: &ObjectPath, bytes: bytes::Bytes) -> Result<()> {
        let started = Instant::now();
        let outcome = self.objects.put(path, PutPayload::from_bytes(bytes)).await;
        self.counters.object_store_call(started.elapsed(), &outcome);
        outcome?;
        Ok(())
    }

    /// Makes written metric files durable before the catalog names them.
    pub(super) async fn make_durable(&self, paths: Vec<ObjectPath>) -> Result<()> {
        match self.local_root.clone() {
            Some(root) => blocking(move || objects::sync_local(&root, &paths)).await,
            None => Ok(()),
        }
    }

    pub(super) async fn refresh_runs_tables(&self, with_summaries: bool) -> Result<()> {
        let mut projects: HashSet<i64> = std::mem::take(&mut *lock(&self.projects_changed));
        if with_summaries {
            projects.extend(std::mem::take(&mut *lock(&self.projects_summary_changed)));
        }
        for project_id in projects {
            let meta = self.meta.clone();
            let encoded = blocking(move || runs_table::encode(&meta.export_project(project_id)?)).await;
            let put = match encoded {
                Ok(bytes) => self
                    .objects
                    .put(&objects::runs_table_path(project_id), PutPayload::from_bytes(bytes))
                    .await
                    .map(|_| ())
                    .map_err(Error::from),
                Err(e) => Err(e),
            };
            if let Err(e) = put {
                lock(&self.projects_changed).insert(project_id);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Persists the oldest frozen generations, one after the other.
    pub(super) async fn persist_frozen(&self) -> Result<()> {
        let _guard = self.persist_lock.lock().await;
        loop {
            let Some(generation) = read(&self.state).frozen.front().cloned() else {
                return Ok(());
            };
            self.persist(&generation).await?;
        }
    }

    pub(super) async fn persist(&self, generation: &Arc<Generation>) -> Result<()> {
        // Summaries first: once the log segment is gone, they must already hold its points,
        // including those that made a summary stale (a rewritten step). A recomputation waits
        // while another server holds points of the run that no file has yet, and this server
        // settles it later.
        for run in generation.runs.keys() {
            if !lock(&self.summaries).stale_keys(run).is_empty() && !self.others_hold_unpersisted(run).await? {
                self.refresh_stale(run).await?;
            }
        }
        self.sync_summaries().await?;
        let meta = self.meta.clone();
        let count = generation.runs.len() as i64;
        let folder = self.folder_id.clone();
        let first = blocking(move || Ok(meta.reserve_uploads(&folder, count)?)).await?;
        let mut uploaded: Vec<ObjectPath> = Vec::new();
        let outcome = self.persist_files(generation, first, &mut uploaded).await;
        if outcome.is_err() {
            // Nothing points at these yet; a retry writes new ones.
            for path in uploaded {
                let _ = self.objects.delete(&path).await;
            }
        }
        outcome
    }

    pub(super) async fn persist_files(
        &self,
        generation: &Arc<Generation>,
        first: i64,
        uploaded: &mut Vec<ObjectPath>,
    ) -> Result<()> {
        let mut rows = Vec::new();
        let mut metas = Vec::new();
        let mut runs: Vec<&RunId> = {
            let purged = read(&self.purged);
            generation.runs.keys().filter(|run| !purged.contains(*run)).collect()
        };
        runs.sort();
        for (i, run) in runs.into_iter().enumerate() {
            let number = first + i as i64;
            let buf = &generation.runs[run];
            let path = objects::metric_file_path(buf.project_id, run.as_str(), number);
            let gen = generation.clone();
            let run_owned = run.clone();
            let file = blocking(move || {
                let buf = &gen.runs[&run_owned];
                // Series logged in step order (the usual case) are encoded without a copy.
                let mut keys: Vec<(&MetricKey, std::borrow::Cow<'_, Series>)> = buf
                    .series
                    .iter()
                    .map(|(k, s)| {
                        if s.is_strictly_sorted() {
                            (k, std::borrow::Cow::Borrowed(s))
                        } else {
                            let mut s = s.clone();
                            s.normalize();
                            (k, std::borrow::Cow::Owned(s))
                        }
                    })
                    .collect();
                keys.sort_by(|a, b| a.0.cmp(b.0));
                let refs: Vec<(&str, &Series)> = keys.iter().map(|(k, s)| (k.as_str(), s.as_ref())).collect();
                parquet_io::encode_run(run_owned.as_str(), &refs, FLUSH_ZSTD_LEVEL)
            })
            .await?;
            let bytes = file.bytes.len() as u64;
            self.put_object(&path, file.bytes).await?;
            uploaded.push(path.clone());
            rows.push(catalog_row(run, &path, number, file.rows, bytes, key_index_to_json(&file.index)));
            metas.push((
                run.clone(),
                Arc::new(FileMeta {
                    path,
                    project_id: buf.project_id,
                    ord: number,
                    rows: file.rows,
                    bytes,
                    index: file.index,
                }),
            ));
        }
        self.make_durable(uploaded.clone()).await?;
        // Writing summaries waits here: a run written while no longer buffered records its hold
        // again after this commit.
        let summaries_written = self.summary_sync_lock.write().await;
        let persisted: Vec<String> = {
            let state = read(&self.state);
            let buffered_later = |run: &RunId| {
                state.active.has_run(run) || state.frozen.iter().any(|g| !Arc::ptr_eq(g, generation) && g.has_run(run))
            };
            generation.runs.keys().filter(|run| !buffered_later(run)).map(|run| run.to_string()).collect()
        };
        let (meta, counter, folder) = (self.meta.clone(), self.wal_counter.clone(), self.folder_id.clone());
        let segment = generation.wal_segment;
        blocking(move || Ok(meta.commit_files(&rows, &[], Some((&counter, segment)), Some((&folder, &persisted)))?))
            .await?;
        drop(summaries_written);
        // From here the catalog points at the files: a later failure must not delete them.
        uploaded.clear();
        self.counters.persisted_files.fetch_add(metas.len() as u64, Ordering::Relaxed);
        self.counters.persisted_points.fetch_add(generation.points as u64, Ordering::Relaxed);
        let mut over_limit = Vec::new();
        let points_low;
        {
            let mut state = write(&self.state);
            for (run, file) in metas {
                state.swap_files(&run, vec![file], &[]);
                if state.files.get(&run).is_some_and(|f| f.files.len() > self.config.max_files_per_run) {
                    over_limit.push(run);
                }
            }
            if state.frozen.front().is_some_and(|g| Arc::ptr_eq(g, generation)) {
                state.frozen.pop_front();
                self.buffered_points.fetch_sub(generation.points, Ordering::Relaxed);
            }
            points_low = match state.frozen.is_empty() && state.active.points == 0 {
                true => state.active.wal_segment,
                false => segment + 1,
            };
        }
        {
            let mut wanted = lock(&self.compact_wanted);
            for run in over_limit {
                wanted.entry(run).or_insert(false);
            }
        }
        self.retention.points_below(points_low)
    }

    pub(super) async fn sweep_orphans(&self) -> Result<usize> {
        use futures::TryStreamExt;
        // Holding the persist lock: no file of this server is between its upload and its catalog
        // entry, so its own last reserved numbers name leftovers. Other servers sharing the
        // catalog may have uploads in flight: of theirs, only files older than any upload takes
        // are orphans.
        let _guard = self.persist_lock.lock().await;
        let min_age = self.config.orphan_min_age;
        let listed: Vec<object_store::ObjectMeta> =
            self.objects.list(Some(&ObjectPath::from("projects"))).try_collect().await?;
        let (meta, folder) = (self.meta.clone(), self.folder_id.clone());
        let (known, own) = blocking(move || {
            let known: HashSet<String> = meta.metric_files()?.into_iter().map(|f| f.path).collect();
            Ok((known, meta.uploads_reserved(&folder)?))
        })
        .await?;
        let now_ms = trainlog_meta::now_ms();
        let mut removed = 0;
        for object in listed {
            let age_ms = now_ms.saturating_sub(object.last_modified.timestamp_millis());
            let old_enough = u128::try_from(age_ms).is_ok_and(|age| age >= min_age.as_millis());
            let path = object.location;
            let ours = own
                .is_some_and(|(first, last)| file_number(path.as_ref()).is_some_and(|n| (first..=last).contains(&n)));
            if (old_enough || ours) && is_metric_file_path(path.as_ref()) && !known.contains(path.as_ref()) {
                self.objects.delete(&path).await?;
                removed += 1;
            }
        }
        if let Some(root) = self.local_root.clone() {
            removed += blocking(move || objects::remove_staged_uploads(&root.join("projects"), min_age)).await?;
        }
        Ok(removed)
    }
}
