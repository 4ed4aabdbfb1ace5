//! Collecting media blobs that nothing names any more: an item or table part replaced at its
//! place, a table part refused after its bytes were stored, an upload whose items never came,
//! an object whose upload died before its row. Blobs are shared by content across the runs of a
//! project, so a blob goes only when no item of any run names it, and only once its bytes were
//! last sent `min_age` ago or earlier: an upload whose items are on their way keeps its blob.
//!
//! A round has three steps. Blobs whose rows no run names are moved to `media_unreferenced`;
//! objects under `media/sha256/` older than `min_age` without a row are put there too; then the
//! object of every blob waiting there is deleted and the blob forgotten. While a blob waits, no
//! upload records it again (see `trainlog_meta`'s media module), so the object deleted is never
//! one an upload since counts on.

use super::{blob_location, MediaStore};
use crate::{blocking, Error, Result};
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;
use std::time::Duration;
use trainlog_schema::Sha256;

/// Blobs read from the database, or checked against it, at a time.
const PAGE: usize = 500;

/// What a round of collection did.
#[derive(Debug, Default)]
pub struct Collected {
    /// Objects of unreferenced blobs deleted (or found already gone).
    pub deleted: u64,
    /// Blobs (or listings) that failed; they are tried again next round.
    pub failed: u64,
    /// The first failure, to report.
    pub error: Option<Error>,
}

impl Collected {
    fn failed(&mut self, e: Error) {
        self.failed += 1;
        self.error.get_or_insert(e);
    }
}

/// The project and blob an object of the store stands for, when its path is a media blob's:
/// `projects/{id}/media/sha256/{hh}/{sha256}`.
fn blob_of_path(path: &ObjectPath) -> Option<(i64, Sha256)> {
    let parts: Vec<&str> = path.as_ref().split('/').collect();
    match parts.as_slice() {
        ["projects", project, "media", "sha256", hh, sha] if sha.get(..2) == Some(*hh) => {
            Some((project.parse().ok()?, Sha256::parse("sha256", sha).ok()?))
        }
        _ => None,
    }
}

impl MediaStore {
    /// Deletes the blobs no item names whose bytes were last sent `min_age` ago or earlier
    /// (all such with zero), and the objects older than that without a row. Every blob is
    /// tried; what failed is counted and tried again next round.
    pub async fn collect_unreferenced(&self, min_age: Duration) -> Collected {
        let mut collected = Collected::default();
        let before_ms = trainlog_meta::now_ms().saturating_sub(min_age.as_millis() as i64);
        if let Err(e) = self.unreference_orphans(before_ms, &mut collected).await {
            collected.failed(e);
        }
        if let Err(e) = self.unreference_unrecorded(min_age, &mut collected).await {
            collected.failed(e);
        }
        if let Err(e) = self.delete_waiting(&mut collected).await {
            collected.failed(e);
        }
        collected
    }

    /// Moves the rows of blobs no run names, last sent at `before_ms` or earlier, to wait for
    /// their objects' deletion.
    async fn unreference_orphans(&self, before_ms: i64, collected: &mut Collected) -> Result<()> {
        let mut after = None;
        loop {
            let (meta, from) = (self.meta.clone(), after.clone());
            let page = blocking(move || Ok(meta.media_orphans(before_ms, from.as_ref(), PAGE)?)).await?;
            let Some(last) = page.last().cloned() else { return Ok(()) };
            for (project_id, sha) in page {
                let meta = self.meta.clone();
                if let Err(e) = blocking(move || Ok(meta.unreference_orphan(project_id, &sha, before_ms)?)).await {
                    collected.failed(e);
                }
            }
            after = Some(last);
        }
    }

    /// Puts the blob objects older than `min_age` that have no row to wait for their deletion:
    /// their upload died between writing the bytes and recording them.
    async fn unreference_unrecorded(&self, min_age: Duration, collected: &mut Collected) -> Result<()> {
        let listed = self.objects.list_with_delimiter(Some(&ObjectPath::from("projects"))).await?;
        for project in listed.common_prefixes {
            let prefix = ObjectPath::from(format!("{project}/media/sha256"));
            let now_ms = trainlog_meta::now_ms();
            let mut stream = self.objects.list(Some(&prefix));
            let mut batch: Vec<(i64, Sha256)> = Vec::new();
            loop {
                let next = match stream.try_next().await {
                    Ok(next) => next,
                    Err(e) => {
                        collected.failed(e.into());
                        break;
                    }
                };
                if let Some(object) = &next {
                    let age_ms = now_ms.saturating_sub(object.last_modified.timestamp_millis());
                    let old_enough = u128::try_from(age_ms).is_ok_and(|age| age >= min_age.as_millis());
                    if let Some(blob) = blob_of_path(&object.location).filter(|_| old_enough) {
                        batch.push(blob);
                    }
                }
                if batch.len() >= PAGE || (next.is_none() && !batch.is_empty()) {
                    self.unreference_batch(std::mem::take(&mut batch), collected).await;
                }
                if next.is_none() {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Of `batch` (objects of one project), those without a row start to be deleted.
    async fn unreference_batch(&self, batch: Vec<(i64, Sha256)>, collected: &mut Collected) {
        let Some(project_id) = batch.first().map(|b| b.0) else { return };
        let shas: Vec<Sha256> = batch.into_iter().map(|b| b.1).collect();
        let meta = self.meta.clone();
        let outcome = blocking(move || {
            let recorded = meta.media_blobs_recorded(project_id, &shas)?;
            let mut failures = Vec::new();
            for sha in shas.iter().filter(|sha| !recorded.contains(*sha)) {
                if let Err(e) = meta.unreference_unrecorded(project_id, sha) {
                    failures.push(Error::from(e));
                }
            }
            Ok(failures)
        })
        .await;
        match outcome {
            Ok(failures) => failures.into_iter().for_each(|e| collected.failed(e)),
            Err(e) => collected.failed(e),
        }
    }

    /// Deletes the object of every blob waiting in `media_unreferenced` (a purge's, or this
    /// round's), then forgets it.
    async fn delete_waiting(&self, collected: &mut Collected) -> Result<()> {
        let mut after = None;
        loop {
            let (meta, from) = (self.meta.clone(), after.clone());
            let page = blocking(move || Ok(meta.media_unreferenced_all(from.as_ref(), PAGE)?)).await?;
            let Some(last) = page.last().cloned() else { return Ok(()) };
            for (project_id, sha) in page {
                match self.delete_one(project_id, &sha).await {
                    Ok(true) => collected.deleted += 1,
                    Ok(false) => {}
                    Err(e) => collected.failed(e),
                }
            }
            after = Some(last);
        }
    }

    /// Deletes one waiting blob's object unless it is recorded again (stored again before
    /// recording waited on deletions), then forgets it. Answers whether it deleted.
    pub(super) async fn delete_one(&self, project_id: i64, sha: &Sha256) -> Result<bool> {
        let (meta, key) = (self.meta.clone(), sha.clone());
        let recorded = blocking(move || Ok(meta.media_blob(project_id, &key)?)).await?.is_some();
        if !recorded {
            match self.objects.delete(&blob_location(project_id, sha)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let (meta, key) = (self.meta.clone(), sha.clone());
        blocking(move || Ok(meta.forget_unreferenced_blob(project_id, &key)?)).await?;
        Ok(!recorded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use trainlog_meta::{MetaStore, MetaUrl, NewRun};
    use trainlog_schema::{MediaItem, MediaKind, MetricKey, ProjectName, RunId};

    /// A fresh metadata store: on PostgreSQL with `TRAINLOG_TEST_META=postgres`, else SQLite.
    fn test_meta(dir: &std::path::Path) -> MetaStore {
        if std::env::var("TRAINLOG_TEST_META").as_deref() == Ok("postgres") {
            let admin = std::env::var("TRAINLOG_TEST_PG").expect("TRAINLOG_TEST_PG: a PostgreSQL server for tests");
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
            let name = format!("store_{}_{nanos}", std::process::id());
            let url = trainlog_meta::create_postgres_database(&admin, &name).unwrap();
            return MetaStore::connect(&MetaUrl::parse(&url).unwrap()).unwrap();
        }
        MetaStore::open(&dir.join("meta.db")).unwrap()
    }

    /// Runs metadata calls on the blocking pool, as the server does (PostgreSQL's client blocks).
    async fn on_pool<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        tokio::task::spawn_blocking(f).await.unwrap()
    }

    fn image(key: &str, step: i64, blob: &Sha256) -> MediaItem {
        MediaItem {
            key: MetricKey::parse("key", key).unwrap(),
            step,
            index: 0,
            kind: MediaKind::Image,
            blob: blob.clone(),
            thumbnail: None,
            mime: "image/png".into(),
            width: None,
            height: None,
            caption: None,
            boxes: vec![],
            masks: vec![],
            class_labels: BTreeMap::new(),
            timestamp_ms: 0,
        }
    }

    /// A replaced item's blob, an upload no item came for and an object whose upload died
    /// before its row go once old enough; a blob another run names, and the new one, stay.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blobs_no_item_names_are_deleted_once_old_enough_and_named_ones_stay_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        let meta = Arc::new(on_pool(move || test_meta(&path)).await);
        let opened = crate::objects::open(None, &dir.path().join("store")).unwrap();
        let media = MediaStore::new(opened.store, opened.local_root, meta.clone());
        let new = |id: &str| NewRun {
            project: Some(ProjectName::parse("project", "p").unwrap()),
            id: Some(RunId::parse("id", id).unwrap()),
            ..NewRun::default()
        };
        let (m, runs) = (meta.clone(), [new("r1"), new("r2")]);
        let [run, other] = on_pool(move || runs.map(|r| m.create_run(&r).unwrap().0)).await;
        let p = run.project_id;
        let mut blobs = BTreeMap::new();
        for name in ["shared", "replaced", "replacing", "never named"] {
            let bytes = Bytes::from(name.as_bytes().to_vec());
            let sha = super::super::digest(&bytes);
            assert!(media.put_blob(p, &sha, "text/plain", bytes).await.unwrap().1);
            blobs.insert(name, sha);
        }
        let (m, b, ids) = (meta.clone(), blobs.clone(), (run.id.clone(), other.id.clone()));
        on_pool(move || {
            m.put_media_items(&ids.0, &[image("a", 0, &b["shared"]), image("a", 1, &b["replaced"])]).unwrap();
            m.put_media_items(&ids.1, &[image("a", 0, &b["shared"])]).unwrap();
            m.put_media_items(&ids.0, &[image("a", 1, &b["replacing"])]).unwrap();
        })
        .await;
        let died = Bytes::from_static(b"an upload that died before its row");
        let died_sha = super::super::digest(&died);
        media.put_durable(&blob_location(p, &died_sha), died).await.unwrap();
        let file = |sha: &Sha256| dir.path().join("store").join(blob_location(p, sha).as_ref()).exists();

        let young = media.collect_unreferenced(Duration::from_secs(3600)).await;
        assert_eq!((young.deleted, young.failed), (0, 0), "{:?}", young.error);
        assert!(blobs.values().all(file) && file(&died_sha), "everything is younger than the minimum age");

        let round = media.collect_unreferenced(Duration::ZERO).await;
        assert_eq!((round.deleted, round.failed), (3, 0), "{:?}", round.error);
        assert!(!file(&blobs["replaced"]) && !file(&blobs["never named"]) && !file(&died_sha));
        for name in ["shared", "replacing"] {
            assert!(file(&blobs[name]), "{name} is named");
            assert_eq!(media.blob_bytes(p, &blobs[name]).await.unwrap(), name.as_bytes());
        }
        let (m, sha) = (meta.clone(), blobs["replaced"].clone());
        assert!(on_pool(move || m.media_blob(p, &sha).unwrap()).await.is_none());
        let again = media.collect_unreferenced(Duration::ZERO).await;
        assert_eq!((again.deleted, again.failed), (0, 0), "nothing waits any more");

        // Uploaded again, a collected blob is stored and recorded afresh.
        let bytes = Bytes::from_static(b"replaced");
        let (row, created) = media.put_blob(p, &blobs["replaced"], "text/plain", bytes).await.unwrap();
        assert!(created && row.size == 8 && file(&blobs["replaced"]));
    }

    #[test]
    fn only_the_exact_layout_of_a_blob_is_a_blob() {
        let sha = "ab".repeat(32);
        let blob = |p: String| blob_of_path(&ObjectPath::from(p));
        assert_eq!(blob(format!("projects/7/media/sha256/ab/{sha}")), Some((7, Sha256::from_trusted(sha.clone()))));
        for other in [
            format!("projects/7/media/sha256/cd/{sha}"),
            format!("projects/x/media/sha256/ab/{sha}"),
            format!("projects/7/media/runs/ab/{sha}"),
            format!("projects/7/media/sha256/ab/{sha}#1"),
            "projects/7/media/sha256/ab/abc".to_owned(),
            format!("projects/7/metrics/ab/{sha}"),
        ] {
            assert_eq!(blob(other.clone()), None, "{other}");
        }
    }
}
