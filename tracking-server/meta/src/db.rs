//! The SQL the metadata store runs, behind one small interface: statements with `?1`…`?N`
//! placeholders, parameters and rows as [`Value`]s. Code written against [`Db`] does not name
//! the database it runs on.

use crate::{Error, Result};
use rusqlite::types::{ToSqlOutput, ValueRef};

/// A parameter or a column value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// The SQL dialect a statement is written for, where the two databases differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Int(i64::from(v))
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Real(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_owned())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value::Text(v.clone())
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Value::Blob(v.to_vec())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// `vals![a, b, …]`: parameters for a statement, each converted with `Value::from`.
macro_rules! vals {
    ($($v:expr),* $(,)?) => { &[$($crate::db::Value::from($v)),*][..] };
}
pub(crate) use vals;

/// A column value read as a Rust type.
pub(crate) trait FromValue: Sized {
    fn from_value(v: &Value) -> Option<Self>;
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}

impl FromValue for bool {
    fn from_value(v: &Value) -> Option<Self> {
        i64::from_value(v).map(|i| i != 0)
    }
}

impl FromValue for f64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Real(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Blob(b) => Some(b.clone()),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// One result row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row(Vec<Value>);

impl Row {
    pub(crate) fn new(values: Vec<Value>) -> Row {
        Row(values)
    }

    pub(crate) fn values(&self) -> &[Value] {
        &self.0
    }

    /// Column `i` as `T`; a column of another type is stored metadata this build cannot read.
    pub(crate) fn get<T: FromValue>(&self, i: usize) -> Result<T> {
        let v = self.0.get(i).ok_or_else(|| Error::Corrupt(format!("a row has no column {i}")))?;
        T::from_value(v)
            .ok_or_else(|| Error::Corrupt(format!("column {i} holds {v:?}, not a {}", std::any::type_name::<T>())))
    }
}

/// A connection or an open transaction.
pub(crate) trait Db {
    /// The dialect statements for this database are written in.
    fn dialect(&self) -> Dialect;
    /// Runs a statement; answers how many rows it changed.
    fn exec(&self, sql: &str, params: &[Value]) -> Result<usize>;
    /// Every row a query answers.
    fn rows(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>>;
    /// Runs several statements with no parameters, separated by `;` (tests set up rows with it).
    #[cfg(test)]
    fn batch(&self, sql: &str) -> Result<()>;
    /// The first row a query answers, if any.
    fn row(&self, sql: &str, params: &[Value]) -> Result<Option<Row>> {
        Ok(self.rows(sql, params)?.into_iter().next())
    }

    /// Whether a query answers any row.
    fn exists(&self, sql: &str, params: &[Value]) -> Result<bool> {
        Ok(self.row(sql, params)?.is_some())
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Int(i) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
            Value::Real(f) => ToSqlOutput::Borrowed(ValueRef::Real(*f)),
            Value::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Value::Blob(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        })
    }
}

fn sqlite_value(v: ValueRef<'_>) -> Result<Value> {
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => Value::Text(
            std::str::from_utf8(t).map_err(|e| Error::Corrupt(format!("text that is not UTF-8: {e}")))?.to_owned(),
        ),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    })
}

impl Db for rusqlite::Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn exec(&self, sql: &str, params: &[Value]) -> Result<usize> {
        Ok(self.prepare_cached(sql)?.execute(rusqlite::params_from_iter(params))?)
    }

    #[cfg(test)]
    fn batch(&self, sql: &str) -> Result<()> {
        Ok(self.execute_batch(sql)?)
    }

    fn rows(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let mut stmt = self.prepare_cached(sql)?;
        let columns = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let mut row = Vec::with_capacity(columns);
            for i in 0..columns {
                row.push(sqlite_value(r.get_ref(i)?)?);
            }
            out.push(Row(row));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_go_in_and_come_back_as_their_types_and_a_wrong_type_is_corrupt() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (i INTEGER, f REAL, s TEXT, n TEXT)").unwrap();
        let none: Option<&str> = None;
        assert_eq!(conn.exec("INSERT INTO t VALUES (?1, ?2, ?3, ?4)", vals![7i64, 0.5, "é\"'", none]).unwrap(), 1);
        conn.exec("INSERT INTO t VALUES (?1, ?2, ?3, ?4)", vals![true, 2i64, String::from("x"), Some("y")]).unwrap();
        let rows = conn.rows("SELECT i, f, s, n FROM t ORDER BY i", vals![]).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].get::<i64>(0).unwrap(), rows[0].get::<bool>(0).unwrap()), (1, true));
        assert_eq!(rows[0].get::<f64>(1).unwrap(), 2.0, "an integer in a REAL column reads as a float");
        assert_eq!(rows[1].get::<f64>(1).unwrap(), 0.5);
        assert_eq!(rows[1].get::<String>(2).unwrap(), "é\"'");
        assert_eq!(rows[1].get::<Option<String>>(3).unwrap(), None);
        assert_eq!(rows[0].get::<Option<String>>(3).unwrap(), Some("y".to_owned()));
        assert!(matches!(rows[1].get::<String>(3), Err(Error::Corrupt(_))), "NULL is not text");
        assert!(matches!(rows[1].get::<i64>(1), Err(Error::Corrupt(_))), "a float is not an integer");
        assert!(matches!(rows[1].get::<i64>(9), Err(Error::Corrupt(_))));
        assert!(conn.exists("SELECT 1 FROM t WHERE s = ?1", vals!["x"]).unwrap());
        assert_eq!(conn.row("SELECT i FROM t WHERE s = ?1", vals!["none"]).unwrap(), None);
    }
}
