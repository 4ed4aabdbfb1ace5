//! Shared types of trainlog: identifiers parsed once at the edge, typed params, metric points,
//! reserved key prefixes, the redaction of secrets from recorded text and the Arrow schemas of the
//! persisted Parquet files. No IO here.

pub mod alert_rule;
pub mod arrow;
pub mod console;
pub mod gpu_names;
mod histogram;
mod ids;
pub mod limits;
mod media;
mod params;
pub mod peak_flops;
mod points;
pub mod redact;
mod run_color;

pub use histogram::{Histogram, TableMode};
pub use ids::{ArtifactPath, MetricKey, ParamKey, ProjectName, RunId, TagKey, ViewName};
pub use media::{mime_essence, parse_mime, BoxDomain, MediaBox, MediaItem, MediaKind, MediaMask, Sha256};
pub use params::{flatten_params, ParamValue};
pub use points::{
    json_f64, parse_non_finite, BatchPoint, MetricPoint, MetricSummary, PointBatch, RunStatus, COST_PREFIX,
    SYSTEM_PREFIX,
};
pub use run_color::{palette_color, RunColor, RUN_PALETTE};

/// A value that failed to parse, with the field it came from and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Error {
    pub field: String,
    pub reason: String,
}

impl Error {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { field: field.into(), reason: reason.into() }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
