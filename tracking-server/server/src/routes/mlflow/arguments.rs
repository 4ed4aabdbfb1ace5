//! A door request's arguments: the query of a GET, or the JSON object of a body read within its
//! route's size cap and parsed with its values counted as they parse (the lists a route limits
//! counted item by item, past their limit without being kept), large bodies off the workers.

use super::Result;
use crate::error::ApiError;
use actix_web::{web, HttpRequest};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::fmt;

/// The longest text a door request carries is a run's note or a description, at most
/// `MAX_TEXT_CHARS` (1,048,576) characters. MLflow's Python client writes JSON with every
/// character past ASCII as a `\uXXXX` escape, 6 bytes a character: 6 MiB, and 2 MiB for the rest.
pub(super) const MAX_DOOR_BODY_BYTES: usize = 8 << 20;

/// JSON values (objects, lists, strings, numbers…) one door body may hold. The largest of
/// MLflow's requests, a log-batch of 1,000 entities or a log-inputs of 1,000 datasets, hold some
/// tens of thousands; each value kept costs some tens of bytes, whatever the bytes it came from.
pub(super) const MAX_DOOR_BODY_VALUES: usize = 200_000;

/// Bodies up to this size are parsed on the worker that read them; larger ones on the blocking pool.
const PARSED_IN_PLACE_BYTES: usize = 64 << 10;

/// What a route's body may hold: its size, and the top-level lists counted as they parse, each
/// keeping at most its `max` items (the count goes on past it), then `check`ed, before the
/// handler sees any of it.
pub(super) struct BodyLimits {
    pub bytes: usize,
    pub lists: &'static [(&'static str, usize)],
    /// Refuses counts past the route's limits, with the route's own words: the count of each
    /// list in `lists`, in their order.
    pub check: fn(&[usize]) -> Result<()>,
}

/// The limits of a door route that names none of its own.
pub(super) const DOOR_BODY: BodyLimits = BodyLimits { bytes: MAX_DOOR_BODY_BYTES, lists: &[], check: |_| Ok(()) };

/// A request's arguments: the query of a GET, the JSON object of anything else.
pub(super) async fn arguments(req: &HttpRequest, payload: web::Payload) -> Result<Value> {
    arguments_within(req, payload, &DOOR_BODY).await
}

/// `arguments`, the body within `limits`: a larger body is refused before it is read further, a
/// body past the values or the counts `limits` allow is refused as it parses.
pub(super) async fn arguments_within(
    req: &HttpRequest,
    payload: web::Payload,
    limits: &'static BodyLimits,
) -> Result<Value> {
    if req.method() == actix_web::http::Method::GET {
        return query_arguments(req);
    }
    let bytes = crate::body::json_bytes_within(req, payload, limits.bytes).await?;
    if bytes.trim_ascii().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    if bytes.len() <= PARSED_IN_PLACE_BYTES {
        return parse_counted(&bytes, limits, MAX_DOOR_BODY_VALUES);
    }
    web::block(move || parse_counted(&bytes, limits, MAX_DOOR_BODY_VALUES)).await.map_err(ApiError::from)?
}

/// A GET's query as an object: a name given twice becomes a list.
fn query_arguments(req: &HttpRequest) -> Result<Value> {
    let pairs = crate::query::query_pairs(req)?;
    let mut object = Map::new();
    for (k, v) in pairs {
        match object.get_mut(&k) {
            Some(Value::Array(list)) => list.push(Value::String(v)),
            Some(existing) => {
                let first = existing.take();
                *existing = Value::Array(vec![first, Value::String(v)]);
            }
            None => {
                object.insert(k, Value::String(v));
            }
        }
    }
    Ok(Value::Object(object))
}

/// Parses a body that must be one JSON object, at most `max_values` values, its lists counted.
fn parse_counted(bytes: &[u8], limits: &BodyLimits, max_values: usize) -> Result<Value> {
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(ApiError::invalid("body", "an MLflow request body is a JSON object").into());
    }
    let counting = Counting {
        left: Cell::new(max_values),
        max_values,
        lists: limits.lists,
        counts: RefCell::new(vec![0; limits.lists.len()]),
        refusal: RefCell::new(None),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let top = Build { counting: &counting, at: At::Top };
    let parsed = top.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    let value = match parsed {
        Ok(v) => v,
        Err(e) => {
            return Err(counting.refusal.take().unwrap_or_else(|| ApiError::invalid("body", e.to_string())).into())
        }
    };
    (limits.check)(&counting.counts.borrow())?;
    if memchr::memmem::find(bytes, br"\u0000").is_some() {
        crate::body::refuse_nul_in(&value)?;
    }
    Ok(value)
}

/// What one parse has counted: values left, each limited list's items, and why it stopped.
struct Counting<'l> {
    left: Cell<usize>,
    max_values: usize,
    lists: &'l [(&'l str, usize)],
    counts: RefCell<Vec<usize>>,
    refusal: RefCell<Option<ApiError>>,
}

/// Where a value sits in the body.
#[derive(Clone, Copy)]
enum At {
    /// The body's object.
    Top,
    /// The top-level list numbered so in the route's limits: it keeps at most `max` items and
    /// counts the rest.
    List {
        slot: usize,
        max: usize,
    },
    Inside,
}

/// Builds one JSON value, counting it.
struct Build<'c, 'l> {
    counting: &'c Counting<'l>,
    at: At,
}

impl Build<'_, '_> {
    /// Counts one value, refusing it when the body holds more than allowed.
    fn count<E: serde::de::Error>(&self) -> std::result::Result<(), E> {
        let left = self.counting.left.get();
        if left == 0 {
            let max = self.counting.max_values;
            *self.counting.refusal.borrow_mut() = Some(ApiError::OverBudget {
                field: "body".into(),
                reason: format!(
                    "the body holds more than {max} JSON values, more than any MLflow request needs; send less in each request"
                ),
                limit: max as u64,
            });
            return Err(E::custom("too many values"));
        }
        self.counting.left.set(left - 1);
        Ok(())
    }

    fn inner(&self) -> Self {
        Build { counting: self.counting, at: At::Inside }
    }
}

impl<'de> DeserializeSeed<'de> for Build<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Build<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> std::result::Result<Value, E> {
        self.count()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Value, E> {
        self.count()?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Value, E> {
        self.count()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> std::result::Result<Value, E> {
        self.count()?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Value, E> {
        self.count()?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> std::result::Result<Value, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        self.count()?;
        let mut items = Vec::new();
        match self.at {
            At::Top | At::Inside => {
                while let Some(item) = seq.next_element_seed(self.inner())? {
                    items.push(item);
                }
            }
            At::List { slot, max } => {
                let mut n = 0usize;
                loop {
                    let more = if n < max {
                        seq.next_element_seed(self.inner())?.map(|item| items.push(item)).is_some()
                    } else {
                        // Past the limit, items are only counted, so the refusal can say how many came.
                        seq.next_element::<IgnoredAny>()?.is_some()
                    };
                    if !more {
                        break;
                    }
                    n += 1;
                }
                if let Some(count) = self.counting.counts.borrow_mut().get_mut(slot) {
                    *count = n;
                }
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        self.count()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let listed = match self.at {
                At::Top => self.counting.lists.iter().enumerate().find(|(_, (name, _))| *name == key),
                At::List { .. } | At::Inside => None,
            };
            let at = listed.map_or(At::Inside, |(slot, &(_, max))| At::List { slot, max });
            let value = map.next_value_seed(Build { counting: self.counting, at })?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::super::MlflowError;
    use super::*;

    static LISTED: BodyLimits = BodyLimits {
        bytes: 1 << 20,
        lists: &[("metrics", 2)],
        check: |counts| match counts {
            [n] if *n > 2 => Err(ApiError::invalid("metrics", format!("got {n}")).into()),
            _ => Ok(()),
        },
    };

    fn refusal(body: &str, limits: &BodyLimits, max_values: usize) -> (String, String) {
        match parse_counted(body.as_bytes(), limits, max_values) {
            Err(MlflowError { error: ApiError::Invalid { field, reason }, .. })
            | Err(MlflowError { error: ApiError::OverBudget { field, reason, .. }, .. }) => (field, reason),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_body_parses_as_serde_json_would_within_its_counts() {
        let body = r#"{"run_id": "r", "metrics": [{"key": "m", "value": 1.5, "step": -3}], "x": [true, null, "s"]}"#;
        let parsed = parse_counted(body.as_bytes(), &LISTED, 100).unwrap();
        assert_eq!(parsed, serde_json::from_str::<Value>(body).unwrap());
        // A limited list that is not a list is kept as it is, for the handler to refuse.
        let parsed = parse_counted(br#"{"metrics": "foo"}"#, &LISTED, 100).unwrap();
        assert_eq!(parsed["metrics"], "foo");
    }

    #[test]
    fn lists_are_counted_past_their_limit_and_values_past_the_budget_stop_the_parse() {
        assert_eq!(refusal(r#"{"metrics": [1, 2, 3, [4, 5]]}"#, &LISTED, 100), ("metrics".into(), "got 4".into()));
        // Only the top-level list is counted: the same name deeper is any value.
        assert!(parse_counted(br#"{"x": {"metrics": [1, 2, 3]}}"#, &LISTED, 100).is_ok());
        let (field, reason) = refusal(r#"{"x": [1, 2, 3, 4]}"#, &DOOR_BODY, 4);
        assert_eq!(field, "body");
        assert!(reason.contains("more than 4 JSON values"), "{reason}");
        assert_eq!(refusal("[1]", &DOOR_BODY, 100).0, "body");
        assert_eq!(refusal(r#"{"a": 1} {"b": 2}"#, &DOOR_BODY, 100).0, "body");
        assert_eq!(refusal(r#"{"tags": [{"key": "a\u0000b"}]}"#, &DOOR_BODY, 100).0, "tags[0].key");
    }
}
