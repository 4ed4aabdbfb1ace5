//! The search space of a sweep: one distribution per parameter, and the trials already seen.

use crate::{Error, Result};
use serde_json::Value;
use std::collections::BTreeMap;

/// A trial's parameters by name.
pub type Params = BTreeMap<String, Value>;

/// Where a parameter's values come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Distribution {
    /// Always this value (`value: X`).
    Constant(Value),
    /// One of these values (`values: [...]`), each equally likely.
    Categorical(Vec<Value>),
    /// A float in [min, max].
    Uniform { min: f64, max: f64 },
    /// A float in [min, max] whose logarithm is uniform; min > 0.
    LogUniform { min: f64, max: f64 },
    /// `round(x / q) * q` for x uniform in [min, max].
    QUniform { min: f64, max: f64, q: f64 },
    /// `round(x / q) * q` for x log-uniform in [min, max]; min > 0.
    QLogUniform { min: f64, max: f64, q: f64 },
    /// An integer in [min, max], both included.
    IntUniform { min: i64, max: i64 },
}

impl Distribution {
    /// Checks the bounds; `field` names the parameter in the error.
    pub fn validate(&self, field: &str) -> Result<()> {
        let invalid = |reason: String| Err(Error::Invalid { field: field.to_owned(), reason });
        match *self {
            Distribution::Constant(_) => Ok(()),
            Distribution::Categorical(ref values) if values.is_empty() => invalid("values is empty".into()),
            Distribution::Categorical(_) => Ok(()),
            Distribution::Uniform { min, max } | Distribution::LogUniform { min, max }
                if !(min.is_finite() && max.is_finite()) =>
            {
                invalid(format!("min and max must be finite numbers, got {min} and {max}"))
            }
            Distribution::Uniform { min, max } | Distribution::QUniform { min, max, .. } if min >= max => {
                invalid(format!("min ({min}) must be below max ({max})"))
            }
            Distribution::LogUniform { min, max } | Distribution::QLogUniform { min, max, .. } if min >= max => {
                invalid(format!("min ({min}) must be below max ({max})"))
            }
            Distribution::LogUniform { min, .. } | Distribution::QLogUniform { min, .. } if min <= 0.0 => {
                invalid(format!("a log distribution needs min > 0, got {min}"))
            }
            Distribution::QUniform { q, .. } | Distribution::QLogUniform { q, .. } if !(q > 0.0 && q.is_finite()) => {
                invalid(format!("q must be a positive number, got {q}"))
            }
            Distribution::IntUniform { min, max } if min >= max => {
                invalid(format!("min ({min}) must be below max ({max})"))
            }
            _ => Ok(()),
        }
    }
}

/// The parameters of a sweep, sorted by name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Space {
    pub params: Vec<(String, Distribution)>,
}

impl Space {
    /// A space from named distributions, each validated.
    pub fn new(params: impl IntoIterator<Item = (String, Distribution)>) -> Result<Self> {
        let mut params: Vec<(String, Distribution)> = params.into_iter().collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, d) in &params {
            d.validate(&format!("parameters.{name}"))?;
        }
        Ok(Self { params })
    }
}

/// Whether the sweep's metric should go down or up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    Minimize,
    Maximize,
}

impl Goal {
    /// The value as a loss: strategies and rules always minimize.
    pub fn loss(self, value: f64) -> f64 {
        match self {
            Goal::Minimize => value,
            Goal::Maximize => -value,
        }
    }
}

/// A trial a strategy learns from: its parameters and, when it has one, its final loss
/// (already in the minimizing direction; a pruned trial gives the last loss it reported).
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub params: Params,
    pub loss: Option<f64>,
}
