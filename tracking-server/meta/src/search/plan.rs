//! The plan of a search, the same for every dialect: the tables and columns each comparison and order-by
//! item reads, how each reaches the run's rows, and the values bound, numbered in the order they are bound.
//!
//! A comparison on a metric, param or tag is a correlated `EXISTS` over the run's row for the key, and an
//! order-by item on one is a `LEFT JOIN` on that row: both look the row up by the table's `(run_id, key)`
//! primary key, so no filter or order scans a per-run table.

use super::error::{SearchError, FILTER};
use super::grammar::ast::{self, Attribute, Field, Filter, MetricColumn, Number, SearchRequest};
use crate::db::Value;

pub(crate) use super::grammar::ast::{CompareOp, PatternPiece};

/// SQLite's bundled build accepts 32766 parameters; leave room for the fixed ones.
const MAX_BOUND_VALUES: usize = 32_000;

/// The projects a search looks in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunScope {
    All,
    Project(i64),
    Projects(Vec<i64>),
    AllBut(Vec<i64>),
}

impl From<Option<i64>> for RunScope {
    fn from(project: Option<i64>) -> Self {
        project.map_or(RunScope::All, RunScope::Project)
    }
}

/// Which runs a search looks at: live ones (the default), deleted ones, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    Active,
    Deleted,
    All,
}

/// A numbered placeholder; the first value bound is number 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(pub(super) usize);

impl Slot {
    pub(crate) fn number(self) -> usize {
        self.0
    }
}

/// A value to bind. A `like` pattern is written out by the dialect, which decides how it is matched.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Binding {
    Value(Value),
    Pattern { pieces: Vec<PatternPiece>, case_insensitive: bool },
}

/// The name a per-run table goes by in the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alias {
    /// `metric_summaries` in a comparison.
    Metric,
    /// `params` in a comparison.
    Param,
    /// `tags` in a comparison.
    Tag,
    /// The table joined for the order-by item at this index.
    Order(usize),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Column {
    /// A column of `runs`, named as SQL names it.
    Runs(&'static str),
    /// How long a run ran: up to its end, or up to now while it runs.
    Duration,
    /// A column of the run's row in `run_jobs` (NULL without one).
    Job(&'static str),
    /// A column of a per-run table.
    Keyed { alias: Alias, name: &'static str },
}

/// A run's row for one key in a per-run table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeyedRow {
    pub(crate) table: &'static str,
    pub(crate) alias: Alias,
    pub(crate) key: Slot,
}

/// A bound value a column is compared with. A real is cast, as its column may be an integer one
/// (PostgreSQL would take the parameter for a BIGINT); an integer takes the type of the column it meets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Operand {
    pub(crate) slot: Slot,
    pub(crate) as_double: bool,
}

/// A test of one column (or, for a param in a list, of its two).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Test {
    /// `bytewise`: text compared by order, which goes by bytes in every dialect.
    Compare {
        column: Column,
        op: CompareOp,
        operand: Operand,
        bytewise: bool,
    },
    /// Differs, NULL included: a param of another type (a NULL number) differs from any number.
    DistinctFrom {
        column: Column,
        operand: Operand,
    },
    In {
        column: Column,
        negated: bool,
        operands: Vec<Operand>,
    },
    /// A param in a list: the numbers against its number, the strings against its text.
    ParamIn {
        number: Column,
        text: Column,
        negated: bool,
        numbers: Vec<Operand>,
        texts: Vec<Operand>,
    },
    Like {
        column: Column,
        negated: bool,
        case_insensitive: bool,
        pattern: Slot,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Condition {
    /// The run is deleted (true) or live (false).
    Deleted(bool),
    InProject(Slot),
    /// The run is in one of the projects, or with `negated` in none of them.
    InProjects {
        projects: Vec<Slot>,
        negated: bool,
    },
    /// No run matches.
    Never,
    Any(Vec<Condition>),
    All(Vec<Condition>),
    Not(Box<Condition>),
    /// The run has a row for the key, and when there is a test, that row passes it.
    HasRow {
        row: KeyedRow,
        test: Option<Test>,
    },
    /// A column of `runs` is NULL, or with `negated` is not.
    IsNull {
        column: Column,
        negated: bool,
    },
    /// A test of the run's own columns; with `nullable`, a NULL column fails it (even under `not`).
    Holds {
        test: Test,
        nullable: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OrderTerm {
    /// Runs lacking the value after the others, whichever the direction.
    MissingLast(Column),
    By {
        column: Column,
        bytewise: bool,
        descending: bool,
    },
}

/// The placeholders of one page.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Page {
    pub(crate) limit: Slot,
    pub(crate) offset: Slot,
}

/// A search planned: the rows its order joins, its conditions (all must hold), its order ending with a
/// deterministic tiebreak, its page when it has one, and the values bound.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SearchPlan {
    pub(crate) joins: Vec<KeyedRow>,
    pub(crate) conditions: Vec<Condition>,
    pub(crate) order: Vec<OrderTerm>,
    pub(crate) page: Option<Page>,
    pub(crate) bindings: Vec<Binding>,
}

/// Plans a parsed search over the runs of `scope` in `lifecycle`. The order's keys are bound first, then the
/// projects, then the filter's values in the order they were written.
pub(crate) fn plan_search(
    scope: RunScope,
    lifecycle: Lifecycle,
    request: &SearchRequest,
) -> Result<SearchPlan, SearchError> {
    let mut planner = Planner::default();
    let mut joins = Vec::new();
    let mut order = Vec::new();
    for (index, item) in request.order.iter().enumerate() {
        let (join, terms) = planner.order_item(index, item);
        joins.extend(join);
        order.extend(terms);
    }

    let mut conditions = match lifecycle {
        Lifecycle::Active => vec![Condition::Deleted(false)],
        Lifecycle::Deleted => vec![Condition::Deleted(true)],
        Lifecycle::All => Vec::new(),
    };
    match scope {
        RunScope::All => {}
        RunScope::Project(id) => conditions.push(Condition::InProject(planner.bind_value(Value::Int(id)))),
        RunScope::Projects(ids) if ids.is_empty() => conditions.push(Condition::Never),
        RunScope::Projects(ids) => conditions.push(planner.in_projects(&ids, false)),
        RunScope::AllBut(ids) if ids.is_empty() => {}
        RunScope::AllBut(ids) => conditions.push(planner.in_projects(&ids, true)),
    }
    if let Some(filter) = &request.filter {
        conditions.push(planner.filter(filter));
    }
    if planner.bindings.len() > MAX_BOUND_VALUES {
        return Err(SearchError {
            field: FILTER,
            reason: format!("too many values: at most {MAX_BOUND_VALUES} keys and values in all"),
        });
    }

    if order.is_empty() {
        order.push(OrderTerm::By { column: Column::Runs("start_ms"), bytewise: false, descending: true });
    }
    order.push(OrderTerm::By { column: Column::Runs("id"), bytewise: true, descending: false });
    Ok(SearchPlan { joins, conditions, order, page: None, bindings: planner.bindings })
}

impl SearchPlan {
    /// Binds one page: at most `limit` runs after the first `offset`.
    pub(crate) fn paged(mut self, limit: u32, offset: u64) -> Self {
        let mut bind = |value| {
            self.bindings.push(Binding::Value(value));
            Slot(self.bindings.len())
        };
        let limit = bind(Value::Int(i64::from(limit)));
        let offset = bind(Value::Int(i64::try_from(offset).unwrap_or(i64::MAX)));
        self.page = Some(Page { limit, offset });
        self
    }
}

const METRIC_SUMMARIES: &str = "metric_summaries";
const PARAMS: &str = "params";
const TAGS: &str = "tags";

fn metric_column_name(column: MetricColumn) -> &'static str {
    match column {
        MetricColumn::Last => "last",
        MetricColumn::Min => "min",
        MetricColumn::Max => "max",
        MetricColumn::Mean => "mean",
        MetricColumn::Step => "last_step",
    }
}

fn attribute_column(attribute: Attribute) -> Column {
    Column::Runs(match attribute {
        Attribute::Status => "status",
        Attribute::Name => "name",
        // A reserved word in PostgreSQL.
        Attribute::User => "\"user\"",
        Attribute::Host => "host",
        Attribute::Group => "group_name",
        Attribute::Id => "id",
        Attribute::ParentId => "parent_id",
        Attribute::Notes => "notes",
        Attribute::StartTime => "start_ms",
        Attribute::EndTime => "end_ms",
        Attribute::Duration => return Column::Duration,
        Attribute::Attempts => return Column::Job("attempts"),
        Attribute::Gpus => return Column::Job("gpus"),
        Attribute::WorldSize => return Column::Job("world_size"),
        Attribute::Nodes => return Column::Job("node_count"),
        Attribute::LostUsd => return Column::Job("lost_usd"),
        Attribute::LostGpuHours => return Column::Job("lost_gpu_hours"),
        Attribute::StepsReplayed => return Column::Job("steps_replayed"),
    })
}

fn attribute_is_nullable(attribute: Attribute) -> bool {
    matches!(attribute, Attribute::ParentId | Attribute::EndTime)
        || matches!(attribute_column(attribute), Column::Job(_))
}

fn keyed(alias: Alias, name: &'static str) -> Column {
    Column::Keyed { alias, name }
}

#[derive(Default)]
struct Planner {
    bindings: Vec<Binding>,
}

impl Planner {
    fn bind(&mut self, binding: Binding) -> Slot {
        self.bindings.push(binding);
        Slot(self.bindings.len())
    }

    fn bind_value(&mut self, value: Value) -> Slot {
        self.bind(Binding::Value(value))
    }

    fn bind_operand(&mut self, operand: &ast::Operand) -> Operand {
        let (value, as_double) = match operand {
            ast::Operand::Number(Number::Int(integer)) => (Value::Int(*integer), false),
            ast::Operand::Number(Number::Real(real)) => (Value::Real(*real), true),
            ast::Operand::Text(text) => (Value::Text(text.clone()), false),
        };
        Operand { slot: self.bind_value(value), as_double }
    }

    fn in_projects(&mut self, ids: &[i64], negated: bool) -> Condition {
        let projects = ids.iter().map(|id| self.bind_value(Value::Int(*id))).collect();
        Condition::InProjects { projects, negated }
    }

    fn order_item(&mut self, index: usize, item: &ast::OrderItem) -> (Option<KeyedRow>, Vec<OrderTerm>) {
        let descending = item.descending;
        let alias = Alias::Order(index);
        let mut join = |table, key: &str| Some(self.keyed_row(table, alias, key));
        let by = |column, bytewise| OrderTerm::By { column, bytewise, descending };
        match &item.field {
            Field::Metric { column, key } => {
                let value = keyed(alias, metric_column_name(*column));
                (join(METRIC_SUMMARIES, key), vec![OrderTerm::MissingLast(value.clone()), by(value, false)])
            }
            // Numbers before strings: a string param has no number.
            Field::Param { key } => (
                join(PARAMS, key),
                vec![
                    OrderTerm::MissingLast(keyed(alias, "run_id")),
                    OrderTerm::MissingLast(keyed(alias, "num")),
                    by(keyed(alias, "num"), false),
                    by(keyed(alias, "value"), true),
                ],
            ),
            Field::Tag { key } => {
                let value = keyed(alias, "value");
                (join(TAGS, key), vec![OrderTerm::MissingLast(value.clone()), by(value, true)])
            }
            Field::Attribute(attribute) => {
                let value = attribute_column(*attribute);
                let mut terms = Vec::new();
                if attribute_is_nullable(*attribute) {
                    terms.push(OrderTerm::MissingLast(value.clone()));
                }
                terms.push(by(value, !attribute.is_numeric()));
                (None, terms)
            }
        }
    }

    fn filter(&mut self, filter: &Filter) -> Condition {
        match filter {
            Filter::Any(filters) => Condition::Any(filters.iter().map(|filter| self.filter(filter)).collect()),
            Filter::All(filters) => Condition::All(filters.iter().map(|filter| self.filter(filter)).collect()),
            Filter::Not(filter) => Condition::Not(Box::new(self.filter(filter))),
            Filter::Comparison(comparison) => self.comparison(comparison),
        }
    }

    /// A comparison's test binds its values before the key of the row it reads.
    fn comparison(&mut self, comparison: &ast::Comparison) -> Condition {
        let location = Location::of(&comparison.field);
        let is_param = matches!(comparison.field, Field::Param { .. });
        let value = location.value_column();
        let test = match &comparison.test {
            ast::Test::IsNull { negated } => return self.null_check(location, *negated),
            ast::Test::Compare { op, operand } => self.compare(value, *op, operand, is_param),
            ast::Test::In { negated, operands } if is_param => self.param_in(value, *negated, operands),
            ast::Test::In { negated, operands } => {
                let operands = operands.iter().map(|operand| self.bind_operand(operand)).collect();
                Test::In { column: value, negated: *negated, operands }
            }
            ast::Test::Like { negated, case_insensitive, pattern } => {
                let pattern =
                    self.bind(Binding::Pattern { pieces: pattern.clone(), case_insensitive: *case_insensitive });
                Test::Like { column: value, negated: *negated, case_insensitive: *case_insensitive, pattern }
            }
        };
        match location {
            Location::Row { table, alias, key, .. } => {
                Condition::HasRow { row: self.keyed_row(table, alias, key), test: Some(test) }
            }
            Location::Runs { nullable, .. } => Condition::Holds { test, nullable },
        }
    }

    fn keyed_row(&mut self, table: &'static str, alias: Alias, key: &str) -> KeyedRow {
        KeyedRow { table, alias, key: self.bind_value(Value::from(key)) }
    }

    /// `is null` on a key is the absence of its row: a metric whose last value is NaN (NULL) is present.
    fn null_check(&mut self, location: Location<'_>, negated: bool) -> Condition {
        match location {
            Location::Row { table, alias, key, .. } => {
                let presence = Condition::HasRow { row: self.keyed_row(table, alias, key), test: None };
                if negated {
                    presence
                } else {
                    Condition::Not(Box::new(presence))
                }
            }
            Location::Runs { column, .. } => Condition::IsNull { column, negated },
        }
    }

    /// A param compares its number with a number (or bool) and its text with a string.
    fn compare(&mut self, column: Column, op: CompareOp, operand: &ast::Operand, is_param: bool) -> Test {
        let is_number = matches!(operand, ast::Operand::Number(_));
        let column = if is_param && is_number { param_number() } else { column };
        let operand = self.bind_operand(operand);
        if is_param && op == CompareOp::Ne {
            Test::DistinctFrom { column, operand }
        } else {
            Test::Compare { column, op, operand, bytewise: op.orders() && !is_number }
        }
    }

    fn param_in(&mut self, text: Column, negated: bool, operands: &[ast::Operand]) -> Test {
        let mut numbers = Vec::new();
        let mut texts = Vec::new();
        for operand in operands {
            let bound = self.bind_operand(operand);
            match operand {
                ast::Operand::Number(_) => numbers.push(bound),
                ast::Operand::Text(_) => texts.push(bound),
            }
        }
        Test::ParamIn { number: param_number(), text, negated, numbers, texts }
    }
}

fn param_number() -> Column {
    keyed(Alias::Param, "num")
}

/// Where a compared field's value lives: a row of a per-run table, or a column of `runs`.
enum Location<'a> {
    Row { table: &'static str, alias: Alias, value: &'static str, key: &'a str },
    Runs { column: Column, nullable: bool },
}

impl<'a> Location<'a> {
    fn of(field: &'a Field) -> Self {
        match field {
            Field::Metric { column, key } => {
                Location::Row { table: METRIC_SUMMARIES, alias: Alias::Metric, value: metric_column_name(*column), key }
            }
            Field::Param { key } => Location::Row { table: PARAMS, alias: Alias::Param, value: "value", key },
            Field::Tag { key } => Location::Row { table: TAGS, alias: Alias::Tag, value: "value", key },
            Field::Attribute(attribute) => {
                Location::Runs { column: attribute_column(*attribute), nullable: attribute_is_nullable(*attribute) }
            }
        }
    }

    fn value_column(&self) -> Column {
        match self {
            Location::Row { alias, value, .. } => keyed(*alias, value),
            Location::Runs { column, .. } => column.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Dialect;
    use crate::search::build_search;
    use crate::search::fixture::{execute, insert_param, insert_summary, insert_tag, SCHEMA};
    use rusqlite::{params, params_from_iter, Connection};

    fn plan(scope: RunScope, filter: &str, order_by: &[&str]) -> SearchPlan {
        let order_by: Vec<String> = order_by.iter().map(|item| item.to_string()).collect();
        let request = crate::search::grammar::parse_search(filter, &order_by).unwrap();
        plan_search(scope, Lifecycle::Active, &request).unwrap()
    }

    fn text(value: &str) -> Binding {
        Binding::Value(Value::from(value))
    }

    fn operand(slot: usize) -> Operand {
        Operand { slot: Slot(slot), as_double: false }
    }

    #[test]
    fn order_keys_are_bound_first_then_projects_then_each_value_before_its_key() {
        let plan = plan(RunScope::Project(7), "tags.t = 'x' and params.p in (1, 'a', 2.5)", &["metrics.m desc"]);
        assert_eq!(
            plan.bindings,
            [
                text("m"),
                Binding::Value(Value::Int(7)),
                text("x"),
                text("t"),
                Binding::Value(Value::Int(1)),
                text("a"),
                Binding::Value(Value::Real(2.5)),
                text("p"),
            ]
        );
        assert_eq!(plan.joins, [KeyedRow { table: "metric_summaries", alias: Alias::Order(0), key: Slot(1) }]);
        assert_eq!(
            plan.conditions,
            [
                Condition::Deleted(false),
                Condition::InProject(Slot(2)),
                Condition::All(vec![
                    Condition::HasRow {
                        row: KeyedRow { table: "tags", alias: Alias::Tag, key: Slot(4) },
                        test: Some(Test::Compare {
                            column: keyed(Alias::Tag, "value"),
                            op: CompareOp::Eq,
                            operand: operand(3),
                            bytewise: false,
                        }),
                    },
                    Condition::HasRow {
                        row: KeyedRow { table: "params", alias: Alias::Param, key: Slot(8) },
                        test: Some(Test::ParamIn {
                            number: keyed(Alias::Param, "num"),
                            text: keyed(Alias::Param, "value"),
                            negated: false,
                            numbers: vec![operand(5), Operand { slot: Slot(7), as_double: true }],
                            texts: vec![operand(6)],
                        }),
                    },
                ]),
            ]
        );
        let last = keyed(Alias::Order(0), "last");
        assert_eq!(
            plan.order,
            [
                OrderTerm::MissingLast(last.clone()),
                OrderTerm::By { column: last, bytewise: false, descending: true },
                OrderTerm::By { column: Column::Runs("id"), bytewise: true, descending: false },
            ]
        );
        assert_eq!(plan.page, None);
    }

    #[test]
    fn params_compare_numbers_with_their_number_and_strings_with_their_text() {
        let test_of = |filter: &str| match &plan(RunScope::All, filter, &[]).conditions[1] {
            Condition::HasRow { test: Some(test), .. } => test.clone(),
            other => panic!("{filter}: {other:?}"),
        };
        assert_eq!(
            test_of("params.p != 1.5"),
            Test::DistinctFrom {
                column: keyed(Alias::Param, "num"),
                operand: Operand { slot: Slot(1), as_double: true }
            }
        );
        assert_eq!(
            test_of("params.p >= 'a'"),
            Test::Compare {
                column: keyed(Alias::Param, "value"),
                op: CompareOp::Ge,
                operand: operand(1),
                bytewise: true
            }
        );
        assert_eq!(
            test_of("params.p < true"),
            Test::Compare {
                column: keyed(Alias::Param, "num"),
                op: CompareOp::Lt,
                operand: operand(1),
                bytewise: false
            }
        );
        assert_eq!(
            test_of("tags.t not like 'a%'"),
            Test::Like { column: keyed(Alias::Tag, "value"), negated: true, case_insensitive: false, pattern: Slot(1) }
        );
    }

    #[test]
    fn null_checks_look_for_the_row_or_at_the_column() {
        let condition = |filter: &str| plan(RunScope::All, filter, &[]).conditions.remove(1);
        let tag_row = KeyedRow { table: "tags", alias: Alias::Tag, key: Slot(1) };
        assert_eq!(
            condition("tags.t is null"),
            Condition::Not(Box::new(Condition::HasRow { row: tag_row.clone(), test: None }))
        );
        assert_eq!(condition("tags.t is not null"), Condition::HasRow { row: tag_row, test: None });
        assert_eq!(
            condition("end_time is not null"),
            Condition::IsNull { column: Column::Runs("end_ms"), negated: true }
        );
        assert_eq!(
            condition("parent_id = 'x'"),
            Condition::Holds {
                test: Test::Compare {
                    column: Column::Runs("parent_id"),
                    op: CompareOp::Eq,
                    operand: operand(1),
                    bytewise: false,
                },
                nullable: true,
            }
        );
        assert!(matches!(condition("duration > 1"), Condition::Holds { nullable: false, .. }));
    }

    #[test]
    fn scopes_lifecycles_and_pages() {
        let request = SearchRequest { filter: None, order: Vec::new() };
        let everything = plan_search(RunScope::AllBut(Vec::new()), Lifecycle::All, &request).unwrap();
        assert!(everything.conditions.is_empty() && everything.bindings.is_empty());
        assert_eq!(
            everything.order,
            [
                OrderTerm::By { column: Column::Runs("start_ms"), bytewise: false, descending: true },
                OrderTerm::By { column: Column::Runs("id"), bytewise: true, descending: false },
            ]
        );
        let none = plan_search(RunScope::Projects(Vec::new()), Lifecycle::Deleted, &request).unwrap();
        assert_eq!(none.conditions, [Condition::Deleted(true), Condition::Never]);
        let others =
            plan_search(RunScope::AllBut(vec![3, 4]), Lifecycle::Active, &request).unwrap().paged(10, u64::MAX);
        assert_eq!(others.conditions[1], Condition::InProjects { projects: vec![Slot(1), Slot(2)], negated: true });
        assert_eq!(others.page, Some(Page { limit: Slot(3), offset: Slot(4) }));
        assert_eq!(others.bindings[2..], [Binding::Value(Value::Int(10)), Binding::Value(Value::Int(i64::MAX))]);
    }

    #[test]
    fn order_items_join_their_row_and_keep_missing_values_last() {
        let plan = plan(RunScope::All, "", &["params.p", "tags.t desc", "end_time", "name desc"]);
        assert_eq!(
            plan.joins.iter().map(|row| (row.table, row.alias)).collect::<Vec<_>>(),
            [("params", Alias::Order(0)), ("tags", Alias::Order(1)),]
        );
        let (p, t) = (|name| keyed(Alias::Order(0), name), |name| keyed(Alias::Order(1), name));
        assert_eq!(
            plan.order,
            [
                OrderTerm::MissingLast(p("run_id")),
                OrderTerm::MissingLast(p("num")),
                OrderTerm::By { column: p("num"), bytewise: false, descending: false },
                OrderTerm::By { column: p("value"), bytewise: true, descending: false },
                OrderTerm::MissingLast(t("value")),
                OrderTerm::By { column: t("value"), bytewise: true, descending: true },
                OrderTerm::MissingLast(Column::Runs("end_ms")),
                OrderTerm::By { column: Column::Runs("end_ms"), bytewise: false, descending: false },
                OrderTerm::By { column: Column::Runs("name"), bytewise: true, descending: true },
                OrderTerm::By { column: Column::Runs("id"), bytewise: true, descending: false },
            ]
        );
    }
    #[test]
    fn metric_filter_uses_the_primary_key_and_is_fast_over_ten_thousand_runs() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        for index in 0..10_000i64 {
            let id = format!("run{index:05}");
            conn.execute(
                "INSERT INTO runs (id, project_id, name, status, start_ms, updated_ms) VALUES (?1, 1, ?1, 'finished', ?2, 0)",
                params![id, index],
            )
            .unwrap();
            let loss = (index % 1000) as f64 / 1000.0;
            insert_summary(&conn, &id, "val_loss", Some(loss), index, Some(loss), Some(1.0));
            insert_summary(&conn, &id, "train_loss", Some(loss), index, Some(loss), Some(1.0));
            insert_param(
                &conn,
                &id,
                "lr",
                "float",
                &format!("{}", 0.001 * (index % 3) as f64),
                Some(0.001 * (index % 3) as f64),
            );
            insert_tag(&conn, &id, "team", if index % 2 == 0 { "a" } else { "b" });
        }
        conn.execute_batch("COMMIT; ANALYZE").unwrap();

        let query = build_search(
            Dialect::Sqlite,
            Some(1),
            "metrics.val_loss < 0.3 and params.lr = 0.001",
            &["metrics.val_loss".to_owned()],
            100,
            0,
        )
        .unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", query.sql))
            .unwrap()
            .query_map(params_from_iter(query.params.iter()), |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(!plan.iter().any(|step| step.starts_with("SCAN m") || step.starts_with("SCAN p")), "{plan:#?}");

        let found = execute(&conn, &query);
        assert_eq!(found.len(), 100);
        assert_eq!(found[0], "run01000", "loss 0.0 and lr 0.001 (1000 % 3 == 1)");
    }
}
