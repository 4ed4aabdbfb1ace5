//! The catalog of metric points files in the object store, and the metrics store's counters.

use crate::db::{vals, Db};
use crate::{now_ms, Error, MetaStore, Result};

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

/// The counter of a data folder made before folders had ids; a folder's own counter is
/// `wal_persisted_through/<folder id>` (see [`wal_counter`]).
pub const WAL_PERSISTED_THROUGH: &str = "wal_persisted_through";

/// The counter of write-ahead-log segments persisted from the data folder `folder_id`: each
/// server sharing a database keeps its own log, so each has its own counter.
pub fn wal_counter(folder_id: &str) -> String {
    format!("{WAL_PERSISTED_THROUGH}/{folder_id}")
}
pub const NEXT_FILE_NUMBER: &str = "next_file_number";

fn set_counter(tx: &dyn Db, name: &str, value: i64) -> Result<()> {
    tx.exec(
        "INSERT INTO store_state (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        vals![name, value],
    )?;
    Ok(())
}

impl MetaStore {
    pub fn metric_files(&self) -> Result<Vec<MetricFileRow>> {
        self.read(|db| {
            let rows = db.rows(
                "SELECT path, run_id, ord, rows, bytes, key_index FROM metric_files ORDER BY run_id, ord",
                vals![],
            )?;
            rows.iter()
                .map(|r| {
                    Ok(MetricFileRow {
                        path: r.get(0)?,
                        run_id: r.get(1)?,
                        ord: r.get(2)?,
                        rows: r.get(3)?,
                        bytes: r.get(4)?,
                        key_index: r.get(5)?,
                    })
                })
                .collect()
        })
    }

    /// Records files added and removed in one transaction, optionally advancing a counter of
    /// write-ahead-log segments whose points are all in files (`(counter, segment)`).
    pub fn commit_files(
        &self,
        added: &[MetricFileRow],
        removed: &[String],
        wal_persisted_through: Option<(&str, u64)>,
    ) -> Result<()> {
        self.write(|tx| {
            let now = now_ms();
            for f in added {
                tx.exec(
                    "INSERT INTO metric_files (path, run_id, ord, rows, bytes, key_index, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    vals![&f.path, &f.run_id, f.ord, f.rows, f.bytes, &f.key_index, now],
                )?;
            }
            for path in removed {
                tx.exec("DELETE FROM metric_files WHERE path = ?1", vals![path])?;
            }
            if let Some((counter, segment)) = wal_persisted_through {
                set_counter(tx, counter, segment as i64)?;
            }
            Ok(())
        })
    }

    /// Sets a counter.
    pub fn set_counter(&self, name: &str, value: i64) -> Result<()> {
        self.write(|tx| set_counter(tx, name, value))
    }

    pub fn counter(&self, name: &str) -> Result<Option<i64>> {
        self.read(|db| {
            db.row("SELECT value FROM store_state WHERE name = ?1", vals![name])?.map(|r| r.get(0)).transpose()
        })
    }

    /// Reserves `count` consecutive numbers from the named counter (which starts at 1) and
    /// answers the first. One statement, so writers sharing the database never get the same
    /// numbers.
    pub fn reserve(&self, name: &str, count: i64) -> Result<i64> {
        self.write(|db| {
            let next: i64 = db
                .row(
                    "INSERT INTO store_state (name, value) VALUES (?1, 1 + ?2)
                     ON CONFLICT (name) DO UPDATE SET value = store_state.value + ?2 RETURNING value",
                    vals![name, count],
                )?
                .ok_or_else(|| Error::Corrupt(format!("counter {name} answered nothing")))?
                .get(0)?;
            Ok(next - count)
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn reserved_numbers_follow_each_other_from_one() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::test_store(dir.path());
        assert_eq!(meta.counter("n").unwrap(), None);
        assert_eq!(meta.reserve("n", 3).unwrap(), 1);
        assert_eq!(meta.reserve("n", 1).unwrap(), 4);
        assert_eq!(meta.reserve("n", 2).unwrap(), 5);
        assert_eq!(meta.counter("n").unwrap(), Some(7));
        assert_eq!(meta.reserve("other", 1).unwrap(), 1);
    }
}
