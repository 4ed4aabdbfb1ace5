//! The model registry from the SDK: registering versions from a run's checkpoint or artifact,
//! aliases, and downloading a version's files verified against their checksums.

use crate::api::{encode, Api};
use crate::{Error, Result};
use serde_json::{json, Value};
use std::path::Path;

/// What a new model version is made from.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    /// The run's newest checkpoint.
    LatestCheckpoint,
    /// A checkpoint by name (as `log_checkpoint` answered it).
    Checkpoint(String),
    /// The checkpoint saved at this step.
    Step(i64),
    /// An artifact of the run: one file, or a folder prefix.
    Artifact(String),
}

impl Api {
    /// Adds a version of model `name` (created if needed) from a run's files; `alias` points at it.
    pub fn register_model(
        &self,
        name: &str,
        run_id: &str,
        source: &ModelSource,
        alias: Option<&str>,
        description: &str,
        tags: Value,
    ) -> Result<Value> {
        let mut body = json!({"run_id": run_id, "description": description, "tags": tags});
        match source {
            ModelSource::LatestCheckpoint => {}
            ModelSource::Checkpoint(n) => body["checkpoint"] = json!(n),
            ModelSource::Step(s) => body["checkpoint"] = json!(s),
            ModelSource::Artifact(p) => body["artifact"] = json!(p),
        }
        if let Some(a) = alias {
            body["alias"] = json!(a);
        }
        self.http.post(&format!("/models/{}/versions", encode(name)), &body)
    }

    pub fn models(&self, search: &str) -> Result<Vec<Value>> {
        Ok(self.http.get(&format!("/models?search={}", encode(search)))?["models"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    pub fn model(&self, name: &str) -> Result<Value> {
        self.http.get(&format!("/models/{}", encode(name)))
    }

    pub fn model_versions(&self, name: &str) -> Result<Vec<Value>> {
        Ok(self.http.get(&format!("/models/{}/versions", encode(name)))?["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// A version by number or alias (`"3"`, `"champion"`).
    pub fn model_version(&self, name: &str, version: &str) -> Result<Value> {
        self.http.get(&format!("/models/{}/versions/{}", encode(name), encode(version)))
    }

    /// Points `alias` at `version` (a number or another alias), moving it if needed.
    pub fn set_model_alias(&self, name: &str, alias: &str, version: &str) -> Result<Value> {
        self.http.put(&format!("/models/{}/aliases/{}", encode(name), encode(alias)), &json!({ "version": version }))
    }

    /// Changes a version's status (`ready`, `archived`), description or tags.
    pub fn update_model_version(&self, name: &str, version: &str, changes: &Value) -> Result<Value> {
        self.http.patch(&format!("/models/{}/versions/{}", encode(name), encode(version)), changes)
    }

    /// Downloads a version's files into `dest` (paths relative to the checkpoint or artifact
    /// folder), each verified against its sha256. A version whose files were deleted is refused
    /// with `Error::SourceDeleted`, a corrupt file with `Error::Corrupt`.
    pub fn download_model_version(&self, name: &str, version: &str, dest: &Path) -> Result<Value> {
        let v = self.model_version(name, version)?;
        let missing: Vec<String> =
            v["missing_files"].as_array().into_iter().flatten().filter_map(|p| p.as_str().map(str::to_owned)).collect();
        if !missing.is_empty() {
            return Err(Error::SourceDeleted {
                model: name.to_owned(),
                version: v["version"].as_i64().unwrap_or_default(),
                missing,
            });
        }
        let run_id = v["run_id"].as_str().unwrap_or_default().to_owned();
        let checkpoint_prefix = format!("checkpoints/{}/", v["source"]["name"].as_str().unwrap_or_default());
        let artifact = v["source"]["path"].as_str().unwrap_or_default().trim_end_matches('/').to_owned();
        for f in v["files"].as_array().into_iter().flatten() {
            let path = f["path"].as_str().unwrap_or_default();
            // Where the file goes under `dest`: relative to the checkpoint, or to the artifact
            // folder; a single-file artifact keeps its file name.
            let rel = match v["source"]["kind"].as_str() {
                Some("checkpoint") => path.strip_prefix(&checkpoint_prefix),
                _ if path == artifact => path.rsplit('/').next(),
                _ => path.strip_prefix(&format!("{artifact}/")),
            }
            .unwrap_or(path);
            if rel.split('/').any(|s| s == ".." || s.is_empty()) {
                return Err(Error::Invalid(format!("version file path {rel:?} is not a plain relative path")));
            }
            self.download_artifact(&run_id, path, &dest.join(rel), f["sha256"].as_str())?;
        }
        Ok(v)
    }
}
