//! Tables logged with runs: each log is a part, a Parquet file among the media blobs. Parts come
//! in as JSON rows (their column types inferred) or as an Arrow IPC stream, and are read back
//! joined, filtered, sorted and paged.

use crate::{Error, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchReader, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{json, Value as Json};
use std::cmp::Ordering;
use std::sync::Arc;
use trainlog_schema::arrow::TABLE_PART_SCHEMA_VERSION;
use trainlog_schema::limits::{MAX_TABLE_COLUMNS, MAX_TABLE_PART_ROWS};

/// A table part sent as JSON: a larger body answers 413 (send an Arrow IPC stream, or more
/// parts). A table logged as JSON elsewhere (MLflow's `log_table`) larger than this stays a file.
pub const MAX_PART_JSON_BYTES: u64 = 16 << 20;

/// Values (rows × columns) in one part of a table, checked as it is written.
pub const MAX_TABLE_PART_CELLS: usize = 10_000_000;

/// Values (rows × columns) a read of a table decodes, all its parts together, checked from the
/// parts' Parquet metadata before any is decoded.
pub const MAX_TABLE_CELLS: usize = 10_000_000;

/// The media type of a table part's bytes.
pub const PARQUET_MIME: &str = "application/vnd.apache.parquet";

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::Meta(trainlog_meta::Error::Invalid { field: field.into(), reason: reason.into() })
}

/// A column's type as the API names it.
pub fn type_name(t: &DataType) -> String {
    match t {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => "int64".into(),
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => "int64".into(),
        DataType::Float16 | DataType::Float32 | DataType::Float64 => "float64".into(),
        DataType::Boolean => "bool".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "string".into(),
        other => other.to_string().to_ascii_lowercase(),
    }
}

/// A schema's columns as `[{"name", "type"}]`.
pub fn columns_json(schema: &Schema) -> Json {
    Json::Array(schema.fields().iter().map(|f| json!({"name": f.name(), "type": type_name(f.data_type())})).collect())
}

/// Checks a part against the limits on columns and rows and on column names.
fn check_part(batch: &RecordBatch) -> Result<()> {
    let fields = batch.schema().fields().clone();
    if fields.is_empty() || fields.len() > MAX_TABLE_COLUMNS {
        return Err(invalid("columns", format!("a table has 1 to {MAX_TABLE_COLUMNS} columns, got {}", fields.len())));
    }
    for (i, f) in fields.iter().enumerate() {
        if f.name().is_empty() || f.name().chars().count() > 250 {
            return Err(invalid(format!("columns[{i}]"), "a column's name has 1 to 250 characters"));
        }
        if fields[..i].iter().any(|g| g.name() == f.name()) {
            return Err(invalid(format!("columns[{i}]"), format!("column {:?} is named twice", f.name())));
        }
    }
    if batch.num_rows() > MAX_TABLE_PART_ROWS {
        return Err(invalid(
            "rows",
            format!("a part of a table holds at most {MAX_TABLE_PART_ROWS} rows, got {}", batch.num_rows()),
        ));
    }
    check_part_cells(batch.num_rows(), fields.len())
}

/// Refuses a part of more than `MAX_TABLE_PART_CELLS` values (rows × columns).
fn check_part_cells(rows: usize, columns: usize) -> Result<()> {
    let cells = rows.saturating_mul(columns);
    if cells > MAX_TABLE_PART_CELLS {
        return Err(invalid(
            "rows",
            format!(
                "a part of a table holds at most {MAX_TABLE_PART_CELLS} values (rows × columns), got {rows} rows × {columns} columns; send it as several appended parts"
            ),
        ));
    }
    Ok(())
}

/// The type a JSON column takes: integers only, numbers, booleans, or text (anything else is
/// kept as its JSON text). A column of nulls only is text.
fn infer(values: impl Iterator<Item = Json>) -> DataType {
    let (mut ints, mut numbers, mut bools, mut others) = (0, 0, 0, 0);
    for v in values {
        match v {
            Json::Null => {}
            Json::Number(n) if n.is_i64() => ints += 1,
            Json::Number(_) => numbers += 1,
            Json::Bool(_) => bools += 1,
            _ => others += 1,
        }
    }
    match (ints, numbers, bools, others) {
        (_, _, 0, 0) if ints + numbers > 0 && numbers == 0 => DataType::Int64,
        (_, _, 0, 0) if numbers > 0 => DataType::Float64,
        (0, 0, b, 0) if b > 0 => DataType::Boolean,
        _ => DataType::Utf8,
    }
}

/// The type a column takes given the type the table's part before gave it: that type when the
/// values fit it (nulls fit any, integers fit float64, anything fits string), else the inferred.
fn fit(inferred: DataType, before: Option<&str>) -> DataType {
    match (before, &inferred) {
        (Some("float64"), DataType::Int64) => DataType::Float64,
        (Some("string"), _) => DataType::Utf8,
        _ => inferred,
    }
}

/// A part from JSON: column names and rows of values, one per column. `before` is the columns
/// (`[{"name", "type"}]`) of the table's part before, whose types an appended part keeps where
/// its values fit them.
pub fn from_json(columns: &[String], rows: &[Vec<Json>], before: Option<&Json>) -> Result<RecordBatch> {
    if rows.len() > MAX_TABLE_PART_ROWS {
        return Err(invalid("rows", format!("a part of a table holds at most {MAX_TABLE_PART_ROWS} rows")));
    }
    if let Some(i) = rows.iter().position(|r| r.len() != columns.len()) {
        return Err(invalid(
            format!("rows[{i}]"),
            format!("a row holds one value per column ({}), got {}", columns.len(), rows[i].len()),
        ));
    }
    let mut fields = Vec::with_capacity(columns.len());
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (c, name) in columns.iter().enumerate() {
        let values = || rows.iter().map(move |r| r[c].clone());
        let nulls_only = values().all(|v| v.is_null());
        let hinted = before
            .and_then(Json::as_array)
            .and_then(|cols| cols.iter().find(|c| c.get("name").and_then(Json::as_str) == Some(name)))
            .and_then(|c| c.get("type").and_then(Json::as_str));
        let t = match (hinted, nulls_only) {
            (Some("int64"), true) => DataType::Int64,
            (Some("float64"), true) => DataType::Float64,
            (Some("bool"), true) => DataType::Boolean,
            _ => fit(infer(values()), hinted),
        };
        let array: ArrayRef = match t {
            DataType::Int64 => Arc::new(values().map(|v| v.as_i64()).collect::<arrow_array::Int64Array>()),
            DataType::Float64 => Arc::new(values().map(|v| v.as_f64()).collect::<arrow_array::Float64Array>()),
            DataType::Boolean => Arc::new(values().map(|v| v.as_bool()).collect::<BooleanArray>()),
            _ => Arc::new(
                values()
                    .map(|v| match v {
                        Json::Null => None,
                        Json::String(s) => Some(s),
                        other => Some(other.to_string()),
                    })
                    .collect::<arrow_array::StringArray>(),
            ),
        };
        fields.push(Field::new(name, t, true));
        arrays.push(array);
    }
    let batch = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        arrays,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )
    .map_err(|e| invalid("columns", e.to_string()))?;
    check_part(&batch)?;
    Ok(batch)
}

/// A part from an Arrow IPC stream: its batches joined.
pub fn from_ipc(bytes: &[u8]) -> Result<RecordBatch> {
    let bad = |e: arrow_schema::ArrowError| invalid("body", format!("not an Arrow IPC stream: {e}"));
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).map_err(bad)?;
    let schema = reader.schema();
    // Batches are counted as they are read: a stream past the limits stops at the batch that
    // passes them.
    let (mut batches, mut rows) = (Vec::new(), 0usize);
    for batch in reader {
        let batch = batch.map_err(bad)?;
        rows += batch.num_rows();
        check_part_cells(rows, schema.fields().len())?;
        batches.push(batch);
    }
    let batch = arrow_select::concat::concat_batches(&schema, &batches).map_err(bad)?;
    check_part(&batch)?;
    Ok(batch)
}

/// A part as Parquet bytes (zstd, the layout's version in the key-value metadata). The same
/// part encodes to the same bytes, so a part sent again is the same blob.
pub fn encode_part(batch: &RecordBatch) -> Result<Bytes> {
    super::parquet_bytes(batch, TABLE_PART_SCHEMA_VERSION)
}

/// A stored part's rows and column names, from its Parquet footer alone.
pub fn part_shape(bytes: Bytes) -> Result<(u64, Vec<String>)> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
    let metadata = builder.metadata().file_metadata();
    let rows = u64::try_from(metadata.num_rows()).unwrap_or(0);
    let names = metadata.schema_descr().columns().iter().map(|c| c.name().to_owned()).collect();
    Ok((rows, names))
}

/// The values a read of parts decodes and joins: all their rows × every column any of them has
/// (the join fills a column a part lacks with nulls).
pub fn joined_cells<'a>(shapes: impl IntoIterator<Item = (u64, impl IntoIterator<Item = &'a str>)>) -> u64 {
    let (mut rows, mut columns) = (0u64, std::collections::HashSet::new());
    for (part_rows, names) in shapes {
        rows = rows.saturating_add(part_rows);
        columns.extend(names);
    }
    rows.saturating_mul(columns.len() as u64)
}

/// Refuses a read of parts holding more than `MAX_TABLE_CELLS` values together.
pub fn check_read_cells(cells: u64) -> Result<()> {
    if cells > MAX_TABLE_CELLS as u64 {
        return Err(invalid(
            "key",
            format!(
                "the table holds {cells} values (rows × columns) as of this step, more than the {MAX_TABLE_CELLS} a read decodes"
            ),
        ));
    }
    Ok(())
}

/// A stored part read back.
pub fn decode_part(bytes: Bytes) -> Result<RecordBatch> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()?;
    let schema = reader.schema();
    let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(arrow_select::concat::concat_batches(&schema, &batches)?)
}

/// Parts joined in order, their columns matched by name: a column a part lacks is null in its
/// rows, and a column whose type differs between parts reads as text in all of them. Parts may
/// arrive in any order (a `replace` part at an earlier step than an append written after another
/// base), and every order reads.
pub fn join(parts: &[RecordBatch]) -> Result<RecordBatch> {
    let mut fields: Vec<Field> = Vec::new();
    for part in parts {
        for f in part.schema().fields() {
            match fields.iter_mut().find(|known| known.name() == f.name()) {
                Some(known) if known.data_type() != f.data_type() => {
                    *known = Field::new(f.name(), DataType::Utf8, true);
                }
                Some(known) if f.is_nullable() => known.set_nullable(true),
                Some(_) => {}
                None => fields.push(f.as_ref().clone()),
            }
        }
    }
    for field in &mut fields {
        if parts.iter().any(|p| p.column_by_name(field.name()).is_none()) {
            field.set_nullable(true);
        }
    }
    let schema: SchemaRef = Arc::new(Schema::new(fields.clone()));
    let aligned = parts
        .iter()
        .map(|part| {
            let columns = fields
                .iter()
                .map(|field| match part.column_by_name(field.name()) {
                    Some(column) if column.data_type() == field.data_type() => column.clone(),
                    Some(column) => Arc::new(arrow_array::StringArray::from(
                        cells(column).iter().map(|c| (*c != Cell::Null).then(|| c.text())).collect::<Vec<_>>(),
                    )) as ArrayRef,
                    None => arrow_array::new_null_array(field.data_type(), part.num_rows()),
                })
                .collect();
            let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(part.num_rows()));
            RecordBatch::try_new_with_options(schema.clone(), columns, &options)
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Corrupt(format!("a table's parts could not be joined: {e}")))?;
    Ok(arrow_select::concat::concat_batches(&schema, &aligned)?)
}

/// How rows are compared with a filter's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Contains,
}

impl FilterOp {
    pub fn parse(field: &str, s: &str) -> trainlog_schema::Result<Self> {
        Ok(match s {
            "eq" => Self::Eq,
            "ne" => Self::Ne,
            "lt" => Self::Lt,
            "le" => Self::Le,
            "gt" => Self::Gt,
            "ge" => Self::Ge,
            "contains" => Self::Contains,
            _ => {
                return Err(trainlog_schema::Error::new(
                    field,
                    format!("a filter's op is eq, ne, lt, le, gt, ge or contains, got {s:?}"),
                ))
            }
        })
    }
}

/// Which rows of a table a read answers, in which order.
#[derive(Debug, Clone, Default)]
pub struct TableQuery {
    pub filter: Option<(String, FilterOp, String)>,
    pub sort: Option<(String, bool)>,
    pub offset: usize,
    pub limit: Option<usize>,
}

/// One value of a table, as filters and sorts compare it and JSON shows it.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Null,
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(String),
}

impl Cell {
    fn json(&self) -> Json {
        match self {
            Cell::Null => Json::Null,
            Cell::Int(i) => json!(i),
            Cell::Float(f) => serde_json::Number::from_f64(*f).map_or_else(|| json!(f.to_string()), Json::Number),
            Cell::Bool(b) => json!(b),
            Cell::Text(s) => json!(s),
        }
    }

    fn text(&self) -> String {
        match self {
            Cell::Text(s) => s.clone(),
            Cell::Null => String::new(),
            other => other.json().to_string(),
        }
    }

    /// Nulls first, numbers by value (integers and floats together), then text.
    fn cmp(&self, other: &Cell) -> Ordering {
        let number = |c: &Cell| match c {
            Cell::Int(i) => Some(*i as f64),
            Cell::Float(f) => Some(*f),
            Cell::Bool(b) => Some(f64::from(u8::from(*b))),
            _ => None,
        };
        match (self, other) {
            (Cell::Null, Cell::Null) => Ordering::Equal,
            (Cell::Null, _) => Ordering::Less,
            (_, Cell::Null) => Ordering::Greater,
            (Cell::Int(a), Cell::Int(b)) => a.cmp(b),
            (Cell::Text(a), Cell::Text(b)) => a.cmp(b),
            _ => match (number(self), number(other)) {
                (Some(a), Some(b)) => a.total_cmp(&b),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => self.text().cmp(&other.text()),
            },
        }
    }
}

/// The cells of a column. Types the API does not show (lists, structs, binary) read as nulls.
fn cells(array: &ArrayRef) -> Vec<Cell> {
    use arrow_array::types::{
        TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
    };
    use arrow_schema::TimeUnit;
    fn ints<T: arrow_array::ArrowPrimitiveType>(a: &ArrayRef) -> Vec<Cell>
    where
        T::Native: TryInto<i64>,
    {
        a.as_primitive::<T>().iter().map(|v| v.and_then(|v| v.try_into().ok()).map_or(Cell::Null, Cell::Int)).collect()
    }
    fn floats<T: arrow_array::ArrowPrimitiveType>(a: &ArrayRef) -> Vec<Cell>
    where
        T::Native: Into<f64>,
    {
        a.as_primitive::<T>().iter().map(|v| v.map_or(Cell::Null, |v| Cell::Float(v.into()))).collect()
    }
    let texts = |it: &mut dyn Iterator<Item = Option<&str>>| -> Vec<Cell> {
        it.map(|v| v.map_or(Cell::Null, |s| Cell::Text(s.to_owned()))).collect()
    };
    match array.data_type() {
        DataType::Int8 => ints::<Int8Type>(array),
        DataType::Int16 => ints::<Int16Type>(array),
        DataType::Int32 => ints::<Int32Type>(array),
        DataType::Int64 => ints::<Int64Type>(array),
        DataType::UInt8 => ints::<UInt8Type>(array),
        DataType::UInt16 => ints::<UInt16Type>(array),
        DataType::UInt32 => ints::<UInt32Type>(array),
        DataType::UInt64 => ints::<UInt64Type>(array),
        DataType::Float32 => floats::<Float32Type>(array),
        DataType::Float64 => floats::<Float64Type>(array),
        DataType::Timestamp(TimeUnit::Second, _) => ints::<TimestampSecondType>(array),
        DataType::Timestamp(TimeUnit::Millisecond, _) => ints::<TimestampMillisecondType>(array),
        DataType::Timestamp(TimeUnit::Microsecond, _) => ints::<TimestampMicrosecondType>(array),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => ints::<TimestampNanosecondType>(array),
        DataType::Boolean => array.as_boolean().iter().map(|v| v.map_or(Cell::Null, Cell::Bool)).collect(),
        DataType::Utf8 => texts(&mut array.as_string::<i32>().iter()),
        DataType::LargeUtf8 => texts(&mut array.as_string::<i64>().iter()),
        DataType::Utf8View => texts(&mut array.as_string_view().iter()),
        _ => vec![Cell::Null; array.len()],
    }
}

/// A filter's value in the form the column's cells take.
fn filter_cell(column: &[Cell], t: &DataType, value: &str) -> Result<Cell> {
    let bad = || invalid("filter_value", format!("{value:?} is not a value of a {} column", type_name(t)));
    let numeric = column.iter().any(|c| matches!(c, Cell::Int(_) | Cell::Float(_)));
    Ok(match t {
        DataType::Boolean => Cell::Bool(value.parse().map_err(|_| bad())?),
        t if t.is_integer() || t.is_floating() || (numeric && !matches!(t, DataType::Utf8)) => {
            match value.parse::<i64>() {
                Ok(i) => Cell::Int(i),
                Err(_) => Cell::Float(value.parse().map_err(|_| bad())?),
            }
        }
        _ => Cell::Text(value.to_owned()),
    })
}

/// A table's rows that `query` picks, in its order: how many matched, and the page as a batch.
pub fn select(batch: &RecordBatch, query: &TableQuery) -> Result<(usize, RecordBatch)> {
    let column = |field: &str, name: &str| {
        batch.column_by_name(name).ok_or_else(|| invalid(field, format!("the table has no column {name:?}")))
    };
    let mut rows: Vec<u32> = (0..batch.num_rows() as u32).collect();
    if let Some((name, op, value)) = &query.filter {
        let array = column("filter_column", name)?;
        let values = cells(array);
        let wanted = filter_cell(&values, array.data_type(), value)?;
        rows.retain(|&r| {
            let cell = &values[r as usize];
            match op {
                FilterOp::Contains => cell != &Cell::Null && cell.text().contains(value.as_str()),
                _ if cell == &Cell::Null => false,
                FilterOp::Eq => cell.cmp(&wanted) == Ordering::Equal,
                FilterOp::Ne => cell.cmp(&wanted) != Ordering::Equal,
                FilterOp::Lt => cell.cmp(&wanted) == Ordering::Less,
                FilterOp::Le => cell.cmp(&wanted) != Ordering::Greater,
                FilterOp::Gt => cell.cmp(&wanted) == Ordering::Greater,
                FilterOp::Ge => cell.cmp(&wanted) != Ordering::Less,
            }
        });
    }
    if let Some((name, descending)) = &query.sort {
        let values = cells(column("sort", name)?);
        // Stable: rows that compare equal keep the table's order.
        rows.sort_by(|&a, &b| {
            let order = values[a as usize].cmp(&values[b as usize]);
            if *descending {
                order.reverse()
            } else {
                order
            }
        });
    }
    let matched = rows.len();
    let end = query.limit.map_or(matched, |l| query.offset.saturating_add(l).min(matched));
    let page = UInt32Array::from(rows.get(query.offset.min(matched)..end).unwrap_or_default().to_vec());
    let columns = batch
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c.as_ref(), &page, None))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let page = RecordBatch::try_new_with_options(
        batch.schema(),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(page.len())),
    )?;
    Ok((matched, page))
}

/// A batch's rows as JSON arrays, a value per column.
pub fn rows_json(batch: &RecordBatch) -> Vec<Json> {
    let columns: Vec<Vec<Cell>> = batch.columns().iter().map(cells).collect();
    (0..batch.num_rows()).map(|r| Json::Array(columns.iter().map(|c| c[r].json()).collect())).collect()
}

/// A batch as an Arrow IPC stream.
pub fn ipc_stream(batch: &RecordBatch) -> Result<Bytes> {
    let mut buf = Vec::new();
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut buf, &batch.schema())?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_parts_infer_their_types_and_read_back_filtered_sorted_and_paged() {
        let columns = vec!["id".to_owned(), "score".to_owned(), "label".to_owned(), "ok".to_owned()];
        let rows: Vec<Vec<Json>> = vec![
            vec![json!(1), json!(0.5), json!("cat"), json!(true)],
            vec![json!(2), json!(2), json!("dog"), json!(null)],
            vec![json!(3), json!(null), json!({"a": 1}), json!(false)],
        ];
        let part = from_json(&columns, &rows, None).unwrap();
        let types: Vec<String> = part.schema().fields().iter().map(|f| type_name(f.data_type())).collect();
        assert_eq!(types, vec!["int64", "float64", "string", "bool"]);
        let back = decode_part(encode_part(&part).unwrap()).unwrap();
        assert_eq!(back, part);
        assert_eq!(encode_part(&part).unwrap(), encode_part(&back).unwrap(), "a part encodes the same twice");

        let whole = join(&[part.clone(), part.clone()]).unwrap();
        assert_eq!(whole.num_rows(), 6);
        let q = TableQuery { sort: Some(("score".into(), true)), limit: Some(2), offset: 1, ..TableQuery::default() };
        let (matched, page) = select(&whole, &q).unwrap();
        assert_eq!(matched, 6);
        assert_eq!(rows_json(&page), vec![json!([2, 2.0, "dog", null]), json!([1, 0.5, "cat", true])]);
        let q = TableQuery { filter: Some(("id".into(), FilterOp::Ge, "2".into())), ..TableQuery::default() };
        assert_eq!(select(&whole, &q).unwrap().0, 4);
        let q =
            TableQuery { filter: Some(("label".into(), FilterOp::Contains, "\"a\"".into())), ..TableQuery::default() };
        assert_eq!(rows_json(&select(&whole, &q).unwrap().1)[0], json!([3, null, "{\"a\":1}", false]));
        let bad = TableQuery { filter: Some(("id".into(), FilterOp::Eq, "x".into())), ..TableQuery::default() };
        assert!(select(&whole, &bad).is_err());
        let missing = TableQuery { sort: Some(("nope".into(), false)), ..TableQuery::default() };
        assert!(select(&whole, &missing).is_err());

        let short = from_json(&columns, &[vec![json!(1)]], None).unwrap_err();
        assert!(short.to_string().contains("rows[0]"), "{short}");
        let twice = from_json(&["a".into(), "a".into()], &[], None).unwrap_err();
        let next = from_json(
            &columns,
            &[vec![json!(4), json!(1), json!(null), json!(null)]],
            Some(&columns_json(&part.schema())),
        )
        .unwrap();
        assert_eq!(next.schema(), part.schema(), "an appended part keeps the types its values fit");
        assert!(twice.to_string().contains("columns[1]"), "{twice}");
        let ipc = ipc_stream(&part).unwrap();
        assert_eq!(from_ipc(&ipc).unwrap(), part);
        assert!(from_ipc(b"not arrow").is_err());
    }

    #[test]
    fn parts_with_other_columns_join_by_name_whatever_order_they_came_in() {
        let part = |columns: &[&str], row: Vec<Json>| {
            from_json(&columns.iter().map(|c| c.to_string()).collect::<Vec<_>>(), &[row], None).unwrap()
        };
        // A replace part at step 5 that arrived after an append at step 10 made against step 0.
        let replaced = part(&["name", "score"], vec![json!("a"), json!("high")]);
        let appended = part(&["id", "score"], vec![json!(7), json!(0.5)]);
        let whole = join(&[replaced, appended]).unwrap();
        let names: Vec<String> = whole.schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, vec!["name", "score", "id"]);
        assert_eq!(rows_json(&whole), vec![json!(["a", "high", null]), json!([null, "0.5", 7])]);
        assert_eq!(join(&[]).unwrap().num_rows(), 0);
    }
}
