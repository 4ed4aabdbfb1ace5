//! The model registry's wire types: models, versions with their lineage, aliases.

use crate::routes::artifacts::FileEntry;
use crate::wire::{tags_schema, NameText, RoleName, RunIdText, ALIAS};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use trainlog_meta::ModelRow;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// Tags of a model or version: an object of values; a null value deletes the tag.
pub struct RegistryTags;

impl PartialSchema for RegistryTags {
    fn schema() -> RefOr<Schema> {
        tags_schema("Tags: an object of values; null deletes a tag. At most 1,000.", true, false)
    }
}
impl ToSchema for RegistryTags {}

#[derive(Serialize, ToSchema)]
pub struct ModelView {
    pub name: String,
    pub description: String,
    pub tags: BTreeMap<String, String>,
    /// Version numbers by alias.
    pub aliases: BTreeMap<String, i64>,
    pub latest_version: Option<i64>,
    pub version_count: i64,
    pub created_time: i64,
    pub updated_time: i64,
    /// The caller's role on the model (admin when the server checks no keys).
    pub your_role: RoleName,
}

impl ModelView {
    pub fn new(m: &ModelRow, your_role: trainlog_meta::Role) -> Self {
        ModelView {
            your_role: RoleName::of(your_role),
            name: m.name.clone(),
            description: m.description.clone(),
            tags: m.tags.clone(),
            aliases: m.aliases.clone(),
            latest_version: m.latest_version,
            version_count: m.version_count,
            created_time: m.created_ms,
            updated_time: m.updated_ms,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ModelList {
    pub models: Vec<ModelView>,
}

#[derive(Serialize, ToSchema)]
pub struct VersionView {
    pub model: String,
    pub version: i64,
    pub run_id: String,
    /// What the version was made from: `{kind: "checkpoint", name, step, metadata}` or
    /// `{kind: "artifact", path}`.
    #[schema(value_type = Object)]
    pub source: Value,
    /// Artifact paths of the run.
    #[schema(value_type = Vec<FileEntry>)]
    pub files: Value,
    pub description: String,
    /// "ready" or "archived".
    pub status: String,
    /// The run as it was at registration: run, params, metrics (summaries), tags, code,
    /// environment, python, packages.
    #[schema(value_type = Object)]
    pub lineage: Value,
    pub tags: BTreeMap<String, String>,
    pub aliases: Vec<String>,
    pub created_time: i64,
    pub updated_time: i64,
    /// False when a file of the version was deleted (a checkpoint fell to retention, say).
    pub source_available: bool,
    pub missing_files: Vec<String>,
}

#[derive(Serialize, ToSchema)]
pub struct VersionList {
    pub versions: Vec<VersionView>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateModel {
    #[schema(schema_with = NameText::schema)]
    pub name: String,
    #[serde(default)]
    #[schema(max_length = 1048576)]
    pub description: String,
    #[serde(default)]
    #[schema(value_type = Option<RegistryTags>)]
    pub tags: Value,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateModel {
    #[schema(max_length = 1048576)]
    pub description: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<RegistryTags>)]
    pub tags: Value,
}

/// A checkpoint by name or by step.
pub struct CheckpointRef;

impl PartialSchema for CheckpointRef {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String).max_length(Some(100)))
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64))),
            )
            .description(Some("A checkpoint of the run, by name or by step."))
            .into()
    }
}
impl ToSchema for CheckpointRef {}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVersion {
    #[schema(schema_with = RunIdText::schema)]
    pub run_id: String,
    /// A checkpoint of the run, by name or step; the latest one when neither this nor
    /// `artifact` is given.
    #[schema(value_type = Option<CheckpointRef>)]
    pub checkpoint: Option<Value>,
    /// An artifact path of the run: one file, or a folder prefix.
    #[schema(
        max_length = 1024,
        pattern = r"^(?:[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,239}|\.[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,238}|\.\.[^/\\\x00-\x1F\x7F-\x9F]{1,238})(?:/(?:[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,239}|\.[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,238}|\.\.[^/\\\x00-\x1F\x7F-\x9F]{1,238}))*$"
    )]
    pub artifact: Option<String>,
    #[serde(default)]
    #[schema(max_length = 1048576)]
    pub description: String,
    #[serde(default)]
    #[schema(value_type = Option<RegistryTags>)]
    pub tags: Value,
    /// An alias to point at the new version.
    #[schema(pattern = "^[A-Za-z][A-Za-z0-9_-]{0,63}$")]
    pub alias: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateVersion {
    #[schema(max_length = 1048576)]
    pub description: Option<String>,
    pub status: Option<VersionStatus>,
    #[serde(default)]
    #[schema(value_type = Option<RegistryTags>)]
    pub tags: Value,
}

/// Whether a version is in use.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum VersionStatus {
    Ready,
    Archived,
}

impl VersionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            VersionStatus::Ready => "ready",
            VersionStatus::Archived => "archived",
        }
    }
}

/// A version by number, or by an alias that points at one.
pub struct VersionRefInput;

impl PartialSchema for VersionRefInput {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                    .minimum(Some(0)),
            )
            .item(ObjectBuilder::new().schema_type(Type::String).pattern(Some(ALIAS)))
            .description(Some("A version number, or an alias."))
            .into()
    }
}
impl ToSchema for VersionRefInput {}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetAlias {
    #[schema(value_type = VersionRefInput)]
    pub version: Value,
}
