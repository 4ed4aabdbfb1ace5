//! The spool: a run's requests kept in a local file while the server cannot be reached (or in
//! offline mode), sent later in order. Records are checksummed; an offset file remembers what
//! the server already acknowledged, so a resend never starts over. `trainlog sync` sends the
//! spools that processes left behind.

use crate::http::Http;
use crate::{io_err, Error, Result};
use serde_json::{json, Value};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

const HEADER: usize = 8;

/// A run's spool, open for appending by the process that owns the run.
pub struct Spool {
    dir: PathBuf,
    run_id: String,
    file: File,
    len: u64,
}

fn path(dir: &Path, run_id: &str, ext: &str) -> PathBuf {
    dir.join(format!("{run_id}.{ext}"))
}

/// The spool folder under the local state folder.
pub fn default_dir() -> PathBuf {
    crate::local_dir().join("spool")
}

impl Spool {
    /// Opens (creating) the spool of `run_id`, noting the server it belongs to and this process as its owner.
    pub fn open(dir: &Path, run_id: &str, server: &str) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(io_err(format!("creating the spool folder {}", dir.display())))?;
        let owner = json!({"server": server, "pid": std::process::id()});
        write_atomic(&path(dir, run_id, "json"), owner.to_string().as_bytes())?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path(dir, run_id, "spool"))
            .map_err(io_err("opening the spool"))?;
        let spool_path = path(dir, run_id, "spool");
        // A process killed mid-append leaves a torn record: cut it, or records appended after
        // it could never be read back.
        let whole = read_records(&spool_path, 0)?.last().map_or(0, |(_, end)| *end);
        let len = file.metadata().map_err(io_err("reading the spool's size"))?.len();
        if len > whole {
            file.set_len(whole).map_err(io_err("cutting a torn spool tail"))?;
        }
        if read_offset(dir, run_id) > whole {
            write_offset(dir, run_id, whole)?;
        }
        Ok(Self { dir: dir.to_owned(), run_id: run_id.to_owned(), file, len: whole })
    }

    pub fn path(&self) -> PathBuf {
        path(&self.dir, &self.run_id, "spool")
    }

    /// Appends one request.
    pub fn append(&mut self, op: &Value) -> Result<()> {
        let payload = op.to_string().into_bytes();
        let mut record = Vec::with_capacity(HEADER + payload.len());
        record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32(&payload).to_le_bytes());
        record.extend_from_slice(&payload);
        self.file.write_all(&record).map_err(io_err("writing the spool"))?;
        self.len += record.len() as u64;
        Ok(())
    }

    pub fn sync(&mut self) -> Result<()> {
        self.file.sync_data().map_err(io_err("syncing the spool"))
    }

    /// Whether some appended request has not been acknowledged by the server yet.
    pub fn has_unsent(&self) -> bool {
        read_offset(&self.dir, &self.run_id) < self.len
    }

    /// Sends unsent requests in order; stops at the first failure. On success the spool is emptied.
    pub fn send(&mut self, http: &Http, deadline: Option<std::time::Instant>) -> Result<usize> {
        let sent = send_from_offset(&self.dir, &self.run_id, http, deadline)?;
        // The offset goes back to 0 before the file empties: a crash in between resends
        // (harmless: last write wins) instead of skipping.
        write_offset(&self.dir, &self.run_id, 0)?;
        self.file.set_len(0).map_err(io_err("emptying the spool"))?;
        self.len = 0;
        Ok(sent)
    }

    /// Whether the spool holds no record at all (sent or not).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Gives the spool up: this process will not send it any more, so `trainlog sync` may.
    pub fn release(&mut self, server: &str) -> Result<()> {
        self.sync()?;
        write_atomic(&path(&self.dir, &self.run_id, "json"), json!({"server": server, "pid": 0}).to_string().as_bytes())
    }

    /// Removes the spool's files once everything in it is sent.
    pub fn remove(self) {
        remove_files(&self.dir, &self.run_id);
    }
}

fn remove_files(dir: &Path, run_id: &str) {
    for ext in ["spool", "offset", "json"] {
        let _ = std::fs::remove_file(path(dir, run_id, ext));
    }
}

fn crc32(data: &[u8]) -> u32 {
    // CRC-32 (IEEE), bitwise: spool records are small and few compared to the network cost.
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (!(crc & 1)).wrapping_add(1));
        }
    }
    !crc
}

fn write_atomic(target: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = target.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io_err("writing spool state"))?;
    std::fs::rename(&tmp, target).map_err(io_err("writing spool state"))
}

fn read_offset(dir: &Path, run_id: &str) -> u64 {
    std::fs::read_to_string(path(dir, run_id, "offset")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

fn write_offset(dir: &Path, run_id: &str, offset: u64) -> Result<()> {
    write_atomic(&path(dir, run_id, "offset"), offset.to_string().as_bytes())
}

/// Reads the records from `offset` on: each with the offset just past it. Stops at a torn or
/// corrupt record (a process killed mid-write).
fn read_records(file: &Path, offset: u64) -> Result<Vec<(Value, u64)>> {
    let f = match File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("opening the spool")(e)),
    };
    let mut reader = BufReader::new(f);
    reader.seek(SeekFrom::Start(offset)).map_err(io_err("reading the spool"))?;
    let mut out = Vec::new();
    let mut at = offset;
    loop {
        let mut header = [0u8; HEADER];
        if reader.read_exact(&mut header).is_err() {
            break;
        }
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let mut payload = vec![0u8; len];
        if reader.read_exact(&mut payload).is_err() || crc32(&payload) != crc {
            break;
        }
        let Ok(op) = serde_json::from_slice::<Value>(&payload) else { break };
        at += (HEADER + len) as u64;
        out.push((op, at));
    }
    Ok(out)
}

/// The JSON body of a points record, as the metrics route takes it.
fn points_body(points: &Value) -> Value {
    let list: Vec<Value> = points
        .as_array()
        .map(|a| a.iter().map(|p| json!({"key": p[0], "step": p[1], "timestamp": p[2], "value": p[3]})).collect())
        .unwrap_or_default();
    json!({ "points": list })
}

/// Sends one spooled request.
fn send_op(http: &Http, run_id: &str, op: &Value) -> Result<()> {
    let result = match op["op"].as_str() {
        Some("create") => http.post("/runs", &op["body"]),
        Some("points") => http.post(&format!("/runs/{run_id}/metrics"), &points_body(&op["points"])),
        Some("metadata") => {
            let section = op["section"].as_str().unwrap_or("other");
            http.put(&format!("/runs/{run_id}/metadata/{section}"), &op["body"])
        }
        Some("params") => http.post(&format!("/runs/{run_id}/params"), &op["body"]),
        Some("finish") => http.post(&format!("/runs/{run_id}/finish"), &op["body"]),
        _ => return Ok(()),
    };
    match result {
        Ok(_) => Ok(()),
        // The server refused this request for good (bad input): it can never succeed, and
        // holding it back would hold back everything after it.
        Err(Error::Server { message, .. }) => {
            eprintln!("trainlog: the server refused a spooled {} request of run {run_id}: {message}", op["op"]);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Sends from the acknowledged offset on; stops (leaving the rest for later) once `deadline` passes.
fn send_from_offset(dir: &Path, run_id: &str, http: &Http, deadline: Option<std::time::Instant>) -> Result<usize> {
    let offset = read_offset(dir, run_id);
    let records = read_records(&path(dir, run_id, "spool"), offset)?;
    let n = records.len();
    for (op, end) in records {
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(Error::Unreachable {
                url: http.base.clone(),
                reason: "out of time; the rest stays in the spool".into(),
            });
        }
        send_op(http, run_id, &op)?;
        write_offset(dir, run_id, end)?;
    }
    Ok(n)
}

/// What `sync_all` did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SyncReport {
    /// Runs whose spool was sent completely.
    pub synced: Vec<String>,
    /// Runs skipped because the process that owns them is still alive.
    pub live: Vec<String>,
    /// Runs that could not be sent, with why.
    pub failed: Vec<(String, String)>,
    pub requests: usize,
}

fn process_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

/// Sends every spool in `dir` whose process is gone (or, with `include_live`, every spool),
/// to `server` or else the server each spool was recorded for. A run whose spool ends without
/// a finish request is finished as `failed`: its process died without saying how it ended.
pub fn sync_all(dir: &Path, server: Option<&str>, include_live: bool) -> Result<SyncReport> {
    let mut report = SyncReport::default();
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(report) };
    let mut owners: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "json")).collect();
    owners.sort();
    for owner in owners {
        let Some(run_id) = owner.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else { continue };
        let info: Value =
            std::fs::read_to_string(&owner).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
        let pid = info["pid"].as_u64().unwrap_or(0) as u32;
        let alive = pid != 0 && process_alive(pid);
        if alive && !include_live {
            report.live.push(run_id);
            continue;
        }
        let url = crate::server_url(server.or(info["server"].as_str()));
        let outcome = Http::new(&url, Duration::from_secs(60)).and_then(|http| {
            let records = read_records(&path(dir, &run_id, "spool"), 0)?;
            let finished = records.iter().any(|(op, _)| op["op"] == "finish");
            let n = send_from_offset(dir, &run_id, &http, None)?;
            if !finished && !alive {
                http.post(&format!("/runs/{run_id}/finish"), &json!({"status": "failed"}))?;
            }
            Ok(n)
        });
        match outcome {
            Ok(n) => {
                report.requests += n;
                remove_files(dir, &run_id);
                report.synced.push(run_id);
            }
            Err(e) => report.failed.push((run_id, e.to_string())),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_ieee_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn reopening_cuts_a_torn_tail_so_later_records_are_readable() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(dir.path(), "r2", "http://x").unwrap();
        spool.append(&json!({"op": "points", "points": [["a", 0, 0, 1.0]]})).unwrap();
        let path = spool.path();
        OpenOptions::new().append(true).open(&path).unwrap().write_all(&[50, 0, 0, 0, 9]).unwrap();
        drop(spool);
        let mut again = Spool::open(dir.path(), "r2", "http://x").unwrap();
        again.append(&json!({"op": "points", "points": [["a", 1, 0, 2.0]]})).unwrap();
        let steps: Vec<i64> =
            read_records(&path, 0).unwrap().iter().map(|(op, _)| op["points"][0][1].as_i64().unwrap()).collect();
        assert_eq!(steps, vec![0, 1]);
    }

    #[test]
    fn records_read_back_in_order_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(dir.path(), "r1", "http://x").unwrap();
        spool.append(&json!({"op": "create", "body": {"id": "r1"}})).unwrap();
        spool.append(&json!({"op": "points", "points": [["loss", 0, 1, 0.5]]})).unwrap();
        let path = spool.path();
        let full = std::fs::metadata(&path).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        let records = read_records(&path, 0).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].0["points"][0][0], "loss");
        assert_eq!(records[1].1, full);
        assert_eq!(read_records(&path, records[0].1).unwrap().len(), 1);
        assert!(spool.has_unsent());
    }
}
