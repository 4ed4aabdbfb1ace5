//! The filter and order-by grammar: a recursive-descent parser from text to the typed [`ast`].
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
//! Order-by items are `FIELD [asc|desc]` over the same fields.
//!
//! Each comparison is typed as it is parsed: metrics, `start_time`, `end_time` and `duration` take numbers
//! only; tags and the text attributes take text, a number or bool literal standing for the text it was
//! written as; params take either (a bool stands for 1 or 0). `like` and `ilike` take a quoted pattern on
//! a text field or a param.
//!
//! Limits (`trainlog_schema::limits`), each refused with an error naming the field: the filter's length
//! (`MAX_FILTER_BYTES`), its comparisons (`MAX_FILTER_COMPARISONS`) and levels of parentheses and `not`
//! (`MAX_FILTER_NESTING`); the number of order-by items (`MAX_ORDER_BY_ITEMS`) and each one's length
//! (`MAX_ORDER_BY_ITEM_BYTES`).

pub(crate) mod ast;
mod scanner;

use super::error::{SearchError, FILTER, ORDER_BY};
use ast::{
    Attribute, CompareOp, Comparison, Field, Filter, MetricColumn, Number, Operand, OrderItem, PatternPiece,
    SearchRequest, Test, ValueKind,
};
use scanner::Scanner;
use trainlog_schema::limits::{
    MAX_FILTER_BYTES, MAX_FILTER_COMPARISONS, MAX_FILTER_NESTING, MAX_ORDER_BY_ITEMS, MAX_ORDER_BY_ITEM_BYTES,
};

const FIELD_HINT: &str =
    "a field (metrics.KEY, metrics_min.KEY, metrics_max.KEY, metrics_mean.KEY, metrics_step.KEY, params.KEY, \
                          tags.KEY or one of status, name, user, host, group, id, run_id, parent_id, notes, \
                          start_time, end_time, duration)";

/// Parses a search's order-by items, then its filter (empty or whitespace for none), within the limits.
pub(crate) fn parse_search(filter: &str, order_by: &[String]) -> Result<SearchRequest, SearchError> {
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
    let mut order = Vec::with_capacity(order_by.len());
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
        let parsed = Parser::new(item, ORDER_BY).parse_order_item().map_err(|error| SearchError {
            field: ORDER_BY,
            reason: format!("item {} ({item:?}) {}", index + 1, error.reason),
        })?;
        order.push(parsed);
    }
    let filter = if filter.trim().is_empty() { None } else { Some(Parser::new(filter, FILTER).parse_filter()?) };
    Ok(SearchRequest { filter, order })
}

/// A literal as written, before it is typed by the field it is compared with.
enum Literal {
    /// `source` is the number as written.
    Number {
        source: String,
        value: Number,
    },
    Bool(bool),
    Text(String),
}

struct LiteralAt {
    literal: Literal,
    position: usize,
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
    /// As written, lower-cased, for messages.
    text: String,
    position: usize,
}

/// A parsed field and the text it was written as, for messages.
struct FieldAt {
    field: Field,
    text: String,
}

struct Parser {
    scanner: Scanner,
    depth: usize,
    comparisons: usize,
}

impl Parser {
    fn new(text: &str, context: &'static str) -> Self {
        Self { scanner: Scanner::new(text, context), depth: 0, comparisons: 0 }
    }

    fn enter_nesting(&mut self, position: usize) -> Result<(), SearchError> {
        self.depth += 1;
        if self.depth > MAX_FILTER_NESTING {
            return Err(self.scanner.error(
                position,
                format!("nested too deep: at most {MAX_FILTER_NESTING} levels of 'not' and parentheses are allowed"),
            ));
        }
        Ok(())
    }

    // ---- filter ----

    fn parse_filter(&mut self) -> Result<Filter, SearchError> {
        let filter = self.parse_or()?;
        self.scanner.skip_whitespace();
        if !self.scanner.at_end() {
            return Err(self.scanner.expected(self.scanner.position, "'and', 'or' or end of input"));
        }
        Ok(filter)
    }

    fn parse_or(&mut self) -> Result<Filter, SearchError> {
        let mut alternatives = vec![self.parse_and()?];
        while self.scanner.eat_keyword("or") {
            alternatives.push(self.parse_and()?);
        }
        Ok(group(alternatives, Filter::Any))
    }

    fn parse_and(&mut self) -> Result<Filter, SearchError> {
        let mut conjuncts = vec![self.parse_unary()?];
        while self.scanner.eat_keyword("and") {
            conjuncts.push(self.parse_unary()?);
        }
        Ok(group(conjuncts, Filter::All))
    }

    fn parse_unary(&mut self) -> Result<Filter, SearchError> {
        self.scanner.skip_whitespace();
        let start = self.scanner.position;
        if self.scanner.eat_keyword("not") {
            self.enter_nesting(start)?;
            let inner = self.parse_unary()?;
            self.depth -= 1;
            return Ok(Filter::Not(Box::new(inner)));
        }
        if self.scanner.peek() == Some('(') {
            self.enter_nesting(start)?;
            self.scanner.position += 1;
            let inner = self.parse_or()?;
            if !self.scanner.eat_char(')') {
                return Err(self.scanner.expected(self.scanner.position, "'and', 'or' or ')'"));
            }
            self.depth -= 1;
            return Ok(inner);
        }
        Ok(Filter::Comparison(self.parse_comparison()?))
    }

    fn parse_comparison(&mut self) -> Result<Comparison, SearchError> {
        self.scanner.skip_whitespace();
        self.comparisons += 1;
        if self.comparisons > MAX_FILTER_COMPARISONS {
            return Err(self.scanner.error(
                self.scanner.position,
                format!("a filter may hold at most {MAX_FILTER_COMPARISONS} comparisons; this is one more"),
            ));
        }
        let field = self.parse_field()?;
        let operator = self.parse_operator(&field)?;
        let test = match operator.operator {
            Operator::IsNull { negated } => Test::IsNull { negated },
            Operator::Like { negated, case_insensitive } => {
                let pattern = self.parse_value(&operator.text)?;
                if field.field.kind() == ValueKind::Numeric {
                    return Err(self.scanner.error(
                        operator.position,
                        format!("'{}' needs a text field, and {} is numeric", operator.text, field.text),
                    ));
                }
                let Literal::Text(pattern) = pattern.literal else {
                    return Err(self
                        .scanner
                        .error(pattern.position, format!("expected a quoted pattern after '{}'", operator.text)));
                };
                Test::Like { negated, case_insensitive, pattern: parse_like_pattern(&pattern) }
            }
            Operator::Compare(op) => {
                let value = self.parse_value(&operator.text)?;
                Test::Compare { op, operand: self.operand(&field, value)? }
            }
            Operator::In { negated } => {
                let values = self.parse_value_list(&operator.text)?;
                let operands = values.into_iter().map(|value| self.operand(&field, value)).collect::<Result<_, _>>()?;
                Test::In { negated, operands }
            }
        };
        Ok(Comparison { field: field.field, test })
    }

    /// Types a literal for the field it is compared with.
    fn operand(&self, field: &FieldAt, value: LiteralAt) -> Result<Operand, SearchError> {
        Ok(match (field.field.kind(), value.literal) {
            (ValueKind::Numeric | ValueKind::Param, Literal::Number { value: number, .. }) => Operand::Number(number),
            (ValueKind::Numeric, Literal::Bool(_)) => {
                return Err(self.scanner.error(
                    value.position,
                    format!("expected a number to compare with {}, found true/false", field.text),
                ))
            }
            (ValueKind::Numeric, Literal::Text(_)) => {
                return Err(self.scanner.error(
                    value.position,
                    format!("expected a number to compare with {}, found a quoted string", field.text),
                ))
            }
            (ValueKind::Param, Literal::Bool(flag)) => Operand::Number(Number::Int(i64::from(flag))),
            (ValueKind::Text, Literal::Number { source, .. }) => Operand::Text(source),
            (ValueKind::Text, Literal::Bool(flag)) => Operand::Text(flag.to_string()),
            (ValueKind::Text | ValueKind::Param, Literal::Text(text)) => Operand::Text(text),
        })
    }

    fn parse_field(&mut self) -> Result<FieldAt, SearchError> {
        self.scanner.skip_whitespace();
        let start = self.scanner.position;
        let Some(name) = self.scanner.read_identifier() else {
            return Err(self.scanner.expected(start, FIELD_HINT));
        };
        let lowercase_name = name.to_ascii_lowercase();
        let field = if self.scanner.peek() == Some('.') {
            self.scanner.position += 1;
            let metric = |column| move |key| Field::Metric { column, key };
            match lowercase_name.as_str() {
                "metrics" | "metric" => self.parse_key(&name).map(metric(MetricColumn::Last))?,
                "metrics_min" => self.parse_key(&name).map(metric(MetricColumn::Min))?,
                "metrics_max" => self.parse_key(&name).map(metric(MetricColumn::Max))?,
                "metrics_mean" => self.parse_key(&name).map(metric(MetricColumn::Mean))?,
                "metrics_step" => self.parse_key(&name).map(metric(MetricColumn::Step))?,
                "params" | "param" => Field::Param { key: self.parse_key(&name)? },
                "tags" | "tag" => Field::Tag { key: self.parse_key(&name)? },
                "attributes" | "attribute" | "attr" => {
                    let attribute_start = self.scanner.position;
                    match self.scanner.read_identifier().and_then(|n| Attribute::from_name(&n.to_ascii_lowercase())) {
                        Some(attribute) => Field::Attribute(attribute),
                        None => {
                            self.scanner.position = attribute_start;
                            return Err(self.scanner.expected(
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
                    return Err(self.scanner.error(
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
                None => {
                    return Err(self.scanner.error(start, format!("unknown field '{name}'; expected {FIELD_HINT}")))
                }
            }
        };
        let text = self.scanner.text(start, self.scanner.position);
        Ok(FieldAt { field, text })
    }

    fn parse_key(&mut self, prefix: &str) -> Result<String, SearchError> {
        let start = self.scanner.position;
        let key = match self.scanner.peek() {
            Some(quote @ ('`' | '"')) => self.scanner.read_quoted(quote, "quoted key")?,
            _ => self.scanner.read_bare_key(),
        };
        if key.is_empty() {
            return Err(self.scanner.expected(start, &format!("a key after '{prefix}.'")));
        }
        Ok(key)
    }

    fn parse_operator(&mut self, field: &FieldAt) -> Result<OperatorAt, SearchError> {
        self.scanner.skip_whitespace();
        let start = self.scanner.position;
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
            if self.scanner.eat_symbol(symbol) {
                return Ok(OperatorAt { operator: Operator::Compare(op), text: symbol.to_owned(), position: start });
            }
        }
        let scanner = &mut self.scanner;
        let operator = if scanner.eat_keyword("like") {
            Operator::Like { negated: false, case_insensitive: false }
        } else if scanner.eat_keyword("ilike") {
            Operator::Like { negated: false, case_insensitive: true }
        } else if scanner.eat_keyword("in") {
            Operator::In { negated: false }
        } else if scanner.eat_keyword("not") {
            if scanner.eat_keyword("like") {
                Operator::Like { negated: true, case_insensitive: false }
            } else if scanner.eat_keyword("ilike") {
                Operator::Like { negated: true, case_insensitive: true }
            } else if scanner.eat_keyword("in") {
                Operator::In { negated: true }
            } else {
                scanner.skip_whitespace();
                return Err(scanner.expected(scanner.position, "'like', 'ilike' or 'in' after 'not'"));
            }
        } else if scanner.eat_keyword("is") {
            let negated = scanner.eat_keyword("not");
            if !scanner.eat_keyword("null") {
                scanner.skip_whitespace();
                let what = if negated { "'null' after 'is not'" } else { "'null' or 'not null' after 'is'" };
                return Err(scanner.expected(scanner.position, what));
            }
            Operator::IsNull { negated }
        } else {
            return Err(scanner.expected(
                start,
                &format!(
                    "an operator after '{}' (=, !=, <, <=, >, >=, like, ilike, in, not in, is null, is not null)",
                    field.text
                ),
            ));
        };
        let text = scanner.text(start, scanner.position).to_ascii_lowercase();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        Ok(OperatorAt { operator, text, position: start })
    }

    fn parse_value_list(&mut self, operator_text: &str) -> Result<Vec<LiteralAt>, SearchError> {
        if !self.scanner.eat_char('(') {
            return Err(self.scanner.expected(self.scanner.position, &format!("'(' after '{operator_text}'")));
        }
        let mut values = vec![self.parse_value("(")?];
        loop {
            if self.scanner.eat_char(',') {
                values.push(self.parse_value(",")?);
            } else if self.scanner.eat_char(')') {
                return Ok(values);
            } else {
                return Err(self.scanner.expected(self.scanner.position, "',' or ')' in the value list"));
            }
        }
    }

    fn parse_value(&mut self, after: &str) -> Result<LiteralAt, SearchError> {
        let scanner = &mut self.scanner;
        scanner.skip_whitespace();
        let position = scanner.position;
        let literal = match scanner.peek() {
            Some(quote @ ('\'' | '"')) => Literal::Text(scanner.read_quoted(quote, "string")?),
            Some(c) if c.is_ascii_digit() || matches!(c, '-' | '+' | '.') => {
                let (source, value) = scanner.read_number()?;
                Literal::Number { source, value }
            }
            _ if scanner.eat_keyword("true") => Literal::Bool(true),
            _ if scanner.eat_keyword("false") => Literal::Bool(false),
            _ => return Err(scanner.expected(position, &format!("a value after '{after}'"))),
        };
        Ok(LiteralAt { literal, position })
    }

    // ---- order by ----

    fn parse_order_item(&mut self) -> Result<OrderItem, SearchError> {
        self.scanner.skip_whitespace();
        if self.scanner.at_end() {
            return Err(self.scanner.expected(self.scanner.position, FIELD_HINT));
        }
        let field = self.parse_field()?.field;
        let descending = if self.scanner.eat_keyword("desc") {
            true
        } else {
            self.scanner.eat_keyword("asc");
            false
        };
        self.scanner.skip_whitespace();
        if !self.scanner.at_end() {
            return Err(self.scanner.expected(self.scanner.position, "'asc', 'desc' or the end of the item"));
        }
        Ok(OrderItem { field, descending })
    }
}

/// One filter, or a group of two or more.
fn group(filters: Vec<Filter>, make_group: fn(Vec<Filter>) -> Filter) -> Filter {
    match <[Filter; 1]>::try_from(filters) {
        Ok([only]) => only,
        Err(filters) => make_group(filters),
    }
}

/// Splits a `like` pattern: `%` and `_` are wildcards, `\` makes the next character literal
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

#[cfg(test)]
mod tests {
    use super::*;

    fn filter_error(filter: &str) -> SearchError {
        match parse_search(filter, &[]) {
            Ok(request) => panic!("{filter:?} should fail, parsed to {request:?}"),
            Err(error) => error,
        }
    }

    fn order_error(order_by: &[&str]) -> SearchError {
        let order_by: Vec<String> = order_by.iter().map(|s| s.to_string()).collect();
        match parse_search("", &order_by) {
            Ok(request) => panic!("{order_by:?} should fail, parsed to {request:?}"),
            Err(error) => error,
        }
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

    fn filter(text: &str) -> Filter {
        parse_search(text, &[]).unwrap().filter.unwrap()
    }

    fn comparison(field: Field, test: Test) -> Filter {
        Filter::Comparison(Comparison { field, test })
    }

    fn tag(key: &str) -> Field {
        Field::Tag { key: key.to_owned() }
    }

    fn text(value: &str) -> Operand {
        Operand::Text(value.to_owned())
    }

    #[test]
    fn and_binds_tighter_than_or_and_parentheses_leave_no_trace() {
        let equals =
            |key: &str, value: &str| comparison(tag(key), Test::Compare { op: CompareOp::Eq, operand: text(value) });
        assert_eq!(
            filter("tags.a = 'x' or tags.b = 'y' and not (tags.c = 'z')"),
            Filter::Any(vec![
                equals("a", "x"),
                Filter::All(vec![equals("b", "y"), Filter::Not(Box::new(equals("c", "z")))]),
            ])
        );
        assert_eq!(filter("((tags.a = 'x'))"), equals("a", "x"));
        assert_eq!(parse_search(" \n ", &[]).unwrap().filter, None);
    }

    #[test]
    fn literals_take_the_type_of_their_field() {
        assert_eq!(
            filter("params.p in (1, 2.5, true, 'x')"),
            comparison(
                Field::Param { key: "p".to_owned() },
                Test::In {
                    negated: false,
                    operands: vec![
                        Operand::Number(Number::Int(1)),
                        Operand::Number(Number::Real(2.5)),
                        Operand::Number(Number::Int(1)),
                        text("x"),
                    ],
                },
            )
        );
        assert_eq!(
            filter("tags.t not in (1.50, false)"),
            comparison(tag("t"), Test::In { negated: true, operands: vec![text("1.50"), text("false")] })
        );
        assert_eq!(
            filter("metrics_step.`a b` >= 1e2"),
            comparison(
                Field::Metric { column: MetricColumn::Step, key: "a b".to_owned() },
                Test::Compare { op: CompareOp::Ge, operand: Operand::Number(Number::Real(100.0)) },
            )
        );
        assert_eq!(
            filter("attr.end_time IS NOT NULL"),
            comparison(Field::Attribute(Attribute::EndTime), Test::IsNull { negated: true })
        );
    }

    #[test]
    fn like_patterns_are_split_into_wildcards_and_literals() {
        use PatternPiece::{AnyChar, AnySequence, Literal};
        assert_eq!(
            filter(r"name not ilike 'a%\_b_\'"),
            comparison(
                Field::Attribute(Attribute::Name),
                Test::Like {
                    negated: true,
                    case_insensitive: true,
                    pattern: vec![Literal('a'), AnySequence, Literal('_'), Literal('b'), AnyChar, Literal('\\')],
                },
            )
        );
    }

    #[test]
    fn order_items_name_a_field_and_a_direction() {
        let order = ["params.lr DESC", " duration asc ", "tags.t"].map(str::to_owned);
        assert_eq!(
            parse_search("", &order).unwrap().order,
            [
                OrderItem { field: Field::Param { key: "lr".to_owned() }, descending: true },
                OrderItem { field: Field::Attribute(Attribute::Duration), descending: false },
                OrderItem { field: tag("t"), descending: false },
            ]
        );
    }

    #[test]
    fn order_by_errors_come_before_filter_errors() {
        let error = parse_search("foo = 1", &["bar".to_owned()]).unwrap_err();
        assert_eq!(error.field, ORDER_BY);
    }
}
