//! The alert rules of a project kept as YAML beside the code, which `trainlog alerts apply`
//! makes the project's rules:
//!
//! ```yaml
//! project: llm
//! rules:
//!   - train/loss not finite
//!   - stalled 10m
//!   - idle < 5% for 45m then stop
//! ```
//!
//! Each rule is checked here as the server would, so a mistake names the file's line.

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
use trainlog_schema::alert_rule::AlertRule;

/// A parsed alerts file.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertsFile {
    pub project: String,
    /// The rules as written, trimmed, in the file's order.
    pub rules: Vec<String>,
}

fn text(node: &MarkedYaml) -> Option<String> {
    match &node.data {
        YamlData::Value(Scalar::String(s)) => Some(s.to_string()),
        _ => None,
    }
}

/// Parses an alerts file's text; an error reads `LINE: FIELD: REASON`.
pub fn parse(source: &str) -> Result<AlertsFile, String> {
    let docs = MarkedYaml::load_from_str(source)
        .map_err(|e| format!("{}: not valid YAML: {}", e.marker().line(), e.info()))?;
    let [root] = docs.as_slice() else { return Err("1: expected one YAML document".into()) };
    let YamlData::Mapping(map) = &root.data else {
        return Err(format!("{}: expected `project:` and `rules:`", root.span.start.line()));
    };
    let (mut project, mut rules) = (None, None);
    for (key, value) in map.iter() {
        match text(key).as_deref() {
            Some("project") => {
                project =
                    Some(text(value).ok_or_else(|| format!("{}: project: a project's name", value.span.start.line()))?)
            }
            Some("rules") => {
                let YamlData::Sequence(items) = &value.data else {
                    return Err(format!("{}: rules: a list of rules", value.span.start.line()));
                };
                let mut list = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let line = item.span.start.line();
                    let rule = text(item).ok_or_else(|| format!("{line}: rules[{i}]: a rule, written as text"))?;
                    AlertRule::parse(&rule).map_err(|e| format!("{line}: rules[{i}]: {}", e.reason))?;
                    let rule = rule.trim().to_owned();
                    if list.contains(&rule) {
                        return Err(format!("{line}: rules[{i}]: {rule:?} is listed twice"));
                    }
                    list.push(rule);
                }
                rules = Some(list);
            }
            _ => {
                return Err(format!(
                    "{}: {}: not a field of an alerts file (project, rules)",
                    key.span.start.line(),
                    text(key).unwrap_or_default()
                ))
            }
        }
    }
    Ok(AlertsFile { project: project.ok_or("1: project: missing")?, rules: rules.ok_or("1: rules: missing")? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_lists_a_projects_rules_and_a_mistake_names_its_line() {
        let file = parse("project: llm\nrules:\n  - train/loss not finite\n  - ' stalled 10m '\n").expect("file");
        assert_eq!(
            file,
            AlertsFile { project: "llm".into(), rules: vec!["train/loss not finite".into(), "stalled 10m".into()] }
        );
        let bad = parse("project: llm\nrules:\n  - failed\n  - stalled forever\n").expect_err("bad rule");
        assert!(bad.starts_with("4: rules[1]: "), "{bad}");
        assert!(parse("project: llm\nrules: []\nchannels: []\n").expect_err("field").starts_with("3: channels: "));
        assert!(parse("rules: []\n").expect_err("no project").contains("project: missing"));
        assert!(parse("project: llm\nrules:\n  - lost\n  - lost\n").expect_err("twice").contains("listed twice"));
    }
}
