//! Arrow schemas of what trainlog persists, and the metadata keys that version them.

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use std::collections::HashMap;
use std::sync::Arc;

/// Key-value metadata key holding the schema version of every Parquet file trainlog writes.
pub const SCHEMA_VERSION_KEY: &str = "trainlog.schema_version";
/// Version of the metric points file layout.
pub const METRICS_SCHEMA_VERSION: u32 = 1;
/// Version of the per-project runs table layout. 2: a section (params, tags, metrics) with more
/// keys than a struct may hold is a map from key to value.
pub const RUNS_SCHEMA_VERSION: u32 = 2;
/// Version of a run's media index (`media/runs/{run}/index.parquet`).
pub const MEDIA_INDEX_SCHEMA_VERSION: u32 = 1;
/// Version of a run's histograms file (`media/runs/{run}/histograms.parquet`).
pub const HISTOGRAMS_SCHEMA_VERSION: u32 = 1;
/// Version of the layout of a table part's Parquet file (the user's columns, as logged).
pub const TABLE_PART_SCHEMA_VERSION: u32 = 1;
/// Version of a run's console lines files (`projects/{id}/console/{run}/…parquet`).
pub const CONSOLE_SCHEMA_VERSION: u32 = 1;
/// Key-value metadata key holding, in a metric points file, the JSON index
/// `{key: [first_row, rows, min_step, max_step]}` of the keys it holds.
pub const KEY_INDEX_KEY: &str = "trainlog.key_index";

pub const COL_RUN_ID: &str = "run_id";
pub const COL_KEY: &str = "key";
pub const COL_STEP: &str = "step";
pub const COL_TIMESTAMP: &str = "timestamp";
pub const COL_VALUE: &str = "value";

fn dict_utf8() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// Schema of a metric points file: rows sorted by (key, step), timestamp in ms since the epoch.
pub fn metrics_schema() -> Arc<Schema> {
    let metadata = HashMap::from([(SCHEMA_VERSION_KEY.to_owned(), METRICS_SCHEMA_VERSION.to_string())]);
    Arc::new(Schema::new_with_metadata(
        vec![
            Field::new(COL_RUN_ID, dict_utf8(), false),
            Field::new(COL_KEY, dict_utf8(), false),
            Field::new(COL_STEP, DataType::Int64, false),
            Field::new(COL_TIMESTAMP, DataType::Int64, false),
            Field::new(COL_VALUE, DataType::Float64, false),
        ],
        metadata,
    ))
}

/// Schema of a console lines file: one row per line of one run, sorted by (time, rank, source, seq).
/// `time` is when the line was read from the process (ms since the epoch, UTC); `step` the last
/// step the run had logged then; `source` and `seq` name the process and number its lines.
pub fn console_schema() -> Arc<Schema> {
    let metadata = HashMap::from([(SCHEMA_VERSION_KEY.to_owned(), CONSOLE_SCHEMA_VERSION.to_string())]);
    Arc::new(Schema::new_with_metadata(
        vec![
            Field::new(COL_RUN_ID, dict_utf8(), false),
            Field::new("time", DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())), false),
            Field::new("rank", DataType::UInt32, false),
            Field::new("node", dict_utf8(), false),
            Field::new("attempt", DataType::Int64, false),
            Field::new("step", DataType::Int64, true),
            Field::new("stream", dict_utf8(), false),
            Field::new("line", DataType::Utf8, false),
            Field::new("source", dict_utf8(), false),
            Field::new("seq", DataType::UInt64, false),
        ],
        metadata,
    ))
}

/// The Arrow media type accepted on metric ingest and offered on reads.
pub const ARROW_STREAM_MEDIA_TYPE: &str = "application/vnd.apache.arrow.stream";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_schema_carries_its_version() {
        let schema = metrics_schema();
        assert_eq!(schema.metadata()[SCHEMA_VERSION_KEY], "1");
        assert_eq!(schema.fields().len(), 5);
    }
}
