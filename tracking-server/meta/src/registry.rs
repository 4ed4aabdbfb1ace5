//! The model registry: registered models, numbered versions pointing at a run's files with a
//! lineage snapshot, movable aliases, tags, archiving and search.

use crate::db::{vals, Db, Dialect, Value as SqlValue};
use crate::{not_found, now_ms, Error, MetaStore, Result};
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct ModelRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub tags: BTreeMap<String, String>,
    pub aliases: BTreeMap<String, i64>,
    pub latest_version: Option<i64>,
    pub version_count: i64,
    pub created_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VersionRow {
    pub model: String,
    pub version: i64,
    pub run_id: String,
    /// What the version was made from: `{"kind": "checkpoint", "name": …}` or `{"kind": "artifact", "path": …}`.
    pub source: Value,
    /// `[{"path", "size", "sha256"}]`, artifact paths of the run.
    pub files: Value,
    pub description: String,
    pub status: String,
    pub lineage: Value,
    pub tags: BTreeMap<String, String>,
    pub aliases: Vec<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Clone, Default)]
pub struct NewVersion {
    pub run_id: String,
    pub source: Value,
    pub files: Value,
    pub description: String,
    pub tags: BTreeMap<String, String>,
    pub lineage: Value,
    pub alias: Option<String>,
}

/// A version named by number or by alias.
#[derive(Debug, Clone, PartialEq)]
pub enum VersionRef {
    Number(i64),
    Alias(String),
}

impl VersionRef {
    pub fn parse(s: &str) -> Self {
        match s.parse::<i64>() {
            Ok(n) => Self::Number(n),
            Err(_) => Self::Alias(s.to_owned()),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct VersionUpdate {
    pub description: Option<String>,
    pub status: Option<String>,
    pub set_tags: BTreeMap<String, String>,
    pub delete_tags: Vec<String>,
}

fn model_id(db: &dyn Db, name: &str) -> Result<i64> {
    db.row("SELECT id FROM registered_models WHERE name = ?1", vals![name])?
        .ok_or_else(|| not_found(format!("model {name:?}")))?
        .get(0)
}

/// `key, value` rows as a map.
fn tags_of(db: &dyn Db, sql: &str, params: &[SqlValue]) -> Result<BTreeMap<String, String>> {
    db.rows(sql, params)?.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
}

fn load_model(db: &dyn Db, id: i64) -> Result<ModelRow> {
    let head = db
        .row("SELECT name, description, created_ms, updated_ms FROM registered_models WHERE id = ?1", vals![id])?
        .ok_or_else(|| not_found(format!("model {id}")))?;
    let tags = tags_of(db, "SELECT key, value FROM model_tags WHERE model_id = ?1", vals![id])?;
    let aliases = db
        .rows("SELECT alias, version FROM model_aliases WHERE model_id = ?1 ORDER BY alias", vals![id])?
        .iter()
        .map(|r| Ok((r.get(0)?, r.get(1)?)))
        .collect::<Result<_>>()?;
    let counts = db
        .row("SELECT max(version), count(*) FROM model_versions WHERE model_id = ?1", vals![id])?
        .ok_or_else(|| Error::Corrupt("an aggregate answered no row".into()))?;
    Ok(ModelRow {
        id,
        name: head.get(0)?,
        description: head.get(1)?,
        tags,
        aliases,
        latest_version: counts.get(0)?,
        version_count: counts.get(1)?,
        created_ms: head.get(2)?,
        updated_ms: head.get(3)?,
    })
}

fn resolve(db: &dyn Db, id: i64, name: &str, vref: &VersionRef) -> Result<i64> {
    let found = match vref {
        VersionRef::Number(n) => {
            db.row("SELECT version FROM model_versions WHERE model_id = ?1 AND version = ?2", vals![id, *n])?
        }
        VersionRef::Alias(a) => {
            db.row("SELECT version FROM model_aliases WHERE model_id = ?1 AND alias = ?2", vals![id, a.as_str()])?
        }
    };
    match (found, vref) {
        (Some(row), _) => row.get(0),
        (None, VersionRef::Number(n)) => Err(not_found(format!("version {n} of model {name:?}"))),
        (None, VersionRef::Alias(a)) => Err(not_found(format!("alias {a:?} of model {name:?}"))),
    }
}

fn load_version(db: &dyn Db, id: i64, model: &str, version: i64) -> Result<VersionRow> {
    let parse = |text: String| serde_json::from_str(&text).unwrap_or(Value::Null);
    let r = db
        .row(
            "SELECT run_id, source, files, description, status, lineage, created_ms, updated_ms FROM model_versions
             WHERE model_id = ?1 AND version = ?2",
            vals![id, version],
        )?
        .ok_or_else(|| not_found(format!("version {version} of model {model:?}")))?;
    let tags = tags_of(
        db,
        "SELECT key, value FROM model_version_tags WHERE model_id = ?1 AND version = ?2",
        vals![id, version],
    )?;
    let aliases = db
        .rows(
            "SELECT alias FROM model_aliases WHERE model_id = ?1 AND version = ?2 ORDER BY alias",
            vals![id, version],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect::<Result<_>>()?;
    Ok(VersionRow {
        model: model.to_owned(),
        version,
        run_id: r.get(0)?,
        source: parse(r.get(1)?),
        files: parse(r.get(2)?),
        description: r.get(3)?,
        status: r.get(4)?,
        lineage: parse(r.get(5)?),
        tags,
        aliases,
        created_ms: r.get(6)?,
        updated_ms: r.get(7)?,
    })
}

fn set_alias_in(db: &dyn Db, id: i64, alias: &str, version: i64) -> Result<()> {
    db.exec(
        "INSERT INTO model_aliases (model_id, alias, version) VALUES (?1, ?2, ?3)
         ON CONFLICT (model_id, alias) DO UPDATE SET version = excluded.version",
        vals![id, alias, version],
    )?;
    Ok(())
}

/// Adds a model without description or tags; answers its id.
fn insert_model(db: &dyn Db, name: &str, description: &str, now: i64) -> Result<i64> {
    db.row(
        "INSERT INTO registered_models (name, description, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?3) RETURNING id",
        vals![name, description, now],
    )?
    .ok_or_else(|| Error::Corrupt("an insert returned no id".into()))?
    .get(0)
}

/// Sets and deletes tags in `table`, whose rows are keyed by `key_columns` (comma-separated,
/// one per value in `ids`) plus `key`.
fn write_tags(
    db: &dyn Db,
    table: &str,
    key_columns: &str,
    ids: &[i64],
    set: &BTreeMap<String, String>,
    delete: &[String],
) -> Result<()> {
    let n = ids.len();
    let marks: Vec<String> = (1..=n).map(|i| format!("?{i}")).collect();
    let matches: Vec<String> = key_columns.split(", ").zip(&marks).map(|(c, m)| format!("{c} = {m}")).collect();
    let insert = format!(
        "INSERT INTO {table} ({key_columns}, key, value) VALUES ({}, ?{}, ?{})
         ON CONFLICT ({key_columns}, key) DO UPDATE SET value = excluded.value",
        marks.join(", "),
        n + 1,
        n + 2
    );
    let remove = format!("DELETE FROM {table} WHERE {} AND key = ?{}", matches.join(" AND "), n + 1);
    let with = |extra: &[&String]| -> Vec<SqlValue> {
        ids.iter().map(|i| SqlValue::from(*i)).chain(extra.iter().map(|s| SqlValue::from(*s))).collect()
    };
    for (k, v) in set {
        db.exec(&insert, &with(&[k, v]))?;
    }
    for k in delete {
        db.exec(&remove, &with(&[k]))?;
    }
    Ok(())
}

impl MetaStore {
    /// Registers a model; its creator becomes its admin.
    pub fn create_model(
        &self,
        name: &str,
        description: &str,
        tags: &BTreeMap<String, String>,
        creator: Option<&crate::Actor>,
    ) -> Result<ModelRow> {
        self.write(|tx| {
            if tx.exists("SELECT id FROM registered_models WHERE name = ?1", vals![name])? {
                return Err(Error::Conflict { field: "name".into(), reason: format!("model {name:?} already exists") });
            }
            let id = insert_model(tx, name, description, now_ms())?;
            write_tags(tx, "model_tags", "model_id", &[id], tags, &[])?;
            crate::roles::make_admin_in(tx, creator, crate::Scope::Model, id)?;
            let model = load_model(tx, id)?;
            Ok(model)
        })
    }

    pub fn model(&self, name: &str) -> Result<ModelRow> {
        self.read(|db| load_model(db, model_id(db, name)?))
    }

    /// Models whose name contains `search` (all when empty), or that carry a tag whose key or value contains it.
    pub fn models(&self, search: &str) -> Result<Vec<ModelRow>> {
        self.read(|db| {
            let pattern = format!("%{}%", search.replace('!', "!!").replace('%', "!%").replace('_', "!_"));
            // Case-insensitive, as SQLite's LIKE is.
            let like = match db.dialect() {
                Dialect::Sqlite => "LIKE",
                Dialect::Postgres => "ILIKE",
            };
            let ids = db.rows(
                &format!(
                    "SELECT id FROM registered_models m WHERE m.name {like} ?1 ESCAPE '!'
                       OR EXISTS (SELECT 1 FROM model_tags t WHERE t.model_id = m.id
                                  AND (t.key {like} ?1 ESCAPE '!' OR t.value {like} ?1 ESCAPE '!'))
                     ORDER BY m.name"
                ),
                vals![pattern],
            )?;
            ids.iter().map(|r| load_model(db, r.get(0)?)).collect()
        })
    }

    /// Gives a model another name; its versions, aliases, tags and roles follow it.
    pub fn rename_model(&self, name: &str, new_name: &str) -> Result<ModelRow> {
        self.write(|tx| {
            let id = model_id(tx, name)?;
            let taken: Option<i64> = tx
                .row("SELECT id FROM registered_models WHERE name = ?1", vals![new_name])?
                .map(|r| r.get(0))
                .transpose()?;
            if taken.is_some_and(|other| other != id) {
                return Err(Error::Conflict {
                    field: "new_name".into(),
                    reason: format!("model {new_name:?} already exists"),
                });
            }
            tx.exec(
                "UPDATE registered_models SET name = ?2, updated_ms = ?3 WHERE id = ?1",
                vals![id, new_name, now_ms()],
            )?;
            let model = load_model(tx, id)?;
            Ok(model)
        })
    }

    pub fn update_model(
        &self,
        name: &str,
        description: Option<&str>,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<ModelRow> {
        self.write(|tx| {
            let id = model_id(tx, name)?;
            if let Some(d) = description {
                tx.exec("UPDATE registered_models SET description = ?2 WHERE id = ?1", vals![id, d])?;
            }
            write_tags(tx, "model_tags", "model_id", &[id], set, delete)?;
            tx.exec("UPDATE registered_models SET updated_ms = ?2 WHERE id = ?1", vals![id, now_ms()])?;
            let model = load_model(tx, id)?;
            Ok(model)
        })
    }

    /// Deletes a model with its versions, aliases and tags (the run's files stay).
    pub fn delete_model(&self, name: &str) -> Result<()> {
        self.write(|tx| {
            let id = model_id(tx, name)?;
            for table in ["model_aliases", "model_version_tags", "model_versions", "model_tags"] {
                tx.exec(&format!("DELETE FROM {table} WHERE model_id = ?1"), vals![id])?;
            }
            tx.exec("DELETE FROM registered_models WHERE id = ?1", vals![id])?;
            Ok(())
        })
    }

    /// Adds the next version of a model (creating the model if needed).
    pub fn create_version(&self, name: &str, new: &NewVersion) -> Result<VersionRow> {
        self.write(|tx| {
            let now = now_ms();
            let id = match model_id(tx, name) {
                Ok(id) => id,
                Err(Error::NotFound { .. }) => insert_model(tx, name, "", now)?,
                Err(e) => return Err(e),
            };
            let version: i64 = tx
                .row("SELECT coalesce(max(version), 0) + 1 FROM model_versions WHERE model_id = ?1", vals![id])?
                .ok_or_else(|| Error::Corrupt("an aggregate answered no row".into()))?
                .get(0)?;
            tx.exec(
                "INSERT INTO model_versions (model_id, version, run_id, source, files, description, status, lineage, created_ms, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'ready', ?7, ?8, ?8)",
                vals![
                    id,
                    version,
                    new.run_id.as_str(),
                    new.source.to_string(),
                    new.files.to_string(),
                    new.description.as_str(),
                    new.lineage.to_string(),
                    now
                ],
            )?;
            write_tags(tx, "model_version_tags", "model_id, version", &[id, version], &new.tags, &[])?;
            if let Some(alias) = &new.alias {
                set_alias_in(tx, id, alias, version)?;
            }
            tx.exec("UPDATE registered_models SET updated_ms = ?2 WHERE id = ?1", vals![id, now])?;
            let row = load_version(tx, id, name, version)?;
            Ok(row)
        })
    }

    pub fn version(&self, name: &str, vref: &VersionRef) -> Result<VersionRow> {
        self.read(|db| {
            let id = model_id(db, name)?;
            let version = resolve(db, id, name, vref)?;
            load_version(db, id, name, version)
        })
    }

    /// Versions of a model, newest first; `status` filters (`ready`, `archived`) when given.
    pub fn versions(&self, name: &str, status: Option<&str>) -> Result<Vec<VersionRow>> {
        self.read(|db| {
            let id = model_id(db, name)?;
            let versions = db.rows(
                "SELECT version FROM model_versions WHERE model_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR status = ?2)
                 ORDER BY version DESC",
                vals![id, status],
            )?;
            versions.iter().map(|r| load_version(db, id, name, r.get(0)?)).collect()
        })
    }

    pub fn update_version(&self, name: &str, vref: &VersionRef, update: &VersionUpdate) -> Result<VersionRow> {
        self.write(|tx| {
            let id = model_id(tx, name)?;
            let version = resolve(tx, id, name, vref)?;
            if let Some(d) = &update.description {
                tx.exec(
                    "UPDATE model_versions SET description = ?3 WHERE model_id = ?1 AND version = ?2",
                    vals![id, version, d.as_str()],
                )?;
            }
            if let Some(s) = &update.status {
                tx.exec(
                    "UPDATE model_versions SET status = ?3 WHERE model_id = ?1 AND version = ?2",
                    vals![id, version, s.as_str()],
                )?;
            }
            write_tags(
                tx,
                "model_version_tags",
                "model_id, version",
                &[id, version],
                &update.set_tags,
                &update.delete_tags,
            )?;
            tx.exec(
                "UPDATE model_versions SET updated_ms = ?3 WHERE model_id = ?1 AND version = ?2",
                vals![id, version, now_ms()],
            )?;
            let row = load_version(tx, id, name, version)?;
            Ok(row)
        })
    }

    pub fn delete_version(&self, name: &str, vref: &VersionRef) -> Result<()> {
        self.write(|tx| {
            let id = model_id(tx, name)?;
            let version = resolve(tx, id, name, vref)?;
            for table in ["model_aliases", "model_version_tags", "model_versions"] {
                tx.exec(&format!("DELETE FROM {table} WHERE model_id = ?1 AND version = ?2"), vals![id, version])?;
            }
            Ok(())
        })
    }

    /// Points `alias` at a version (moving it if it pointed elsewhere).
    pub fn set_alias(&self, name: &str, alias: &str, vref: &VersionRef) -> Result<VersionRow> {
        self.write(|tx| {
            let id = model_id(tx, name)?;
            let version = resolve(tx, id, name, vref)?;
            set_alias_in(tx, id, alias, version)?;
            let row = load_version(tx, id, name, version)?;
            Ok(row)
        })
    }

    pub fn delete_alias(&self, name: &str, alias: &str) -> Result<()> {
        self.write(|db| {
            let id = model_id(db, name)?;
            let n = db.exec("DELETE FROM model_aliases WHERE model_id = ?1 AND alias = ?2", vals![id, alias])?;
            if n == 0 {
                return Err(not_found(format!("alias {alias:?} of model {name:?}")));
            }
            Ok(())
        })
    }

    /// Which of a run's files (`[{"path", "sha256"}]`) are no longer stored as recorded.
    pub fn missing_files(&self, run_id: &str, files: &Value) -> Result<Vec<String>> {
        self.read(|db| {
            let mut missing = Vec::new();
            for f in files.as_array().into_iter().flatten() {
                let path = f["path"].as_str().unwrap_or_default();
                let sha: Option<String> = db
                    .row("SELECT sha256 FROM artifacts WHERE run_id = ?1 AND path = ?2", vals![run_id, path])?
                    .map(|r| r.get(0))
                    .transpose()?;
                if sha.as_deref() != f["sha256"].as_str() {
                    missing.push(path.to_owned());
                }
            }
            Ok(missing)
        })
    }
}
