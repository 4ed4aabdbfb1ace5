//! The per-project runs table: one row per run with its attributes, params, tags and metric
//! summaries as struct columns, so hyperparameters and metrics can be joined without the server.

use crate::{Error, Result};
use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, StructArray, TimestampMillisecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use std::collections::BTreeSet;
use std::sync::Arc;
use trainlog_meta::RunExport;
use trainlog_schema::arrow::{RUNS_SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use trainlog_schema::ParamValue;

fn string_col(values: impl Iterator<Item = Option<String>>) -> ArrayRef {
    Arc::new(values.collect::<StringArray>())
}

fn param_column(runs: &[RunExport], key: &str) -> (DataType, ArrayRef) {
    let values: Vec<Option<&ParamValue>> = runs.iter().map(|r| r.run.params.get(key)).collect();
    let present = || values.iter().flatten();
    if present().all(|v| matches!(v, ParamValue::Bool(_))) {
        let mut b = BooleanBuilder::new();
        values.iter().for_each(|v| b.append_option(v.map(|v| matches!(v, ParamValue::Bool(true)))));
        return (DataType::Boolean, Arc::new(b.finish()));
    }
    if present().all(|v| matches!(v, ParamValue::Int(_))) {
        let mut b = Int64Builder::new();
        values
            .iter()
            .for_each(|v| b.append_option(v.and_then(|v| if let ParamValue::Int(i) = v { Some(*i) } else { None })));
        return (DataType::Int64, Arc::new(b.finish()));
    }
    if present().all(|v| matches!(v, ParamValue::Int(_) | ParamValue::Float(_))) {
        let mut b = Float64Builder::new();
        values.iter().for_each(|v| b.append_option(v.and_then(ParamValue::as_number)));
        return (DataType::Float64, Arc::new(b.finish()));
    }
    let mut b = StringBuilder::new();
    values.iter().for_each(|v| b.append_option(v.map(ParamValue::to_text)));
    (DataType::Utf8, Arc::new(b.finish()))
}

fn struct_column(fields: Vec<(String, DataType, ArrayRef)>) -> Result<Option<(DataType, ArrayRef)>> {
    if fields.is_empty() {
        return Ok(None);
    }
    let arrow_fields: Fields = fields.iter().map(|(n, t, _)| Field::new(n, t.clone(), true)).collect();
    let arrays = fields.into_iter().map(|(_, _, a)| a).collect();
    let array = StructArray::try_new(arrow_fields.clone(), arrays, None)?;
    Ok(Some((DataType::Struct(arrow_fields), Arc::new(array))))
}

fn summary_struct(runs: &[RunExport], key: &str) -> Result<(DataType, ArrayRef)> {
    let get = |r: &RunExport| r.summaries.get(key).copied();
    let f64s = |f: fn(&trainlog_schema::MetricSummary) -> f64| -> ArrayRef {
        Arc::new(runs.iter().map(|r| get(r).map(|s| f(&s))).collect::<Float64Array>())
    };
    let fields = vec![
        ("last".to_owned(), DataType::Float64, f64s(|s| s.last)),
        ("min".to_owned(), DataType::Float64, f64s(|s| s.min)),
        ("max".to_owned(), DataType::Float64, f64s(|s| s.max)),
        (
            "last_step".to_owned(),
            DataType::Int64,
            Arc::new(runs.iter().map(|r| get(r).map(|s| s.last_step)).collect::<Int64Array>()) as ArrayRef,
        ),
        (
            "count".to_owned(),
            DataType::UInt64,
            Arc::new(runs.iter().map(|r| get(r).map(|s| s.count)).collect::<UInt64Array>()) as ArrayRef,
        ),
    ];
    struct_column(fields)?.ok_or_else(|| Error::Corrupt("empty summary struct".into()))
}

/// Builds the runs table of one project as a Parquet file.
pub fn encode(runs: &[RunExport]) -> Result<Bytes> {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    let mut columns: Vec<(String, DataType, ArrayRef)> = vec![
        ("run_id".into(), DataType::Utf8, string_col(runs.iter().map(|r| Some(r.run.id.to_string())))),
        ("project".into(), DataType::Utf8, string_col(runs.iter().map(|r| Some(r.run.project.clone())))),
        ("name".into(), DataType::Utf8, string_col(runs.iter().map(|r| Some(r.run.name.clone())))),
        ("status".into(), DataType::Utf8, string_col(runs.iter().map(|r| Some(r.run.status.to_string())))),
        (
            "start_time".into(),
            ts.clone(),
            Arc::new(
                TimestampMillisecondArray::from(runs.iter().map(|r| Some(r.run.start_ms)).collect::<Vec<_>>())
                    .with_timezone("UTC"),
            ),
        ),
        (
            "end_time".into(),
            ts,
            Arc::new(
                TimestampMillisecondArray::from(runs.iter().map(|r| r.run.end_ms).collect::<Vec<_>>())
                    .with_timezone("UTC"),
            ),
        ),
        ("user".into(), DataType::Utf8, string_col(runs.iter().map(|r| Some(r.run.user.clone())))),
        ("host".into(), DataType::Utf8, string_col(runs.iter().map(|r| Some(r.run.host.clone())))),
        ("group".into(), DataType::Utf8, string_col(runs.iter().map(|r| Some(r.run.group.clone())))),
        ("parent_run_id".into(), DataType::Utf8, string_col(runs.iter().map(|r| r.run.parent_id.clone()))),
        ("notes".into(), DataType::Utf8, string_col(runs.iter().map(|r| Some(r.run.notes.clone())))),
    ];
    let param_keys: BTreeSet<&String> = runs.iter().flat_map(|r| r.run.params.keys()).collect();
    let params = param_keys.into_iter().map(|k| {
        let (t, a) = param_column(runs, k);
        (k.clone(), t, a)
    });
    if let Some((t, a)) = struct_column(params.collect())? {
        columns.push(("params".into(), t, a));
    }
    let tag_keys: BTreeSet<&String> = runs.iter().flat_map(|r| r.run.tags.keys()).collect();
    let tags = tag_keys
        .into_iter()
        .map(|k| (k.clone(), DataType::Utf8, string_col(runs.iter().map(|r| r.run.tags.get(k).cloned()))))
        .collect();
    if let Some((t, a)) = struct_column(tags)? {
        columns.push(("tags".into(), t, a));
    }
    let metric_keys: BTreeSet<&String> = runs.iter().flat_map(|r| r.summaries.keys()).collect();
    let metrics = metric_keys
        .into_iter()
        .map(|k| summary_struct(runs, k).map(|(t, a)| (k.clone(), t, a)))
        .collect::<Result<Vec<_>>>()?;
    if let Some((t, a)) = struct_column(metrics)? {
        columns.push(("metrics".into(), t, a));
    }
    let metadata: std::collections::HashMap<String, String> =
        [(SCHEMA_VERSION_KEY.to_owned(), RUNS_SCHEMA_VERSION.to_string())].into();
    let schema = Arc::new(Schema::new_with_metadata(
        columns.iter().map(|(n, t, _)| Field::new(n, t.clone(), true)).collect::<Vec<_>>(),
        metadata,
    ));
    let batch = RecordBatch::try_new(schema.clone(), columns.into_iter().map(|(_, _, a)| a).collect())?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(Error::Parquet)?))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            SCHEMA_VERSION_KEY.to_owned(),
            RUNS_SCHEMA_VERSION.to_string(),
        )]))
        .build();
    let mut buf = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buf, schema, Some(props))?;
    writer.write(&batch)?;
    writer.close()?;
    Ok(Bytes::from(buf))
}
