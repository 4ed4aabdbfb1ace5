//! Run search: the filter and order-by grammar, compiled to one parameterised SQL query.
//!
//! Filter grammar (keywords, field prefixes and attribute names are case-insensitive; keys are not):
//!
//! ```text
//! expr       := and_expr ("or" and_expr)*
//! and_expr   := unary ("and" unary)*
//! unary      := "not" unary | "(" expr ")" | comparison
//! comparison := field op value
//!             | field ["not"] "in" "(" value ("," value)* ")"
//!             | field "is" ["not"] "null"
//! op         := "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">=" | ["not"] "like" | ["not"] "ilike"
//! value      := number | 'string' | "string" | true | false
//! field      := metrics.KEY | metrics_min.KEY | metrics_max.KEY | metrics_mean.KEY | metrics_step.KEY
//!             | params.KEY | tags.KEY | [attributes.]ATTRIBUTE
//! KEY        := [A-Za-z0-9_./:-]+ | `quoted` | "quoted"
//! ATTRIBUTE  := status | name | user | host | group | id | run_id | parent_id | notes
//!             | start_time | end_time | duration
//! ```
//!
//! Semantics:
//! - `metrics.KEY` is the last value, `metrics_min`/`metrics_max` the extremes, `metrics_mean` the mean, `metrics_step` the last step.
//!   They compare with numbers only. A NaN summary (stored as NULL) never matches a comparison.
//! - `params.KEY` compares the numeric value when the literal is a number or bool (true = 1, false = 0)
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
//! The query is compiled for a [`Dialect`] and answers the same in both:
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
//!
//! Limits (`trainlog_schema::limits`), each refused with an error naming the field: the filter's length
//! (`MAX_FILTER_BYTES`), its comparisons (`MAX_FILTER_COMPARISONS`) and levels of parentheses and `not`
//! (`MAX_FILTER_NESTING`); the number of order-by items (`MAX_ORDER_BY_ITEMS`) and each one's length
//! (`MAX_ORDER_BY_ITEM_BYTES`). Within them the compiled query stays inside SQLite's own limits (expression
//! depth, bound values, `LIKE`/`GLOB` pattern length) and PostgreSQL's (65535 bound values), so no filter
//! reaches the database only to fail there.

use crate::db::{Dialect, Value};
use std::fmt;
use trainlog_schema::limits::{
    MAX_FILTER_BYTES, MAX_FILTER_COMPARISONS, MAX_FILTER_NESTING, MAX_ORDER_BY_ITEMS, MAX_ORDER_BY_ITEM_BYTES,
};

/// A filter or order-by item that does not follow the grammar.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchError {
    /// "filter" or "order_by".
    pub field: &'static str,
    /// What is wrong, starting with the character offset (from 0) where it was found, when it was found at one.
    pub reason: String,
}

impl fmt::Display for SearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for SearchError {}

/// SQL selecting `runs.id`, with numbered placeholders `?1..?N` bound to `params` in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SearchQuery {
    pub(crate) sql: String,
    pub(crate) params: Vec<Value>,
}

const FILTER: &str = "filter";
const ORDER_BY: &str = "order_by";
/// SQLite's bundled build accepts 32766 parameters; leave room for the fixed ones.
const MAX_BOUND_VALUES: usize = 32_000;

const FIELD_HINT: &str =
    "a field (metrics.KEY, metrics_min.KEY, metrics_max.KEY, metrics_mean.KEY, metrics_step.KEY, params.KEY, \
                          tags.KEY or one of status, name, user, host, group, id, run_id, parent_id, notes, \
                          start_time, end_time, duration)";

/// Milliseconds since the Unix epoch, as one value for the whole statement.
fn now_ms_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS BIGINT)",
        Dialect::Postgres => "CAST(FLOOR(EXTRACT(EPOCH FROM statement_timestamp()) * 1000) AS BIGINT)",
    }
}

/// What follows a text expression that is ordered or compared with `<`/`>`, so it goes by bytes (code points)
/// in both databases: SQLite's default collation already does; PostgreSQL's default follows the locale.
fn bytewise(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "",
        Dialect::Postgres => " COLLATE \"C\"",
    }
}

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

/// Which runs a search looks at: live ones (the default), deleted ones, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    Active,
    Deleted,
    All,
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
    let mut parts = search_parts(dialect, scope.into(), lifecycle, filter, order_by)?;
    let limit_placeholder = parts.bindings.bind(Value::Int(i64::from(limit)));
    let offset_placeholder = parts.bindings.bind(Value::Int(i64::try_from(offset).unwrap_or(i64::MAX)));
    let sql = format!(
        "SELECT runs.id, runs.revision FROM runs{} WHERE {} ORDER BY {} LIMIT {limit_placeholder} OFFSET {offset_placeholder}",
        parts.joins, parts.condition, parts.order,
    );
    Ok(SearchQuery { sql, params: parts.bindings.values })
}

/// A query answering how many runs `build_search_in` matches over every page (no order, no page).
pub(crate) fn build_count_in(
    dialect: Dialect,
    scope: impl Into<RunScope>,
    lifecycle: Lifecycle,
    filter: &str,
) -> Result<SearchQuery, SearchError> {
    let parts = search_parts(dialect, scope.into(), lifecycle, filter, &[])?;
    let sql = format!("SELECT COUNT(*) FROM runs{} WHERE {}", parts.joins, parts.condition);
    Ok(SearchQuery { sql, params: parts.bindings.values })
}

/// A search compiled: the joins its order needs, its condition, its order, and their bound values.
struct SearchParts {
    joins: String,
    condition: String,
    order: String,
    bindings: Bindings,
}

fn search_parts(
    dialect: Dialect,
    scope: RunScope,
    lifecycle: Lifecycle,
    filter: &str,
    order_by: &[String],
) -> Result<SearchParts, SearchError> {
    let mut bindings = Bindings::default();

    if filter.len() > MAX_FILTER_BYTES {
        return Err(SearchError {
            field: FILTER,
            reason: format!("a filter may have at most {MAX_FILTER_BYTES} bytes, got {}", filter.len()),
        });
    }
    if order_by.len() > MAX_ORDER_BY_ITEMS {
        return Err(SearchError {
            field: ORDER_BY,
            reason: format!("at most {MAX_ORDER_BY_ITEMS} items are allowed, got {}", order_by.len()),
        });
    }
    let mut joins = String::new();
    let mut order_terms: Vec<String> = Vec::new();
    for (index, item) in order_by.iter().enumerate() {
        if item.len() > MAX_ORDER_BY_ITEM_BYTES {
            return Err(SearchError {
                field: ORDER_BY,
                reason: format!(
                    "item {} may have at most {MAX_ORDER_BY_ITEM_BYTES} bytes, got {}",
                    index + 1,
                    item.len()
                ),
            });
        }
        let mut parser = Parser::new(dialect, item, ORDER_BY, &mut bindings);
        let order = parser.parse_order_item(index).map_err(|error| SearchError {
            field: ORDER_BY,
            reason: format!("item {} ({item:?}) {}", index + 1, error.reason),
        })?;
        if let Some(join) = order.join {
            joins.push_str(&join);
        }
        order_terms.extend(order.terms);
    }

    let mut conditions = match lifecycle {
        Lifecycle::Active => vec!["runs.deleted = 0".to_owned()],
        Lifecycle::Deleted => vec!["runs.deleted = 1".to_owned()],
        Lifecycle::All => Vec::new(),
    };
    let in_list = |ids: &[i64], bindings: &mut Bindings| {
        ids.iter().map(|id| bindings.bind(Value::Int(*id))).collect::<Vec<_>>().join(", ")
    };
    match scope {
        RunScope::All => {}
        RunScope::Project(id) => conditions.push(format!("runs.project_id = {}", bindings.bind(Value::Int(id)))),
        RunScope::Projects(ids) if ids.is_empty() => conditions.push("FALSE".to_owned()),
        RunScope::Projects(ids) => conditions.push(format!("runs.project_id IN ({})", in_list(&ids, &mut bindings))),
        RunScope::AllBut(ids) if ids.is_empty() => {}
        RunScope::AllBut(ids) => conditions.push(format!("runs.project_id NOT IN ({})", in_list(&ids, &mut bindings))),
    }
    if !filter.trim().is_empty() {
        let mut parser = Parser::new(dialect, filter, FILTER, &mut bindings);
        conditions.push(parser.parse_filter()?);
    }
    if bindings.values.len() > MAX_BOUND_VALUES {
        return Err(SearchError {
            field: FILTER,
            reason: format!("too many values: at most {MAX_BOUND_VALUES} keys and values in all"),
        });
    }

    if order_terms.is_empty() {
        order_terms.push("runs.start_ms DESC".to_owned());
    }
    order_terms.push(format!("runs.id{} ASC", bytewise(dialect)));

    Ok(SearchParts {
        joins,
        condition: if conditions.is_empty() { "TRUE".to_owned() } else { conditions.join(" AND ") },
        order: order_terms.join(", "),
        bindings,
    })
}

/// Values bound to numbered placeholders, so fragments can be built in any order.
#[derive(Default)]
struct Bindings {
    values: Vec<Value>,
}

impl Bindings {
    fn bind(&mut self, value: Value) -> String {
        self.values.push(value);
        format!("?{}", self.values.len())
    }
}

#[derive(Debug, Clone, Copy)]
enum MetricColumn {
    Last,
    Min,
    Max,
    Mean,
    Step,
}

impl MetricColumn {
    fn column_name(self) -> &'static str {
        match self {
            MetricColumn::Last => "last",
            MetricColumn::Min => "min",
            MetricColumn::Max => "max",
            MetricColumn::Mean => "mean",
            MetricColumn::Step => "last_step",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Attribute {
    Status,
    Name,
    User,
    Host,
    Group,
    Id,
    ParentId,
    Notes,
    StartTime,
    EndTime,
    Duration,
}

impl Attribute {
    fn from_name(lowercase_name: &str) -> Option<Self> {
        Some(match lowercase_name {
            "status" => Attribute::Status,
            "name" => Attribute::Name,
            "user" => Attribute::User,
            "host" => Attribute::Host,
            "group" => Attribute::Group,
            "id" | "run_id" => Attribute::Id,
            "parent_id" => Attribute::ParentId,
            "notes" => Attribute::Notes,
            "start_time" => Attribute::StartTime,
            "end_time" => Attribute::EndTime,
            "duration" => Attribute::Duration,
            _ => return None,
        })
    }

    fn sql(self, dialect: Dialect) -> String {
        match self {
            Attribute::Status => "runs.status".to_owned(),
            Attribute::Name => "runs.name".to_owned(),
            Attribute::User => "runs.\"user\"".to_owned(),
            Attribute::Host => "runs.host".to_owned(),
            Attribute::Group => "runs.group_name".to_owned(),
            Attribute::Id => "runs.id".to_owned(),
            Attribute::ParentId => "runs.parent_id".to_owned(),
            Attribute::Notes => "runs.notes".to_owned(),
            Attribute::StartTime => "runs.start_ms".to_owned(),
            Attribute::EndTime => "runs.end_ms".to_owned(),
            Attribute::Duration => format!("(COALESCE(runs.end_ms, {}) - runs.start_ms)", now_ms_sql(dialect)),
        }
    }

    fn is_numeric(self) -> bool {
        matches!(self, Attribute::StartTime | Attribute::EndTime | Attribute::Duration)
    }

    fn is_nullable(self) -> bool {
        matches!(self, Attribute::ParentId | Attribute::EndTime)
    }
}

#[derive(Debug)]
enum Field {
    Metric { column: MetricColumn, key: String },
    Param { key: String },
    Tag { key: String },
    Attribute(Attribute),
}

/// A parsed field and the text it was written as, for messages.
struct FieldRef {
    field: Field,
    text: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    /// Whether the operator compares by order, where text goes by collation (not `=`/`!=`).
    fn orders(self) -> bool {
        !matches!(self, CompareOp::Eq | CompareOp::Ne)
    }

    fn sql(self) -> &'static str {
        match self {
            CompareOp::Eq => "=",
            CompareOp::Ne => "!=",
            CompareOp::Lt => "<",
            CompareOp::Le => "<=",
            CompareOp::Gt => ">",
            CompareOp::Ge => ">=",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Operator {
    Compare(CompareOp),
    Like { negated: bool, case_insensitive: bool },
    In { negated: bool },
    IsNull { negated: bool },
}

struct OperatorAt {
    operator: Operator,
    text: String,
    position: usize,
}

enum Literal {
    /// `source` is the number as written; `value` is an Int when it was written as one and fits, else a Real.
    Number {
        source: String,
        value: Value,
    },
    Bool(bool),
    Text(String),
}

struct LiteralAt {
    literal: Literal,
    position: usize,
}

/// How a field's values are stored, which decides the literals it accepts.
#[derive(Clone, Copy, PartialEq)]
enum ValueKind {
    Numeric,
    Text,
    /// `p.num` for numbers and bools, `p.value` for strings.
    Param,
}

/// Where a field's value lives: a row of a per-run key/value table, or a column of `runs`.
struct Target {
    keyed: Option<KeyedTable>,
    column: String,
    kind: ValueKind,
    nullable: bool,
}

struct KeyedTable {
    table: &'static str,
    alias: &'static str,
    key: String,
}

struct OrderItem {
    join: Option<String>,
    terms: Vec<String>,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | ':' | '-')
}

fn target_of(field: &Field, dialect: Dialect) -> Target {
    match field {
        Field::Metric { column, key } => Target {
            keyed: Some(KeyedTable { table: "metric_summaries", alias: "m", key: key.clone() }),
            column: format!("m.{}", column.column_name()),
            kind: ValueKind::Numeric,
            nullable: false,
        },
        Field::Param { key } => Target {
            keyed: Some(KeyedTable { table: "params", alias: "p", key: key.clone() }),
            column: "p.value".to_owned(),
            kind: ValueKind::Param,
            nullable: false,
        },
        Field::Tag { key } => Target {
            keyed: Some(KeyedTable { table: "tags", alias: "t", key: key.clone() }),
            column: "t.value".to_owned(),
            kind: ValueKind::Text,
            nullable: false,
        },
        Field::Attribute(attribute) => Target {
            keyed: None,
            column: attribute.sql(dialect),
            kind: if attribute.is_numeric() { ValueKind::Numeric } else { ValueKind::Text },
            nullable: attribute.is_nullable(),
        },
    }
}

enum PatternPiece {
    AnySequence,
    AnyChar,
    Literal(char),
}

/// Splits a LIKE pattern: `%` and `_` are wildcards, `\` makes the next character literal
/// (a trailing `\` is itself literal).
fn parse_like_pattern(pattern: &str) -> Vec<PatternPiece> {
    let mut pieces = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        pieces.push(match c {
            '%' => PatternPiece::AnySequence,
            '_' => PatternPiece::AnyChar,
            '\\' => PatternPiece::Literal(chars.next().unwrap_or('\\')),
            other => PatternPiece::Literal(other),
        });
    }
    pieces
}

/// The pattern for SQLite's case-sensitive GLOB.
fn glob_pattern(pieces: &[PatternPiece]) -> String {
    let mut glob = String::new();
    for piece in pieces {
        match piece {
            PatternPiece::AnySequence => glob.push('*'),
            PatternPiece::AnyChar => glob.push('?'),
            PatternPiece::Literal(c @ ('*' | '?' | '[')) => {
                glob.push('[');
                glob.push(*c);
                glob.push(']');
            }
            PatternPiece::Literal(c) => glob.push(*c),
        }
    }
    glob
}

/// The pattern for LIKE with `ESCAPE '\'`.
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

/// Recursive-descent parser over the characters of one filter or order-by item, compiling as it goes.
struct Parser<'a> {
    dialect: Dialect,
    chars: Vec<char>,
    position: usize,
    context: &'static str,
    bindings: &'a mut Bindings,
    depth: usize,
    comparisons: usize,
}

impl<'a> Parser<'a> {
    fn new(dialect: Dialect, text: &str, context: &'static str, bindings: &'a mut Bindings) -> Self {
        Self { dialect, chars: text.chars().collect(), position: 0, context, bindings, depth: 0, comparisons: 0 }
    }

    // ---- errors ----

    fn error(&self, position: usize, message: impl fmt::Display) -> SearchError {
        SearchError { field: self.context, reason: format!("at {position}: {message}") }
    }

    fn expected(&self, position: usize, what: &str) -> SearchError {
        self.error(position, format!("expected {what}, found {}", self.describe(position)))
    }

    fn describe(&self, position: usize) -> String {
        match self.chars.get(position) {
            None => "end of input".to_owned(),
            Some(&c) if is_word_char(c) => {
                let word: String = self.chars[position..].iter().take_while(|c| is_word_char(**c)).take(32).collect();
                format!("'{word}'")
            }
            Some(c) => format!("'{c}'"),
        }
    }

    // ---- characters ----

    fn peek(&self) -> Option<char> {
        self.chars.get(self.position).copied()
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.position += 1;
        }
    }

    fn at_end(&self) -> bool {
        self.position >= self.chars.len()
    }

    fn eat_char(&mut self, expected: char) -> bool {
        self.skip_whitespace();
        if self.peek() == Some(expected) {
            self.position += 1;
            true
        } else {
            false
        }
    }

    fn starts_with(&self, text: &str) -> bool {
        text.chars().enumerate().all(|(offset, c)| self.chars.get(self.position + offset) == Some(&c))
    }

    fn keyword_at(&self, position: usize, keyword: &str) -> bool {
        let mut index = position;
        for expected in keyword.chars() {
            match self.chars.get(index) {
                Some(c) if c.eq_ignore_ascii_case(&expected) => index += 1,
                _ => return false,
            }
        }
        !self.chars.get(index).is_some_and(|c| is_word_char(*c))
    }

    /// Skips whitespace and consumes `keyword` (case-insensitive, as a whole word) when it comes next.
    fn eat_keyword(&mut self, keyword: &str) -> bool {
        self.skip_whitespace();
        if self.keyword_at(self.position, keyword) {
            self.position += keyword.chars().count();
            true
        } else {
            false
        }
    }

    fn read_identifier(&mut self) -> Option<String> {
        match self.peek() {
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
            _ => return None,
        }
        let start = self.position;
        while self.peek().is_some_and(is_word_char) {
            self.position += 1;
        }
        Some(self.chars[start..self.position].iter().collect())
    }

    /// Reads text between `quote` characters (a doubled quote stands for one); the cursor is on the opening quote.
    fn read_quoted(&mut self, quote: char, what: &str) -> Result<String, SearchError> {
        let start = self.position;
        self.position += 1;
        let mut text = String::new();
        loop {
            match self.peek() {
                None => {
                    return Err(self.error(start, format!("unterminated {what}: expected a closing {quote}")));
                }
                Some(c) if c == quote => {
                    if self.chars.get(self.position + 1) == Some(&quote) {
                        text.push(quote);
                        self.position += 2;
                    } else {
                        self.position += 1;
                        return Ok(text);
                    }
                }
                Some(c) => {
                    text.push(c);
                    self.position += 1;
                }
            }
        }
    }

    fn enter_nesting(&mut self, position: usize) -> Result<(), SearchError> {
        self.depth += 1;
        if self.depth > MAX_FILTER_NESTING {
            return Err(self.error(
                position,
                format!("nested too deep: at most {MAX_FILTER_NESTING} levels of 'not' and parentheses are allowed"),
            ));
        }
        Ok(())
    }

    // ---- filter ----

    fn parse_filter(&mut self) -> Result<String, SearchError> {
        let sql = self.parse_or()?;
        self.skip_whitespace();
        if !self.at_end() {
            return Err(self.expected(self.position, "'and', 'or' or end of input"));
        }
        Ok(sql)
    }

    fn parse_or(&mut self) -> Result<String, SearchError> {
        let mut alternatives = vec![self.parse_and()?];
        while self.eat_keyword("or") {
            alternatives.push(self.parse_and()?);
        }
        Ok(join_group(alternatives, " OR "))
    }

    fn parse_and(&mut self) -> Result<String, SearchError> {
        let mut conjuncts = vec![self.parse_unary()?];
        while self.eat_keyword("and") {
            conjuncts.push(self.parse_unary()?);
        }
        Ok(join_group(conjuncts, " AND "))
    }

    fn parse_unary(&mut self) -> Result<String, SearchError> {
        self.skip_whitespace();
        let start = self.position;
        if self.eat_keyword("not") {
            self.enter_nesting(start)?;
            let inner = self.parse_unary()?;
            self.depth -= 1;
            return Ok(format!("(NOT {inner})"));
        }
        if self.peek() == Some('(') {
            self.enter_nesting(start)?;
            self.position += 1;
            let inner = self.parse_or()?;
            if !self.eat_char(')') {
                return Err(self.expected(self.position, "'and', 'or' or ')'"));
            }
            self.depth -= 1;
            return Ok(inner);
        }
        self.parse_comparison()
    }

    fn parse_comparison(&mut self) -> Result<String, SearchError> {
        self.skip_whitespace();
        self.comparisons += 1;
        if self.comparisons > MAX_FILTER_COMPARISONS {
            return Err(self.error(
                self.position,
                format!("a filter may hold at most {MAX_FILTER_COMPARISONS} comparisons; this is one more"),
            ));
        }
        let field = self.parse_field()?;
        let operator = self.parse_operator(&field)?;
        let values = match operator.operator {
            Operator::IsNull { .. } => Vec::new(),
            Operator::In { .. } => self.parse_value_list(&operator.text)?,
            Operator::Compare(_) | Operator::Like { .. } => vec![self.parse_value(&operator.text)?],
        };
        self.compile_predicate(&field, &operator, &values)
    }

    fn parse_field(&mut self) -> Result<FieldRef, SearchError> {
        self.skip_whitespace();
        let start = self.position;
        let Some(name) = self.read_identifier() else {
            return Err(self.expected(start, FIELD_HINT));
        };
        let lowercase_name = name.to_ascii_lowercase();
        let field = if self.peek() == Some('.') {
            self.position += 1;
            match lowercase_name.as_str() {
                "metrics" | "metric" => Field::Metric { column: MetricColumn::Last, key: self.parse_key(&name)? },
                "metrics_min" => Field::Metric { column: MetricColumn::Min, key: self.parse_key(&name)? },
                "metrics_max" => Field::Metric { column: MetricColumn::Max, key: self.parse_key(&name)? },
                "metrics_mean" => Field::Metric { column: MetricColumn::Mean, key: self.parse_key(&name)? },
                "metrics_step" => Field::Metric { column: MetricColumn::Step, key: self.parse_key(&name)? },
                "params" | "param" => Field::Param { key: self.parse_key(&name)? },
                "tags" | "tag" => Field::Tag { key: self.parse_key(&name)? },
                "attributes" | "attribute" | "attr" => {
                    let attribute_start = self.position;
                    match self.read_identifier().and_then(|n| Attribute::from_name(&n.to_ascii_lowercase())) {
                        Some(attribute) => Field::Attribute(attribute),
                        None => {
                            self.position = attribute_start;
                            return Err(self.expected(
                                attribute_start,
                                &format!(
                                    "an attribute after '{name}.' (status, name, user, host, group, id, run_id, \
                                     parent_id, notes, start_time, end_time, duration)"
                                ),
                            ));
                        }
                    }
                }
                _ => {
                    return Err(self.error(
                        start,
                        format!(
                            "unknown field prefix '{name}.'; expected metrics., metrics_min., metrics_max., metrics_mean., \
                             metrics_step., params., tags. or attributes."
                        ),
                    ));
                }
            }
        } else {
            match Attribute::from_name(&lowercase_name) {
                Some(attribute) => Field::Attribute(attribute),
                None => return Err(self.error(start, format!("unknown field '{name}'; expected {FIELD_HINT}"))),
            }
        };
        let text = self.chars[start..self.position].iter().collect();
        Ok(FieldRef { field, text })
    }

    fn parse_key(&mut self, prefix: &str) -> Result<String, SearchError> {
        let start = self.position;
        let key = match self.peek() {
            Some(quote @ ('`' | '"')) => self.read_quoted(quote, "quoted key")?,
            _ => {
                while self.peek().is_some_and(is_key_char) {
                    self.position += 1;
                }
                self.chars[start..self.position].iter().collect()
            }
        };
        if key.is_empty() {
            return Err(self.expected(start, &format!("a key after '{prefix}.'")));
        }
        Ok(key)
    }

    fn parse_operator(&mut self, field: &FieldRef) -> Result<OperatorAt, SearchError> {
        self.skip_whitespace();
        let start = self.position;
        const SYMBOLS: [(&str, CompareOp); 8] = [
            ("==", CompareOp::Eq),
            ("!=", CompareOp::Ne),
            ("<>", CompareOp::Ne),
            ("<=", CompareOp::Le),
            (">=", CompareOp::Ge),
            ("=", CompareOp::Eq),
            ("<", CompareOp::Lt),
            (">", CompareOp::Gt),
        ];
        for (symbol, op) in SYMBOLS {
            if self.starts_with(symbol) {
                self.position += symbol.len();
                return Ok(OperatorAt { operator: Operator::Compare(op), text: symbol.to_owned(), position: start });
            }
        }
        let operator = if self.eat_keyword("like") {
            Operator::Like { negated: false, case_insensitive: false }
        } else if self.eat_keyword("ilike") {
            Operator::Like { negated: false, case_insensitive: true }
        } else if self.eat_keyword("in") {
            Operator::In { negated: false }
        } else if self.eat_keyword("not") {
            if self.eat_keyword("like") {
                Operator::Like { negated: true, case_insensitive: false }
            } else if self.eat_keyword("ilike") {
                Operator::Like { negated: true, case_insensitive: true }
            } else if self.eat_keyword("in") {
                Operator::In { negated: true }
            } else {
                self.skip_whitespace();
                return Err(self.expected(self.position, "'like', 'ilike' or 'in' after 'not'"));
            }
        } else if self.eat_keyword("is") {
            let negated = self.eat_keyword("not");
            if !self.eat_keyword("null") {
                self.skip_whitespace();
                let what = if negated { "'null' after 'is not'" } else { "'null' or 'not null' after 'is'" };
                return Err(self.expected(self.position, what));
            }
            Operator::IsNull { negated }
        } else {
            return Err(self.expected(
                start,
                &format!(
                    "an operator after '{}' (=, !=, <, <=, >, >=, like, ilike, in, not in, is null, is not null)",
                    field.text
                ),
            ));
        };
        let text = self.chars[start..self.position].iter().collect::<String>().to_ascii_lowercase();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        Ok(OperatorAt { operator, text, position: start })
    }

    fn parse_value_list(&mut self, operator_text: &str) -> Result<Vec<LiteralAt>, SearchError> {
        if !self.eat_char('(') {
            return Err(self.expected(self.position, &format!("'(' after '{operator_text}'")));
        }
        let mut values = vec![self.parse_value("(")?];
        loop {
            if self.eat_char(',') {
                values.push(self.parse_value(",")?);
            } else if self.eat_char(')') {
                return Ok(values);
            } else {
                return Err(self.expected(self.position, "',' or ')' in the value list"));
            }
        }
    }

    fn parse_value(&mut self, after: &str) -> Result<LiteralAt, SearchError> {
        self.skip_whitespace();
        let position = self.position;
        let literal = match self.peek() {
            Some(quote @ ('\'' | '"')) => Literal::Text(self.read_quoted(quote, "string")?),
            Some(c) if c.is_ascii_digit() || matches!(c, '-' | '+' | '.') => self.read_number()?,
            _ if self.eat_keyword("true") => Literal::Bool(true),
            _ if self.eat_keyword("false") => Literal::Bool(false),
            _ => return Err(self.expected(position, &format!("a value after '{after}'"))),
        };
        Ok(LiteralAt { literal, position })
    }

    fn count_digits_from(&self, index: usize) -> usize {
        self.chars[index.min(self.chars.len())..].iter().take_while(|c| c.is_ascii_digit()).count()
    }

    fn read_number(&mut self) -> Result<Literal, SearchError> {
        let start = self.position;
        let mut end = start;
        if matches!(self.chars.get(end), Some('-' | '+')) {
            end += 1;
        }
        let integer_digits = self.count_digits_from(end);
        end += integer_digits;
        let mut written_as_integer = true;
        let mut fraction_digits = 0;
        if self.chars.get(end) == Some(&'.') {
            written_as_integer = false;
            end += 1;
            fraction_digits = self.count_digits_from(end);
            end += fraction_digits;
        }
        let malformed = |parser: &Self, end: usize| {
            let shown: String = parser.chars[start..end.min(parser.chars.len())].iter().collect();
            parser.error(start, format!("malformed number '{shown}'"))
        };
        if integer_digits + fraction_digits == 0 {
            return Err(malformed(self, end + 1));
        }
        if matches!(self.chars.get(end), Some('e' | 'E')) {
            written_as_integer = false;
            end += 1;
            if matches!(self.chars.get(end), Some('-' | '+')) {
                end += 1;
            }
            let exponent_digits = self.count_digits_from(end);
            if exponent_digits == 0 {
                return Err(malformed(self, end + 1));
            }
            end += exponent_digits;
        }
        if self.chars.get(end).is_some_and(|c| is_word_char(*c) || *c == '.') {
            return Err(malformed(self, end + 1));
        }
        let source: String = self.chars[start..end].iter().collect();
        self.position = end;
        let integer = if written_as_integer { source.parse::<i64>().ok() } else { None };
        let value = match integer {
            Some(integer) => Value::Int(integer),
            None => match source.parse::<f64>() {
                Ok(real) if real.is_finite() => Value::Real(real),
                _ => return Err(self.error(start, format!("number '{source}' is out of range"))),
            },
        };
        Ok(Literal::Number { source, value })
    }

    // ---- compiling comparisons ----

    /// Binds a number. A Real is cast, as its column may be an integer one (PostgreSQL would take the
    /// parameter for a BIGINT); an Int takes the type of the column it meets.
    fn bind_number(&mut self, number: &Value) -> String {
        let placeholder = self.bindings.bind(number.clone());
        match number {
            Value::Real(_) => format!("CAST({placeholder} AS DOUBLE PRECISION)"),
            _ => placeholder,
        }
    }

    fn numeric_operand(&mut self, field: &FieldRef, value: &LiteralAt) -> Result<String, SearchError> {
        match &value.literal {
            Literal::Number { value: number, .. } => Ok(self.bind_number(number)),
            Literal::Bool(_) => Err(self
                .error(value.position, format!("expected a number to compare with {}, found true/false", field.text))),
            Literal::Text(_) => Err(self.error(
                value.position,
                format!("expected a number to compare with {}, found a quoted string", field.text),
            )),
        }
    }

    fn text_operand(&mut self, value: &LiteralAt) -> String {
        let text = match &value.literal {
            Literal::Text(text) => text.clone(),
            Literal::Number { source, .. } => source.clone(),
            Literal::Bool(flag) => flag.to_string(),
        };
        self.bindings.bind(Value::Text(text))
    }

    /// Binds a literal compared with a param: numbers and bools against `p.num`, strings against `p.value`.
    fn param_operand(&mut self, value: &LiteralAt) -> (&'static str, String) {
        match &value.literal {
            Literal::Text(text) => ("p.value", self.bindings.bind(Value::Text(text.clone()))),
            Literal::Number { value: number, .. } => ("p.num", self.bind_number(number)),
            Literal::Bool(flag) => ("p.num", self.bindings.bind(Value::Int(i64::from(*flag)))),
        }
    }

    fn compile_predicate(
        &mut self,
        field: &FieldRef,
        operator: &OperatorAt,
        values: &[LiteralAt],
    ) -> Result<String, SearchError> {
        let target = target_of(&field.field, self.dialect);
        let condition = match operator.operator {
            Operator::IsNull { negated } => {
                return Ok(match &target.keyed {
                    Some(keyed) => {
                        let presence = self.exists(keyed, None);
                        if negated {
                            presence
                        } else {
                            format!("(NOT {presence})")
                        }
                    }
                    None => format!("({} IS {}NULL)", target.column, if negated { "NOT " } else { "" }),
                });
            }
            Operator::Like { negated, case_insensitive } => {
                if target.kind == ValueKind::Numeric {
                    return Err(self.error(
                        operator.position,
                        format!("'{}' needs a text field, and {} is numeric", operator.text, field.text),
                    ));
                }
                let Some(pattern) = values.first() else {
                    return Err(self.expected(self.position, &format!("a pattern after '{}'", operator.text)));
                };
                let Literal::Text(pattern_text) = &pattern.literal else {
                    return Err(
                        self.error(pattern.position, format!("expected a quoted pattern after '{}'", operator.text))
                    );
                };
                let pieces = parse_like_pattern(pattern_text);
                let test = match (self.dialect, case_insensitive) {
                    (Dialect::Sqlite, false) => {
                        let placeholder = self.bindings.bind(Value::Text(glob_pattern(&pieces)));
                        format!("{} GLOB {placeholder}", target.column)
                    }
                    // SQLite's LIKE folds ASCII case only; PostgreSQL's is case-sensitive.
                    (Dialect::Sqlite, true) | (Dialect::Postgres, false) => {
                        let placeholder = self.bindings.bind(Value::Text(like_pattern(&pieces)));
                        format!("{} LIKE {placeholder} ESCAPE '\\'", target.column)
                    }
                    // ILIKE would fold by locale: fold ASCII letters of the value, and of the pattern here.
                    (Dialect::Postgres, true) => {
                        let placeholder = self.bindings.bind(Value::Text(like_pattern(&pieces).to_ascii_lowercase()));
                        format!(
                            "translate({}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') LIKE {placeholder} ESCAPE '\\'",
                            target.column
                        )
                    }
                };
                if negated {
                    format!("NOT ({test})")
                } else {
                    test
                }
            }
            Operator::Compare(op) => {
                let Some(value) = values.first() else {
                    return Err(self.expected(self.position, &format!("a value after '{}'", operator.text)));
                };
                match target.kind {
                    ValueKind::Numeric => {
                        format!("{} {} {}", target.column, op.sql(), self.numeric_operand(field, value)?)
                    }
                    ValueKind::Text => {
                        let collate = if op.orders() { bytewise(self.dialect) } else { "" };
                        format!("{}{collate} {} {}", target.column, op.sql(), self.text_operand(value))
                    }
                    ValueKind::Param => {
                        let (column, placeholder) = self.param_operand(value);
                        if op == CompareOp::Ne {
                            // A param of another type (NULL num) differs from any number.
                            format!("{column} IS DISTINCT FROM {placeholder}")
                        } else {
                            let collate = if op.orders() && column == "p.value" { bytewise(self.dialect) } else { "" };
                            format!("{column}{collate} {} {placeholder}", op.sql())
                        }
                    }
                }
            }
            Operator::In { negated } => {
                let not = if negated { "NOT " } else { "" };
                match target.kind {
                    ValueKind::Numeric => {
                        let placeholders =
                            values.iter().map(|v| self.numeric_operand(field, v)).collect::<Result<Vec<_>, _>>()?;
                        format!("{} {not}IN ({})", target.column, placeholders.join(", "))
                    }
                    ValueKind::Text => {
                        let placeholders = values.iter().map(|v| self.text_operand(v)).collect::<Vec<_>>();
                        format!("{} {not}IN ({})", target.column, placeholders.join(", "))
                    }
                    ValueKind::Param => {
                        let mut numbers = Vec::new();
                        let mut texts = Vec::new();
                        for value in values {
                            let (column, placeholder) = self.param_operand(value);
                            if column == "p.num" {
                                numbers.push(placeholder);
                            } else {
                                texts.push(placeholder);
                            }
                        }
                        let mut alternatives = Vec::new();
                        if !numbers.is_empty() {
                            alternatives.push(format!("COALESCE(p.num IN ({}), FALSE)", numbers.join(", ")));
                        }
                        if !texts.is_empty() {
                            alternatives.push(format!("p.value IN ({})", texts.join(", ")));
                        }
                        format!("{not}({})", alternatives.join(" OR "))
                    }
                }
            }
        };
        Ok(match &target.keyed {
            Some(keyed) => self.exists(keyed, Some(&condition)),
            None if target.nullable => format!("COALESCE(({condition}), FALSE)"),
            None => format!("({condition})"),
        })
    }

    /// A correlated EXISTS over the run's row for the key (uses the (run_id, key) primary key).
    fn exists(&mut self, keyed: &KeyedTable, condition: Option<&str>) -> String {
        let key = self.bindings.bind(Value::Text(keyed.key.clone()));
        let alias = keyed.alias;
        let extra = condition.map(|c| format!(" AND ({c})")).unwrap_or_default();
        format!(
            "EXISTS (SELECT 1 FROM {} {alias} WHERE {alias}.run_id = runs.id AND {alias}.key = {key}{extra})",
            keyed.table
        )
    }

    // ---- order by ----

    fn parse_order_item(&mut self, index: usize) -> Result<OrderItem, SearchError> {
        self.skip_whitespace();
        if self.at_end() {
            return Err(self.expected(self.position, FIELD_HINT));
        }
        let field = self.parse_field()?;
        let descending = if self.eat_keyword("desc") {
            true
        } else {
            self.eat_keyword("asc");
            false
        };
        self.skip_whitespace();
        if !self.at_end() {
            return Err(self.expected(self.position, "'asc', 'desc' or the end of the item"));
        }
        let direction = if descending { "DESC" } else { "ASC" };
        let collate = bytewise(self.dialect);
        let alias = format!("o{index}");
        let mut join_on = |table: &str, key: &str| {
            let placeholder = self.bindings.bind(Value::Text(key.to_owned()));
            Some(format!(" LEFT JOIN {table} {alias} ON {alias}.run_id = runs.id AND {alias}.key = {placeholder}"))
        };
        Ok(match &field.field {
            Field::Metric { column, key } => {
                let join = join_on("metric_summaries", key);
                let value = format!("{alias}.{}", column.column_name());
                OrderItem { join, terms: vec![format!("{value} IS NULL"), format!("{value} {direction}")] }
            }
            Field::Param { key } => {
                let join = join_on("params", key);
                OrderItem {
                    join,
                    terms: vec![
                        format!("{alias}.run_id IS NULL"),
                        format!("{alias}.num IS NULL"),
                        format!("{alias}.num {direction}"),
                        format!("{alias}.value{collate} {direction}"),
                    ],
                }
            }
            Field::Tag { key } => {
                let join = join_on("tags", key);
                let value = format!("{alias}.value");
                OrderItem { join, terms: vec![format!("{value} IS NULL"), format!("{value}{collate} {direction}")] }
            }
            Field::Attribute(attribute) => {
                let value = attribute.sql(self.dialect);
                let mut terms = Vec::new();
                if attribute.is_nullable() {
                    terms.push(format!("{value} IS NULL"));
                }
                let collate = if attribute.is_numeric() { "" } else { collate };
                terms.push(format!("{value}{collate} {direction}"));
                OrderItem { join: None, terms }
            }
        })
    }
}

/// Joins compiled conditions with `AND`/`OR`, parenthesised so the group can be nested anywhere.
fn join_group(mut parts: Vec<String>, separator: &str) -> String {
    if parts.len() == 1 {
        parts.pop().unwrap_or_default()
    } else {
        format!("({})", parts.join(separator))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{params, params_from_iter, Connection};

    const SCHEMA: &str = "
        CREATE TABLE runs (id TEXT PRIMARY KEY, project_id INTEGER NOT NULL, name TEXT NOT NULL, status TEXT NOT NULL,
          start_ms INTEGER NOT NULL, end_ms INTEGER, user TEXT NOT NULL DEFAULT '', host TEXT NOT NULL DEFAULT '',
          group_name TEXT NOT NULL DEFAULT '', parent_id TEXT, notes TEXT NOT NULL DEFAULT '',
          deleted INTEGER NOT NULL DEFAULT 0, updated_ms INTEGER NOT NULL, revision INTEGER NOT NULL DEFAULT 0);
        CREATE INDEX runs_by_project ON runs(project_id, start_ms);
        CREATE TABLE params (run_id TEXT NOT NULL, key TEXT NOT NULL, type TEXT NOT NULL, value TEXT NOT NULL, num REAL,
          PRIMARY KEY (run_id, key)) WITHOUT ROWID;
        CREATE INDEX params_by_key ON params(key, num);
        CREATE TABLE tags (run_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (run_id, key)) WITHOUT ROWID;
        CREATE TABLE metric_summaries (run_id TEXT NOT NULL, key TEXT NOT NULL, last REAL, last_step INTEGER NOT NULL,
          last_ms INTEGER NOT NULL, min REAL, max REAL, count INTEGER NOT NULL, sum REAL,
          sum_count INTEGER NOT NULL DEFAULT 0, mean REAL GENERATED ALWAYS AS (sum / NULLIF(sum_count, 0)) VIRTUAL,
          PRIMARY KEY (run_id, key)) WITHOUT ROWID;
        CREATE INDEX metric_summaries_by_key ON metric_summaries(key, last);
    ";

    struct RunRow {
        id: &'static str,
        project: i64,
        name: &'static str,
        status: &'static str,
        start: i64,
        end: Option<i64>,
        user: &'static str,
        group: &'static str,
        parent: Option<&'static str>,
        notes: &'static str,
        deleted: bool,
    }

    fn insert_run(conn: &Connection, run: RunRow) {
        conn.execute(
            "INSERT INTO runs (id, project_id, name, status, start_ms, end_ms, user, host, group_name, parent_id, notes, deleted, updated_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'host', ?8, ?9, ?10, ?11, 0)",
            params![run.id, run.project, run.name, run.status, run.start, run.end, run.user, run.group, run.parent, run.notes, run.deleted],
        )
        .unwrap();
    }

    fn insert_param(conn: &Connection, run: &str, key: &str, type_name: &str, value: &str, num: Option<f64>) {
        conn.execute(
            "INSERT INTO params (run_id, key, type, value, num) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![run, key, type_name, value, num],
        )
        .unwrap();
    }

    fn insert_tag(conn: &Connection, run: &str, key: &str, value: &str) {
        conn.execute("INSERT INTO tags (run_id, key, value) VALUES (?1, ?2, ?3)", params![run, key, value]).unwrap();
    }

    fn insert_summary(
        conn: &Connection,
        run: &str,
        key: &str,
        last: Option<f64>,
        step: i64,
        min: Option<f64>,
        max: Option<f64>,
    ) {
        conn.execute(
            "INSERT INTO metric_summaries (run_id, key, last, last_step, last_ms, min, max, count, sum, sum_count)
             VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, 10, (?5 + ?6) * 5, 10)",
            params![run, key, last, step, min, max],
        )
        .unwrap();
    }

    /// Project 1: r1..r4 live, r5 deleted; project 2: r6.
    fn fixture() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        let base = RunRow {
            id: "",
            project: 1,
            name: "",
            status: "finished",
            start: 0,
            end: None,
            user: "alice",
            group: "",
            parent: None,
            notes: "",
            deleted: false,
        };
        insert_run(
            &conn,
            RunRow {
                id: "r1",
                name: "resnet-a",
                start: 1000,
                end: Some(5000),
                group: "resnets",
                notes: "Baseline run",
                ..base
            },
        );
        insert_run(
            &conn,
            RunRow { id: "r2", name: "resnet-b", start: 2000, end: Some(3000), user: "bob", group: "resnets", ..base },
        );
        insert_run(&conn, RunRow { id: "r3", name: "vit-a", status: "running", start: 3000, group: "vits", ..base });
        insert_run(
            &conn,
            RunRow {
                id: "r4",
                name: "vit-b",
                status: "failed",
                start: 4000,
                end: Some(4500),
                user: "carol",
                group: "vits",
                parent: Some("r1"),
                ..base
            },
        );
        insert_run(
            &conn,
            RunRow { id: "r5", name: "deleted-run", start: 5000, end: Some(6000), deleted: true, ..base },
        );
        insert_run(&conn, RunRow { id: "r6", project: 2, name: "other", start: 500, end: Some(900), ..base });

        insert_param(&conn, "r1", "lr", "float", "0.001", Some(0.001));
        insert_param(&conn, "r1", "optimizer", "str", "adam", None);
        insert_param(&conn, "r1", "depth", "int", "50", Some(50.0));
        insert_param(&conn, "r1", "pretrained", "bool", "true", Some(1.0));
        insert_param(&conn, "r1", "version", "str", "1.0", None);
        insert_param(&conn, "r2", "lr", "float", "0.01", Some(0.01));
        insert_param(&conn, "r2", "optimizer", "str", "sgd", None);
        insert_param(&conn, "r2", "depth", "int", "18", Some(18.0));
        insert_param(&conn, "r2", "pretrained", "bool", "false", Some(0.0));
        insert_param(&conn, "r2", "version", "int", "1", Some(1.0));
        insert_param(&conn, "r3", "lr", "float", "0.001", Some(0.001));
        insert_param(&conn, "r3", "optimizer", "str", "Adam", None);
        insert_param(&conn, "r3", "depth", "int", "12", Some(12.0));
        insert_param(&conn, "r3", "version", "str", "2", None);
        insert_param(&conn, "r4", "lr", "float", "0.001", Some(0.001));
        insert_param(&conn, "r4", "optimizer", "str", "adamw", None);
        insert_param(&conn, "r5", "lr", "float", "0.001", Some(0.001));
        insert_param(&conn, "r6", "lr", "float", "0.001", Some(0.001));

        insert_tag(&conn, "r1", "team", "vision");
        insert_tag(&conn, "r1", "stage", "prod");
        insert_tag(&conn, "r2", "team", "vision");
        insert_tag(&conn, "r3", "team", "NLP");
        insert_tag(&conn, "r4", "city", "Édimbourg");
        insert_tag(&conn, "r5", "team", "vision");

        insert_summary(&conn, "r1", "val_loss", Some(0.25), 100, Some(0.2), Some(0.9));
        insert_summary(&conn, "r1", "train/loss", Some(0.1), 100, Some(0.1), Some(2.0));
        insert_summary(&conn, "r2", "val_loss", Some(0.35), 50, Some(0.3), Some(1.2));
        insert_summary(&conn, "r2", "train/loss", Some(0.2), 50, Some(0.2), Some(2.0));
        insert_summary(&conn, "r2", "val loss", Some(0.7), 50, Some(0.7), Some(0.7));
        insert_summary(&conn, "r3", "val_loss", None, 10, Some(0.5), Some(1.5));
        insert_summary(&conn, "r3", "train/loss", Some(0.4), 10, Some(0.4), Some(2.0));
        insert_summary(&conn, "r4", "train/loss", Some(0.8), 5, Some(0.8), Some(2.0));
        insert_summary(&conn, "r5", "val_loss", Some(0.1), 100, Some(0.1), Some(0.5));
        insert_summary(&conn, "r6", "val_loss", Some(0.05), 100, Some(0.05), Some(0.5));
        conn
    }

    fn execute(conn: &Connection, query: &SearchQuery) -> Vec<String> {
        let mut statement = conn.prepare(&query.sql).unwrap();
        let rows = statement.query_map(params_from_iter(query.params.iter()), |row| row.get::<_, String>(0)).unwrap();
        rows.collect::<rusqlite::Result<Vec<_>>>().unwrap()
    }

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

    fn assert_error(error: SearchError, field: &str, position: usize, fragment: &str) {
        assert_eq!(error.field, field, "{error:?}");
        assert!(error.reason.starts_with(&format!("at {position}: ")), "{error:?}");
        assert!(error.reason.contains(fragment), "{error:?} should mention {fragment:?}");
    }

    #[test]
    fn filter_errors_name_the_position_and_what_was_expected() {
        assert_error(filter_error("metrics.val_loss < "), FILTER, 19, "expected a value after '<', found end of input");
        assert_error(filter_error("metrics.val_loss < and"), FILTER, 19, "expected a value after '<', found 'and'");
        assert_error(filter_error("foo = 1"), FILTER, 0, "unknown field 'foo'");
        assert_error(filter_error("metric_avg.x = 1"), FILTER, 0, "unknown field prefix 'metric_avg.'");
        assert_error(
            filter_error("attributes.colour = 'red'"),
            FILTER,
            11,
            "expected an attribute after 'attributes.'",
        );
        assert_error(filter_error("name = 'abc"), FILTER, 7, "unterminated string");
        assert_error(filter_error("metrics.`val loss < 1"), FILTER, 8, "unterminated quoted key");
        assert_error(
            filter_error("status = 'x' status = 'y'"),
            FILTER,
            13,
            "expected 'and', 'or' or end of input, found 'status'",
        );
        assert_error(filter_error("(status = 'x'"), FILTER, 13, "expected 'and', 'or' or ')', found end of input");
        assert_error(filter_error("status = 'x')"), FILTER, 12, "found ')'");
        assert_error(filter_error("status ~ 'x'"), FILTER, 7, "expected an operator after 'status'");
        assert_error(filter_error("status not 'x'"), FILTER, 11, "expected 'like', 'ilike' or 'in' after 'not'");
        assert_error(filter_error("end_time is 5"), FILTER, 12, "expected 'null' or 'not null' after 'is'");
        assert_error(filter_error("status = 'x' and"), FILTER, 16, "expected a field");
        assert_error(filter_error("()"), FILTER, 1, "expected a field");
        assert_error(filter_error("params. = 1"), FILTER, 7, "expected a key after 'params.'");
        assert_error(filter_error("metrics.x < 'a'"), FILTER, 12, "expected a number to compare with metrics.x");
        assert_error(filter_error("start_time > true"), FILTER, 13, "expected a number to compare with start_time");
        assert_error(filter_error("metrics.x like '%'"), FILTER, 10, "needs a text field");
        assert_error(filter_error("name like 5"), FILTER, 10, "expected a quoted pattern");
        assert_error(filter_error("metrics.x < 1.2.3"), FILTER, 12, "malformed number");
        assert_error(filter_error("metrics.x < 1e"), FILTER, 12, "malformed number");
        assert_error(filter_error("metrics.x < 12abc"), FILTER, 12, "malformed number");
        assert_error(filter_error("metrics.x < -"), FILTER, 12, "malformed number");
        assert_error(filter_error("metrics.x < 1e999"), FILTER, 12, "out of range");
        assert_error(filter_error("status in 'x'"), FILTER, 10, "expected '(' after 'in'");
        assert_error(filter_error("status in ('x' 'y')"), FILTER, 15, "expected ',' or ')'");
        assert_error(filter_error("status in ()"), FILTER, 11, "expected a value after '('");
        assert_error(filter_error("status = nul"), FILTER, 9, "expected a value after '='");
        let deep = format!("{}status = 'x'{}", "(".repeat(100), ")".repeat(100));
        assert_error(filter_error(&deep), FILTER, 16, "nested too deep: at most 16 levels");
        assert_error(filter_error(&"not ".repeat(100)), FILTER, 64, "nested too deep: at most 16 levels");
    }

    #[test]
    fn order_by_errors_name_the_item_and_position() {
        let error = order_error(&["metrics.x sideways"]);
        assert_eq!(error.field, ORDER_BY);
        assert!(error.reason.starts_with("item 1 (\"metrics.x sideways\") at 10: expected 'asc', 'desc'"), "{error:?}");
        let error = order_error(&["name", "bogus desc"]);
        assert_eq!(error.field, ORDER_BY);
        assert!(error.reason.starts_with("item 2 (\"bogus desc\") at 0: unknown field 'bogus'"), "{error:?}");
        let error = order_error(&["  "]);
        assert!(error.reason.starts_with("item 1 (\"  \") at 2: expected a field"), "{error:?}");
        let error = order_error(&["params. asc"]);
        assert!(error.reason.contains("at 7: expected a key after 'params.'"), "{error:?}");
        let error = order_error(&["name asc desc"]);
        assert!(
            error.reason.contains("at 9: expected 'asc', 'desc' or the end of the item, found 'desc'"),
            "{error:?}"
        );
        let many: Vec<&str> = std::iter::repeat_n("name", MAX_ORDER_BY_ITEMS + 1).collect();
        assert_eq!(order_error(&many).field, ORDER_BY);
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
