//! Stopping a run from outside it: a stop asked of a running run is kept on its row, and its
//! processes see it in their next heartbeat's answer and end the run `killed`.

use crate::db::vals;
use crate::{now_ms, Error, MetaStore, Result};
use trainlog_schema::RunId;

/// A stop asked of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRequest {
    pub time_ms: i64,
    /// Who asked (the user's name; `someone` on a server without --auth).
    pub by: String,
    pub reason: String,
}

impl MetaStore {
    /// Asks running run `run` to stop; answers the request (the earlier one when it was asked
    /// already). A run that is not running is a conflict: there is nothing to stop.
    pub fn request_stop(&self, run: &RunId, by: &str, reason: &str) -> Result<StopRequest> {
        self.in_run_tx(run, |tx| {
            let row = tx
                .row("SELECT status, stop_ms, stop_by, stop_reason FROM runs WHERE id = ?1", vals![run.as_str()])?
                .ok_or_else(|| crate::not_found(format!("run {run}")))?;
            let status: String = row.get(0)?;
            if status != "running" {
                return Err(Error::Conflict {
                    field: "id".into(),
                    reason: format!("run {run} is {status}, not running: there is nothing to stop"),
                });
            }
            if let Some(time_ms) = row.get::<Option<i64>>(1)? {
                let by = row.get::<Option<String>>(2)?.unwrap_or_default();
                return Ok(StopRequest { time_ms, by, reason: row.get::<Option<String>>(3)?.unwrap_or_default() });
            }
            let time_ms = now_ms();
            tx.exec(
                "UPDATE runs SET stop_ms = ?2, stop_by = ?3, stop_reason = ?4 WHERE id = ?1",
                vals![run.as_str(), time_ms, by, reason],
            )?;
            Ok(StopRequest { time_ms, by: by.to_owned(), reason: reason.to_owned() })
        })
    }

    /// The stop asked of a run, if any.
    pub fn stop_request(&self, run: &RunId) -> Result<Option<StopRequest>> {
        self.read(|db| {
            let Some(row) = db.row(
                "SELECT stop_ms, stop_by, stop_reason FROM runs WHERE id = ?1 AND stop_ms IS NOT NULL",
                vals![run.as_str()],
            )?
            else {
                return Ok(None);
            };
            Ok(Some(StopRequest {
                time_ms: row.get(0)?,
                by: row.get::<Option<String>>(1)?.unwrap_or_default(),
                reason: row.get::<Option<String>>(2)?.unwrap_or_default(),
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewRun;
    use trainlog_schema::ProjectName;

    #[test]
    fn a_running_run_is_asked_once_and_an_ended_one_cannot_be() {
        let dir = tempfile::tempdir().expect("dir");
        let m = crate::test_store(dir.path());
        let run = RunId::parse("id", "to-stop").expect("id");
        let new = NewRun {
            id: Some(run.clone()),
            project: Some(ProjectName::parse("project", "p").expect("name")),
            ..NewRun::default()
        };
        m.create_run_joining(&new).expect("run");
        assert_eq!(m.stop_request(&run).expect("none"), None);
        let asked = m.request_stop(&run, "ana", "idle GPUs").expect("stop");
        assert_eq!((asked.by.as_str(), asked.reason.as_str()), ("ana", "idle GPUs"));
        let again = m.request_stop(&run, "bo", "").expect("again");
        assert_eq!(again, asked, "the first request stands");
        assert_eq!(m.stop_request(&run).expect("read"), Some(asked));
        let other = RunId::parse("id", "ended").expect("id");
        m.create_run_joining(&NewRun { id: Some(other.clone()), ..new }).expect("run");
        m.set_status(&other, trainlog_schema::RunStatus::Finished, None).expect("finish");
        assert!(matches!(m.request_stop(&other, "ana", ""), Err(Error::Conflict { .. })));
    }
}
