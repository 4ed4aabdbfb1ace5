//! Artifacts and checkpoints from the SDK: streamed uploads and downloads, every download
//! checked against its recorded sha256; checkpoints are a folder (or file) uploaded under
//! `checkpoints/{name}/`, recorded with their checksums, and restored only if they verify.

use crate::api::{encode, Api};
use crate::run::Run;
use crate::{io_err, Error, Result};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which checkpoints the server keeps after recording a new one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Retention {
    /// Keep the newest N by step.
    pub keep_last: Option<usize>,
    /// Keep the N best by `metric` (its value at the checkpoint's step).
    pub keep_best: Option<usize>,
    pub metric: Option<String>,
    /// Higher is better (accuracy) instead of lower (loss).
    pub maximize: bool,
}

fn encode_path(path: &str) -> String {
    path.split('/').map(encode).collect::<Vec<_>>().join("/")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Files under `local` (itself when it is a file), with their paths relative to it, sorted.
fn files_of(local: &Path) -> Result<Vec<(PathBuf, String)>> {
    if local.is_file() {
        let name = local
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::Invalid(format!("{} has no usable name", local.display())))?;
        return Ok(vec![(local.to_owned(), name.to_owned())]);
    }
    let mut out = Vec::new();
    let mut stack = vec![local.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io_err(format!("reading {}", dir.display())))? {
            let path = entry.map_err(io_err("reading a folder"))?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(local)
                    .ok()
                    .and_then(|p| p.to_str())
                    .map(|p| p.replace(std::path::MAIN_SEPARATOR, "/"))
                    .ok_or_else(|| Error::Invalid(format!("{} has no usable name", path.display())))?;
                out.push((path, rel));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

impl Api {
    /// Uploads a local file as the run's artifact `path`; answers `{path, size, sha256}`.
    pub fn upload_artifact(&self, run_id: &str, path: &str, local: &Path) -> Result<Value> {
        self.http.put_file(&format!("/runs/{}/artifacts/{}", encode(run_id), encode_path(path)), local)
    }

    /// Downloads an artifact into `dest`, verifying its sha256 (against `expected`, else the
    /// server's record). A mismatch leaves nothing at `dest` and answers `Error::Corrupt`.
    pub fn download_artifact(&self, run_id: &str, path: &str, dest: &Path, expected: Option<&str>) -> Result<u64> {
        let mut response =
            self.http.get_stream(&format!("/runs/{}/artifacts/{}", encode(run_id), encode_path(path)))?;
        let recorded = response.headers().get("x-trainlog-sha256").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let expected = expected.map(str::to_owned).or(recorded).unwrap_or_default();
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(format!("creating {}", parent.display())))?;
        }
        let partial = dest.with_extension("trainlog-partial");
        let mut out = std::fs::File::create(&partial).map_err(io_err(format!("creating {}", partial.display())))?;
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = response.read(&mut buf).map_err(io_err(format!("downloading {path}")))?;
            if n == 0 {
                break;
            }
            ctx.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(io_err(format!("writing {}", partial.display())))?;
            size += n as u64;
        }
        out.sync_all().map_err(io_err(format!("writing {}", partial.display())))?;
        drop(out);
        let actual = hex(ctx.finish().as_ref());
        if actual != expected {
            let _ = std::fs::remove_file(&partial);
            return Err(Error::Corrupt { path: path.to_owned(), expected, actual });
        }
        std::fs::rename(&partial, dest).map_err(io_err(format!("writing {}", dest.display())))?;
        Ok(size)
    }

    pub fn list_artifacts(&self, run_id: &str, prefix: &str) -> Result<Vec<Value>> {
        let body = self.http.get(&format!("/runs/{}/artifacts?prefix={}", encode(run_id), encode(prefix)))?;
        Ok(body["artifacts"].as_array().cloned().unwrap_or_default())
    }

    pub fn delete_artifact(&self, run_id: &str, path: &str) -> Result<()> {
        self.http.delete(&format!("/runs/{}/artifacts/{}", encode(run_id), encode_path(path))).map(|_| ())
    }

    /// Uploads `local` (a file or a folder) as checkpoint `step-{step:012}` of the run and records
    /// it with checksums and `metadata`; the server then applies `retention`.
    pub fn log_checkpoint(
        &self,
        run_id: &str,
        local: &Path,
        step: i64,
        metadata: Value,
        retention: &Retention,
    ) -> Result<Value> {
        let name = format!("step-{step:012}");
        let mut files = Vec::new();
        for (path, rel) in files_of(local)? {
            let stored = self.upload_artifact(run_id, &format!("checkpoints/{name}/{rel}"), &path)?;
            files.push(json!({"path": rel, "size": stored["size"], "sha256": stored["sha256"]}));
        }
        self.record_checkpoint(run_id, &name, step, files, metadata, retention)
    }

    /// Records checkpoint `name` at `step` whose `files` are already stored (none when the
    /// checkpoint's files stay where the training wrote them, which `metadata` then says);
    /// the server then applies `retention`.
    pub fn record_checkpoint(
        &self,
        run_id: &str,
        name: &str,
        step: i64,
        files: Vec<Value>,
        metadata: Value,
        retention: &Retention,
    ) -> Result<Value> {
        let mut body = json!({"step": step, "name": name, "files": files, "metadata": metadata});
        if let Some(n) = retention.keep_last {
            body["keep_last"] = json!(n);
        }
        if let Some(n) = retention.keep_best {
            body["keep_best"] = json!(n);
        }
        if let Some(m) = &retention.metric {
            body["metric"] = json!(m);
            body["mode"] = json!(if retention.maximize { "max" } else { "min" });
        }
        let answer = self.http.post(&format!("/runs/{}/checkpoints", encode(run_id)), &body)?;
        Ok(answer["checkpoint"].clone())
    }

    /// The checkpoint with the highest step, or None when the run has none.
    pub fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Value>> {
        match self.http.get(&format!("/runs/{}/checkpoints/latest", encode(run_id))) {
            Ok(v) => Ok(Some(v)),
            Err(Error::Server { status: 404, .. }) => {
                // Distinguish "no checkpoint" from "no run".
                self.http.get(&format!("/runs/{}", encode(run_id)))?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    pub fn checkpoints(&self, run_id: &str) -> Result<Vec<Value>> {
        let body = self.http.get(&format!("/runs/{}/checkpoints", encode(run_id)))?;
        Ok(body["checkpoints"].as_array().cloned().unwrap_or_default())
    }

    /// Downloads a checkpoint (the latest when `name` is None) into `dest`, every file verified
    /// against the checksum recorded with the checkpoint. Answers the checkpoint, or
    /// `Error::Corrupt` for a file that does not match (and `Error::Server` 404 for one that is gone).
    /// The outcome is recorded with the checkpoint (for the report's restore rate), with the run
    /// that restored it when `restored_by` names one; `restore_recorded` in the answer says
    /// whether the server took the record.
    pub fn restore_checkpoint(
        &self,
        run_id: &str,
        dest: &Path,
        name: Option<&str>,
        restored_by: Option<&str>,
    ) -> Result<Value> {
        let mut checkpoint = match name {
            Some(n) => self
                .checkpoints(run_id)?
                .into_iter()
                .find(|c| c["name"] == n)
                .ok_or_else(|| Error::Invalid(format!("run {run_id} has no checkpoint {n:?}")))?,
            None => self
                .latest_checkpoint(run_id)?
                .ok_or_else(|| Error::Invalid(format!("run {run_id} has no checkpoint")))?,
        };
        let checkpoint_name = checkpoint["name"].as_str().unwrap_or_default().to_owned();
        let outcome = self.download_checkpoint(run_id, &checkpoint, dest);
        let error = outcome.as_ref().err().map(ToString::to_string);
        let recorded = self.record_restore(run_id, &checkpoint_name, error.as_deref(), restored_by).is_ok();
        outcome?;
        checkpoint["restore_recorded"] = Value::Bool(recorded);
        Ok(checkpoint)
    }

    fn download_checkpoint(&self, run_id: &str, checkpoint: &Value, dest: &Path) -> Result<()> {
        let prefix = checkpoint["prefix"].as_str().unwrap_or_default().to_owned();
        for file in checkpoint["files"].as_array().into_iter().flatten() {
            let rel = file["path"].as_str().unwrap_or_default();
            if rel.split('/').any(|s| s == ".." || s.is_empty()) {
                return Err(Error::Invalid(format!("checkpoint file path {rel:?} is not a plain relative path")));
            }
            self.download_artifact(run_id, &format!("{prefix}{rel}"), &dest.join(rel), file["sha256"].as_str())?;
        }
        Ok(())
    }

    /// Records one restore of a checkpoint: it worked (`error` None) or failed, and why (a loader
    /// that could not read the files reports it so too).
    pub fn record_restore(
        &self,
        run_id: &str,
        name: &str,
        error: Option<&str>,
        restored_by: Option<&str>,
    ) -> Result<()> {
        let body = serde_json::json!({"ok": error.is_none(), "error": error, "restored_by": restored_by});
        self.http.post(&format!("/runs/{}/checkpoints/{}/restores", encode(run_id), encode(name)), &body)?;
        Ok(())
    }
}

impl Run {
    fn api(&self) -> Result<Api> {
        Api::new(Some(self.server()))
    }

    /// Uploads a file as the run's artifact `path` (blocking until it is stored).
    pub fn log_artifact(&self, local: &Path, path: &str) -> Result<Value> {
        self.api()?.upload_artifact(self.id(), path, local)
    }

    /// Saves a checkpoint (a file or a folder) at `step`: flushes logged metrics first, so a
    /// retention metric logged at `step` counts, then uploads and records it (blocking).
    pub fn log_checkpoint(&self, local: &Path, step: i64, metadata: Value, retention: &Retention) -> Result<Value> {
        self.flush(Duration::from_secs(60));
        self.api()?.log_checkpoint(self.id(), local, step, metadata, retention)
    }

    /// Records a checkpoint at `step` without uploading its files: they stay where the training
    /// wrote them, which `metadata` says. Flushes logged metrics first, as `log_checkpoint` does.
    pub fn record_checkpoint(&self, step: i64, metadata: Value, retention: &Retention) -> Result<Value> {
        self.flush(Duration::from_secs(60));
        self.api()?.record_checkpoint(self.id(), &format!("step-{step:012}"), step, Vec::new(), metadata, retention)
    }

    /// The newest checkpoint of this run (for example one saved before a preemption).
    pub fn latest_checkpoint(&self) -> Result<Option<Value>> {
        self.api()?.latest_checkpoint(self.id())
    }
}
