//! Reading back: runs of a project by filter, one run with its params, summary and tags, and
//! the history of a metric.

use crate::http::Http;
use crate::Result;
use serde_json::Value;
use std::time::Duration;

/// Read access to a server.
pub struct Api {
    pub(crate) http: Http,
}

/// A run as the server describes it.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub id: String,
    pub json: Value,
}

impl RunInfo {
    pub fn status(&self) -> &str {
        self.json["status"].as_str().unwrap_or_default()
    }
    pub fn params(&self) -> &Value {
        &self.json["params"]
    }
    pub fn summary(&self) -> &Value {
        &self.json["summary"]
    }
    pub fn tags(&self) -> &Value {
        &self.json["tags"]
    }
    /// The job the run follows (launcher, job id, world size, nodes, attempts, cost, lost
    /// work); null when no process joined it as a job.
    pub fn job(&self) -> &Value {
        &self.json["job"]
    }
    /// Each start of the job, oldest first, with its nodes and processes.
    pub fn attempts(&self) -> &[Value] {
        self.json["attempts"].as_array().map_or(&[], Vec::as_slice)
    }
}

/// One point of a metric's history; `value` is NaN or infinite where the run logged so.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistoryPoint {
    pub step: i64,
    pub timestamp_ms: i64,
    pub value: f64,
}

fn float(v: &Value) -> f64 {
    v.as_f64().or_else(|| v.as_str().and_then(trainlog_schema::parse_non_finite)).unwrap_or(f64::NAN)
}

/// Percent-encodes a path segment (a project, run or model name).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Api {
    /// `server`: a URL, else `TRAINLOG_SERVER`, else the local default.
    pub fn new(server: Option<&str>) -> Result<Self> {
        Ok(Self { http: Http::new(&crate::server_url(server), Duration::from_secs(120))? })
    }

    /// Runs of a project matching `filter` (the server's search grammar), every page.
    pub fn runs(&self, project: &str, filter: &str, order_by: Option<&str>) -> Result<Vec<RunInfo>> {
        let mut out = Vec::new();
        for page in self.runs_pages(project, filter, order_by, None)? {
            let mut page: Value =
                serde_json::from_str(&page).map_err(|e| crate::Error::Invalid(format!("a runs page: {e}")))?;
            for run in page["runs"].as_array_mut().into_iter().flatten() {
                let json = run.take();
                out.push(RunInfo { id: json["id"].as_str().unwrap_or_default().to_owned(), json });
            }
        }
        Ok(out)
    }

    /// The pages of a search as the server wrote them (JSON objects whose `runs` hold the runs),
    /// for a caller that parses them itself: each run with only the params, tags and metrics
    /// `columns` names (as the search takes them, comma-separated: `params`, `metrics.loss`, …;
    /// none when empty), every one when None.
    pub fn runs_pages(
        &self,
        project: &str,
        filter: &str,
        order_by: Option<&str>,
        columns: Option<&str>,
    ) -> Result<Vec<String>> {
        #[derive(serde::Deserialize)]
        struct NextPage {
            next_page_token: Option<String>,
        }
        let mut pages = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut path = format!("/projects/{}/runs?limit=1000&filter={}", encode(project), encode(filter));
            if let Some(c) = columns {
                path.push_str(&format!("&columns={}", encode(c)));
            }
            if let Some(o) = order_by {
                path.push_str(&format!("&order_by={}", encode(o)));
            }
            if let Some(t) = &token {
                path.push_str(&format!("&page_token={}", encode(t)));
            }
            let page = self.http.get_text(&path)?;
            let next: NextPage =
                serde_json::from_str(&page).map_err(|e| crate::Error::Invalid(format!("a runs page: {e}")))?;
            pages.push(page);
            match next.next_page_token {
                Some(t) => token = Some(t),
                None => return Ok(pages),
            }
        }
    }

    /// One page of a run's console lines, as the server wrote it (JSON text): `query` holds the
    /// read's parameters (`rank`, `stream`, `q`, `regex`, `offset`, `tail`, `limit`, …).
    pub fn logs_page(&self, run_id: &str, query: &[(String, String)]) -> Result<String> {
        let mut path = format!("/runs/{}/logs", encode(run_id));
        for (i, (k, v)) in query.iter().enumerate() {
            path.push(if i == 0 { '?' } else { '&' });
            path.push_str(&format!("{}={}", encode(k), encode(v)));
        }
        self.http.get_text(&path)
    }

    pub fn run(&self, id: &str) -> Result<RunInfo> {
        let json = self.http.get(&format!("/runs/{}", encode(id)))?;
        Ok(RunInfo { id: id.to_owned(), json })
    }

    /// The whole history of one metric of a run, sorted by step.
    pub fn history(&self, run_id: &str, key: &str) -> Result<Vec<HistoryPoint>> {
        let body = self.http.get(&format!("/runs/{}/metrics?key={}", encode(run_id), encode(key)))?;
        Ok(body["points"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| HistoryPoint {
                step: p["step"].as_i64().unwrap_or_default(),
                timestamp_ms: p["timestamp"].as_i64().unwrap_or_default(),
                value: float(&p["value"]),
            })
            .collect())
    }

    /// Creates a sweep from a sweep file's text; the server validates it (errors name the line).
    pub fn create_sweep(&self, config: &str, project: Option<&str>, name: Option<&str>) -> Result<Value> {
        self.http.post("/sweeps", &serde_json::json!({"config": config, "project": project, "name": name}))
    }

    /// A sweep with its counts, best trial, spending and best-so-far curve.
    pub fn sweep(&self, id: &str) -> Result<Value> {
        self.http.get(&format!("/sweeps/{}", encode(id)))
    }

    pub fn sweep_trials(&self, id: &str) -> Result<Vec<Value>> {
        let body = self.http.get(&format!("/sweeps/{}/trials", encode(id)))?;
        Ok(body["trials"].as_array().cloned().unwrap_or_default())
    }

    /// Stops a sweep (no new trials; running ones are asked to stop) or resumes it.
    pub fn set_sweep_running(&self, id: &str, running: bool) -> Result<Value> {
        let action = if running { "resume" } else { "stop" };
        self.http.post(&format!("/sweeps/{}/{action}", encode(id)), &serde_json::json!({}))
    }

    /// The training report (`GET /report`) for these query parameters (`since`, `until`, `by`,
    /// `projects`, `users`, `groups`, `tags`, `filter`, `active_above`).
    pub fn report(&self, query: &[(String, String)]) -> Result<Value> {
        let query: Vec<String> = query.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect();
        self.http.get(&format!("/report?{}", query.join("&")))
    }

    /// POSTs JSON to any route under `/api/v1` (for what this type does not wrap yet).
    pub fn post_json(&self, path: &str, body: &Value) -> Result<Value> {
        self.http.post(path, body)
    }

    /// A run's media items under `key` (every key when None) in a step range, every page, by
    /// key, step and index.
    pub fn media(
        &self,
        run_id: &str,
        key: Option<&str>,
        step_min: Option<i64>,
        step_max: Option<i64>,
    ) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let mut path = format!("/runs/{}/media?limit=1000&page_token={}", encode(run_id), encode(&token));
            if let Some(k) = key {
                path.push_str(&format!("&key={}", encode(k)));
            }
            if let Some(s) = step_min {
                path.push_str(&format!("&step_min={s}"));
            }
            if let Some(s) = step_max {
                path.push_str(&format!("&step_max={s}"));
            }
            let page = self.http.get(&path)?;
            out.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["next_page_token"].as_str() {
                Some(t) if !t.is_empty() => token = t.to_owned(),
                _ => return Ok(out),
            }
        }
    }

    /// The bytes of a media blob that one of the run's items names, checked against its SHA-256.
    pub fn media_blob(&self, run_id: &str, sha256: &str) -> Result<Vec<u8>> {
        use std::io::Read;
        let mut response = self.http.get_stream(&format!("/runs/{}/media/blobs/{}", encode(run_id), encode(sha256)))?;
        let mut bytes = Vec::new();
        response.read_to_end(&mut bytes).map_err(crate::io_err(format!("reading media blob {sha256}")))?;
        let actual = crate::media::sha256_hex(&bytes);
        if actual != sha256 {
            return Err(crate::Error::Corrupt {
                path: format!("media blob of run {run_id}"),
                expected: sha256.to_owned(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// A run's histograms under `key`, by step (`step`, `edges`, `counts`, `timestamp`).
    pub fn histograms(&self, run_id: &str, key: &str) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let path = format!("/runs/{}/histograms?key={}&page_token={}", encode(run_id), encode(key), encode(&token));
            let page = self.http.get(&path)?;
            out.extend(page["histograms"].as_array().cloned().unwrap_or_default());
            match page["next_page_token"].as_str() {
                Some(t) if !t.is_empty() => token = t.to_owned(),
                _ => return Ok(out),
            }
        }
    }

    /// A run's table under `key` as of `step` (the last when `None`): every row of its parts,
    /// in order, as an Arrow IPC stream.
    pub fn table_arrow(&self, run_id: &str, key: &str, step: Option<i64>) -> Result<Vec<u8>> {
        use std::io::Read;
        let mut path = format!("/runs/{}/tables?format=arrow&key={}", encode(run_id), encode(key));
        if let Some(s) = step {
            path.push_str(&format!("&step={s}"));
        }
        let mut response = self.http.get_stream(&path)?;
        let mut bytes = Vec::new();
        response.read_to_end(&mut bytes).map_err(crate::io_err(format!("reading table {key}")))?;
        Ok(bytes)
    }

    /// The raw JSON of any GET route under `/api/v1` (for what this type does not wrap yet).
    pub fn get_json(&self, path: &str) -> Result<Value> {
        self.http.get(path)
    }

    /// Asks a running run to stop (its processes see it with their next heartbeat); answers
    /// the stop: `{time, by, reason}`.
    pub fn stop_run(&self, run_id: &str, reason: &str) -> Result<Value> {
        self.http.post(&format!("/runs/{}/stop", encode(run_id)), &serde_json::json!({"reason": reason}))
    }

    /// The raw JSON answer of any DELETE route under `/api/v1`.
    pub fn delete_json(&self, path: &str) -> Result<Value> {
        self.http.delete(path)
    }
}
