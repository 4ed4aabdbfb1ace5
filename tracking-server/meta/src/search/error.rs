//! The error a search reports for a filter or order-by item it cannot compile.

use std::fmt;

/// The name of the filter in errors.
pub(crate) const FILTER: &str = "filter";
/// The name of the order-by items in errors.
pub(crate) const ORDER_BY: &str = "order_by";

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_field_then_the_reason() {
        let error = SearchError { field: FILTER, reason: "at 3: expected a value".to_owned() };
        assert_eq!(error.to_string(), "filter: at 3: expected a value");
    }
}
