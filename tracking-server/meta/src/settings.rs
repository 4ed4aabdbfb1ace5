//! Project settings a project admin changes: for now whether the runs of the project keep the
//! uncommitted git diff their clients record.

use crate::db::vals;
use crate::{not_found, MetaStore, Result};

/// A project's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProjectSettings {
    /// Whether the git diff a client records with a run is kept (else it is dropped on ingest).
    pub capture_diff: bool,
}

impl MetaStore {
    /// A project's settings.
    pub fn project_settings(&self, project_id: i64) -> Result<ProjectSettings> {
        self.read(|db| {
            let row = db
                .row("SELECT capture_diff FROM projects WHERE id = ?1", vals![project_id])?
                .ok_or_else(|| not_found(format!("project {project_id}")))?;
            Ok(ProjectSettings { capture_diff: row.get(0)? })
        })
    }

    /// Replaces a project's settings.
    pub fn set_project_settings(&self, project_id: i64, settings: ProjectSettings) -> Result<()> {
        self.write(|tx| {
            let changed = tx.exec(
                "UPDATE projects SET capture_diff = ?2 WHERE id = ?1",
                vals![project_id, settings.capture_diff],
            )?;
            if changed == 0 {
                return Err(not_found(format!("project {project_id}")));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainlog_schema::ProjectName;

    #[test]
    fn diff_capture_is_on_until_switched_off_and_back() {
        let dir = tempfile::tempdir().unwrap();
        let m = crate::test_store(dir.path());
        let p = m.create_project(&ProjectName::parse("p", "vision").unwrap(), "", None).unwrap();
        let other = m.create_project(&ProjectName::parse("p", "audio").unwrap(), "", None).unwrap();
        assert_eq!(m.project_settings(p.id).unwrap(), ProjectSettings { capture_diff: true });
        m.set_project_settings(p.id, ProjectSettings { capture_diff: false }).unwrap();
        assert_eq!(m.project_settings(p.id).unwrap(), ProjectSettings { capture_diff: false });
        assert_eq!(m.project_settings(other.id).unwrap(), ProjectSettings { capture_diff: true });
        m.set_project_settings(p.id, ProjectSettings { capture_diff: true }).unwrap();
        assert_eq!(m.project_settings(p.id).unwrap(), ProjectSettings { capture_diff: true });
        assert!(m.project_settings(9999).is_err());
        assert!(m.set_project_settings(9999, ProjectSettings { capture_diff: false }).is_err());
    }
}
