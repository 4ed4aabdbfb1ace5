//! Reading a run's console lines: filters, search and paging over the lines in their order.
//! Pure: the caller brings the lines.

use regex_lite::Regex;
use std::collections::BTreeSet;
use trainlog_schema::console::{ConsoleLine, ConsoleStream};

/// What to keep. Every condition given must hold.
#[derive(Debug, Default, Clone)]
pub struct LineFilter {
    pub ranks: Option<BTreeSet<u32>>,
    pub stream: Option<ConsoleStream>,
    pub attempt: Option<i64>,
    /// Lines logged at steps in `[from, to]`; lines before the first step have none and are left out.
    pub step_from: Option<i64>,
    pub step_to: Option<i64>,
    /// Lines read at times in `[since, until]`, ms since the epoch.
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub search: Option<Search>,
}

/// A search within lines, ignoring ANSI colour codes.
#[derive(Debug, Clone)]
pub enum Search {
    /// Text, ignoring case.
    Text(String),
    Regex(Regex),
}

impl Search {
    pub fn text(text: &str) -> Self {
        Search::Text(text.to_lowercase())
    }

    fn matches(&self, line: &str) -> bool {
        let plain = strip_ansi(line);
        match self {
            Search::Text(text) => {
                if plain.is_ascii() && text.is_ascii() {
                    contains_ignoring_ascii_case(plain.as_bytes(), text.as_bytes())
                } else {
                    plain.to_lowercase().contains(text.as_str())
                }
            }
            Search::Regex(re) => re.is_match(&plain),
        }
    }
}

fn contains_ignoring_ascii_case(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
}

/// `line` without its ANSI escape sequences (colours, cursor moves).
pub fn strip_ansi(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains('\u{1b}') {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                while let Some(c) = chars.next() {
                    if c == '\u{7}' || (c == '\u{1b}' && chars.peek() == Some(&'\\')) {
                        chars.next_if_eq(&'\\');
                        break;
                    }
                }
            }
            Some(_) => {
                chars.next();
            }
            None => {}
        }
    }
    std::borrow::Cow::Owned(out)
}

impl LineFilter {
    pub fn keeps(&self, l: &ConsoleLine) -> bool {
        self.ranks.as_ref().is_none_or(|r| r.contains(&l.rank))
            && self.stream.is_none_or(|s| s == l.stream)
            && self.attempt.is_none_or(|a| a == l.attempt)
            && self.step_from.is_none_or(|from| l.step.is_some_and(|s| s >= from))
            && self.step_to.is_none_or(|to| l.step.is_some_and(|s| s <= to))
            && self.since_ms.is_none_or(|t| l.time_ms >= t)
            && self.until_ms.is_none_or(|t| l.time_ms <= t)
            && self.search.as_ref().is_none_or(|s| s.matches(&l.line))
    }
}

/// Where a page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageStart {
    /// The n-th matching line, from 0.
    Offset(usize),
    /// The last `limit` matching lines.
    Tail,
    /// The first matching line at or after this step (the last page when none is).
    AtStep(i64),
    /// The first matching line after line number `n` of the run (follow mode).
    After(usize),
}

/// One page of matching lines, each with its number among all the run's lines.
#[derive(Debug, Default)]
pub struct LinePage<'a> {
    pub lines: Vec<(usize, &'a ConsoleLine)>,
    /// Matching lines in all.
    pub matched: usize,
    /// The page's first line's place among the matching ones.
    pub offset: usize,
}

/// The page of `lines` that `filter` keeps, starting at `start`, of at most `limit` lines.
pub fn page<'a>(lines: &'a [ConsoleLine], filter: &LineFilter, start: PageStart, limit: usize) -> LinePage<'a> {
    let matching: Vec<usize> = (0..lines.len()).filter(|&i| filter.keeps(&lines[i])).collect();
    let matched = matching.len();
    let offset = match start {
        PageStart::Offset(n) => n.min(matched),
        PageStart::Tail => matched.saturating_sub(limit),
        PageStart::AtStep(step) => matching
            .iter()
            .position(|&i| lines[i].step.is_some_and(|s| s >= step))
            .unwrap_or(matched.saturating_sub(limit)),
        PageStart::After(n) => matching.partition_point(|&i| i <= n),
    };
    let end = offset.saturating_add(limit).min(matched);
    LinePage { lines: matching[offset..end].iter().map(|&i| (i, &lines[i])).collect(), matched, offset }
}

/// The ranks, attempts and streams a run's lines have, for the reader's filters.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LineFacets {
    pub ranks: BTreeSet<u32>,
    pub attempts: BTreeSet<i64>,
    pub streams: BTreeSet<&'static str>,
}

pub fn facets(lines: &[ConsoleLine]) -> LineFacets {
    let mut out = LineFacets::default();
    for l in lines {
        out.ranks.insert(l.rank);
        out.attempts.insert(l.attempt);
        out.streams.insert(l.stream.as_str());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn line(rank: u32, step: Option<i64>, stream: ConsoleStream, text: &str) -> ConsoleLine {
        ConsoleLine {
            time_ms: 0,
            rank,
            node: Arc::from("n"),
            attempt: 1,
            step,
            stream,
            line: text.into(),
            source: Arc::from("s"),
            seq: 0,
        }
    }

    fn lines() -> Vec<ConsoleLine> {
        vec![
            line(0, None, ConsoleStream::Stdout, "starting"),
            line(0, Some(1), ConsoleStream::Stdout, "\u{1b}[32mstep 1 loss 0.5\u{1b}[0m"),
            line(2, Some(1), ConsoleStream::Stderr, "Traceback (most recent call last):"),
            line(2, Some(2), ConsoleStream::Stderr, "RuntimeError: CUDA out of memory"),
            line(0, Some(2), ConsoleStream::Stdout, "step 2 loss 0.4"),
        ]
    }

    #[test]
    fn filters_combine_and_search_ignores_case_and_colours() {
        let all = lines();
        let rank2 = LineFilter { ranks: Some([2].into()), ..Default::default() };
        assert_eq!(page(&all, &rank2, PageStart::Offset(0), 10).matched, 2);
        let green = LineFilter { search: Some(Search::text("STEP 1 LOSS")), ..Default::default() };
        let found = page(&all, &green, PageStart::Offset(0), 10);
        assert_eq!(found.lines.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![1]);
        let regex = LineFilter {
            search: Some(Search::Regex(Regex::new(r"^\w+Error:").unwrap())),
            stream: Some(ConsoleStream::Stderr),
            ..Default::default()
        };
        assert_eq!(page(&all, &regex, PageStart::Offset(0), 10).lines[0].0, 3);
        let steps = LineFilter { step_from: Some(2), ..Default::default() };
        assert_eq!(page(&all, &steps, PageStart::Offset(0), 10).matched, 2);
    }

    #[test]
    fn pages_start_at_an_offset_the_tail_a_step_or_after_a_line() {
        let all = lines();
        let any = LineFilter::default();
        let tail = page(&all, &any, PageStart::Tail, 2);
        assert_eq!((tail.offset, tail.lines[0].0), (3, 3));
        let at = page(&all, &any, PageStart::AtStep(2), 10);
        assert_eq!(at.offset, 3);
        let after = page(&all, &any, PageStart::After(3), 10);
        assert_eq!(after.lines.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![4]);
        assert_eq!(page(&all, &any, PageStart::Offset(99), 10).lines.len(), 0);
    }

    #[test]
    fn ansi_sequences_are_stripped_for_search() {
        assert_eq!(strip_ansi("\u{1b}[1;31mred\u{1b}[0m plain"), "red plain");
        assert_eq!(strip_ansi("\u{1b}]0;title\u{7}text"), "text");
    }
}
