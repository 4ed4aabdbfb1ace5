//! Encoding a run's series into a metric points Parquet file, and decoding series back.
//! Files are sorted by (key, step) and carry a key index in their key-value metadata.

use crate::series::Series;
use crate::{Error, Result};
use arrow_array::types::Int32Type;
use arrow_array::{Array, DictionaryArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use std::collections::BTreeMap;
use std::sync::Arc;
use trainlog_schema::arrow::{
    metrics_schema, COL_KEY, COL_RUN_ID, COL_STEP, COL_TIMESTAMP, COL_VALUE, KEY_INDEX_KEY, METRICS_SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
};

/// Where one key's rows sit in a file, and the steps they span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRange {
    pub first_row: u64,
    pub rows: u64,
    pub min_step: i64,
    pub max_step: i64,
}

pub type KeyIndex = BTreeMap<String, KeyRange>;

pub fn key_index_to_json(index: &KeyIndex) -> String {
    let map: serde_json::Map<String, serde_json::Value> = index
        .iter()
        .map(|(k, r)| (k.clone(), serde_json::json!([r.first_row, r.rows, r.min_step, r.max_step])))
        .collect();
    serde_json::Value::Object(map).to_string()
}

pub fn key_index_from_json(text: &str) -> Result<KeyIndex> {
    let bad = || Error::Corrupt(format!("a metric file's key index is malformed: {text:.200}"));
    let value: serde_json::Value = serde_json::from_str(text).map_err(|_| bad())?;
    let map = value.as_object().ok_or_else(bad)?;
    map.iter()
        .map(|(k, v)| {
            let a = v.as_array().filter(|a| a.len() == 4).ok_or_else(bad)?;
            let n = |i: usize| a[i].as_i64().ok_or_else(bad);
            Ok((k.clone(), KeyRange { first_row: n(0)? as u64, rows: n(1)? as u64, min_step: n(2)?, max_step: n(3)? }))
        })
        .collect()
}

/// zstd level for files written while ingesting (fast) and for compacted files (smaller).
pub const FLUSH_ZSTD_LEVEL: i32 = 3;
pub const COMPACT_ZSTD_LEVEL: i32 = 9;

fn writer_properties(zstd_level: i32, key_index_json: &str) -> Result<WriterProperties> {
    let level = ZstdLevel::try_new(zstd_level).map_err(Error::Parquet)?;
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_dictionary_enabled(false)
        .set_column_dictionary_enabled(ColumnPath::from(COL_RUN_ID), true)
        .set_column_dictionary_enabled(ColumnPath::from(COL_KEY), true)
        .set_column_encoding(ColumnPath::from(COL_STEP), Encoding::DELTA_BINARY_PACKED)
        .set_column_encoding(ColumnPath::from(COL_TIMESTAMP), Encoding::DELTA_BINARY_PACKED)
        .set_column_encoding(ColumnPath::from(COL_VALUE), Encoding::BYTE_STREAM_SPLIT)
        .set_max_row_group_row_count(Some(1 << 20))
        .set_key_value_metadata(Some(vec![
            KeyValue::new(SCHEMA_VERSION_KEY.to_owned(), METRICS_SCHEMA_VERSION.to_string()),
            KeyValue::new(KEY_INDEX_KEY.to_owned(), key_index_json.to_owned()),
        ]))
        .build())
}

/// An encoded file: its bytes, its key index and its row count.
pub struct EncodedFile {
    pub bytes: Bytes,
    pub index: KeyIndex,
    pub rows: u64,
}

/// Encodes normalized series of one run, given in key order, as one Parquet file.
pub fn encode_run(run_id: &str, series: &[(&str, &Series)], zstd_level: i32) -> Result<EncodedFile> {
    let rows: usize = series.iter().map(|(_, s)| s.len()).sum();
    let mut index = KeyIndex::new();
    let mut key_ids = Vec::with_capacity(rows);
    let mut steps = Vec::with_capacity(rows);
    let mut timestamps = Vec::with_capacity(rows);
    let mut values = Vec::with_capacity(rows);
    let mut key_names = Vec::with_capacity(series.len());
    for (key, s) in series.iter().filter(|(_, s)| !s.is_empty()) {
        let id = key_names.len() as i32;
        key_names.push(*key);
        index.insert(
            (*key).to_owned(),
            KeyRange {
                first_row: steps.len() as u64,
                rows: s.len() as u64,
                min_step: s.steps[0],
                max_step: s.steps[s.len() - 1],
            },
        );
        key_ids.extend(std::iter::repeat_n(id, s.len()));
        steps.extend_from_slice(&s.steps);
        timestamps.extend_from_slice(&s.timestamps);
        values.extend_from_slice(&s.values);
    }
    let n = steps.len();
    let run_col =
        DictionaryArray::<Int32Type>::try_new(Int32Array::from(vec![0; n]), Arc::new(StringArray::from(vec![run_id])))?;
    let key_col =
        DictionaryArray::<Int32Type>::try_new(Int32Array::from(key_ids), Arc::new(StringArray::from(key_names)))?;
    let schema = metrics_schema();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(run_col),
            Arc::new(key_col),
            Arc::new(Int64Array::from(steps)),
            Arc::new(Int64Array::from(timestamps)),
            Arc::new(Float64Array::from(values)),
        ],
    )?;
    let json = key_index_to_json(&index);
    let mut buf = Vec::with_capacity(n * 4 + 4096);
    let mut writer = ArrowWriter::try_new(&mut buf, schema, Some(writer_properties(zstd_level, &json)?))?;
    writer.write(&batch)?;
    writer.close()?;
    Ok(EncodedFile { bytes: Bytes::from(buf), index, rows: n as u64 })
}

fn columns_of(batch: &RecordBatch) -> Result<(&Int64Array, &Int64Array, &Float64Array)> {
    let get = |name: &str| {
        batch.column_by_name(name).ok_or_else(|| Error::Corrupt(format!("metric file lacks column {name}")))
    };
    let steps = get(COL_STEP)?.as_any().downcast_ref::<Int64Array>();
    let ts = get(COL_TIMESTAMP)?.as_any().downcast_ref::<Int64Array>();
    let values = get(COL_VALUE)?.as_any().downcast_ref::<Float64Array>();
    match (steps, ts, values) {
        (Some(s), Some(t), Some(v)) => Ok((s, t, v)),
        _ => Err(Error::Corrupt("metric file columns have unexpected types".into())),
    }
}

/// Reads rows `[first, first + rows)` of a metric file's step, timestamp and value columns.
pub fn read_rows(bytes: Bytes, first: u64, rows: u64) -> Result<Series> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), [COL_STEP, COL_TIMESTAMP, COL_VALUE]);
    let selection = RowSelection::from(vec![RowSelector::skip(first as usize), RowSelector::select(rows as usize)]);
    let reader = builder.with_projection(mask).with_row_selection(selection).with_batch_size(1 << 16).build()?;
    let mut out = Series::default();
    out.steps.reserve(rows as usize);
    out.timestamps.reserve(rows as usize);
    out.values.reserve(rows as usize);
    for batch in reader {
        let batch = batch?;
        let (s, t, v) = columns_of(&batch)?;
        out.steps.extend_from_slice(s.values());
        out.timestamps.extend_from_slice(t.values());
        out.values.extend_from_slice(v.values());
    }
    Ok(out)
}

/// Reads a whole metric file back as its series, by key.
pub fn read_all(bytes: Bytes, index: &KeyIndex) -> Result<BTreeMap<String, Series>> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), [COL_STEP, COL_TIMESTAMP, COL_VALUE]);
    let reader = builder.with_projection(mask).with_batch_size(1 << 16).build()?;
    let mut all = Series::default();
    for batch in reader {
        let batch = batch?;
        let (s, t, v) = columns_of(&batch)?;
        all.steps.extend_from_slice(s.values());
        all.timestamps.extend_from_slice(t.values());
        all.values.extend_from_slice(v.values());
    }
    index
        .iter()
        .map(|(key, r)| {
            let (a, b) = (r.first_row as usize, (r.first_row + r.rows) as usize);
            if b > all.len() {
                return Err(Error::Corrupt(format!("key index of {key} points past the file's end")));
            }
            Ok((
                key.clone(),
                Series {
                    steps: all.steps[a..b].to_vec(),
                    timestamps: all.timestamps[a..b].to_vec(),
                    values: all.values[a..b].to_vec(),
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_round_trips_by_key_with_its_version_and_index() {
        let mut loss = Series::default();
        let mut acc = Series::default();
        for i in 0..5000 {
            loss.push(i, 1_700_000_000_000 + i, 1.0 / (i as f64 + 1.0));
            acc.push(i * 2, 1_700_000_000_000 + i, if i == 7 { f64::NAN } else { i as f64 });
        }
        let file = encode_run("run1", &[("acc", &acc), ("loss", &loss)], FLUSH_ZSTD_LEVEL).unwrap();
        assert_eq!(file.rows, 10_000);
        assert_eq!(file.index["loss"], KeyRange { first_row: 5000, rows: 5000, min_step: 0, max_step: 4999 });

        let reader = ParquetRecordBatchReaderBuilder::try_new(file.bytes.clone()).unwrap();
        let kv = reader.metadata().file_metadata().key_value_metadata().unwrap();
        assert!(kv.iter().any(|k| k.key == SCHEMA_VERSION_KEY && k.value.as_deref() == Some("1")));
        let stored = kv.iter().find(|k| k.key == KEY_INDEX_KEY).unwrap().value.clone().unwrap();
        assert_eq!(key_index_from_json(&stored).unwrap(), file.index);

        let r = file.index["loss"];
        assert_eq!(read_rows(file.bytes.clone(), r.first_row, r.rows).unwrap(), loss);
        let all = read_all(file.bytes, &file.index).unwrap();
        assert!(all["acc"].values[7].is_nan());
        assert_eq!(all["acc"].steps, acc.steps);
    }
}
