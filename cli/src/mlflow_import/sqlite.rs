//! What an MLflow installation holds, read from its SQLite database (opened read-only) and its
//! artifact root on this machine.

use super::source::{
    local_files, local_folder, open_local, proxied_path, unsupported, Experiment, LoggedModel, Point, RegisteredModel,
    Source, SourceRun, Version,
};
use super::{Error, Result};
use rusqlite::{Connection, OpenFlags};
use std::io::Read;
use std::path::PathBuf;

pub struct SqliteSource {
    path: PathBuf,
    conn: Connection,
    /// Where `mlflow-artifacts:/…` URIs point: the MLflow server's `--artifacts-destination`.
    artifact_root: Option<PathBuf>,
}

fn sql_error(e: rusqlite::Error) -> Error {
    Error::Source(format!("reading the MLflow database: {e}"))
}

/// MLflow's `LoggedModelStatus`: 2 is READY.
const LOGGED_MODEL_READY: i64 = 2;

impl SqliteSource {
    pub fn open(path: PathBuf, artifact_root: Option<PathBuf>) -> Result<Self> {
        let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| Error::Source(format!("opening {}: {e}", path.display())))?;
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('experiments', 'runs', 'metrics')", [], |r| r.get(0))
            .map_err(sql_error)?;
        if tables != 3 {
            return Err(Error::Source(format!("{} is not an MLflow tracking database", path.display())));
        }
        Ok(Self { path, conn, artifact_root })
    }

    fn has_table(&self, name: &str) -> Result<bool> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [name], |r| r.get(0))
            .map_err(sql_error)?;
        Ok(n == 1)
    }

    fn pairs(&self, sql: &str, id: &dyn rusqlite::ToSql) -> Result<Vec<(String, String)>> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(sql_error)?;
        let rows = stmt
            .query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?.unwrap_or_default())))
            .map_err(sql_error)?;
        rows.collect::<rusqlite::Result<_>>().map_err(sql_error)
    }

    /// The folder an artifact URI names on this machine.
    fn folder(&self, uri: &str) -> Result<PathBuf> {
        if let Some(folder) = local_folder(uri) {
            return Ok(folder);
        }
        match (proxied_path(uri), &self.artifact_root) {
            (Some(path), Some(root)) => Ok(root.join(path)),
            (Some(_), None) => Err(Error::Source(format!(
                "artifacts at {uri:?} live in the MLflow server's --artifacts-destination: name that folder with --artifacts"
            ))),
            (None, _) => Err(unsupported(uri)),
        }
    }
}

impl Source for SqliteSource {
    fn describe(&self) -> String {
        format!("the MLflow database {}", self.path.display())
    }

    fn experiments(&self) -> Result<Vec<Experiment>> {
        let mut stmt = self
            .conn
            .prepare("SELECT experiment_id, name, lifecycle_stage FROM experiments ORDER BY experiment_id")
            .map_err(sql_error)?;
        let rows: Vec<(i64, String, Option<String>)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(sql_error)?
            .collect::<rusqlite::Result<_>>()
            .map_err(sql_error)?;
        rows.into_iter()
            .map(|(id, name, stage)| {
                Ok(Experiment {
                    id: id.to_string(),
                    name,
                    deleted: stage.as_deref() == Some("deleted"),
                    tags: self
                        .pairs("SELECT key, value FROM experiment_tags WHERE experiment_id = ?1 ORDER BY key", &id)?,
                })
            })
            .collect()
    }

    fn runs(&self, experiment: &Experiment) -> Result<Vec<SourceRun>> {
        let experiment_id: i64 =
            experiment.id.parse().map_err(|_| Error::Source(format!("experiment id {}", experiment.id)))?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run_uuid, name, user_id, status, start_time, end_time, lifecycle_stage, artifact_uri
                 FROM runs WHERE experiment_id = ?1 ORDER BY start_time, run_uuid",
            )
            .map_err(sql_error)?;
        type Row = (
            String,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<i64>,
            Option<i64>,
            Option<String>,
            Option<String>,
        );
        let rows: Vec<Row> = stmt
            .query_map([experiment_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?))
            })
            .map_err(sql_error)?
            .collect::<rusqlite::Result<_>>()
            .map_err(sql_error)?;
        rows.into_iter()
            .map(|(id, name, user, status, start_time, end_time, stage, artifact_uri)| {
                let mut keys = self
                    .conn
                    .prepare_cached("SELECT DISTINCT key FROM metrics WHERE run_uuid = ?1 ORDER BY key")
                    .map_err(sql_error)?;
                let metric_keys = keys
                    .query_map([&id], |r| r.get(0))
                    .map_err(sql_error)?
                    .collect::<rusqlite::Result<_>>()
                    .map_err(sql_error)?;
                Ok(SourceRun {
                    params: self.pairs("SELECT key, value FROM params WHERE run_uuid = ?1 ORDER BY key", &id)?,
                    tags: self.pairs("SELECT key, value FROM tags WHERE run_uuid = ?1 ORDER BY key", &id)?,
                    name: name.unwrap_or_default(),
                    user: user.unwrap_or_default(),
                    status: status.unwrap_or_else(|| "FINISHED".into()),
                    start_time,
                    end_time,
                    deleted: stage.as_deref() == Some("deleted"),
                    metric_keys,
                    artifact_uri: artifact_uri.unwrap_or_default(),
                    id,
                })
            })
            .collect()
    }

    fn history(&self, run: &SourceRun, key: &str) -> Result<Vec<Point>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT step, timestamp, value, is_nan FROM metrics WHERE run_uuid = ?1 AND key = ?2 ORDER BY timestamp, step, value",
            )
            .map_err(sql_error)?;
        let rows = stmt
            .query_map([&run.id, key], |r| {
                let is_nan: bool = r.get(3)?;
                Ok(Point { step: r.get(0)?, timestamp: r.get(1)?, value: if is_nan { f64::NAN } else { r.get(2)? } })
            })
            .map_err(sql_error)?;
        rows.collect::<rusqlite::Result<_>>().map_err(sql_error)
    }

    fn logged_models(&self, experiment: &Experiment) -> Result<Vec<LoggedModel>> {
        if !self.has_table("logged_models")? {
            return Ok(Vec::new());
        }
        let experiment_id: i64 =
            experiment.id.parse().map_err(|_| Error::Source(format!("experiment id {}", experiment.id)))?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT model_id, name, model_type, source_run_id, status, artifact_location FROM logged_models
                 WHERE experiment_id = ?1 AND coalesce(lifecycle_stage, 'active') = 'active' ORDER BY creation_timestamp_ms",
            )
            .map_err(sql_error)?;
        type Row = (String, String, Option<String>, Option<String>, i64, String);
        let rows: Vec<Row> = stmt
            .query_map([experiment_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
            .map_err(sql_error)?
            .collect::<rusqlite::Result<_>>()
            .map_err(sql_error)?;
        rows.into_iter()
            .map(|(id, name, model_type, source_run_id, status, artifact_uri)| {
                Ok(LoggedModel {
                    params: self.pairs(
                        "SELECT param_key, param_value FROM logged_model_params WHERE model_id = ?1 ORDER BY param_key",
                        &id,
                    )?,
                    tags: self.pairs(
                        "SELECT tag_key, tag_value FROM logged_model_tags WHERE model_id = ?1 ORDER BY tag_key",
                        &id,
                    )?,
                    name,
                    model_type: model_type.unwrap_or_default(),
                    source_run_id: source_run_id.filter(|r| !r.is_empty()),
                    ready: status == LOGGED_MODEL_READY,
                    artifact_uri,
                    id,
                })
            })
            .collect()
    }

    fn registered_models(&self) -> Result<Vec<RegisteredModel>> {
        let mut stmt =
            self.conn.prepare("SELECT name, description FROM registered_models ORDER BY name").map_err(sql_error)?;
        let rows: Vec<(String, Option<String>)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(sql_error)?
            .collect::<rusqlite::Result<_>>()
            .map_err(sql_error)?;
        rows.into_iter()
            .map(|(name, description)| {
                let aliases = self
                    .pairs("SELECT alias, CAST(version AS TEXT) FROM registered_model_aliases WHERE name = ?1 ORDER BY alias", &name)?
                    .into_iter()
                    .filter_map(|(alias, v)| Some((alias, v.parse().ok()?)))
                    .collect();
                Ok(RegisteredModel {
                    tags: self.pairs("SELECT key, value FROM registered_model_tags WHERE name = ?1 ORDER BY key", &name)?,
                    description: description.unwrap_or_default(),
                    aliases,
                    name,
                })
            })
            .collect()
    }

    fn versions(&self, model: &str) -> Result<Vec<Version>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT version, source, run_id, description, current_stage FROM model_versions
                 WHERE name = ?1 AND coalesce(current_stage, '') != 'Deleted_Internal' ORDER BY version",
            )
            .map_err(sql_error)?;
        type Row = (i64, Option<String>, Option<String>, Option<String>, Option<String>);
        let rows: Vec<Row> = stmt
            .query_map([model], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .map_err(sql_error)?
            .collect::<rusqlite::Result<_>>()
            .map_err(sql_error)?;
        let mut tags = self
            .conn
            .prepare_cached("SELECT key, value FROM model_version_tags WHERE name = ?1 AND version = ?2 ORDER BY key")
            .map_err(sql_error)?;
        rows.into_iter()
            .map(|(number, source, run_id, description, stage)| {
                let tags = tags
                    .query_map(rusqlite::params![model, number], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?.unwrap_or_default()))
                    })
                    .map_err(sql_error)?
                    .collect::<rusqlite::Result<_>>()
                    .map_err(sql_error)?;
                Ok(Version {
                    number,
                    source: source.unwrap_or_default(),
                    run_id: run_id.filter(|r| !r.is_empty()),
                    description: description.unwrap_or_default(),
                    stage: stage.unwrap_or_else(|| "None".into()),
                    tags,
                })
            })
            .collect()
    }

    fn artifact_files(&self, uri: &str) -> Result<Vec<String>> {
        local_files(&self.folder(uri)?)
    }

    fn open_artifact(&self, uri: &str, path: &str) -> Result<(Box<dyn Read + Send>, Option<u64>)> {
        open_local(&self.folder(uri)?, path)
    }
}
