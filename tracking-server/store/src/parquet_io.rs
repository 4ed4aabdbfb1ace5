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

fn writer_properties(zstd_level: i32) -> Result<WriterProperties> {
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
        .set_key_value_metadata(Some(vec![KeyValue::new(
            SCHEMA_VERSION_KEY.to_owned(),
            METRICS_SCHEMA_VERSION.to_string(),
        )]))
        .build())
}

/// An encoded file: its bytes, its key index and its row count.
pub struct EncodedFile {
    pub bytes: Bytes,
    pub index: KeyIndex,
    pub rows: u64,
}

/// Writes one run's series into a metric points file, one key at a time in key order, so a
/// file is built without holding all of its series in memory. The key index goes in at the end.
pub struct RunFileWriter {
    run_id: String,
    writer: ArrowWriter<Vec<u8>>,
    index: KeyIndex,
    rows: u64,
}

/// Rows per Arrow batch handed to the Parquet writer.
const WRITE_BATCH_ROWS: usize = 1 << 16;

impl RunFileWriter {
    pub fn new(run_id: &str, zstd_level: i32) -> Result<Self> {
        let writer = ArrowWriter::try_new(Vec::new(), metrics_schema(), Some(writer_properties(zstd_level)?))?;
        Ok(Self { run_id: run_id.to_owned(), writer, index: KeyIndex::new(), rows: 0 })
    }

    /// Appends a normalized series; keys must come in ascending order.
    pub fn write_key(&mut self, key: &str, series: &Series) -> Result<()> {
        if series.is_empty() {
            return Ok(());
        }
        if self.index.keys().next_back().is_some_and(|last| last.as_str() >= key) {
            return Err(Error::Corrupt(format!("metric file keys out of order at {key:?}")));
        }
        let n = series.len();
        self.index.insert(
            key.to_owned(),
            KeyRange { first_row: self.rows, rows: n as u64, min_step: series.steps[0], max_step: series.steps[n - 1] },
        );
        let run_values = Arc::new(StringArray::from(vec![self.run_id.as_str()]));
        let key_values = Arc::new(StringArray::from(vec![key]));
        for start in (0..n).step_by(WRITE_BATCH_ROWS) {
            let end = (start + WRITE_BATCH_ROWS).min(n);
            let len = end - start;
            let batch = RecordBatch::try_new(
                metrics_schema(),
                vec![
                    Arc::new(DictionaryArray::<Int32Type>::try_new(
                        Int32Array::from(vec![0; len]),
                        run_values.clone(),
                    )?),
                    Arc::new(DictionaryArray::<Int32Type>::try_new(
                        Int32Array::from(vec![0; len]),
                        key_values.clone(),
                    )?),
                    Arc::new(Int64Array::from(series.steps[start..end].to_vec())),
                    Arc::new(Int64Array::from(series.timestamps[start..end].to_vec())),
                    Arc::new(Float64Array::from(series.values[start..end].to_vec())),
                ],
            )?;
            self.writer.write(&batch)?;
        }
        self.rows += n as u64;
        Ok(())
    }

    pub fn finish(mut self) -> Result<EncodedFile> {
        self.writer.append_key_value_metadata(KeyValue::new(KEY_INDEX_KEY.to_owned(), key_index_to_json(&self.index)));
        let bytes = self.writer.into_inner()?;
        Ok(EncodedFile { bytes: Bytes::from(bytes), index: self.index, rows: self.rows })
    }
}

/// Encodes normalized series of one run, given in key order, as one Parquet file.
pub fn encode_run(run_id: &str, series: &[(&str, &Series)], zstd_level: i32) -> Result<EncodedFile> {
    let mut writer = RunFileWriter::new(run_id, zstd_level)?;
    for (key, s) in series {
        writer.write_key(key, s)?;
    }
    writer.finish()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_must_come_in_order_and_big_series_span_several_batches() {
        let mut big = Series::default();
        for i in 0..200_000 {
            big.push(i, i, i as f64);
        }
        let mut w = RunFileWriter::new("r", FLUSH_ZSTD_LEVEL).unwrap();
        w.write_key("b", &big).unwrap();
        assert!(w.write_key("a", &big).is_err());
        let file = w.finish().unwrap();
        let r = file.index["b"];
        assert_eq!(read_rows(file.bytes, r.first_row, r.rows).unwrap(), big);
    }

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
        let r = file.index["acc"];
        let back = read_rows(file.bytes, r.first_row, r.rows).unwrap();
        assert!(back.values[7].is_nan());
        assert_eq!(back.steps, acc.steps);
    }
}
