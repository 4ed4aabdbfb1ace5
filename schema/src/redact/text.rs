//! Secrets in free text (diffs, configuration, code): private keys, credentials in URLs and
//! headers, assignments with secret names and tokens of known shapes (see the parent module).

use std::borrow::Cow;
use std::sync::LazyLock;

use regex_lite::{Captures, Regex};

use super::{is_secret_assignment_name, redact_urls, MASK};

/// How a token shape is masked.
enum Keep {
    /// The whole match becomes the mask.
    Nothing,
    /// The first group stays (the public id of a trainlog key).
    FirstGroup,
}

/// A token of a known shape: found anywhere, looked for only where its literal start occurs.
struct Shape {
    literals: &'static [&'static str],
    pattern: &'static str,
    keep: Keep,
    /// A last check on the match, where the pattern alone would take words for tokens.
    accept: fn(&str) -> bool,
}

fn anything(_: &str) -> bool {
    true
}

fn has_digit(token: &str) -> bool {
    token.bytes().any(|b| b.is_ascii_digit())
}

const SHAPES: &[Shape] = &[
    Shape {
        literals: &["AKIA", "ASIA"],
        pattern: r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
        keep: Keep::Nothing,
        accept: anything,
    },
    Shape {
        literals: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
        pattern: r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        keep: Keep::Nothing,
        accept: anything,
    },
    Shape {
        literals: &["xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-"],
        pattern: r"\bxox[baprs]-[A-Za-z0-9-]{10,}",
        keep: Keep::Nothing,
        accept: anything,
    },
    Shape { literals: &["sk-"], pattern: r"\bsk-[A-Za-z0-9_-]{20,}", keep: Keep::Nothing, accept: has_digit },
    Shape {
        literals: &["k_live_", "k_test_"],
        pattern: r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}",
        keep: Keep::Nothing,
        accept: anything,
    },
    Shape { literals: &["hf_"], pattern: r"\bhf_[A-Za-z0-9]{30,}", keep: Keep::Nothing, accept: has_digit },
    Shape { literals: &["AIza"], pattern: r"\bAIza[0-9A-Za-z_-]{35}", keep: Keep::Nothing, accept: anything },
    Shape {
        literals: &["eyJ"],
        pattern: r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        keep: Keep::Nothing,
        accept: anything,
    },
    Shape {
        literals: &["tl_"],
        pattern: r"\b(tl_[0-9a-f]{12}_)[0-9a-f]{64}\b",
        keep: Keep::FirstGroup,
        accept: anything,
    },
];

/// Words (lower case) without which a line holds no secret header, flag or assignment.
const LINE_HINTS: &[&str] = &[
    "pass",
    "pwd",
    "pw",
    "secret",
    "token",
    "credential",
    "signature",
    "key",
    "cookie",
    "bearer",
    "jwt",
    "authorization",
];

const PRIVATE_KEY: &str =
    r"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)";
const HEADER: &str =
    r#"(?i)(\bauthorization["']?[ \t]*[:=][ \t]*["']?(?:(?:bearer|basic|token|digest|bot)[ \t]+)?)([^\s"',;`]+)"#;
const BEARER: &str = r"(?i)\b(bearer[ \t]+)([A-Za-z0-9._~+/-]{16,}=*)";
const FLAG: &str =
    r#"(?m)(^|[\s"'(\[])(--?)([A-Za-z][A-Za-z0-9_.-]*)([ \t]+)("[^"\n]*"|'[^'\n]*'|[^\s"'`=:-][^\s"'`]*)"#;
const ASSIGNMENT: &str = r#"([A-Za-z_][A-Za-z0-9_.-]*)(["']?)([ \t]*(?::=|=|:)[ \t]*)("[^"\n]*"|'[^'\n]*'|[^\s"'`,;)\]}&=][^\s"'`,;)\]}&]*)"#;

/// Types a value after `name:` may be, in code that annotates (`token: str`).
const TYPE_NAMES: &[&str] = &[
    "str",
    "string",
    "bytes",
    "int",
    "float",
    "bool",
    "boolean",
    "any",
    "object",
    "dict",
    "list",
    "secretstr",
    "number",
];

/// Unquoted values that are literals of a language, not secrets.
const KEYWORDS: &[&str] = &["none", "null", "nil", "true", "false", "yes", "no", "on", "off", "undefined", "~"];

struct Patterns {
    private_key: Regex,
    header: Regex,
    bearer: Regex,
    flag: Regex,
    assignment: Regex,
    shapes: Vec<Regex>,
}

impl Patterns {
    fn compile() -> Result<Patterns, regex_lite::Error> {
        Ok(Patterns {
            private_key: Regex::new(PRIVATE_KEY)?,
            header: Regex::new(HEADER)?,
            bearer: Regex::new(BEARER)?,
            flag: Regex::new(FLAG)?,
            assignment: Regex::new(ASSIGNMENT)?,
            shapes: SHAPES.iter().map(|shape| Regex::new(shape.pattern)).collect::<Result<_, _>>()?,
        })
    }
}

/// None only if a pattern above does not compile, which a test rules out; redaction then masks
/// the whole text rather than keep a secret.
static PATTERNS: LazyLock<Option<Patterns>> = LazyLock::new(|| Patterns::compile().ok());

/// `text` with the secrets in it masked (see the parent module's rule), and how many were masked.
pub fn redact_text(text: &str) -> (String, usize) {
    let Some(patterns) = PATTERNS.as_ref() else {
        return (MASK.to_owned(), usize::from(!text.is_empty()));
    };
    let mut count = 0;
    let mut text = Cow::Borrowed(text);
    if text.contains("PRIVATE KEY") {
        let replaced = patterns.private_key.replace_all(&text, |_: &Captures<'_>| {
            count += 1;
            MASK
        });
        text = Cow::Owned(replaced.into_owned());
    }
    if text.contains("://") {
        let (redacted, found) = redact_urls(&text);
        count += found;
        text = Cow::Owned(redacted);
    }
    if has_hint(&text) {
        let mut redacted = String::with_capacity(text.len());
        for line in text.split_inclusive('\n') {
            let candidates = if has_hint(line) { Candidates::of(line) } else { Candidates::default() };
            if candidates.any() {
                redacted.push_str(&redact_line(patterns, line, &candidates, &mut count));
            } else {
                redacted.push_str(line);
            }
        }
        text = Cow::Owned(redacted);
    }
    for (shape, regex) in SHAPES.iter().zip(&patterns.shapes) {
        if !shape.literals.iter().any(|literal| text.contains(literal)) {
            continue;
        }
        let replaced = regex.replace_all(&text, |caps: &Captures<'_>| {
            let found = &caps[0];
            if !(shape.accept)(found) {
                return found.to_owned();
            }
            count += 1;
            match (&shape.keep, caps.get(1)) {
                (Keep::FirstGroup, Some(kept)) => format!("{}{MASK}", kept.as_str()),
                _ => MASK.to_owned(),
            }
        });
        if let Cow::Owned(replaced) = replaced {
            text = Cow::Owned(replaced);
        }
    }
    (text.into_owned(), count)
}

fn has_hint(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    LINE_HINTS.iter().any(|hint| lower.contains(hint))
}

/// What a line may hold, by a quick look at its names (runs of letters, digits, `_`, `.` and
/// `-`): only the patterns it may match are searched.
#[derive(Default)]
struct Candidates {
    header: bool,
    bearer: bool,
    flag: bool,
    assignment: bool,
}

impl Candidates {
    fn of(line: &str) -> Candidates {
        let mut found = Candidates::default();
        let is_name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
        let mut rest = line;
        while let Some(start) = rest.find(is_name_char) {
            let run = &rest[start..];
            let len = run.find(|c: char| !is_name_char(c)).unwrap_or(run.len());
            let (run, after) = run.split_at(len);
            rest = after;
            let name = run.trim_start_matches('-');
            if name.eq_ignore_ascii_case("authorization") {
                found.header = true;
            } else if name.eq_ignore_ascii_case("bearer") {
                found.bearer = true;
            }
            if name.is_empty() || !is_secret_assignment_name(name) {
                continue;
            }
            if run.starts_with('-') && after.starts_with([' ', '\t']) {
                found.flag = true;
            }
            let separator = after.trim_start_matches(['"', '\'']).trim_start_matches([' ', '\t']);
            if separator.starts_with(':') || (separator.starts_with('=') && !separator.starts_with("==")) {
                found.assignment = true;
            }
        }
        found
    }

    fn any(&self) -> bool {
        self.header || self.bearer || self.flag || self.assignment
    }
}

/// One line with its secret headers, bearer tokens, flags and assignments masked.
fn redact_line(patterns: &Patterns, line: &str, candidates: &Candidates, count: &mut usize) -> String {
    let mut line = line.to_owned();
    if candidates.header {
        line = patterns
            .header
            .replace_all(&line, |caps: &Captures<'_>| {
                let value = &caps[2];
                if value.len() < 8 || is_reference_or_literal(value, false) {
                    return caps[0].to_owned();
                }
                *count += 1;
                format!("{}{MASK}", &caps[1])
            })
            .into_owned();
    }
    if candidates.header || candidates.bearer {
        line = patterns
            .bearer
            .replace_all(&line, |caps: &Captures<'_>| {
                *count += 1;
                format!("{}{MASK}", &caps[1])
            })
            .into_owned();
    }
    if candidates.flag {
        line = patterns
            .flag
            .replace_all(&line, |caps: &Captures<'_>| {
                let (name, value) = (&caps[3], &caps[5]);
                let (quote, inner) = unquote(value);
                if !is_secret_assignment_name(name) || is_reference_or_literal(inner, quote.is_some()) {
                    return caps[0].to_owned();
                }
                *count += 1;
                format!("{}{}{name}{}{}", &caps[1], &caps[2], &caps[4], masked(quote))
            })
            .into_owned();
    }
    if candidates.assignment {
        let whole = line.as_str();
        line = patterns
            .assignment
            .replace_all(whole, |caps: &Captures<'_>| {
                let (name, name_quote, separator, value) = (&caps[1], &caps[2], &caps[3], &caps[4]);
                let (quote, inner) = unquote(value);
                let after = caps.get(0).map_or("", |m| &whole[m.end()..]);
                // `"--password=", "x"`: the quote after `=` ends a string, it opens no value.
                let closes_a_string = quote.is_some() && inner.starts_with([')', ']', '}', ',', ';', ' ']);
                let keep = closes_a_string
                    || !is_secret_assignment_name(name)
                    || is_reference_or_literal(inner, quote.is_some())
                    || (quote.is_none() && is_code(separator, inner, after));
                if keep {
                    return caps[0].to_owned();
                }
                *count += 1;
                format!("{name}{name_quote}{separator}{}", masked(quote))
            })
            .into_owned();
    }
    line
}

/// The quote around a value, if any, and what it holds.
fn unquote(value: &str) -> (Option<char>, &str) {
    match value.chars().next() {
        Some(quote @ ('"' | '\'')) if value.len() >= 2 && value.ends_with(quote) => {
            (Some(quote), &value[1..value.len() - 1])
        }
        _ => (None, value),
    }
}

fn masked(quote: Option<char>) -> String {
    match quote {
        Some(quote) => format!("{quote}{MASK}{quote}"),
        None => MASK.to_owned(),
    }
}

/// Whether a value holds no secret whatever its name: empty, already masked, a reference
/// (`$TOKEN`, `{token}`, `<your key>`, `HF_TOKEN`), a path, a placeholder (`xxx`, `tl_…`), or,
/// unquoted, a keyword or a number.
fn is_reference_or_literal(value: &str, quoted: bool) -> bool {
    let Some(first) = value.chars().next() else {
        return true;
    };
    value.starts_with(MASK)
        || matches!(first, '$' | '{' | '<' | '[' | '%')
        || (value.len() >= 3 && value.chars().all(|c| c == first))
        || value.contains('…')
        || is_variable_name(value)
        || is_path(value)
        || (!quoted && (KEYWORDS.contains(&value.to_ascii_lowercase().as_str()) || value.parse::<f64>().is_ok()))
}

/// `TRAINLOG_API_KEY`: the name of an environment variable (upper case, with an underscore).
fn is_variable_name(value: &str) -> bool {
    value.contains('_')
        && value.starts_with(|c: char| c.is_ascii_uppercase())
        && value.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// `/run/secrets/token`, `./keys/dev.pem`, `~/.netrc`: two parts or more of a path.
fn is_path(value: &str) -> bool {
    let rest = value.strip_prefix('~').or_else(|| value.strip_prefix("..")).or_else(|| value.strip_prefix('.'));
    let rest = rest.unwrap_or(value);
    rest.starts_with('/')
        && rest.matches('/').count() >= 2
        && rest.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))
}

/// Whether an unquoted value reads as code rather than as a literal (see the parent module):
/// after `:`, one that does not end the line or that is a type; after ` = `, one that does not
/// look generated; after `=`, a keyword argument (a `,` or `)` follows); anywhere, a call or an
/// index.
fn is_code(separator: &str, value: &str, after: &str) -> bool {
    if value.contains(['(', '[']) {
        return true;
    }
    if separator.trim() == ":" {
        let rest = after.split('\n').next().unwrap_or("").trim_start();
        let ends_line = rest.is_empty() || rest.starts_with('#');
        return !ends_line || TYPE_NAMES.contains(&value.to_ascii_lowercase().as_str());
    }
    if separator.starts_with([' ', '\t']) || separator.ends_with([' ', '\t']) {
        return !looks_generated(value);
    }
    after.starts_with([',', ')'])
}

/// Eight characters or more, letters and digits, and not a dotted name (`args.token2`).
fn looks_generated(value: &str) -> bool {
    let is_identifier = |part: &str| {
        part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let dotted_name = value.contains('.') && value.split('.').all(is_identifier);
    value.len() >= 8
        && value.bytes().any(|b| b.is_ascii_digit())
        && value.bytes().any(|b| b.is_ascii_alphabetic())
        && !dotted_name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        assert!(Patterns::compile().is_ok());
        assert!(PATTERNS.is_some());
    }
}
