//! The parsed form of a filter and of order-by items: fields, typed comparisons and boolean structure.

/// Which summary of a metric a field names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricColumn {
    Last,
    Min,
    Max,
    Mean,
    Step,
}

/// A run's own attribute, named without a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attribute {
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
    /// The run's job: how many times it started, its GPUs, ranks and nodes, and its work lost
    /// to preemptions. NULL for a run no process joined as a job.
    Attempts,
    Gpus,
    WorldSize,
    Nodes,
    LostUsd,
    LostGpuHours,
    StepsReplayed,
}

impl Attribute {
    pub(crate) fn from_name(lowercase_name: &str) -> Option<Self> {
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
            "attempts" => Attribute::Attempts,
            "gpus" => Attribute::Gpus,
            "world_size" => Attribute::WorldSize,
            "nodes" | "node_count" => Attribute::Nodes,
            "lost_usd" => Attribute::LostUsd,
            "lost_gpu_hours" => Attribute::LostGpuHours,
            "steps_replayed" => Attribute::StepsReplayed,
            _ => return None,
        })
    }

    pub(crate) fn is_numeric(self) -> bool {
        matches!(
            self,
            Attribute::StartTime
                | Attribute::EndTime
                | Attribute::Duration
                | Attribute::Attempts
                | Attribute::Gpus
                | Attribute::WorldSize
                | Attribute::Nodes
                | Attribute::LostUsd
                | Attribute::LostGpuHours
                | Attribute::StepsReplayed
        )
    }
}

/// What a filter compares or an order-by item sorts by.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Field {
    Metric { column: MetricColumn, key: String },
    Param { key: String },
    Tag { key: String },
    Attribute(Attribute),
}

/// How a field's values are stored, which decides the literals it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueKind {
    Numeric,
    Text,
    /// A number (or bool) or a text, compared as whichever the literal is.
    Param,
}

impl Field {
    pub(crate) fn kind(&self) -> ValueKind {
        match self {
            Field::Metric { .. } => ValueKind::Numeric,
            Field::Param { .. } => ValueKind::Param,
            Field::Tag { .. } => ValueKind::Text,
            Field::Attribute(attribute) if attribute.is_numeric() => ValueKind::Numeric,
            Field::Attribute(_) => ValueKind::Text,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    /// Whether the operator compares by order, where text goes by collation (not `=`/`!=`).
    pub(crate) fn orders(self) -> bool {
        !matches!(self, CompareOp::Eq | CompareOp::Ne)
    }
}

/// A number as the filter wrote it: an integer when written as one that fits, else a finite real.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Number {
    Int(i64),
    Real(f64),
}

/// A value a field is compared with, already of a type the field accepts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Operand {
    Number(Number),
    Text(String),
}

/// A piece of a `like` pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatternPiece {
    AnySequence,
    AnyChar,
    Literal(char),
}

/// What a comparison asks of its field.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Test {
    IsNull { negated: bool },
    Like { negated: bool, case_insensitive: bool, pattern: Vec<PatternPiece> },
    Compare { op: CompareOp, operand: Operand },
    In { negated: bool, operands: Vec<Operand> },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Comparison {
    pub(crate) field: Field,
    pub(crate) test: Test,
}

/// A filter expression. `Any` and `All` hold two or more filters.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Filter {
    Any(Vec<Filter>),
    All(Vec<Filter>),
    Not(Box<Filter>),
    Comparison(Comparison),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OrderItem {
    pub(crate) field: Field,
    pub(crate) descending: bool,
}

/// A search's filter (none when it was empty) and its order-by items.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SearchRequest {
    pub(crate) filter: Option<Filter>,
    pub(crate) order: Vec<OrderItem>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_names_and_kinds() {
        assert_eq!(Attribute::from_name("run_id"), Some(Attribute::Id));
        assert_eq!(Attribute::from_name("id"), Some(Attribute::Id));
        assert_eq!(Attribute::from_name("Status"), None, "names are lower-cased before the lookup");
        assert_eq!(Field::Attribute(Attribute::Duration).kind(), ValueKind::Numeric);
        assert_eq!(Field::Attribute(Attribute::ParentId).kind(), ValueKind::Text);
        assert_eq!(Field::Metric { column: MetricColumn::Step, key: "x".to_owned() }.kind(), ValueKind::Numeric);
        assert_eq!(Field::Param { key: "x".to_owned() }.kind(), ValueKind::Param);
        assert_eq!(Field::Tag { key: "x".to_owned() }.kind(), ValueKind::Text);
    }

    #[test]
    fn only_inequalities_order() {
        assert!(!CompareOp::Eq.orders() && !CompareOp::Ne.orders());
        assert!([CompareOp::Lt, CompareOp::Le, CompareOp::Gt, CompareOp::Ge].iter().all(|op| op.orders()));
    }
}
