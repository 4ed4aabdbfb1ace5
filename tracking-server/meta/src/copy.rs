//! Copying an installation's metadata from one database into another, empty one (SQLite to
//! PostgreSQL, or back): every table, in the order the migrations create them, read in pages
//! of one snapshot and written in one transaction.

use crate::db::{Db, Dialect, Value};
use crate::runs::{insert_rows, placeholders};
use crate::{Error, MetaStore, MetaUrl, Result};

/// Rows read from the source per query.
const PAGE_ROWS: usize = 5_000;
/// Tables of one database only, and the report's days added up in advance, which the copied rows
/// of the report mark to be added up again in the destination.
const NOT_COPIED: &[&str] = &[
    "revision_clock",
    "schema_version",
    "compaction_leases",
    "unpersisted_runs",
    "usage_rollup",
    "usage_rollup_dirty",
];

/// A table as this build's migrations make it: the columns a row is written with (generated
/// ones left out) and its primary key, which orders the pages.
struct Table {
    name: String,
    columns: Vec<String>,
    key: Vec<String>,
}

/// The tables of the current schema, in the order they are created.
fn tables() -> Result<Vec<Table>> {
    let mut conn = rusqlite::Connection::open_in_memory()?;
    crate::migrate::apply_sqlite(&mut conn)?;
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::new();
    for name in names.into_iter().filter(|n| !NOT_COPIED.contains(&n.as_str())) {
        // (column, position in the primary key, hidden): hidden columns are generated.
        let info: Vec<(String, i64, i64)> = conn
            .prepare(&format!("SELECT name, pk, hidden FROM pragma_table_xinfo('{name}')"))?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let quote = |c: &str| format!("\"{c}\"");
        let columns: Vec<String> = info.iter().filter(|c| c.2 == 0).map(|c| quote(&c.0)).collect();
        let mut key: Vec<&(String, i64, i64)> = info.iter().filter(|c| c.1 > 0).collect();
        key.sort_by_key(|c| c.1);
        let key = key.iter().map(|c| quote(&c.0)).collect::<Vec<_>>();
        if key.is_empty() {
            return Err(Error::Corrupt(format!("table {name} has no primary key to copy it by")));
        }
        out.push(Table { name, columns, key });
    }
    Ok(out)
}

/// Copies every row of `from` into `to`, whose schema is made or brought up to date first and
/// which must hold no projects, runs, users or models. Answers the rows copied per table.
pub fn copy(from: &MetaUrl, to: &MetaUrl) -> Result<Vec<(String, u64)>> {
    if from == to {
        return Err(Error::Invalid {
            field: "to".into(),
            reason: "the source and the destination are the same".into(),
        });
    }
    let tables = tables()?;
    let source = MetaStore::connect(from)?;
    let destination = MetaStore::connect(to)?;
    destination.read(|db| {
        for table in ["projects", "runs", "users", "registered_models", "metric_files"] {
            if db.exists(&format!("SELECT 1 FROM {table} LIMIT 1"), &[])? {
                return Err(Error::Conflict {
                    field: "to".into(),
                    reason: format!("the destination already holds {table}; copy into an empty database"),
                });
            }
        }
        Ok(())
    })?;
    source.snapshot(|src| {
        destination.write(|dst| {
            for table in tables.iter().rev() {
                dst.exec(&format!("DELETE FROM {}", table.name), &[])?;
            }
            let mut copied = Vec::with_capacity(tables.len());
            for table in &tables {
                copied.push((table.name.clone(), copy_table(src, dst, table)?));
            }
            if dst.dialect() == Dialect::Postgres {
                restart_identities(dst)?;
            }
            // The spend ledger's rows have no run to mark their day: marked here.
            dst.exec(
                &format!(
                    "INSERT INTO usage_rollup_dirty (project_id, day, generation)
                     SELECT DISTINCT l.project_id, {}, 1 FROM purged_runs l JOIN run_usage u ON u.run_id = l.run_id
                     WHERE l.start_ms IS NOT NULL
                     ON CONFLICT (project_id, day) DO UPDATE SET generation = usage_rollup_dirty.generation + 1",
                    crate::report::day_of_sql("l.start_ms")
                ),
                &[],
            )?;
            Ok(copied)
        })
    })
}

fn copy_table(src: &dyn Db, dst: &dyn Db, table: &Table) -> Result<u64> {
    let columns = table.columns.join(", ");
    let order = table.key.join(", ");
    let key_at: Vec<usize> =
        table.key.iter().map(|k| table.columns.iter().position(|c| c == k).unwrap_or(usize::MAX)).collect();
    if key_at.contains(&usize::MAX) {
        return Err(Error::Corrupt(format!("table {}: a key column is generated", table.name)));
    }
    let first = format!("SELECT {columns} FROM {} ORDER BY {order} LIMIT {PAGE_ROWS}", table.name);
    let next = format!(
        "SELECT {columns} FROM {} WHERE ({order}) > ({}) ORDER BY {order} LIMIT {PAGE_ROWS}",
        table.name,
        placeholders(1, table.key.len())
    );
    let head = format!("INSERT INTO {} ({columns})", table.name);
    let mut after: Option<Vec<Value>> = None;
    let mut copied = 0u64;
    loop {
        let rows = match &after {
            None => src.rows(&first, &[])?,
            Some(key) => src.rows(&next, key)?,
        };
        if rows.is_empty() {
            return Ok(copied);
        }
        let values: Vec<Vec<Value>> = rows.iter().map(|r| r.values().to_vec()).collect();
        insert_rows(dst, &head, "", table.columns.len(), &values)?;
        copied += values.len() as u64;
        let last = values.last().map(|v| key_at.iter().map(|&i| v[i].clone()).collect());
        if values.len() < PAGE_ROWS {
            return Ok(copied);
        }
        after = last;
    }
}

/// Moves each identity column's sequence past the ids copied in, so new rows get new ids.
fn restart_identities(dst: &dyn Db) -> Result<()> {
    let identities = dst.rows(
        "SELECT CAST(table_name AS TEXT), CAST(column_name AS TEXT) FROM information_schema.columns
         WHERE is_identity = 'YES' AND table_schema = current_schema()",
        &[],
    )?;
    for r in identities {
        let (table, column): (String, String) = (r.get(0)?, r.get(1)?);
        dst.row(
            &format!(
                "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), COALESCE(MAX({column}), 0) + 1, false) FROM {table}"
            ),
            &[],
        )?;
    }
    Ok(())
}
