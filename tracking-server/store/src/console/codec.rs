//! Console batches as write-ahead log records: one record per batch, all its lines from one
//! process.

use crate::wal::{frame, put_str, Cursor};
use std::sync::Arc;
use trainlog_schema::console::{ConsoleLine, ConsoleStream};
use trainlog_schema::RunId;

pub(crate) const KIND_CONSOLE: u8 = 2;

/// The lines one process sent in one request, with what they share. Their texts are one
/// string, each line a range of it: a batch is two allocations, whatever its lines.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsoleBatch {
    pub source: Arc<str>,
    pub node: Arc<str>,
    pub rank: u32,
    pub attempt: i64,
    pub lines: Vec<BatchLine>,
    pub text: String,
}

/// One line of a batch; its text is `text[start..end]` of the batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchLine {
    pub seq: u64,
    pub time_ms: i64,
    pub step: Option<i64>,
    pub stream: ConsoleStream,
    pub start: u32,
    pub end: u32,
}

impl ConsoleBatch {
    pub fn new(source: Arc<str>, node: Arc<str>, rank: u32, attempt: i64) -> Self {
        Self { source, node, rank, attempt, lines: Vec::new(), text: String::new() }
    }

    /// Adds a line at the end.
    pub fn push(&mut self, seq: u64, time_ms: i64, step: Option<i64>, stream: ConsoleStream, line: &str) {
        let start = self.text.len() as u32;
        self.text.push_str(line);
        self.lines.push(BatchLine { seq, time_ms, step, stream, start, end: self.text.len() as u32 });
    }

    pub fn text_of(&self, l: &BatchLine) -> &str {
        self.text.get(l.start as usize..l.end as usize).unwrap_or("")
    }

    /// The batch's lines as stored, copied.
    pub fn lines(&self) -> impl Iterator<Item = ConsoleLine> + '_ {
        self.lines.iter().map(move |l| ConsoleLine {
            time_ms: l.time_ms,
            rank: self.rank,
            node: self.node.clone(),
            attempt: self.attempt,
            step: l.step,
            stream: l.stream,
            line: self.text_of(l).to_owned(),
            source: self.source.clone(),
            seq: l.seq,
        })
    }

    pub fn bytes(&self) -> usize {
        self.text.len() + self.lines.len() * std::mem::size_of::<BatchLine>()
    }
}

/// A replayed record: which run, in which project, and its batch.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleRecord {
    pub run: RunId,
    pub project_id: i64,
    pub batch: ConsoleBatch,
}

pub fn encode(out: &mut Vec<u8>, run: &RunId, project_id: i64, batch: &ConsoleBatch) {
    frame(out, |out| {
        out.push(KIND_CONSOLE);
        put_str(out, run.as_str());
        out.extend_from_slice(&project_id.to_le_bytes());
        put_str(out, &batch.source);
        put_str(out, &batch.node);
        out.extend_from_slice(&batch.rank.to_le_bytes());
        out.extend_from_slice(&batch.attempt.to_le_bytes());
        out.extend_from_slice(&(batch.lines.len() as u32).to_le_bytes());
        for line in &batch.lines {
            out.extend_from_slice(&line.seq.to_le_bytes());
            out.extend_from_slice(&line.time_ms.to_le_bytes());
            match line.step {
                Some(step) => {
                    out.push(1);
                    out.extend_from_slice(&step.to_le_bytes());
                }
                None => out.push(0),
            }
            out.push(match line.stream {
                ConsoleStream::Stdout => 0,
                ConsoleStream::Stderr => 1,
            });
            let text = batch.text_of(line);
            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
            out.extend_from_slice(text.as_bytes());
        }
    })
}

pub fn decode(payload: &[u8]) -> Option<ConsoleRecord> {
    let mut c = Cursor { buf: payload };
    if c.u8()? != KIND_CONSOLE {
        return None;
    }
    let run = RunId::from_trusted(c.string()?);
    let project_id = c.u64()? as i64;
    let source: Arc<str> = c.string()?.into();
    let node: Arc<str> = c.string()?.into();
    let rank = c.u32()?;
    let attempt = c.u64()? as i64;
    let n = c.u32()? as usize;
    let mut batch = ConsoleBatch::new(source, node, rank, attempt);
    batch.lines.reserve(n.min(1 << 16));
    for _ in 0..n {
        let seq = c.u64()?;
        let time_ms = c.u64()? as i64;
        let step = match c.u8()? {
            0 => None,
            1 => Some(c.u64()? as i64),
            _ => return None,
        };
        let stream = match c.u8()? {
            0 => ConsoleStream::Stdout,
            1 => ConsoleStream::Stderr,
            _ => return None,
        };
        let len = c.u32()? as usize;
        let line = std::str::from_utf8(c.take(len)?).ok()?;
        batch.push(seq, time_ms, step, stream, line);
    }
    if !c.buf.is_empty() {
        return None;
    }
    Some(ConsoleRecord { run, project_id, batch })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wal::{replay_with, segment_path, Segment};

    pub(crate) fn batch(source: &str, seqs: std::ops::Range<u64>) -> ConsoleBatch {
        let mut batch = ConsoleBatch::new(source.into(), "node-a".into(), 2, 1);
        for seq in seqs {
            let stream = if seq % 3 == 0 { ConsoleStream::Stderr } else { ConsoleStream::Stdout };
            let line = format!("line {seq} \u{1b}[31mred\u{1b}[0m é");
            batch.push(seq, 1_000 + seq as i64, (seq % 2 == 0).then_some(seq as i64), stream, &line);
        }
        batch
    }

    #[test]
    fn console_records_round_trip_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunId::from_trusted("r1".into());
        let mut buf = Vec::new();
        encode(&mut buf, &run, 7, &batch("p1", 0..5));
        encode(&mut buf, &run, 7, &batch("p1", 5..9));
        let whole = buf.len();
        encode(&mut buf, &run, 7, &batch("p1", 9..12));
        let mut segment = Segment::create(dir.path(), 1).unwrap();
        segment.append_durable(&buf[..buf.len() - 3]).unwrap();
        let (records, cut) = replay_with(&segment_path(dir.path(), 1), decode).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].batch, batch("p1", 0..5));
        assert_eq!(records[1].project_id, 7);
        assert_eq!(cut, (buf.len() - 3 - whole) as u64);
    }
}
