//! A table part's JSON rows and column names, counted while they parse: parsing stops at the
//! first row, value or column past the limits, before the rest of the body becomes values.

use serde::de::{DeserializeSeed, Deserializer, Error, SeqAccess, Visitor};
use serde_json::Value as Json;
use std::fmt;
use trainlog_schema::limits::{MAX_TABLE_COLUMNS, MAX_TABLE_PART_ROWS};
use trainlog_store::media::table::MAX_TABLE_PART_CELLS;

/// Rows of values, at most `MAX_TABLE_PART_ROWS` rows of `MAX_TABLE_COLUMNS` values and
/// `MAX_TABLE_PART_CELLS` values in all.
pub(crate) fn bounded_rows<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<Json>>, D::Error> {
    d.deserialize_seq(Rows)
}

/// Column names, at most `MAX_TABLE_COLUMNS`.
pub(crate) fn bounded_columns<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_seq(Columns)
}

struct Rows;

impl<'de> Visitor<'de> for Rows {
    type Value = Vec<Vec<Json>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of rows, each an array of values")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut rows: Vec<Vec<Json>> = Vec::new();
        let mut cells = 0usize;
        while let Some(row) = seq.next_element_seed(Row { cells_before: cells })? {
            if rows.len() == MAX_TABLE_PART_ROWS {
                return Err(A::Error::custom(format!(
                    "a part of a table holds at most {MAX_TABLE_PART_ROWS} rows; send more as appended parts"
                )));
            }
            cells += row.len();
            rows.push(row);
        }
        Ok(rows)
    }
}

/// One row, knowing how many values the rows before it held.
struct Row {
    cells_before: usize,
}

impl<'de> DeserializeSeed<'de> for Row {
    type Value = Vec<Json>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Row {
    type Value = Vec<Json>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a row: an array of values, one per column")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut values = Vec::new();
        while let Some(value) = seq.next_element::<Json>()? {
            if values.len() == MAX_TABLE_COLUMNS {
                return Err(A::Error::custom(format!(
                    "a row holds at most {MAX_TABLE_COLUMNS} values, one per column"
                )));
            }
            if self.cells_before + values.len() == MAX_TABLE_PART_CELLS {
                return Err(A::Error::custom(format!(
                    "a part of a table holds at most {MAX_TABLE_PART_CELLS} values (rows × columns); send more as appended parts"
                )));
            }
            values.push(value);
        }
        Ok(values)
    }
}

struct Columns;

impl<'de> Visitor<'de> for Columns {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of column names")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut names = Vec::new();
        while let Some(name) = seq.next_element::<String>()? {
            if names.len() == MAX_TABLE_COLUMNS {
                return Err(A::Error::custom(format!("a table has at most {MAX_TABLE_COLUMNS} columns")));
            }
            names.push(name);
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Part {
        #[serde(deserialize_with = "bounded_columns")]
        columns: Vec<String>,
        #[serde(deserialize_with = "bounded_rows")]
        rows: Vec<Vec<Json>>,
    }

    #[test]
    fn rows_and_columns_past_their_limits_stop_the_parse_naming_the_limit() {
        let ok: Part = serde_json::from_str(r#"{"columns": ["a", "b"], "rows": [[1, "x"], [null, 2.5]]}"#).unwrap();
        assert_eq!((ok.columns.len(), ok.rows.len()), (2, 2));
        let wide = format!(r#"{{"columns": [], "rows": [[{}]]}}"#, vec!["0"; MAX_TABLE_COLUMNS + 1].join(","));
        let err = serde_json::from_str::<Part>(&wide).unwrap_err().to_string();
        assert!(err.contains(&format!("at most {MAX_TABLE_COLUMNS} values")), "{err}");
        let long = format!(r#"{{"columns": ["a"], "rows": [{}]}}"#, vec!["[]"; MAX_TABLE_PART_ROWS + 1].join(","));
        let err = serde_json::from_str::<Part>(&long).unwrap_err().to_string();
        assert!(err.contains(&format!("at most {MAX_TABLE_PART_ROWS} rows")), "{err}");
        let names = format!(r#"{{"columns": [{}], "rows": []}}"#, vec!["\"c\""; MAX_TABLE_COLUMNS + 1].join(","));
        let err = serde_json::from_str::<Part>(&names).unwrap_err().to_string();
        assert!(err.contains(&format!("at most {MAX_TABLE_COLUMNS} columns")), "{err}");
    }

    #[test]
    fn the_cells_of_all_rows_together_are_limited() {
        let row = format!("[{}]", vec!["0"; MAX_TABLE_COLUMNS].join(","));
        let rows = MAX_TABLE_PART_CELLS / MAX_TABLE_COLUMNS + 1;
        let body = format!(r#"{{"columns": ["a"], "rows": [{}]}}"#, vec![row.as_str(); rows].join(","));
        let err = serde_json::from_str::<Part>(&body).unwrap_err().to_string();
        assert!(err.contains(&format!("at most {MAX_TABLE_PART_CELLS} values")), "{err}");
    }
}
