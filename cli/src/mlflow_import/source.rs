//! What an MLflow installation holds, read from a running MLflow server over its REST API.

use super::rest::{double_value, pairs, text, Rest};
use super::{Error, Result};
use serde_json::{json, Value};
use std::io::Read;
use std::path::PathBuf;

pub struct Experiment {
    pub id: String,
    pub name: String,
    pub deleted: bool,
    pub tags: Vec<(String, String)>,
}

pub struct SourceRun {
    pub id: String,
    pub name: String,
    pub user: String,
    pub status: String,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    pub deleted: bool,
    pub params: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
    pub metric_keys: Vec<String>,
    pub artifact_uri: String,
}

impl SourceRun {
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub step: i64,
    pub timestamp: i64,
    pub value: f64,
}

pub struct LoggedModel {
    pub id: String,
    pub name: String,
    pub model_type: String,
    pub source_run_id: Option<String>,
    pub ready: bool,
    pub params: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
    pub artifact_uri: String,
}

pub struct RegisteredModel {
    pub name: String,
    pub description: String,
    pub tags: Vec<(String, String)>,
    pub aliases: Vec<(String, i64)>,
}

pub struct Version {
    pub number: i64,
    pub source: String,
    pub run_id: Option<String>,
    pub description: String,
    pub stage: String,
    pub tags: Vec<(String, String)>,
}

/// An MLflow installation to copy from.
pub trait Source {
    fn describe(&self) -> String;
    /// Every experiment, deleted ones too.
    fn experiments(&self) -> Result<Vec<Experiment>>;
    /// Every run of an experiment, deleted ones too.
    fn runs(&self, experiment: &Experiment) -> Result<Vec<SourceRun>>;
    /// Every point of a run's metric, in the order MLflow returns them.
    fn history(&self, run: &SourceRun, key: &str) -> Result<Vec<Point>>;
    fn logged_models(&self, experiment: &Experiment) -> Result<Vec<LoggedModel>>;
    fn registered_models(&self) -> Result<Vec<RegisteredModel>>;
    fn versions(&self, model: &str) -> Result<Vec<Version>>;
    /// Paths of the files under an artifact URI, relative to it.
    fn artifact_files(&self, uri: &str) -> Result<Vec<String>>;
    /// One artifact file, and its length when known.
    fn open_artifact(&self, uri: &str, path: &str) -> Result<(Box<dyn Read + Send>, Option<u64>)>;
}

/// Artifact URIs that name a folder on this machine (`file:///…` or a plain absolute path).
pub fn local_folder(uri: &str) -> Option<PathBuf> {
    if let Some(rest) = uri.strip_prefix("file://") {
        return url::Url::parse(&format!("file://{rest}")).ok()?.to_file_path().ok();
    }
    uri.starts_with('/').then(|| PathBuf::from(uri))
}

/// The part of an `mlflow-artifacts:` URI below the server's artifact root.
pub fn proxied_path(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("mlflow-artifacts:")?;
    // `mlflow-artifacts://host:port/path` names a server; `mlflow-artifacts:/path` the one asked.
    let path = match rest.strip_prefix("//") {
        Some(with_host) => with_host.split_once('/').map(|(_, p)| p).unwrap_or_default(),
        None => rest,
    };
    Some(path.trim_matches('/').to_owned())
}

pub fn local_files(root: &std::path::Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::Source(format!("reading {}: {e}", folder.display()))),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::Source(format!("reading {}: {e}", folder.display())))?;
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if let Ok(relative) = path.strip_prefix(root) {
                out.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    Ok(out)
}

pub fn open_local(root: &std::path::Path, path: &str) -> Result<(Box<dyn Read + Send>, Option<u64>)> {
    let full = root.join(path);
    let file = std::fs::File::open(&full).map_err(|e| Error::Source(format!("opening {}: {e}", full.display())))?;
    let len = file.metadata().ok().map(|m| m.len());
    Ok((Box::new(file), len))
}

pub fn unsupported(uri: &str) -> Error {
    Error::Source(format!(
        "artifacts at {uri:?} cannot be read from here (only mlflow-artifacts: through the server, and local folders)"
    ))
}

/// A running MLflow tracking server.
pub struct RestSource {
    pub rest: Rest,
}

fn millis(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

impl RestSource {
    /// Every page of a search: `items` from each answer, following `next_page_token`.
    fn all_pages(&self, items: &str, mut request: impl FnMut(Option<&str>) -> Result<Value>) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let answer = request(token.as_deref())?;
            if let Some(found) = answer[items].as_array() {
                out.extend(found.iter().cloned());
            }
            match answer["next_page_token"].as_str().filter(|t| !t.is_empty()) {
                Some(next) if Some(next) != token.as_deref() => token = Some(next.to_owned()),
                _ => return Ok(out),
            }
        }
    }

    fn list_proxied(&self, path: &str, out: &mut Vec<String>, below: &str) -> Result<()> {
        let answer = self.rest.get("/api/2.0/mlflow-artifacts/artifacts", &[("path", path)])?;
        for file in answer["files"].as_array().into_iter().flatten() {
            let name = text(&file["path"]);
            let relative = if below.is_empty() { name.clone() } else { format!("{below}/{name}") };
            if file["is_dir"].as_bool().unwrap_or(false) {
                self.list_proxied(&format!("{path}/{name}"), out, &relative)?;
            } else {
                out.push(relative);
            }
        }
        Ok(())
    }
}

impl Source for RestSource {
    fn describe(&self) -> String {
        format!("the MLflow server at {}", self.rest.base)
    }

    fn experiments(&self) -> Result<Vec<Experiment>> {
        let found = self.all_pages("experiments", |token| {
            self.rest.post(
                "/api/2.0/mlflow/experiments/search",
                &json!({"max_results": 1000, "view_type": "ALL", "page_token": token}),
            )
        })?;
        Ok(found
            .iter()
            .map(|e| Experiment {
                id: text(&e["experiment_id"]),
                name: text(&e["name"]),
                deleted: e["lifecycle_stage"] == "deleted",
                tags: pairs(&e["tags"]),
            })
            .collect())
    }

    fn runs(&self, experiment: &Experiment) -> Result<Vec<SourceRun>> {
        let found = self.all_pages("runs", |token| {
            self.rest.post(
                "/api/2.0/mlflow/runs/search",
                &json!({"experiment_ids": [experiment.id], "run_view_type": "ALL", "max_results": 1000,
                        "order_by": ["attributes.start_time ASC"], "page_token": token}),
            )
        })?;
        Ok(found
            .iter()
            .map(|r| {
                let info = &r["info"];
                let data = &r["data"];
                SourceRun {
                    id: text(&info["run_id"]),
                    name: text(&info["run_name"]),
                    user: text(&info["user_id"]),
                    status: text(&info["status"]),
                    start_time: millis(&info["start_time"]),
                    end_time: millis(&info["end_time"]),
                    deleted: info["lifecycle_stage"] == "deleted",
                    params: pairs(&data["params"]),
                    tags: pairs(&data["tags"]),
                    metric_keys: data["metrics"].as_array().into_iter().flatten().map(|m| text(&m["key"])).collect(),
                    artifact_uri: text(&info["artifact_uri"]),
                }
            })
            .collect())
    }

    fn history(&self, run: &SourceRun, key: &str) -> Result<Vec<Point>> {
        // Servers page a long history (MLflow's at 25,000 points): every page is read.
        let metrics = self.all_pages("metrics", |token| {
            let mut query = vec![("run_id", run.id.as_str()), ("metric_key", key), ("max_results", "25000")];
            if let Some(token) = token {
                query.push(("page_token", token));
            }
            self.rest.get("/api/2.0/mlflow/metrics/get-history", &query)
        })?;
        metrics
            .iter()
            .map(|m| {
                Ok(Point {
                    step: millis(&m["step"]).unwrap_or(0),
                    timestamp: millis(&m["timestamp"]).unwrap_or(0),
                    value: double_value(&m["value"]).ok_or_else(|| {
                        Error::Source(format!("metric {key} of run {}: value {}", run.id, m["value"]))
                    })?,
                })
            })
            .collect()
    }

    fn logged_models(&self, experiment: &Experiment) -> Result<Vec<LoggedModel>> {
        let found = self.all_pages("models", |token| {
            self.rest.post(
                "/api/2.0/mlflow/logged-models/search",
                &json!({"experiment_ids": [experiment.id], "max_results": 100, "page_token": token}),
            )
        })?;
        Ok(found
            .iter()
            .map(|m| {
                let info = &m["info"];
                LoggedModel {
                    id: text(&info["model_id"]),
                    name: text(&info["name"]),
                    model_type: text(&info["model_type"]),
                    source_run_id: info["source_run_id"].as_str().filter(|r| !r.is_empty()).map(str::to_owned),
                    ready: info["status"] == "LOGGED_MODEL_READY",
                    params: pairs(&m["data"]["params"]),
                    tags: pairs(&info["tags"]),
                    artifact_uri: text(&info["artifact_uri"]),
                }
            })
            .collect())
    }

    fn registered_models(&self) -> Result<Vec<RegisteredModel>> {
        let found = self.all_pages("registered_models", |token| {
            let mut query = vec![("max_results", "1000")];
            if let Some(t) = token {
                query.push(("page_token", t));
            }
            self.rest.get("/api/2.0/mlflow/registered-models/search", &query)
        })?;
        Ok(found
            .iter()
            .map(|m| RegisteredModel {
                name: text(&m["name"]),
                description: text(&m["description"]),
                tags: pairs(&m["tags"]),
                aliases: m["aliases"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| Some((text(&a["alias"]), millis(&a["version"])?)))
                    .collect(),
            })
            .collect())
    }

    fn versions(&self, model: &str) -> Result<Vec<Version>> {
        let filter = format!("name = '{}'", model.replace('\'', "\\'"));
        let found = self.all_pages("model_versions", |token| {
            let mut query = vec![("filter", filter.as_str()), ("max_results", "1000")];
            if let Some(t) = token {
                query.push(("page_token", t));
            }
            self.rest.get("/api/2.0/mlflow/model-versions/search", &query)
        })?;
        let mut versions: Vec<Version> = found
            .iter()
            .filter_map(|v| {
                Some(Version {
                    number: millis(&v["version"])?,
                    source: text(&v["source"]),
                    run_id: v["run_id"].as_str().filter(|r| !r.is_empty()).map(str::to_owned),
                    description: text(&v["description"]),
                    stage: text(&v["current_stage"]),
                    tags: pairs(&v["tags"]),
                })
            })
            .collect();
        versions.sort_by_key(|v| v.number);
        Ok(versions)
    }

    fn artifact_files(&self, uri: &str) -> Result<Vec<String>> {
        if let Some(folder) = local_folder(uri) {
            return local_files(&folder);
        }
        let path = proxied_path(uri).ok_or_else(|| unsupported(uri))?;
        let mut out = Vec::new();
        self.list_proxied(&path, &mut out, "")?;
        Ok(out)
    }

    fn open_artifact(&self, uri: &str, path: &str) -> Result<(Box<dyn Read + Send>, Option<u64>)> {
        if let Some(folder) = local_folder(uri) {
            return open_local(&folder, path);
        }
        let root = proxied_path(uri).ok_or_else(|| unsupported(uri))?;
        let response = self.rest.get_stream("/api/2.0/mlflow-artifacts/artifacts", &format!("{root}/{path}"))?;
        let len = response.content_length();
        Ok((Box::new(response), len))
    }
}
