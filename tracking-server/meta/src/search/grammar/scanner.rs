//! The characters of one filter or order-by item: whitespace, keywords, identifiers, quoted text and
//! numbers, each read at a position that errors name.

use super::ast::Number;
use crate::search::error::SearchError;
use std::fmt;

pub(super) fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

pub(super) fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | ':' | '-')
}

/// A cursor over the text's characters; positions count characters from 0.
pub(super) struct Scanner {
    chars: Vec<char>,
    pub(super) position: usize,
    /// The field errors are reported for: "filter" or "order_by".
    context: &'static str,
}

impl Scanner {
    pub(super) fn new(text: &str, context: &'static str) -> Self {
        Self { chars: text.chars().collect(), position: 0, context }
    }

    pub(super) fn error(&self, position: usize, message: impl fmt::Display) -> SearchError {
        SearchError { field: self.context, reason: format!("at {position}: {message}") }
    }

    pub(super) fn expected(&self, position: usize, what: &str) -> SearchError {
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

    /// The text between two positions.
    pub(super) fn text(&self, start: usize, end: usize) -> String {
        self.chars[start.min(self.chars.len())..end.min(self.chars.len())].iter().collect()
    }

    pub(super) fn peek(&self) -> Option<char> {
        self.chars.get(self.position).copied()
    }

    pub(super) fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.position += 1;
        }
    }

    pub(super) fn at_end(&self) -> bool {
        self.position >= self.chars.len()
    }

    pub(super) fn eat_char(&mut self, expected: char) -> bool {
        self.skip_whitespace();
        if self.peek() == Some(expected) {
            self.position += 1;
            true
        } else {
            false
        }
    }

    /// Consumes `symbol` when it comes next, without skipping whitespace.
    pub(super) fn eat_symbol(&mut self, symbol: &str) -> bool {
        let found = symbol.chars().enumerate().all(|(offset, c)| self.chars.get(self.position + offset) == Some(&c));
        if found {
            self.position += symbol.chars().count();
        }
        found
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
    pub(super) fn eat_keyword(&mut self, keyword: &str) -> bool {
        self.skip_whitespace();
        if self.keyword_at(self.position, keyword) {
            self.position += keyword.chars().count();
            true
        } else {
            false
        }
    }

    pub(super) fn read_identifier(&mut self) -> Option<String> {
        match self.peek() {
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
            _ => return None,
        }
        let start = self.position;
        while self.peek().is_some_and(is_word_char) {
            self.position += 1;
        }
        Some(self.text(start, self.position))
    }

    /// Reads an unquoted key (possibly empty).
    pub(super) fn read_bare_key(&mut self) -> String {
        let start = self.position;
        while self.peek().is_some_and(is_key_char) {
            self.position += 1;
        }
        self.text(start, self.position)
    }

    /// Reads text between `quote` characters (a doubled quote stands for one); the cursor is on the opening quote.
    pub(super) fn read_quoted(&mut self, quote: char, what: &str) -> Result<String, SearchError> {
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

    fn count_digits_from(&self, index: usize) -> usize {
        self.chars[index.min(self.chars.len())..].iter().take_while(|c| c.is_ascii_digit()).count()
    }

    /// Reads a number (`[+-]digits[.digits][e[+-]digits]`), answering it as written and its value.
    pub(super) fn read_number(&mut self) -> Result<(String, Number), SearchError> {
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
        let malformed = |scanner: &Self, end: usize| {
            scanner.error(start, format!("malformed number '{}'", scanner.text(start, end)))
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
        let source = self.text(start, end);
        self.position = end;
        let integer = if written_as_integer { source.parse::<i64>().ok() } else { None };
        let number = match integer {
            Some(integer) => Number::Int(integer),
            None => match source.parse::<f64>() {
                Ok(real) if real.is_finite() => Number::Real(real),
                _ => return Err(self.error(start, format!("number '{source}' is out of range"))),
            },
        };
        Ok((source, number))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(text: &str) -> Result<(String, Number), String> {
        Scanner::new(text, "filter").read_number().map_err(|error| error.reason)
    }

    #[test]
    fn numbers_keep_integers_exact_and_read_the_rest_as_reals() {
        assert_eq!(number("42 and").unwrap(), ("42".to_owned(), Number::Int(42)));
        assert_eq!(number("-7").unwrap(), ("-7".to_owned(), Number::Int(-7)));
        assert_eq!(number("5.").unwrap(), ("5.".to_owned(), Number::Real(5.0)));
        assert_eq!(number("+.5e1)").unwrap(), ("+.5e1".to_owned(), Number::Real(5.0)));
        assert_eq!(number("99999999999999999999").unwrap().1, Number::Real(1e20));
        assert_eq!(number("1e").unwrap_err(), "at 0: malformed number '1e'");
        assert_eq!(number("12abc").unwrap_err(), "at 0: malformed number '12a'");
        assert_eq!(number("-").unwrap_err(), "at 0: malformed number '-'");
        assert_eq!(number("1e999").unwrap_err(), "at 0: number '1e999' is out of range");
    }

    #[test]
    fn keywords_are_whole_words_in_any_case() {
        let mut scanner = Scanner::new("  AND andy", "filter");
        assert!(scanner.eat_keyword("and"));
        assert_eq!(scanner.position, 5);
        assert!(!scanner.eat_keyword("and"), "'andy' is another word");
        assert_eq!(scanner.position, 6, "the whitespace before it is skipped");
        assert_eq!(scanner.read_identifier().as_deref(), Some("andy"));
        assert!(scanner.at_end());
    }

    #[test]
    fn quoted_text_doubles_its_quote_and_must_be_closed() {
        let mut scanner = Scanner::new("'it''s' rest", "filter");
        assert_eq!(scanner.read_quoted('\'', "string").unwrap(), "it's");
        assert_eq!(scanner.position, 7);
        let error = Scanner::new("`open", "order_by").read_quoted('`', "quoted key").unwrap_err();
        assert_eq!(error.field, "order_by");
        assert_eq!(error.reason, "at 0: unterminated quoted key: expected a closing `");
    }

    #[test]
    fn errors_describe_what_was_found() {
        let scanner = Scanner::new("a = status_code", "filter");
        assert_eq!(scanner.expected(4, "a value").reason, "at 4: expected a value, found 'status_code'");
        assert_eq!(scanner.expected(2, "a field").reason, "at 2: expected a field, found '='");
        assert_eq!(scanner.expected(15, "a field").reason, "at 15: expected a field, found end of input");
    }
}
