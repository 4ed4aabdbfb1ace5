//! The spool: a run's requests kept in a local file while the server cannot be reached (or in
//! offline mode), sent later in order. Records are checksummed; an offset file remembers what
//! the server already acknowledged, so a resend never starts over. `trainlog sync` sends the
//! spools that processes left behind. Requests the server refuses for good go, with its answer,
//! to `rejected/<run id>.jsonl` beside the spools.
//!
//! Requests hold what a run records (params, its command line, its diff), so on Unix the spool
//! folders are the owner's alone (0700, an existing one tightened) and their files too (0600).

use crate::http::Http;
use crate::{io_err, Error, Result};
use serde_json::{json, Value};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

const HEADER: usize = 8;

/// Pauses before each attempt at a local write: a full disk or a busy network filesystem often
/// recovers within a fraction of a second.
const WRITE_ATTEMPT_PAUSES: [Duration; 3] = [Duration::ZERO, Duration::from_millis(20), Duration::from_millis(100)];

/// Runs a local write up to three times; answers the last error when every attempt failed.
pub(crate) fn with_retries<T>(mut write: impl FnMut() -> Result<T>) -> Result<T> {
    let mut last = None;
    for pause in WRITE_ATTEMPT_PAUSES {
        std::thread::sleep(pause);
        match write() {
            Ok(done) => return Ok(done),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Invalid("no write was attempted".into())))
}

/// A run's spool, open for appending by the process that owns the run.
pub struct Spool {
    dir: PathBuf,
    /// The files' name: the run id, or for a rank other than 0 of a job `{run id}~rank{r}`
    /// (the ranks of a job on one machine share its run, each with a spool of its own).
    name: String,
    run_id: String,
    rank: u32,
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
        Self::open_for_rank(dir, run_id, 0, server)
    }

    /// Opens the spool of one rank of a job's run.
    pub fn open_for_rank(dir: &Path, run_id: &str, rank: u32, server: &str) -> Result<Self> {
        let name = if rank == 0 { run_id.to_owned() } else { format!("{run_id}~rank{rank}") };
        private_dir(dir).map_err(io_err(format!("creating the spool folder {}", dir.display())))?;
        let owner = json!({"server": server, "pid": std::process::id(), "run_id": run_id, "rank": rank});
        write_atomic(&path(dir, &name, "json"), owner.to_string().as_bytes())?;
        let spool_path = path(dir, &name, "spool");
        let file = private_file(OpenOptions::new().create(true).append(true))
            .open(&spool_path)
            .map_err(io_err("opening the spool"))?;
        // A process killed mid-append leaves a torn record: cut it, or records appended after
        // it could never be read back.
        let whole = read_records(&spool_path, 0)?.last().map_or(0, |(_, end)| *end);
        let len = file.metadata().map_err(io_err("reading the spool's size"))?.len();
        if len > whole {
            file.set_len(whole).map_err(io_err("cutting a torn spool tail"))?;
        }
        if read_offset(dir, &name) > whole {
            write_offset(dir, &name, whole)?;
        }
        Ok(Self { dir: dir.to_owned(), name, run_id: run_id.to_owned(), rank, file, len: whole })
    }

    pub fn path(&self) -> PathBuf {
        path(&self.dir, &self.name, "spool")
    }

    /// The folder holding the spools (and their `rejected/` folder).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one request.
    pub fn append(&mut self, op: &Value) -> Result<()> {
        let payload = op.to_string().into_bytes();
        let mut record = Vec::with_capacity(HEADER + payload.len());
        record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32(&payload).to_le_bytes());
        record.extend_from_slice(&payload);
        if let Err(e) = self.file.write_all(&record) {
            // A partly written record would hide every record appended after it.
            let _ = self.file.set_len(self.len);
            return Err(io_err("writing the spool")(e));
        }
        self.len += record.len() as u64;
        Ok(())
    }

    pub fn sync(&mut self) -> Result<()> {
        self.file.sync_data().map_err(io_err("syncing the spool"))
    }

    /// Whether some appended request has not been acknowledged by the server yet.
    pub fn has_unsent(&self) -> bool {
        read_offset(&self.dir, &self.name) < self.len
    }

    /// Points and other requests appended and not acknowledged yet.
    pub fn unsent(&self) -> Result<(u64, u64)> {
        let records = read_records(&self.path(), read_offset(&self.dir, &self.name))?;
        let points = records.iter().map(|(op, _)| points_in(op)).sum();
        let requests = records.iter().filter(|(op, _)| op["op"] != "points").count() as u64;
        Ok((points, requests))
    }

    /// Sends unsent requests in order, writing those the server refuses to `rejected`; stops at
    /// the first transient failure. On success the spool is emptied.
    pub fn send(
        &mut self,
        http: &Http,
        deadline: Option<std::time::Instant>,
        rejected: &mut Rejected,
        settled: &mut Settled,
    ) -> Result<()> {
        send_from_offset(&self.dir, &self.name, &self.run_id, http, deadline, rejected, settled)?;
        if self.len > 0 {
            // The offset goes back to 0 before the file empties: a crash in between resends
            // (harmless: last write wins) instead of skipping.
            write_offset(&self.dir, &self.name, 0)?;
            self.file.set_len(0).map_err(io_err("emptying the spool"))?;
            self.len = 0;
        }
        Ok(())
    }

    /// Whether the spool holds no record at all (sent or not).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Gives the spool up: this process will not send it any more, so `trainlog sync` may.
    pub fn release(&mut self, server: &str) -> Result<()> {
        self.sync()?;
        let owner = json!({"server": server, "pid": 0, "run_id": self.run_id, "rank": self.rank});
        write_atomic(&path(&self.dir, &self.name, "json"), owner.to_string().as_bytes())
    }

    /// Removes the spool's files once everything in it is sent.
    pub fn remove(&self) {
        remove_files(&self.dir, &self.name);
    }
}

/// The file of `run_id`'s requests that the server refused for good: `<spool dir>/rejected/<run id>.jsonl`.
pub fn rejected_path(spool_dir: &Path, run_id: &str) -> PathBuf {
    spool_dir.join("rejected").join(format!("{run_id}.jsonl"))
}

/// What sending a spool settled.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Settled {
    /// Requests acknowledged or refused (and kept in the rejected file).
    pub requests: usize,
    pub points_acknowledged: u64,
    /// Console lines acknowledged.
    pub lines_acknowledged: u64,
    /// The answers to joins sent from the spool, by the token of the process that spooled each.
    pub joins: Vec<(String, Value)>,
}

/// A run's rejected file: one JSON line per refused request, `{"rejected_at", "status", "code",
/// "message", "field", "request"}`, the request in the spool's form (points as `[key, step,
/// timestamp, value]` rows). The first refusal of a run is reported on stderr, naming the file.
pub struct Rejected {
    path: PathBuf,
    run_id: String,
    warned: bool,
    pub points: u64,
    pub requests: u64,
}

impl Rejected {
    pub fn new(spool_dir: &Path, run_id: &str) -> Self {
        Self {
            path: rejected_path(spool_dir, run_id),
            run_id: run_id.to_owned(),
            warned: false,
            points: 0,
            requests: 0,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether anything was written to the file by this process.
    pub fn is_empty(&self) -> bool {
        self.points == 0 && self.requests == 0
    }

    /// Writes a request the server refused, with its answer. An error means the request is
    /// in neither place: the caller keeps it or counts it lost.
    pub fn keep(&mut self, request: &Value, refusal: &Error) -> Result<()> {
        let (status, code, message, field) = match refusal {
            Error::Server { status, code, message, field } => {
                (json!(status), code.clone(), message.clone(), json!(field))
            }
            other => (Value::Null, "unsendable".to_owned(), other.to_string(), Value::Null),
        };
        let mut line = json!({
            "rejected_at": crate::now_ms(),
            "status": status,
            "code": code,
            "message": message,
            "field": field,
            "request": request,
        })
        .to_string();
        line.push('\n');
        with_retries(|| self.append_line(line.as_bytes()))?;
        let points = points_in(request);
        if request["op"] == "points" {
            self.points += points;
        } else {
            self.requests += 1;
        }
        if !self.warned {
            self.warned = true;
            eprintln!(
                "trainlog: the server refused {} of run {} ({}); it is kept with the server's answer, as are later refusals, in {}",
                if request["op"] == "points" {
                    format!("{points} points")
                } else {
                    format!("a {} request", request["op"].as_str().unwrap_or("?"))
                },
                self.run_id,
                refusal,
                self.path.display()
            );
        }
        Ok(())
    }

    fn append_line(&self, line: &[u8]) -> Result<()> {
        let context = || format!("writing {}", self.path.display());
        if let Some(folder) = self.path.parent() {
            private_dir(folder).map_err(io_err(context()))?;
        }
        let mut file =
            private_file(OpenOptions::new().create(true).append(true)).open(&self.path).map_err(io_err(context()))?;
        file.write_all(line).map_err(io_err(context()))?;
        file.sync_data().map_err(io_err(context()))
    }
}

/// Points held by a spool record (0 for requests other than points).
/// Console lines in a `logs` record.
pub(crate) fn lines_in(record: &Value) -> u64 {
    if record["op"] == "logs" {
        record["body"]["lines"].as_array().map_or(0, |l| l.len() as u64)
    } else {
        0
    }
}

pub(crate) fn points_in(record: &Value) -> u64 {
    if record["op"] == "points" {
        record["points"].as_array().map_or(0, |rows| rows.len() as u64)
    } else {
        0
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

/// Creates `dir` and the folders above it that are missing, readable by their owner alone, and
/// tightens `dir` itself when it exists already. Tightening is best effort: a spool pointed at a
/// folder of someone else's still works.
pub(crate) fn private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
        if mode != 0o700 {
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// `options` creating files readable and writable by their owner alone.
pub(crate) fn private_file(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

fn write_atomic(target: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = target.with_extension("tmp");
    private_file(OpenOptions::new().create(true).write(true).truncate(true))
        .open(&tmp)
        .and_then(|mut file| file.write_all(bytes))
        .map_err(io_err("writing spool state"))?;
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
fn send_op(http: &Http, run_id: &str, op: &Value) -> Result<Value> {
    let result = match op["op"].as_str() {
        Some("create") => http.post("/runs", &op["body"]),
        Some("points") => http.post(&format!("/runs/{run_id}/metrics"), &points_body(&op["points"])),
        Some("metadata") => {
            let section = op["section"].as_str().unwrap_or("other");
            http.put(&format!("/runs/{run_id}/metadata/{section}"), &op["body"])
        }
        Some("params") => http.post(&format!("/runs/{run_id}/params"), &op["body"]),
        Some("finish") => http.post(&format!("/runs/{run_id}/finish"), &op["body"]),
        Some("logs") => http.post(&format!("/runs/{run_id}/logs"), &op["body"]),
        _ => Ok(Value::Null),
    };
    result
}

/// Sends from the acknowledged offset on; stops (leaving the rest for later) at a transient
/// failure or once `deadline` passes. A request the server refused for good can never succeed,
/// and holding it back would hold back everything after it: it goes to `rejected` and the
/// offset moves past it only once it is written there.
fn send_from_offset(
    dir: &Path,
    name: &str,
    run_id: &str,
    http: &Http,
    deadline: Option<std::time::Instant>,
    rejected: &mut Rejected,
    settled: &mut Settled,
) -> Result<()> {
    let offset = read_offset(dir, name);
    let records = read_records(&path(dir, name, "spool"), offset)?;
    for (op, end) in records {
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(Error::Unreachable {
                url: http.base.clone(),
                reason: "out of time; the rest stays in the spool".into(),
                retry_after: None,
            });
        }
        match send_op(http, run_id, &op) {
            Ok(answer) => {
                settled.points_acknowledged += points_in(&op);
                settled.lines_acknowledged += lines_in(&op);
                if let (Some("create"), Some(token)) = (op["op"].as_str(), op["token"].as_str()) {
                    settled.joins.push((token.to_owned(), answer));
                }
            }
            Err(transient @ Error::Unreachable { .. }) => return Err(transient),
            Err(refusal) => rejected.keep(&op, &refusal)?,
        }
        write_offset(dir, name, end)?;
        settled.requests += 1;
    }
    Ok(())
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
    /// Media items sent from the media spool, refused by the server, and still waiting.
    pub media_sent: u64,
    pub media_rejected: u64,
    pub media_waiting: u64,
}

fn process_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

/// Sends every spool in `dir` whose process is gone (or, with `include_live`, every spool),
/// to `server` or else the server each spool was recorded for. A run whose spool ends without
/// a finish request is finished as `failed`: its process died without saying how it ended.
pub fn sync_all(dir: &Path, server: Option<&str>, include_live: bool) -> Result<SyncReport> {
    let mut report = SyncReport::default();
    // The server each run's requests were recorded for, where its media go too.
    let mut servers: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(report) };
    let mut owners: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "json")).collect();
    owners.sort();
    for owner in owners {
        let Some(name) = owner.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else { continue };
        let info: Value =
            std::fs::read_to_string(&owner).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
        let run_id = info["run_id"].as_str().map_or_else(|| name.clone(), str::to_owned);
        let rank = info["rank"].as_u64().unwrap_or(0);
        let pid = info["pid"].as_u64().unwrap_or(0) as u32;
        let alive = pid != 0 && process_alive(pid);
        if alive && !include_live {
            report.live.push(run_id);
            continue;
        }
        let url = crate::server_url(server.or(info["server"].as_str()));
        servers.insert(run_id.clone(), url.clone());
        let mut rejected = Rejected::new(dir, &run_id);
        let outcome = Http::new(&url, Duration::from_secs(60)).and_then(|http| {
            let records = read_records(&path(dir, &name, "spool"), 0)?;
            let finished = records.iter().any(|(op, _)| op["op"] == "finish");
            let mut settled = Settled::default();
            send_from_offset(dir, &name, &run_id, &http, None, &mut rejected, &mut settled)?;
            if !finished && !alive {
                // Only this rank's part of the run ends: the run ends with its last rank.
                let body = json!({"status": "failed", "process": {"rank": rank, "reason": "its process ended without finishing"}});
                http.post(&format!("/runs/{run_id}/finish"), &body)?;
            }
            Ok(settled.requests)
        });
        match outcome {
            Ok(n) => {
                report.requests += n;
                remove_files(dir, &name);
                report.synced.push(run_id);
            }
            Err(e) => report.failed.push((run_id, e.to_string())),
        }
    }
    // Media after the requests, so each run exists on the server by then; a run whose requests
    // could not be sent, or whose process is alive, keeps its media for later.
    for run_id in crate::media::spooled_runs(dir) {
        let skipped = report.live.contains(&run_id) || report.failed.iter().any(|(r, _)| *r == run_id);
        if skipped {
            continue;
        }
        let url = servers.entry(run_id.clone()).or_insert_with(|| crate::server_url(server)).clone();
        let counts = match Http::new(&url, Duration::from_secs(60)) {
            Ok(http) => crate::media::send_spool_of(http, dir, &run_id),
            Err(e) => {
                report.failed.push((run_id, e.to_string()));
                continue;
            }
        };
        report.media_sent += counts.sent;
        report.media_rejected += counts.rejected;
        report.media_waiting += counts.spooled;
        for w in &counts.warnings {
            eprintln!("trainlog: {w}");
        }
        if counts.spooled > 0 {
            report.failed.push((
                run_id,
                format!("{} media items could not be sent now; they wait in the spool", counts.spooled),
            ));
        } else if !report.synced.contains(&run_id) {
            report.synced.push(run_id);
        }
    }
    Ok(report)
}

/// Every folder and file under `dir`, with its permission bits.
#[cfg(all(test, unix))]
pub(crate) fn modes_under(dir: &Path) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = Vec::new();
    let mut folders = vec![dir.to_owned()];
    while let Some(folder) = folders.pop() {
        found.push((folder.clone(), std::fs::metadata(&folder).unwrap().permissions().mode() & 0o777));
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else {
                found.push((path.clone(), std::fs::metadata(&path).unwrap().permissions().mode() & 0o777));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_of_one_run_on_one_machine_keep_spools_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut zero = Spool::open_for_rank(dir.path(), "job-1", 0, "http://127.0.0.1:1").unwrap();
        let mut three = Spool::open_for_rank(dir.path(), "job-1", 3, "http://127.0.0.1:1").unwrap();
        zero.append(&json!({"op": "params", "body": {"a": 1}})).unwrap();
        three.append(&json!({"op": "params", "body": {"b": 1}})).unwrap();
        three.append(&json!({"op": "params", "body": {"c": 1}})).unwrap();
        assert_eq!((zero.unsent().unwrap().1, three.unsent().unwrap().1), (1, 2));
        assert_eq!(three.path(), dir.path().join("job-1~rank3.spool"));
        let owner: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("job-1~rank3.json")).unwrap()).unwrap();
        assert_eq!((&owner["run_id"], &owner["rank"]), (&json!("job-1"), &json!(3)));
    }

    #[test]
    fn a_refused_request_is_kept_as_one_json_line_with_the_servers_answer() {
        let dir = tempfile::tempdir().unwrap();
        let mut rejected = Rejected::new(dir.path(), "r3");
        let refusal = Error::Server {
            status: 422,
            code: "invalid_argument".into(),
            message: "no".into(),
            field: Some("points".into()),
        };
        let points = json!({"op": "points", "points": [["loss", 4, 9, 0.5], ["loss", 5, 9, "NaN"]]});
        rejected.keep(&points, &refusal).unwrap();
        rejected.keep(&json!({"op": "params", "body": {"lr": 1}}), &Error::Invalid("unencodable".into())).unwrap();
        assert_eq!((rejected.points, rejected.requests), (2, 1));
        let text = std::fs::read_to_string(rejected_path(dir.path(), "r3")).unwrap();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            (&lines[0]["status"], &lines[0]["code"], &lines[0]["field"]),
            (&json!(422), &json!("invalid_argument"), &json!("points"))
        );
        assert_eq!(lines[0]["request"], points);
        assert_eq!((&lines[1]["status"], &lines[1]["message"]), (&Value::Null, &json!("unencodable")));
    }

    #[test]
    fn a_rejected_file_that_cannot_be_written_is_an_error_and_counts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_folder = dir.path().join("file");
        std::fs::write(&not_a_folder, b"").unwrap();
        let mut rejected = Rejected::new(&not_a_folder, "r4");
        let refusal = Error::Server { status: 400, code: "invalid_argument".into(), message: "no".into(), field: None };
        assert!(rejected.keep(&json!({"op": "points", "points": [["a", 0, 0, 1.0]]}), &refusal).is_err());
        assert!(rejected.is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn spool_folders_and_files_are_the_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("spool");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut spool = Spool::open(&dir, "r1", "http://127.0.0.1:1").unwrap();
        spool.append(&json!({"op": "params", "body": {"a": 1}})).unwrap();
        write_offset(&dir, "r1", 0).unwrap();
        let refusal = Error::Server { status: 400, code: "invalid_argument".into(), message: "no".into(), field: None };
        Rejected::new(&dir, "r1").keep(&json!({"op": "params", "body": {}}), &refusal).unwrap();
        let fresh = root.path().join("a").join("b");
        Spool::open(&fresh, "r2", "http://127.0.0.1:1").unwrap();

        let mut modes = modes_under(&dir);
        modes.extend(modes_under(&root.path().join("a")));
        let names: Vec<String> =
            modes.iter().map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        for expected in ["spool", "r1.spool", "r1.json", "r1.offset", "rejected", "r1.jsonl", "a", "b", "r2.spool"] {
            assert!(names.iter().any(|n| n == expected), "{expected} not among {names:?}");
        }
        for (path, mode) in modes {
            let wanted = if path.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(mode, wanted, "{} is {mode:o}", path.display());
        }
    }

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
