//! Projects and runs: creation, resumption, params with conflict detection, tags, status,
//! summaries, search and the rows exported to the per-project runs table.

use crate::db::{vals, Db, Dialect, Row, Value};
use crate::{not_found, now_ms, search, Actor, Error, MetaStore, Result, Role, Scope};
use std::collections::{BTreeMap, HashMap};
use trainlog_schema::{MetricKey, MetricSummary, ParamKey, ParamValue, ProjectName, RunId, RunStatus, TagKey};

#[derive(Debug, Clone, PartialEq)]
pub struct Project {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub created_ms: i64,
}

/// The fields ingest needs to know about a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunHead {
    pub id: RunId,
    pub project_id: i64,
    pub status: RunStatus,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: RunId,
    pub project_id: i64,
    pub project: String,
    pub name: String,
    pub status: RunStatus,
    pub start_ms: i64,
    pub end_ms: Option<i64>,
    pub user: String,
    pub host: String,
    pub group: String,
    pub parent_id: Option<String>,
    pub notes: String,
    /// `#rrggbb`: from the palette in the order the project's runs were created, or set by a person.
    pub color: String,
    pub params: BTreeMap<String, ParamValue>,
    pub tags: BTreeMap<String, String>,
}

/// A run as written to the runs table, with its metric summaries.
#[derive(Debug, Clone)]
pub struct RunExport {
    pub run: Run,
    pub summaries: BTreeMap<String, MetricSummary>,
}

#[derive(Debug, Clone, Default)]
pub struct NewRun {
    pub id: Option<RunId>,
    pub project: Option<ProjectName>,
    pub name: Option<String>,
    pub params: BTreeMap<ParamKey, ParamValue>,
    pub tags: BTreeMap<TagKey, String>,
    pub user: String,
    pub host: String,
    pub group: String,
    pub parent_id: Option<RunId>,
    pub notes: String,
    pub start_ms: Option<i64>,
    /// Continue the run when `id` exists: status back to running, params merged.
    pub resume: bool,
    /// Let params replace existing values of the same key.
    pub overwrite_params: bool,
    /// Who creates or resumes it, when keys are checked: needs write on the project, or creates it.
    pub actor: Option<crate::Actor>,
    /// The process creating or resuming it, as one rank of its job: it joins the run's attempt.
    pub process: Option<crate::jobs::ProcessJoin>,
}

#[derive(Debug, Clone, Default)]
pub struct RunUpdate {
    pub name: Option<String>,
    pub notes: Option<String>,
    pub group: Option<String>,
    pub color: Option<trainlog_schema::RunColor>,
    pub set_tags: BTreeMap<TagKey, String>,
    pub delete_tags: Vec<TagKey>,
}

pub(crate) const RUN_COLUMNS: &str = "r.id, r.project_id, p.name, r.name, r.status, r.start_ms, r.end_ms, r.\"user\", r.host, r.group_name, r.parent_id, r.notes, r.color";

pub(crate) fn run_from_row(row: &Row) -> Result<Run> {
    let status: String = row.get(4)?;
    Ok(Run {
        id: RunId::from_trusted(row.get(0)?),
        project_id: row.get(1)?,
        project: row.get(2)?,
        name: row.get(3)?,
        status: status.parse().unwrap_or(RunStatus::Failed),
        start_ms: row.get(5)?,
        end_ms: row.get(6)?,
        user: row.get(7)?,
        host: row.get(8)?,
        group: row.get(9)?,
        parent_id: row.get(10)?,
        notes: row.get(11)?,
        color: row.get::<Option<String>>(12)?.unwrap_or_default(),
        params: BTreeMap::new(),
        tags: BTreeMap::new(),
    })
}

pub(crate) fn project_from_row(row: &Row) -> Result<Project> {
    Ok(Project { id: row.get(0)?, name: row.get(1)?, description: row.get(2)?, created_ms: row.get(3)? })
}

fn nan_to_null(v: f64) -> Option<f64> {
    (!v.is_nan()).then_some(v)
}

fn null_to_nan(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

fn new_run_id() -> RunId {
    RunId::from_trusted(uuid::Uuid::new_v4().simple().to_string())
}

/// `?N, ?N+1, …` for `count` placeholders starting at `first`.
pub(crate) fn placeholders(first: usize, count: usize) -> String {
    (first..first + count).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ")
}

pub(crate) fn load_params(db: &dyn Db, run: &mut Run) -> Result<()> {
    for r in db.rows("SELECT key, type, value FROM params WHERE run_id = ?1", vals![run.id.as_str()])? {
        let (key, ty, text): (String, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let value = ParamValue::from_stored(&ty, &text)
            .ok_or_else(|| Error::Corrupt(format!("param {key} of run {} has type {ty} and value {text:?}", run.id)))?;
        run.params.insert(key, value);
    }
    for r in db.rows("SELECT key, value FROM tags WHERE run_id = ?1", vals![run.id.as_str()])? {
        run.tags.insert(r.get(0)?, r.get(1)?);
    }
    Ok(())
}

fn get_run(db: &dyn Db, id: &str) -> Result<Run> {
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = ?1 AND r.deleted = 0"
    );
    let mut run = run_from_row(&db.row(&sql, vals![id])?.ok_or_else(|| not_found(format!("run {id}")))?)?;
    load_params(db, &mut run)?;
    Ok(run)
}

fn same_param(old: &ParamValue, new: &ParamValue) -> bool {
    match (old.as_number(), new.as_number()) {
        (Some(a), Some(b)) if !matches!(old, ParamValue::Bool(_)) && !matches!(new, ParamValue::Bool(_)) => {
            a == b || (a.is_nan() && b.is_nan())
        }
        _ => old.type_name() == new.type_name() && old.to_text() == new.to_text(),
    }
}

/// Rows per multi-row statement: few round trips, well inside both databases' parameter limits.
const ROWS_PER_STATEMENT: usize = 200;

/// Inserts `rows` (each `width` values) with multi-row statements `{head} VALUES (…), (…) {tail}`.
pub(crate) fn insert_rows(db: &dyn Db, head: &str, tail: &str, width: usize, rows: &[Vec<Value>]) -> Result<()> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let tuples: Vec<String> =
            (0..chunk.len()).map(|i| format!("({})", placeholders(i * width + 1, width))).collect();
        let sql = format!("{head} VALUES {} {tail}", tuples.join(", "));
        let values: Vec<Value> = chunk.iter().flatten().cloned().collect();
        db.exec(&sql, &values)?;
    }
    Ok(())
}

fn summary_values(run: &RunId, key: &MetricKey, s: &MetricSummary) -> Vec<Value> {
    vec![
        run.as_str().into(),
        key.as_str().into(),
        nan_to_null(s.last).into(),
        s.last_step.into(),
        s.last_ms.into(),
        nan_to_null(s.min).into(),
        nan_to_null(s.max).into(),
        (s.count as i64).into(),
        nan_to_null(s.sum).into(),
        (s.sum_count as i64).into(),
    ]
}

/// Marks to recompute the stored summaries whose last step is not below the lowest step of the
/// points about to be folded into them: some of those steps may be counted already.
fn mark_overlaps(tx: &dyn Db, rows: &[(&RunId, &MetricKey, MetricSummary, i64)]) -> Result<()> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let tuples: Vec<String> = (0..chunk.len())
            .map(|i| {
                format!("(CAST(?{} AS TEXT), CAST(?{} AS TEXT), CAST(?{} AS BIGINT))", 3 * i + 1, 3 * i + 2, 3 * i + 3)
            })
            .collect();
        let sql = format!(
            "WITH folded (run_id, key, first_step) AS (VALUES {})
             UPDATE metric_summaries SET recompute = 1 FROM folded
             WHERE metric_summaries.run_id = folded.run_id AND metric_summaries.key = folded.key
               AND metric_summaries.last_step >= folded.first_step",
            tuples.join(", ")
        );
        let values: Vec<Value> = chunk
            .iter()
            .flat_map(|(run, key, _, first_step)| [run.as_str().into(), key.as_str().into(), (*first_step).into()])
            .collect();
        tx.exec(&sql, &values)?;
    }
    Ok(())
}

/// Moves the summaries revision of runs whose summaries this transaction writes.
fn summaries_written(tx: &dyn Db, runs: &[&str]) -> Result<()> {
    for run in runs {
        tx.exec("UPDATE runs SET summaries_revision = summaries_revision + 1 WHERE id = ?1", vals![*run])?;
    }
    Ok(())
}

fn hold_unpersisted(tx: &dyn Db, folder: &str, runs: &[&RunId], until_ms: i64) -> Result<()> {
    for run in runs {
        tx.exec(
            "INSERT INTO unpersisted_runs (run_id, folder_id, until_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (run_id, folder_id) DO UPDATE SET until_ms = excluded.until_ms",
            vals![run.as_str(), folder, until_ms],
        )?;
    }
    Ok(())
}

fn others_hold_unpersisted(db: &dyn Db, run: &RunId, folder: &str) -> Result<bool> {
    db.exists(
        "SELECT 1 FROM unpersisted_runs WHERE run_id = ?1 AND folder_id <> ?2 AND until_ms > ?3",
        vals![run.as_str(), folder, now_ms()],
    )
}

/// Writes params, refusing a changed value for an existing key unless `overwrite`.
/// Checks every key before writing any, so a refused request writes nothing.
fn write_params(tx: &dyn Db, run_id: &str, params: &BTreeMap<ParamKey, ParamValue>, overwrite: bool) -> Result<()> {
    if params.is_empty() {
        return Ok(());
    }
    if !overwrite {
        let mut stored: HashMap<String, (String, String)> = HashMap::new();
        for r in tx.rows("SELECT key, type, value FROM params WHERE run_id = ?1", vals![run_id])? {
            stored.insert(r.get(0)?, (r.get(1)?, r.get(2)?));
        }
        for (key, value) in params {
            let Some((ty, text)) = stored.get(key.as_str()) else { continue };
            let old = ParamValue::from_stored(ty, text)
                .ok_or_else(|| Error::Corrupt(format!("param {key} of run {run_id}")))?;
            if !same_param(&old, value) {
                return Err(Error::Conflict {
                    field: format!("params.{key}"),
                    reason: format!(
                        "run {run_id} already has {key} = {}; send \"overwrite\": true to replace it with {}",
                        old.to_json(),
                        value.to_json()
                    ),
                });
            }
        }
    }
    let rows: Vec<Vec<Value>> = params
        .iter()
        .map(|(key, value)| {
            vec![
                run_id.into(),
                key.as_str().into(),
                value.type_name().into(),
                value.to_text().into(),
                value.search_number().and_then(nan_to_null).into(),
            ]
        })
        .collect();
    insert_rows(
        tx,
        "INSERT INTO params (run_id, key, type, value, num)",
        "ON CONFLICT (run_id, key) DO UPDATE SET type = excluded.type, value = excluded.value, num = excluded.num",
        5,
        &rows,
    )
}

fn write_tags(tx: &dyn Db, run_id: &str, tags: &BTreeMap<TagKey, String>) -> Result<()> {
    let rows: Vec<Vec<Value>> =
        tags.iter().map(|(key, value)| vec![run_id.into(), key.as_str().into(), value.into()]).collect();
    insert_rows(
        tx,
        "INSERT INTO tags (run_id, key, value)",
        "ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value",
        3,
        &rows,
    )
}

fn delete_tags(tx: &dyn Db, run_id: &str, keys: &[TagKey]) -> Result<()> {
    for key in keys {
        tx.exec("DELETE FROM tags WHERE run_id = ?1 AND key = ?2", vals![run_id, key.as_str()])?;
    }
    Ok(())
}

fn touch(tx: &dyn Db, run_id: &str) -> Result<()> {
    tx.exec("UPDATE runs SET updated_ms = ?2 WHERE id = ?1", vals![run_id, now_ms()])?;
    Ok(())
}

fn project_by_name_in(db: &dyn Db, name: &str) -> Result<Option<Project>> {
    db.row("SELECT id, name, description, created_ms FROM projects WHERE name = ?1 AND deleted = 0", vals![name])?
        .map(|r| project_from_row(&r))
        .transpose()
}

pub(crate) fn one(row: Option<Row>, what: &str) -> Result<Row> {
    row.ok_or_else(|| Error::Corrupt(format!("{what} answered no row")))
}

/// `create_run` inside a transaction the caller commits.
pub(crate) fn create_run_in(tx: &dyn Db, new: &NewRun) -> Result<(RunId, bool, Option<crate::jobs::Joined>)> {
    let existing: Option<(i64, i64)> = match &new.id {
        Some(id) => tx
            .row("SELECT project_id, deleted FROM runs WHERE id = ?1", vals![id.as_str()])?
            .map(|r| Ok::<_, Error>((r.get(0)?, r.get(1)?)))
            .transpose()?,
        None => None,
    };
    if let Some(id) = new.id.as_ref().filter(|_| existing.is_none()) {
        if crate::purge::is_purged_in(tx, id.as_str())? {
            return Err(Error::Conflict {
                field: "id".into(),
                reason: format!("run {id} was deleted for good; its id cannot be used again"),
            });
        }
    }
    if let (Some(id), Some((project_id, deleted))) = (&new.id, existing) {
        let project_name: String =
            one(tx.row("SELECT name FROM projects WHERE id = ?1", vals![project_id])?, "a run's project")?.get(0)?;
        if let Some(actor) = &new.actor {
            let has = crate::roles::role_in(tx, actor, Scope::Project, project_id)?;
            if has < Role::Read {
                return Err(not_found(format!("run {id}")));
            }
            crate::roles::check(actor, Scope::Project, &project_name, has, Role::Write)?;
        }
        if deleted != 0 {
            return Err(Error::Conflict { field: "id".into(), reason: format!("run {id} was deleted") });
        }
        if !new.resume {
            return Err(Error::Conflict {
                field: "id".into(),
                reason: format!("run {id} already exists; send \"resume\": true to continue it"),
            });
        }
        if let Some(project) = &new.project {
            if project_name != project.as_str() {
                return Err(Error::Conflict {
                    field: "project".into(),
                    reason: format!("run {id} belongs to project {project_name:?}, not {:?}", project.as_str()),
                });
            }
        }
        write_params(tx, id.as_str(), &new.params, new.overwrite_params)?;
        write_tags(tx, id.as_str(), &new.tags)?;
        tx.exec(
            "UPDATE runs SET status = 'running', end_ms = NULL, updated_ms = ?2 WHERE id = ?1",
            vals![id.as_str(), now_ms()],
        )?;
        if let Some(process) = &new.process {
            if process.rank == 0 {
                // Another rank may have created the run: rank 0's name, group and notes are the run's.
                name_by_rank_zero(tx, id.as_str(), new)?;
            }
            let joined = crate::jobs::join_in(tx, id.as_str(), process)?;
            return Ok((id.clone(), false, Some(joined)));
        }
        return Ok((id.clone(), false, None));
    }
    let project = match (&new.project, &new.id) {
        (Some(project), _) => project,
        // Resuming by id alone: there is no such run to resume.
        (None, Some(id)) if new.resume => {
            return Err(not_found(format!("run {id} (to resume it; give a project to create it instead)")))
        }
        (None, _) => {
            return Err(Error::Invalid { field: "project".into(), reason: "a new run needs a project".into() })
        }
    };
    let project = ensure_project_in(tx, project.as_str(), new.actor.as_ref(), Role::Write)?;
    if let Some(parent) = &new.parent_id {
        // A parent the caller may not read is not found, exactly as one that does not exist.
        let parent_project: Option<i64> = tx
            .row("SELECT project_id FROM runs WHERE id = ?1", vals![parent.as_str()])?
            .map(|r| r.get(0))
            .transpose()?;
        let readable = match (parent_project, &new.actor) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(project_id), Some(actor)) => {
                crate::roles::role_in(tx, actor, Scope::Project, project_id)? >= Role::Read
            }
        };
        if !readable {
            return Err(not_found(format!("parent run {parent}")));
        }
    }
    let id = new.id.clone().unwrap_or_else(new_run_id);
    let name = match &new.name {
        Some(n) if !n.is_empty() => n.clone(),
        _ => id.as_str().chars().take(8).collect(),
    };
    let now = now_ms();
    let created: i64 = one(
        tx.row(
            "UPDATE projects SET runs_created = runs_created + 1 WHERE id = ?1 RETURNING runs_created",
            vals![project.id],
        )?,
        "a project's run count",
    )?
    .get(0)?;
    let ordinal = created - 1;
    let color = trainlog_schema::palette_color(ordinal.max(0) as u64);
    tx.exec(
        "INSERT INTO runs (id, project_id, name, status, start_ms, \"user\", host, group_name, parent_id, notes, updated_ms, color)
         VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        vals![
            id.as_str(),
            project.id,
            name,
            new.start_ms.unwrap_or(now),
            &new.user,
            &new.host,
            &new.group,
            new.parent_id.as_ref().map(|p| p.as_str()),
            &new.notes,
            now,
            color
        ],
    )?;
    write_params(tx, id.as_str(), &new.params, true)?;
    write_tags(tx, id.as_str(), &new.tags)?;
    let joined = new.process.as_ref().map(|process| crate::jobs::join_in(tx, id.as_str(), process)).transpose()?;
    Ok((id, true, joined))
}

fn name_by_rank_zero(tx: &dyn Db, id: &str, new: &NewRun) -> Result<()> {
    if let Some(name) = new.name.as_ref().filter(|n| !n.is_empty()) {
        tx.exec("UPDATE runs SET name = ?2 WHERE id = ?1", vals![id, name])?;
    }
    for (column, value) in [("group_name", &new.group), ("notes", &new.notes)] {
        if !value.is_empty() {
            tx.exec(&format!("UPDATE runs SET {column} = ?2 WHERE id = ?1"), vals![id, value])?;
        }
    }
    Ok(())
}

/// A deleted project keeps its name until it is restored or renamed.
pub(crate) fn refuse_deleted_name(db: &dyn Db, name: &str) -> Result<()> {
    if db.exists("SELECT id FROM projects WHERE name = ?1 AND deleted = 1", vals![name])? {
        return Err(Error::Conflict {
            field: "name".into(),
            reason: format!("project {name:?} already exists, deleted; restore it or give it another name first"),
        });
    }
    Ok(())
}

/// Inserts a project row; answers its id.
fn insert_project(tx: &dyn Db, name: &str, description: &str, created_ms: i64) -> Result<i64> {
    one(
        tx.row(
            "INSERT INTO projects (name, description, created_ms) VALUES (?1, ?2, ?3) RETURNING id",
            vals![name, description, created_ms],
        )?,
        "an insert",
    )?
    .get(0)
}

/// The project of that name, made (with the actor as its admin) when there is none; an existing
/// one must grant the actor `need`.
pub(crate) fn ensure_project_in(tx: &dyn Db, name: &str, actor: Option<&Actor>, need: Role) -> Result<Project> {
    if let Some(p) = project_by_name_in(tx, name)? {
        crate::roles::require_in(tx, actor, Scope::Project, p.id, name, need)?;
        return Ok(p);
    }
    let created_ms = now_ms();
    let id = insert_project(tx, name, "", created_ms)?;
    crate::roles::make_admin_in(tx, actor, Scope::Project, id)?;
    Ok(Project { id, name: name.to_owned(), description: String::new(), created_ms })
}

/// `(run_id, key, summary)` from rows of `run_id, key` and the summary columns.
fn summary_rows(rows: &[Row]) -> impl Iterator<Item = Result<(String, String, MetricSummary)>> + '_ {
    rows.iter().map(|r| Ok((r.get(0)?, r.get(1)?, summary_from_row(r, 2)?)))
}

impl MetaStore {
    /// Creates a project; its creator becomes its admin.
    pub fn create_project(&self, name: &ProjectName, description: &str, creator: Option<&Actor>) -> Result<Project> {
        self.write(|tx| {
            if project_by_name_in(tx, name.as_str())?.is_some() {
                return Err(Error::Conflict {
                    field: "name".into(),
                    reason: format!("project {name:?} already exists"),
                });
            }
            refuse_deleted_name(tx, name.as_str())?;
            let created_ms = now_ms();
            let id = insert_project(tx, name.as_str(), description, created_ms)?;
            crate::roles::make_admin_in(tx, creator, Scope::Project, id)?;
            Ok(Project { id, name: name.to_string(), description: description.to_owned(), created_ms })
        })
    }

    pub fn project_by_name(&self, name: &str) -> Result<Project> {
        self.read(|db| project_by_name_in(db, name)?.ok_or_else(|| not_found(format!("project {name:?}"))))
    }

    pub fn project_by_id(&self, id: i64) -> Result<Project> {
        self.read(|db| {
            let row = db.row(
                "SELECT id, name, description, created_ms FROM projects WHERE id = ?1 AND deleted = 0",
                vals![id],
            )?;
            project_from_row(&row.ok_or_else(|| not_found(format!("project {id}")))?)
        })
    }

    pub fn list_projects(&self) -> Result<Vec<(Project, u64)>> {
        self.read(|db| {
            db.rows(
                "SELECT p.id, p.name, p.description, p.created_ms,
                        (SELECT count(*) FROM runs r WHERE r.project_id = p.id AND r.deleted = 0)
                 FROM projects p WHERE p.deleted = 0 ORDER BY p.name",
                vals![],
            )?
            .iter()
            .map(|r| Ok((project_from_row(r)?, r.get::<i64>(4)? as u64)))
            .collect()
        })
    }

    /// Creates a run, or with `resume` continues an existing one. Answers the run and whether it is new.
    pub fn create_run(&self, new: &NewRun) -> Result<(Run, bool)> {
        let (run, created, _) = self.create_run_joining(new)?;
        Ok((run, created))
    }

    /// [`create_run`](Self::create_run), also answering where `new.process` joined.
    pub fn create_run_joining(&self, new: &NewRun) -> Result<(Run, bool, Option<crate::jobs::Joined>)> {
        let (id, created, joined) = self.write(|tx| create_run_in(tx, new))?;
        Ok((self.run(&id)?, created, joined))
    }

    pub fn run(&self, id: &RunId) -> Result<Run> {
        self.read(|db| get_run(db, id.as_str()))
    }

    pub fn run_head(&self, id: &RunId) -> Result<RunHead> {
        self.read(|db| {
            let r = db
                .row("SELECT project_id, status FROM runs WHERE id = ?1 AND deleted = 0", vals![id.as_str()])?
                .ok_or_else(|| not_found(format!("run {id}")))?;
            let status: String = r.get(1)?;
            Ok(RunHead { id: id.clone(), project_id: r.get(0)?, status: status.parse().unwrap_or(RunStatus::Failed) })
        })
    }

    /// Runs `f` in a write transaction on an existing run; 404 when it does not exist.
    pub(crate) fn in_run_tx<T>(&self, id: &RunId, f: impl Fn(&dyn Db) -> Result<T>) -> Result<T> {
        self.in_run_tx_where(id, "deleted = 0", f)
    }

    /// [`in_run_tx`](Self::in_run_tx) for a run archived or not: what the server itself keeps
    /// true of every run (its liveness) holds for archived runs too.
    pub(crate) fn in_kept_run_tx<T>(&self, id: &RunId, f: impl Fn(&dyn Db) -> Result<T>) -> Result<T> {
        self.in_run_tx_where(id, "1 = 1", f)
    }

    fn in_run_tx_where<T>(&self, id: &RunId, kept: &str, f: impl Fn(&dyn Db) -> Result<T>) -> Result<T> {
        self.write(|tx| {
            if !tx.exists(&format!("SELECT 1 FROM runs WHERE id = ?1 AND {kept}"), vals![id.as_str()])? {
                return Err(not_found(format!("run {id}")));
            }
            let out = f(tx)?;
            touch(tx, id.as_str())?;
            Ok(out)
        })
    }

    pub fn set_params(&self, id: &RunId, params: &BTreeMap<ParamKey, ParamValue>, overwrite: bool) -> Result<()> {
        self.in_run_tx(id, |tx| write_params(tx, id.as_str(), params, overwrite))
    }

    pub fn update_run(&self, id: &RunId, update: &RunUpdate) -> Result<()> {
        self.in_run_tx(id, |tx| {
            if let Some(name) = &update.name {
                tx.exec("UPDATE runs SET name = ?2 WHERE id = ?1", vals![id.as_str(), name])?;
            }
            if let Some(notes) = &update.notes {
                tx.exec("UPDATE runs SET notes = ?2 WHERE id = ?1", vals![id.as_str(), notes])?;
            }
            if let Some(group) = &update.group {
                tx.exec("UPDATE runs SET group_name = ?2 WHERE id = ?1", vals![id.as_str(), group])?;
            }
            if let Some(color) = &update.color {
                tx.exec("UPDATE runs SET color = ?2 WHERE id = ?1", vals![id.as_str(), color.as_str()])?;
            }
            write_tags(tx, id.as_str(), &update.set_tags)?;
            delete_tags(tx, id.as_str(), &update.delete_tags)
        })
    }

    /// Sets a run's status; a terminal status records the end time, `running` clears it.
    pub fn set_status(&self, id: &RunId, status: RunStatus, end_ms: Option<i64>) -> Result<()> {
        self.in_run_tx(id, |tx| {
            let end = status.is_terminal().then(|| end_ms.unwrap_or_else(now_ms));
            tx.exec(
                "UPDATE runs SET status = ?2, end_ms = ?3 WHERE id = ?1",
                vals![id.as_str(), status.as_str(), end],
            )?;
            if let Some(end) = end {
                crate::jobs::finish_running_attempt(tx, id.as_str(), status.as_str(), end)?;
            }
            Ok(())
        })
    }

    /// Stores one metadata section of a run (a JSON document), replacing an earlier one.
    pub fn set_metadata(&self, id: &RunId, section: &str, value: &serde_json::Value) -> Result<()> {
        let text = value.to_string();
        self.in_run_tx(id, |tx| {
            tx.exec(
                "INSERT INTO run_metadata (run_id, section, value, updated_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (run_id, section) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms",
                vals![id.as_str(), section, &text, now_ms()],
            )?;
            Ok(())
        })
    }

    /// One metadata section of many runs (those that have it), in one query per 500 runs.
    pub fn metadata_section_of(&self, ids: &[RunId], section: &str) -> Result<BTreeMap<String, serde_json::Value>> {
        self.read(|db| {
            let mut out = BTreeMap::new();
            for chunk in ids.chunks(500) {
                let sql = format!(
                    "SELECT run_id, value FROM run_metadata WHERE section = ?1 AND run_id IN ({})",
                    placeholders(2, chunk.len())
                );
                let values: Vec<Value> =
                    std::iter::once(section.into()).chain(chunk.iter().map(|id| id.as_str().into())).collect();
                for r in db.rows(&sql, &values)? {
                    let (run, text): (String, String) = (r.get(0)?, r.get(1)?);
                    let value = serde_json::from_str(&text)
                        .map_err(|e| Error::Corrupt(format!("metadata {section} of run {run}: {e}")))?;
                    out.insert(run, value);
                }
            }
            Ok(out)
        })
    }

    /// Every metadata section of a run.
    pub fn metadata(&self, id: &RunId) -> Result<BTreeMap<String, serde_json::Value>> {
        self.read(|db| {
            let mut out = BTreeMap::new();
            for r in db.rows(
                "SELECT section, value FROM run_metadata WHERE run_id = ?1 ORDER BY section",
                vals![id.as_str()],
            )? {
                let (section, text): (String, String) = (r.get(0)?, r.get(1)?);
                let value = serde_json::from_str(&text)
                    .map_err(|e| Error::Corrupt(format!("metadata {section} of run {id}: {e}")))?;
                out.insert(section, value);
            }
            Ok(out)
        })
    }

    /// Runs matching `filter`, in `order_by` order, one page.
    pub fn search(
        &self,
        scope: search::RunScope,
        filter: &str,
        order_by: &[String],
        limit: u32,
        offset: u64,
    ) -> Result<Vec<Run>> {
        Ok(self
            .search_in(scope, search::Lifecycle::Active, filter, order_by, limit, offset)?
            .into_iter()
            .map(|(r, _)| r)
            .collect())
    }

    /// `search` over deleted runs too, or only; answers each run with whether it is deleted.
    pub fn search_in(
        &self,
        scope: search::RunScope,
        lifecycle: search::Lifecycle,
        filter: &str,
        order_by: &[String],
        limit: u32,
        offset: u64,
    ) -> Result<Vec<(Run, bool)>> {
        let query = search::build_search_in(self.dialect(), scope, lifecycle, filter, order_by, limit, offset)
            .map_err(|e| Error::Invalid { field: e.field.to_owned(), reason: e.reason })?;
        // One snapshot for the page and the runs loaded for it.
        self.snapshot(|db| {
            let heads = db
                .rows(&query.sql, &query.params)?
                .iter()
                .map(|r| Ok((r.get(0)?, r.get(1)?)))
                .collect::<Result<Vec<(String, i64)>>>()?;
            self.run_cache.runs(db, &heads)
        })
    }

    /// The stored summaries of a run's metric series.
    pub fn summaries(&self, id: &RunId) -> Result<BTreeMap<String, MetricSummary>> {
        Ok(self.summaries_of(&[id.as_str()])?.remove(id.as_str()).unwrap_or_default())
    }

    /// The stored summaries of many runs, by run id (runs without any are left out). Runs whose
    /// summaries revision is the one they were read at for an earlier answer come from memory;
    /// the others are read, one query for each 500 runs.
    pub fn summaries_of(&self, ids: &[&str]) -> Result<HashMap<String, BTreeMap<String, MetricSummary>>> {
        self.snapshot(|db| {
            let mut revisions: Vec<(String, i64)> = Vec::with_capacity(ids.len());
            for chunk in ids.chunks(500) {
                let sql =
                    format!("SELECT id, summaries_revision FROM runs WHERE id IN ({})", placeholders(1, chunk.len()));
                let values: Vec<Value> = chunk.iter().map(|id| (*id).into()).collect();
                for r in db.rows(&sql, &values)? {
                    revisions.push((r.get(0)?, r.get(1)?));
                }
            }
            let (mut out, missing) = self.summary_cache.hits(&revisions)?;
            let mut loaded: HashMap<String, BTreeMap<String, MetricSummary>> = HashMap::with_capacity(missing.len());
            for chunk in missing.chunks(500) {
                let sql = format!(
                    "SELECT run_id, key, last, last_step, last_ms, min, max, count, sum, sum_count FROM metric_summaries
                     WHERE run_id IN ({})",
                    placeholders(1, chunk.len())
                );
                let values: Vec<Value> = chunk.iter().map(|(id, _)| id.as_str().into()).collect();
                for row in summary_rows(&db.rows(&sql, &values)?) {
                    let (run, key, summary) = row?;
                    loaded.entry(run).or_default().insert(key, summary);
                }
            }
            self.summary_cache.keep(&missing, &loaded)?;
            out.extend(loaded);
            out.retain(|_, s| !s.is_empty());
            Ok(out)
        })
    }

    /// How many runs a search matches (every page together).
    pub fn search_count(&self, scope: search::RunScope, lifecycle: search::Lifecycle, filter: &str) -> Result<u64> {
        let query = search::build_count_in(self.dialect(), scope, lifecycle, filter)
            .map_err(|e| Error::Invalid { field: e.field.to_owned(), reason: e.reason })?;
        self.read(|db| Ok(one(db.row(&query.sql, &query.params)?, "a count")?.get::<i64>(0)? as u64))
    }

    /// Folds summaries of new points into the stored ones by `MetricSummary::absorb`'s rule, so
    /// servers sharing the database each add their own points; rows of one series are folded in
    /// the order given. Each row comes with the lowest step of its points: a stored summary
    /// whose last step is not below it may now count a step twice, and is marked to recompute.
    /// Records in the same transaction that data folder `folder` holds unpersisted points of the
    /// runs `held`, until `until_ms` at the latest.
    pub fn merge_summaries(
        &self,
        rows: &[(RunId, MetricKey, MetricSummary, i64)],
        folder: &str,
        held: &[&RunId],
        until_ms: i64,
    ) -> Result<()> {
        // One row per series: a statement may not change one row twice.
        let mut merged: Vec<(&RunId, &MetricKey, MetricSummary, i64)> = Vec::with_capacity(rows.len());
        let mut index: HashMap<(&str, &str), usize> = HashMap::with_capacity(rows.len());
        for (run, key, delta, first_step) in rows.iter().filter(|r| !r.2.is_empty()) {
            match index.get(&(run.as_str(), key.as_str())) {
                Some(&i) => {
                    merged[i].2.absorb(delta);
                    merged[i].3 = merged[i].3.min(*first_step);
                }
                None => {
                    index.insert((run.as_str(), key.as_str()), merged.len());
                    merged.push((run, key, *delta, *first_step));
                }
            }
        }
        let values: Vec<Vec<Value>> = merged.iter().map(|(run, key, s, _)| summary_values(run, key, s)).collect();
        let mut runs: Vec<&str> = merged.iter().map(|(run, ..)| run.as_str()).collect();
        runs.sort_unstable();
        runs.dedup();
        self.write(|tx| {
            hold_unpersisted(tx, folder, held, until_ms)?;
            summaries_written(tx, &runs)?;
            mark_overlaps(tx, &merged)?;
            insert_rows(
                tx,
                "INSERT INTO metric_summaries (run_id, key, last, last_step, last_ms, min, max, count, sum, sum_count)",
                "ON CONFLICT (run_id, key) DO UPDATE SET
                   last = CASE WHEN excluded.last_step > metric_summaries.last_step
                     OR (excluded.last_step = metric_summaries.last_step AND excluded.last_ms >= metric_summaries.last_ms)
                     THEN excluded.last ELSE metric_summaries.last END,
                   last_ms = CASE WHEN excluded.last_step > metric_summaries.last_step
                     OR (excluded.last_step = metric_summaries.last_step AND excluded.last_ms >= metric_summaries.last_ms)
                     THEN excluded.last_ms ELSE metric_summaries.last_ms END,
                   last_step = CASE WHEN excluded.last_step > metric_summaries.last_step
                     THEN excluded.last_step ELSE metric_summaries.last_step END,
                   min = CASE WHEN excluded.min IS NULL THEN metric_summaries.min
                     WHEN metric_summaries.min IS NULL OR excluded.min < metric_summaries.min THEN excluded.min
                     ELSE metric_summaries.min END,
                   max = CASE WHEN excluded.max IS NULL THEN metric_summaries.max
                     WHEN metric_summaries.max IS NULL OR excluded.max > metric_summaries.max THEN excluded.max
                     ELSE metric_summaries.max END,
                   count = metric_summaries.count + excluded.count,
                   sum = metric_summaries.sum + excluded.sum,
                   sum_count = metric_summaries.sum_count + excluded.sum_count",
                10,
                &values,
            )
        })
    }

    /// Replaces a run's stored summaries of the given series with ones recomputed from all the
    /// points that data folder `folder` can see: the metric files and its own buffer. Refused,
    /// writing nothing, while another folder holds unpersisted points of the run, which the
    /// recomputation could not see. Answers whether it replaced them. With `hold_until`, records
    /// that `folder` holds unpersisted points of the run too.
    pub fn replace_summaries(
        &self,
        run: &RunId,
        rows: &[(MetricKey, MetricSummary)],
        folder: &str,
        hold_until: Option<i64>,
    ) -> Result<bool> {
        let values: Vec<Vec<Value>> = rows.iter().map(|(key, s)| summary_values(run, key, s)).collect();
        self.write(|tx| {
            if tx.dialect() == Dialect::Postgres {
                // A server folding its points in holds these rows until it commits: once they are
                // locked here, its hold is visible, or its points come after this replacement.
                tx.exec("SELECT 1 FROM metric_summaries WHERE run_id = ?1 FOR UPDATE", vals![run.as_str()])?;
            }
            if others_hold_unpersisted(tx, run, folder)? {
                return Ok(false);
            }
            if let Some(until_ms) = hold_until {
                hold_unpersisted(tx, folder, &[run], until_ms)?;
            }
            summaries_written(tx, &[run.as_str()])?;
            insert_rows(
                tx,
                "INSERT INTO metric_summaries (run_id, key, last, last_step, last_ms, min, max, count, sum, sum_count)",
                "ON CONFLICT (run_id, key) DO UPDATE SET last = excluded.last, last_step = excluded.last_step,
                   last_ms = excluded.last_ms, min = excluded.min, max = excluded.max, count = excluded.count,
                   sum = excluded.sum, sum_count = excluded.sum_count, recompute = 0",
                10,
                &values,
            )?;
            Ok(true)
        })
    }

    /// Up to `limit` runs with summaries marked to recompute, each with its project and the keys.
    pub fn summaries_to_recompute(&self, limit: i64) -> Result<Vec<(RunId, i64, Vec<String>)>> {
        self.read(|db| {
            let mut out: Vec<(RunId, i64, Vec<String>)> = Vec::new();
            let rows = db.rows(
                "SELECT s.run_id, r.project_id, s.key FROM metric_summaries s JOIN runs r ON r.id = s.run_id
                 WHERE s.recompute = 1 AND s.run_id IN
                   (SELECT run_id FROM metric_summaries WHERE recompute = 1 ORDER BY run_id LIMIT ?1)
                 ORDER BY s.run_id, s.key",
                vals![limit],
            )?;
            for r in rows {
                let run = RunId::from_trusted(r.get(0)?);
                match out.last_mut() {
                    Some(last) if last.0 == run => last.2.push(r.get(2)?),
                    _ => out.push((run, r.get(1)?, vec![r.get(2)?])),
                }
            }
            Ok(out)
        })
    }

    /// The runs data folder `folder` is recorded as holding unpersisted points of.
    pub fn held_runs(&self, folder: &str) -> Result<Vec<String>> {
        self.read(|db| {
            db.rows("SELECT run_id FROM unpersisted_runs WHERE folder_id = ?1", vals![folder])?
                .iter()
                .map(|r| r.get(0))
                .collect()
        })
    }

    /// Whether a data folder other than `folder` holds unpersisted points of a run.
    pub fn others_hold_unpersisted(&self, run: &RunId, folder: &str) -> Result<bool> {
        self.read(|db| others_hold_unpersisted(db, run, folder))
    }

    /// Every run of a project with its summaries, for the runs table in the object store.
    pub fn export_project(&self, project_id: i64) -> Result<Vec<RunExport>> {
        // One snapshot; runs, params and tags read per table (or kept from earlier reads),
        // summaries in one query.
        self.snapshot(|db| {
            let heads = db
                .rows(
                    "SELECT id, revision FROM runs WHERE project_id = ?1 AND deleted = 0 ORDER BY start_ms, id",
                    vals![project_id],
                )?
                .iter()
                .map(|r| Ok((r.get(0)?, r.get(1)?)))
                .collect::<Result<Vec<(String, i64)>>>()?;
            let runs = self.run_cache.runs(db, &heads)?;
            let mut summaries: HashMap<String, BTreeMap<String, MetricSummary>> = HashMap::with_capacity(runs.len());
            let rows = db.rows(
                "SELECT s.run_id, s.key, s.last, s.last_step, s.last_ms, s.min, s.max, s.count, s.sum, s.sum_count
                 FROM metric_summaries s JOIN runs r ON r.id = s.run_id WHERE r.project_id = ?1 AND r.deleted = 0",
                vals![project_id],
            )?;
            for row in summary_rows(&rows) {
                let (run, key, summary) = row?;
                summaries.entry(run).or_default().insert(key, summary);
            }
            Ok(runs
                .into_iter()
                .map(|(run, _)| {
                    let summaries = summaries.remove(run.id.as_str()).unwrap_or_default();
                    RunExport { run, summaries }
                })
                .collect())
        })
    }

    /// Projects with a run changed at or after `since_ms`.
    pub fn projects_changed_since(&self, since_ms: i64) -> Result<Vec<i64>> {
        self.read(|db| {
            db.rows("SELECT DISTINCT project_id FROM runs WHERE updated_ms >= ?1", vals![since_ms])?
                .iter()
                .map(|r| r.get(0))
                .collect()
        })
    }
}

/// A summary from the columns `last, last_step, last_ms, min, max, count, sum, sum_count` of
/// `metric_summaries`, starting at column `at`.
fn summary_from_row(r: &Row, at: usize) -> Result<MetricSummary> {
    Ok(MetricSummary {
        last: null_to_nan(r.get(at)?),
        last_step: r.get(at + 1)?,
        last_ms: r.get(at + 2)?,
        min: null_to_nan(r.get(at + 3)?),
        max: null_to_nan(r.get(at + 4)?),
        count: r.get::<i64>(at + 5)? as u64,
        sum: null_to_nan(r.get(at + 6)?),
        sum_count: r.get::<i64>(at + 7)? as u64,
    })
}
