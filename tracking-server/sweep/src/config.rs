//! The sweep file (YAML): parsed into a `SweepConfig`, with every refusal naming the line and
//! the field, e.g. `line 5: parameters.lr.min: a log distribution needs min > 0, got 0`.

use crate::early::Rule;
use crate::space::{Distribution, Goal, Space};
use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
use serde_json::Value;
use std::collections::BTreeMap;

/// How the next trial's parameters are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Grid,
    Random,
    Tpe,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Grid => "grid",
            Method::Random => "random",
            Method::Tpe => "tpe",
        }
    }
}

/// The metric a sweep optimizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: String,
    pub goal: Goal,
}

/// Spending limits: the sweep starts no trial once one is reached.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Budget {
    pub usd: Option<f64>,
    pub gpu_hours: Option<f64>,
}

/// A validated sweep file.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepConfig {
    pub name: Option<String>,
    pub project: Option<String>,
    /// The trial's program and its arguments; the trial's params are appended as `--key=value`.
    pub command: Vec<String>,
    pub method: Method,
    pub metric: Metric,
    pub space: Space,
    pub early_terminate: Rule,
    pub run_cap: Option<u64>,
    pub budget: Budget,
    pub seed: u64,
    /// How many times a preempted trial is started again.
    pub max_retries: u32,
}

/// Why a sweep file was refused: where, which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {field}: {reason}")]
pub struct ConfigError {
    pub line: usize,
    pub field: String,
    pub reason: String,
}

/// A YAML node reduced to what a sweep file uses, with the line it starts on.
#[derive(Debug, Clone)]
struct Node {
    line: usize,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    fn describe(&self) -> &'static str {
        match self.kind {
            Kind::Null => "null",
            Kind::Bool(_) => "a boolean",
            Kind::Int(_) => "an integer",
            Kind::Float(_) => "a number",
            Kind::Str(_) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }

    fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            Kind::Int(i) => Value::from(*i),
            Kind::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Kind::Str(s) => Value::String(s.clone()),
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => Value::Object(entries.iter().map(|(k, v)| (k.clone(), v.to_json())).collect()),
        }
    }
}

fn convert(y: &MarkedYaml, field: &str) -> Result<Node, ConfigError> {
    let line = y.span.start.line();
    let kind = match &y.data {
        YamlData::Value(Scalar::Null) => Kind::Null,
        YamlData::Value(Scalar::Boolean(b)) => Kind::Bool(*b),
        YamlData::Value(Scalar::Integer(i)) => Kind::Int(*i),
        YamlData::Value(Scalar::FloatingPoint(f)) => Kind::Float(f.into_inner()),
        YamlData::Value(Scalar::String(s)) => Kind::Str(s.to_string()),
        YamlData::Sequence(items) => Kind::Seq(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| convert(item, &format!("{field}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        YamlData::Mapping(map) => {
            let mut entries: Vec<(String, Node)> = Vec::with_capacity(map.len());
            for (k, v) in map.iter() {
                let key = match &k.data {
                    YamlData::Value(Scalar::String(s)) => s.to_string(),
                    YamlData::Value(Scalar::Integer(i)) => i.to_string(),
                    YamlData::Value(Scalar::Boolean(b)) => b.to_string(),
                    _ => return Err(err(k.span.start.line(), field, "keys must be plain names")),
                };
                let path = join(field, &key);
                if entries.iter().any(|(existing, _)| existing == &key) {
                    return Err(err(k.span.start.line(), &path, "appears twice"));
                }
                let value = convert(v, &path)?;
                entries.push((key, value));
            }
            Kind::Map(entries)
        }
        YamlData::Tagged(_, inner) => return convert(inner, field),
        YamlData::Alias(_) => return Err(err(line, field, "aliases are not supported")),
        _ => return Err(err(line, field, "a value that is not valid YAML here")),
    };
    Ok(Node { line, kind })
}

fn err(line: usize, field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        line,
        field: if field.is_empty() { "(document)".into() } else { field.to_owned() },
        reason: reason.into(),
    }
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

/// A mapping whose keys are checked against what is known, so a typo is refused, not ignored.
struct Fields<'a> {
    path: String,
    line: usize,
    entries: &'a [(String, Node)],
}

impl<'a> Fields<'a> {
    fn of(node: &'a Node, path: &str) -> Result<Self, ConfigError> {
        match &node.kind {
            Kind::Map(entries) => Ok(Self { path: path.to_owned(), line: node.line, entries }),
            _ => Err(err(node.line, path, format!("expected a mapping, got {}", node.describe()))),
        }
    }

    fn allow_only(&self, known: &[&str]) -> Result<(), ConfigError> {
        for (k, v) in self.entries {
            if !known.contains(&k.as_str()) {
                return Err(err(
                    v.line,
                    &join(&self.path, k),
                    format!("unknown field; expected one of: {}", known.join(", ")),
                ));
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&'a Node> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v).filter(|v| !matches!(v.kind, Kind::Null))
    }

    fn path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    fn required(&self, key: &str) -> Result<&'a Node, ConfigError> {
        self.get(key).ok_or_else(|| err(self.line, &self.path(key), "is required"))
    }

    fn string(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Node { kind: Kind::Str(s), line }) if s.trim().is_empty() => {
                Err(err(*line, &self.path(key), "is empty"))
            }
            Some(Node { kind: Kind::Str(s), .. }) => Ok(Some(s.clone())),
            Some(n) => Err(err(n.line, &self.path(key), format!("expected a string, got {}", n.describe()))),
        }
    }

    fn number(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Node { kind: Kind::Int(i), .. }) => Ok(Some(*i as f64)),
            Some(Node { kind: Kind::Float(f), .. }) => Ok(Some(*f)),
            Some(n) => Err(err(n.line, &self.path(key), format!("expected a number, got {}", n.describe()))),
        }
    }

    fn integer(&self, key: &str) -> Result<Option<i64>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Node { kind: Kind::Int(i), .. }) => Ok(Some(*i)),
            Some(Node { kind: Kind::Float(f), .. }) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(*f as i64)),
            Some(n) => Err(err(n.line, &self.path(key), format!("expected an integer, got {}", n.describe()))),
        }
    }

    fn positive_integer(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.integer(key)? {
            None => Ok(None),
            Some(i) if i > 0 => Ok(Some(i as u64)),
            Some(i) => Err(err(self.line_of(key), &self.path(key), format!("must be at least 1, got {i}"))),
        }
    }

    fn line_of(&self, key: &str) -> usize {
        self.get(key).map_or(self.line, |n| n.line)
    }
}

/// Parses and validates a sweep file.
pub fn parse(text: &str) -> Result<SweepConfig, ConfigError> {
    let docs = MarkedYaml::load_from_str(text)
        .map_err(|e| err(e.marker().line(), "", format!("not valid YAML: {}", e.info())))?;
    let root = match docs.as_slice() {
        [] => return Err(err(1, "", "the file is empty")),
        [one] => convert(one, "")?,
        [_, second, ..] => return Err(err(second.span.start.line(), "", "expected one YAML document")),
    };
    let top = Fields::of(&root, "")?;
    top.allow_only(&[
        "name",
        "description",
        "project",
        "program",
        "command",
        "method",
        "metric",
        "parameters",
        "early_terminate",
        "run_cap",
        "budget",
        "seed",
        "max_retries",
    ])?;

    let command = parse_command(&top)?;
    let method_node = top.required("method")?;
    let method = match &method_node.kind {
        Kind::Str(s) => match s.as_str() {
            "grid" => Method::Grid,
            "random" => Method::Random,
            "tpe" | "bayes" => Method::Tpe,
            other => {
                return Err(err(
                    method_node.line,
                    "method",
                    format!("unknown method {other:?}; expected grid, random or tpe"),
                ))
            }
        },
        _ => {
            return Err(err(
                method_node.line,
                "method",
                format!("expected grid, random or tpe, got {}", method_node.describe()),
            ))
        }
    };

    let metric_node = top.required("metric")?;
    let metric = parse_metric(metric_node)?;
    let parameters = top.required("parameters")?;
    let (space, lines) = parse_parameters(parameters)?;
    if method == Method::Grid {
        crate::grid::size(&space).map_err(|e| relocate(e, &lines, parameters.line))?;
    }
    let early_terminate = match top.get("early_terminate") {
        None => Rule::None,
        Some(node) => parse_early(node)?,
    };
    let budget = match top.get("budget") {
        None => Budget::default(),
        Some(node) => {
            let b = Fields::of(node, "budget")?;
            b.allow_only(&["usd", "gpu_hours"])?;
            let positive = |key: &str| -> Result<Option<f64>, ConfigError> {
                match b.number(key)? {
                    Some(v) if !(v > 0.0 && v.is_finite()) => {
                        Err(err(b.line_of(key), &b.path(key), format!("must be a positive number, got {v}")))
                    }
                    other => Ok(other),
                }
            };
            let budget = Budget { usd: positive("usd")?, gpu_hours: positive("gpu_hours")? };
            if budget.usd.is_none() && budget.gpu_hours.is_none() {
                return Err(err(node.line, "budget", "give usd, gpu_hours or both"));
            }
            budget
        }
    };
    let seed = match top.integer("seed")? {
        Some(s) if s < 0 => return Err(err(top.line_of("seed"), "seed", "must not be negative")),
        Some(s) => s as u64,
        None => default_seed(text),
    };
    let max_retries = match top.integer("max_retries")? {
        Some(n) if !(0..=100).contains(&n) => {
            return Err(err(top.line_of("max_retries"), "max_retries", format!("expected 0 to 100, got {n}")))
        }
        Some(n) => n as u32,
        None => 2,
    };
    Ok(SweepConfig {
        name: top.string("name")?,
        project: top.string("project")?,
        command,
        method,
        metric,
        space,
        early_terminate,
        run_cap: top.positive_integer("run_cap")?,
        budget,
        seed,
        max_retries,
    })
}

/// A seed derived from the file's text, so a sweep without `seed:` is still reproducible.
fn default_seed(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h >> 1
}

/// Points a strategy's error about `parameters.NAME` at that parameter's line.
fn relocate(e: crate::Error, lines: &BTreeMap<String, usize>, fallback: usize) -> ConfigError {
    match e {
        crate::Error::Invalid { field, reason } => {
            let line = lines
                .iter()
                .filter(|(path, _)| field == **path || field.starts_with(&format!("{path}.")))
                .map(|(_, l)| *l)
                .next_back()
                .unwrap_or(fallback);
            ConfigError { line, field, reason }
        }
    }
}

fn parse_command(top: &Fields) -> Result<Vec<String>, ConfigError> {
    let (key, node) = match (top.get("command"), top.get("program")) {
        (Some(n), _) => ("command", n),
        (None, Some(n)) => ("program", n),
        (None, None) => return Err(err(top.line, "command", "is required (the trial's program and its arguments)")),
    };
    let parts: Vec<String> = match &node.kind {
        Kind::Str(s) => s.split_whitespace().map(str::to_owned).collect(),
        Kind::Seq(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match &item.kind {
                Kind::Str(s) => Ok(s.clone()),
                Kind::Int(n) => Ok(n.to_string()),
                Kind::Float(f) => Ok(f.to_string()),
                _ => Err(err(item.line, &format!("{key}[{i}]"), format!("expected a string, got {}", item.describe()))),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(err(node.line, key, format!("expected a list of strings, got {}", node.describe()))),
    };
    if parts.first().is_none_or(|p| p.is_empty()) {
        return Err(err(node.line, key, "is empty"));
    }
    Ok(parts)
}

fn parse_metric(node: &Node) -> Result<Metric, ConfigError> {
    let m = Fields::of(node, "metric")?;
    m.allow_only(&["name", "goal"])?;
    let name = m.string("name")?.ok_or_else(|| err(node.line, "metric.name", "is required"))?;
    if let Err(e) = trainlog_schema::MetricKey::parse("metric.name", &name) {
        return Err(err(m.line_of("name"), "metric.name", e.reason));
    }
    let goal = match m.get("goal") {
        None => Goal::Minimize,
        Some(Node { kind: Kind::Str(g), line }) => match g.as_str() {
            "minimize" | "min" => Goal::Minimize,
            "maximize" | "max" => Goal::Maximize,
            other => {
                return Err(err(*line, "metric.goal", format!("unknown goal {other:?}; expected minimize or maximize")))
            }
        },
        Some(n) => {
            return Err(err(n.line, "metric.goal", format!("expected minimize or maximize, got {}", n.describe())))
        }
    };
    Ok(Metric { name, goal })
}

const DISTRIBUTIONS: &str = "constant, categorical, uniform, log_uniform, q_uniform, q_log_uniform, int_uniform";

fn parse_parameters(node: &Node) -> Result<(Space, BTreeMap<String, usize>), ConfigError> {
    let Kind::Map(entries) = &node.kind else {
        return Err(err(node.line, "parameters", format!("expected a mapping of names, got {}", node.describe())));
    };
    if entries.is_empty() {
        return Err(err(node.line, "parameters", "no parameters to search"));
    }
    let mut params = Vec::with_capacity(entries.len());
    let mut lines = BTreeMap::new();
    for (name, spec) in entries {
        let path = format!("parameters.{name}");
        lines.insert(path.clone(), spec.line);
        if let Err(e) = trainlog_schema::ParamKey::parse(&path, name) {
            return Err(err(spec.line, &path, format!("not a valid parameter name: {}", e.reason)));
        }
        // Trials get `--name=value`: a name must read as one flag.
        if name.starts_with('-') || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-./".contains(&b)) {
            return Err(err(
                spec.line,
                &path,
                "a parameter name may hold letters, digits, '_', '-', '.' and '/', not first '-'",
            ));
        }
        let distribution = parse_distribution(spec, &path)?;
        distribution.validate(&path).map_err(|e| {
            let crate::Error::Invalid { reason, .. } = e;
            // Point at the bound the reason is about.
            let key = if reason.starts_with("q ") {
                "q"
            } else if reason.starts_with("values") {
                "values"
            } else if reason.contains("min") {
                "min"
            } else {
                ""
            };
            let bound = Fields::of(spec, &path).ok().and_then(|f| f.get(key).map(|n| n.line));
            match bound {
                Some(line) => ConfigError { line, field: format!("{path}.{key}"), reason },
                None => ConfigError { line: spec.line, field: path.clone(), reason },
            }
        })?;
        params.push((name.clone(), distribution));
    }
    let space = Space::new(params).map_err(|e| relocate(e, &lines, node.line))?;
    Ok((space, lines))
}

fn parse_distribution(spec: &Node, path: &str) -> Result<Distribution, ConfigError> {
    let f = Fields::of(spec, path)?;
    f.allow_only(&["distribution", "min", "max", "q", "values", "value"])?;
    let named = f.string("distribution")?;
    let values = match f.get("values") {
        None => None,
        Some(Node { kind: Kind::Seq(items), line }) => {
            if items.is_empty() {
                return Err(err(*line, &f.path("values"), "is empty: give at least one value"));
            }
            for (i, item) in items.iter().enumerate() {
                plain_value(item, &format!("{}[{i}]", f.path("values")))?;
            }
            Some(items.iter().map(Node::to_json).collect::<Vec<_>>())
        }
        Some(n) => return Err(err(n.line, &f.path("values"), format!("expected a list, got {}", n.describe()))),
    };
    let bound = |key: &str| -> Result<f64, ConfigError> {
        match f.number(key)? {
            Some(v) if v.is_finite() => Ok(v),
            Some(v) => Err(err(f.line_of(key), &f.path(key), format!("{v} is not a finite number"))),
            None => Err(err(spec.line, &f.path(key), "is required for this distribution")),
        }
    };
    let kind = match named.as_deref() {
        Some(d) => d.to_owned(),
        None if values.is_some() => "categorical".into(),
        None if f.get("value").is_some() => "constant".into(),
        None if f.get("min").is_some() || f.get("max").is_some() => {
            let ints = matches!(f.get("min").map(|n| &n.kind), Some(Kind::Int(_)))
                && matches!(f.get("max").map(|n| &n.kind), Some(Kind::Int(_)));
            if ints { "int_uniform" } else { "uniform" }.into()
        }
        None => return Err(err(spec.line, path, "give a distribution, values or value")),
    };
    let dist_line = f.line_of("distribution");
    let d = match kind.as_str() {
        "constant" => {
            let value = f.required("value")?;
            plain_value(value, &f.path("value"))?;
            Distribution::Constant(value.to_json())
        }
        "categorical" => Distribution::Categorical(
            values.ok_or_else(|| err(spec.line, &f.path("values"), "is required for categorical"))?,
        ),
        "uniform" => Distribution::Uniform { min: bound("min")?, max: bound("max")? },
        "log_uniform" | "log_uniform_values" => Distribution::LogUniform { min: bound("min")?, max: bound("max")? },
        "q_uniform" => {
            Distribution::QUniform { min: bound("min")?, max: bound("max")?, q: f.number("q")?.unwrap_or(1.0) }
        }
        "q_log_uniform" | "q_log_uniform_values" => {
            Distribution::QLogUniform { min: bound("min")?, max: bound("max")?, q: f.number("q")?.unwrap_or(1.0) }
        }
        "int_uniform" => {
            let int = |key: &str| -> Result<i64, ConfigError> {
                f.integer(key)?.ok_or_else(|| err(spec.line, &f.path(key), "is required for int_uniform"))
            };
            Distribution::IntUniform { min: int("min")?, max: int("max")? }
        }
        other => {
            return Err(err(
                dist_line,
                &f.path("distribution"),
                format!("unknown distribution {other:?}; expected one of: {DISTRIBUTIONS}"),
            ))
        }
    };
    Ok(d)
}

/// A parameter value a run can record: a string, a boolean or a finite number (not null, not a
/// list or mapping).
fn plain_value(node: &Node, field: &str) -> Result<(), ConfigError> {
    match node.kind {
        Kind::Bool(_) | Kind::Int(_) | Kind::Str(_) => Ok(()),
        Kind::Float(f) if f.is_finite() => Ok(()),
        Kind::Float(f) => Err(err(node.line, field, format!("{f} is not a finite number"))),
        _ => Err(err(node.line, field, format!("expected a string, a boolean or a number, got {}", node.describe()))),
    }
}

fn parse_early(node: &Node) -> Result<Rule, ConfigError> {
    let f = Fields::of(node, "early_terminate")?;
    f.allow_only(&["type", "min_steps", "max_steps", "eta", "min_iter", "max_iter"])?;
    let kind = f.string("type")?.ok_or_else(|| err(node.line, "early_terminate.type", "is required"))?;
    let steps = |key: &str, alias: &str| -> Result<Option<i64>, ConfigError> {
        let v = match f.integer(key)? {
            Some(v) => Some((key, v)),
            None => f.integer(alias)?.map(|v| (alias, v)),
        };
        match v {
            Some((k, v)) if v < 1 => Err(err(f.line_of(k), &f.path(k), format!("must be at least 1, got {v}"))),
            Some((_, v)) => Ok(Some(v)),
            None => Ok(None),
        }
    };
    let min_steps = steps("min_steps", "min_iter")?;
    let max_steps = steps("max_steps", "max_iter")?;
    let eta = match f.integer("eta")? {
        None => 3,
        Some(e) if (2..=100).contains(&e) => e as u32,
        Some(e) => return Err(err(f.line_of("eta"), "early_terminate.eta", format!("expected 2 to 100, got {e}"))),
    };
    let need_max =
        || max_steps.ok_or_else(|| err(node.line, "early_terminate.max_steps", format!("is required for {kind}")));
    let rule = match kind.as_str() {
        "none" => Rule::None,
        "asha" => Rule::Asha { min_steps: min_steps.unwrap_or(1), max_steps: need_max()?, eta },
        "hyperband" => Rule::Hyperband { min_steps: min_steps.unwrap_or(1), max_steps: need_max()?, eta },
        "median" => Rule::Median { min_steps: min_steps.unwrap_or(1) },
        other => {
            return Err(err(
                f.line_of("type"),
                "early_terminate.type",
                format!("unknown type {other:?}; expected asha, hyperband, median or none"),
            ))
        }
    };
    if let (Some(lo), Some(hi)) = (min_steps, max_steps) {
        if lo >= hi {
            return Err(err(
                f.line_of("min_steps").max(f.line_of("min_iter")),
                "early_terminate.min_steps",
                format!("min_steps ({lo}) must be below max_steps ({hi})"),
            ));
        }
    }
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"# sweep.yaml
command: ["python", "train.py"]
method: tpe
metric: {name: val/loss, goal: minimize}
parameters:
  lr:        {distribution: log_uniform, min: 1.0e-5, max: 1.0e-1}
  dropout:   {distribution: uniform, min: 0.0, max: 0.5}
  batch:     {distribution: q_uniform, min: 16, max: 256, q: 16}
  layers:    {distribution: int_uniform, min: 2, max: 8}
  optimizer: {values: [adam, sgd]}
  epochs:    {value: 81}
early_terminate: {type: asha, min_steps: 1, max_steps: 81, eta: 3}
run_cap: 50
budget: {usd: 40}
"#;

    #[test]
    fn the_documented_example_parses() {
        let c = parse(EXAMPLE).unwrap();
        assert_eq!(c.command, ["python", "train.py"]);
        assert_eq!(c.method, Method::Tpe);
        assert_eq!(c.metric, Metric { name: "val/loss".into(), goal: Goal::Minimize });
        assert_eq!(c.early_terminate, Rule::Asha { min_steps: 1, max_steps: 81, eta: 3 });
        assert_eq!((c.run_cap, c.budget.usd, c.budget.gpu_hours), (Some(50), Some(40.0), None));
        let names: Vec<&str> = c.space.params.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["batch", "dropout", "epochs", "layers", "lr", "optimizer"]);
        let get = |n: &str| c.space.params.iter().find(|(k, _)| k == n).map(|(_, d)| d.clone()).unwrap();
        assert_eq!(get("lr"), Distribution::LogUniform { min: 1e-5, max: 0.1 });
        assert_eq!(get("batch"), Distribution::QUniform { min: 16.0, max: 256.0, q: 16.0 });
        assert_eq!(get("layers"), Distribution::IntUniform { min: 2, max: 8 });
        assert_eq!(get("optimizer"), Distribution::Categorical(vec!["adam".into(), "sgd".into()]));
        assert_eq!(get("epochs"), Distribution::Constant(81.into()));
        assert_eq!(c.seed, parse(EXAMPLE).unwrap().seed, "the default seed is stable");
    }

    fn refusal(text: &str) -> ConfigError {
        parse(text).expect_err("refused")
    }

    fn with_param(spec: &str) -> String {
        format!("command: [python, t.py]\nmethod: random\nmetric: {{name: loss}}\nparameters:\n  lr: {spec}\n")
    }

    #[test]
    fn bad_input_names_the_line_and_field() {
        let e = refusal(&with_param("{distribution: gaussian, min: 0, max: 1}"));
        assert_eq!((e.line, e.field.as_str()), (5, "parameters.lr.distribution"));
        assert!(e.reason.contains("unknown distribution \"gaussian\""), "{e}");

        let e = refusal(&with_param("{distribution: uniform, min: 1, max: 1}"));
        assert_eq!((e.line, e.field.as_str()), (5, "parameters.lr.min"));
        assert!(e.reason.contains("must be below max"), "{e}");

        let e = refusal(&with_param("\n    distribution: log_uniform\n    min: 0\n    max: 1"));
        assert_eq!((e.line, e.field.as_str()), (7, "parameters.lr.min"), "{e}");
        assert!(e.reason.contains("min > 0"), "{e}");

        let e = refusal(&with_param("{values: []}"));
        assert_eq!((e.line, e.field.as_str()), (5, "parameters.lr.values"));

        let e = refusal(
            "command: [python]\nmethod: grid\nmetric: {name: loss, goal: lowest}\nparameters: {a: {values: [1]}}\n",
        );
        assert_eq!((e.line, e.field.as_str()), (3, "metric.goal"));

        let e = refusal("command: [python]\nmethod: annealing\nmetric: {name: loss}\nparameters: {a: {values: [1]}}\n");
        assert_eq!((e.line, e.field.as_str()), (2, "method"));

        let e = refusal("command: [python]\nmethod: grid\nmetric: {name: loss}\nparamters: {a: {values: [1]}}\n");
        assert_eq!((e.line, e.field.as_str()), (4, "paramters"));
        assert!(e.reason.contains("unknown field"), "{e}");

        let e = refusal("method: grid\nmetric: {name: loss}\nparameters: {a: {values: [1]}}\n");
        assert_eq!(e.field, "command");

        let e = refusal(&with_param("{values: [0.1, null]}"));
        assert_eq!((e.line, e.field.as_str()), (5, "parameters.lr.values[1]"), "{e}");
        let e = refusal(&with_param("{distribution: q_uniform, min: 0, max: .inf, q: 1}"));
        assert_eq!(e.field, "parameters.lr.max", "{e}");
        let e = refusal("command: [python]\nmethod: grid\nmetric: {name: loss}\nparameters: {'a b': {values: [1]}}\n");
        assert_eq!(e.field, "parameters.a b", "{e}");
        let e = refusal("command: [python]\nmethod: grid\nmetric: {name: ''}\nparameters: {a: {values: [1]}}\n");
        assert_eq!(e.field, "metric.name", "{e}");

        let e = refusal("command: [python\nmethod: grid\n");
        assert!(e.reason.contains("not valid YAML"), "{e}");
        assert_eq!(e.to_string().split(':').next(), Some(&*format!("line {}", e.line)));
    }

    #[test]
    fn a_grid_needs_enumerable_parameters() {
        let text = "command: [python]\nmethod: grid\nmetric: {name: loss}\nparameters:\n  a: {values: [1, 2]}\n  lr: {distribution: uniform, min: 0, max: 1}\n";
        let e = refusal(text);
        assert_eq!((e.line, e.field.as_str()), (6, "parameters.lr"), "{e}");
    }

    #[test]
    fn early_termination_rules_and_budget_are_checked() {
        let base = "command: [python]\nmethod: random\nmetric: {name: loss}\nparameters: {a: {values: [1]}}\n";
        let e = refusal(&format!("{base}early_terminate: {{type: asha, min_steps: 9, max_steps: 3}}\n"));
        assert_eq!((e.line, e.field.as_str()), (5, "early_terminate.min_steps"));
        let e = refusal(&format!("{base}early_terminate: {{type: sometimes}}\n"));
        assert_eq!(e.field, "early_terminate.type");
        let c = parse(&format!("{base}early_terminate: {{type: hyperband, min_iter: 1, max_iter: 81}}\n")).unwrap();
        assert_eq!(c.early_terminate, Rule::Hyperband { min_steps: 1, max_steps: 81, eta: 3 });
        let e = refusal(&format!("{base}budget: {{usd: -1}}\n"));
        assert_eq!((e.line, e.field.as_str()), (5, "budget.usd"));
        let c = parse(&format!("{base}budget: {{gpu_hours: 2.5}}\nseed: 7\n")).unwrap();
        assert_eq!((c.budget.gpu_hours, c.seed), (Some(2.5), 7));
    }
}
