//! SQL text for a planned search, in either dialect: one writer, with what differs between the
//! databases in [`sqlite`] and [`postgres`]. Both answer the same:
//!
//! - SQLite: `like` is `GLOB` over a translated pattern, `ilike` is `LIKE … ESCAPE '\'` (which folds ASCII case
//!   only), now is `julianday('now')`, and text compares with the default `BINARY` collation.
//! - PostgreSQL: `like` is `LIKE … ESCAPE '\'`, `ilike` is `LIKE` over both sides folded with
//!   `translate(…, 'A…Z', 'a…z')` (ASCII only, unlike `ILIKE`, which folds by locale), now is
//!   `statement_timestamp()`, and text ordered or compared with `<`/`>` names `COLLATE "C"` so it goes by bytes
//!   whatever the database's locale.
//! - In both, conditions are booleans (`TRUE`, `FALSE`, `COALESCE(…, FALSE)`), `!=` on params is
//!   `IS DISTINCT FROM`, a number written with a fraction is bound as `CAST(? AS DOUBLE PRECISION)` (PostgreSQL
//!   would type a bare parameter after the integer column it meets), and missing values are kept last by an
//!   explicit `… IS NULL` sort term before each value.

mod postgres;
mod sqlite;

use super::plan::{
    Alias, Binding, Column, CompareOp, Condition, KeyedRow, Operand, OrderTerm, PatternPiece, SearchPlan, Slot, Test,
};
use crate::db::{Dialect, Value};

/// SQL selecting `runs.id`, with numbered placeholders `?1..?N` bound to `params` in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SearchQuery {
    pub(crate) sql: String,
    pub(crate) params: Vec<Value>,
}

/// What a dialect writes its own way.
trait DialectSql {
    /// Milliseconds since the Unix epoch, as one value for the whole statement.
    fn now_ms(&self) -> &'static str;

    /// What follows a text expression that is ordered or compared with `<`/`>`, so it goes by bytes (code points).
    fn bytewise(&self) -> &'static str;

    /// `column` matching the pattern bound to `placeholder`, as [`DialectSql::pattern`] wrote it.
    fn like(&self, column: &str, placeholder: &str, case_insensitive: bool) -> String;

    /// The text bound for a `like` pattern.
    fn pattern(&self, pieces: &[PatternPiece], case_insensitive: bool) -> String;
}

fn dialect_sql(dialect: Dialect) -> &'static dyn DialectSql {
    match dialect {
        Dialect::Sqlite => &sqlite::Sqlite,
        Dialect::Postgres => &postgres::Postgres,
    }
}

/// The query selecting the id and revision of each run the plan matches, in its order, one page when it has one.
pub(crate) fn write_search(dialect: Dialect, plan: &SearchPlan) -> SearchQuery {
    let writer = Writer { dialect: dialect_sql(dialect) };
    let order = plan.order.iter().map(|term| writer.order_term(term)).collect::<Vec<_>>().join(", ");
    let mut sql = format!(
        "SELECT runs.id, runs.revision FROM runs{} WHERE {} ORDER BY {order}",
        writer.joins(&plan.joins),
        writer.conditions(&plan.conditions),
    );
    if let Some(page) = plan.page {
        sql.push_str(&format!(" LIMIT {} OFFSET {}", placeholder(page.limit), placeholder(page.offset)));
    }
    SearchQuery { sql, params: writer.params(&plan.bindings) }
}

/// The query counting the runs the plan matches.
pub(crate) fn write_count(dialect: Dialect, plan: &SearchPlan) -> SearchQuery {
    let writer = Writer { dialect: dialect_sql(dialect) };
    let sql =
        format!("SELECT COUNT(*) FROM runs{} WHERE {}", writer.joins(&plan.joins), writer.conditions(&plan.conditions));
    SearchQuery { sql, params: writer.params(&plan.bindings) }
}

/// The query selecting the ids of the runs the plan matches, in no order: a scope for other
/// queries to join.
pub(crate) fn write_ids(dialect: Dialect, plan: &SearchPlan) -> SearchQuery {
    let writer = Writer { dialect: dialect_sql(dialect) };
    let sql =
        format!("SELECT runs.id FROM runs{} WHERE {}", writer.joins(&plan.joins), writer.conditions(&plan.conditions));
    SearchQuery { sql, params: writer.params(&plan.bindings) }
}

/// The pattern for `LIKE … ESCAPE '\'`.
fn like_pattern(pieces: &[PatternPiece]) -> String {
    let mut like = String::new();
    for piece in pieces {
        match piece {
            PatternPiece::AnySequence => like.push('%'),
            PatternPiece::AnyChar => like.push('_'),
            PatternPiece::Literal(c @ ('%' | '_' | '\\')) => {
                like.push('\\');
                like.push(*c);
            }
            PatternPiece::Literal(c) => like.push(*c),
        }
    }
    like
}

fn placeholder(slot: Slot) -> String {
    format!("?{}", slot.number())
}

fn operand(operand: &Operand) -> String {
    if operand.as_double {
        format!("CAST({} AS DOUBLE PRECISION)", placeholder(operand.slot))
    } else {
        placeholder(operand.slot)
    }
}

fn operands(operands: &[Operand]) -> String {
    operands.iter().map(operand).collect::<Vec<_>>().join(", ")
}

fn alias(alias: Alias) -> String {
    match alias {
        Alias::Metric => "m".to_owned(),
        Alias::Param => "p".to_owned(),
        Alias::Tag => "t".to_owned(),
        Alias::Order(index) => format!("o{index}"),
    }
}

fn compare_op(op: CompareOp) -> &'static str {
    match op {
        CompareOp::Eq => "=",
        CompareOp::Ne => "!=",
        CompareOp::Lt => "<",
        CompareOp::Le => "<=",
        CompareOp::Gt => ">",
        CompareOp::Ge => ">=",
    }
}

fn not(negated: bool) -> &'static str {
    if negated {
        "NOT "
    } else {
        ""
    }
}

struct Writer {
    dialect: &'static dyn DialectSql,
}

impl Writer {
    fn params(&self, bindings: &[Binding]) -> Vec<Value> {
        bindings
            .iter()
            .map(|binding| match binding {
                Binding::Value(value) => value.clone(),
                Binding::Pattern { pieces, case_insensitive } => {
                    Value::Text(self.dialect.pattern(pieces, *case_insensitive))
                }
            })
            .collect()
    }

    fn column(&self, column: &Column) -> String {
        match column {
            Column::Runs(name) => format!("runs.{name}"),
            Column::Duration => format!("(COALESCE(runs.end_ms, {}) - runs.start_ms)", self.dialect.now_ms()),
            Column::Keyed { alias: table, name } => format!("{}.{name}", alias(*table)),
            Column::Job(name) => format!("(SELECT run_jobs.{name} FROM run_jobs WHERE run_jobs.run_id = runs.id)"),
        }
    }

    fn collation(&self, bytewise: bool) -> &'static str {
        if bytewise {
            self.dialect.bytewise()
        } else {
            ""
        }
    }

    fn joins(&self, joins: &[KeyedRow]) -> String {
        joins
            .iter()
            .map(|row| {
                let alias = alias(row.alias);
                format!(
                    " LEFT JOIN {} {alias} ON {alias}.run_id = runs.id AND {alias}.key = {}",
                    row.table,
                    placeholder(row.key)
                )
            })
            .collect()
    }

    fn conditions(&self, conditions: &[Condition]) -> String {
        if conditions.is_empty() {
            "TRUE".to_owned()
        } else {
            conditions.iter().map(|condition| self.condition(condition)).collect::<Vec<_>>().join(" AND ")
        }
    }

    fn condition(&self, condition: &Condition) -> String {
        match condition {
            Condition::Deleted(deleted) => format!("runs.deleted = {}", i64::from(*deleted)),
            Condition::InProject(project) => format!("runs.project_id = {}", placeholder(*project)),
            Condition::InProjects { projects, negated } => {
                let projects = projects.iter().map(|slot| placeholder(*slot)).collect::<Vec<_>>().join(", ");
                format!("runs.project_id {}IN ({projects})", not(*negated))
            }
            Condition::Never => "FALSE".to_owned(),
            Condition::Any(conditions) => self.group(conditions, " OR "),
            Condition::All(conditions) => self.group(conditions, " AND "),
            Condition::Not(condition) => format!("(NOT {})", self.condition(condition)),
            Condition::HasRow { row, test } => {
                let alias = alias(row.alias);
                let test = test.as_ref().map(|test| format!(" AND ({})", self.test(test))).unwrap_or_default();
                format!(
                    "EXISTS (SELECT 1 FROM {} {alias} WHERE {alias}.run_id = runs.id AND {alias}.key = {}{test})",
                    row.table,
                    placeholder(row.key)
                )
            }
            Condition::IsNull { column, negated } => format!("({} IS {}NULL)", self.column(column), not(*negated)),
            Condition::Holds { test, nullable: true } => format!("COALESCE(({}), FALSE)", self.test(test)),
            Condition::Holds { test, nullable: false } => format!("({})", self.test(test)),
        }
    }

    /// Conditions joined, parenthesised so the group can be nested anywhere.
    fn group(&self, conditions: &[Condition], separator: &str) -> String {
        let parts = conditions.iter().map(|condition| self.condition(condition)).collect::<Vec<_>>();
        format!("({})", parts.join(separator))
    }

    fn test(&self, test: &Test) -> String {
        match test {
            Test::Compare { column, op, operand: value, bytewise } => {
                format!("{}{} {} {}", self.column(column), self.collation(*bytewise), compare_op(*op), operand(value))
            }
            Test::DistinctFrom { column, operand: value } => {
                format!("{} IS DISTINCT FROM {}", self.column(column), operand(value))
            }
            Test::In { column, negated, operands: values } => {
                format!("{} {}IN ({})", self.column(column), not(*negated), operands(values))
            }
            Test::ParamIn { number, text, negated, numbers, texts } => {
                let mut alternatives = Vec::new();
                if !numbers.is_empty() {
                    alternatives.push(format!("COALESCE({} IN ({}), FALSE)", self.column(number), operands(numbers)));
                }
                if !texts.is_empty() {
                    alternatives.push(format!("{} IN ({})", self.column(text), operands(texts)));
                }
                format!("{}({})", not(*negated), alternatives.join(" OR "))
            }
            Test::Like { column, negated, case_insensitive, pattern } => {
                let test = self.dialect.like(&self.column(column), &placeholder(*pattern), *case_insensitive);
                if *negated {
                    format!("NOT ({test})")
                } else {
                    test
                }
            }
        }
    }

    fn order_term(&self, term: &OrderTerm) -> String {
        match term {
            OrderTerm::MissingLast(column) => format!("{} IS NULL", self.column(column)),
            OrderTerm::By { column, bytewise, descending } => {
                let direction = if *descending { "DESC" } else { "ASC" };
                format!("{}{} {direction}", self.column(column), self.collation(*bytewise))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::build_search;
    use crate::search::plan::Page;

    /// Deleted runs outside project 3 with a tag `t` or no param `p`, by `t`, one page.
    fn hand_made_plan() -> SearchPlan {
        let tag = Column::Keyed { alias: Alias::Tag, name: "value" };
        let order_tag = Column::Keyed { alias: Alias::Order(0), name: "value" };
        SearchPlan {
            joins: vec![KeyedRow { table: "tags", alias: Alias::Order(0), key: Slot(1) }],
            conditions: vec![
                Condition::Deleted(true),
                Condition::InProjects { projects: vec![Slot(2)], negated: true },
                Condition::Any(vec![
                    Condition::HasRow {
                        row: KeyedRow { table: "tags", alias: Alias::Tag, key: Slot(4) },
                        test: Some(Test::Like {
                            column: tag,
                            negated: false,
                            case_insensitive: true,
                            pattern: Slot(3),
                        }),
                    },
                    Condition::Not(Box::new(Condition::HasRow {
                        row: KeyedRow { table: "params", alias: Alias::Param, key: Slot(5) },
                        test: None,
                    })),
                    Condition::Holds {
                        test: Test::Compare {
                            column: Column::Duration,
                            op: CompareOp::Ge,
                            operand: Operand { slot: Slot(6), as_double: true },
                            bytewise: false,
                        },
                        nullable: false,
                    },
                ]),
            ],
            order: vec![
                OrderTerm::MissingLast(order_tag.clone()),
                OrderTerm::By { column: order_tag, bytewise: true, descending: false },
            ],
            page: Some(Page { limit: Slot(7), offset: Slot(8) }),
            bindings: vec![
                Binding::Value(Value::from("t")),
                Binding::Value(Value::Int(3)),
                Binding::Pattern {
                    pieces: vec![PatternPiece::Literal('A'), PatternPiece::AnySequence],
                    case_insensitive: true,
                },
                Binding::Value(Value::from("t")),
                Binding::Value(Value::from("p")),
                Binding::Value(Value::Real(1.5)),
                Binding::Value(Value::Int(10)),
                Binding::Value(Value::Int(0)),
            ],
        }
    }

    #[test]
    fn one_writer_for_both_dialects() {
        let plan = hand_made_plan();
        let sqlite = write_search(Dialect::Sqlite, &plan);
        assert_eq!(
            sqlite.sql,
            "SELECT runs.id, runs.revision FROM runs LEFT JOIN tags o0 ON o0.run_id = runs.id AND o0.key = ?1 \
             WHERE runs.deleted = 1 AND runs.project_id NOT IN (?2) AND \
             (EXISTS (SELECT 1 FROM tags t WHERE t.run_id = runs.id AND t.key = ?4 AND (t.value LIKE ?3 ESCAPE '\\')) \
             OR (NOT EXISTS (SELECT 1 FROM params p WHERE p.run_id = runs.id AND p.key = ?5)) \
             OR ((COALESCE(runs.end_ms, CAST((julianday('now') - 2440587.5) * 86400000.0 AS BIGINT)) - runs.start_ms) \
             >= CAST(?6 AS DOUBLE PRECISION))) \
             ORDER BY o0.value IS NULL, o0.value ASC LIMIT ?7 OFFSET ?8"
        );
        assert_eq!(sqlite.params[2], Value::from("A%"));
        let postgres = write_search(Dialect::Postgres, &plan);
        assert!(
            postgres.sql.contains("ORDER BY o0.value IS NULL, o0.value COLLATE \"C\" ASC LIMIT"),
            "{}",
            postgres.sql
        );
        assert!(postgres.sql.contains("AND (translate(t.value, "), "{}", postgres.sql);
        assert_eq!(postgres.params[2], Value::from("a%"));
        assert_eq!(postgres.params.len(), plan.bindings.len());

        let count = write_count(Dialect::Postgres, &SearchPlan { joins: Vec::new(), ..plan });
        assert!(count.sql.starts_with("SELECT COUNT(*) FROM runs WHERE runs.deleted = 1 AND "), "{}", count.sql);
        assert!(!count.sql.contains("LIMIT") && !count.sql.contains("ORDER"), "{}", count.sql);
    }
    #[test]
    fn both_dialects_accept_and_refuse_the_same_searches_binding_as_many_values() {
        let filters = [
            "",
            "metrics.val_loss < 0.3 and params.lr = 0.001 and status = 'finished'",
            "params.version not in (1, '2') or tags.team ilike 'V%' or not end_time > 0",
            "metrics.x < 'a'",
            "name like 5",
            "status in ()",
        ];
        for filter in filters {
            let sqlite = build_search(Dialect::Sqlite, None, filter, &["params.x".to_owned()], 5, 1);
            let postgres = build_search(Dialect::Postgres, None, filter, &["params.x".to_owned()], 5, 1);
            match (sqlite, postgres) {
                (Ok(sqlite), Ok(postgres)) => assert_eq!(sqlite.params.len(), postgres.params.len(), "{filter}"),
                (Err(sqlite), Err(postgres)) => assert_eq!(sqlite, postgres),
                (sqlite, postgres) => panic!("{filter}: {sqlite:?} versus {postgres:?}"),
            }
        }
    }
}
