//! The per-project runs table: one row per run with its attributes, params, tags and metric
//! summaries as struct columns, so hyperparameters and metrics can be joined without the server.

use crate::{Error, Result};
use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{
    ArrayRef, Float64Array, Int64Array, MapArray, RecordBatch, StringArray, StructArray, TimestampMillisecondArray,
    UInt64Array,
};
use arrow_buffer::OffsetBuffer;
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
use trainlog_schema::{MetricSummary, ParamValue};

/// Keys a section may have across a project and still be written as a struct with a field per key.
pub const MAX_STRUCT_KEYS: usize = 256;

/// Leaf columns up to which the table is compressed.
const MAX_COMPRESSED_COLUMNS: usize = 512;

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

/// `{last, min, max, last_step, count}` of each summary in turn.
fn summaries_array<'a>(summaries: impl Iterator<Item = Option<&'a MetricSummary>> + Clone) -> Result<ArrayRef> {
    let f64s = |f: fn(&MetricSummary) -> f64| -> ArrayRef {
        Arc::new(summaries.clone().map(|s| s.map(f)).collect::<Float64Array>())
    };
    let fields = vec![
        ("last".to_owned(), DataType::Float64, f64s(|s| s.last)),
        ("min".to_owned(), DataType::Float64, f64s(|s| s.min)),
        ("max".to_owned(), DataType::Float64, f64s(|s| s.max)),
        (
            "last_step".to_owned(),
            DataType::Int64,
            Arc::new(summaries.clone().map(|s| s.map(|s| s.last_step)).collect::<Int64Array>()) as ArrayRef,
        ),
        (
            "count".to_owned(),
            DataType::UInt64,
            Arc::new(summaries.map(|s| s.map(|s| s.count)).collect::<UInt64Array>()) as ArrayRef,
        ),
    ];
    let (_, array) = struct_column(fields)?.ok_or_else(|| Error::Corrupt("empty summary struct".into()))?;
    Ok(array)
}

/// A `map<utf8, V>` column: `keys_of(run)` lists a run's keys, and `values` holds the values of
/// every run's entries in that same order.
fn map_column<'a>(
    runs: &'a [RunExport],
    keys_of: impl Fn(&'a RunExport) -> Vec<&'a String>,
    values: ArrayRef,
) -> Result<(DataType, ArrayRef)> {
    let mut keys = StringBuilder::new();
    let mut offsets = Vec::with_capacity(runs.len() + 1);
    offsets.push(0i32);
    for run in runs {
        let run_keys = keys_of(run);
        run_keys.iter().for_each(|k| keys.append_value(k));
        let end = offsets.last().copied().unwrap_or(0) + run_keys.len() as i32;
        offsets.push(end);
    }
    let entry_fields = Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", values.data_type().clone(), true),
    ]);
    let entries = StructArray::try_new(entry_fields.clone(), vec![Arc::new(keys.finish()), values], None)?;
    let entries_field = Arc::new(Field::new("entries", DataType::Struct(entry_fields), false));
    let map = MapArray::try_new(entries_field.clone(), OffsetBuffer::new(offsets.into()), entries, None, false)?;
    Ok((DataType::Map(entries_field, false), Arc::new(map)))
}

/// One section (params, tags or metrics) of the table: a struct with a field per key while the
/// project has at most `MAX_STRUCT_KEYS` of them, else a map from key to value. Every Parquet
/// column costs the writer memory of its own, so a struct field per key cannot scale to the
/// thousands of keys some runs log.
fn section<'a>(
    runs: &'a [RunExport],
    keys_of: impl Fn(&'a RunExport) -> Vec<&'a String>,
    struct_field: impl Fn(&str) -> Result<(DataType, ArrayRef)>,
    map_values: impl FnOnce() -> Result<ArrayRef>,
) -> Result<Option<(DataType, ArrayRef)>> {
    // Runs of a project mostly share their keys: a run with the previous run's keys adds none.
    let mut keys: BTreeSet<&String> = BTreeSet::new();
    let mut previous: Vec<&String> = Vec::new();
    for run in runs {
        let these = keys_of(run);
        if these != previous {
            keys.extend(these.iter().copied());
            previous = these;
        }
    }
    if keys.len() <= MAX_STRUCT_KEYS {
        let fields =
            keys.into_iter().map(|k| struct_field(k).map(|(t, a)| (k.clone(), t, a))).collect::<Result<Vec<_>>>()?;
        return struct_column(fields);
    }
    map_column(runs, keys_of, map_values()?).map(Some)
}

/// Builds the runs table of one project as a Parquet file.
pub fn encode(runs: &[RunExport]) -> Result<Bytes> {
    let batch = record_batch(runs)?;
    let schema = batch.schema();
    // Each column's compressor holds its own state: wide tables are written uncompressed.
    let leaf_columns = schema.flattened_fields().iter().filter(|f| !f.data_type().is_nested()).count();
    let compression = if leaf_columns <= MAX_COMPRESSED_COLUMNS {
        Compression::ZSTD(ZstdLevel::try_new(3).map_err(Error::Parquet)?)
    } else {
        Compression::UNCOMPRESSED
    };
    let props = WriterProperties::builder()
        .set_dictionary_enabled(false)
        .set_compression(compression)
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

/// The runs table's rows for these runs, as one Arrow record batch (the layout of the Parquet
/// file; the server also answers searches with it, as Arrow IPC, on request).
pub fn record_batch(runs: &[RunExport]) -> Result<RecordBatch> {
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
    let params = section(
        runs,
        |r| r.run.params.keys().collect(),
        |k| Ok(param_column(runs, k)),
        || {
            let text = runs.iter().flat_map(|r| r.run.params.values().map(|v| Some(v.to_text())));
            Ok(Arc::new(text.collect::<StringArray>()) as ArrayRef)
        },
    )?;
    let tags = section(
        runs,
        |r| r.run.tags.keys().collect(),
        |k| Ok((DataType::Utf8, string_col(runs.iter().map(|r| r.run.tags.get(k).cloned())))),
        || Ok(string_col(runs.iter().flat_map(|r| r.run.tags.values().map(|v| Some(v.clone()))))),
    )?;
    let metrics = section(
        runs,
        |r| r.summaries.keys().collect(),
        |k| {
            let array = summaries_array(runs.iter().map(|r| r.summaries.get(k)))?;
            Ok((array.data_type().clone(), array))
        },
        || summaries_array(runs.iter().flat_map(|r| r.summaries.values().map(Some))),
    )?;
    for (name, column) in [("params", params), ("tags", tags), ("metrics", metrics)] {
        if let Some((t, a)) = column {
            columns.push((name.into(), t, a));
        }
    }
    let metadata: std::collections::HashMap<String, String> =
        [(SCHEMA_VERSION_KEY.to_owned(), RUNS_SCHEMA_VERSION.to_string())].into();
    let schema = Arc::new(Schema::new_with_metadata(
        columns.iter().map(|(n, t, _)| Field::new(n, t.clone(), true)).collect::<Vec<_>>(),
        metadata,
    ));
    Ok(RecordBatch::try_new(schema, columns.into_iter().map(|(_, _, a)| a).collect())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::collections::BTreeMap;
    use trainlog_meta::Run;
    use trainlog_schema::{RunId, RunStatus};

    fn run_with_keys(id: &str, keys: usize) -> RunExport {
        let summaries = (0..keys).map(|k| (format!("m{k}"), MetricSummary::first(k as i64, 1, k as f64))).collect();
        let params = (0..keys).map(|k| (format!("p{k}"), ParamValue::Int(k as i64))).collect();
        let tags = BTreeMap::from([("team".to_owned(), "a".to_owned())]);
        let run = Run {
            id: RunId::from_trusted(id.into()),
            project_id: 1,
            project: "p".into(),
            name: id.into(),
            status: RunStatus::Running,
            start_ms: 0,
            end_ms: None,
            user: String::new(),
            host: String::new(),
            group: String::new(),
            parent_id: None,
            notes: String::new(),
            color: "#2277bb".into(),
            params,
            tags,
        };
        RunExport { run, summaries }
    }

    fn decode(bytes: Bytes) -> RecordBatch {
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap().build().unwrap();
        let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        arrow_select::concat::concat_batches(&batches[0].schema(), &batches).unwrap()
    }

    #[test]
    fn a_project_with_few_keys_gets_a_struct_field_per_key() {
        let table = decode(encode(&[run_with_keys("a", 3), run_with_keys("b", MAX_STRUCT_KEYS)]).unwrap());
        let params = table.column_by_name("params").unwrap().as_struct();
        assert_eq!(params.num_columns(), MAX_STRUCT_KEYS);
        assert_eq!(params.column_by_name("p2").unwrap().as_primitive::<arrow_array::types::Int64Type>().value(1), 2);
        let metrics = table.column_by_name("metrics").unwrap().as_struct();
        let m1 = metrics.column_by_name("m1").unwrap().as_struct();
        assert_eq!(m1.column_by_name("last").unwrap().as_primitive::<arrow_array::types::Float64Type>().value(0), 1.0);
        assert_eq!(table.column_by_name("tags").unwrap().as_struct().num_columns(), 1);
    }

    #[test]
    fn a_section_with_more_keys_than_the_struct_limit_becomes_a_map_holding_every_entry() {
        let keys = MAX_STRUCT_KEYS + 1;
        let table = decode(encode(&[run_with_keys("a", 2), run_with_keys("b", keys)]).unwrap());
        let params = table.column_by_name("params").unwrap().as_map();
        assert_eq!(params.value_length(0), 2);
        assert_eq!(params.value_length(1), keys as i32);
        let b_params = params.value(1);
        let (names, values) = (b_params.column(0).as_string::<i32>(), b_params.column(1).as_string::<i32>());
        let got: BTreeMap<&str, &str> =
            names.iter().zip(values.iter()).map(|(k, v)| (k.unwrap(), v.unwrap())).collect();
        assert_eq!(got.len(), keys);
        assert_eq!(got["p7"], "7");
        let metrics = table.column_by_name("metrics").unwrap().as_map();
        let b_metrics = metrics.value(1);
        let names = b_metrics.column(0).as_string::<i32>();
        let last = b_metrics
            .column(1)
            .as_struct()
            .column_by_name("last")
            .unwrap()
            .as_primitive::<arrow_array::types::Float64Type>();
        let at = names.iter().position(|n| n == Some("m9")).unwrap();
        assert_eq!(last.value(at), 9.0);
        // One tag key: still a struct.
        assert!(table.column_by_name("tags").unwrap().as_struct_opt().is_some());
    }

    #[test]
    #[ignore = "prints the time of encoding one run with KEYS keys (default 20000); run with --ignored"]
    fn measure_a_wide_run() {
        let keys: usize = std::env::var("KEYS").ok().and_then(|k| k.parse().ok()).unwrap_or(20_000);
        let started = std::time::Instant::now();
        let bytes = encode(&[run_with_keys("r1", keys)]).unwrap();
        eprintln!("{keys} keys: {} bytes in {:?}", bytes.len(), started.elapsed());
    }
}
