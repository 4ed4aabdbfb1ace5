//! Deleting and restoring projects and runs, renaming projects, and project tags. A deleted
//! project or run keeps its rows and files: it is hidden from lists, searches and reads by
//! name or id until it is restored (MLflow's `lifecycle_stage`).

use crate::db::{vals, Db, Row, Value};
use crate::runs::{load_params, placeholders, project_from_row, run_from_row, RUN_COLUMNS};
use crate::{not_found, Error, MetaStore, Project, Result, Run};
use std::collections::{BTreeMap, HashMap};
use trainlog_schema::{MetricSummary, ParamValue, ProjectName, RunId};

/// A run by id, deleted or not, with whether it is deleted.
pub(crate) fn run_any_in(db: &dyn Db, id: &str) -> Result<(Run, bool)> {
    let sql =
        format!("SELECT {RUN_COLUMNS}, r.deleted FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = ?1");
    let row = db.row(&sql, vals![id])?.ok_or_else(|| not_found(format!("run {id}")))?;
    let (mut run, deleted) = (run_from_row(&row)?, row.get::<i64>(13)? != 0);
    load_params(db, &mut run)?;
    Ok((run, deleted))
}

/// A run loaded with its params and tags, the revision it was loaded at, and whether it is deleted.
pub(crate) struct LoadedRun {
    pub run: Run,
    pub deleted: bool,
    pub revision: i64,
}

/// Many runs, deleted or not, keyed by id (unknown ids are left out): one query per table for
/// each 500 runs, rather than three per run. Each comes with the revision its row had; its params
/// and tags are read after the row, so they are never older than that revision.
pub(crate) fn runs_any_in(db: &dyn Db, ids: &[&str]) -> Result<HashMap<String, LoadedRun>> {
    let mut found: HashMap<String, LoadedRun> = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        let marks = placeholders(1, chunk.len());
        let values: Vec<Value> = chunk.iter().map(|id| (*id).into()).collect();
        let sql = format!(
            "SELECT {RUN_COLUMNS}, r.deleted, r.revision FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id IN ({marks})"
        );
        for r in db.rows(&sql, &values)? {
            let loaded = LoadedRun { run: run_from_row(&r)?, deleted: r.get::<i64>(13)? != 0, revision: r.get(14)? };
            found.insert(loaded.run.id.as_str().to_owned(), loaded);
        }
        for r in db.rows(&format!("SELECT run_id, key, type, value FROM params WHERE run_id IN ({marks})"), &values)? {
            let (run_id, key, ty, text): (String, String, String, String) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let value = ParamValue::from_stored(&ty, &text).ok_or_else(|| {
                Error::Corrupt(format!("param {key} of run {run_id} has type {ty} and value {text:?}"))
            })?;
            if let Some(loaded) = found.get_mut(&run_id) {
                loaded.run.params.insert(key, value);
            }
        }
        for r in db.rows(&format!("SELECT run_id, key, value FROM tags WHERE run_id IN ({marks})"), &values)? {
            let run_id: String = r.get(0)?;
            if let Some(loaded) = found.get_mut(&run_id) {
                loaded.run.tags.insert(r.get(1)?, r.get(2)?);
            }
        }
    }
    Ok(found)
}

/// Runs loaded for earlier answers, by id. An entry is used only while the run's stored revision
/// equals the entry's, which every change to the run's row, params or tags (and a rename of its
/// project) moves on, on any server sharing the database. Bounded: a full cache is emptied, and
/// a load larger than the whole cache is answered without being kept.
#[derive(Default)]
pub(crate) struct RunCache {
    entries: std::sync::Mutex<HashMap<String, LoadedRun>>,
}

const RUN_CACHE_ENTRIES: usize = 50_000;

impl RunCache {
    /// The runs `heads` names (id and current revision), in that order: cached ones where the
    /// revision still matches, the others read from `conn` and kept. Unknown ids are left out.
    pub(crate) fn runs(&self, db: &dyn Db, heads: &[(String, i64)]) -> Result<Vec<(Run, bool)>> {
        let mut out: Vec<Option<(Run, bool)>> = Vec::with_capacity(heads.len());
        let mut missing: Vec<&str> = Vec::new();
        {
            let entries = self.entries.lock().map_err(|_| Error::Poisoned)?;
            for (id, revision) in heads {
                match entries.get(id) {
                    Some(hit) if hit.revision == *revision => out.push(Some((hit.run.clone(), hit.deleted))),
                    _ => {
                        out.push(None);
                        missing.push(id);
                    }
                }
            }
        }
        if missing.is_empty() {
            return Ok(out.into_iter().flatten().collect());
        }
        let mut loaded = runs_any_in(db, &missing)?;
        let result = heads
            .iter()
            .zip(out)
            .filter_map(|((id, _), hit)| hit.or_else(|| loaded.get(id).map(|l| (l.run.clone(), l.deleted))))
            .collect();
        if loaded.len() <= RUN_CACHE_ENTRIES {
            let mut entries = self.entries.lock().map_err(|_| Error::Poisoned)?;
            if entries.len() + loaded.len() > RUN_CACHE_ENTRIES {
                entries.clear();
            }
            entries.extend(loaded.drain());
        }
        Ok(result)
    }
}

/// Stored summaries read for earlier answers, by run, with the run's summaries revision then,
/// which every write of its summaries moves on, on any server sharing the database. Bounded
/// like `RunCache`.
#[derive(Default)]
pub(crate) struct SummaryCache {
    entries: std::sync::Mutex<HashMap<String, (i64, RunSummaries)>>,
}

/// A run's summaries, by metric key.
type RunSummaries = BTreeMap<String, MetricSummary>;

/// The cached summaries by run, and the runs (with their revisions) to read.
type CachedAndMissing = (HashMap<String, RunSummaries>, Vec<(String, i64)>);

impl SummaryCache {
    /// The cached summaries of the runs whose revision matches, and the runs to read.
    pub(crate) fn hits(&self, revisions: &[(String, i64)]) -> Result<CachedAndMissing> {
        let entries = self.entries.lock().map_err(|_| Error::Poisoned)?;
        let mut found = HashMap::with_capacity(revisions.len());
        let mut missing = Vec::new();
        for (id, revision) in revisions {
            match entries.get(id) {
                Some((at, summaries)) if at == revision => {
                    found.insert(id.clone(), summaries.clone());
                }
                _ => missing.push((id.clone(), *revision)),
            }
        }
        Ok((found, missing))
    }

    /// Keeps summaries read at the given revisions (a run without any is kept empty).
    pub(crate) fn keep(&self, read: &[(String, i64)], loaded: &HashMap<String, RunSummaries>) -> Result<()> {
        if read.len() > RUN_CACHE_ENTRIES {
            return Ok(());
        }
        let mut entries = self.entries.lock().map_err(|_| Error::Poisoned)?;
        if entries.len() + read.len() > RUN_CACHE_ENTRIES {
            entries.clear();
        }
        for (id, revision) in read {
            entries.insert(id.clone(), (*revision, loaded.get(id).cloned().unwrap_or_default()));
        }
        Ok(())
    }
}

fn project_and_deleted(r: &Row) -> Result<(Project, bool)> {
    Ok((project_from_row(r)?, r.get::<i64>(4)? != 0))
}

impl MetaStore {
    /// A project by id, deleted or not; answers whether it is deleted.
    pub fn project_any(&self, id: i64) -> Result<(Project, bool)> {
        self.read(|db| {
            let row =
                db.row("SELECT id, name, description, created_ms, deleted FROM projects WHERE id = ?1", vals![id])?;
            project_and_deleted(&row.ok_or_else(|| not_found(format!("project {id}")))?)
        })
    }

    /// A project by name, deleted or not; answers whether it is deleted.
    pub fn project_by_name_any(&self, name: &str) -> Result<(Project, bool)> {
        self.read(|db| {
            let row =
                db.row("SELECT id, name, description, created_ms, deleted FROM projects WHERE name = ?1", vals![name])?;
            project_and_deleted(&row.ok_or_else(|| not_found(format!("project {name:?}")))?)
        })
    }

    /// Every project, deleted ones too, each with whether it is deleted.
    pub fn list_projects_any(&self) -> Result<Vec<(Project, bool)>> {
        self.read(|db| {
            db.rows("SELECT id, name, description, created_ms, deleted FROM projects ORDER BY name", vals![])?
                .iter()
                .map(project_and_deleted)
                .collect()
        })
    }

    /// Gives a project another name; its files stay where they are (they are kept by id).
    pub fn rename_project(&self, id: i64, name: &ProjectName) -> Result<()> {
        self.write(|tx| {
            let taken: Option<i64> = tx
                .row("SELECT id FROM projects WHERE name = ?1", vals![name.as_str()])?
                .map(|r| r.get(0))
                .transpose()?;
            if taken.is_some_and(|other| other != id) {
                return Err(crate::Error::Conflict {
                    field: "name".into(),
                    reason: format!("project {name:?} already exists"),
                });
            }
            if tx.exec("UPDATE projects SET name = ?2 WHERE id = ?1", vals![id, name.as_str()])? == 0 {
                return Err(not_found(format!("project {id}")));
            }
            Ok(())
        })
    }

    /// Deletes (or restores) a project and every run in it, as MLflow does an experiment.
    pub fn set_project_deleted(&self, id: i64, deleted: bool) -> Result<()> {
        self.write(|tx| {
            if tx.exec("UPDATE projects SET deleted = ?2 WHERE id = ?1", vals![id, deleted])? == 0 {
                return Err(not_found(format!("project {id}")));
            }
            tx.exec("UPDATE runs SET deleted = ?2 WHERE project_id = ?1", vals![id, deleted])?;
            Ok(())
        })
    }

    /// A run by id, deleted or not; answers whether it is deleted.
    pub fn run_any(&self, id: &RunId) -> Result<(Run, bool)> {
        self.read(|db| run_any_in(db, id.as_str()))
    }

    /// The project of a run in an active project, deleted (archived) or not, and whether it is
    /// deleted; a run of a deleted project is not found.
    pub fn run_head_any(&self, id: &RunId) -> Result<(i64, bool)> {
        self.run_projects_any(std::slice::from_ref(id))?.remove(id).ok_or_else(|| not_found(format!("run {id}")))
    }

    /// `run_head_any` for many runs, one query per 500: each found run's project and whether
    /// it is deleted. Unknown runs and runs of deleted projects are left out.
    pub fn run_projects_any(&self, ids: &[RunId]) -> Result<HashMap<RunId, (i64, bool)>> {
        self.read(|db| {
            let mut found = HashMap::with_capacity(ids.len());
            for chunk in ids.chunks(500) {
                let sql = format!(
                    "SELECT r.id, r.project_id, r.deleted FROM runs r JOIN projects p ON p.id = r.project_id
                     WHERE p.deleted = 0 AND r.id IN ({})",
                    placeholders(1, chunk.len())
                );
                let values: Vec<Value> = chunk.iter().map(|id| id.as_str().into()).collect();
                for r in db.rows(&sql, &values)? {
                    found.insert(RunId::from_trusted(r.get(0)?), (r.get(1)?, r.get::<i64>(2)? != 0));
                }
            }
            Ok(found)
        })
    }

    /// Deletes (or restores) a run; its rows and files stay.
    pub fn set_run_deleted(&self, id: &RunId, deleted: bool) -> Result<()> {
        self.write(|tx| {
            if tx.exec("UPDATE runs SET deleted = ?2 WHERE id = ?1", vals![id.as_str(), deleted])? == 0 {
                return Err(not_found(format!("run {id}")));
            }
            Ok(())
        })
    }

    pub fn project_tags(&self, id: i64) -> Result<BTreeMap<String, String>> {
        self.read(|db| {
            db.rows("SELECT key, value FROM project_tags WHERE project_id = ?1", vals![id])?
                .iter()
                .map(|r| Ok((r.get(0)?, r.get(1)?)))
                .collect()
        })
    }

    /// Sets a project tag, or deletes it (`None`); answers whether the tag was there.
    pub fn set_project_tag(&self, id: i64, key: &str, value: Option<&str>) -> Result<bool> {
        self.write(|tx| {
            let existed = tx.exec("DELETE FROM project_tags WHERE project_id = ?1 AND key = ?2", vals![id, key])? > 0;
            if let Some(value) = value {
                tx.exec(
                    "INSERT INTO project_tags (project_id, key, value) VALUES (?1, ?2, ?3)",
                    vals![id, key, value],
                )?;
            }
            Ok(existed)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::search::{Lifecycle, RunScope};
    use crate::{MetaStore, NewRun, RunUpdate};
    use std::collections::BTreeMap;
    use trainlog_schema::{ParamKey, ParamValue, ProjectName, RunStatus, TagKey};

    fn page(m: &MetaStore) -> Vec<crate::Run> {
        m.search_in(RunScope::All, Lifecycle::All, "", &[], 100, 0).unwrap().into_iter().map(|(r, _)| r).collect()
    }

    #[test]
    fn a_search_answers_every_change_to_a_run_it_answered_before() {
        let dir = tempfile::tempdir().unwrap();
        let m = crate::test_store(dir.path());
        let name = ProjectName::parse("project", "p").unwrap();
        let key = |k: &str| ParamKey::parse("params", k).unwrap();
        let new = NewRun {
            project: Some(name),
            name: Some("first".into()),
            params: BTreeMap::from([(key("lr"), ParamValue::Float(0.1))]),
            ..NewRun::default()
        };
        let (run, _) = m.create_run(&new).unwrap();
        let (other, _) = m.create_run(&NewRun { name: Some("second".into()), ..new.clone() }).unwrap();
        assert_eq!(page(&m).len(), 2);

        m.set_params(&run.id, &BTreeMap::from([(key("depth"), ParamValue::Int(4))]), false).unwrap();
        let tag = TagKey::parse("tags", "team").unwrap();
        let update = RunUpdate {
            name: Some("renamed".into()),
            notes: Some("a note".into()),
            set_tags: BTreeMap::from([(tag.clone(), "vision".to_owned())]),
            ..RunUpdate::default()
        };
        m.update_run(&run.id, &update).unwrap();
        m.set_status(&other.id, RunStatus::Finished, Some(5)).unwrap();
        m.rename_project(run.project_id, &ProjectName::parse("project", "q").unwrap()).unwrap();
        let runs = page(&m);
        let changed = runs.iter().find(|r| r.id == run.id).unwrap();
        assert_eq!(
            (changed.name.as_str(), changed.notes.as_str(), changed.project.as_str()),
            ("renamed", "a note", "q")
        );
        assert_eq!(changed.params.get("depth"), Some(&ParamValue::Int(4)));
        assert_eq!(changed.tags.get("team").map(String::as_str), Some("vision"));
        let ended = runs.iter().find(|r| r.id == other.id).unwrap();
        assert_eq!((ended.status, ended.end_ms, ended.project.as_str()), (RunStatus::Finished, Some(5), "q"));

        m.update_run(&run.id, &RunUpdate { delete_tags: vec![tag], ..RunUpdate::default() }).unwrap();
        m.set_run_deleted(&other.id, true).unwrap();
        let runs = m.search_in(RunScope::All, Lifecycle::All, "", &[], 100, 0).unwrap();
        let (changed, _) = runs.iter().find(|(r, _)| r.id == run.id).unwrap();
        assert!(changed.tags.is_empty());
        assert!(runs.iter().any(|(r, deleted)| r.id == other.id && *deleted));
    }
}
