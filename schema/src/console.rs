//! Console lines: what a process printed to its stdout or stderr, one row per line, tagged with
//! the rank, node and attempt that printed it and the last step the run had logged.

use crate::{Error, Result};

/// The longest line kept whole, in bytes. Clients cut longer lines there and add [`CUT_MARK`].
pub const MAX_LINE_BYTES: usize = 16 * 1024;
/// What a client appends to a line it cut, followed by the number of bytes left out.
pub const CUT_MARK: &str = " [… cut ";
/// The most lines one request may carry.
pub const MAX_LINES_PER_BATCH: usize = 10_000;
/// The longest source id: a process's own id, unique among the run's processes.
pub const MAX_SOURCE_LEN: usize = 64;
/// The longest node name.
pub const MAX_NODE_LEN: usize = 255;

/// The stream a line was printed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConsoleStream {
    Stdout,
    Stderr,
}

impl ConsoleStream {
    pub fn as_str(self) -> &'static str {
        match self {
            ConsoleStream::Stdout => "stdout",
            ConsoleStream::Stderr => "stderr",
        }
    }

    pub fn parse(field: &str, text: &str) -> Result<Self> {
        match text {
            "stdout" => Ok(ConsoleStream::Stdout),
            "stderr" => Ok(ConsoleStream::Stderr),
            _ => Err(Error::new(field, format!("{text:?} is not a stream: use stdout or stderr"))),
        }
    }
}

/// One console line as stored. `source` names the process (unique within the run) and `seq`
/// numbers its lines from 0, so a batch sent twice is recognised line by line.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleLine {
    pub time_ms: i64,
    pub rank: u32,
    pub node: std::sync::Arc<str>,
    pub attempt: i64,
    pub step: Option<i64>,
    pub stream: ConsoleStream,
    pub line: String,
    pub source: std::sync::Arc<str>,
    pub seq: u64,
}

impl ConsoleLine {
    /// The order lines are read in: by time, then by rank, then each process's own order.
    pub fn order_key(&self) -> (i64, u32, &str, u64) {
        (self.time_ms, self.rank, &self.source, self.seq)
    }

    /// Bytes this line holds in memory, roughly.
    pub fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.line.len()
    }
}

/// Checks a process's source id: 1 to 64 letters, digits, `-` or `_`.
pub fn parse_source(field: &str, text: &str) -> Result<()> {
    if text.is_empty() || text.len() > MAX_SOURCE_LEN {
        return Err(Error::new(field, format!("must be 1 to {MAX_SOURCE_LEN} characters")));
    }
    if !text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(Error::new(field, "may hold only letters, digits, '-' and '_'"));
    }
    Ok(())
}

/// `line` cut at [`MAX_LINE_BYTES`] on a character boundary, with [`CUT_MARK`] and the bytes
/// left out; unchanged when it fits.
pub fn cut_line(line: &str) -> std::borrow::Cow<'_, str> {
    if line.len() <= MAX_LINE_BYTES {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut end = MAX_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}{CUT_MARK}{} bytes]", &line[..end], line.len() - end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_on_a_character_boundary_with_the_bytes_left_out() {
        let line = "é".repeat(MAX_LINE_BYTES);
        let cut = cut_line(&line);
        assert!(cut.len() < line.len());
        let (kept, mark) = cut.split_once(CUT_MARK).unwrap();
        assert_eq!(kept.len(), MAX_LINE_BYTES);
        assert_eq!(mark, format!("{} bytes]", line.len() - MAX_LINE_BYTES));
        assert_eq!(cut_line("short"), "short");
    }

    #[test]
    fn sources_and_streams_are_checked() {
        assert!(parse_source("source", "a1-b_2").is_ok());
        assert_eq!(parse_source("source", "a b").unwrap_err().field, "source");
        assert!(parse_source("source", "").is_err());
        assert_eq!(ConsoleStream::parse("stream", "stderr").unwrap(), ConsoleStream::Stderr);
        assert!(ConsoleStream::parse("stream", "stdin").is_err());
    }
}
