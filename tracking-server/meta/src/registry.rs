//! The model registry: registered models, numbered versions pointing at a run's files with a
//! lineage snapshot, movable aliases, tags, archiving and search.

use crate::{not_found, now_ms, Error, MetaStore, Result};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
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

fn model_id(conn: &Connection, name: &str) -> Result<i64> {
    conn.query_row("SELECT id FROM registered_models WHERE name = ?1", [name], |r| r.get(0))
        .optional()?
        .ok_or_else(|| not_found(format!("model {name:?}")))
}

fn tags_of(conn: &Connection, sql: &str, p: impl rusqlite::Params) -> Result<BTreeMap<String, String>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(p, |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn load_model(conn: &Connection, id: i64) -> Result<ModelRow> {
    let (name, description, created_ms, updated_ms): (String, String, i64, i64) = conn.query_row(
        "SELECT name, description, created_ms, updated_ms FROM registered_models WHERE id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    let tags = tags_of(conn, "SELECT key, value FROM model_tags WHERE model_id = ?1", [id])?;
    let mut stmt =
        conn.prepare_cached("SELECT alias, version FROM model_aliases WHERE model_id = ?1 ORDER BY alias")?;
    let aliases = stmt
        .query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let (latest_version, version_count): (Option<i64>, i64) =
        conn.query_row("SELECT max(version), count(*) FROM model_versions WHERE model_id = ?1", [id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    Ok(ModelRow { id, name, description, tags, aliases, latest_version, version_count, created_ms, updated_ms })
}

fn resolve(conn: &Connection, id: i64, name: &str, vref: &VersionRef) -> Result<i64> {
    match vref {
        VersionRef::Number(n) => conn
            .query_row("SELECT version FROM model_versions WHERE model_id = ?1 AND version = ?2", params![id, n], |r| {
                r.get(0)
            })
            .optional()?
            .ok_or_else(|| not_found(format!("version {n} of model {name:?}"))),
        VersionRef::Alias(a) => conn
            .query_row("SELECT version FROM model_aliases WHERE model_id = ?1 AND alias = ?2", params![id, a], |r| {
                r.get(0)
            })
            .optional()?
            .ok_or_else(|| not_found(format!("alias {a:?} of model {name:?}"))),
    }
}

fn load_version(conn: &Connection, id: i64, model: &str, version: i64) -> Result<VersionRow> {
    let parse = |text: String| serde_json::from_str(&text).unwrap_or(Value::Null);
    let row = conn.query_row(
        "SELECT run_id, source, files, description, status, lineage, created_ms, updated_ms FROM model_versions
         WHERE model_id = ?1 AND version = ?2",
        params![id, version],
        |r| {
            Ok(VersionRow {
                model: model.to_owned(),
                version,
                run_id: r.get(0)?,
                source: parse(r.get(1)?),
                files: parse(r.get(2)?),
                description: r.get(3)?,
                status: r.get(4)?,
                lineage: parse(r.get(5)?),
                tags: BTreeMap::new(),
                aliases: Vec::new(),
                created_ms: r.get(6)?,
                updated_ms: r.get(7)?,
            })
        },
    )?;
    let tags = tags_of(
        conn,
        "SELECT key, value FROM model_version_tags WHERE model_id = ?1 AND version = ?2",
        params![id, version],
    )?;
    let mut stmt =
        conn.prepare_cached("SELECT alias FROM model_aliases WHERE model_id = ?1 AND version = ?2 ORDER BY alias")?;
    let aliases = stmt.query_map(params![id, version], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(VersionRow { tags, aliases, ..row })
}

fn set_alias_tx(tx: &Transaction<'_>, id: i64, alias: &str, version: i64) -> Result<()> {
    tx.execute(
        "INSERT INTO model_aliases (model_id, alias, version) VALUES (?1, ?2, ?3)
         ON CONFLICT (model_id, alias) DO UPDATE SET version = excluded.version",
        params![id, alias, version],
    )?;
    Ok(())
}

/// Sets and deletes tags in `table`, whose rows are keyed by `key_columns` (comma-separated,
/// one per value in `ids`) plus `key`.
fn write_tags(
    tx: &Transaction<'_>,
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
        "INSERT INTO {table} ({key_columns}, key, value) VALUES ({}, ?{}, ?{}) ON CONFLICT DO UPDATE SET value = excluded.value",
        marks.join(", "),
        n + 1,
        n + 2
    );
    let remove = format!("DELETE FROM {table} WHERE {} AND key = ?{}", matches.join(" AND "), n + 1);
    let with = |extra: &[&String]| -> Vec<rusqlite::types::Value> {
        ids.iter().map(|i| (*i).into()).chain(extra.iter().map(|s| (*s).clone().into())).collect()
    };
    for (k, v) in set {
        tx.execute(&insert, rusqlite::params_from_iter(with(&[k, v])))?;
    }
    for k in delete {
        tx.execute(&remove, rusqlite::params_from_iter(with(&[k])))?;
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
        self.write(|conn| {
            let tx = conn.transaction()?;
            let exists: Option<i64> =
                tx.query_row("SELECT id FROM registered_models WHERE name = ?1", [name], |r| r.get(0)).optional()?;
            if exists.is_some() {
                return Err(Error::Conflict { field: "name".into(), reason: format!("model {name:?} already exists") });
            }
            let now = now_ms();
            tx.execute(
                "INSERT INTO registered_models (name, description, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?3)",
                params![name, description, now],
            )?;
            let id = tx.last_insert_rowid();
            write_tags(&tx, "model_tags", "model_id", &[id], tags, &[])?;
            crate::roles::make_admin_in(&tx, creator, crate::Scope::Model, id)?;
            let model = load_model(&tx, id)?;
            tx.commit()?;
            Ok(model)
        })
    }

    pub fn model(&self, name: &str) -> Result<ModelRow> {
        self.read(|conn| load_model(conn, model_id(conn, name)?))
    }

    /// Models whose name contains `search` (all when empty), or that carry a tag whose key or value contains it.
    pub fn models(&self, search: &str) -> Result<Vec<ModelRow>> {
        self.read(|conn| {
            let pattern = format!("%{}%", search.replace('!', "!!").replace('%', "!%").replace('_', "!_"));
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM registered_models m WHERE m.name LIKE ?1 ESCAPE '!'
                   OR EXISTS (SELECT 1 FROM model_tags t WHERE t.model_id = m.id AND (t.key LIKE ?1 ESCAPE '!' OR t.value LIKE ?1 ESCAPE '!'))
                 ORDER BY m.name",
            )?;
            let ids: Vec<i64> = stmt.query_map([pattern], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
            ids.into_iter().map(|id| load_model(conn, id)).collect()
        })
    }

    /// Gives a model another name; its versions, aliases, tags and roles follow it.
    pub fn rename_model(&self, name: &str, new_name: &str) -> Result<ModelRow> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let id = model_id(&tx, name)?;
            let taken: Option<i64> = tx
                .query_row("SELECT id FROM registered_models WHERE name = ?1", [new_name], |r| r.get(0))
                .optional()?;
            if taken.is_some_and(|other| other != id) {
                return Err(Error::Conflict {
                    field: "new_name".into(),
                    reason: format!("model {new_name:?} already exists"),
                });
            }
            tx.execute(
                "UPDATE registered_models SET name = ?2, updated_ms = ?3 WHERE id = ?1",
                params![id, new_name, now_ms()],
            )?;
            let model = load_model(&tx, id)?;
            tx.commit()?;
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
        self.write(|conn| {
            let tx = conn.transaction()?;
            let id = model_id(&tx, name)?;
            if let Some(d) = description {
                tx.execute("UPDATE registered_models SET description = ?2 WHERE id = ?1", params![id, d])?;
            }
            write_tags(&tx, "model_tags", "model_id", &[id], set, delete)?;
            tx.execute("UPDATE registered_models SET updated_ms = ?2 WHERE id = ?1", params![id, now_ms()])?;
            let model = load_model(&tx, id)?;
            tx.commit()?;
            Ok(model)
        })
    }

    /// Deletes a model with its versions, aliases and tags (the run's files stay).
    pub fn delete_model(&self, name: &str) -> Result<()> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let id = model_id(&tx, name)?;
            for table in ["model_aliases", "model_version_tags", "model_versions", "model_tags"] {
                tx.execute(&format!("DELETE FROM {table} WHERE model_id = ?1"), [id])?;
            }
            tx.execute("DELETE FROM registered_models WHERE id = ?1", [id])?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Adds the next version of a model (creating the model if needed).
    pub fn create_version(&self, name: &str, new: &NewVersion) -> Result<VersionRow> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let now = now_ms();
            let id = match model_id(&tx, name) {
                Ok(id) => id,
                Err(Error::NotFound { .. }) => {
                    tx.execute(
                        "INSERT INTO registered_models (name, description, created_ms, updated_ms) VALUES (?1, '', ?2, ?2)",
                        params![name, now],
                    )?;
                    tx.last_insert_rowid()
                }
                Err(e) => return Err(e),
            };
            let version: i64 =
                tx.query_row("SELECT coalesce(max(version), 0) + 1 FROM model_versions WHERE model_id = ?1", [id], |r| r.get(0))?;
            tx.execute(
                "INSERT INTO model_versions (model_id, version, run_id, source, files, description, status, lineage, created_ms, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'ready', ?7, ?8, ?8)",
                params![id, version, new.run_id, new.source.to_string(), new.files.to_string(), new.description, new.lineage.to_string(), now],
            )?;
            write_tags(&tx, "model_version_tags", "model_id, version", &[id, version], &new.tags, &[])?;
            if let Some(alias) = &new.alias {
                set_alias_tx(&tx, id, alias, version)?;
            }
            tx.execute("UPDATE registered_models SET updated_ms = ?2 WHERE id = ?1", params![id, now])?;
            let row = load_version(&tx, id, name, version)?;
            tx.commit()?;
            Ok(row)
        })
    }

    pub fn version(&self, name: &str, vref: &VersionRef) -> Result<VersionRow> {
        self.read(|conn| {
            let id = model_id(conn, name)?;
            let version = resolve(conn, id, name, vref)?;
            load_version(conn, id, name, version)
        })
    }

    /// Versions of a model, newest first; `status` filters (`ready`, `archived`) when given.
    pub fn versions(&self, name: &str, status: Option<&str>) -> Result<Vec<VersionRow>> {
        self.read(|conn| {
            let id = model_id(conn, name)?;
            let mut stmt = conn.prepare_cached(
                "SELECT version FROM model_versions WHERE model_id = ?1 AND (?2 IS NULL OR status = ?2) ORDER BY version DESC",
            )?;
            let versions: Vec<i64> = stmt.query_map(params![id, status], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
            versions.into_iter().map(|v| load_version(conn, id, name, v)).collect()
        })
    }

    pub fn update_version(&self, name: &str, vref: &VersionRef, update: &VersionUpdate) -> Result<VersionRow> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let id = model_id(&tx, name)?;
            let version = resolve(&tx, id, name, vref)?;
            if let Some(d) = &update.description {
                tx.execute(
                    "UPDATE model_versions SET description = ?3 WHERE model_id = ?1 AND version = ?2",
                    params![id, version, d],
                )?;
            }
            if let Some(s) = &update.status {
                tx.execute(
                    "UPDATE model_versions SET status = ?3 WHERE model_id = ?1 AND version = ?2",
                    params![id, version, s],
                )?;
            }
            write_tags(
                &tx,
                "model_version_tags",
                "model_id, version",
                &[id, version],
                &update.set_tags,
                &update.delete_tags,
            )?;
            tx.execute(
                "UPDATE model_versions SET updated_ms = ?3 WHERE model_id = ?1 AND version = ?2",
                params![id, version, now_ms()],
            )?;
            let row = load_version(&tx, id, name, version)?;
            tx.commit()?;
            Ok(row)
        })
    }

    pub fn delete_version(&self, name: &str, vref: &VersionRef) -> Result<()> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let id = model_id(&tx, name)?;
            let version = resolve(&tx, id, name, vref)?;
            for table in ["model_aliases", "model_version_tags", "model_versions"] {
                tx.execute(&format!("DELETE FROM {table} WHERE model_id = ?1 AND version = ?2"), params![id, version])?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// Points `alias` at a version (moving it if it pointed elsewhere).
    pub fn set_alias(&self, name: &str, alias: &str, vref: &VersionRef) -> Result<VersionRow> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let id = model_id(&tx, name)?;
            let version = resolve(&tx, id, name, vref)?;
            set_alias_tx(&tx, id, alias, version)?;
            let row = load_version(&tx, id, name, version)?;
            tx.commit()?;
            Ok(row)
        })
    }

    pub fn delete_alias(&self, name: &str, alias: &str) -> Result<()> {
        self.write(|conn| {
            let id = model_id(conn, name)?;
            let n = conn.execute("DELETE FROM model_aliases WHERE model_id = ?1 AND alias = ?2", params![id, alias])?;
            if n == 0 {
                return Err(not_found(format!("alias {alias:?} of model {name:?}")));
            }
            Ok(())
        })
    }

    /// Which of a run's files (`[{"path", "sha256"}]`) are no longer stored as recorded.
    pub fn missing_files(&self, run_id: &str, files: &Value) -> Result<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached("SELECT sha256 FROM artifacts WHERE run_id = ?1 AND path = ?2")?;
            let mut missing = Vec::new();
            for f in files.as_array().into_iter().flatten() {
                let path = f["path"].as_str().unwrap_or_default();
                let sha: Option<String> = stmt.query_row(params![run_id, path], |r| r.get(0)).optional()?;
                if sha.as_deref() != f["sha256"].as_str() {
                    missing.push(path.to_owned());
                }
            }
            Ok(missing)
        })
    }
}
