//! The PostgreSQL side of [`Db`]: a pool of connections (r2d2), each keeping the statements it
//! prepared, and parameters converted to the type PostgreSQL inferred for each placeholder.

use crate::db::{Db, Dialect, Row, Value};
use crate::{Error, Result};
use postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};
use postgres::{Client, GenericClient, IsolationLevel, NoTls, Statement};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::DerefMut;
use std::str::FromStr;
use std::time::Duration;

/// Prepared statements kept per connection; past this many the cache starts again, since
/// searches make statements that are rarely seen twice.
const MAX_CACHED_STATEMENTS: usize = 512;
/// How many times a transaction runs again after a serialization failure, a deadlock or a
/// unique violation raced by another server (the next try sees the winner's row).
const MAX_RETRIES: u32 = 8;

pub(crate) struct Connection {
    client: Client,
    statements: HashMap<String, Statement>,
}

struct Manager {
    config: postgres::Config,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Connection, postgres::Error> {
        Ok(Connection { client: self.config.connect(NoTls)?, statements: HashMap::new() })
    }

    fn is_valid(&self, conn: &mut Connection) -> Result<(), postgres::Error> {
        conn.client.simple_query("").map(|_| ())
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        conn.client.is_closed()
    }
}

/// A pool of connections to one PostgreSQL database.
pub(crate) struct Pool {
    /// Always `Some` but while dropping.
    pool: Option<r2d2::Pool<Manager>>,
}

impl Drop for Pool {
    /// Closing a connection blocks on the driver's own runtime, which must not happen on an async
    /// executor's thread (a server drops the store there when it stops): close them on a thread
    /// of their own.
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let _ = std::thread::spawn(move || drop(pool)).join();
        }
    }
}

impl Pool {
    /// Connects to `url` (`postgres://user:password@host:port/database`); fails when no
    /// connection can be made within `timeout`.
    pub(crate) fn connect(url: &str, max_connections: u32, timeout: Duration) -> Result<Pool> {
        let config: postgres::Config =
            url.parse().map_err(|e| Error::Invalid { field: "meta".into(), reason: format!("{e}") })?;
        let pool = r2d2::Pool::builder()
            .max_size(max_connections)
            .min_idle(Some(1))
            .connection_timeout(timeout)
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build(Manager { config })
            .map_err(|e| Error::Unavailable(format!("PostgreSQL: {e}")))?;
        Ok(Pool { pool: Some(pool) })
    }

    fn get(&self) -> Result<r2d2::PooledConnection<Manager>> {
        let pool = self.pool.as_ref().ok_or_else(|| Error::Unavailable("the pool is closing".into()))?;
        pool.get().map_err(|e| Error::Unavailable(format!("PostgreSQL: {e}")))
    }

    /// Runs `f` in a transaction, committed when it succeeds; again when PostgreSQL asks.
    pub(crate) fn write<T>(&self, f: &mut dyn FnMut(&dyn Db) -> Result<T>) -> Result<T> {
        let mut conn = self.get()?;
        let mut attempt = 0;
        loop {
            let Connection { client, statements } = &mut *conn;
            let out = (|| {
                let mut tx = client.transaction()?;
                let out = f(&PgDb { client: RefCell::new(&mut tx), statements: RefCell::new(&mut *statements) })?;
                tx.commit()?;
                Ok(out)
            })();
            match out {
                Err(Error::Postgres(e)) if attempt < MAX_RETRIES && retryable(&e) => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(u64::from(attempt) * 3));
                }
                other => return other,
            }
        }
    }

    /// Runs `f` outside a transaction: each statement sees the latest committed state.
    pub(crate) fn read<T>(&self, f: &mut dyn FnMut(&dyn Db) -> Result<T>) -> Result<T> {
        let mut conn = self.get()?;
        let Connection { client, statements } = &mut *conn;
        f(&PgDb { client: RefCell::new(client), statements: RefCell::new(statements) })
    }

    /// Runs `f` in a read-only transaction that sees one snapshot.
    pub(crate) fn snapshot<T>(&self, f: &mut dyn FnMut(&dyn Db) -> Result<T>) -> Result<T> {
        let mut conn = self.get()?;
        let Connection { client, statements } = &mut *conn;
        let mut tx =
            client.build_transaction().isolation_level(IsolationLevel::RepeatableRead).read_only(true).start()?;
        let out = f(&PgDb { client: RefCell::new(&mut tx), statements: RefCell::new(statements) })?;
        tx.commit()?;
        Ok(out)
    }

    /// A pooled connection's client, for work that runs its own statements (migrations).
    pub(crate) fn with_client<T>(&self, f: impl FnOnce(&mut Client) -> Result<T>) -> Result<T> {
        let mut conn = self.get()?;
        f(&mut conn.client)
    }
}

/// Creates the database `name` on the server `admin_url` reaches (a name of letters, digits and
/// underscores); answers the URL of the new database.
pub fn create_database(admin_url: &str, name: &str) -> Result<String> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(Error::Invalid { field: "name".into(), reason: "letters, digits and underscores".into() });
    }
    let mut client = postgres::Config::from_str(admin_url)
        .map_err(|e| Error::Invalid { field: "meta".into(), reason: e.to_string() })?
        .connect(NoTls)?;
    client.batch_execute(&format!("CREATE DATABASE \"{name}\""))?;
    let mut url =
        url::Url::parse(admin_url).map_err(|e| Error::Invalid { field: "meta".into(), reason: e.to_string() })?;
    url.set_path(name);
    Ok(url.to_string())
}

fn retryable(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    e.code().is_some_and(|c| {
        *c == SqlState::T_R_SERIALIZATION_FAILURE
            || *c == SqlState::T_R_DEADLOCK_DETECTED
            || *c == SqlState::UNIQUE_VIOLATION
    })
}

/// Rewrites `?N` placeholders as PostgreSQL's `$N`, leaving quoted text and names alone.
pub(crate) fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    let mut unnumbered = 0;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '?') => {
                out.push('$');
                if !chars.peek().is_some_and(char::is_ascii_digit) {
                    unnumbered += 1;
                    out.push_str(&unnumbered.to_string());
                }
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

struct PgDb<'a, C> {
    client: RefCell<C>,
    statements: RefCell<&'a mut HashMap<String, Statement>>,
}

impl<C: DerefMut<Target: GenericClient>> PgDb<'_, C> {
    fn statement(&self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let statement = self.client.borrow_mut().prepare(&numbered_placeholders(sql))?;
        let mut cache = self.statements.borrow_mut();
        if cache.len() >= MAX_CACHED_STATEMENTS {
            cache.clear();
        }
        cache.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

fn params(values: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    values.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

/// PostgreSQL's text cannot hold the NUL character (SQLite's can): a value with one is refused
/// as invalid, never sent to fail there as an internal error.
fn refuse_nul(values: &[Value]) -> Result<()> {
    if values.iter().any(|v| matches!(v, Value::Text(s) if s.contains('\0'))) {
        return Err(Error::Invalid {
            field: "text".into(),
            reason: "a text holds the NUL character (\\u0000), which the PostgreSQL metadata store cannot keep".into(),
        });
    }
    Ok(())
}

impl<C: DerefMut<Target: GenericClient>> Db for PgDb<'_, C> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn exec(&self, sql: &str, values: &[Value]) -> Result<usize> {
        refuse_nul(values)?;
        let statement = self.statement(sql)?;
        Ok(self.client.borrow_mut().execute(&statement, &params(values))? as usize)
    }

    #[cfg(test)]
    fn batch(&self, sql: &str) -> Result<()> {
        Ok(self.client.borrow_mut().batch_execute(sql)?)
    }

    fn rows(&self, sql: &str, values: &[Value]) -> Result<Vec<Row>> {
        refuse_nul(values)?;
        let statement = self.statement(sql)?;
        let rows = self.client.borrow_mut().query(&statement, &params(values))?;
        rows.iter()
            .map(|r| Ok(Row::new((0..r.len()).map(|i| r.try_get::<_, Value>(i)).collect::<Result<_, _>>()?)))
            .collect()
    }
}

type BoxError = Box<dyn std::error::Error + Sync + Send>;

impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, BoxError> {
        match (self, ty) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (Value::Int(i), &Type::INT8) => i.to_sql(ty, out),
            (Value::Int(i), &Type::INT4) => i32::try_from(*i)?.to_sql(ty, out),
            (Value::Int(i), &Type::INT2) => i16::try_from(*i)?.to_sql(ty, out),
            (Value::Int(i), &Type::FLOAT8) => (*i as f64).to_sql(ty, out),
            (Value::Int(i), &Type::BOOL) => (*i != 0).to_sql(ty, out),
            // SQLite keeps NaN as NULL; so does this side, so both answer alike.
            (Value::Real(f), &Type::FLOAT8) if f.is_nan() => Ok(IsNull::Yes),
            (Value::Real(f), &Type::FLOAT8) => f.to_sql(ty, out),
            (Value::Real(f), &Type::INT8) if f.fract() == 0.0 && f.abs() < 9.0e15 => (*f as i64).to_sql(ty, out),
            (Value::Text(s), &Type::TEXT | &Type::VARCHAR | &Type::BPCHAR | &Type::NAME | &Type::UNKNOWN) => {
                s.as_str().to_sql(&Type::TEXT, out)
            }
            (Value::Blob(b), &Type::BYTEA) => b.as_slice().to_sql(ty, out),
            (v, ty) => Err(format!("{v:?} cannot be bound where PostgreSQL expects {ty}").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Value {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Value, BoxError> {
        Ok(match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::Int(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::BYTEA => Value::Blob(Vec::<u8>::from_sql(ty, raw)?),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                Value::Text(String::from_sql(&Type::TEXT, raw)?)
            }
            ref other => return Err(format!("a column of type {other}, which the store does not read").into()),
        })
    }

    fn from_sql_null(_: &Type) -> Result<Value, BoxError> {
        Ok(Value::Null)
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_outside_quotes() {
        assert_eq!(
            numbered_placeholders("SELECT ?1, ?12 FROM t WHERE a = '?3' AND \"?\" = ?2"),
            "SELECT $1, $12 FROM t WHERE a = '?3' AND \"?\" = $2"
        );
        assert_eq!(numbered_placeholders("a = ? AND b = ?"), "a = $1 AND b = $2");
        assert_eq!(numbered_placeholders("x = 'it''s ?' OR y = ?4"), "x = 'it''s ?' OR y = $4");
    }
}
