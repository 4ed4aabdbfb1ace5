//! Compaction: a run's files merged into one, newest write winning, lost files dropped. Servers
//! sharing a database compact a run one at a time, under a lease in the database.

use super::*;

impl Inner {
    /// Compacts runs asked for, once none of their points wait in the buffer.
    pub(super) async fn compact_pending(&self) -> Result<()> {
        let _guard = self.persist_lock.lock().await;
        let wanted: Vec<(RunId, bool)> = lock(&self.compact_wanted).iter().map(|(r, f)| (r.clone(), *f)).collect();
        for (run, full) in wanted {
            if full && read(&self.state).buffered(&run) {
                // Still receiving points (resumed before it was compacted): keep its file count
                // down meanwhile, and merge everything once the buffer has drained.
                self.compact(&run, false).await?;
                continue;
            }
            if !self.compact(&run, full).await? {
                // Another server compacts it now, or compacted some of its files first: again
                // on the next round, on the files as they are then.
                continue;
            }
            if full {
                // A finished, compacted run's summaries are in SQLite; they load again on use.
                lock(&self.summaries).evict_clean(&run);
            }
            let mut pending = lock(&self.compact_wanted);
            if pending.get(&run) == Some(&full) {
                pending.remove(&run);
            }
        }
        Ok(())
    }

    /// Compacts a run under its lease. Answers false, having changed nothing, when another
    /// server holds the lease or replaced some of the files first.
    pub(super) async fn compact(&self, run: &RunId, full: bool) -> Result<bool> {
        /// Long enough for any one compaction; a holder that dies frees the run when it passes.
        const LEASE_MS: i64 = 10 * 60 * 1000;
        let (meta, id, holder) = (self.meta.clone(), run.to_string(), self.folder_id.clone());
        let until = trainlog_meta::now_ms() + LEASE_MS;
        if !blocking(move || Ok(meta.claim_compaction(&id, &holder, until)?)).await? {
            return Ok(false);
        }
        // Under the lease, the run's file list is the catalog's: no other server changes it but
        // by adding files.
        let outcome = match self.refresh_files(run).await {
            Ok(()) => self.compact_leased(run, full).await,
            Err(e) => Err(e),
        };
        let (meta, id, holder) = (self.meta.clone(), run.to_string(), self.folder_id.clone());
        let released = blocking(move || Ok(meta.release_compaction(&id, &holder)?)).await;
        // A lease not given back fails the round, which is counted and retried: this server
        // takes its own lease again, and other servers meanwhile wait for it to run out.
        let done = outcome?;
        released?;
        Ok(done)
    }

    /// Merges files of a run into one, newest write winning for each (key, step): all of them
    /// (`full`), or the newest ones while each older file is at most twice the rows taken so far,
    /// so a long run's big files are not rewritten on every round.
    async fn compact_leased(&self, run: &RunId, full: bool) -> Result<bool> {
        let mut files = read(&self.state).files.get(run).cloned().unwrap_or_default();
        if !full {
            let mut taken_rows = 0u64;
            let mut start = files.files.len();
            while start > 0 && (files.files.len() - start < 2 || files.files[start - 1].rows <= 2 * taken_rows) {
                start -= 1;
                taken_rows += files.files[start].rows;
            }
            files.files.drain(..start);
        }
        if files.files.len() <= 1 {
            return Ok(true);
        }
        // Compressed file bytes are held; decoded series only one key at a time.
        let mut blobs = Vec::with_capacity(files.files.len());
        for f in &files.files {
            // A lost file is left out: its catalog entry goes with the files this one replaces.
            if let Some(bytes) = self.metric_file(run, &f.path).await? {
                blobs.push((f.clone(), bytes));
            }
        }
        let keys: BTreeSet<String> = blobs.iter().flat_map(|(f, _)| f.index.keys().cloned()).collect();
        let ord = files.files.iter().map(|f| f.ord).max().unwrap_or(0);
        let project_id = files.files[0].project_id;
        let meta = self.meta.clone();
        let folder = self.folder_id.clone();
        let number = blocking(move || Ok(meta.reserve_uploads(&folder, 1)?)).await?;
        let path = objects::metric_file_path(project_id, run.as_str(), number);
        let run_owned = run.clone();
        let file = blocking(move || {
            let mut writer = parquet_io::RunFileWriter::new(run_owned.as_str(), COMPACT_ZSTD_LEVEL)?;
            for key in keys {
                let layers = blobs
                    .iter()
                    .filter_map(|(f, bytes)| {
                        f.index.get(&key).map(|r| parquet_io::read_rows(bytes.clone(), r.first_row, r.rows))
                    })
                    .collect::<Result<Vec<Series>>>()?;
                writer.write_key(&key, &Series::merge(layers))?;
            }
            writer.finish()
        })
        .await?;
        let bytes = file.bytes.len() as u64;
        self.put_object(&path, file.bytes).await?;
        let removed: Vec<ObjectPath> = files.files.iter().map(|f| f.path.clone()).collect();
        let removed_text: Vec<String> = removed.iter().map(|p| p.to_string()).collect();
        self.make_durable(vec![path.clone()]).await?;
        let row = catalog_row(run, &path, ord, file.rows, bytes, key_index_to_json(&file.index));
        let meta = self.meta.clone();
        match blocking(move || Ok(meta.commit_files(&[row], &removed_text, None, None)?)).await {
            Ok(()) => {}
            Err(Error::Meta(trainlog_meta::Error::Conflict { .. })) => {
                // Files taken here were replaced meanwhile: this merge is of no use.
                if let Err(e) = self.objects.delete(&path).await {
                    bump(&self.counters.object_store_failures);
                    tracing::warn!(run = %run, "could not delete an unused compacted file {path}: {e}");
                }
                self.refresh_files(run).await?;
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        bump(&self.counters.compactions);
        let new_file = Arc::new(FileMeta { path, project_id, ord, rows: file.rows, bytes, index: file.index });
        write(&self.state).swap_files(run, vec![new_file], &removed);
        if let Some(missing) = lock(&self.missing_files).get_mut(run) {
            missing.retain(|m| !removed.iter().any(|p| p.as_ref() == m));
        }
        for p in removed {
            if let Err(e) = self.objects.delete(&p).await {
                // The catalog no longer lists it: the next start's orphan sweep deletes it.
                bump(&self.counters.object_store_failures);
                tracing::warn!(run = %run, "could not delete compacted file {p}: {e}");
            }
        }
        Ok(true)
    }
}
