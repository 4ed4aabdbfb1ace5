//! The runs' wire types: runs as answered (params, tags, summaries), their creation and changes,
//! searches and their pages.

use crate::wire::{integer, json_schema, tags_schema, Float, ParamValue, TEXT};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use std::collections::BTreeMap;
use trainlog_meta::Run;
use trainlog_schema::limits::{MAX_KEY_CHARS, MAX_PARAM_DEPTH, MAX_PARAM_VALUE_CHARS};
use trainlog_schema::MetricSummary;
use utoipa::openapi::schema::{ObjectBuilder, Schema};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// A metric's summary over all its points.
#[derive(Serialize, ToSchema)]
pub struct SummaryView {
    pub last: Float,
    pub min: Float,
    pub max: Float,
    pub last_step: i64,
    /// Milliseconds since the Unix epoch.
    pub last_timestamp: i64,
    pub count: u64,
    /// Null when no point is finite.
    pub mean: Option<Float>,
}

impl SummaryView {
    pub fn new(s: &MetricSummary) -> Self {
        SummaryView {
            last: Float(s.last),
            min: Float(s.min),
            max: Float(s.max),
            last_step: s.last_step,
            last_timestamp: s.last_ms,
            count: s.count,
            mean: s.mean().map(Float),
        }
    }
}

/// Params as stored: flat dotted keys and typed values, written as `ParamValue::to_json` spells
/// them without building JSON values first.
#[derive(Default)]
pub struct ParamsView(pub BTreeMap<String, trainlog_schema::ParamValue>);

impl ParamsView {
    pub fn new(run: &Run) -> Self {
        ParamsView(run.params.clone())
    }
}

impl Serialize for ParamsView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        use trainlog_schema::ParamValue as P;
        for (key, value) in &self.0 {
            match value {
                P::Str(v) => map.serialize_entry(key, v)?,
                P::Int(v) => map.serialize_entry(key, v)?,
                P::Float(v) => map.serialize_entry(key, &Float(*v))?,
                P::Bool(v) => map.serialize_entry(key, v)?,
            }
        }
        map.end()
    }
}

/// A run's metric summaries by key, each written as a `SummaryView`.
#[derive(Default)]
pub struct SummariesView(pub BTreeMap<String, MetricSummary>);

impl Serialize for SummariesView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (key, summary) in &self.0 {
            map.serialize_entry(key, &SummaryView::new(summary))?;
        }
        map.end()
    }
}

impl PartialSchema for SummariesView {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .additional_properties(Some(utoipa::openapi::Ref::from_schema_name("SummaryView")))
            .description(Some("Each metric's summary, by key."))
            .into()
    }
}
impl ToSchema for SummariesView {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push(("SummaryView".into(), SummaryView::schema()));
        <SummaryView as ToSchema>::schemas(schemas);
    }
}

impl PartialSchema for ParamsView {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .additional_properties(Some(ParamValue::schema()))
            .description(Some("Params by flat dotted key, e.g. \"model.depth\"."))
            .into()
    }
}
impl ToSchema for ParamsView {}

#[derive(Serialize, ToSchema)]
pub struct RunView {
    pub id: String,
    pub project: String,
    pub project_id: i64,
    pub name: String,
    #[schema(inline)]
    pub status: RunStatusName,
    /// Milliseconds since the Unix epoch.
    pub start_time: i64,
    pub end_time: Option<i64>,
    pub user: String,
    pub host: String,
    pub group: String,
    pub parent_id: Option<String>,
    pub notes: String,
    /// `#rrggbb`: the run's colour in every chart, from the palette in the order its project's
    /// runs were created, or as a person set it.
    pub color: String,
    pub params: ParamsView,
    pub tags: BTreeMap<String, String>,
    pub summary: SummariesView,
    /// Archived runs are left out of lists and searches unless asked for, and take no changes
    /// until restored; their data stays readable.
    pub archived: bool,
    /// In lists: the run's job in brief, when processes joined it as one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<JobBrief>,
}

/// A run's job as lists show it: its shape, how often it started, and the work lost.
#[derive(Serialize, ToSchema)]
pub struct JobBrief {
    pub launcher: String,
    pub job_id: Option<String>,
    pub world_size: i64,
    pub node_count: i64,
    pub attempts: i64,
    /// GPUs of the latest attempt.
    pub gpus: i64,
    pub lost_usd: f64,
    pub lost_gpu_hours: f64,
    pub steps_replayed: i64,
    /// What the job has cost, every attempt and node, as its page and the report say it (null
    /// for a job recorded before this was kept).
    pub cost_usd: Option<f64>,
    /// Nodes with no price, whose cost `cost_usd` leaves out.
    pub unpriced_nodes: Option<i64>,
}

impl From<trainlog_meta::jobs::JobRow> for JobBrief {
    fn from(j: trainlog_meta::jobs::JobRow) -> Self {
        JobBrief {
            launcher: j.launcher,
            job_id: j.job_id,
            world_size: j.world_size,
            node_count: j.node_count,
            attempts: j.attempts,
            gpus: j.gpus,
            lost_usd: j.lost_usd,
            lost_gpu_hours: j.lost_gpu_hours,
            steps_replayed: j.steps_replayed,
            cost_usd: j.cost.map(|c| c.at(trainlog_meta::now_ms())),
            unpriced_nodes: j.cost.map(|c| c.unpriced_nodes),
        }
    }
}

/// A run's status.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatusName {
    Running,
    Finished,
    Failed,
    Killed,
    Preempted,
    /// Every process of its job stopped sending heartbeats: the server ended it.
    Lost,
    /// A sweep trial its sweep stopped early.
    Pruned,
}

impl RunView {
    pub fn new(run: &Run, summaries: &BTreeMap<String, MetricSummary>, archived: bool) -> Self {
        Self::from_owned(run.clone(), summaries.clone(), archived)
    }

    /// `new` for a run and summaries the caller no longer needs: their strings move, not copy.
    pub fn from_owned(run: Run, summaries: BTreeMap<String, MetricSummary>, archived: bool) -> Self {
        use trainlog_schema::RunStatus as S;
        RunView {
            id: run.id.into_string(),
            project: run.project,
            project_id: run.project_id,
            name: run.name,
            status: match run.status {
                S::Running => RunStatusName::Running,
                S::Finished => RunStatusName::Finished,
                S::Failed => RunStatusName::Failed,
                S::Killed => RunStatusName::Killed,
                S::Preempted => RunStatusName::Preempted,
                S::Lost => RunStatusName::Lost,
                S::Pruned => RunStatusName::Pruned,
            },
            start_time: run.start_ms,
            end_time: run.end_ms,
            user: run.user,
            host: run.host,
            group: run.group,
            parent_id: run.parent_id,
            notes: run.notes,
            color: run.color,
            params: ParamsView(run.params),
            tags: run.tags,
            summary: SummariesView(summaries),
            archived,
            job: None,
        }
    }
}

/// A run with the metadata its clients recorded (code, environment, python, packages, …).
#[derive(Serialize, ToSchema)]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: RunView,
    /// Sections by name, each a JSON object.
    #[schema(value_type = BTreeMap<String, Object>)]
    pub metadata: BTreeMap<String, Value>,
    /// The job the run follows (its ranks, nodes and attempts), when processes joined it.
    pub job: Option<super::job::JobView>,
    /// Each start of the job, oldest first.
    pub attempts: Vec<super::job::AttemptView>,
}

/// A created or resumed run; with the job when a process joined it.
#[derive(Serialize, ToSchema)]
pub struct CreatedRun {
    #[serde(flatten)]
    pub run: RunView,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<super::job::JobView>,
    /// Where the joining process landed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joined: Option<super::job::JoinedView>,
}

#[derive(Serialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunView>,
    /// Pass as `page_token` for the next page; null on the last one. It is the offset of the
    /// next run, so a client may also read from any offset.
    pub next_page_token: Option<String>,
    /// How many runs the search matches over every page; only when asked for (`total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
}

/// Tags of a new run: an object of values (numbers and booleans are kept as text), or a list
/// of labels (tags with an empty value).
pub struct TagsInput;

impl PartialSchema for TagsInput {
    fn schema() -> RefOr<Schema> {
        tags_schema(
            "Tags: an object of values (numbers and booleans are kept as text), or a list of labels. At most 1,000.",
            false,
            true,
        )
    }
}
impl ToSchema for TagsInput {}

/// Tags to change: as `TagsInput`, and a null value deletes the tag.
pub struct TagsPatch;

impl PartialSchema for TagsPatch {
    fn schema() -> RefOr<Schema> {
        tags_schema(
            "Tags to set: an object of values (null deletes the tag), or a list of labels. At most 1,000.",
            true,
            true,
        )
    }
}
impl ToSchema for TagsPatch {}

/// Params as given: nested objects are flattened into dotted keys.
pub struct ParamsInput;

impl PartialSchema for ParamsInput {
    fn schema() -> RefOr<Schema> {
        // A nested key is measured after flattening ("model.depth"), which a schema cannot say:
        // each key here is held to the whole limit.
        let key = serde_json::json!({"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS, "pattern": TEXT});
        let scalar = serde_json::json!({"anyOf": [
            {"type": "string", "maxLength": MAX_PARAM_VALUE_CHARS},
            {"type": "number"},
            {"type": "boolean"},
        ]});
        let list = serde_json::json!({"type": "array", "description": "Kept as its JSON text, which has the length limit of a text value."});
        // Objects nest up to MAX_PARAM_DEPTH levels; the innermost holds no further object.
        let mut level = serde_json::json!({"type": "object", "propertyNames": key, "additionalProperties": {"anyOf": [scalar, list]}});
        for _ in 1..MAX_PARAM_DEPTH {
            level = serde_json::json!({
                "type": "object",
                "propertyNames": key,
                "additionalProperties": {"anyOf": [scalar, list, level]},
            });
        }
        level["description"] = Value::from(format!(
            "Params: an object whose values are text, numbers, booleans, lists (kept as JSON text) or objects \
             (flattened into dotted keys, e.g. model.depth), up to {MAX_PARAM_DEPTH} levels. null is refused."
        ));
        json_schema(level)
    }
}
impl ToSchema for ParamsInput {}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    /// The project's name; needed unless an existing run is resumed.
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = r"^[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000](?:[^\x00-\x1F\x7F-\x9F]*[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$"
    )]
    pub project: Option<String>,
    #[schema(max_length = 500)]
    pub name: Option<String>,
    /// A run id chosen by the client.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub id: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<ParamsInput>)]
    pub params: Value,
    #[serde(default)]
    #[schema(value_type = Option<TagsInput>)]
    pub tags: Value,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub user: String,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub host: String,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub group: String,
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub parent_id: Option<String>,
    #[serde(default)]
    #[schema(max_length = 1048576)]
    pub notes: String,
    /// Milliseconds since the Unix epoch; now when absent.
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 0, maximum = 253402300799999_i64)]
    pub start_time: Option<i64>,
    /// Continue the run with this id: its status goes back to running and params merge.
    #[serde(default)]
    pub resume: bool,
    /// Let the given params replace differing values already stored.
    #[serde(default)]
    pub overwrite_params: bool,
    /// The process creating or resuming the run, as one rank of its job: it joins the run.
    pub process: Option<super::job::ProcessInput>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRun {
    #[schema(max_length = 500)]
    pub name: Option<String>,
    #[schema(max_length = 1048576)]
    pub notes: Option<String>,
    #[schema(max_length = 500)]
    pub group: Option<String>,
    /// `#rrggbb`: the colour the run is drawn in from now on.
    #[schema(pattern = "^#[0-9a-fA-F]{6}$")]
    pub color: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<TagsPatch>)]
    pub tags: Value,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LogParams {
    #[schema(value_type = ParamsInput)]
    pub params: Value,
    /// Let the given params replace differing values already stored (else 409).
    #[serde(default)]
    pub overwrite: bool,
}

#[derive(Serialize, ToSchema)]
pub struct ParamsAnswer {
    pub params: ParamsView,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetTags {
    #[serde(default)]
    #[schema(value_type = Option<TagsPatch>)]
    pub tags: Value,
}

#[derive(Serialize, ToSchema)]
pub struct TagsAnswer {
    pub tags: BTreeMap<String, String>,
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FinishRun {
    /// finished when absent.
    pub status: Option<FinalStatus>,
    /// Milliseconds since the Unix epoch; now when absent.
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 0, maximum = 253402300799999_i64)]
    pub end_time: Option<i64>,
    /// One process of the run's job ended: the run ends when its last rank does.
    pub process: Option<super::job::ProcessReportInput>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRuns {
    /// Only runs of this project; every project when absent.
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = r"^[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000](?:[^\x00-\x1F\x7F-\x9F]*[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$"
    )]
    pub project: Option<String>,
    /// e.g. `params.lr > 0.001 and metrics.val/acc >= 0.9 and status = 'finished'`.
    #[serde(default)]
    #[schema(max_length = 16384)]
    pub filter: String,
    /// e.g. `["metrics.val/acc desc", "start_time"]`.
    #[serde(default)]
    #[schema(max_items = 16)]
    pub order_by: Vec<String>,
    /// 100 when absent.
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    #[schema(pattern = "^[0-9]{0,18}$")]
    pub page_token: Option<String>,
    /// Only these params, tags and metrics in each run: `params`, `tags`, `metrics` (every key of
    /// the kind) or `params.KEY`, `tags.KEY`, `metrics.KEY`; a kind not named is left out.
    /// Everything when absent.
    #[serde(default)]
    #[schema(max_items = 1000)]
    pub columns: Option<Vec<String>>,
    /// false (only active runs) when absent, true (only archived ones) or "all".
    #[serde(default)]
    #[schema(value_type = Option<ArchivedInput>)]
    pub archived: Option<Archived>,
    /// Answer `total`, the number of runs matched over every page (it costs a count).
    #[serde(default)]
    pub total: bool,
}

/// Which runs a list or search answers: active ones, archived ones, or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Archived {
    #[default]
    Active,
    Only,
    All,
}

impl Archived {
    /// The text of a query parameter: `false`, `true` or `all`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "false" => Some(Archived::Active),
            "true" => Some(Archived::Only),
            "all" => Some(Archived::All),
            _ => None,
        }
    }

    pub fn lifecycle(self) -> trainlog_meta::search::Lifecycle {
        use trainlog_meta::search::Lifecycle;
        match self {
            Archived::Active => Lifecycle::Active,
            Archived::Only => Lifecycle::Deleted,
            Archived::All => Lifecycle::All,
        }
    }
}

/// Reads `false`, `true` or `"all"` (and the strings `"false"` and `"true"`).
impl<'de> Deserialize<'de> for Archived {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Archived;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("false, true or \"all\"")
            }
            fn visit_bool<E>(self, v: bool) -> std::result::Result<Archived, E> {
                Ok(if v { Archived::Only } else { Archived::Active })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Archived, E> {
                Archived::parse(v).ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

/// Which runs to answer, in the API document.
pub struct ArchivedInput;
impl PartialSchema for ArchivedInput {
    fn schema() -> RefOr<Schema> {
        json_schema(serde_json::json!({
            "description": "false: only active runs (the default); true: only archived runs; \"all\": both.",
            "anyOf": [{"type": "boolean"}, {"type": "string", "enum": ["false", "true", "all"]}],
        }))
    }
}
impl ToSchema for ArchivedInput {}

/// A run deleted for good.
#[derive(Serialize, ToSchema)]
pub struct DeletedRun {
    pub id: String,
    /// Metric files and artifacts deleted from the object store.
    pub objects_deleted: u64,
    /// Some objects could not be deleted yet; the server keeps trying (`purge_failures` in
    /// `/api/v1/admin/stats` counts the failures).
    pub objects_pending: bool,
}

/// A body that may be empty, `null` or `{}`, and holds nothing else.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

/// The status a run ends with.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum FinalStatus {
    Finished,
    Failed,
    Killed,
    Preempted,
}

impl FinalStatus {
    pub fn run_status(self) -> trainlog_schema::RunStatus {
        use trainlog_schema::RunStatus as S;
        match self {
            FinalStatus::Finished => S::Finished,
            FinalStatus::Failed => S::Failed,
            FinalStatus::Killed => S::Killed,
            FinalStatus::Preempted => S::Preempted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainlog_schema::ParamValue as P;

    /// The views written without building JSON values spell everything as the values would.
    #[test]
    fn params_and_summaries_are_written_as_their_json_values_spell_them() {
        let params: BTreeMap<String, P> = [
            ("a", P::Str("x \"quoted\" é".into())),
            ("b", P::Int(-3)),
            ("c", P::Float(0.1)),
            ("d", P::Float(f64::NAN)),
            ("e", P::Float(f64::NEG_INFINITY)),
            ("f", P::Float(1e300)),
            ("g", P::Bool(true)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let as_values: BTreeMap<String, Value> = params.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
        assert_eq!(serde_json::to_string(&ParamsView(params)).unwrap(), serde_json::to_string(&as_values).unwrap());

        let steps = [1, 2, 3];
        let summaries: BTreeMap<String, MetricSummary> = [
            ("loss", MetricSummary::of_sorted(&steps, &[10, 20, 30], &[0.5, f64::NAN, 0.25]).unwrap()),
            ("nan", MetricSummary::of_sorted(&steps, &[10, 20, 30], &[f64::NAN; 3]).unwrap()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let views: BTreeMap<String, SummaryView> =
            summaries.iter().map(|(k, s)| (k.clone(), SummaryView::new(s))).collect();
        let written = serde_json::to_string(&SummariesView(summaries)).unwrap();
        assert_eq!(written, serde_json::to_string(&views).unwrap());
        assert!(written.contains("\"min\":\"NaN\""), "{written}");
    }
}
