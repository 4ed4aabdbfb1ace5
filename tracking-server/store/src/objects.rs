//! The object store behind `--store`, and the layout of objects in it.

use crate::{Error, Result};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::ObjectStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An opened store, and its folder when it is on the local disk.
pub struct Opened {
    pub store: Arc<dyn ObjectStore>,
    pub local_root: Option<PathBuf>,
}

/// Opens the store named by `url` (`file:///abs/dir`, `s3://bucket/prefix`), or the local folder
/// `default_dir` when `url` is None. S3 settings come from the standard `AWS_*` variables.
pub fn open(url: Option<&str>, default_dir: &Path) -> Result<Opened> {
    let Some(url) = url else {
        return local(default_dir);
    };
    let parsed = url::Url::parse(url).map_err(|e| Error::Config(format!("--store {url:?} is not a URL: {e}")))?;
    match parsed.scheme() {
        "file" => {
            let dir = parsed
                .to_file_path()
                .map_err(|_| Error::Config(format!("--store {url:?}: a file URL needs an absolute path")))?;
            local(&dir)
        }
        "s3" | "s3a" => {
            let store = AmazonS3Builder::from_env()
                .with_url(url)
                .build()
                .map_err(|e| Error::Config(format!("--store {url:?}: {e}")))?;
            let prefix = parsed.path().trim_matches('/');
            let store: Arc<dyn ObjectStore> =
                if prefix.is_empty() { Arc::new(store) } else { Arc::new(PrefixStore::new(store, prefix)) };
            Ok(Opened { store, local_root: None })
        }
        other => Err(Error::Config(format!(
            "--store {url:?}: unsupported scheme {other:?}; this build supports file:// and s3://"
        ))),
    }
}

fn local(dir: &Path) -> Result<Opened> {
    std::fs::create_dir_all(dir).map_err(crate::io_err("creating the local object store folder"))?;
    let fs = LocalFileSystem::new_with_prefix(dir).map_err(Error::ObjectStore)?.with_automatic_cleanup(true);
    Ok(Opened { store: Arc::new(fs), local_root: Some(dir.to_owned()) })
}

/// Makes objects of a local store durable: fsyncs each file, then every folder from its own up
/// to the store's root, so a power loss cannot lose a file that the catalog is about to name.
/// Object stores over the network are durable once a put returns.
pub fn sync_local(root: &Path, paths: &[ObjectPath]) -> Result<()> {
    let mut folders = std::collections::BTreeSet::new();
    for path in paths {
        let file = root.join(path.as_ref());
        std::fs::File::open(&file)
            .and_then(|f| f.sync_all())
            .map_err(crate::io_err("syncing a metric file to disk"))?;
        let mut folder = file.parent();
        while let Some(f) = folder.filter(|f| f.starts_with(root)) {
            folders.insert(f.to_owned());
            folder = f.parent();
        }
    }
    for folder in folders {
        std::fs::File::open(&folder)
            .and_then(|f| f.sync_all())
            .map_err(crate::io_err("syncing a folder of the object store to disk"))?;
    }
    Ok(())
}

/// Removes the staging files (`NAME#N`) that a local store's upload leaves when the process dies
/// before its rename, once they are `min_age` old: the store's own listing never shows them.
/// Answers how many.
pub fn remove_staged_uploads(projects: &Path, min_age: std::time::Duration) -> Result<usize> {
    let mut removed = 0;
    let mut folders = vec![projects.to_owned()];
    while let Some(folder) = folders.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(crate::io_err("listing the local object store")(e)),
        };
        for entry in entries {
            let entry = entry.map_err(crate::io_err("listing the local object store"))?;
            let path = entry.path();
            if entry.file_type().map_err(crate::io_err("listing the local object store"))?.is_dir() {
                folders.push(path);
                continue;
            }
            let staged = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit_once('#'))
                .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            let old_enough = || {
                let modified = entry.metadata().and_then(|m| m.modified()).ok()?;
                Some(modified.elapsed().is_ok_and(|age| age >= min_age))
            };
            if staged && old_enough().unwrap_or(false) {
                std::fs::remove_file(&path).map_err(crate::io_err("removing a staged upload"))?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// `projects/{project_id}/metrics/{run_id}/{number:020}.parquet`
pub fn metric_file_path(project_id: i64, run_id: &str, number: i64) -> ObjectPath {
    ObjectPath::from(format!("projects/{project_id}/metrics/{run_id}/{number:020}.parquet"))
}

/// The folders of one run's objects: `projects/{project_id}/metrics/{run_id}`,
/// `projects/{project_id}/artifacts/{run_id}` and `projects/{project_id}/media/runs/{run_id}`.
/// Its media blobs are shared by content in the project, and go when no run names them.
pub fn run_prefixes(project_id: i64, run_id: &str) -> [ObjectPath; 4] {
    ["metrics", "artifacts", "media/runs", "console"]
        .map(|kind| ObjectPath::from(format!("projects/{project_id}/{kind}/{run_id}")))
}

/// `projects/{project_id}/runs.parquet`
pub fn runs_table_path(project_id: i64) -> ObjectPath {
    ObjectPath::from(format!("projects/{project_id}/runs.parquet"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_uploads_left_by_a_crash_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("projects/1/metrics/r1");
        std::fs::create_dir_all(&run).unwrap();
        for name in ["00000000000000000043.parquet#1", "00000000000000000043.parquet", "notes#draft", "x.parquet#"] {
            std::fs::write(run.join(name), b"x").unwrap();
        }
        let hour = std::time::Duration::from_secs(3600);
        assert_eq!(remove_staged_uploads(&dir.path().join("projects"), hour).unwrap(), 0, "maybe still uploading");
        assert_eq!(remove_staged_uploads(&dir.path().join("projects"), std::time::Duration::ZERO).unwrap(), 1);
        let mut left: Vec<String> =
            std::fs::read_dir(&run).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["00000000000000000043.parquet", "notes#draft", "x.parquet#"]);
        assert_eq!(remove_staged_uploads(&dir.path().join("missing"), std::time::Duration::ZERO).unwrap(), 0);
    }
}
