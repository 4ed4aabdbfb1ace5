//! Encoding a run's series into a metric points Parquet file, and decoding series back.
//! Files are sorted by (key, step) and carry a key index in their key-value metadata. Data pages
//! hold a bounded number of rows and the file has a page index (page locations and per-page
//! min/max), so reading a step range of a long series decodes only the pages that may hold it.

use crate::series::{Series, StepRange};
use crate::{Error, Result};
use arrow_array::types::Int32Type;
use arrow_array::{Array, DictionaryArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{KeyValue, PageIndexPolicy, ParquetMetaData};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use std::collections::BTreeMap;
use std::ops::Range;
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

/// Rows per data page: the unit a step-range read decodes. Smaller pages cut the rows decoded
/// beyond a range's ends, larger ones compress a little better and keep the page index short.
pub const DATA_PAGE_ROWS: usize = 16 * 1024;

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
        .set_data_page_row_count_limit(DATA_PAGE_ROWS)
        .set_statistics_enabled(EnabledStatistics::Page)
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
        Self::with_properties(run_id, writer_properties(zstd_level)?)
    }

    fn with_properties(run_id: &str, properties: WriterProperties) -> Result<Self> {
        let writer = ArrowWriter::try_new(Vec::new(), metrics_schema(), Some(properties))?;
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

/// Reads the rows of one key whose steps fall in `range`, exactly. Only the data pages whose
/// step statistics overlap the range are decoded; a file (or row group) without a page index
/// has all of the key's rows decoded, then cut to the range.
pub fn read_rows_in_range(bytes: Bytes, key: KeyRange, range: StepRange) -> Result<Series> {
    if range == StepRange::default() {
        return read_rows(bytes, key.first_row, key.rows);
    }
    let empty = range.min.zip(range.max).is_some_and(|(min, max)| min > max);
    if empty || key.rows == 0 || !range.overlaps(key.min_step, key.max_step) {
        return Ok(Series::default());
    }
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(bytes, options)?;
    let wanted = rows_to_decode(builder.metadata(), key, range)?;
    if wanted.is_empty() {
        return Ok(Series::default());
    }
    let total_rows = usize::try_from(builder.metadata().file_metadata().num_rows())
        .map_err(|_| Error::Corrupt("a metric file has a negative row count".into()))?;
    let corrupt = || Error::Corrupt("a metric file's key index or page index points outside its rows".into());
    let mut selectors = Vec::with_capacity(2 * wanted.len());
    let mut next = 0;
    for rows in &wanted {
        let skip = rows.start.checked_sub(next).ok_or_else(corrupt)?;
        if skip > 0 {
            selectors.push(RowSelector::skip(skip));
        }
        selectors.push(RowSelector::select(rows.end.checked_sub(rows.start).ok_or_else(corrupt)?));
        next = rows.end;
    }
    if total_rows < next {
        return Err(corrupt());
    }
    let mask = ProjectionMask::columns(builder.parquet_schema(), [COL_STEP, COL_TIMESTAMP, COL_VALUE]);
    let reader = builder
        .with_projection(mask)
        .with_row_selection(RowSelection::from(selectors))
        .with_batch_size(1 << 16)
        .build()?;
    let mut out = Series::default();
    for batch in reader {
        let batch = batch?;
        let (s, t, v) = columns_of(&batch)?;
        // Selected rows all belong to the key, so their steps ascend.
        let steps = s.values();
        let lo = range.min.map_or(0, |m| steps.partition_point(|&x| x < m));
        let hi = range.max.map_or(steps.len(), |m| steps.partition_point(|&x| x <= m)).max(lo);
        out.steps.extend_from_slice(&steps[lo..hi]);
        out.timestamps.extend_from_slice(&t.values()[lo..hi]);
        out.values.extend_from_slice(&v.values()[lo..hi]);
    }
    Ok(out)
}

/// Rows of one key in one data page (or in a row group without a page index), in file rows,
/// with the min and max step of those rows when the page index gives them exactly.
struct KeyPart {
    rows: Range<usize>,
    exact: Option<(i64, i64)>,
}

/// The key's rows, as ascending disjoint file row ranges, that may hold a step in `range`:
/// every row of the key with a step in `range` is in one.
///
/// The key's rows are cut by the step column's data pages. A page that holds only the key's
/// rows has exact bounds from the page index. A page shared with a neighbouring key (the first
/// and last of a key), or rows without a page index, are bounded by the sort order instead:
/// their steps lie between the exact bounds of the parts before and after them, or the key's.
fn rows_to_decode(metadata: &ParquetMetaData, key: KeyRange, range: StepRange) -> Result<Vec<Range<usize>>> {
    let corrupt = || Error::Corrupt("a metric file's row counts or page index are malformed".into());
    let to_usize = |n: i64| usize::try_from(n).map_err(|_| corrupt());
    let key_start = usize::try_from(key.first_row).map_err(|_| corrupt())?;
    let key_end = key_start.checked_add(usize::try_from(key.rows).map_err(|_| corrupt())?).ok_or_else(corrupt)?;
    let step_column = metadata
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.name() == COL_STEP)
        .ok_or_else(|| Error::Corrupt(format!("metric file lacks column {COL_STEP}")))?;
    let mut parts: Vec<KeyPart> = Vec::new();
    let mut group_start = 0usize;
    for (g, group) in metadata.row_groups().iter().enumerate() {
        let group_end = group_start.checked_add(to_usize(group.num_rows())?).ok_or_else(corrupt)?;
        let (lo, hi) = (key_start.max(group_start), key_end.min(group_end));
        if lo < hi {
            let index = metadata.page_index_for_row_group(g);
            match (index.offset_index(step_column), index.column_index(step_column)) {
                (Some(offsets), Some(ColumnIndexMetaData::INT64(stats)))
                    if stats.num_pages() == offsets.page_locations().len() as u64 =>
                {
                    let pages = offsets.page_locations();
                    let row_of =
                        |first_row_index: i64| group_start.checked_add(to_usize(first_row_index)?).ok_or_else(corrupt);
                    for (p, page) in pages.iter().enumerate() {
                        let start = row_of(page.first_row_index)?;
                        let end = pages.get(p + 1).map_or(Ok(group_end), |next| row_of(next.first_row_index))?;
                        if start.max(lo) >= end.min(hi) {
                            continue;
                        }
                        let only_key = start >= key_start && end <= key_end;
                        let exact = match (stats.min_value(p), stats.max_value(p)) {
                            (Some(&min), Some(&max)) if only_key => Some((min, max)),
                            _ => None,
                        };
                        parts.push(KeyPart { rows: start.max(lo)..end.min(hi), exact });
                    }
                }
                _ => parts.push(KeyPart { rows: lo..hi, exact: None }),
            }
        }
        group_start = group_end;
    }
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let (min, max) = part.exact.unwrap_or_else(|| {
            let before = i.checked_sub(1).and_then(|j| parts[j].exact).map_or(key.min_step, |b| b.1);
            let after = parts.get(i + 1).and_then(|p| p.exact).map_or(key.max_step, |b| b.0);
            (before, after)
        });
        if !range.overlaps(min, max) {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.end == part.rows.start => last.end = part.rows.end,
            _ => out.push(part.rows.clone()),
        }
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

    /// `n` points from step `first`, `every` steps apart, with values that tell them apart.
    fn ramp(n: i64, first: i64, every: i64) -> Series {
        let mut s = Series::default();
        for i in 0..n {
            let step = first + i * every;
            s.push(step, 1_700_000_000_000 + step, (step as f64 * 0.37).sin());
        }
        s
    }

    fn range(min: Option<i64>, max: Option<i64>) -> StepRange {
        StepRange { min, max }
    }

    /// Ranges that start and end inside pages, on page and row-group boundaries, between
    /// points, outside the series, open on either side, and empty.
    fn ranges_over(s: &Series) -> Vec<StepRange> {
        let at = |row: usize| s.steps[row.min(s.len() - 1)];
        let page = DATA_PAGE_ROWS;
        let mut out = vec![
            range(None, None),
            range(Some(at(10)), Some(at(20))),
            range(Some(at(page - 1)), Some(at(page))),
            range(Some(at(page)), Some(at(3 * page - 1))),
            range(Some(at(page) - 1), Some(at(2 * page) + 1)),
            range(Some(at(5 * page / 2)), None),
            range(None, Some(at(7 * page / 2))),
            range(Some(at(50_000) - 3), Some(at(50_000) + 3)),
            range(Some(i64::MIN), Some(at(0))),
            range(Some(at(s.len() - 1)), Some(i64::MAX)),
            range(Some(at(0) - 100), Some(at(0) - 1)),
            range(Some(at(s.len() - 1) + 1), None),
            range(Some(at(300)), Some(at(200))),
        ];
        let len = s.len() as i64;
        out.extend((0..7).map(|i| range(Some(at((i * len / 7) as usize)), Some(at(((i + 2) * len / 7) as usize)))));
        out
    }

    fn assert_ranges_match(bytes: &Bytes, index: &KeyIndex, keys: &[(&str, &Series)]) {
        for (key, whole) in keys {
            let r = index[*key];
            assert_eq!(&read_rows(bytes.clone(), r.first_row, r.rows).unwrap(), *whole);
            for q in ranges_over(whole) {
                let got = read_rows_in_range(bytes.clone(), r, q).unwrap();
                assert_eq!(got, whole.slice(q), "key {key}, range {q:?}");
            }
        }
    }

    fn page_index_of(bytes: &Bytes) -> Arc<ParquetMetaData> {
        let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
        ParquetRecordBatchReaderBuilder::try_new_with_options(bytes.clone(), options).unwrap().metadata().clone()
    }

    #[test]
    fn step_range_reads_equal_slices_of_whole_reads_and_decode_only_their_pages() {
        // Keys share pages at their boundaries; `loss` spans many pages.
        let (acc, loss, lr) = (ramp(30_000, -5, 3), ramp(100_000, 0, 2), ramp(700, 1000, 1));
        let keys = [("acc", &acc), ("loss", &loss), ("lr", &lr)];
        let file = encode_run("r", &keys, FLUSH_ZSTD_LEVEL).unwrap();
        let meta = page_index_of(&file.bytes);
        let step_column = meta.file_metadata().schema_descr().columns().iter().position(|c| c.name() == COL_STEP);
        let pages = meta.page_index_for_row_group(0).offset_index(step_column.unwrap()).unwrap().page_locations().len();
        assert!(pages >= 130_700 / DATA_PAGE_ROWS, "{pages} pages");
        assert_ranges_match(&file.bytes, &file.index, &keys);

        let r = file.index["loss"];
        let narrow = rows_to_decode(&meta, r, range(Some(100_000), Some(100_010))).unwrap();
        assert!(narrow.iter().map(|rows| rows.len()).sum::<usize>() <= DATA_PAGE_ROWS, "{narrow:?}");
        let tenth = rows_to_decode(&meta, r, range(Some(50_000), Some(70_000))).unwrap();
        assert!(tenth.iter().map(|rows| rows.len()).sum::<usize>() <= 10_000 + 2 * DATA_PAGE_ROWS, "{tenth:?}");
        assert!(tenth
            .iter()
            .all(|rows| rows.start >= r.first_row as usize && rows.end <= (r.first_row + r.rows) as usize));
    }

    #[test]
    fn step_range_reads_cross_row_groups() {
        let (a, b) = (ramp(90_000, 0, 1), ramp(150_000, 10, 5));
        let keys = [("a", &a), ("b", &b)];
        let properties = writer_properties(FLUSH_ZSTD_LEVEL)
            .unwrap()
            .into_builder()
            .set_max_row_group_row_count(Some(40_000))
            .build();
        let mut w = RunFileWriter::with_properties("r", properties).unwrap();
        for (k, s) in keys {
            w.write_key(k, s).unwrap();
        }
        let file = w.finish().unwrap();
        assert!(page_index_of(&file.bytes).row_groups().len() >= 6);
        assert_ranges_match(&file.bytes, &file.index, &keys);
    }

    #[test]
    fn files_without_a_page_index_read_step_ranges_from_whole_keys() {
        let (a, b) = (ramp(20_000, 0, 1), ramp(80_000, 3, 7));
        let keys = [("a", &a), ("b", &b)];
        let properties = writer_properties(FLUSH_ZSTD_LEVEL)
            .unwrap()
            .into_builder()
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_offset_index_disabled(true)
            .build();
        let mut w = RunFileWriter::with_properties("r", properties).unwrap();
        for (k, s) in keys {
            w.write_key(k, s).unwrap();
        }
        let file = w.finish().unwrap();
        let meta = page_index_of(&file.bytes);
        assert!(meta.page_index_for_row_group(0).offset_index(0).is_none());
        assert!(meta.page_index_for_row_group(0).column_index(0).is_none());
        let r = file.index["b"];
        let rows = rows_to_decode(&meta, r, range(Some(300), Some(400))).unwrap();
        assert_eq!(rows, vec![r.first_row as usize..(r.first_row + r.rows) as usize]);
        assert_ranges_match(&file.bytes, &file.index, &keys);
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
