//! Bytes a process printed, cut into lines as a terminal would show them: `\n` ends a line,
//! `\r\n` too, and a `\r` that returns to the start of a line lets what follows replace it, so a
//! progress bar redrawn in place keeps its last state only.

use trainlog_schema::console::{CUT_MARK, MAX_LINE_BYTES};

/// Splits one stream's bytes into lines.
#[derive(Debug, Default)]
pub struct LineSplitter {
    current: Vec<u8>,
    /// Bytes of the current line past `MAX_LINE_BYTES`, left out.
    cut: usize,
    /// A `\r` came last: the next byte decides whether it ended the line or rewinds it.
    carriage_return: bool,
}

impl LineSplitter {
    /// Feeds bytes; `emit` gets each line completed, without its end.
    pub fn feed(&mut self, bytes: &[u8], mut emit: impl FnMut(String)) {
        for &b in bytes {
            match b {
                b'\n' => {
                    self.carriage_return = false;
                    emit(self.take());
                }
                b'\r' => self.carriage_return = true,
                _ => {
                    if self.carriage_return {
                        self.carriage_return = false;
                        self.current.clear();
                        self.cut = 0;
                    }
                    if self.current.len() < MAX_LINE_BYTES {
                        self.current.push(b);
                    } else {
                        self.cut += 1;
                    }
                }
            }
        }
    }

    /// The line begun and not ended, if any (at the end of the stream).
    pub fn finish(&mut self) -> Option<String> {
        self.carriage_return = false;
        (!self.current.is_empty()).then(|| self.take())
    }

    fn take(&mut self) -> String {
        let mut bytes = std::mem::take(&mut self.current);
        let cut = std::mem::take(&mut self.cut);
        // A character split by the cut is left out whole.
        let mut line = match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => {
                bytes = e.into_bytes();
                String::from_utf8_lossy(&bytes).into_owned()
            }
        };
        if cut > 0 {
            while line.ends_with('\u{fffd}') {
                line.pop();
            }
            line.push_str(&format!("{CUT_MARK}{cut} bytes]"));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, |l| out.push(l));
        }
        out.extend(s.finish());
        out
    }

    #[test]
    fn lines_end_with_newlines_and_crlf_even_across_chunks() {
        assert_eq!(split(&[b"a\nb\r", b"\nc"]), vec!["a", "b", "c"]);
        assert_eq!(split(&[b"\n\n"]), vec!["", ""]);
    }

    #[test]
    fn a_progress_bar_redrawn_with_carriage_returns_keeps_its_last_state() {
        let bar = b"  0%|     |\r 50%|##   |\r100%|#####|\n";
        assert_eq!(split(&[bar, b"done\n"]), vec!["100%|#####|", "done"]);
        assert_eq!(split(&[b"10%\r", b"20%\r"]), vec!["20%"]);
    }

    #[test]
    fn ansi_colours_are_kept_and_long_lines_are_cut_with_a_mark() {
        assert_eq!(split(&[b"\x1b[31mred\x1b[0m\n"]), vec!["\x1b[31mred\x1b[0m"]);
        let long = vec![b'x'; MAX_LINE_BYTES + 10];
        let lines = split(&[&long, b"\n"]);
        assert_eq!(lines[0].len(), MAX_LINE_BYTES + format!("{CUT_MARK}10 bytes]").len());
        assert!(lines[0].ends_with("10 bytes]"));
    }
}
