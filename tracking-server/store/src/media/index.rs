//! A run's Parquet index of media, `projects/{project_id}/media/runs/{run_id}/index.parquet`:
//! a row per item, sorted by key, step and index, naming the objects that hold its bytes, its
//! thumbnail and its masks, with its boxes and class labels as nested columns.

use super::blob_location;
use crate::Result;
use arrow_array::builder::{Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{
    ArrayRef, Int32Array, Int64Array, ListArray, RecordBatch, StringArray, StructArray, TimestampMillisecondArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use trainlog_meta::MediaRow;
use trainlog_schema::arrow::{MEDIA_INDEX_SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use trainlog_schema::RunId;

fn box_fields() -> Fields {
    Fields::from(vec![
        Field::new("group", DataType::Utf8, false),
        Field::new("x_min", DataType::Float64, false),
        Field::new("y_min", DataType::Float64, false),
        Field::new("x_max", DataType::Float64, false),
        Field::new("y_max", DataType::Float64, false),
        Field::new("domain", DataType::Utf8, false),
        Field::new("class_id", DataType::Int64, true),
        Field::new("label", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
    ])
}

fn mask_fields() -> Fields {
    Fields::from(vec![Field::new("group", DataType::Utf8, false), Field::new("object", DataType::Utf8, false)])
}

fn label_fields() -> Fields {
    Fields::from(vec![Field::new("id", DataType::Int64, false), Field::new("label", DataType::Utf8, false)])
}

fn list_of(fields: Fields) -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Struct(fields), false)))
}

/// The index's schema, with its version in the metadata.
pub fn schema() -> Arc<Schema> {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    let metadata = HashMap::from([(SCHEMA_VERSION_KEY.to_owned(), MEDIA_INDEX_SCHEMA_VERSION.to_string())]);
    Arc::new(Schema::new_with_metadata(
        vec![
            Field::new("run_id", DataType::Utf8, false),
            Field::new("key", DataType::Utf8, false),
            Field::new("step", DataType::Int64, false),
            Field::new("index", DataType::Int32, false),
            Field::new("timestamp", ts, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("object", DataType::Utf8, false),
            Field::new("sha256", DataType::Utf8, false),
            Field::new("thumbnail", DataType::Utf8, true),
            Field::new("mime", DataType::Utf8, false),
            Field::new("size", DataType::Int64, false),
            Field::new("width", DataType::Int32, true),
            Field::new("height", DataType::Int32, true),
            Field::new("caption", DataType::Utf8, true),
            Field::new("boxes", list_of(box_fields()), false),
            Field::new("masks", list_of(mask_fields()), false),
            Field::new("class_labels", list_of(label_fields()), false),
        ],
        metadata,
    ))
}

/// A list column from each row's count of children and the children's struct columns.
fn list_column(fields: Fields, counts: impl Iterator<Item = usize>, children: Vec<ArrayRef>) -> Result<ArrayRef> {
    let values = StructArray::try_new(fields.clone(), children, None)?;
    let field = Arc::new(Field::new("item", DataType::Struct(fields), false));
    Ok(Arc::new(ListArray::try_new(field, OffsetBuffer::from_lengths(counts), Arc::new(values), None)?))
}

/// The rows of a run's items (already sorted by key, step and index) as one record batch.
pub fn record_batch(project_id: i64, run: &RunId, rows: &[MediaRow]) -> Result<RecordBatch> {
    let object = |sha: &trainlog_schema::Sha256| blob_location(project_id, sha).to_string();
    let strings =
        |f: &dyn Fn(&MediaRow) -> Option<String>| -> ArrayRef { Arc::new(rows.iter().map(f).collect::<StringArray>()) };
    let items = rows.iter().map(|r| &r.item);

    let mut group = StringBuilder::new();
    let (mut x_min, mut y_min, mut x_max, mut y_max) =
        (Float64Builder::new(), Float64Builder::new(), Float64Builder::new(), Float64Builder::new());
    let (mut domain, mut label, mut class_id, mut score) =
        (StringBuilder::new(), StringBuilder::new(), Int64Builder::new(), Float64Builder::new());
    for b in items.clone().flat_map(|i| &i.boxes) {
        group.append_value(&b.group);
        x_min.append_value(b.x_min);
        y_min.append_value(b.y_min);
        x_max.append_value(b.x_max);
        y_max.append_value(b.y_max);
        domain.append_value(b.domain.as_str());
        class_id.append_option(b.class_id);
        label.append_option(b.label.as_deref());
        score.append_option(b.score);
    }
    let boxes = list_column(
        box_fields(),
        items.clone().map(|i| i.boxes.len()),
        vec![
            Arc::new(group.finish()),
            Arc::new(x_min.finish()),
            Arc::new(y_min.finish()),
            Arc::new(x_max.finish()),
            Arc::new(y_max.finish()),
            Arc::new(domain.finish()),
            Arc::new(class_id.finish()),
            Arc::new(label.finish()),
            Arc::new(score.finish()),
        ],
    )?;
    let all_masks = items.clone().flat_map(|i| &i.masks);
    let masks = list_column(
        mask_fields(),
        items.clone().map(|i| i.masks.len()),
        vec![
            Arc::new(all_masks.clone().map(|m| Some(m.group.clone())).collect::<StringArray>()),
            Arc::new(all_masks.map(|m| Some(object(&m.blob))).collect::<StringArray>()),
        ],
    )?;
    let all_labels = items.clone().flat_map(|i| &i.class_labels);
    let labels = list_column(
        label_fields(),
        items.clone().map(|i| i.class_labels.len()),
        vec![
            Arc::new(all_labels.clone().map(|(id, _)| *id).collect::<Int64Array>()),
            Arc::new(all_labels.map(|(_, l)| Some(l.clone())).collect::<StringArray>()),
        ],
    )?;

    let columns: Vec<ArrayRef> = vec![
        strings(&|_| Some(run.to_string())),
        strings(&|r| Some(r.item.key.to_string())),
        Arc::new(items.clone().map(|i| i.step).collect::<Int64Array>()),
        Arc::new(items.clone().map(|i| i.index as i32).collect::<Int32Array>()),
        Arc::new(
            TimestampMillisecondArray::from(items.clone().map(|i| i.timestamp_ms).collect::<Vec<_>>())
                .with_timezone("UTC"),
        ),
        strings(&|r| Some(r.item.kind.to_string())),
        strings(&|r| Some(object(&r.item.blob))),
        strings(&|r| Some(r.item.blob.to_string())),
        strings(&|r| r.item.thumbnail.as_ref().map(object)),
        strings(&|r| Some(r.item.mime.clone())),
        Arc::new(rows.iter().map(|r| r.size as i64).collect::<Int64Array>()),
        Arc::new(items.clone().map(|i| i.width.map(|w| w as i32)).collect::<Int32Array>()),
        Arc::new(items.clone().map(|i| i.height.map(|h| h as i32)).collect::<Int32Array>()),
        strings(&|r| r.item.caption.clone()),
        boxes,
        masks,
        labels,
    ];
    Ok(RecordBatch::try_new(schema(), columns)?)
}

/// The index as Parquet bytes (zstd, the schema version in the key-value metadata).
pub fn encode(project_id: i64, run: &RunId, rows: &[MediaRow]) -> Result<Bytes> {
    let batch = record_batch(project_id, run, rows)?;
    super::parquet_bytes(&batch, MEDIA_INDEX_SCHEMA_VERSION)
}
