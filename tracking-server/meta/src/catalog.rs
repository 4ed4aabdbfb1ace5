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

fn file_row(r: &crate::db::Row) -> Result<MetricFileRow> {
    Ok(MetricFileRow {
        path: r.get(0)?,
        run_id: r.get(1)?,
        ord: r.get(2)?,
        rows: r.get(3)?,
        bytes: r.get(4)?,
        key_index: r.get(5)?,
    })
}

fn upload_counters(folder: &str) -> (String, String) {
    (format!("uploads_first/{folder}"), format!("uploads_last/{folder}"))
}

fn reserve(db: &dyn Db, name: &str, count: i64) -> Result<i64> {
    let next: i64 = db
        .row(
            "INSERT INTO store_state (name, value) VALUES (?1, 1 + ?2)
             ON CONFLICT (name) DO UPDATE SET value = store_state.value + ?2 RETURNING value",
            vals![name, count],
        )?
        .ok_or_else(|| Error::Corrupt(format!("counter {name} answered nothing")))?
        .get(0)?;
    Ok(next - count)
}

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
            rows.iter().map(file_row).collect()
        })
    }

    /// The files of one run, in `ord` order.
    pub fn run_files(&self, run_id: &str) -> Result<Vec<MetricFileRow>> {
        self.read(|db| {
            let rows = db.rows(
                "SELECT path, run_id, ord, rows, bytes, key_index FROM metric_files WHERE run_id = ?1 ORDER BY ord",
                vals![run_id],
            )?;
            rows.iter().map(file_row).collect()
        })
    }

    /// Whether the catalog names a file.
    pub fn has_metric_file(&self, path: &str) -> Result<bool> {
        self.read(|db| db.exists("SELECT 1 FROM metric_files WHERE path = ?1", vals![path]))
    }

    /// Takes the compaction lease of a run for `holder` until `until_ms`, if it is free, expired
    /// or already `holder`'s. Answers whether `holder` has it now.
    pub fn claim_compaction(&self, run_id: &str, holder: &str, until_ms: i64) -> Result<bool> {
        self.write(|tx| {
            let claimed = tx.row(
                "INSERT INTO compaction_leases (run_id, holder, until_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (run_id) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms
                 WHERE compaction_leases.holder = excluded.holder OR compaction_leases.until_ms < ?4
                 RETURNING holder",
                vals![run_id, holder, until_ms, now_ms()],
            )?;
            Ok(claimed.is_some())
        })
    }

    /// Gives a compaction lease back.
    pub fn release_compaction(&self, run_id: &str, holder: &str) -> Result<()> {
        self.write(|tx| {
            tx.exec("DELETE FROM compaction_leases WHERE run_id = ?1 AND holder = ?2", vals![run_id, holder])?;
            Ok(())
        })
    }

    /// Records files added and removed in one transaction, optionally advancing a counter of
    /// write-ahead-log segments whose points are all in files (`(counter, segment)`) and noting
    /// that a data folder no longer holds unpersisted points of some runs (`(folder, runs)`). A removed
    /// file the catalog no longer names (another server's compaction replaced it) fails the whole
    /// commit with `Error::Conflict`, so two compactions of the same files never both land.
    pub fn commit_files(
        &self,
        added: &[MetricFileRow],
        removed: &[String],
        wal_persisted_through: Option<(&str, u64)>,
        persisted: Option<(&str, &[String])>,
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
                if tx.exec("DELETE FROM metric_files WHERE path = ?1", vals![path])? == 0 {
                    return Err(Error::Conflict {
                        field: "path".into(),
                        reason: format!("metric file {path} was already replaced"),
                    });
                }
            }
            if let Some((counter, segment)) = wal_persisted_through {
                set_counter(tx, counter, segment as i64)?;
            }
            if let Some((folder, runs)) = persisted {
                for run in runs {
                    tx.exec(
                        "DELETE FROM unpersisted_runs WHERE run_id = ?1 AND folder_id = ?2",
                        vals![run, folder],
                    )?;
                }
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
        self.write(|db| reserve(db, name, count))
    }

    /// Reserves `count` metric file numbers for data folder `folder`'s next uploads and
    /// remembers them until its next reservation: files of these numbers that the catalog does
    /// not name are that folder's own leftovers, which its start-up sweep deletes however young.
    pub fn reserve_uploads(&self, folder: &str, count: i64) -> Result<i64> {
        let (first, last) = upload_counters(folder);
        self.write(|db| {
            let number = reserve(db, NEXT_FILE_NUMBER, count)?;
            set_counter(db, &first, number)?;
            set_counter(db, &last, number + count - 1)?;
            Ok(number)
        })
    }

    /// The file numbers of `folder`'s last reservation, first and last.
    pub fn uploads_reserved(&self, folder: &str) -> Result<Option<(i64, i64)>> {
        let (first, last) = upload_counters(folder);
        Ok(self.counter(&first)?.zip(self.counter(&last)?))
    }
}

#[cfg(test)]
mod tests {
    use super::MetricFileRow;

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
        assert_eq!(meta.uploads_reserved("a").unwrap(), None);
        let first = meta.reserve_uploads("a", 3).unwrap();
        assert_eq!(meta.reserve_uploads("b", 1).unwrap(), first + 3);
        assert_eq!(meta.uploads_reserved("a").unwrap(), Some((first, first + 2)));
        assert_eq!(meta.uploads_reserved("b").unwrap(), Some((first + 3, first + 3)));
    }

    #[test]
    fn a_compaction_lease_is_held_by_one_server_until_it_is_given_back_or_expires() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::test_store(dir.path());
        let later = crate::now_ms() + 60_000;
        assert!(meta.claim_compaction("r", "a", later).unwrap());
        assert!(!meta.claim_compaction("r", "b", later).unwrap(), "held by a");
        assert!(meta.claim_compaction("r", "a", later).unwrap(), "a renews its own");
        assert!(meta.claim_compaction("other", "b", later).unwrap(), "one lease per run");
        meta.release_compaction("r", "b").unwrap();
        assert!(!meta.claim_compaction("r", "b", later).unwrap(), "only the holder gives it back");
        meta.release_compaction("r", "a").unwrap();
        assert!(meta.claim_compaction("r", "b", crate::now_ms() - 1).unwrap());
        assert!(meta.claim_compaction("r", "a", later).unwrap(), "an expired lease is free");
    }

    /// Servers sharing the database fold their own points into a run's summaries; a server
    /// replaces them with a recomputation only while no other holds unpersisted points.
    #[test]
    fn summaries_from_several_servers_add_up_and_a_replacement_waits_for_their_files() {
        use trainlog_schema::{MetricKey, MetricSummary, ProjectName};
        let dir = tempfile::tempdir().unwrap();
        let url = crate::test_url(dir.path());
        // Two servers' connections to one database: each keeps summaries it read in memory.
        let meta = crate::MetaStore::connect(&url).unwrap();
        let other = crate::MetaStore::connect(&url).unwrap();
        let new = crate::NewRun { project: Some(ProjectName::parse("project", "p").unwrap()), ..Default::default() };
        let (run, _) = meta.create_run(&new).unwrap();
        let loss = MetricKey::parse("key", "loss").unwrap();
        let later = crate::now_ms() + 60_000;
        let of = |steps: &[i64], values: &[f64]| MetricSummary::of_sorted(steps, steps, values).unwrap();
        // Server a logs steps 0 and 1, then b steps 2 and 3 (and rewrites step 3), then a step 4.
        let rows = |s: MetricSummary, first_step: i64| vec![(run.id.clone(), loss.clone(), s, first_step)];
        meta.merge_summaries(&rows(of(&[0, 1], &[5.0, 4.0]), 0), "a", &[&run.id], later).unwrap();
        assert_eq!(meta.summaries(&run.id).unwrap()["loss"].count, 2);
        assert_eq!(other.summaries(&run.id).unwrap()["loss"].count, 2);
        let mut b_delta = of(&[2, 3], &[f64::NAN, 1.0]);
        b_delta.absorb(&MetricSummary::bound(3, 4, 0.5));
        other.merge_summaries(&rows(b_delta, 2), "b", &[&run.id], later).unwrap();
        assert_eq!(meta.summaries(&run.id).unwrap()["loss"].count, 4, "what another server wrote is read again");
        meta.merge_summaries(&rows(of(&[4], &[2.0]), 4), "a", &[&run.id], later).unwrap();
        assert!(meta.summaries_to_recompute(10).unwrap().is_empty(), "no step came twice");
        let stored = meta.summaries(&run.id).unwrap()["loss"];
        assert_eq!(
            (stored.last, stored.last_step, stored.min, stored.max, stored.count, stored.sum, stored.sum_count),
            (2.0, 4, 0.5, 5.0, 5, 12.0, 4)
        );

        let exact = of(&[0, 1, 2, 3, 4], &[5.0, 4.0, f64::NAN, 0.5, 2.0]);
        let replace = |folder| meta.replace_summaries(&run.id, &[(loss.clone(), exact)], folder, None).unwrap();
        assert!(!replace("a"), "b still holds points no file has");
        assert!(meta.others_hold_unpersisted(&run.id, "a").unwrap());
        meta.commit_files(&[], &[], None, Some(("b", &[run.id.to_string()]))).unwrap();
        assert!(!meta.others_hold_unpersisted(&run.id, "a").unwrap());
        assert!(meta.others_hold_unpersisted(&run.id, "b").unwrap(), "a still holds its own");
        assert!(replace("a"));
        let stored = meta.summaries(&run.id).unwrap()["loss"];
        assert_eq!((stored.count, stored.sum, stored.min), (5, 11.5, 0.5));
        // A hold past its time is a server's that never came back.
        meta.merge_summaries(&[], "c", &[&run.id], crate::now_ms() - 1).unwrap();
        assert!(replace("a"));

        // Points from step 4 on, folded in by a server that did not know step 4 was written:
        // the summary may count step 4 twice until it is recomputed.
        other.merge_summaries(&rows(of(&[4, 5], &[3.0, 1.0]), 4), "b", &[], later).unwrap();
        let flagged = meta.summaries_to_recompute(10).unwrap();
        assert_eq!(flagged, vec![(run.id.clone(), run.project_id, vec!["loss".to_owned()])]);
        assert!(replace("a"));
        assert!(meta.summaries_to_recompute(10).unwrap().is_empty(), "a replacement is exact");
    }

    #[test]
    fn a_commit_that_removes_a_file_already_replaced_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::test_store(dir.path());
        let file = |path: &str, ord| MetricFileRow {
            path: path.into(),
            run_id: "r".into(),
            ord,
            rows: 1,
            bytes: 1,
            key_index: "{}".into(),
        };
        meta.commit_files(&[file("f1", 1), file("f2", 2)], &[], None, None).unwrap();
        meta.commit_files(&[file("c1", 2)], &["f1".into(), "f2".into()], None, None).unwrap();
        let second = meta.commit_files(&[file("c2", 2)], &["f1".into(), "f2".into()], None, None);
        assert!(matches!(second, Err(crate::Error::Conflict { .. })), "{second:?}");
        let paths: Vec<String> = meta.run_files("r").unwrap().into_iter().map(|f| f.path).collect();
        assert_eq!(paths, ["c1"]);
        assert!(meta.has_metric_file("c1").unwrap());
        assert!(!meta.has_metric_file("f1").unwrap());
    }
}
