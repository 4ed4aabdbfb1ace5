//! Alert rules as people say them (`"train/loss not finite"`, `"stalled 10m"`, `"budget 80%"`,
//! `"failure rate > 5% over 7d"`), parsed once into what the server evaluates: a metric's points
//! as they arrive, a run's end, a run's activity on a timer, or a project's money and report.

use crate::{Error, MetricKey, Result};

/// The run ends a rule can name.
pub const RUN_ENDS: [&str; 5] = ["failed", "lost", "preempted", "killed", "finished"];

/// A spike's z-score when the rule names none.
pub const DEFAULT_SPIKE_Z: f64 = 4.0;
/// The points before a spike its mean and deviation are taken over, when the rule names none.
pub const DEFAULT_SPIKE_WINDOW: usize = 100;
/// The points a spike's window needs before it can fire.
pub const MIN_SPIKE_POINTS: usize = 20;
/// How many times the trailing hourly spend the last hour's must reach, when the rule names none.
pub const DEFAULT_SPIKE_FACTOR: f64 = 5.0;

/// One rule.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertRule {
    /// A point of `key` that is NaN or infinite.
    NotFinite { key: MetricKey, stop: bool },
    /// A point of `key` above `threshold`.
    Above { key: MetricKey, threshold: f64, stop: bool },
    /// A point of `key` below `threshold`.
    Below { key: MetricKey, threshold: f64, stop: bool },
    /// A point of `key` more than `z` standard deviations from the mean of the `window` points
    /// before it.
    Spike { key: MetricKey, z: f64, window: usize, stop: bool },
    /// `steps` steps of `key` without a better value than its best (lower, or higher when
    /// `higher_is_better`).
    NoImprovement { key: MetricKey, steps: i64, higher_is_better: bool, stop: bool },
    /// A run that ended so (`failed`, `lost`, `preempted`, `killed`, `finished`).
    RunEnded { status: String },
    /// A running run with no new step (of its own metrics) for `after_ms`.
    Stalled { after_ms: i64, stop: bool },
    /// A running run whose every GPU stayed below `below_pct` (SM active where measured, else
    /// utilization) for `for_ms`.
    Idle { below_pct: f64, for_ms: i64, stop: bool },
    /// A project's month spend at `pct` of its monthly budget.
    Budget { pct: f64, stop: bool },
    /// The report's GPU utilization rate of the project's runs that started in the last
    /// `window_ms`, below `below_pct`.
    Utilization { below_pct: f64, window_ms: i64 },
    /// A run that started in the last `window_ms` after queueing longer than `above_ms`.
    QueueWait { above_ms: i64, window_ms: i64 },
    /// Of the project's runs that started in the last `window_ms` and ended, the share that
    /// failed (code or infrastructure) above `above_pct`.
    FailureRate { above_pct: f64, window_ms: i64 },
    /// The cost of the runs that started in the last hour at `factor` times the hourly average
    /// of the seven days before it, or more.
    CostSpike { factor: f64 },
    /// A model version registered from a run of the project.
    VersionCreated,
    /// An alias of a model moved to a version registered from a run of the project.
    AliasMoved,
}

/// What a rule watches, which decides where the server checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    /// A metric's points, on each ingested batch.
    Metric,
    /// A run's end, as runs change.
    RunEnd,
    /// A running run's steps or GPUs, on a timer.
    Activity,
    /// A project's money or report figures, on a slower timer.
    Project,
    /// The model registry's events, as they happen.
    Registry,
}

fn invalid(reason: impl Into<String>) -> Error {
    Error { field: "rule".into(), reason: reason.into() }
}

const FORMS: &str = "`KEY not finite`, `KEY > NUMBER`, `KEY < NUMBER`, `KEY spike [> Z] [over N]`, \
`KEY no improvement for N steps`, a run's end (failed, lost, preempted, killed, finished), `stalled 10m`, \
`idle < 10% for 20m`, `budget 80%`, `utilization < 50% for 6h`, `queue wait > 2h [over 1d]`, \
`failure rate > 5% [over 7d]`, `cost spike [> 5x]`, `version created`, `alias moved`; metric, stalled, idle and budget rules may end with `then stop`";

/// A span as people write it: `90s`, `10m`, `6h`, `7d`, `2w` (also `10 min`, `6 hours`).
pub fn parse_duration_ms(text: &str) -> Result<i64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 =
        number.parse().map_err(|_| invalid(format!("{text:?} is not a span such as 90s, 10m, 6h, 7d")))?;
    let unit_ms: f64 = match unit.trim() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000.0,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000.0,
        "d" | "day" | "days" => 86_400_000.0,
        "w" | "week" | "weeks" => 7.0 * 86_400_000.0,
        _ => return Err(invalid(format!("{text:?} is not a span such as 90s, 10m, 6h, 7d"))),
    };
    let ms = number * unit_ms;
    if !(1_000.0..=366.0 * 86_400_000.0).contains(&ms) {
        return Err(invalid(format!("{text:?}: a span from 1 second to a year")));
    }
    Ok(ms.round() as i64)
}

/// A span in the words an alert uses: `45 s`, `20 min`, `6 h`, `7 d`.
pub fn duration_words(ms: i64) -> String {
    let s = ms / 1000;
    if s < 120 {
        format!("{s} s")
    } else if s < 2 * 3600 {
        format!("{} min", (s + 30) / 60)
    } else if s < 2 * 86_400 {
        format!("{:.1} h", s as f64 / 3600.0).replace(".0 h", " h")
    } else {
        format!("{:.1} d", s as f64 / 86_400.0).replace(".0 d", " d")
    }
}

fn percent(text: &str) -> Result<f64> {
    let number =
        text.trim().strip_suffix('%').ok_or_else(|| invalid(format!("{text:?} is not a percent such as 10%")))?;
    number
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|p| p.is_finite() && (0.0..=1000.0).contains(p))
        .ok_or_else(|| invalid(format!("{text:?} is not a percent from 0% to 1000%")))
}

fn number(text: &str) -> Result<f64> {
    text.trim()
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite())
        .ok_or_else(|| invalid(format!("{:?} is not a finite number", text.trim())))
}

/// Names of metrics where a higher value is better, for `no improvement`.
fn higher_is_better(key: &str) -> bool {
    let last = key.rsplit(['/', '.']).next().unwrap_or(key).to_ascii_lowercase();
    [
        "acc",
        "accuracy",
        "f1",
        "auc",
        "auroc",
        "precision",
        "recall",
        "bleu",
        "rouge",
        "reward",
        "map",
        "iou",
        "score",
        "mfu",
    ]
    .iter()
    .any(|word| last == *word || last.starts_with(&format!("{word}_")) || last.ends_with(&format!("_{word}")))
}

impl AlertRule {
    /// Parses a rule's text.
    pub fn parse(text: &str) -> Result<Self> {
        let text = text.trim();
        if text.is_empty() || text.chars().count() > 300 {
            return Err(invalid(format!("1 to 300 characters: {FORMS}")));
        }
        let (body, stop) = match text.strip_suffix(" then stop") {
            Some(body) => (body.trim(), true),
            None => (text, false),
        };
        let rule = Self::parse_body(body, stop)?;
        if stop && !rule.can_stop() {
            return Err(invalid(format!("{body:?} cannot stop runs: only metric, stalled, idle and budget rules can")));
        }
        Ok(rule)
    }

    fn parse_body(text: &str, stop: bool) -> Result<Self> {
        if RUN_ENDS.contains(&text) {
            return Ok(AlertRule::RunEnded { status: text.to_owned() });
        }
        match text {
            "version created" => return Ok(AlertRule::VersionCreated),
            "alias moved" => return Ok(AlertRule::AliasMoved),
            _ => {}
        }
        if let Some(rest) = text.strip_prefix("stalled ") {
            let rest = rest.trim().strip_prefix("for ").unwrap_or(rest);
            return Ok(AlertRule::Stalled { after_ms: parse_duration_ms(rest)?, stop });
        }
        if let Some(rest) = text.strip_prefix("idle < ") {
            let (pct, span) =
                rest.split_once(" for ").ok_or_else(|| invalid("idle rules read `idle < 10% for 20m`"))?;
            return Ok(AlertRule::Idle { below_pct: percent(pct)?, for_ms: parse_duration_ms(span)?, stop });
        }
        if let Some(rest) = text.strip_prefix("budget ") {
            return Ok(AlertRule::Budget { pct: percent(rest)?, stop });
        }
        if let Some(rest) = text.strip_prefix("utilization < ") {
            let (pct, span) =
                rest.split_once(" for ").ok_or_else(|| invalid("utilization rules read `utilization < 50% for 6h`"))?;
            return Ok(AlertRule::Utilization { below_pct: percent(pct)?, window_ms: parse_duration_ms(span)? });
        }
        if let Some(rest) = text.strip_prefix("queue wait > ") {
            let (wait, window) = match rest.split_once(" over ") {
                Some((wait, window)) => (wait, parse_duration_ms(window)?),
                None => (rest, 86_400_000),
            };
            return Ok(AlertRule::QueueWait { above_ms: parse_duration_ms(wait)?, window_ms: window });
        }
        if let Some(rest) = text.strip_prefix("failure rate > ") {
            let (pct, window) = match rest.split_once(" over ") {
                Some((pct, window)) => (pct, parse_duration_ms(window)?),
                None => (rest, 7 * 86_400_000),
            };
            return Ok(AlertRule::FailureRate { above_pct: percent(pct)?, window_ms: window });
        }
        if text == "cost spike" {
            return Ok(AlertRule::CostSpike { factor: DEFAULT_SPIKE_FACTOR });
        }
        if let Some(rest) = text.strip_prefix("cost spike > ") {
            let factor = number(rest.trim().strip_suffix('x').unwrap_or(rest))?;
            if factor <= 1.0 {
                return Err(invalid("a cost spike is more than 1x the trailing average"));
            }
            return Ok(AlertRule::CostSpike { factor });
        }
        if let Some(key) = text.strip_suffix(" not finite") {
            return Ok(AlertRule::NotFinite { key: MetricKey::parse("rule", key.trim())?, stop });
        }
        for (word, higher) in
            [(" no improvement for ", None), (" no increase for ", Some(true)), (" no decrease for ", Some(false))]
        {
            if let Some((key, rest)) = text.split_once(word) {
                let steps = rest
                    .trim()
                    .strip_suffix(" steps")
                    .and_then(|n| n.trim().parse::<i64>().ok())
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| invalid(format!("{word:?} takes a count of steps: `KEY{word}1000 steps`")))?;
                let key = MetricKey::parse("rule", key.trim())?;
                let higher_is_better = higher.unwrap_or_else(|| higher_is_better(key.as_str()));
                return Ok(AlertRule::NoImprovement { key, steps, higher_is_better, stop });
            }
        }
        if let Some((key, rest)) = text.split_once(" spike") {
            let rest = rest.trim();
            let (z, window) = match rest.split_once("over") {
                Some((z, window)) => (z.trim(), Some(window.trim())),
                None => (rest, None),
            };
            let z = match z.strip_prefix('>') {
                Some(z) => number(z)?,
                None if z.is_empty() => DEFAULT_SPIKE_Z,
                None => {
                    return Err(invalid("spike rules read `KEY spike`, `KEY spike > 3` or `KEY spike > 3 over 50`"))
                }
            };
            let window =
                match window {
                    Some(w) => w.parse::<usize>().ok().filter(|w| (MIN_SPIKE_POINTS..=10_000).contains(w)).ok_or_else(
                        || invalid(format!("a spike's window is {MIN_SPIKE_POINTS} to 10000 points, got {w:?}")),
                    )?,
                    None => DEFAULT_SPIKE_WINDOW,
                };
            if z <= 0.0 {
                return Err(invalid("a spike's z-score is above 0"));
            }
            return Ok(AlertRule::Spike { key: MetricKey::parse("rule", key.trim())?, z, window, stop });
        }
        for (op, above) in [(" > ", true), (" < ", false)] {
            if let Some((key, value)) = text.rsplit_once(op) {
                let threshold = number(value)?;
                let key = MetricKey::parse("rule", key.trim())?;
                return Ok(if above {
                    AlertRule::Above { key, threshold, stop }
                } else {
                    AlertRule::Below { key, threshold, stop }
                });
            }
        }
        Err(invalid(format!("{text:?} is not a rule this server understands: {FORMS}")))
    }

    /// Where the server checks it.
    pub fn kind(&self) -> RuleKind {
        match self {
            AlertRule::NotFinite { .. }
            | AlertRule::Above { .. }
            | AlertRule::Below { .. }
            | AlertRule::Spike { .. }
            | AlertRule::NoImprovement { .. } => RuleKind::Metric,
            AlertRule::RunEnded { .. } => RuleKind::RunEnd,
            AlertRule::Stalled { .. } | AlertRule::Idle { .. } => RuleKind::Activity,
            AlertRule::Budget { .. }
            | AlertRule::Utilization { .. }
            | AlertRule::QueueWait { .. }
            | AlertRule::FailureRate { .. }
            | AlertRule::CostSpike { .. } => RuleKind::Project,
            AlertRule::VersionCreated | AlertRule::AliasMoved => RuleKind::Registry,
        }
    }

    fn can_stop(&self) -> bool {
        matches!(self.kind(), RuleKind::Metric | RuleKind::Activity) || matches!(self, AlertRule::Budget { .. })
    }

    /// Whether it stops what it fires on (`then stop`).
    pub fn stops(&self) -> bool {
        match self {
            AlertRule::NotFinite { stop, .. }
            | AlertRule::Above { stop, .. }
            | AlertRule::Below { stop, .. }
            | AlertRule::Spike { stop, .. }
            | AlertRule::NoImprovement { stop, .. }
            | AlertRule::Stalled { stop, .. }
            | AlertRule::Idle { stop, .. }
            | AlertRule::Budget { stop, .. } => *stop,
            _ => false,
        }
    }

    /// The metric the rule watches, if it watches one.
    pub fn key(&self) -> Option<&MetricKey> {
        match self {
            AlertRule::NotFinite { key, .. }
            | AlertRule::Above { key, .. }
            | AlertRule::Below { key, .. }
            | AlertRule::Spike { key, .. }
            | AlertRule::NoImprovement { key, .. } => Some(key),
            _ => None,
        }
    }

    /// Whether a point of the rule's metric with this value fires it, for the rules that need
    /// no history (None for the others).
    pub fn fires_on(&self, value: f64) -> Option<bool> {
        match self {
            AlertRule::NotFinite { .. } => Some(!value.is_finite()),
            AlertRule::Above { threshold, .. } => Some(value > *threshold),
            AlertRule::Below { threshold, .. } => Some(value < *threshold),
            _ => None,
        }
    }

    /// The alert's title when a rule on a metric's value fires on `value`, or a run's end.
    pub fn title(&self, value: f64) -> String {
        match self {
            AlertRule::NotFinite { key, .. } => format!("{key} is {value}"),
            AlertRule::Above { key, threshold, .. } => format!("{key} above {threshold}"),
            AlertRule::Below { key, threshold, .. } => format!("{key} below {threshold}"),
            AlertRule::Spike { key, .. } => format!("{key} spiked"),
            AlertRule::NoImprovement { key, steps, .. } => format!("{key} no better for {steps} steps"),
            AlertRule::RunEnded { status } => format!("run {status}"),
            AlertRule::Stalled { after_ms, .. } => format!("stalled: no new step for {}", duration_words(*after_ms)),
            AlertRule::Idle { below_pct, for_ms, .. } => {
                format!("GPUs idle below {below_pct}% for {}", duration_words(*for_ms))
            }
            AlertRule::Budget { pct, .. } => format!("budget {pct}% spent"),
            AlertRule::Utilization { below_pct, .. } => format!("GPU utilization below {below_pct}%"),
            AlertRule::QueueWait { above_ms, .. } => format!("queue wait above {}", duration_words(*above_ms)),
            AlertRule::FailureRate { above_pct, .. } => format!("failure rate above {above_pct}%"),
            AlertRule::CostSpike { .. } => "cost spike".to_owned(),
            AlertRule::VersionCreated => "model version created".to_owned(),
            AlertRule::AliasMoved => "model alias moved".to_owned(),
        }
    }

    /// How bad it is when it fires.
    pub fn level(&self) -> &'static str {
        match self {
            AlertRule::NotFinite { .. } => "error",
            AlertRule::RunEnded { status } if status == "finished" => "info",
            AlertRule::RunEnded { status } if status == "killed" => "warn",
            AlertRule::RunEnded { .. } => "error",
            AlertRule::Budget { pct, .. } if *pct >= 100.0 => "error",
            AlertRule::Stalled { .. } | AlertRule::CostSpike { .. } => "error",
            AlertRule::VersionCreated | AlertRule::AliasMoved => "info",
            _ if self.stops() => "error",
            _ => "warn",
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
        assert_eq!(nan.fires_on(f64::NAN), Some(true));
        assert_eq!(nan.fires_on(f64::INFINITY), Some(true));
        assert_eq!(nan.fires_on(1.0), Some(false));
        let low = AlertRule::parse(" eval/acc < 0.5 ").expect("below");
        assert_eq!((low.fires_on(0.4), low.fires_on(0.5)), (Some(true), Some(false)));
        assert_eq!(low.title(0.4), "eval/acc below 0.5");
        let high = AlertRule::parse("grad_norm > 1e3").expect("above");
        assert_eq!((high.fires_on(1001.0), high.fires_on(1000.0)), (Some(true), Some(false)));
        assert_eq!(AlertRule::parse("lost").expect("end"), AlertRule::RunEnded { status: "lost".into() });
        assert_eq!(
            AlertRule::parse("stalled 10m").expect("stalled"),
            AlertRule::Stalled { after_ms: 600_000, stop: false }
        );
        assert_eq!(
            AlertRule::parse("idle < 10% for 20m").expect("idle"),
            AlertRule::Idle { below_pct: 10.0, for_ms: 1_200_000, stop: false }
        );
        assert_eq!(
            AlertRule::parse("idle < 5% for 45 min then stop").expect("idle shutdown"),
            AlertRule::Idle { below_pct: 5.0, for_ms: 2_700_000, stop: true }
        );
        assert_eq!(AlertRule::parse("budget 80%").expect("budget"), AlertRule::Budget { pct: 80.0, stop: false });
        assert_eq!(
            AlertRule::parse("utilization < 50% for 6h").expect("util"),
            AlertRule::Utilization { below_pct: 50.0, window_ms: 6 * 3_600_000 }
        );
        assert_eq!(
            AlertRule::parse("queue wait > 2h").expect("queue"),
            AlertRule::QueueWait { above_ms: 7_200_000, window_ms: 86_400_000 }
        );
        assert_eq!(
            AlertRule::parse("failure rate > 5% over 7d").expect("failures"),
            AlertRule::FailureRate { above_pct: 5.0, window_ms: 7 * 86_400_000 }
        );
        assert_eq!(AlertRule::parse("cost spike").expect("spike"), AlertRule::CostSpike { factor: 5.0 });
        assert_eq!(AlertRule::parse("cost spike > 3x").expect("spike"), AlertRule::CostSpike { factor: 3.0 });
        assert_eq!(AlertRule::parse("version created").expect("registry").kind(), RuleKind::Registry);
        assert_eq!(AlertRule::parse("alias moved").expect("registry"), AlertRule::AliasMoved);
        let spike = AlertRule::parse("train/loss spike > 3 over 50").expect("z");
        assert_eq!(
            spike,
            AlertRule::Spike {
                key: MetricKey::parse("k", "train/loss").expect("key"),
                z: 3.0,
                window: 50,
                stop: false
            }
        );
        assert!(matches!(
            AlertRule::parse("eval/acc no improvement for 500 steps").expect("plateau"),
            AlertRule::NoImprovement { higher_is_better: true, steps: 500, .. }
        ));
        assert!(matches!(
            AlertRule::parse("eval/loss no improvement for 500 steps then stop").expect("plateau"),
            AlertRule::NoImprovement { higher_is_better: false, stop: true, .. }
        ));
        assert_eq!(AlertRule::parse("stalled 10m then stop").expect("stop").level(), "error");
        for bad in [
            "",
            "loss >",
            "loss > nan",
            "loss >= 1",
            "stalled",
            "stalled 3",
            "stalled 10parsecs",
            "> 3",
            "idle < 10 for 20m",
            "budget eighty",
            "failed then stop",
            "cost spike > 0.5x",
            "utilization < 50% for 6h then stop",
            "loss spike > 3 over 5",
            "loss no improvement for many steps",
            "alias moved then stop",
        ] {
            let e = AlertRule::parse(bad).expect_err(bad);
            assert_eq!(e.field, "rule", "{bad}");
        }
    }

    #[test]
    fn spans_read_and_say_themselves() {
        assert_eq!(parse_duration_ms("90s").expect("s"), 90_000);
        assert_eq!(parse_duration_ms("1.5h").expect("h"), 5_400_000);
        assert_eq!(parse_duration_ms("2 weeks").expect("w"), 14 * 86_400_000);
        assert!(parse_duration_ms("0s").is_err() && parse_duration_ms("2y").is_err());
        assert_eq!(duration_words(45_000), "45 s");
        assert_eq!(duration_words(1_200_000), "20 min");
        assert_eq!(duration_words(6 * 3_600_000), "6 h");
        assert_eq!(duration_words(3 * 86_400_000), "3 d");
    }
}
