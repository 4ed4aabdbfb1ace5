//! Typed params and the flattening of nested configs into dotted keys.

use crate::limits::{check_count, check_len, MAX_PARAMS_PER_REQUEST, MAX_PARAM_DEPTH, MAX_PARAM_VALUE_CHARS};
use crate::{Error, ParamKey, Result};
use serde_json::Value;
use std::collections::BTreeMap;

/// A param's value. Arrays are kept as their JSON text.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl ParamValue {
    pub fn type_name(&self) -> &'static str {
        match self {
            ParamValue::Str(_) => "str",
            ParamValue::Int(_) => "int",
            ParamValue::Float(_) => "float",
            ParamValue::Bool(_) => "bool",
        }
    }

    /// The value as text, as MLflow shows params.
    pub fn to_text(&self) -> String {
        match self {
            ParamValue::Str(s) => s.clone(),
            ParamValue::Int(i) => i.to_string(),
            ParamValue::Float(f) => format_float(*f),
            ParamValue::Bool(b) => b.to_string(),
        }
    }

    /// The value as a number, for comparisons in run search.
    pub fn as_number(&self) -> Option<f64> {
        match self {
            ParamValue::Int(i) => Some(*i as f64),
            ParamValue::Float(f) => Some(*f),
            ParamValue::Bool(b) => Some(f64::from(u8::from(*b))),
            ParamValue::Str(_) => None,
        }
    }

    /// The number run search compares: a typed number, or a text that is written as one (JSON's
    /// number syntax, finite, as MLflow clients send every param: `"0.01"`, `"1e-3"`, `"128"`),
    /// so `params.lr > 0.001` finds a run whichever door its params came through. The text and
    /// the type stay as they were sent.
    pub fn search_number(&self) -> Option<f64> {
        match self {
            ParamValue::Str(s) => number_text(s),
            other => other.as_number(),
        }
    }

    /// Rebuilds a value from the (type, text) pair it was stored as.
    pub fn from_stored(type_name: &str, text: &str) -> Option<Self> {
        Some(match type_name {
            "str" => ParamValue::Str(text.to_owned()),
            "int" => ParamValue::Int(text.parse().ok()?),
            "float" => ParamValue::Float(parse_float(text)?),
            "bool" => ParamValue::Bool(text.parse().ok()?),
            _ => return None,
        })
    }

    pub fn to_json(&self) -> Value {
        match self {
            ParamValue::Str(s) => Value::String(s.clone()),
            ParamValue::Int(i) => Value::from(*i),
            ParamValue::Float(f) => crate::json_f64(*f),
            ParamValue::Bool(b) => Value::Bool(*b),
        }
    }
}

fn format_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        let s = format!("{f:?}");
        s
    }
}

fn parse_float(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// The value of a text written as a JSON number, at most 40 characters, below 1e308 in size:
/// the rule migration 0025 applied to the params stored before it.
fn number_text(text: &str) -> Option<f64> {
    let digit_led = text.strip_prefix('-').unwrap_or(text).starts_with(|c: char| c.is_ascii_digit());
    if text.len() > 40 || !digit_led || text.trim() != text {
        return None;
    }
    serde_json::from_str::<f64>(text).ok().filter(|n| n.abs() < 1e308)
}

/// Flattens a JSON object of params, nested objects becoming dotted keys
/// (`{"model": {"depth": 50}}` gives `model.depth = 50`). `field` names the object in errors.
/// Refuses more than `MAX_PARAMS_PER_REQUEST` params, and a value over `MAX_PARAM_VALUE_CHARS`.
pub fn flatten_params(field: &str, value: &Value) -> Result<BTreeMap<ParamKey, ParamValue>> {
    let Value::Object(map) = value else {
        return Err(Error::new(field, "expected an object of params"));
    };
    let mut out = BTreeMap::new();
    flatten_into(field, "", map, 1, &mut out)?;
    check_count(field, "params", out.len(), MAX_PARAMS_PER_REQUEST)?;
    Ok(out)
}

fn flatten_into(
    field: &str,
    prefix: &str,
    map: &serde_json::Map<String, Value>,
    depth: usize,
    out: &mut BTreeMap<ParamKey, ParamValue>,
) -> Result<()> {
    for (k, v) in map {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        let here = format!("{field}.{key}");
        // Each level's key follows the rules of a whole key, so `{"model": {"": 1}}` is refused
        // rather than becoming `model.`.
        ParamKey::parse(&here, k)?;
        let value = match v {
            Value::Object(inner) => {
                if depth == MAX_PARAM_DEPTH {
                    return Err(Error::new(&here, format!("params nest at most {MAX_PARAM_DEPTH} levels of objects")));
                }
                if inner.is_empty() {
                    continue;
                }
                flatten_into(field, &key, inner, depth + 1, out)?;
                continue;
            }
            Value::String(s) => ParamValue::Str(s.clone()),
            Value::Bool(b) => ParamValue::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => ParamValue::Int(i),
                None => ParamValue::Float(n.as_f64().ok_or_else(|| Error::new(&here, "number out of range"))?),
            },
            Value::Array(_) => ParamValue::Str(v.to_string()),
            Value::Null => return Err(Error::new(&here, "null is not a param value; send a string, number or bool")),
        };
        if let ParamValue::Str(text) = &value {
            check_len(&here, "a param value", text, MAX_PARAM_VALUE_CHARS)?;
        }
        let key = ParamKey::parse(&here, &key)?;
        if out.insert(key, value).is_some() {
            return Err(Error::new(&here, "the same key is given twice after flattening"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_configs_flatten_to_dotted_keys() {
        let p = flatten_params(
            "params",
            &json!({"lr": 0.001, "model": {"depth": 50, "act": "relu"}, "amp": true, "sizes": [1, 2]}),
        )
        .unwrap();
        assert_eq!(p[&ParamKey::from_trusted("lr".into())], ParamValue::Float(0.001));
        assert_eq!(p[&ParamKey::from_trusted("model.depth".into())], ParamValue::Int(50));
        assert_eq!(p[&ParamKey::from_trusted("model.act".into())], ParamValue::Str("relu".into()));
        assert_eq!(p[&ParamKey::from_trusted("amp".into())], ParamValue::Bool(true));
        assert_eq!(p[&ParamKey::from_trusted("sizes".into())], ParamValue::Str("[1,2]".into()));
    }

    #[test]
    fn null_and_clashing_keys_are_refused_with_their_field() {
        let err = flatten_params("params", &json!({"a": {"b": null}})).unwrap_err();
        assert_eq!(err.field, "params.a.b");
        let err = flatten_params("params", &json!({"a.b": 1, "a": {"b": 2}})).unwrap_err();
        assert_eq!(err.field, "params.a.b");
    }

    #[test]
    fn values_and_counts_are_limited_naming_the_param() {
        let at_limit = "v".repeat(MAX_PARAM_VALUE_CHARS);
        assert!(flatten_params("params", &json!({"model": {"arch": at_limit}})).is_ok());
        let over = "v".repeat(MAX_PARAM_VALUE_CHARS + 1);
        let err = flatten_params("params", &json!({"lr": 0.1, "model": {"arch": over}})).unwrap_err();
        assert_eq!(err.field, "params.model.arch");
        assert!(err.reason.contains(&format!("at most {MAX_PARAM_VALUE_CHARS} characters")), "{err}");

        // A list counts as its JSON text: each "1," is two characters.
        let list_over = vec![1; MAX_PARAM_VALUE_CHARS / 2 + 1];
        assert_eq!(flatten_params("params", &json!({"sizes": list_over})).unwrap_err().field, "params.sizes");

        // The key is measured after flattening.
        let prefix = "a".repeat(crate::limits::MAX_KEY_CHARS - 2);
        let nested = |inner: &str| Value::Object([(prefix.clone(), json!({ inner: 1 }))].into_iter().collect());
        assert!(flatten_params("params", &nested("b")).is_ok());
        assert_eq!(flatten_params("params", &nested("bc")).unwrap_err().field, format!("params.{prefix}.bc"));

        let many = |n: usize| Value::Object((0..n).map(|i| (format!("p{i}"), json!(i))).collect());
        assert_eq!(flatten_params("params", &many(MAX_PARAMS_PER_REQUEST)).unwrap().len(), MAX_PARAMS_PER_REQUEST);
        let err = flatten_params("params", &many(MAX_PARAMS_PER_REQUEST + 1)).unwrap_err();
        assert_eq!(err.field, "params");
        assert!(err.reason.contains(&format!("at most {MAX_PARAMS_PER_REQUEST} params")), "{err}");
    }

    #[test]
    fn stored_values_round_trip() {
        for v in [
            ParamValue::Float(0.1),
            ParamValue::Float(f64::NAN),
            ParamValue::Int(-3),
            ParamValue::Bool(false),
            ParamValue::Str("x".into()),
        ] {
            let back = ParamValue::from_stored(v.type_name(), &v.to_text()).unwrap();
            assert_eq!(back.to_text(), v.to_text());
        }
    }
}
