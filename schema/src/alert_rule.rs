//! Alert rules as people say them (`"train/loss not finite"`, `"eval/acc < 0.5"`, `"failed"`),
//! parsed once into what the server evaluates: a metric's points as they arrive, or a run's end.

use crate::{Error, MetricKey, Result};

/// The run ends a rule can name.
pub const RUN_ENDS: [&str; 5] = ["failed", "lost", "preempted", "killed", "finished"];

/// One rule.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertRule {
    /// A point of `key` that is NaN or infinite.
    NotFinite { key: MetricKey },
    /// A point of `key` above `threshold`.
    Above { key: MetricKey, threshold: f64 },
    /// A point of `key` below `threshold`.
    Below { key: MetricKey, threshold: f64 },
    /// A run that ended so (`failed`, `lost`, `preempted`, `killed`, `finished`).
    RunEnded { status: String },
}

fn invalid(reason: impl Into<String>) -> Error {
    Error { field: "rule".into(), reason: reason.into() }
}

const FORMS: &str =
    "`KEY not finite`, `KEY > NUMBER`, `KEY < NUMBER`, or a run's end: failed, lost, preempted, killed, finished";

impl AlertRule {
    /// Parses a rule's text.
    pub fn parse(text: &str) -> Result<Self> {
        let text = text.trim();
        if text.is_empty() || text.chars().count() > 300 {
            return Err(invalid(format!("1 to 300 characters: {FORMS}")));
        }
        if RUN_ENDS.contains(&text) {
            return Ok(AlertRule::RunEnded { status: text.to_owned() });
        }
        if let Some(key) = text.strip_suffix(" not finite") {
            return Ok(AlertRule::NotFinite { key: MetricKey::parse("rule", key.trim())? });
        }
        for (op, above) in [(" > ", true), (" < ", false)] {
            if let Some((key, number)) = text.rsplit_once(op) {
                let threshold: f64 = number
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n: &f64| n.is_finite())
                    .ok_or_else(|| invalid(format!("{:?} is not a finite number", number.trim())))?;
                let key = MetricKey::parse("rule", key.trim())?;
                return Ok(if above {
                    AlertRule::Above { key, threshold }
                } else {
                    AlertRule::Below { key, threshold }
                });
            }
        }
        Err(invalid(format!("{text:?} is not a rule this server understands: {FORMS}")))
    }

    /// The metric the rule watches, if it watches one.
    pub fn key(&self) -> Option<&MetricKey> {
        match self {
            AlertRule::NotFinite { key } | AlertRule::Above { key, .. } | AlertRule::Below { key, .. } => Some(key),
            AlertRule::RunEnded { .. } => None,
        }
    }

    /// Whether a point of the rule's metric with this value fires it.
    pub fn fires_on(&self, value: f64) -> bool {
        match self {
            AlertRule::NotFinite { .. } => !value.is_finite(),
            AlertRule::Above { threshold, .. } => value > *threshold,
            AlertRule::Below { threshold, .. } => value < *threshold,
            AlertRule::RunEnded { .. } => false,
        }
    }

    /// The alert's title when the rule fires (on `value`, for a metric rule).
    pub fn title(&self, value: f64) -> String {
        match self {
            AlertRule::NotFinite { key } => format!("{key} is {value}"),
            AlertRule::Above { key, threshold } => format!("{key} above {threshold}"),
            AlertRule::Below { key, threshold } => format!("{key} below {threshold}"),
            AlertRule::RunEnded { status } => format!("run {status}"),
        }
    }

    /// How bad it is when it fires.
    pub fn level(&self) -> &'static str {
        match self {
            AlertRule::NotFinite { .. } => "error",
            AlertRule::RunEnded { status } if status == "finished" => "info",
            AlertRule::RunEnded { status } if status == "killed" => "warn",
            AlertRule::RunEnded { .. } => "error",
            AlertRule::Above { .. } | AlertRule::Below { .. } => "warn",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_read_as_people_write_them() {
        let nan = AlertRule::parse("train/loss not finite").expect("not finite");
        assert_eq!(nan.key().map(MetricKey::as_str), Some("train/loss"));
        assert!(nan.fires_on(f64::NAN) && nan.fires_on(f64::INFINITY) && !nan.fires_on(1.0));
        let low = AlertRule::parse(" eval/acc < 0.5 ").expect("below");
        assert!(low.fires_on(0.4) && !low.fires_on(0.5));
        assert_eq!(low.title(0.4), "eval/acc below 0.5");
        let high = AlertRule::parse("grad_norm > 1e3").expect("above");
        assert!(high.fires_on(1001.0) && !high.fires_on(1000.0));
        assert_eq!(AlertRule::parse("lost").expect("end"), AlertRule::RunEnded { status: "lost".into() });
        for bad in ["", "loss >", "loss > nan", "loss >= 1", "stalled 10m", "> 3"] {
            let e = AlertRule::parse(bad).expect_err(bad);
            assert_eq!(e.field, "rule", "{bad}");
        }
    }
}
