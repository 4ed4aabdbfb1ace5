//! The inbox's unread alerts: how far each user has read each project's alerts (the newest
//! alert id seen), and what that leaves unread.

use crate::db::vals;
use crate::{MetaStore, Result};
use std::collections::HashMap;

impl MetaStore {
    /// Notes that `user` has read project `project_id`'s alerts up to alert `up_to` (never back).
    pub fn mark_alerts_read(&self, user: &str, project_id: i64, up_to: i64) -> Result<i64> {
        self.write(|tx| {
            tx.exec(
                "INSERT INTO alert_reads (user_name, project_id, read_up_to) VALUES (?1, ?2, ?3)
                 ON CONFLICT (user_name, project_id) DO UPDATE SET read_up_to = CASE
                     WHEN excluded.read_up_to > alert_reads.read_up_to THEN excluded.read_up_to
                     ELSE alert_reads.read_up_to END",
                vals![user, project_id, up_to],
            )?;
            read_up_to_in(tx, user, project_id)
        })
    }

    /// The newest alert of the project `user` has read (0: none).
    pub fn alerts_read_up_to(&self, user: &str, project_id: i64) -> Result<i64> {
        self.read(|db| read_up_to_in(db, user, project_id))
    }

    /// Each project's alerts `user` has not read, by project id (projects with none left out).
    pub fn unread_alerts(&self, user: &str) -> Result<HashMap<i64, i64>> {
        self.read(|db| {
            db.rows(
                "SELECT a.project_id, CAST(COUNT(*) AS BIGINT) FROM alerts a
                 LEFT JOIN alert_reads r ON r.project_id = a.project_id AND r.user_name = ?1
                 WHERE a.id > COALESCE(r.read_up_to, 0) GROUP BY a.project_id",
                vals![user],
            )?
            .iter()
            .map(|r| Ok((r.get(0)?, r.get(1)?)))
            .collect()
        })
    }
}

fn read_up_to_in(db: &dyn crate::db::Db, user: &str, project_id: i64) -> Result<i64> {
    Ok(db
        .row("SELECT read_up_to FROM alert_reads WHERE user_name = ?1 AND project_id = ?2", vals![user, project_id])?
        .map(|r| r.get::<i64>(0))
        .transpose()?
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use crate::alerts::NewAlert;
    use crate::NewRun;
    use trainlog_schema::{ProjectName, RunId};

    #[test]
    fn each_user_reads_a_projects_alerts_on_their_own_and_never_back() {
        let dir = tempfile::tempdir().expect("dir");
        let m = crate::test_store(dir.path());
        let run = RunId::parse("id", "noisy").expect("id");
        let new = NewRun {
            id: Some(run.clone()),
            project: Some(ProjectName::parse("p", "inbox").expect("name")),
            ..NewRun::default()
        };
        m.create_run_joining(&new).expect("run");
        let project = m.run_head(&run).expect("head").project_id;
        let alert = |title: &str| NewAlert { level: "warn".into(), title: title.into(), ..NewAlert::default() };
        let (first, _) = m.record_run_alert(&run, &alert("one")).expect("alert");
        m.record_run_alert(&run, &alert("two")).expect("alert");
        assert_eq!(m.unread_alerts("ana").expect("unread").get(&project), Some(&2));
        assert_eq!(m.mark_alerts_read("ana", project, first.id).expect("read"), first.id);
        assert_eq!(m.unread_alerts("ana").expect("unread").get(&project), Some(&1));
        assert_eq!(m.unread_alerts("bo").expect("unread").get(&project), Some(&2), "bo read nothing");
        assert_eq!(m.mark_alerts_read("ana", project, 0).expect("not back"), first.id);
        m.mark_alerts_read("ana", project, i64::MAX).expect("all");
        assert_eq!(m.unread_alerts("ana").expect("unread").get(&project), None);
    }
}
