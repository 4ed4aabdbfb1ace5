//! A run's histograms as Parquet, `projects/{project_id}/media/runs/{run_id}/histograms.parquet`:
//! a row per key and step with its bin edges and counts as lists, sorted by key and step.

use crate::Result;
use arrow_array::builder::{Float64Builder, ListBuilder};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use std::collections::HashMap;
use std::sync::Arc;
use trainlog_schema::arrow::{HISTOGRAMS_SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use trainlog_schema::{Histogram, RunId};

/// `projects/{project_id}/media/runs/{run_id}/histograms.parquet`
pub fn location(project_id: i64, run: &RunId) -> ObjectPath {
    ObjectPath::from(format!("projects/{project_id}/media/runs/{run}/histograms.parquet"))
}

fn numbers() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Float64, true)))
}

/// The file's schema, with its version in the metadata.
pub fn schema() -> Arc<Schema> {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    let metadata = HashMap::from([(SCHEMA_VERSION_KEY.to_owned(), HISTOGRAMS_SCHEMA_VERSION.to_string())]);
    Arc::new(Schema::new_with_metadata(
        vec![
            Field::new("run_id", DataType::Utf8, false),
            Field::new("key", DataType::Utf8, false),
            Field::new("step", DataType::Int64, false),
            Field::new("timestamp", ts, false),
            Field::new("edges", numbers(), false),
            Field::new("counts", numbers(), false),
        ],
        metadata,
    ))
}

/// A run's histograms (already sorted by key and step) as Parquet bytes (zstd, the schema
/// version in the key-value metadata).
pub fn encode(run: &RunId, rows: &[Histogram]) -> Result<Bytes> {
    let list = |f: &dyn Fn(&Histogram) -> &[f64]| -> ArrayRef {
        let mut b = ListBuilder::new(Float64Builder::new());
        for h in rows {
            b.values().append_slice(f(h));
            b.append(true);
        }
        Arc::new(b.finish())
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(rows.iter().map(|_| Some(run.as_str())).collect::<StringArray>()),
        Arc::new(rows.iter().map(|h| Some(h.key.as_str())).collect::<StringArray>()),
        Arc::new(rows.iter().map(|h| h.step).collect::<Int64Array>()),
        Arc::new(
            TimestampMillisecondArray::from(rows.iter().map(|h| h.timestamp_ms).collect::<Vec<_>>())
                .with_timezone("UTC"),
        ),
        list(&|h| &h.edges),
        list(&|h| &h.counts),
    ];
    let batch = RecordBatch::try_new(schema(), columns)?;
    super::parquet_bytes(&batch, HISTOGRAMS_SCHEMA_VERSION)
}
