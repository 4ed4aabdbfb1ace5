//! Media bytes in the object store, content-addressed per project
//! (`projects/{project_id}/media/sha256/{first two hex digits}/{sha256}`), and each run's
//! Parquet index of media (`index`). A blob is written, and fsynced on a local store, before its
//! row; the row is what items may name. Blobs no item names any more are deleted by `collect`.

mod collect;
pub mod histograms;
pub mod index;
pub mod table;

pub use collect::Collected;

use crate::{blocking, objects, Backpressure, Error, Result};
use bytes::Bytes;
use futures::Stream;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use trainlog_meta::{BlobRow, DirtyIndex, MetaStore, StoredBlob};
use trainlog_schema::{RunId, Sha256};

/// `projects/{project_id}/media/sha256/{hh}/{sha256}`
pub fn blob_location(project_id: i64, sha: &Sha256) -> ObjectPath {
    let s = sha.as_str();
    ObjectPath::from(format!("projects/{project_id}/media/sha256/{}/{s}", &s[..2]))
}

/// `projects/{project_id}/media/runs/{run_id}`: the folder of a run's media index.
pub fn run_prefix(project_id: i64, run: &str) -> ObjectPath {
    ObjectPath::from(format!("projects/{project_id}/media/runs/{run}"))
}

/// `projects/{project_id}/media/runs/{run_id}/index.parquet`
pub fn index_location(project_id: i64, run: &RunId) -> ObjectPath {
    ObjectPath::from(format!("projects/{project_id}/media/runs/{run}/index.parquet"))
}

/// A record batch as Parquet bytes, as every media file is written: zstd, and `version` under
/// the schema-version key of the key-value metadata.
pub(crate) fn parquet_bytes(batch: &arrow_array::RecordBatch, version: u32) -> Result<Bytes> {
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::metadata::KeyValue;
    use parquet::file::properties::WriterProperties;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(Error::Parquet)?))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            trainlog_schema::arrow::SCHEMA_VERSION_KEY.to_owned(),
            version.to_string(),
        )]))
        .build();
    let mut buf = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), Some(props))?;
    writer.write(batch)?;
    writer.close()?;
    Ok(Bytes::from(buf))
}

/// The SHA-256 of `bytes`, the address they are stored at.
pub fn digest(bytes: &[u8]) -> Sha256 {
    Sha256::from_trusted(crate::artifacts::hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref()))
}

#[derive(Clone)]
pub struct MediaStore {
    objects: Arc<dyn ObjectStore>,
    local_root: Option<PathBuf>,
    meta: Arc<MetaStore>,
}

impl MediaStore {
    pub(crate) fn new(objects: Arc<dyn ObjectStore>, local_root: Option<PathBuf>, meta: Arc<MetaStore>) -> Self {
        Self { objects, local_root, meta }
    }

    /// Puts an object and, on a local store, fsyncs it and its folders.
    async fn put_durable(&self, location: &ObjectPath, bytes: Bytes) -> Result<()> {
        self.objects.put(location, PutPayload::from_bytes(bytes)).await?;
        if let Some(root) = self.local_root.clone() {
            let location = location.clone();
            blocking(move || objects::sync_local(&root, &[location])).await?;
        }
        Ok(())
    }

    /// Stores a blob whose bytes the caller checked against `sha`, then records it. A blob
    /// already recorded is not written again, and counts as sent now (the collector of
    /// unreferenced blobs leaves it alone while its items are on their way). Answers its row and
    /// whether it was new; refused for now while the blob is being deleted as unreferenced.
    pub async fn put_blob(&self, project_id: i64, sha: &Sha256, mime: &str, bytes: Bytes) -> Result<(BlobRow, bool)> {
        let being_deleted = || Error::from(Backpressure::BlobBeingDeleted { sha256: sha.to_string() });
        let (meta, key) = (self.meta.clone(), sha.clone());
        match blocking(move || Ok(meta.touch_media_blob(project_id, &key)?)).await? {
            StoredBlob::Recorded(row) => return Ok((row, false)),
            StoredBlob::Deleting => return Err(being_deleted()),
            StoredBlob::Absent => {}
        }
        let size = bytes.len() as u64;
        let location = blob_location(project_id, sha);
        self.put_durable(&location, bytes.clone()).await?;
        let (meta, key, mime) = (self.meta.clone(), sha.clone(), mime.to_owned());
        let row = blocking(move || Ok(meta.put_media_blob(project_id, &key, size, &mime)?)).await?;
        let row = row.ok_or_else(being_deleted)?;
        // A deletion that started before this upload looked (from an object listed without a
        // row) may have deleted the bytes just written; none starts once the row is there.
        match self.objects.head(&location).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => self.put_durable(&location, bytes).await?,
            Err(e) => return Err(e.into()),
        }
        Ok((row, true))
    }

    /// A blob's bytes, whole.
    pub async fn blob_bytes(&self, project_id: i64, sha: &Sha256) -> Result<Bytes> {
        Ok(self.objects.get(&blob_location(project_id, sha)).await?.bytes().await?)
    }

    /// The table made of `parts` (in order), read from their Parquet blobs.
    pub async fn read_table(
        &self,
        project_id: i64,
        parts: &[trainlog_meta::TablePart],
    ) -> Result<arrow_array::RecordBatch> {
        // Every part's size from its footer first: a read past the budget decodes nothing.
        let (mut stored, mut shapes) = (Vec::with_capacity(parts.len()), Vec::with_capacity(parts.len()));
        for part in parts {
            let bytes = self.blob_bytes(project_id, &part.blob).await?;
            let footer = bytes.clone();
            shapes.push(blocking(move || table::part_shape(footer)).await?);
            let shapes = shapes.iter().map(|(rows, names)| (*rows, names.iter().map(String::as_str)));
            table::check_read_cells(table::joined_cells(shapes))?;
            stored.push(bytes);
        }
        let mut batches = Vec::with_capacity(parts.len());
        for bytes in stored {
            batches.push(blocking(move || table::decode_part(bytes)).await?);
        }
        blocking(move || table::join(&batches)).await
    }

    /// A blob's stored size and a stream of its bytes.
    pub async fn read_blob(
        &self,
        project_id: i64,
        sha: &Sha256,
    ) -> Result<(u64, impl Stream<Item = Result<Bytes>> + Send + 'static)> {
        let got = self.objects.get(&blob_location(project_id, sha)).await?;
        let size = got.meta.size;
        Ok((size, got.into_stream().map(|r| r.map_err(Error::from))))
    }

    /// Writes one run's index from its rows as they are now.
    pub async fn write_index(&self, dirty: DirtyIndex) -> Result<()> {
        let (meta, run) = (self.meta.clone(), dirty.run.clone());
        let project_id = dirty.project_id;
        let (bytes, histograms) = blocking(move || {
            let index = index::encode(project_id, &run, &meta.media_index_rows(&run)?)?;
            let rows = meta.histogram_index_rows(&run)?;
            let histograms = if rows.is_empty() { None } else { Some(histograms::encode(&run, &rows)?) };
            Ok((index, histograms))
        })
        .await?;
        self.put_durable(&index_location(project_id, &dirty.run), bytes).await?;
        if let Some(histograms) = histograms {
            self.put_durable(&histograms::location(project_id, &dirty.run), histograms).await?;
        }
        let meta = self.meta.clone();
        blocking(move || Ok(meta.media_index_written(&dirty)?)).await
    }

    /// Writes the index of every run whose rows changed `min_age` ago or earlier (all with
    /// zero). Every due run is tried; the first failure is answered after. Answers how many.
    pub async fn write_due_indexes(&self, min_age: Duration) -> Result<usize> {
        let before = trainlog_meta::now_ms() - min_age.as_millis() as i64;
        let meta = self.meta.clone();
        let due = blocking(move || Ok(meta.media_indexes_due(before)?)).await?;
        let (mut written, mut failed) = (0, None);
        for dirty in due {
            match self.write_index(dirty).await {
                Ok(()) => written += 1,
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        failed.map_or(Ok(written), Err)
    }

    /// Deletes the objects of the project's blobs that no run names any more. Answers how many.
    pub async fn delete_unreferenced(&self, project_id: i64) -> Result<usize> {
        let meta = self.meta.clone();
        let gone = blocking(move || Ok(meta.media_unreferenced(project_id)?)).await?;
        let mut deleted = 0;
        for sha in gone {
            if self.delete_one(project_id, &sha).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}
