//! The object store behind `--store`, and the layout of objects in it.

use crate::{Error, Result};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::ObjectStore;
use std::path::Path;
use std::sync::Arc;

/// Opens the store named by `url` (`file:///abs/dir`, `s3://bucket/prefix`), or the local folder
/// `default_dir` when `url` is None. S3 settings come from the standard `AWS_*` variables.
pub fn open(url: Option<&str>, default_dir: &Path) -> Result<Arc<dyn ObjectStore>> {
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
            Ok(if prefix.is_empty() { Arc::new(store) } else { Arc::new(PrefixStore::new(store, prefix)) })
        }
        other => Err(Error::Config(format!(
            "--store {url:?}: unsupported scheme {other:?}; this build supports file:// and s3://"
        ))),
    }
}

fn local(dir: &Path) -> Result<Arc<dyn ObjectStore>> {
    std::fs::create_dir_all(dir).map_err(crate::io_err("creating the local object store folder"))?;
    let fs = LocalFileSystem::new_with_prefix(dir).map_err(Error::ObjectStore)?.with_automatic_cleanup(true);
    Ok(Arc::new(fs))
}

/// `projects/{project_id}/metrics/{run_id}/{number:020}.parquet`
pub fn metric_file_path(project_id: i64, run_id: &str, number: i64) -> ObjectPath {
    ObjectPath::from(format!("projects/{project_id}/metrics/{run_id}/{number:020}.parquet"))
}

/// `projects/{project_id}/runs.parquet`
pub fn runs_table_path(project_id: i64) -> ObjectPath {
    ObjectPath::from(format!("projects/{project_id}/runs.parquet"))
}
