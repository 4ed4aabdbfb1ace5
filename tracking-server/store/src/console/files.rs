//! A run's console lines as Parquet files: `projects/{project}/console/{run}/{folder}-wal{segment}.parquet`,
//! one per write-ahead log segment and data folder, rows sorted by (time, rank, source, seq).

use crate::{Error, Result};
use arrow_array::builder::{StringBuilder, StringDictionaryBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{
    Array, DictionaryArray, Int32Array, Int64Array, RecordBatch, TimestampMillisecondArray, UInt32Array, UInt64Array,
};
use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use std::collections::HashMap;
use std::sync::Arc;
use trainlog_schema::arrow::{console_schema, CONSOLE_SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use trainlog_schema::console::{ConsoleLine, ConsoleStream};

/// `projects/{project}/console/{run}/`, where a run's console files are.
pub fn run_prefix(project_id: i64, run: &str) -> ObjectPath {
    ObjectPath::from(format!("projects/{project_id}/console/{run}"))
}

/// The file of a run's lines from one log segment of one data folder. The same segment always
/// names the same file, so writing it again after a crash replaces it instead of adding to it.
pub fn file_path(project_id: i64, run: &str, folder: &str, segment: u64) -> ObjectPath {
    ObjectPath::from(format!("projects/{project_id}/console/{run}/{folder}-wal{segment:020}.parquet"))
}

const ROWS_PER_BATCH: usize = 1 << 16;

/// One line as a file holds it, borrowed from a stored line or from a batch.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub time_ms: i64,
    pub rank: u32,
    pub node: &'a str,
    pub attempt: i64,
    pub step: Option<i64>,
    pub stream: ConsoleStream,
    pub line: &'a str,
    pub source: &'a str,
    pub seq: u64,
}

impl<'a> Row<'a> {
    pub fn of_batch(batch: &'a super::ConsoleBatch, l: &'a super::BatchLine) -> Self {
        Row {
            time_ms: l.time_ms,
            rank: batch.rank,
            node: &batch.node,
            attempt: batch.attempt,
            step: l.step,
            stream: l.stream,
            line: batch.text_of(l),
            source: &batch.source,
            seq: l.seq,
        }
    }

    pub fn order_key(&self) -> (i64, u32, &'a str, u64) {
        (self.time_ms, self.rank, self.source, self.seq)
    }
}

/// Encodes a run's lines, already in their order, as one Parquet file.
pub fn encode(run: &str, lines: &[Row<'_>]) -> Result<Bytes> {
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
        .set_column_encoding(ColumnPath::from("time"), Encoding::DELTA_BINARY_PACKED)
        .set_column_encoding(ColumnPath::from("seq"), Encoding::DELTA_BINARY_PACKED)
        .set_column_dictionary_enabled(ColumnPath::from("time"), false)
        .set_column_dictionary_enabled(ColumnPath::from("seq"), false)
        .set_column_dictionary_enabled(ColumnPath::from("line"), false)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            SCHEMA_VERSION_KEY.to_owned(),
            CONSOLE_SCHEMA_VERSION.to_string(),
        )]))
        .build();
    let schema = console_schema();
    let mut writer = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(properties))?;
    for chunk in lines.chunks(ROWS_PER_BATCH) {
        let mut node = StringDictionaryBuilder::<Int32Type>::new();
        let mut stream = StringDictionaryBuilder::<Int32Type>::new();
        let mut source = StringDictionaryBuilder::<Int32Type>::new();
        let mut text = StringBuilder::with_capacity(chunk.len(), chunk.iter().map(|l| l.line.len()).sum());
        for l in chunk {
            node.append_value(l.node);
            stream.append_value(l.stream.as_str());
            source.append_value(l.source);
            text.append_value(l.line);
        }
        let run_ids = DictionaryArray::<Int32Type>::try_new(
            Int32Array::from(vec![0; chunk.len()]),
            Arc::new(arrow_array::StringArray::from(vec![run])),
        )?;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(run_ids),
                Arc::new(
                    TimestampMillisecondArray::from_iter_values(chunk.iter().map(|l| l.time_ms)).with_timezone("UTC"),
                ),
                Arc::new(UInt32Array::from_iter_values(chunk.iter().map(|l| l.rank))),
                Arc::new(node.finish()),
                Arc::new(Int64Array::from_iter_values(chunk.iter().map(|l| l.attempt))),
                Arc::new(chunk.iter().map(|l| l.step).collect::<Int64Array>()),
                Arc::new(stream.finish()),
                Arc::new(text.finish()),
                Arc::new(source.finish()),
                Arc::new(UInt64Array::from_iter_values(chunk.iter().map(|l| l.seq))),
            ],
        )?;
        writer.write(&batch)?;
    }
    Ok(Bytes::from(writer.into_inner()?))
}

fn corrupt(what: &str) -> Error {
    Error::Corrupt(format!("console file: {what}"))
}

/// Reads every line of a console file. Names and sources repeat on every line of a process, so
/// each distinct one is kept once and shared.
pub fn decode(bytes: Bytes) -> Result<Vec<ConsoleLine>> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)?.with_batch_size(ROWS_PER_BATCH).build()?;
    let mut out = Vec::new();
    let mut shared: HashMap<String, Arc<str>> = HashMap::new();
    let mut intern = |s: &str| -> Arc<str> {
        if let Some(a) = shared.get(s) {
            return a.clone();
        }
        let a: Arc<str> = s.into();
        shared.insert(s.to_owned(), a.clone());
        a
    };
    for batch in reader {
        let batch = batch?;
        let column = |name: &str| batch.column_by_name(name).ok_or_else(|| corrupt(&format!("no column {name}")));
        let time = column("time")?
            .as_any()
            .downcast_ref::<TimestampMillisecondArray>()
            .ok_or_else(|| corrupt("time is not a timestamp"))?;
        let rank = column("rank")?.as_any().downcast_ref::<UInt32Array>().ok_or_else(|| corrupt("rank"))?;
        let attempt = column("attempt")?.as_any().downcast_ref::<Int64Array>().ok_or_else(|| corrupt("attempt"))?;
        let step = column("step")?.as_any().downcast_ref::<Int64Array>().ok_or_else(|| corrupt("step"))?;
        let seq = column("seq")?.as_any().downcast_ref::<UInt64Array>().ok_or_else(|| corrupt("seq"))?;
        let (node, stream, source) = (
            texts(column("node")?, &mut intern)?,
            texts(column("stream")?, &mut intern)?,
            texts(column("source")?, &mut intern)?,
        );
        let line =
            column("line")?.as_any().downcast_ref::<arrow_array::StringArray>().ok_or_else(|| corrupt("line"))?;
        for i in 0..batch.num_rows() {
            let stream = if &*stream[i] == "stderr" { ConsoleStream::Stderr } else { ConsoleStream::Stdout };
            out.push(ConsoleLine {
                time_ms: time.value(i),
                rank: rank.value(i),
                node: node[i].clone(),
                attempt: attempt.value(i),
                step: (!step.is_null(i)).then(|| step.value(i)),
                stream,
                line: line.value(i).to_owned(),
                source: source[i].clone(),
                seq: seq.value(i),
            });
        }
    }
    Ok(out)
}

/// A text column's values, row by row, whether it was read back as a dictionary or as plain text.
fn texts(array: &dyn Array, intern: &mut impl FnMut(&str) -> Arc<str>) -> Result<Vec<Arc<str>>> {
    if let Some(dictionary) = array.as_any_dictionary_opt() {
        let values = dictionary.values().as_string_opt::<i32>().ok_or_else(|| corrupt("a dictionary of non-text"))?;
        let distinct: Vec<Arc<str>> = values.iter().map(|v| intern(v.unwrap_or(""))).collect();
        return dictionary
            .normalized_keys()
            .into_iter()
            .map(|k| distinct.get(k).cloned().ok_or_else(|| corrupt("a dictionary key out of range")))
            .collect();
    }
    let values = array.as_string_opt::<i32>().ok_or_else(|| corrupt("a text column of another type"))?;
    Ok(values.iter().map(|v| intern(v.unwrap_or(""))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_through_parquet_with_the_schema_version() {
        let batch = super::super::codec::tests::batch("p1", 0..70_000);
        let rows: Vec<Row<'_>> = batch.lines.iter().map(|l| Row::of_batch(&batch, l)).collect();
        let bytes = encode("r1", &rows).unwrap();
        let lines: Vec<ConsoleLine> = batch.lines().collect();
        let metadata = parquet::file::reader::FileReader::metadata(
            &parquet::file::serialized_reader::SerializedFileReader::new(bytes.clone()).unwrap(),
        )
        .file_metadata()
        .key_value_metadata()
        .cloned()
        .unwrap();
        assert!(metadata.iter().any(|kv| kv.key == SCHEMA_VERSION_KEY && kv.value.as_deref() == Some("1")));
        let back = decode(bytes).unwrap();
        assert_eq!(back, lines);
        assert!(Arc::ptr_eq(&back[0].node, &back[69_999].node));
    }
}
