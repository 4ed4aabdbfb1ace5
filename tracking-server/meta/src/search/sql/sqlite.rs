//! SQLite's forms: `like` as a case-sensitive `GLOB`, `ilike` as `LIKE` (which folds ASCII case only), now
//! from `julianday('now')`, and text by bytes under the default `BINARY` collation.

use super::{like_pattern, DialectSql, PatternPiece};

pub(super) struct Sqlite;

impl DialectSql for Sqlite {
    fn now_ms(&self) -> &'static str {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS BIGINT)"
    }

    fn bytewise(&self) -> &'static str {
        ""
    }

    fn like(&self, column: &str, placeholder: &str, case_insensitive: bool) -> String {
        if case_insensitive {
            format!("{column} LIKE {placeholder} ESCAPE '\\'")
        } else {
            format!("{column} GLOB {placeholder}")
        }
    }

    fn pattern(&self, pieces: &[PatternPiece], case_insensitive: bool) -> String {
        if case_insensitive {
            like_pattern(pieces)
        } else {
            glob_pattern(pieces)
        }
    }
}

/// The pattern for `GLOB`, whose own wildcards are made literal by a one-character class.
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

#[cfg(test)]
mod tests {
    use super::*;
    use PatternPiece::{AnyChar, AnySequence, Literal};

    #[test]
    fn glob_wildcards_in_a_pattern_are_literal_and_like_wildcards_become_glob_ones() {
        let pieces = [Literal('a'), AnySequence, Literal('*'), AnyChar, Literal('?'), Literal('['), Literal('%')];
        assert_eq!(Sqlite.pattern(&pieces, false), "a*[*]?[?][[]%");
        assert_eq!(Sqlite.pattern(&pieces, true), "a%*_?[\\%");
        assert_eq!(Sqlite.like("runs.name", "?3", false), "runs.name GLOB ?3");
        assert_eq!(Sqlite.like("runs.name", "?3", true), "runs.name LIKE ?3 ESCAPE '\\'");
    }
}
