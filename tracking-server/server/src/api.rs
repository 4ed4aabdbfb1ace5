//! The API's wire types: request bodies as handlers decode them and responses as handlers
//! write them. The OpenAPI document is derived from these same types.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use std::collections::BTreeMap;
use trainlog_meta::{ArtifactRow, CheckpointRow, ModelRow, Project, Run};
use trainlog_schema::MetricSummary;
use trainlog_store::{Bucket, Series};
use utoipa::openapi::schema::{AnyOfBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// Printable text: no control characters, and no whitespace at either end. Names and keys are
/// checked against this.
pub const TEXT: &str = r"^[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000](?:[^\x00-\x1F\x7F-\x9F]*[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$";
/// A run id: 1 to 64 characters from [A-Za-z0-9_-].
pub const RUN_ID: &str = "^[A-Za-z0-9_-]{1,64}$";
/// One or more run ids, separated by commas.
pub const RUN_IDS: &str = "^[A-Za-z0-9_-]{1,64}(,[A-Za-z0-9_-]{1,64}){0,999}$";
/// An alias of a model version.
pub const ALIAS: &str = "^[A-Za-z][A-Za-z0-9_-]{0,63}$";
/// A version by number, or by alias.
pub const VERSION_REF: &str = "^([0-9]{1,18}|[A-Za-z][A-Za-z0-9_-]{0,63})$";
/// A path inside a run's artifacts: relative, '/'-separated; no empty, '.' or '..' segment, no
/// backslash or control character; at most 240 characters a segment.
pub const ARTIFACT_PATH: &str = r"^(?:[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,239}|\.[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,238}|\.\.[^/\\\x00-\x1F\x7F-\x9F]{1,238})(?:/(?:[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,239}|\.[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,238}|\.\.[^/\\\x00-\x1F\x7F-\x9F]{1,238}))*$";
/// A page token this server gave.
pub const PAGE_TOKEN: &str = "^[0-9]{0,18}$";

use trainlog_schema::limits::{MAX_KEY_CHARS, MAX_PARAM_DEPTH, MAX_PARAM_VALUE_CHARS, MAX_TAG_VALUE_CHARS};

/// Integers in request bodies. JSON Schema counts `3.0` as the integer 3; so does the API.
pub mod integer {
    use serde::de::{Deserializer, Error, Unexpected, Visitor};
    use std::fmt;

    struct Integer;

    impl Visitor<'_> for Integer {
        type Value = i64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer")
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &"an integer within 64 bits"))
        }
        fn visit_f64<E: Error>(self, v: f64) -> Result<i64, E> {
            // Integral floats up to 2^53, where every integer still has its own float: past it
            // a float may stand for a number that does not fit 64 bits.
            const LIMIT: f64 = 9_007_199_254_740_992.0;
            if v.fract() == 0.0 && (-LIMIT..=LIMIT).contains(&v) {
                Ok(v as i64)
            } else {
                Err(E::invalid_type(Unexpected::Float(v), &self))
            }
        }
    }

    fn narrow<T: TryFrom<i64>, E: Error>(v: i64) -> Result<T, E> {
        T::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &"an integer in range"))
    }

    pub fn required<'de, D: Deserializer<'de>, T: TryFrom<i64>>(d: D) -> Result<T, D::Error> {
        narrow(d.deserialize_i64(Integer)?)
    }

    pub fn optional<'de, D: Deserializer<'de>, T: TryFrom<i64>>(d: D) -> Result<Option<T>, D::Error> {
        struct Maybe;
        impl<'de> Visitor<'de> for Maybe {
            type Value = Option<i64>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or null")
            }
            fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_i64(Integer).map(Some)
            }
        }
        d.deserialize_option(Maybe)?.map(narrow).transpose()
    }

    /// A JSON number that is an integer, such as `3` or `3.0`.
    pub fn of(n: &serde_json::Number) -> Option<i64> {
        n.as_i64().or_else(|| n.as_f64().and_then(|f| Integer.visit_f64::<serde_json::Error>(f).ok()))
    }
}

/// A float written as a number, or as the string "NaN", "Infinity" or "-Infinity".
#[derive(Debug, Clone, Copy)]
pub struct Float(pub f64);

impl Serialize for Float {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_finite() {
            s.serialize_f64(self.0)
        } else if self.0.is_nan() {
            s.serialize_str("NaN")
        } else if self.0 > 0.0 {
            s.serialize_str("Infinity")
        } else {
            s.serialize_str("-Infinity")
        }
    }
}

/// Reads a number, or "NaN", "Infinity" or "-Infinity".
impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Float;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number, or \"NaN\", \"Infinity\" or \"-Infinity\"")
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Float, E> {
                Ok(Float(v))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Float, E> {
                Ok(Float(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Float, E> {
                Ok(Float(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Float, E> {
                trainlog_schema::parse_non_finite(v)
                    .map(Float)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

impl PartialSchema for Float {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double))),
            )
            .item(ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["NaN", "Infinity", "-Infinity"])))
            .description(Some("A float; NaN and infinities are the strings \"NaN\", \"Infinity\" and \"-Infinity\"."))
            .into()
    }
}
impl ToSchema for Float {}

/// A param's value as stored: text, integer, float or boolean.
pub struct ParamValue;

impl PartialSchema for ParamValue {
    fn schema() -> RefOr<Schema> {
        AnyOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(ObjectBuilder::new().schema_type(Type::Integer).format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64))))
            .item(ObjectBuilder::new().schema_type(Type::Number).format(Some(SchemaFormat::KnownFormat(KnownFormat::Double))))
            .item(ObjectBuilder::new().schema_type(Type::Boolean))
            .description(Some("A param value: text, integer, float (non-finite ones as \"NaN\", \"Infinity\", \"-Infinity\") or boolean."))
            .into()
    }
}
impl ToSchema for ParamValue {}

/// Any JSON value.
pub struct AnyValue;

impl PartialSchema for AnyValue {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new().schema_type(utoipa::openapi::schema::SchemaType::AnyValue).into()
    }
}
impl ToSchema for AnyValue {}

/// Text of a given length and pattern, for the schema-only types below.
fn text_schema(
    min_length: Option<usize>,
    max_length: Option<usize>,
    pattern: &str,
    description: &str,
) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(min_length)
        .max_length(max_length)
        .pattern(Some(pattern))
        .description(Some(description))
        .into()
}

const PRINTABLE: &str = "no control characters, and no whitespace at either end";

/// A project's or a registered model's name, in the API document.
pub struct NameText;
impl PartialSchema for NameText {
    fn schema() -> RefOr<Schema> {
        text_schema(Some(1), Some(trainlog_schema::limits::MAX_NAME_CHARS), TEXT, PRINTABLE)
    }
}
impl ToSchema for NameText {}

/// A metric's key, in the API document.
pub struct KeyText;
impl PartialSchema for KeyText {
    fn schema() -> RefOr<Schema> {
        text_schema(Some(1), Some(MAX_KEY_CHARS), TEXT, PRINTABLE)
    }
}
impl ToSchema for KeyText {}

/// A run's id, in the API document.
pub struct RunIdText;
impl PartialSchema for RunIdText {
    fn schema() -> RefOr<Schema> {
        text_schema(None, None, RUN_ID, "A run's id.")
    }
}
impl ToSchema for RunIdText {}

/// A path among a run's artifacts, in the API document.
pub struct ArtifactPathText;
impl PartialSchema for ArtifactPathText {
    fn schema() -> RefOr<Schema> {
        text_schema(
            None,
            Some(trainlog_schema::limits::MAX_ARTIFACT_PATH_CHARS),
            ARTIFACT_PATH,
            "A relative path; '/' separates folders.",
        )
    }
}
impl ToSchema for ArtifactPathText {}

/// A user's name, in the API document.
pub struct UserNameText;
impl PartialSchema for UserNameText {
    fn schema() -> RefOr<Schema> {
        text_schema(None, None, USER_NAME, "A user's name.")
    }
}
impl ToSchema for UserNameText {}

/// An API key's id, in the API document.
pub struct KeyIdText;
impl PartialSchema for KeyIdText {
    fn schema() -> RefOr<Schema> {
        text_schema(None, None, KEY_ID, "An API key's id: the 12 hex digits after `tl_`.")
    }
}
impl ToSchema for KeyIdText {}

// ---- Errors and plain answers ----

/// The body of every error answer.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// invalid_argument (400), forbidden (403), not_found (404), conflict (409),
    /// payload_too_large (413), unsupported_media_type (415), misdirected_request (421),
    /// internal (500), unavailable (503), insufficient_storage (507).
    pub code: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// The offending field when one is to blame, e.g. "points[3].value", "params.lr", "filter".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// The answer of a change that returns nothing else.
#[derive(Serialize, ToSchema)]
pub struct StatusOk {
    /// Always "ok".
    #[schema(value_type = String, example = "ok")]
    pub status: &'static str,
}

pub const OK: StatusOk = StatusOk { status: "ok" };

// ---- Projects ----

#[derive(Serialize, ToSchema)]
pub struct ProjectView {
    pub id: i64,
    pub name: String,
    pub description: String,
    /// Milliseconds since the Unix epoch.
    pub created_time: i64,
    /// How many runs the project holds; given in lists and on creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_count: Option<u64>,
    /// The caller's role on the project (admin when the server checks no keys).
    pub your_role: RoleName,
}

impl ProjectView {
    pub fn new(p: &Project, run_count: Option<u64>, your_role: trainlog_meta::Role) -> Self {
        ProjectView {
            id: p.id,
            name: p.name.clone(),
            description: p.description.clone(),
            created_time: p.created_ms,
            run_count,
            your_role: RoleName::of(your_role),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ProjectList {
    pub projects: Vec<ProjectView>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    #[schema(schema_with = NameText::schema)]
    pub name: String,
    #[serde(default)]
    #[schema(max_length = 1048576)]
    pub description: String,
}

// ---- Runs ----

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
    pub params: ParamsView,
    pub tags: BTreeMap<String, String>,
    pub summary: SummariesView,
    /// Archived runs are left out of lists and searches unless asked for, and take no changes
    /// until restored; their data stays readable.
    pub archived: bool,
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
            },
            start_time: run.start_ms,
            end_time: run.end_ms,
            user: run.user,
            host: run.host,
            group: run.group,
            parent_id: run.parent_id,
            notes: run.notes,
            params: ParamsView(run.params),
            tags: run.tags,
            summary: SummariesView(summaries),
            archived,
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

/// A schema written as JSON: for the shapes the derive cannot say (unions, key patterns).
pub(crate) fn json_schema(value: Value) -> RefOr<Schema> {
    serde_json::from_value(value).unwrap_or_else(|e| {
        RefOr::T(Schema::Object(ObjectBuilder::new().description(Some(format!("{INVALID_SCHEMA}: {e}"))).build()))
    })
}

/// Marks a hand-written schema that does not parse; a unit test looks for it.
pub const INVALID_SCHEMA: &str = "invalid schema";

fn tag_key() -> Value {
    serde_json::json!({"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS, "pattern": TEXT})
}

fn tags_schema(description: &str, null_deletes: bool, labels: bool) -> RefOr<Schema> {
    let mut value_types = vec![
        serde_json::json!({"type": "string", "maxLength": MAX_TAG_VALUE_CHARS}),
        serde_json::json!({"type": "number"}),
        serde_json::json!({"type": "boolean"}),
    ];
    if null_deletes {
        value_types.push(serde_json::json!({"type": "null"}));
    }
    let object = serde_json::json!({
        "type": "object",
        "propertyNames": tag_key(),
        "additionalProperties": {"anyOf": value_types},
        "maxProperties": trainlog_schema::limits::MAX_TAGS_PER_REQUEST,
    });
    let mut shapes = vec![object];
    if labels {
        shapes.push(serde_json::json!({"type": "array", "items": tag_key(), "maxItems": trainlog_schema::limits::MAX_TAGS_PER_REQUEST}));
    }
    json_schema(serde_json::json!({"description": description, "anyOf": shapes}))
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

/// Tags of a model or version: an object of values; a null value deletes the tag.
pub struct RegistryTags;

impl PartialSchema for RegistryTags {
    fn schema() -> RefOr<Schema> {
        tags_schema("Tags: an object of values; null deletes a tag. At most 1,000.", true, false)
    }
}
impl ToSchema for RegistryTags {}

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
    pub start_time: Option<i64>,
    /// Continue the run with this id: its status goes back to running and params merge.
    #[serde(default)]
    pub resume: bool,
    /// Let the given params replace differing values already stored.
    #[serde(default)]
    pub overwrite_params: bool,
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
    pub end_time: Option<i64>,
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

// ---- Metrics ----

/// One point of a metric as sent in a JSON batch.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricPointInput {
    #[schema(schema_with = KeyText::schema)]
    pub key: String,
    #[serde(deserialize_with = "integer::required")]
    pub step: i64,
    pub value: Float,
    /// Milliseconds since the Unix epoch; the server's time when absent.
    #[serde(default, deserialize_with = "integer::optional")]
    pub timestamp: Option<i64>,
}

/// A batch of metric points, as JSON (this shape) or as an Arrow IPC stream.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LogMetrics {
    pub points: Vec<MetricPointInput>,
}

#[derive(Serialize, ToSchema)]
pub struct Accepted {
    /// Points accepted; they are in the write-ahead log.
    pub accepted: usize,
}

#[derive(Serialize, ToSchema)]
pub struct MetricPoint {
    pub step: i64,
    pub value: Float,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
}

/// The points of a series, serialized straight from its columns.
pub struct Points<'a>(pub &'a Series);

impl Serialize for Points<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let series = self.0;
        s.collect_seq((0..series.len()).map(|i| MetricPoint {
            step: series.steps[i],
            value: Float(series.values[i]),
            timestamp: series.timestamps[i],
        }))
    }
}

impl PartialSchema for Points<'_> {
    fn schema() -> RefOr<Schema> {
        <Vec<MetricPoint> as PartialSchema>::schema()
    }
}

/// A span of consecutive points reduced to its extremes, for charts.
#[derive(Serialize, ToSchema)]
pub struct MetricBucket {
    pub step_min: i64,
    pub step_max: i64,
    pub time_first: i64,
    pub time_last: i64,
    pub min: Float,
    pub max: Float,
    pub last: Float,
    pub count: u64,
}

impl MetricBucket {
    fn new(b: &Bucket) -> Self {
        MetricBucket {
            step_min: b.step_min,
            step_max: b.step_max,
            time_first: b.time_first,
            time_last: b.time_last,
            min: Float(b.min),
            max: Float(b.max),
            last: Float(b.last),
            count: b.count as u64,
        }
    }
}

pub struct Buckets(pub Vec<Bucket>);

impl Serialize for Buckets {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(MetricBucket::new))
    }
}

impl PartialSchema for Buckets {
    fn schema() -> RefOr<Schema> {
        <Vec<MetricBucket> as PartialSchema>::schema()
    }
}

/// A series as points, or as buckets when `buckets` was asked for.
#[derive(Serialize, ToSchema)]
pub struct SeriesBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<MetricPoint>>)]
    pub points: Option<Points<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<MetricBucket>>)]
    pub buckets: Option<Buckets>,
}

impl<'a> SeriesBody<'a> {
    pub fn new(series: &'a Series, buckets: Option<usize>) -> Self {
        match buckets {
            Some(n) => SeriesBody { points: None, buckets: Some(Buckets(series.downsample(n))) },
            None => SeriesBody { points: Some(Points(series)), buckets: None },
        }
    }
}

/// One run's series of a metric.
#[derive(Serialize, ToSchema)]
pub struct MetricSeries<'a> {
    pub key: &'a str,
    #[serde(flatten)]
    pub body: SeriesBody<'a>,
    /// Data files of the run that are catalogued but missing from the store: their points
    /// are absent from this answer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_files: Vec<String>,
}

#[derive(Serialize, ToSchema)]
pub struct RunSeries<'a> {
    pub run_id: &'a str,
    #[serde(flatten)]
    pub body: SeriesBody<'a>,
}

/// A metric's series for several runs, in the order asked for.
#[derive(Serialize, ToSchema)]
pub struct MultiRunSeries<'a> {
    pub key: &'a str,
    pub series: Vec<RunSeries<'a>>,
}

/// The body of `POST /metrics/query`: one metric of many runs, each on its own or in groups.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsQuery {
    /// The metric's key.
    #[serde(default)]
    #[schema(schema_with = KeyText::schema, required = true)]
    pub key: Option<String>,
    /// Buckets a series (with `runs`) or a group's grid (with `groups`) is cut into; buckets
    /// times runs or groups is at most 1,000,000.
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(value_type = u32, minimum = 1, maximum = 100000, required = true)]
    pub buckets: Option<usize>,
    #[serde(default, deserialize_with = "integer::optional")]
    pub step_min: Option<i64>,
    #[serde(default, deserialize_with = "integer::optional")]
    pub step_max: Option<i64>,
    /// Run ids, answered as `GET /metrics` answers them. Give this or `groups`.
    #[serde(default)]
    #[schema(value_type = Option<RunIdList>)]
    pub runs: Option<Vec<String>>,
    /// Run ids by group name: each group answers buckets on one step grid over its runs.
    #[serde(default)]
    #[schema(value_type = Option<GroupsInput>)]
    pub groups: Option<Groups>,
}

/// Up to 20,000 run ids, in the API document.
pub struct RunIdList;
impl PartialSchema for RunIdList {
    fn schema() -> RefOr<Schema> {
        json_schema(serde_json::json!({
            "type": "array",
            "items": {"type": "string", "pattern": RUN_ID},
            "minItems": 1,
            "maxItems": trainlog_schema::limits::MAX_QUERY_RUNS,
        }))
    }
}
impl ToSchema for RunIdList {}

/// Groups of run ids by name, in the API document.
pub struct GroupsInput;
impl PartialSchema for GroupsInput {
    fn schema() -> RefOr<Schema> {
        json_schema(serde_json::json!({
            "type": "object",
            "description": "Run ids by group name: at most 100 groups and 20,000 run ids in all.",
            "propertyNames": {"type": "string", "minLength": 1, "maxLength": trainlog_schema::limits::MAX_NAME_CHARS, "pattern": "^[^\\x00-\\x1F\\x7F-\\x9F]*$"},
            "additionalProperties": {"type": "array", "items": {"type": "string", "pattern": RUN_ID}},
            "minProperties": 1,
            "maxProperties": trainlog_schema::limits::MAX_QUERY_GROUPS,
        }))
    }
}
impl ToSchema for GroupsInput {}

/// Groups of run ids in the order the body gives them; a name given twice is refused.
pub struct Groups(pub Vec<(String, Vec<String>)>);

impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Groups;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of run id lists by group name")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Groups, A::Error> {
                let mut groups: Vec<(String, Vec<String>)> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some(name) = map.next_key::<String>()? {
                    if !seen.insert(name.clone()) {
                        return Err(serde::de::Error::custom(format!("group {name:?} is given twice")));
                    }
                    groups.push((name, map.next_value()?));
                }
                Ok(Groups(groups))
            }
        }
        d.deserialize_map(V)
    }
}

/// One bucket of a group's grid.
#[derive(Serialize, ToSchema)]
pub struct GroupBucketView {
    /// The grid's steps this bucket covers, both ends included.
    pub step_min: i64,
    pub step_max: i64,
    /// The mean over the group's runs of each one's last value in the bucket; non-finite values
    /// are left out, and null when none is finite.
    pub mean: Option<Float>,
    /// The least and greatest point of the group's runs in the bucket (NaN ignored unless every value is NaN).
    pub min: Float,
    pub max: Float,
    /// Runs with points in the bucket.
    pub runs: u64,
}

impl GroupBucketView {
    pub fn new(b: &trainlog_store::GroupBucket) -> Self {
        GroupBucketView {
            step_min: b.step_min,
            step_max: b.step_max,
            mean: b.mean.map(Float),
            min: Float(b.min),
            max: Float(b.max),
            runs: b.runs,
        }
    }
}

/// A group's series on one step grid over its runs.
#[derive(Serialize, ToSchema)]
pub struct GroupSeries {
    pub name: String,
    /// Runs in the group (each once).
    pub runs: u64,
    /// Runs of the group without points of the key in the step range.
    pub runs_without_points: u64,
    /// The buckets some run has points in, by step.
    pub buckets: Vec<GroupBucketView>,
}

/// A metric's series by group, in the order asked for.
#[derive(Serialize, ToSchema)]
pub struct GroupedSeries<'a> {
    pub key: &'a str,
    pub groups: Vec<GroupSeries>,
}

/// The answer of `POST /metrics/query`: by run with `runs`, by group with `groups`.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum MetricsQueryAnswer<'a> {
    Runs(MultiRunSeries<'a>),
    Groups(GroupedSeries<'a>),
}

// ---- Artifacts and checkpoints ----

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

// ---- Saved views ----

/// A view's name in a path: 1 to 100 characters, no control characters, not only whitespace.
pub struct ViewNameText;
impl PartialSchema for ViewNameText {
    fn schema() -> RefOr<Schema> {
        text_schema(
            Some(1),
            Some(trainlog_schema::limits::MAX_VIEW_NAME_CHARS),
            VIEW_NAME,
            "A saved view's name: no control characters, not only whitespace.",
        )
    }
}
impl ToSchema for ViewNameText {}

/// A view's name: no control characters, and something besides whitespace.
pub const VIEW_NAME: &str = r"^[^\x00-\x1F\x7F-\x9F]*[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000][^\x00-\x1F\x7F-\x9F]*$";

/// A saved view as lists show it, without its state.
#[derive(Serialize, ToSchema)]
pub struct ViewSummary {
    pub name: String,
    /// Who saved it last; null on a server run without --auth.
    pub user: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub updated_time: i64,
}

impl ViewSummary {
    pub fn new(v: &trainlog_meta::ViewRow) -> Self {
        ViewSummary { name: v.name.clone(), user: v.user.clone(), updated_time: v.updated_ms }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ViewList {
    /// By name.
    pub views: Vec<ViewSummary>,
}

/// A saved view with its state.
#[derive(Serialize, ToSchema)]
pub struct ViewDetail {
    #[serde(flatten)]
    pub view: ViewSummary,
    /// The state as the UI stored it; the server does not read it.
    #[schema(value_type = Object)]
    pub state: Value,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutView {
    /// A JSON object of at most 64 KiB as JSON text, kept as given.
    #[serde(default)]
    #[schema(value_type = Object, required = true)]
    pub state: Option<Value>,
}

// ---- Admin ----

/// What the server holds and has done since start. Every counter of the store is listed
/// besides these fields; `GET /metrics` gives the same in Prometheus' text format.
#[derive(Serialize, ToSchema)]
pub struct Stats {
    /// Points in memory, not yet in Parquet.
    pub buffered_points: u64,
    pub buffered_bytes: u64,
    /// Past this many buffered bytes ingest answers 503.
    pub max_buffer_bytes: u64,
    /// In-memory generations frozen and waiting to be persisted.
    pub frozen_generations: u64,
    /// Parquet files in the catalog.
    pub files: u64,
    pub file_bytes: u64,
    pub file_rows: u64,
    /// Write-ahead log records replayed at start.
    pub wal_replayed_records: u64,
    /// Bytes of torn write-ahead log tail cut at start.
    pub wal_cut_bytes: u64,
    /// Seconds spent waiting on the object store.
    pub object_store_seconds: f64,
    /// Error answers given since start, by error code.
    pub errors: BTreeMap<String, u64>,
    /// The store's counters, by name.
    #[serde(flatten)]
    pub counters: BTreeMap<String, u64>,
}

// ---- Model registry ----

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

// ---- Sweeps ----

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSweep {
    /// The sweep file's text (YAML), as `trainlog sweep` reads it.
    #[schema(min_length = 1, max_length = 1048576)]
    pub config: String,
    /// Else the sweep file's `project`.
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = r"^[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000](?:[^\x00-\x1F\x7F-\x9F]*[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$"
    )]
    pub project: Option<String>,
    /// Else the sweep file's `name`.
    #[schema(max_length = 476)]
    pub name: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct SweepMetric {
    pub name: String,
    /// "minimize" or "maximize".
    pub goal: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct Money {
    pub usd: Option<f64>,
    pub gpu_hours: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct Spent {
    pub usd: f64,
    pub gpu_hours: f64,
}

#[derive(Serialize, ToSchema)]
pub struct BestTrial {
    pub trial: i64,
    pub run_id: String,
    pub value: f64,
    #[schema(value_type = Object)]
    pub params: Value,
}

#[derive(Serialize, ToSchema)]
pub struct BestSoFar {
    /// Trials ended so far.
    pub trials: usize,
    pub trial: i64,
    pub ended_time: Option<i64>,
    pub value: f64,
    pub best: f64,
}

/// A sweep with its state, trial counts by state, best trial, spending and best-so-far curve.
#[derive(Serialize, ToSchema)]
pub struct SweepView {
    pub id: String,
    pub project: String,
    pub name: String,
    /// running, stopped or finished.
    pub state: String,
    /// run_cap, budget, grid_exhausted or stopped; empty while it runs.
    pub ended_reason: String,
    /// grid, random or tpe.
    pub method: &'static str,
    pub metric: SweepMetric,
    pub command: Vec<String>,
    pub run_cap: Option<u64>,
    /// Size of the grid, for grid sweeps.
    pub grid_size: Option<u64>,
    pub budget: Money,
    pub spent: Spent,
    pub trial_count: usize,
    pub counts: BTreeMap<String, u64>,
    pub best: Option<BestTrial>,
    pub best_so_far: Vec<BestSoFar>,
    pub parameters: Vec<String>,
    /// The sweep file as given.
    pub config: String,
    pub created_time: i64,
    pub updated_time: i64,
}

#[derive(Serialize, ToSchema)]
pub struct SweepList {
    pub sweeps: Vec<SweepView>,
}

#[derive(Serialize, ToSchema)]
pub struct TrialView {
    pub index: i64,
    pub run_id: String,
    #[schema(value_type = Object)]
    pub params: Value,
    /// running, finished, failed, pruned or preempted.
    pub state: String,
    pub attempts: i64,
    pub agent: String,
    pub slot: String,
    pub gpus: f64,
    pub bracket: Option<i64>,
    pub exit_code: Option<i64>,
    /// The last lines the trial printed.
    pub output_tail: String,
    pub stop_reason: String,
    pub created_time: i64,
    pub started_time: i64,
    pub ended_time: Option<i64>,
    pub heartbeat_time: i64,
    pub run_seconds: f64,
}

/// A trial with its result so far.
#[derive(Serialize, ToSchema)]
pub struct TrialResult {
    #[serde(flatten)]
    pub trial: TrialView,
    /// The sweep's metric, last value in the trial's run.
    pub metric: Option<Float>,
    pub cost_usd: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct TrialList {
    pub trials: Vec<TrialResult>,
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NextTrialRequest {
    /// The agent's name, `host:pid` by convention.
    #[serde(default)]
    #[schema(max_length = 500)]
    pub agent: String,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub slot: String,
    /// GPUs the trial will hold; a share counts as a fraction.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1024)]
    pub gpus: f64,
}

/// What an agent needs to start a trial.
#[derive(Serialize, ToSchema)]
pub struct Assignment {
    /// Always "trial".
    #[schema(value_type = String)]
    pub status: &'static str,
    pub sweep_id: String,
    pub project: String,
    pub index: i64,
    pub run_id: String,
    #[schema(value_type = Object)]
    pub params: Value,
    pub command: Vec<String>,
    pub attempt: i64,
    /// True when a preempted trial starts again with its run.
    pub resume: bool,
    pub metric: String,
}

/// No trial to start: "done" (the sweep ended) or "wait" (ask again later).
#[derive(Serialize, ToSchema)]
pub struct NoTrial {
    pub status: &'static str,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum NextTrial {
    Trial(Assignment),
    None(NoTrial),
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// The attempt the agent runs; a report about another attempt answers stop.
    #[serde(default, deserialize_with = "integer::optional")]
    pub attempt: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct StopAnswer {
    pub state: String,
    /// True when the trial must stop (pruned, stopped sweep, superseded attempt).
    pub stop: bool,
    pub reason: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndTrial {
    pub outcome: TrialOutcome,
    /// The attempt that ended; a late report about an older attempt changes nothing.
    #[serde(default, deserialize_with = "integer::optional")]
    pub attempt: Option<i64>,
    #[serde(default, deserialize_with = "integer::optional")]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub output_tail: String,
}

/// How a trial's attempt ended.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum TrialOutcome {
    Finished,
    Failed,
    Pruned,
    Preempted,
}

impl TrialOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            TrialOutcome::Finished => "finished",
            TrialOutcome::Failed => "failed",
            TrialOutcome::Pruned => "pruned",
            TrialOutcome::Preempted => "preempted",
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct RunTrial {
    pub sweep_id: String,
    pub trial: i64,
    #[schema(value_type = Object)]
    pub params: Value,
    pub state: String,
    pub stop: bool,
    pub reason: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Health {
    #[schema(value_type = String, example = "ok")]
    pub status: &'static str,
}

/// Whether a replica can serve: each dependency's state, "ok" or what went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    /// `ready` or `unavailable`.
    #[schema(value_type = String, example = "ready")]
    pub status: &'static str,
    /// The metadata database (SQLite or PostgreSQL).
    pub database: String,
    /// The object store of metric files and artifacts.
    pub store: String,
}

// ---- Users, keys and roles ----

/// A user name: 1 to 64 characters from [A-Za-z0-9_.@-].
pub const USER_NAME: &str = "^[A-Za-z0-9_.@-]{1,64}$";
/// A key's id: 12 hex digits.
pub const KEY_ID: &str = "^[0-9a-f]{12}$";

/// A role on a project or a registered model; each includes the ones before it.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum RoleName {
    /// Not even told that it exists.
    None,
    Read,
    Write,
    /// Also grants roles and deletes.
    Admin,
}

impl RoleName {
    pub fn role(self) -> trainlog_meta::Role {
        match self {
            RoleName::None => trainlog_meta::Role::None,
            RoleName::Read => trainlog_meta::Role::Read,
            RoleName::Write => trainlog_meta::Role::Write,
            RoleName::Admin => trainlog_meta::Role::Admin,
        }
    }

    pub fn of(role: trainlog_meta::Role) -> Self {
        match role {
            trainlog_meta::Role::None => RoleName::None,
            trainlog_meta::Role::Read => RoleName::Read,
            trainlog_meta::Role::Write => RoleName::Write,
            trainlog_meta::Role::Admin => RoleName::Admin,
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetMember {
    pub role: RoleName,
}

#[derive(Serialize, ToSchema)]
pub struct Member {
    pub user: String,
    pub role: RoleName,
}

/// Users holding a role of their own; everyone else has `default_role` (server admins: admin).
#[derive(Serialize, ToSchema)]
pub struct MemberList {
    pub members: Vec<Member>,
    pub default_role: RoleName,
}

#[derive(Serialize, ToSchema)]
pub struct UserView {
    pub name: String,
    /// A server admin may do anything.
    pub admin: bool,
    /// Keys not revoked.
    pub active_keys: i64,
    /// Milliseconds since the Unix epoch.
    pub created_time: i64,
}

#[derive(Serialize, ToSchema)]
pub struct UserList {
    pub users: Vec<UserView>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    #[schema(schema_with = UserNameText::schema)]
    pub name: String,
    /// Make a server admin.
    #[serde(default)]
    pub admin: bool,
}

/// A new key: shown this once, stored only as a hash.
#[derive(Serialize, ToSchema)]
pub struct NewKeyView {
    pub user: String,
    pub key_id: String,
    pub key: String,
}

#[derive(Serialize, ToSchema)]
pub struct KeyView {
    pub id: String,
    pub user: String,
    pub created_time: i64,
    pub last_used_time: Option<i64>,
    pub revoked_time: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}

/// Who the request's key belongs to.
#[derive(Serialize, ToSchema)]
pub struct WhoAmI {
    /// Whether the server checks keys; when false there is no user.
    pub auth: bool,
    pub user: Option<String>,
    pub admin: bool,
    /// What users get on projects and models they hold no role of their own on.
    pub default_role: Option<RoleName>,
}

/// The keys a project's runs use.
#[derive(Serialize, ToSchema)]
pub struct ProjectKeys {
    pub params: Vec<String>,
    pub metrics: Vec<String>,
    pub tags: Vec<String>,
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
