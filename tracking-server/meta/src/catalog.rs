//! The catalog of metric points files in the object store, and the metrics store's counters.

use crate::{now_ms, MetaStore, Result};
use rusqlite::{params, OptionalExtension};

/// One metric points file. `key_index` is the JSON index stored in the file's metadata too.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricFileRow {
    pub path: String,
    pub run_id: String,
    pub ord: i64,
    pub rows: i64,
    pub bytes: i64,
    pub key_index: String,
}

pub const WAL_PERSISTED_THROUGH: &str = "wal_persisted_through";
pub const NEXT_FILE_NUMBER: &str = "next_file_number";

impl MetaStore {
    pub fn metric_files(&self) -> Result<Vec<MetricFileRow>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT path, run_id, ord, rows, bytes, key_index FROM metric_files ORDER BY run_id, ord",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(MetricFileRow {
                    path: r.get(0)?,
                    run_id: r.get(1)?,
                    ord: r.get(2)?,
                    rows: r.get(3)?,
                    bytes: r.get(4)?,
                    key_index: r.get(5)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Records files added and removed in one transaction, optionally advancing the counter of
    /// write-ahead-log segments whose points are all in files.
    pub fn commit_files(
        &self,
        added: &[MetricFileRow],
        removed: &[String],
        wal_persisted_through: Option<u64>,
    ) -> Result<()> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO metric_files (path, run_id, ord, rows, bytes, key_index, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?;
                let now = now_ms();
                for f in added {
                    insert.execute(params![f.path, f.run_id, f.ord, f.rows, f.bytes, f.key_index, now])?;
                }
                let mut delete = tx.prepare_cached("DELETE FROM metric_files WHERE path = ?1")?;
                for path in removed {
                    delete.execute([path])?;
                }
            }
            if let Some(segment) = wal_persisted_through {
                set_counter(&tx, WAL_PERSISTED_THROUGH, segment as i64)?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    pub fn counter(&self, name: &str) -> Result<Option<i64>> {
        self.read(|conn| {
            Ok(conn.query_row("SELECT value FROM store_state WHERE name = ?1", [name], |r| r.get(0)).optional()?)
        })
    }

    /// Reserves `count` consecutive numbers from the named counter and answers the first.
    pub fn reserve(&self, name: &str, count: i64) -> Result<i64> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let first: i64 = tx
                .query_row("SELECT value FROM store_state WHERE name = ?1", [name], |r| r.get(0))
                .optional()?
                .unwrap_or(1);
            set_counter(&tx, name, first + count)?;
            tx.commit()?;
            Ok(first)
        })
    }
}

fn set_counter(tx: &rusqlite::Transaction<'_>, name: &str, value: i64) -> Result<()> {
    tx.execute(
        "INSERT INTO store_state (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        params![name, value],
    )?;
    Ok(())
}
