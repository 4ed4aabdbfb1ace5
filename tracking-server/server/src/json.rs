//! JSON shapes of API responses.

use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use trainlog_meta::{Project, Run};
use trainlog_schema::{json_f64, MetricSummary};
use trainlog_store::{Bucket, Series};

pub fn summary(s: &MetricSummary) -> Value {
    json!({
        "last": json_f64(s.last),
        "min": json_f64(s.min),
        "max": json_f64(s.max),
        "last_step": s.last_step,
        "last_timestamp": s.last_ms,
        "count": s.count,
        "mean": s.mean().map(json_f64),
    })
}

pub fn run(run: &Run, summaries: &BTreeMap<String, MetricSummary>) -> Value {
    let params: Map<String, Value> = run.params.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
    let sums: Map<String, Value> = summaries.iter().map(|(k, s)| (k.clone(), summary(s))).collect();
    json!({
        "id": run.id.as_str(),
        "project": run.project,
        "project_id": run.project_id,
        "name": run.name,
        "status": run.status.as_str(),
        "start_time": run.start_ms,
        "end_time": run.end_ms,
        "user": run.user,
        "host": run.host,
        "group": run.group,
        "parent_id": run.parent_id,
        "notes": run.notes,
        "params": params,
        "tags": run.tags,
        "summary": sums,
    })
}

pub fn project(p: &Project, run_count: Option<u64>) -> Value {
    let mut v = json!({"id": p.id, "name": p.name, "description": p.description, "created_time": p.created_ms});
    if let Some(n) = run_count {
        v["run_count"] = json!(n);
    }
    v
}

/// A float written as a number, or as a string when it is not finite.
struct F(f64);

impl Serialize for F {
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

/// The points of a series, serialized straight from its columns.
pub struct Points<'a>(pub &'a Series);

impl Serialize for Points<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let series = self.0;
        let mut seq = s.serialize_seq(Some(series.len()))?;
        for i in 0..series.len() {
            seq.serialize_element(&Point {
                step: series.steps[i],
                value: series.values[i],
                timestamp: series.timestamps[i],
            })?;
        }
        seq.end()
    }
}

struct Point {
    step: i64,
    value: f64,
    timestamp: i64,
}

impl Serialize for Point {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("step", &self.step)?;
        m.serialize_entry("value", &F(self.value))?;
        m.serialize_entry("timestamp", &self.timestamp)?;
        m.end()
    }
}

pub struct Buckets<'a>(pub &'a [Bucket]);

impl Serialize for Buckets<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for b in self.0 {
            seq.serialize_element(&BucketJson(b))?;
        }
        seq.end()
    }
}

struct BucketJson<'a>(&'a Bucket);

impl Serialize for BucketJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let b = self.0;
        let mut m = s.serialize_map(Some(8))?;
        m.serialize_entry("step_min", &b.step_min)?;
        m.serialize_entry("step_max", &b.step_max)?;
        m.serialize_entry("time_first", &b.time_first)?;
        m.serialize_entry("time_last", &b.time_last)?;
        m.serialize_entry("min", &F(b.min))?;
        m.serialize_entry("max", &F(b.max))?;
        m.serialize_entry("last", &F(b.last))?;
        m.serialize_entry("count", &b.count)?;
        m.end()
    }
}
