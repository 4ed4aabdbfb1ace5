//! The redaction of secrets from what the SDK records by itself, the same the server applies on
//! ingest: see [`trainlog_schema::redact`] for the rule.

pub use trainlog_schema::redact::*;
