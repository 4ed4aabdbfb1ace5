//! The metrics' wire types: batches of points in, series as points or buckets out, and the
//! grouped query.

use crate::wire::{integer, json_schema, Float, KeyText, RUN_ID};
use serde::{Deserialize, Serialize, Serializer};
use trainlog_store::{Bucket, Series};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

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
            count: b.count,
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
