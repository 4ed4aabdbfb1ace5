//! The wire types every resource shares: the patterns names and ids are checked against, the
//! spelling of integers and non-finite floats, text schemas for the API document, roles, and
//! the error and plain answers. Each resource's own types live beside its handlers; the OpenAPI
//! document is derived from them all.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use utoipa::openapi::schema::{AnyOfBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// Printable text: no control characters, and no whitespace at either end. Names and keys are
/// checked against this.
pub const TEXT: &str = r"^[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000](?:[^\x00-\x1F\x7F-\x9F]*[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$";
/// A run id: 1 to 64 characters from [A-Za-z0-9_-].
pub const RUN_ID: &str = "^[A-Za-z0-9_-]{1,64}$";
/// One or more run ids, separated by commas.
#[cfg_attr(not(test), expect(dead_code, reason = "the API document spells it as a literal; a test ties the two"))]
pub const RUN_IDS: &str = "^[A-Za-z0-9_-]{1,64}(,[A-Za-z0-9_-]{1,64}){0,999}$";
/// An alias of a model version.
pub const ALIAS: &str = "^[A-Za-z][A-Za-z0-9_-]{0,63}$";
/// A version by number, or by alias.
#[cfg_attr(not(test), expect(dead_code, reason = "the API document spells it as a literal; a test ties the two"))]
pub const VERSION_REF: &str = "^([0-9]{1,18}|[A-Za-z][A-Za-z0-9_-]{0,63})$";
/// A path inside a run's artifacts: relative, '/'-separated; no empty, '.' or '..' segment, no
/// backslash or control character; at most 240 characters a segment.
pub const ARTIFACT_PATH: &str = r"^(?:[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,239}|\.[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,238}|\.\.[^/\\\x00-\x1F\x7F-\x9F]{1,238})(?:/(?:[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,239}|\.[^./\\\x00-\x1F\x7F-\x9F][^/\\\x00-\x1F\x7F-\x9F]{0,238}|\.\.[^/\\\x00-\x1F\x7F-\x9F]{1,238}))*$";
/// A page token this server gave.
#[cfg_attr(not(test), expect(dead_code, reason = "the API document spells it as a literal; a test ties the two"))]
pub const PAGE_TOKEN: &str = "^[0-9]{0,18}$";

use trainlog_schema::limits::{MAX_KEY_CHARS, MAX_TAG_VALUE_CHARS};

/// Integers in request bodies. JSON Schema counts `3.0` as the integer 3; so does the API.
pub mod integer {
    use serde::de::{Deserializer, Error, Unexpected, Visitor};
    use std::fmt;

    struct Integer;

    impl Visitor<'_> for Integer {
        type Value = i64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer")
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &"an integer within 64 bits"))
        }
        fn visit_f64<E: Error>(self, v: f64) -> Result<i64, E> {
            // Integral floats up to 2^53, where every integer still has its own float: past it
            // a float may stand for a number that does not fit 64 bits.
            const LIMIT: f64 = 9_007_199_254_740_992.0;
            if v.fract() == 0.0 && (-LIMIT..=LIMIT).contains(&v) {
                Ok(v as i64)
            } else {
                Err(E::invalid_type(Unexpected::Float(v), &self))
            }
        }
    }

    fn narrow<T: TryFrom<i64>, E: Error>(v: i64) -> Result<T, E> {
        T::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &"an integer in range"))
    }

    pub fn required<'de, D: Deserializer<'de>, T: TryFrom<i64>>(d: D) -> Result<T, D::Error> {
        narrow(d.deserialize_i64(Integer)?)
    }

    pub fn optional<'de, D: Deserializer<'de>, T: TryFrom<i64>>(d: D) -> Result<Option<T>, D::Error> {
        struct Maybe;
        impl<'de> Visitor<'de> for Maybe {
            type Value = Option<i64>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or null")
            }
            fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_i64(Integer).map(Some)
            }
        }
        d.deserialize_option(Maybe)?.map(narrow).transpose()
    }

    /// A JSON number that is an integer, such as `3` or `3.0`.
    pub fn of(n: &serde_json::Number) -> Option<i64> {
        n.as_i64().or_else(|| n.as_f64().and_then(|f| Integer.visit_f64::<serde_json::Error>(f).ok()))
    }
}

/// A float written as a number, or as the string "NaN", "Infinity" or "-Infinity".
#[derive(Debug, Clone, Copy)]
pub struct Float(pub f64);

impl Serialize for Float {
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

/// Reads a number, or "NaN", "Infinity" or "-Infinity".
impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Float;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number, or \"NaN\", \"Infinity\" or \"-Infinity\"")
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Float, E> {
                Ok(Float(v))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Float, E> {
                Ok(Float(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Float, E> {
                Ok(Float(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Float, E> {
                trainlog_schema::parse_non_finite(v)
                    .map(Float)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

impl PartialSchema for Float {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double))),
            )
            .item(ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["NaN", "Infinity", "-Infinity"])))
            .description(Some("A float; NaN and infinities are the strings \"NaN\", \"Infinity\" and \"-Infinity\"."))
            .into()
    }
}
impl ToSchema for Float {}

/// A param's value as stored: text, integer, float or boolean.
pub struct ParamValue;

impl PartialSchema for ParamValue {
    fn schema() -> RefOr<Schema> {
        AnyOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(ObjectBuilder::new().schema_type(Type::Integer).format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64))))
            .item(ObjectBuilder::new().schema_type(Type::Number).format(Some(SchemaFormat::KnownFormat(KnownFormat::Double))))
            .item(ObjectBuilder::new().schema_type(Type::Boolean))
            .description(Some("A param value: text, integer, float (non-finite ones as \"NaN\", \"Infinity\", \"-Infinity\") or boolean."))
            .into()
    }
}
impl ToSchema for ParamValue {}

/// Any JSON value.
pub struct AnyValue;

impl PartialSchema for AnyValue {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new().schema_type(utoipa::openapi::schema::SchemaType::AnyValue).into()
    }
}
impl ToSchema for AnyValue {}

/// Text of a given length and pattern, for the schema-only types below.
pub(crate) fn text_schema(
    min_length: Option<usize>,
    max_length: Option<usize>,
    pattern: &str,
    description: &str,
) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(min_length)
        .max_length(max_length)
        .pattern(Some(pattern))
        .description(Some(description))
        .into()
}

const PRINTABLE: &str = "no control characters, and no whitespace at either end";

/// A project's or a registered model's name, in the API document.
pub struct NameText;
impl PartialSchema for NameText {
    fn schema() -> RefOr<Schema> {
        text_schema(Some(1), Some(trainlog_schema::limits::MAX_NAME_CHARS), TEXT, PRINTABLE)
    }
}
impl ToSchema for NameText {}

/// A metric's key, in the API document.
pub struct KeyText;
impl PartialSchema for KeyText {
    fn schema() -> RefOr<Schema> {
        text_schema(Some(1), Some(MAX_KEY_CHARS), TEXT, PRINTABLE)
    }
}
impl ToSchema for KeyText {}

/// A run's id, in the API document.
pub struct RunIdText;
impl PartialSchema for RunIdText {
    fn schema() -> RefOr<Schema> {
        text_schema(None, None, RUN_ID, "A run's id.")
    }
}
impl ToSchema for RunIdText {}

/// A path among a run's artifacts, in the API document.
pub struct ArtifactPathText;
impl PartialSchema for ArtifactPathText {
    fn schema() -> RefOr<Schema> {
        text_schema(
            None,
            Some(trainlog_schema::limits::MAX_ARTIFACT_PATH_CHARS),
            ARTIFACT_PATH,
            "A relative path; '/' separates folders.",
        )
    }
}
impl ToSchema for ArtifactPathText {}

/// A role on a project or a registered model; each includes the ones before it.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum RoleName {
    /// Not even told that it exists.
    None,
    Read,
    Write,
    /// Also grants roles and deletes.
    Admin,
}

impl RoleName {
    pub fn role(self) -> trainlog_meta::Role {
        match self {
            RoleName::None => trainlog_meta::Role::None,
            RoleName::Read => trainlog_meta::Role::Read,
            RoleName::Write => trainlog_meta::Role::Write,
            RoleName::Admin => trainlog_meta::Role::Admin,
        }
    }

    pub fn of(role: trainlog_meta::Role) -> Self {
        match role {
            trainlog_meta::Role::None => RoleName::None,
            trainlog_meta::Role::Read => RoleName::Read,
            trainlog_meta::Role::Write => RoleName::Write,
            trainlog_meta::Role::Admin => RoleName::Admin,
        }
    }
}

// ---- Errors and plain answers ----

/// The body of every error answer.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// invalid_argument (400), over_budget (400: the work asked for is past a budget), forbidden
    /// (403), not_found (404), request_timeout (408: the body did not arrive in time), conflict
    /// (409), payload_too_large (413), unsupported_media_type (415), misdirected_request (421),
    /// internal (500), unavailable (503), insufficient_storage (507).
    pub code: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// The offending field when one is to blame, e.g. "points[3].value", "params.lr", "filter".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// With payload_too_large and over_budget: the limit passed (bytes, points or cells).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// The answer of a change that returns nothing else.
#[derive(Serialize, ToSchema)]
pub struct StatusOk {
    /// Always "ok".
    #[schema(value_type = String, example = "ok")]
    pub status: &'static str,
}

pub const OK: StatusOk = StatusOk { status: "ok" };

/// A schema written as JSON: for the shapes the derive cannot say (unions, key patterns).
pub(crate) fn json_schema(value: Value) -> RefOr<Schema> {
    serde_json::from_value(value).unwrap_or_else(|e| {
        RefOr::T(Schema::Object(ObjectBuilder::new().description(Some(format!("{INVALID_SCHEMA}: {e}"))).build()))
    })
}

/// Marks a hand-written schema that does not parse; a unit test looks for it.
pub const INVALID_SCHEMA: &str = "invalid schema";

fn tag_key() -> Value {
    serde_json::json!({"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS, "pattern": TEXT})
}

pub(crate) fn tags_schema(description: &str, null_deletes: bool, labels: bool) -> RefOr<Schema> {
    let mut value_types = vec![
        serde_json::json!({"type": "string", "maxLength": MAX_TAG_VALUE_CHARS}),
        serde_json::json!({"type": "number"}),
        serde_json::json!({"type": "boolean"}),
    ];
    if null_deletes {
        value_types.push(serde_json::json!({"type": "null"}));
    }
    let object = serde_json::json!({
        "type": "object",
        "propertyNames": tag_key(),
        "additionalProperties": {"anyOf": value_types},
        "maxProperties": trainlog_schema::limits::MAX_TAGS_PER_REQUEST,
    });
    let mut shapes = vec![object];
    if labels {
        shapes.push(serde_json::json!({"type": "array", "items": tag_key(), "maxItems": trainlog_schema::limits::MAX_TAGS_PER_REQUEST}));
    }
    json_schema(serde_json::json!({"description": description, "anyOf": shapes}))
}
