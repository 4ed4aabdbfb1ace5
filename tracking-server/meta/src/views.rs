//! Saved views of a project: named UI states kept as JSON text that the store never reads.

use crate::db::vals;
use crate::{not_found, now_ms, Error, MetaStore, Result};
use trainlog_schema::ViewName;

/// A saved view without its state, as lists show it.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewRow {
    pub name: String,
    /// Who saved it last; None when the server checks no keys.
    pub user: Option<String>,
    pub updated_ms: i64,
}

fn parse_state(project_id: i64, name: &str, text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt(format!("view {name:?} of project {project_id}: {e}")))
}

fn missing(project_id: i64, name: &ViewName) -> Error {
    not_found(format!("view {:?} of project {project_id}", name.as_str()))
}

impl MetaStore {
    /// A project's saved views, by name.
    pub fn views(&self, project_id: i64) -> Result<Vec<ViewRow>> {
        self.read(|db| {
            let rows = db.rows(
                r#"SELECT name, "user", updated_ms FROM saved_views WHERE project_id = ?1 ORDER BY name"#,
                vals![project_id],
            )?;
            rows.iter().map(|r| Ok(ViewRow { name: r.get(0)?, user: r.get(1)?, updated_ms: r.get(2)? })).collect()
        })
    }

    /// One saved view with its state.
    pub fn view(&self, project_id: i64, name: &ViewName) -> Result<(ViewRow, serde_json::Value)> {
        self.read(|db| {
            let row = db
                .row(
                    r#"SELECT "user", updated_ms, state FROM saved_views WHERE project_id = ?1 AND name = ?2"#,
                    vals![project_id, name.as_str()],
                )?
                .ok_or_else(|| missing(project_id, name))?;
            let state = parse_state(project_id, name.as_str(), &row.get::<String>(2)?)?;
            Ok((ViewRow { name: name.to_string(), user: row.get(0)?, updated_ms: row.get(1)? }, state))
        })
    }

    /// Creates or replaces a saved view of an active project; answers it and whether it is new.
    pub fn put_view(
        &self,
        project_id: i64,
        name: &ViewName,
        state: &serde_json::Value,
        user: Option<&str>,
    ) -> Result<(ViewRow, bool)> {
        let text = state.to_string();
        self.write(|tx| {
            if !tx.exists("SELECT 1 FROM projects WHERE id = ?1 AND deleted = 0", vals![project_id])? {
                return Err(not_found(format!("project {project_id}")));
            }
            let existed = tx.exists(
                "SELECT 1 FROM saved_views WHERE project_id = ?1 AND name = ?2",
                vals![project_id, name.as_str()],
            )?;
            let updated_ms = now_ms();
            tx.exec(
                r#"INSERT INTO saved_views (project_id, name, state, "user", updated_ms) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (project_id, name) DO UPDATE SET state = excluded.state, "user" = excluded."user",
                   updated_ms = excluded.updated_ms"#,
                vals![project_id, name.as_str(), text.as_str(), user, updated_ms],
            )?;
            let row = ViewRow { name: name.to_string(), user: user.map(str::to_owned), updated_ms };
            Ok((row, !existed))
        })
    }

    /// Deletes a saved view; not found when there is none of that name.
    pub fn delete_view(&self, project_id: i64, name: &ViewName) -> Result<()> {
        self.write(|db| {
            let n = db.exec(
                "DELETE FROM saved_views WHERE project_id = ?1 AND name = ?2",
                vals![project_id, name.as_str()],
            )?;
            if n == 0 {
                return Err(missing(project_id, name));
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
    fn views_are_created_replaced_listed_by_name_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let m = crate::test_store(dir.path());
        let p = m.create_project(&ProjectName::parse("name", "p").unwrap(), "", None).unwrap();
        let (b, a) = (ViewName::parse("view", "b").unwrap(), ViewName::parse("view", "a").unwrap());
        let (_, created) = m.put_view(p.id, &b, &serde_json::json!({"x": 1}), Some("ada")).unwrap();
        assert!(created);
        m.put_view(p.id, &a, &serde_json::json!({}), None).unwrap();
        let (row, created) = m.put_view(p.id, &b, &serde_json::json!({"x": 2}), None).unwrap();
        assert!(!created);
        assert_eq!(row.user, None);
        let names: Vec<String> = m.views(p.id).unwrap().into_iter().map(|v| v.name).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(m.view(p.id, &b).unwrap().1, serde_json::json!({"x": 2}));
        m.delete_view(p.id, &b).unwrap();
        assert!(matches!(m.delete_view(p.id, &b), Err(Error::NotFound { .. })));
        assert!(matches!(m.view(p.id, &b), Err(Error::NotFound { .. })));
        assert!(matches!(m.put_view(p.id + 1, &a, &serde_json::json!({}), None), Err(Error::NotFound { .. })));
    }
}
