//! PostgreSQL's forms: `like` as `LIKE`, `ilike` as `LIKE` over ASCII-folded text (`ILIKE` would fold by
//! locale), now from `statement_timestamp()`, and text by bytes under `COLLATE "C"`.

use super::{like_pattern, DialectSql, PatternPiece};

pub(super) struct Postgres;

impl DialectSql for Postgres {
    fn now_ms(&self) -> &'static str {
        "CAST(FLOOR(EXTRACT(EPOCH FROM statement_timestamp()) * 1000) AS BIGINT)"
    }

    fn bytewise(&self) -> &'static str {
        " COLLATE \"C\""
    }

    fn like(&self, column: &str, placeholder: &str, case_insensitive: bool) -> String {
        if case_insensitive {
            format!(
                "translate({column}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') LIKE {placeholder} ESCAPE '\\'"
            )
        } else {
            format!("{column} LIKE {placeholder} ESCAPE '\\'")
        }
    }

    /// The pattern of an `ilike` is folded here, as the value is in SQL.
    fn pattern(&self, pieces: &[PatternPiece], case_insensitive: bool) -> String {
        let pattern = like_pattern(pieces);
        if case_insensitive {
            pattern.to_ascii_lowercase()
        } else {
            pattern
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Dialect, Value};
    use crate::search::{build_count_in, build_search, Lifecycle, RunScope, SearchQuery};
    #[test]
    fn ilike_folds_ascii_letters_of_the_pattern_only() {
        use PatternPiece::{AnySequence, Literal};
        let pieces = [Literal('É'), Literal('A'), Literal('_'), AnySequence];
        assert_eq!(Postgres.pattern(&pieces, false), "ÉA\\_%");
        assert_eq!(Postgres.pattern(&pieces, true), "Éa\\_%");
    }

    fn postgres(filter: &str, order_by: &[&str]) -> SearchQuery {
        let order_by: Vec<String> = order_by.iter().map(|s| s.to_string()).collect();
        build_search(Dialect::Postgres, Some(1), filter, &order_by, 10, 0).unwrap()
    }
    #[test]
    fn postgres_queries_use_postgres_forms() {
        let filter = "name like 'res%' and not name ilike 'VIT\\_%' and params.version in (1, 1.5, '2') \
                      and params.optimizer != 'adam' and parent_id != 'r1' and duration > 1.5 and tags.team < 'z' \
                      and user = 'alice'";
        let order = ["params.version desc", "tags.team", "name", "end_time", "metrics.val_loss desc", "duration"];
        let query = postgres(filter, &order);
        // Placeholders unnumbered: the order's keys are bound before the filter's values.
        let sql = &query
            .sql
            .split('?')
            .map(|part| part.trim_start_matches(|c: char| c.is_ascii_digit()))
            .collect::<Vec<_>>()
            .join("?");
        for sqlite_only in ["GLOB", "IFNULL", "julianday", " IS NOT ?", "runs.user", "AS INTEGER", "WHERE 1", "ILIKE"] {
            assert!(!sql.contains(sqlite_only), "{sqlite_only} in {sql}");
        }
        for form in [
            "runs.name LIKE ? ESCAPE '\\'",
            "NOT (translate(runs.name, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') LIKE ? ESCAPE '\\')",
            "COALESCE(p.num IN (?, CAST(? AS DOUBLE PRECISION)), FALSE) OR p.value IN (?)",
            "p.value IS DISTINCT FROM ?",
            "COALESCE((runs.parent_id != ?), FALSE)",
            "(COALESCE(runs.end_ms, CAST(FLOOR(EXTRACT(EPOCH FROM statement_timestamp()) * 1000) AS BIGINT)) - runs.start_ms) > CAST(? AS DOUBLE PRECISION)",
            "t.value COLLATE \"C\" < ?",
            "runs.\"user\" = ?",
            "o0.run_id IS NULL, o0.num IS NULL, o0.num DESC, o0.value COLLATE \"C\" DESC, ",
            "o1.value IS NULL, o1.value COLLATE \"C\" ASC, runs.name COLLATE \"C\" ASC, runs.end_ms IS NULL, runs.end_ms ASC, ",
            "o4.last IS NULL, o4.last DESC, (COALESCE(runs.end_ms, ",
            "runs.start_ms) ASC, runs.id COLLATE \"C\" ASC LIMIT ?",
        ] {
            assert!(sql.contains(form), "{form} not in {sql}");
        }
        // The ilike pattern is folded here, the value in SQL; the like pattern keeps its case.
        assert_eq!(query.params[4], Value::Text("res%".to_owned()));
        assert_eq!(query.params[5], Value::Text("vit\\_%".to_owned()));
        let sqlite = build_search(Dialect::Sqlite, Some(1), filter, &order.map(String::from), 10, 0).unwrap();
        assert_eq!(sqlite.params.len(), query.params.len());
        assert!(
            sqlite.sql.contains("runs.name GLOB ?5") && sqlite.sql.contains("runs.name LIKE ?6 ESCAPE"),
            "{}",
            sqlite.sql
        );
        assert!(sqlite.sql.contains("julianday('now')") && !sqlite.sql.contains("COLLATE"), "{}", sqlite.sql);

        // Conditions are booleans, never integers.
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let everything = build_count_in(dialect, RunScope::All, Lifecycle::All, " ").unwrap();
            assert_eq!(everything.sql, "SELECT COUNT(*) FROM runs WHERE TRUE");
            let nothing = build_search(dialect, RunScope::Projects(Vec::new()), "", &[], 10, 0).unwrap();
            assert!(nothing.sql.contains("WHERE runs.deleted = 0 AND FALSE ORDER BY"), "{}", nothing.sql);
        }
        let deleted = build_count_in(Dialect::Postgres, RunScope::AllBut(vec![3]), Lifecycle::Deleted, "").unwrap();
        assert_eq!(deleted.sql, "SELECT COUNT(*) FROM runs WHERE runs.deleted = 1 AND runs.project_id NOT IN (?1)");
        assert_eq!(deleted.params, [Value::Int(3)]);
    }
}
