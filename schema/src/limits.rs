//! Limits on what one request may carry; the server answers 400 naming the field beyond them.

use crate::{Error, Result};

/// A run's id, chosen by the client or generated.
pub const MAX_RUN_ID_BYTES: usize = 64;
/// Metric, param and tag keys (a nested param's key is measured after flattening: `model.depth`).
pub const MAX_KEY_BYTES: usize = 250;
/// Project, run, model and sweep names, and a run's user, host and group.
pub const MAX_NAME_BYTES: usize = 500;
/// Names of sweeps: each trial's run is named after its sweep with "-NNN" added.
pub const MAX_SWEEP_NAME_BYTES: usize = MAX_NAME_BYTES - 24;
/// A param's value as text (a list counts as its JSON text).
pub const MAX_PARAM_VALUE_BYTES: usize = 64 << 10;
/// A tag's value, on runs and in the model registry.
pub const MAX_TAG_VALUE_BYTES: usize = 64 << 10;
/// Run notes, project, model and version descriptions, and a sweep file.
pub const MAX_TEXT_BYTES: usize = 1 << 20;
/// A file's path inside a run's artifacts.
pub const MAX_ARTIFACT_PATH_BYTES: usize = 1024;
/// Params in one request, after flattening.
pub const MAX_PARAMS_PER_REQUEST: usize = 100_000;
/// Tags (or labels) in one request.
pub const MAX_TAGS_PER_REQUEST: usize = 1_000;

/// A run-search filter's text, and a model search's. Also keeps every `like` pattern under SQLite's own limit.
pub const MAX_FILTER_BYTES: usize = 16 << 10;
/// Comparisons in one filter (`metrics.loss < 0.3` is one; `in (…)` with many values is one).
pub const MAX_FILTER_COMPARISONS: usize = 200;
/// Levels of parentheses and `not` in one filter.
pub const MAX_FILTER_NESTING: usize = 16;
/// Items of a run search's `order_by`.
pub const MAX_ORDER_BY_ITEMS: usize = 16;
/// One `order_by` item's text.
pub const MAX_ORDER_BY_ITEM_BYTES: usize = 1024;
/// Runs in one page of search results.
pub const MAX_PAGE_SIZE: u32 = 1000;

/// Refuses `value` when it is longer than `max` bytes, naming `field` and what it is.
pub fn check_len(field: &str, what: &str, value: &str, max: usize) -> Result<()> {
    if value.len() > max {
        return Err(Error::new(field, format!("{what} may have at most {max} bytes, got {}", value.len())));
    }
    Ok(())
}

/// Refuses `count` items when more than `max`, naming `field` and what they are.
pub fn check_count(field: &str, what: &str, count: usize, max: usize) -> Result<()> {
    if count > max {
        return Err(Error::new(field, format!("at most {max} {what} are allowed in one request, got {count}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_counted_in_bytes_up_to_the_limit() {
        assert!(check_len("notes", "notes", &"x".repeat(10), 10).is_ok());
        let error = check_len("notes", "notes", &"x".repeat(11), 10).unwrap_err();
        assert_eq!(error.field, "notes");
        assert!(error.reason.contains("at most 10 bytes, got 11"), "{error}");
        // Two bytes per character in UTF-8.
        assert!(check_len("name", "a name", &"é".repeat(5), 10).is_ok());
        assert!(check_len("name", "a name", &"é".repeat(6), 10).is_err());
    }

    #[test]
    fn counts_are_refused_only_past_the_limit() {
        assert!(check_count("tags", "tags", MAX_TAGS_PER_REQUEST, MAX_TAGS_PER_REQUEST).is_ok());
        let error = check_count("tags", "tags", MAX_TAGS_PER_REQUEST + 1, MAX_TAGS_PER_REQUEST).unwrap_err();
        assert_eq!(error.field, "tags");
        assert!(error.reason.contains(&format!("at most {MAX_TAGS_PER_REQUEST} tags")), "{error}");
    }
}
