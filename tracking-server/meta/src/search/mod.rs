//! Run search: the filter and order-by grammar, compiled to one parameterised SQL query in three stages:
//! `grammar` parses the text into a typed syntax tree, `plan` decides the tables, columns and bound values,
//! and `sql` writes the plan for a [`Dialect`]. [`mlflow`] rewrites MLflow's filters into this grammar.
//!
//! Semantics:
//! - `metrics.KEY` is the last value, `metrics_min`/`metrics_max` the extremes, `metrics_mean` the mean, `metrics_step` the last step.
//!   They compare with numbers only. A NaN summary (stored as NULL) never matches a comparison.
//! - `params.KEY` compares the numeric value when the literal is a number or bool (true = 1, false = 0);
//!   a param has one when it is typed a number or bool, or is text written as a number (MLflow's params);
//!   and the canonical text when the literal is quoted (`params.lr = '0.001'` compares text).
//!   `!=` and `not in` on params match a run that has the key with any other value, including a value of
//!   another type.
//! - `tags.KEY` and the text attributes compare text; a number or bool literal compares as the text it was written as.
//! - `start_time`, `end_time` (epoch milliseconds) and `duration` (milliseconds; running runs count up to now)
//!   compare with numbers only.
//! - A run lacking a metric, param or tag, or whose attribute is NULL, matches no comparison (`not` around the
//!   comparison does match it). `is null` matches exactly the runs lacking the key (or whose attribute is NULL);
//!   a metric whose last value is NaN is present, so it is not `null`.
//! - `like` is case-sensitive (`%` any run of characters, `_` one character, `\` escapes the next character);
//!   `ilike` folds ASCII case only.
//!
//! Order-by items are `FIELD [asc|desc]` over the same fields. Runs lacking the value sort last in both directions;
//! params sort numbers before strings, numbers by value and strings by text. Text compares and sorts by its bytes
//! (code points). Ties are broken by `runs.id`, and with no items the order is newest first (`start_ms DESC, id ASC`).
//!
//! Within the grammar's limits the compiled query stays inside SQLite's own limits (expression depth, bound
//! values, `LIKE`/`GLOB` pattern length) and PostgreSQL's (65535 bound values), so no filter reaches the
//! database only to fail there.

mod error;
mod grammar;
pub mod mlflow;
mod plan;
mod sql;

#[cfg(test)]
mod fixture;

use crate::db::Dialect;

pub use error::SearchError;
pub use plan::{Lifecycle, RunScope};
pub(crate) use sql::SearchQuery;

/// Parses `filter` (may be empty/whitespace = no filter) and `order_by` items, and returns a query
/// selecting `runs.id` and `runs.revision` of non-deleted runs of `project_id` (or of all projects when None), in the requested order,
/// always ending with a deterministic tiebreak (`runs.start_ms DESC, runs.id ASC` when no order is given; `runs.id` appended otherwise),
/// with `LIMIT ? OFFSET ?` bound to `limit` and `offset`.
#[cfg_attr(not(test), expect(dead_code, reason = "the store pages with build_search_in; the tests call this"))]
pub(crate) fn build_search(
    dialect: Dialect,
    scope: impl Into<RunScope>,
    filter: &str,
    order_by: &[String],
    limit: u32,
    offset: u64,
) -> Result<SearchQuery, SearchError> {
    build_search_in(dialect, scope, Lifecycle::Active, filter, order_by, limit, offset)
}

/// `build_search`, over deleted runs too or only.
pub(crate) fn build_search_in(
    dialect: Dialect,
    scope: impl Into<RunScope>,
    lifecycle: Lifecycle,
    filter: &str,
    order_by: &[String],
    limit: u32,
    offset: u64,
) -> Result<SearchQuery, SearchError> {
    let request = grammar::parse_search(filter, order_by)?;
    let plan = plan::plan_search(scope.into(), lifecycle, &request)?.paged(limit, offset);
    Ok(sql::write_search(dialect, &plan))
}

/// What a filter with no order selects in `scope`: the plan the count and the ids are written from.
fn filter_plan(scope: RunScope, lifecycle: Lifecycle, filter: &str) -> Result<plan::SearchPlan, SearchError> {
    plan::plan_search(scope, lifecycle, &grammar::parse_search(filter, &[])?)
}

/// A query answering how many runs `build_search_in` matches over every page (no order, no page).
pub(crate) fn build_count_in(
    dialect: Dialect,
    scope: impl Into<RunScope>,
    lifecycle: Lifecycle,
    filter: &str,
) -> Result<SearchQuery, SearchError> {
    Ok(sql::write_count(dialect, &filter_plan(scope.into(), lifecycle, filter)?))
}

/// A query selecting the ids of the runs `filter` matches in `scope`, for other queries to join.
pub(crate) fn build_ids_in(
    dialect: Dialect,
    scope: impl Into<RunScope>,
    lifecycle: Lifecycle,
    filter: &str,
) -> Result<SearchQuery, SearchError> {
    Ok(sql::write_ids(dialect, &filter_plan(scope.into(), lifecycle, filter)?))
}

#[cfg(test)]
mod tests {
    use super::error::{FILTER, ORDER_BY};
    use super::fixture::{execute, fixture};
    use super::*;
    use crate::db::Value;
    use rusqlite::Connection;
    use trainlog_schema::limits::{
        MAX_FILTER_BYTES, MAX_FILTER_COMPARISONS, MAX_FILTER_NESTING, MAX_ORDER_BY_ITEMS, MAX_ORDER_BY_ITEM_BYTES,
    };
    fn search_page(
        conn: &Connection,
        project: Option<i64>,
        filter: &str,
        order_by: &[&str],
        limit: u32,
        offset: u64,
    ) -> Vec<String> {
        let order_by: Vec<String> = order_by.iter().map(|s| s.to_string()).collect();
        let query = build_search(Dialect::Sqlite, project, filter, &order_by, limit, offset)
            .unwrap_or_else(|e| panic!("{filter:?} / {order_by:?} failed: {e}"));
        execute(conn, &query)
    }
    /// Ids in project 1 matching `filter`, newest first.
    fn ids(conn: &Connection, filter: &str) -> Vec<String> {
        search_page(conn, Some(1), filter, &[], 100, 0)
    }
    fn ordered(conn: &Connection, order_by: &[&str]) -> Vec<String> {
        search_page(conn, Some(1), "", order_by, 100, 0)
    }
    fn filter_error(filter: &str) -> SearchError {
        match build_search(Dialect::Sqlite, Some(1), filter, &[], 10, 0) {
            Ok(query) => panic!("{filter:?} should fail, compiled to {}", query.sql),
            Err(error) => error,
        }
    }
    fn order_error(order_by: &[&str]) -> SearchError {
        let order_by: Vec<String> = order_by.iter().map(|s| s.to_string()).collect();
        match build_search(Dialect::Sqlite, Some(1), "", &order_by, 10, 0) {
            Ok(query) => panic!("{order_by:?} should fail, compiled to {}", query.sql),
            Err(error) => error,
        }
    }
    #[test]
    fn no_filter_lists_live_runs_newest_first() {
        let conn = fixture();
        assert_eq!(ids(&conn, ""), ["r4", "r3", "r2", "r1"]);
        assert_eq!(ids(&conn, "   \n "), ["r4", "r3", "r2", "r1"]);
        assert_eq!(search_page(&conn, None, "", &[], 100, 0), ["r4", "r3", "r2", "r1", "r6"]);
        assert_eq!(search_page(&conn, Some(2), "", &[], 100, 0), ["r6"]);
        assert!(search_page(&conn, Some(3), "", &[], 100, 0).is_empty());
    }
    #[test]
    fn readme_example() {
        let conn = fixture();
        let filter = "metrics.val_loss < 0.3 and params.lr = 0.001 and status = 'finished'";
        assert_eq!(ids(&conn, filter), ["r1"]);
        assert_eq!(search_page(&conn, None, filter, &[], 100, 0), ["r1", "r6"]);
        assert_eq!(ids(&conn, "METRICS.val_loss < 3e-1 AND Params.lr == 1e-3 AND Status = \"finished\""), ["r1"]);
    }
    #[test]
    fn boolean_logic_and_precedence() {
        let conn = fixture();
        assert_eq!(ids(&conn, "status = 'running' or status = 'failed'"), ["r4", "r3"]);
        assert_eq!(ids(&conn, "not (status = 'finished')"), ["r4", "r3"]);
        assert_eq!(ids(&conn, "not status = 'finished'"), ["r4", "r3"]);
        assert_eq!(ids(&conn, "not not status = 'finished'"), ["r2", "r1"]);
        // `and` binds tighter than `or`.
        assert_eq!(ids(&conn, "user = 'carol' or user = 'bob' and status = 'running'"), ["r4"]);
        assert_eq!(ids(&conn, "(user = 'carol' or user = 'bob') and status = 'finished'"), ["r2"]);
        // `not` around a metric comparison matches runs whose value is NaN or missing.
        assert_eq!(ids(&conn, "(user = 'alice' or user = 'bob') and not metrics.val_loss > 0.3"), ["r3", "r1"]);
        assert_eq!(ids(&conn, "((((status = 'failed'))))"), ["r4"]);
        assert_eq!(ids(&conn, "status='failed'OR(status='running')"), ["r4", "r3"]);
    }
    #[test]
    fn in_lists() {
        let conn = fixture();
        assert_eq!(ids(&conn, "params.optimizer in ('adam', 'sgd')"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "params.depth IN (18, 50)"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "status not in ('finished')"), ["r4", "r3"]);
        assert_eq!(ids(&conn, "params.depth not in (50)"), ["r3", "r2"]);
        assert_eq!(ids(&conn, "params.version in (1, '2')"), ["r3", "r2"]);
        assert_eq!(ids(&conn, "params.version not in (1, '2')"), ["r1"]);
        assert_eq!(ids(&conn, "metrics.val_loss in (0.25, 0.35)"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "metrics.val_loss not in (0.25)"), ["r2"]);
        assert_eq!(ids(&conn, "tags.team in ('NLP', 'vision')"), ["r3", "r2", "r1"]);
        assert_eq!(ids(&conn, "run_id in ('r1', 'r4', 'r5')"), ["r4", "r1"]);
        assert_eq!(ids(&conn, "parent_id not in ('r2')"), ["r4"]);
    }
    #[test]
    fn string_params_versus_numeric_params() {
        let conn = fixture();
        assert_eq!(ids(&conn, "params.version = 1"), ["r2"]);
        assert_eq!(ids(&conn, "params.version = 1.0"), ["r2"]);
        assert_eq!(ids(&conn, "params.version = '1.0'"), ["r1"]);
        assert_eq!(ids(&conn, "params.version = '1'"), ["r2"]);
        assert_eq!(ids(&conn, "params.version = 2"), Vec::<String>::new());
        assert_eq!(ids(&conn, "params.version = '2'"), ["r3"]);
        assert_eq!(ids(&conn, "params.lr = '0.001'"), ["r4", "r3", "r1"]);
        assert_eq!(ids(&conn, "params.lr < 0.005"), ["r4", "r3", "r1"]);
        assert_eq!(ids(&conn, "params.lr >= 0.01"), ["r2"]);
        assert_eq!(ids(&conn, "params.depth > 12"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "params.pretrained = true"), ["r1"]);
        assert_eq!(ids(&conn, "params.pretrained = false"), ["r2"]);
        assert_eq!(ids(&conn, "params.pretrained = 'true'"), ["r1"]);
        assert_eq!(ids(&conn, "params.optimizer != 'adam'"), ["r4", "r3", "r2"]);
        assert_eq!(ids(&conn, "params.version != 1"), ["r3", "r1"]);
        assert_eq!(ids(&conn, "params.optimizer = 5"), Vec::<String>::new());
    }
    #[test]
    fn null_checks_and_nan() {
        let conn = fixture();
        // r3's val_loss is NaN (NULL): present, but it matches no comparison.
        assert_eq!(ids(&conn, "metrics.val_loss is null"), ["r4"]);
        assert_eq!(ids(&conn, "metrics.val_loss is not null"), ["r3", "r2", "r1"]);
        assert_eq!(ids(&conn, "metrics.val_loss != 0.25"), ["r2"]);
        assert_eq!(ids(&conn, "metrics.val_loss >= 0"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "tags.stage IS NULL"), ["r4", "r3", "r2"]);
        assert_eq!(ids(&conn, "params.depth is not null"), ["r3", "r2", "r1"]);
        assert_eq!(ids(&conn, "parent_id is not null"), ["r4"]);
        assert_eq!(ids(&conn, "end_time is null"), ["r3"]);
        // A NULL attribute matches no comparison, but `not` around one matches it.
        assert_eq!(ids(&conn, "end_time > 0"), ["r4", "r2", "r1"]);
        assert_eq!(ids(&conn, "not end_time > 0"), ["r3"]);
        assert_eq!(ids(&conn, "parent_id != 'r9'"), ["r4"]);
    }
    #[test]
    fn metric_columns_keys_and_attributes() {
        let conn = fixture();
        assert_eq!(ids(&conn, "metrics_min.val_loss <= 0.3"), ["r2", "r1"]);
        // The fixture's means are (min + max) / 2: 0.55, 0.75 and 1.0.
        assert_eq!(ids(&conn, "metrics_mean.val_loss < 0.7"), ["r1"]);
        assert_eq!(ids(&conn, "metrics_mean.val_loss > 0.7"), ["r3", "r2"]);
        assert_eq!(ids(&conn, "metrics_max.val_loss > 1"), ["r3", "r2"]);
        assert_eq!(ids(&conn, "metrics_step.val_loss >= 50"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "metrics.train/loss < 0.3"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "metrics.`val loss` > 0.5"), ["r2"]);
        assert_eq!(ids(&conn, "metrics.\"val loss\" > 0.5"), ["r2"]);
        assert_eq!(ids(&conn, "metrics.val_loss > -1e3 and metrics.val_loss < +.3"), ["r1"]);
        assert_eq!(ids(&conn, "tags.team = 'vision'"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "tags.team <> 'vision'"), ["r3"]);
        assert_eq!(ids(&conn, "group = 'vits'"), ["r4", "r3"]);
        assert_eq!(ids(&conn, "attributes.user = 'bob'"), ["r2"]);
        assert_eq!(ids(&conn, "id = 'r2' or run_id = 'r3'"), ["r3", "r2"]);
        assert_eq!(ids(&conn, "start_time >= 3000"), ["r4", "r3"]);
        assert_eq!(ids(&conn, "end_time < 4600"), ["r4", "r2"]);
        assert_eq!(ids(&conn, "host = 'host' and notes = 'Baseline run'"), ["r1"]);
        // r1 ran 4000 ms; r3 is still running, so its duration counts up to now.
        assert_eq!(ids(&conn, "duration > 1500"), ["r3", "r1"]);
        assert_eq!(ids(&conn, "duration <= 500"), ["r4"]);
    }
    #[test]
    fn like_is_case_sensitive_and_ilike_is_not() {
        let conn = fixture();
        assert_eq!(ids(&conn, "name like 'resnet%'"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "name LIKE 'RESNET%'"), Vec::<String>::new());
        assert_eq!(ids(&conn, "name ilike 'RESNET%'"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "name not like '%-a'"), ["r4", "r2"]);
        assert_eq!(ids(&conn, "name not ilike '%-A'"), ["r4", "r2"]);
        assert_eq!(ids(&conn, "notes like 'Baseline_run'"), ["r1"]);
        assert_eq!(ids(&conn, "params.optimizer like 'adam%'"), ["r4", "r1"]);
        assert_eq!(ids(&conn, "params.optimizer ilike 'adam'"), ["r3", "r1"]);
        assert_eq!(ids(&conn, "tags.team like 'v_s%'"), ["r2", "r1"]);
        // Glob and escaped wildcard characters are literal.
        assert_eq!(ids(&conn, "name like 'resnet*'"), Vec::<String>::new());
        assert_eq!(ids(&conn, "name like 'vit\\_a'"), Vec::<String>::new());
        assert_eq!(ids(&conn, "name like 'vit\\-a'"), ["r3"]);
    }
    #[test]
    fn ilike_folds_ascii_only_and_text_ranges_go_by_code_point() {
        let conn = fixture();
        assert_eq!(ids(&conn, "tags.city like 'É%'"), ["r4"]);
        assert_eq!(ids(&conn, "tags.city ilike 'ÉDIMBOURG'"), ["r4"]);
        assert_eq!(ids(&conn, "tags.city ilike 'édimbourg'"), Vec::<String>::new());
        assert_eq!(ids(&conn, "tags.city not ilike 'é%'"), ["r4"]);
        // Upper case sorts before lower case, whatever a database's locale would say.
        assert_eq!(ids(&conn, "tags.team >= 'a'"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "tags.team < 'a'"), ["r3"]);
        assert_eq!(ids(&conn, "params.optimizer < 'adam'"), ["r3"]);
        assert_eq!(ids(&conn, "name > 'Z' and name < 'vit'"), ["r2", "r1"]);
        assert_eq!(ordered(&conn, &["tags.city desc", "status desc"]), ["r4", "r3", "r1", "r2"]);
    }
    #[test]
    fn fractions_compare_with_integer_columns() {
        let conn = fixture();
        assert_eq!(ids(&conn, "end_time < 4500.5"), ["r4", "r2"]);
        assert_eq!(ids(&conn, "start_time in (1000.0, 2000, 2500.5)"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "metrics_step.val_loss > 49.5"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "metrics_step.val_loss in (50.0, 100)"), ["r2", "r1"]);
        assert_eq!(ids(&conn, "duration >= 499.5 and duration < 999.5"), ["r4"]);
        assert_eq!(ids(&conn, "params.depth in (18.0, 12) and params.lr != 0.01"), ["r3"]);
    }
    #[test]
    fn ordering_by_metrics_puts_missing_last() {
        let conn = fixture();
        // r3's val_loss is NaN and r4 has none: both last, by id.
        assert_eq!(ordered(&conn, &["metrics.val_loss asc"]), ["r1", "r2", "r3", "r4"]);
        assert_eq!(ordered(&conn, &["metrics.val_loss"]), ["r1", "r2", "r3", "r4"]);
        assert_eq!(ordered(&conn, &["metrics.val_loss DESC"]), ["r2", "r1", "r3", "r4"]);
        assert_eq!(ordered(&conn, &["metrics.train/loss desc"]), ["r4", "r3", "r2", "r1"]);
        assert_eq!(ordered(&conn, &["metrics_max.val_loss desc"]), ["r3", "r2", "r1", "r4"]);
        assert_eq!(ordered(&conn, &["metrics_step.val_loss"]), ["r3", "r2", "r1", "r4"]);
        assert_eq!(
            search_page(&conn, None, "params.lr = 0.001", &["metrics.val_loss"], 100, 0),
            ["r6", "r1", "r3", "r4"]
        );
    }
    #[test]
    fn ordering_by_params_tags_and_attributes() {
        let conn = fixture();
        assert_eq!(ordered(&conn, &["params.depth desc"]), ["r1", "r2", "r3", "r4"]);
        assert_eq!(ordered(&conn, &["params.depth asc"]), ["r3", "r2", "r1", "r4"]);
        assert_eq!(ordered(&conn, &["params.optimizer"]), ["r3", "r1", "r4", "r2"]);
        // Numbers before strings, missing last.
        assert_eq!(ordered(&conn, &["params.version"]), ["r2", "r1", "r3", "r4"]);
        assert_eq!(ordered(&conn, &["params.version desc"]), ["r2", "r3", "r1", "r4"]);
        assert_eq!(ordered(&conn, &["tags.team"]), ["r3", "r1", "r2", "r4"]);
        assert_eq!(ordered(&conn, &["tags.team desc"]), ["r1", "r2", "r3", "r4"]);
        assert_eq!(ordered(&conn, &["end_time desc"]), ["r1", "r4", "r2", "r3"]);
        assert_eq!(ordered(&conn, &["end_time"]), ["r2", "r4", "r1", "r3"]);
        assert_eq!(ordered(&conn, &["name"]), ["r1", "r2", "r3", "r4"]);
        assert_eq!(ordered(&conn, &["group desc", "start_time"]), ["r3", "r4", "r1", "r2"]);
        assert_eq!(ordered(&conn, &["tags.team desc", "metrics.val_loss desc"]), ["r2", "r1", "r3", "r4"]);
        assert_eq!(ordered(&conn, &["duration"]), ["r4", "r2", "r1", "r3"]);
    }
    #[test]
    fn pagination() {
        let conn = fixture();
        assert_eq!(search_page(&conn, Some(1), "", &[], 2, 0), ["r4", "r3"]);
        assert_eq!(search_page(&conn, Some(1), "", &[], 2, 2), ["r2", "r1"]);
        assert!(search_page(&conn, Some(1), "", &[], 2, 4).is_empty());
        assert_eq!(search_page(&conn, Some(1), "", &["metrics.val_loss desc"], 3, 1), ["r1", "r3", "r4"]);
        assert!(search_page(&conn, Some(1), "", &[], 0, 0).is_empty());
        assert!(search_page(&conn, Some(1), "", &[], 10, u64::MAX).is_empty());
    }
    #[test]
    fn user_text_is_bound_never_interpolated() {
        let conn = fixture();
        let query = build_search(
            Dialect::Sqlite,
            Some(1),
            "tags.`x') OR 1=1 --` = 'y'' OR ''1''=''1' or name = \"a\"\"b\"",
            &[],
            10,
            0,
        )
        .unwrap();
        assert!(!query.sql.contains("1=1"), "{}", query.sql);
        assert!(!query.sql.contains("a\"b"), "{}", query.sql);
        assert!(query.params.contains(&Value::Text("x') OR 1=1 --".to_owned())));
        assert!(query.params.contains(&Value::Text("y' OR '1'='1".to_owned())));
        assert!(query.params.contains(&Value::Text("a\"b".to_owned())));
        assert!(execute(&conn, &query).is_empty());
        let ordered =
            build_search(Dialect::Sqlite, None, "", &["metrics.`a; DROP TABLE runs` desc".to_owned()], 10, 0).unwrap();
        assert!(!ordered.sql.contains("DROP"), "{}", ordered.sql);
        assert_eq!(execute(&conn, &ordered), ["r1", "r2", "r3", "r4", "r6"]);
    }
    /// `count` comparisons joined by `or`, each on its own tag key so none is folded away.
    fn or_chain(count: usize) -> String {
        (0..count).map(|i| format!("tags.k{i} = 'v{i}'")).collect::<Vec<_>>().join(" or ")
    }
    #[test]
    fn filters_at_each_limit_compile_and_run_in_sqlite() {
        let conn = fixture();
        // The most comparisons, every one a correlated EXISTS, in one long `or` chain and in one `and` chain.
        assert!(ids(&conn, &or_chain(MAX_FILTER_COMPARISONS)).is_empty());
        let and_chain = (0..MAX_FILTER_COMPARISONS).map(|_| "tags.team like 'vis%'").collect::<Vec<_>>().join(" and ");
        assert_eq!(ids(&conn, &and_chain), ["r2", "r1"]);
        // The deepest nesting, `not` and parentheses (an odd number of `not`), with the most comparisons inside.
        let pairs = MAX_FILTER_NESTING / 2 - 1;
        let nested = format!("{}(({})){}", "not (".repeat(pairs), or_chain(MAX_FILTER_COMPARISONS), ")".repeat(pairs));
        assert_eq!(ids(&conn, &nested), ["r4", "r3", "r2", "r1"]);
        // The longest pattern of the longest filter, made of characters GLOB must escape (three bytes each).
        let prefix = "name like '";
        let pattern = "*".repeat(MAX_FILTER_BYTES - prefix.len() - 1);
        let longest = format!("{prefix}{pattern}'");
        assert_eq!(longest.len(), MAX_FILTER_BYTES);
        assert!(ids(&conn, &longest).is_empty());
        let longest_ilike = format!("name ilike '{}'", "%".repeat(MAX_FILTER_BYTES - 13));
        assert_eq!(longest_ilike.len(), MAX_FILTER_BYTES);
        assert_eq!(ids(&conn, &longest_ilike).len(), 4);
        // The most values a filter of that length can list.
        let values = "1,".repeat((MAX_FILTER_BYTES - 40) / 2);
        let listed = format!("params.depth in ({values}1)");
        assert!(listed.len() <= MAX_FILTER_BYTES);
        assert!(ids(&conn, &listed).is_empty());
        // Huge numbers and long strings are ordinary values.
        assert!(ids(
            &conn,
            "metrics.val_loss > 1e308 or params.depth = 99999999999999999999999 or start_time < -9223372036854775808"
        )
        .is_empty());
        assert!(ids(&conn, &format!("notes = '{}'", "n".repeat(MAX_FILTER_BYTES - 20))).is_empty());
        // The most order-by items, each one a join.
        let order: Vec<String> = (0..MAX_ORDER_BY_ITEMS).map(|i| format!("params.p{i} desc")).collect();
        let order: Vec<&str> = order.iter().map(String::as_str).collect();
        assert_eq!(ordered(&conn, &order), ["r1", "r2", "r3", "r4"]);
    }
    #[test]
    fn filters_past_each_limit_are_refused_naming_the_limit() {
        let error = filter_error(&or_chain(MAX_FILTER_COMPARISONS + 1));
        assert_eq!(error.field, FILTER);
        assert!(error.reason.contains(&format!("at most {MAX_FILTER_COMPARISONS} comparisons")), "{error:?}");
        let thousand = filter_error(&vec!["id = 'x'"; 1000].join(" or "));
        assert_eq!(thousand.field, FILTER);
        assert!(thousand.reason.contains(&format!("at most {MAX_FILTER_COMPARISONS} comparisons")), "{thousand:?}");
        // A longer chain of a thousand is refused for its length first.
        let thousand = filter_error(&or_chain(1000));
        assert_eq!(thousand.field, FILTER);
        assert!(thousand.reason.contains(&format!("at most {MAX_FILTER_BYTES} bytes")), "{thousand:?}");

        let over_nested =
            format!("{}status = 'x'{}", "(".repeat(MAX_FILTER_NESTING + 1), ")".repeat(MAX_FILTER_NESTING + 1));
        let error = filter_error(&over_nested);
        assert_eq!(error.field, FILTER);
        assert!(error.reason.contains(&format!("at most {MAX_FILTER_NESTING}")), "{error:?}");
        let at_limit = format!("{}status = 'x'{}", "(".repeat(MAX_FILTER_NESTING), ")".repeat(MAX_FILTER_NESTING));
        assert!(build_search(Dialect::Sqlite, Some(1), &at_limit, &[], 10, 0).is_ok());

        let too_long = format!("name = '{}'", "n".repeat(MAX_FILTER_BYTES));
        let error = filter_error(&too_long);
        assert_eq!(error.field, FILTER);
        assert!(
            error.reason.contains(&format!("at most {MAX_FILTER_BYTES} bytes, got {}", too_long.len())),
            "{error:?}"
        );
        let exactly = format!("name = '{}'", "n".repeat(MAX_FILTER_BYTES - 9));
        assert_eq!(exactly.len(), MAX_FILTER_BYTES);
        assert!(build_search(Dialect::Sqlite, Some(1), &exactly, &[], 10, 0).is_ok());

        let item = format!("params.`{}` desc", "k".repeat(MAX_ORDER_BY_ITEM_BYTES));
        let error = order_error(&["name", &item]);
        assert_eq!(error.field, ORDER_BY);
        assert!(
            error.reason.contains(&format!("item 2 may have at most {MAX_ORDER_BY_ITEM_BYTES} bytes")),
            "{error:?}"
        );
        let item = format!("params.`{}`", "k".repeat(MAX_ORDER_BY_ITEM_BYTES - 9));
        assert_eq!(item.len(), MAX_ORDER_BY_ITEM_BYTES);
        assert!(build_search(Dialect::Sqlite, Some(1), "", &[item], 10, 0).is_ok());
    }
}
