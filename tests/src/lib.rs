//! Harness for end-to-end tests and benchmarks: starts the real `trainlog` binary on port 0
//! with a temporary data folder and talks to it over HTTP.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use serde_json::{json, Value};

/// Path of the `trainlog` binary: `TRAINLOG_BIN`, else beside the running test executable's profile folder.
pub fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("TRAINLOG_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test executable has a path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let bin = profile_dir.join("trainlog");
    assert!(bin.exists(), "{} is missing: run `cargo build --release --workspace` first", bin.display());
    bin
}

/// The object store URL the storage tests run against: `TRAINLOG_TEST_STORE` (e.g. an
/// `s3://bucket/prefix` served by a local S3-compatible server), else the local default.
pub fn test_store_url(unique: &str) -> Option<String> {
    std::env::var("TRAINLOG_TEST_STORE")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|base| format!("{}/{unique}", base.trim_end_matches('/')))
}

/// The URL of the PostgreSQL server the tests may make databases on (`TRAINLOG_TEST_PG`;
/// `scripts/postgres.sh` starts a throwaway one).
pub fn postgres_server() -> String {
    std::env::var("TRAINLOG_TEST_PG")
        .ok()
        .filter(|s| !s.is_empty())
        .expect("TRAINLOG_TEST_PG: the URL of a PostgreSQL server for tests (scripts/test.sh starts one)")
}

/// A fresh, empty database on the tests' PostgreSQL server; answers its URL.
pub fn fresh_postgres_database() -> String {
    let name = format!("e2e_{}", unique_name().replace('-', "_"));
    trainlog_meta::create_postgres_database(&postgres_server(), &name).expect("a test database on PostgreSQL")
}

/// The metadata database of a server on `data` when the tests run against PostgreSQL
/// (`TRAINLOG_TEST_META=postgres`): a fresh database per data folder, kept across restarts.
/// None: the SQLite file in the data folder.
pub fn test_meta_url(data: &Path) -> Option<String> {
    let record = data.with_extension("meta-url");
    if let Ok(url) = std::fs::read_to_string(&record) {
        return Some(url);
    }
    if std::env::var("TRAINLOG_TEST_META").as_deref() != Ok("postgres") {
        return None;
    }
    let url = fresh_postgres_database();
    if let Some(parent) = record.parent() {
        std::fs::create_dir_all(parent).expect("the data folder's parent");
    }
    std::fs::write(&record, &url).expect("recording the test database");
    Some(url)
}

/// How long a spawned server may take to print its ready line.
const READY_TIMEOUT_S: u64 = 60;

pub struct TestServer {
    pub url: String,
    pub data: PathBuf,
    store_url: Option<String>,
    child: Option<Child>,
    _dir: Option<tempfile::TempDir>,
    pub client: reqwest::blocking::Client,
    /// The admin's key of a server run with `--auth`; `client` sends it.
    pub api_key: Option<String>,
    /// Flags given besides the address, data folder and store; a restart keeps them.
    flags: Vec<String>,
    /// Environment variables set for the server process; a restart keeps them.
    env: Vec<(String, String)>,
    /// Milliseconds from spawning the process to its ready line.
    pub startup_ms: u128,
    /// The `--meta` URL the server was given, if any.
    pub meta_url: Option<String>,
}

fn unique_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("t{}-{}-{}", std::process::id(), nanos % 1_000_000_000, N.fetch_add(1, Ordering::Relaxed))
}

impl TestServer {
    /// Starts a server on a fresh data folder, with the test object store when one is configured.
    pub fn spawn() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let data = dir.path().join("data");
        let store_url = test_store_url(&unique_name());
        let mut s = Self::start(data, store_url);
        s._dir = Some(dir);
        s
    }

    /// `spawn` with more command-line flags.
    pub fn spawn_with(flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let store_url = test_store_url(&unique_name());
        let mut s = Self::start_with(dir.path().join("data"), store_url, 0, flags);
        s._dir = Some(dir);
        s
    }

    /// Starts a server on the local object store only, whatever the environment says.
    pub fn spawn_local() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let mut s = Self::start(dir.path().join("data"), None);
        s._dir = Some(dir);
        s
    }

    /// Starts a server on the local object store with more command-line flags (`--auth`, say).
    pub fn spawn_local_with(flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let mut s = Self::start_with(dir.path().join("data"), None, 0, flags);
        s._dir = Some(dir);
        s
    }

    /// Starts a server on the local object store with environment variables set for it
    /// (`TRAINLOG_BODY_TIMEOUT_S`, say).
    pub fn spawn_local_with_env(flags: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut s = Self::start_full(dir.path().join("data"), None, 0, flags, env);
        s._dir = Some(dir);
        s
    }

    /// Starts a server on a fresh data folder and the test object store when one is configured,
    /// with environment variables set for it.
    pub fn spawn_with_env(flags: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let store_url = test_store_url(&unique_name());
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut s = Self::start_full(dir.path().join("data"), store_url, 0, flags, env);
        s._dir = Some(dir);
        s
    }

    /// Sets an environment variable for the server processes that restarts start.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Starts a server on an existing data folder (one a stopped server left), with more flags.
    pub fn spawn_on_folder(data: PathBuf, flags: &[&str]) -> Self {
        Self::start_with(data, None, 0, flags)
    }

    fn start(data: PathBuf, store_url: Option<String>) -> Self {
        Self::start_on(data, store_url, 0)
    }

    fn start_on(data: PathBuf, store_url: Option<String>, port: u16) -> Self {
        Self::start_with(data, store_url, port, &[])
    }

    fn start_with(data: PathBuf, store_url: Option<String>, port: u16, flags: &[&str]) -> Self {
        Self::start_full(data, store_url, port, flags, Vec::new())
    }

    fn start_full(
        data: PathBuf,
        store_url: Option<String>,
        port: u16,
        flags: &[&str],
        env: Vec<(String, String)>,
    ) -> Self {
        let started = Instant::now();
        let mut cmd = Command::new(binary());
        cmd.args(["server", "--host", "127.0.0.1", "--port", &port.to_string(), "--data"]).arg(&data);
        if let Some(url) = &store_url {
            cmd.args(["--store", url]);
        }
        cmd.args(flags);
        let meta_url = match flags.iter().position(|f| *f == "--meta") {
            Some(i) => flags.get(i + 1).map(|u| u.to_string()),
            None => test_meta_url(&data),
        };
        if let (Some(url), false) = (&meta_url, flags.contains(&"--meta")) {
            cmd.args(["--meta", url]);
        }
        cmd.env_remove("TRAINLOG_PORT")
            .env_remove("TRAINLOG_META")
            .env_remove("TRAINLOG_STORE")
            .env_remove("TRAINLOG_DATA")
            .env_remove("TRAINLOG_AUTH")
            .envs(env.iter().map(|(k, v)| (k, v)));
        let mut child =
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("the trainlog binary starts");
        let stdout = child.stdout.take().expect("piped stdout");
        // The output is read on a thread of its own, so a server that never gets ready fails
        // the test instead of hanging it.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut ready = Some(ready_tx);
            for line in BufReader::new(stdout).lines().map_while(std::result::Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
                    }
                }
            }
        });
        let url = match ready_rx.recv_timeout(Duration::from_secs(READY_TIMEOUT_S)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                panic!("the server printed no ready line within {READY_TIMEOUT_S} s (or exited before it)");
            }
        };
        let startup_ms = started.elapsed().as_millis();
        let api_key = std::fs::read_to_string(data.join("admin.key")).ok().map(|k| k.trim().to_owned());
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = &api_key {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).expect("a key fits a header"),
            );
        }
        let client = reqwest::blocking::Client::builder()
            .default_headers(headers)
            .timeout(Duration::from_secs(120))
            .build()
            .expect("an HTTP client");
        let flags = flags.iter().map(|f| f.to_string()).collect();
        Self { url, data, store_url, child: Some(child), _dir: None, client, api_key, flags, env, startup_ms, meta_url }
    }

    /// The object store URL the server was started with (None: the local folder under `data`).
    pub fn store_url(&self) -> Option<&str> {
        self.store_url.as_deref()
    }

    /// Replaces the bytes of an object in the server's store behind its back (a corruption).
    pub fn tamper_object(&self, key: &str, bytes: &[u8]) {
        match self.store_url() {
            None => std::fs::write(self.data.join("store").join(key), bytes).expect("the object is a local file"),
            Some(url) => {
                use object_store::ObjectStoreExt;
                // A signed write with the same AWS_* settings the server uses.
                let full = format!("{}/{key}", url.trim_end_matches('/'));
                let parsed = url_parts(&full);
                let store =
                    object_store::aws::AmazonS3Builder::from_env().with_url(&full).build().expect("an S3 client");
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                runtime
                    .block_on(store.put(&object_store::path::Path::from(parsed), bytes.to_vec().into()))
                    .expect("tampering with the object");
            }
        }
    }

    /// The keys of the objects under `prefix` in the server's store (its local folder, or S3),
    /// relative to the store's root, sorted.
    pub fn object_keys(&self, prefix: &str) -> Vec<String> {
        let mut keys = Vec::new();
        match self.store_url() {
            None => {
                let root = self.data.join("store");
                let mut folders = vec![root.join(prefix)];
                while let Some(folder) = folders.pop() {
                    for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
                        let path = entry.path();
                        if path.is_dir() {
                            folders.push(path);
                        } else if let Ok(key) = path.strip_prefix(&root) {
                            keys.push(key.to_string_lossy().into_owned());
                        }
                    }
                }
            }
            Some(url) => {
                use object_store::ObjectStore;
                let base = url_parts(url);
                let store = object_store::aws::AmazonS3Builder::from_env().with_url(url).build().expect("an S3 client");
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                let mut folders = vec![object_store::path::Path::from(format!("{base}/{prefix}"))];
                while let Some(folder) = folders.pop() {
                    let listed = runtime.block_on(store.list_with_delimiter(Some(&folder))).expect("listing S3");
                    folders.extend(listed.common_prefixes);
                    keys.extend(listed.objects.into_iter().map(|o| {
                        o.location.as_ref().strip_prefix(&format!("{base}/")).unwrap_or(o.location.as_ref()).to_owned()
                    }));
                }
            }
        }
        keys.sort();
        keys
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}/api/v1{}", self.url, path)
    }

    /// Kills the process with SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the process with SIGTERM and waits for it to exit; answers whether it exited cleanly.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else { return true };
        let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = c.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        false
    }

    /// Starts the server again on the same data folder and store (after `kill9` or `terminate`).
    pub fn restart(&mut self) {
        self.kill9();
        let dir = self._dir.take();
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        let mut next = Self::start_full(self.data.clone(), self.store_url.clone(), 0, &flags, self.env.clone());
        next._dir = dir;
        *self = next;
    }

    /// Like `restart`, on the same port, so clients that hold the URL reconnect.
    pub fn restart_same_port(&mut self) {
        self.kill9();
        let port: u16 = self.url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port in the URL");
        let dir = self._dir.take();
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        let mut next = Self::start_full(self.data.clone(), self.store_url.clone(), port, &flags, self.env.clone());
        next._dir = dir;
        *self = next;
    }

    /// Runs a `trainlog` command that works on the server's metadata (`users`, `keys`, `grant`)
    /// against its data folder and database; answers what it printed.
    pub fn admin_cli_output(&self, args: &[&str]) -> String {
        let mut cmd = Command::new(binary());
        cmd.args(args).arg("--data").arg(&self.data).env_remove("TRAINLOG_META");
        if let Some(url) = &self.meta_url {
            cmd.args(["--meta", url]);
        }
        let out = cmd.output().expect("trainlog runs");
        assert!(out.status.success(), "trainlog {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `admin_cli_output`'s last line (where `users add` and `keys create` print the key).
    pub fn admin_cli(&self, args: &[&str]) -> String {
        self.admin_cli_output(args).lines().last().unwrap_or_default().trim().to_owned()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(self.api(path)).send().expect("GET reaches the server");
        status_json(r)
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.client.post(self.api(path)).json(body).send().expect("POST reaches the server");
        status_json(r)
    }

    pub fn post_raw(&self, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
        let r = self
            .client
            .post(self.api(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .expect("POST reaches the server");
        status_json(r)
    }

    pub fn patch(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.client.patch(self.api(path)).json(body).send().expect("PATCH reaches the server");
        status_json(r)
    }

    /// Creates a run and answers its id.
    pub fn create_run(&self, project: &str, name: &str) -> String {
        let (status, run) = self.post("/runs", &json!({"project": project, "name": name}));
        assert_eq!(status, 201, "{run}");
        run["id"].as_str().expect("a run id").to_owned()
    }

    pub fn log(&self, run: &str, points: Value) -> (u16, Value) {
        self.post(&format!("/runs/{run}/metrics"), &json!({ "points": points }))
    }

    /// A whole series as (step, value) pairs, values as JSON (numbers or "NaN"-style strings).
    pub fn series(&self, run: &str, key: &str) -> Vec<(i64, Value)> {
        let (status, body) = self.get(&format!("/runs/{run}/metrics?key={}", urlencode(key)));
        assert_eq!(status, 200, "{body}");
        body["points"]
            .as_array()
            .expect("points")
            .iter()
            .map(|p| (p["step"].as_i64().expect("step"), p["value"].clone()))
            .collect()
    }

    pub fn flush(&self) {
        let (status, body) = self.post("/admin/flush", &json!({}));
        assert_eq!(status, 200, "{body}");
    }
}

/// The key part of `s3://bucket/key`.
fn url_parts(url: &str) -> String {
    url.trim_start_matches("s3://").split_once('/').map(|(_, k)| k.to_owned()).unwrap_or_default()
}

pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn status_json(r: reqwest::blocking::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Encodes points as an Arrow IPC stream with columns key, step, value, timestamp.
pub fn arrow_stream(keys: &[&str], steps: &[i64], values: &[f64], timestamps: Option<&[i64]>) -> Vec<u8> {
    use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
    use std::sync::Arc;
    let mut columns: Vec<(&str, ArrayRef)> = vec![
        ("key", Arc::new(StringArray::from(keys.to_vec()))),
        ("step", Arc::new(Int64Array::from(steps.to_vec()))),
        ("value", Arc::new(Float64Array::from(values.to_vec()))),
    ];
    if let Some(ts) = timestamps {
        columns.push(("timestamp", Arc::new(Int64Array::from(ts.to_vec()))));
    }
    let batch = RecordBatch::try_from_iter(columns).expect("a valid batch");
    let mut buf = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut buf, &batch.schema()).expect("a stream writer");
    w.write(&batch).expect("write");
    w.finish().expect("finish");
    drop(w);
    buf
}

/// Logs 100 points through the Rust SDK to `url`, finishes the run, and checks every point
/// was acknowledged and reads back; the SDK's environment (`SSL_CERT_FILE`, keys) is the caller's.
pub fn log_a_run_and_read_it_back(url: &str) {
    let run = trainlog::Run::builder("tls").server(url).system_metrics(None).start().expect("a run over https");
    for step in 0..100 {
        run.log(step, &[("loss", 1.0 / (step + 1) as f64)]);
    }
    let summary = run.finish().expect("finished");
    assert_eq!((summary.acknowledged, summary.spooled, summary.unsaved), (100, 0, 0), "{summary:?}");
    let stored = trainlog::Api::new(Some(url)).expect("an API client").run(run.id()).expect("the run reads back");
    assert_eq!((stored.status(), &stored.summary()["loss"]["count"]), ("finished", &serde_json::json!(100)));
}
