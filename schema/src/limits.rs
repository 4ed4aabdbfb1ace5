//! Limits on what one request may carry; the server answers 400 naming the field beyond them.
//! Text is measured in characters (Unicode scalar values), as the API description's
//! `maxLength` counts; only the search grammar's limits are in bytes, for SQLite's sake.

use crate::{Error, Result};

/// A run's id, chosen by the client or generated.
pub const MAX_RUN_ID_CHARS: usize = 64;
/// Metric, param and tag keys (a nested param's key is measured after flattening: `model.depth`).
pub const MAX_KEY_CHARS: usize = 250;
/// Project, run, model and sweep names, and a run's user, host and group.
pub const MAX_NAME_CHARS: usize = 500;
/// Names of sweeps: each trial's run is named after its sweep with "-NNN" added.
pub const MAX_SWEEP_NAME_CHARS: usize = MAX_NAME_CHARS - 24;
/// A param's value as text (a list counts as its JSON text).
pub const MAX_PARAM_VALUE_CHARS: usize = 64 << 10;
/// A tag's value, on runs and in the model registry.
pub const MAX_TAG_VALUE_CHARS: usize = 64 << 10;
/// Run notes, project, model and version descriptions, and a sweep file.
pub const MAX_TEXT_CHARS: usize = 1 << 20;
/// A file's path inside a run's artifacts.
pub const MAX_ARTIFACT_PATH_CHARS: usize = 1024;
/// Levels of objects in a request's params: `{"a": {"b": 1}}` has two.
pub const MAX_PARAM_DEPTH: usize = 10;
/// Params in one request, after flattening.
pub const MAX_PARAMS_PER_REQUEST: usize = 100_000;
/// Tags (or labels) in one request.
pub const MAX_TAGS_PER_REQUEST: usize = 1_000;

/// A run-search filter's text. Also keeps every `like` pattern under SQLite's own limit.
pub const MAX_FILTER_BYTES: usize = 16 << 10;
/// A model search's text, given in the URL: percent-encoded at up to 12 bytes a character, it
/// keeps the URL under the 64 KiB the HTTP stack accepts (and the `like` pattern under SQLite's limit).
pub const MAX_MODEL_SEARCH_CHARS: usize = 4_000;
/// Comparisons in one filter (`metrics.loss < 0.3` is one; `in (…)` with many values is one).
pub const MAX_FILTER_COMPARISONS: usize = 200;
/// Levels of parentheses and `not` in one filter.
pub const MAX_FILTER_NESTING: usize = 16;
/// A filter given in a URL (`GET /projects/{name}/runs`): percent-encoded at up to 12 bytes a
/// character, it and `order_by` keep the URL under the 64 KiB the HTTP stack accepts. Longer
/// filters go in the body of `POST /runs/search`.
pub const MAX_QUERY_FILTER_CHARS: usize = 3_000;
/// `order_by` given in a URL, all its items together.
pub const MAX_QUERY_ORDER_BY_CHARS: usize = 1_000;
/// Run ids given in a URL (`GET /metrics?runs=`), with their commas.
pub const MAX_QUERY_RUN_IDS_CHARS: usize = 50_000;
/// Items of a run search's `order_by`.
pub const MAX_ORDER_BY_ITEMS: usize = 16;
/// One `order_by` item's text.
pub const MAX_ORDER_BY_ITEM_BYTES: usize = 1024;
/// Runs in one page of search results.
pub const MAX_PAGE_SIZE: u32 = 1000;
/// A saved view's name.
pub const MAX_VIEW_NAME_CHARS: usize = 100;
/// A saved view's state, as JSON text.
pub const MAX_VIEW_STATE_BYTES: usize = 64 << 10;
/// Run ids in one body of `POST /metrics/query`, over all its groups.
pub const MAX_QUERY_RUNS: usize = 20_000;
/// Groups in one body of `POST /metrics/query`.
pub const MAX_QUERY_GROUPS: usize = 100;
/// Buckets one answer of `POST /metrics/query` may hold: buckets asked for, times runs or groups.
pub const MAX_QUERY_BUCKETS: usize = 1_000_000;

/// The bytes of one media item (an image, a clip, a file): a larger upload answers 413.
pub const MAX_MEDIA_ITEM_BYTES: u64 = 64 << 20;
/// Items under one media key at one step (a list of images logged together).
pub const MAX_MEDIA_ITEMS_PER_STEP: usize = 1_000;
/// Items in one request recording media.
pub const MAX_MEDIA_ITEMS_PER_REQUEST: usize = 1_000;
/// A media item's caption.
pub const MAX_MEDIA_CAPTION_CHARS: usize = 4_096;
/// Bounding boxes on one image.
pub const MAX_MEDIA_BOXES: usize = 10_000;
/// Segmentation masks on one image.
pub const MAX_MEDIA_MASKS: usize = 16;
/// Class labels given with one image.
pub const MAX_MEDIA_CLASS_LABELS: usize = 10_000;
/// A media type (`image/png`).
pub const MAX_MEDIA_MIME_CHARS: usize = 200;
/// Media items in one page of a listing.
pub const MAX_MEDIA_PAGE: usize = 1_000;
/// Bins of one histogram.
pub const MAX_HISTOGRAM_BINS: usize = 512;
/// Histograms in one request recording them, and in one page of a listing.
pub const MAX_HISTOGRAMS_PER_REQUEST: usize = 1_000;
/// Rows in one part of a table (one log of it).
pub const MAX_TABLE_PART_ROWS: usize = 100_000;
/// Columns of a table.
pub const MAX_TABLE_COLUMNS: usize = 1_000;
/// Rows a table holds over all its parts, as read back.
pub const MAX_TABLE_ROWS: usize = 2_000_000;
/// Rows in one page of a table read as JSON.
pub const MAX_TABLE_PAGE: usize = 10_000;

/// The latest instant a run's start or end may name, in milliseconds since 1970: the last
/// millisecond of the year 9999. Durations and spend are computed from these in 64 bits.
pub const MAX_EPOCH_MS: i64 = 253_402_300_799_999;

/// Refuses a time in milliseconds since 1970 before 1970 or after the year 9999, naming `field`.
pub fn check_epoch_ms(field: &str, value: i64) -> Result<i64> {
    if !(0..=MAX_EPOCH_MS).contains(&value) {
        return Err(Error::new(
            field,
            format!(
                "a time in milliseconds since 1970 must lie between 0 and {MAX_EPOCH_MS} (the year 9999), got {value}"
            ),
        ));
    }
    Ok(value)
}

/// Refuses `value` when it has more than `max` characters, naming `field` and what it is.
pub fn check_len(field: &str, what: &str, value: &str, max: usize) -> Result<()> {
    // A string has at most as many characters as bytes: most are settled without counting.
    if value.len() <= max {
        return Ok(());
    }
    let chars = value.chars().count();
    if chars > max {
        return Err(Error::new(field, format!("{what} may have at most {max} characters, got {chars}")));
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
    fn lengths_are_counted_in_characters_up_to_the_limit() {
        assert!(check_len("notes", "notes", &"x".repeat(10), 10).is_ok());
        let error = check_len("notes", "notes", &"x".repeat(11), 10).unwrap_err();
        assert_eq!(error.field, "notes");
        assert!(error.reason.contains("at most 10 characters, got 11"), "{error}");
        // Characters, not bytes: "é" takes two bytes in UTF-8, "𝄞" four.
        assert!(check_len("name", "a name", &"é".repeat(10), 10).is_ok());
        assert!(check_len("name", "a name", &"𝄞".repeat(10), 10).is_ok());
        assert!(check_len("name", "a name", &"é".repeat(11), 10).is_err());
    }

    #[test]
    fn times_before_1970_or_past_the_year_9999_are_refused() {
        assert_eq!(check_epoch_ms("start_time", 0), Ok(0));
        assert_eq!(check_epoch_ms("start_time", MAX_EPOCH_MS), Ok(MAX_EPOCH_MS));
        for bad in [-1, i64::MIN, MAX_EPOCH_MS + 1, i64::MAX] {
            let error = check_epoch_ms("start_time", bad).unwrap_err();
            assert_eq!(error.field, "start_time");
            assert!(error.reason.contains(&bad.to_string()), "{error}");
        }
    }

    #[test]
    fn counts_are_refused_only_past_the_limit() {
        assert!(check_count("tags", "tags", MAX_TAGS_PER_REQUEST, MAX_TAGS_PER_REQUEST).is_ok());
        let error = check_count("tags", "tags", MAX_TAGS_PER_REQUEST + 1, MAX_TAGS_PER_REQUEST).unwrap_err();
        assert_eq!(error.field, "tags");
        assert!(error.reason.contains(&format!("at most {MAX_TAGS_PER_REQUEST} tags")), "{error}");
    }
}
