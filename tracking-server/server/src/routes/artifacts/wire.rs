//! The artifacts' and checkpoints' wire types.

use crate::wire::{integer, AnyValue, ArtifactPathText, Float};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use trainlog_meta::{ArtifactRow, CheckpointRow};
use utoipa::{PartialSchema, ToSchema};

#[derive(Serialize, ToSchema)]
pub struct ArtifactView {
    pub path: String,
    pub size: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
    pub created_time: i64,
}

impl ArtifactView {
    pub fn new(a: &ArtifactRow) -> Self {
        ArtifactView { path: a.path.clone(), size: a.size, sha256: a.sha256.clone(), created_time: a.created_ms }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ArtifactList {
    pub artifacts: Vec<ArtifactView>,
}

#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    #[schema(schema_with = ArtifactPathText::schema)]
    pub path: String,
    pub size: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
}

#[derive(Serialize, ToSchema)]
pub struct CheckpointView {
    pub name: String,
    pub step: i64,
    /// Paths relative to `prefix`.
    #[schema(value_type = Vec<FileEntry>)]
    pub files: Value,
    #[schema(value_type = AnyValue)]
    pub metadata: Value,
    /// The metric the checkpoint was ranked by, if any.
    pub metric: Option<String>,
    /// That metric's value at the checkpoint's step.
    pub metric_value: Option<Float>,
    pub created_time: i64,
    /// Where its files are among the run's artifacts.
    pub prefix: String,
}

impl CheckpointView {
    pub fn new(c: &CheckpointRow) -> Self {
        CheckpointView {
            name: c.name.clone(),
            step: c.step,
            files: c.files.clone(),
            metadata: c.metadata.clone(),
            metric: c.metric_key.clone(),
            metric_value: c.metric_value.map(Float),
            created_time: c.created_ms,
            prefix: format!("checkpoints/{}/", c.name),
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewCheckpoint {
    #[serde(deserialize_with = "integer::required")]
    pub step: i64,
    /// `step-{step:012}` when absent.
    #[schema(
        max_length = 240,
        pattern = r"^(?:[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,239}|\.[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,238}|\.\.[^/\\\x00-\x1F\x7F-\x9F]{1,238})$"
    )]
    pub name: Option<String>,
    /// Files already uploaded as artifacts under `checkpoints/{name}/`.
    pub files: Vec<FileEntry>,
    #[serde(default)]
    #[schema(value_type = AnyValue)]
    pub metadata: Value,
    /// Keep only the newest this many checkpoints (with those `keep_best` keeps).
    #[serde(default, deserialize_with = "integer::optional")]
    pub keep_last: Option<usize>,
    /// Keep the best this many by `metric`.
    #[serde(default, deserialize_with = "integer::optional")]
    pub keep_best: Option<usize>,
    /// Needed with `keep_best`.
    #[schema(
        min_length = 1,
        max_length = 250,
        pattern = r"^[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000](?:[^\x00-\x1F\x7F-\x9F]*[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$"
    )]
    pub metric: Option<String>,
    /// Which values of `metric` are best; min when absent.
    pub mode: Option<RankMode>,
}

#[derive(Deserialize, ToSchema, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum RankMode {
    Min,
    Max,
}

#[derive(Serialize, ToSchema)]
pub struct CheckpointCreated {
    pub checkpoint: CheckpointView,
    /// Checkpoints retention removed, with their files.
    pub dropped: Vec<String>,
}

#[derive(Serialize, ToSchema)]
pub struct CheckpointList {
    /// Newest step first.
    pub checkpoints: Vec<CheckpointView>,
}
