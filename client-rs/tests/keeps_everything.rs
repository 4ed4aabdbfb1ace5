//! The SDK keeps every point or says so: what the server cannot take now is retried, what it
//! refuses for good goes to the rejected file, and what can be saved nowhere is counted in the
//! finish summary.

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use trainlog::{Api, Mode, Run};
use trainlog_tests::TestServer;

fn builder(url: &str, project: &str, spool: &Path) -> trainlog::RunBuilder {
    Run::builder(project).server(url).spool_dir(spool).system_metrics(None).cost(false).capture_code(false)
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port in the URL")
}

/// A server on a fresh data folder at a given port, as if the run's server had lost its data.
struct FreshServer {
    child: Child,
    _data: tempfile::TempDir,
}

impl FreshServer {
    fn start_on(port: u16) -> Self {
        let data = tempfile::tempdir().unwrap();
        let mut child = Command::new(trainlog_tests::binary())
            .args(["server", "--host", "127.0.0.1", "--port", &port.to_string(), "--data"])
            .arg(data.path().join("data"))
            .env_remove("TRAINLOG_PORT")
            .env_remove("TRAINLOG_STORE")
            .env_remove("TRAINLOG_DATA")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        for line in lines.by_ref() {
            if line.unwrap().contains("listening on ") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Self { child, _data: data }
    }
}

impl Drop for FreshServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rejected_lines(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn steps_of(lines: &[Value]) -> Vec<i64> {
    lines
        .iter()
        .filter(|l| l["request"]["op"] == "points")
        .flat_map(|l| l["request"]["points"].as_array().unwrap().iter().map(|p| p[1].as_i64().unwrap()))
        .collect()
}

#[test]
fn batches_the_server_refuses_go_to_the_rejected_file_with_its_answer_and_are_counted() {
    let mut first = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let run = builder(&first.url, "refused", spool.path()).start().unwrap();
    for step in 0..100 {
        run.log(step, &[("loss", step as f64)]);
    }
    run.set_metadata("bad.section", json!({"kept": true}));
    assert!(run.flush(Duration::from_secs(30)));
    // The server loses the run: a server with a fresh data folder takes its port, so later
    // batches (and the finish) are refused with 404.
    let port = port_of(&first.url);
    first.kill9();
    let _second = FreshServer::start_on(port);
    for step in 100..300 {
        run.log(step, &[("loss", step as f64)]);
    }
    let summary = run.finish().unwrap();

    assert_eq!((summary.acknowledged, summary.rejected, summary.spooled, summary.unsaved), (100, 200, 0, 0));
    assert_eq!((summary.requests_rejected, summary.requests_unsaved), (2, 0), "the metadata section and the finish");
    let file = trainlog::rejected_path(spool.path(), run.id());
    assert_eq!(summary.rejected_file.as_deref(), Some(file.as_path()));
    assert!(summary.warnings.iter().any(|w| w.contains(&file.display().to_string())), "{:?}", summary.warnings);

    let lines = rejected_lines(&file);
    let metadata: Vec<&Value> = lines.iter().filter(|l| l["request"]["op"] == "metadata").collect();
    assert_eq!(metadata.len(), 1);
    assert_eq!((metadata[0]["status"].as_u64(), metadata[0]["field"].as_str()), (Some(400), Some("section")));
    assert!(metadata[0]["message"].as_str().unwrap().contains("section"), "{}", metadata[0]);
    assert_eq!(metadata[0]["request"]["body"], json!({"kept": true}));
    for line in lines.iter().filter(|l| l["request"]["op"] != "metadata") {
        assert_eq!(line["status"], 404, "{line}");
        assert!(line["message"].as_str().unwrap().contains(run.id()), "{line}");
    }
    assert_eq!(steps_of(&lines), (100..300).collect::<Vec<_>>(), "every refused point, once, in order");
    assert_eq!(lines.iter().filter(|l| l["request"]["op"] == "finish").count(), 1);
    assert!(!spool.path().join(format!("{}.spool", run.id())).exists(), "nothing left to retry");
}

#[test]
fn points_that_neither_the_server_nor_the_spool_takes_are_reported_as_unsaved() {
    let mut s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    // Every write to this run's spool fails, as on a full disk.
    std::os::unix::fs::symlink("/dev/full", spool.path().join("disk-full-1.spool")).unwrap();
    let run = builder(&s.url, "full", spool.path()).id("disk-full-1").start().unwrap();
    for step in 0..100 {
        run.log(step, &[("loss", 1.0)]);
    }
    assert!(run.flush(Duration::from_secs(30)));
    s.kill9();
    for step in 100..1100 {
        run.log(step, &[("loss", 2.0)]);
    }
    let summary = run.finish_with("finished", Duration::from_secs(2)).unwrap();

    assert_eq!((summary.acknowledged, summary.spooled, summary.rejected, summary.unsaved), (100, 0, 0, 1000));
    assert_eq!((summary.requests_spooled, summary.requests_unsaved), (0, 1), "the finish request");
    assert_eq!(summary.spool_file, None);
    let warning = summary.warnings.iter().find(|w| w.contains("could not be saved")).expect("a warning");
    assert!(warning.contains("1000 points") && warning.contains("spool could not be written"), "{warning}");
    assert_eq!(run.pending_points(), 0);
    assert_eq!(run.finish_summary(), Some(summary));
}

/// A front for a real server that answers the first metric batches and finish requests with
/// the given statuses (503 and 507 with `Retry-After: 1`, as the server does; others
/// without), then forwards every request and adds up the points the server accepted.
struct BusyFront {
    url: String,
    accepted: Arc<AtomicU64>,
    refusals_left: Arc<Mutex<(VecDeque<u16>, VecDeque<u16>)>>,
}

struct Request {
    method: String,
    path: String,
    content_type: Option<String>,
    body: Vec<u8>,
}

fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    reader.read_line(&mut head).ok()?;
    let mut parts = head.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let (mut content_type, mut length) = (None, 0usize);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "content-type" => content_type = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { method, path, content_type, body })
}

impl BusyFront {
    fn start(backend: &str, batch_refusals: &[u16], finish_refusals: &[u16]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let front = Self {
            url,
            accepted: Arc::new(AtomicU64::new(0)),
            refusals_left: Arc::new(Mutex::new((
                batch_refusals.iter().copied().collect(),
                finish_refusals.iter().copied().collect(),
            ))),
        };
        let (accepted, refusals, backend) = (front.accepted.clone(), front.refusals_left.clone(), backend.to_owned());
        std::thread::spawn(move || {
            let client = reqwest::blocking::Client::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(request) = read_request(&mut stream) else { continue };
                let is_batch = request.method == "POST" && request.path.ends_with("/metrics");
                let refusal = {
                    let mut left = refusals.lock().unwrap();
                    match (is_batch, request.path.ends_with("/finish")) {
                        (true, _) => left.0.pop_front(),
                        (_, true) => left.1.pop_front(),
                        _ => None,
                    }
                };
                let (status, body, retry_after) = match refusal {
                    Some(status) => {
                        let body = json!({"error": {"code": "unavailable", "message": "busy"}});
                        (status, body.to_string().into_bytes(), status != 429)
                    }
                    None => {
                        let method = reqwest::Method::from_bytes(request.method.as_bytes()).unwrap();
                        let mut forward = client.request(method, format!("{backend}{}", request.path));
                        if let Some(content_type) = &request.content_type {
                            forward = forward.header("content-type", content_type);
                        }
                        let answer = forward.body(request.body).send().unwrap();
                        let status = answer.status().as_u16();
                        let body = answer.bytes().unwrap().to_vec();
                        if is_batch && status == 200 {
                            let n = serde_json::from_slice::<Value>(&body).unwrap()["accepted"].as_u64().unwrap();
                            accepted.fetch_add(n, Ordering::SeqCst);
                        }
                        (status, body, false)
                    }
                };
                let mut head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                    body.len()
                );
                if retry_after {
                    head.push_str("retry-after: 1\r\n");
                }
                head.push_str("\r\n");
                let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(&body));
            }
        });
        front
    }
}

#[test]
fn a_busy_server_gets_every_point_exactly_once_once_it_recovers() {
    let s = TestServer::spawn_local();
    let front = BusyFront::start(&s.url, &[503, 507, 429], &[503, 503]);
    let spool = tempfile::tempdir().unwrap();
    let run = builder(&front.url, "busy", spool.path()).start().unwrap();
    for step in 0..3000 {
        run.log(step, &[("loss", step as f64)]);
    }
    let summary = run.finish().unwrap();

    assert_eq!(
        summary,
        trainlog::FinishSummary { acknowledged: 3000, ..Default::default() },
        "nothing spooled, refused or lost"
    );
    assert_eq!(*front.refusals_left.lock().unwrap(), (VecDeque::new(), VecDeque::new()), "every refusal was met");
    assert_eq!(front.accepted.load(Ordering::SeqCst), 3000, "the server took each point once");
    let api = Api::new(Some(&s.url)).unwrap();
    assert_eq!(api.run(run.id()).unwrap().status(), "finished");
    let history = api.history(run.id(), "loss").unwrap();
    assert_eq!(history.len(), 3000);
    assert!(history.iter().enumerate().all(|(i, p)| p.step == i as i64 && p.value == i as f64));
    assert!(!spool.path().join(format!("{}.spool", run.id())).exists());
}

#[test]
fn sync_keeps_spooled_requests_the_server_refuses_in_the_rejected_file() {
    let s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let run = builder(&s.url, "offline-refused", spool.path()).mode(Mode::Offline).start().unwrap();
    for step in 0..50 {
        run.log(step, &[("loss", 0.5)]);
    }
    run.set_metadata("bad.section", json!({"kept": true}));
    let id = run.id().to_owned();
    let summary = run.finish().unwrap();
    assert_eq!((summary.spooled, summary.acknowledged), (50, 0));
    assert_eq!(summary.spool_file, Some(spool.path().join(format!("{id}.spool"))));

    let report = trainlog::sync_all(spool.path(), Some(&s.url), false).unwrap();
    assert_eq!(report.synced, vec![id.clone()], "a refused request does not hold back the rest");
    let api = Api::new(Some(&s.url)).unwrap();
    assert_eq!(api.history(&id, "loss").unwrap().len(), 50);
    assert_eq!(api.run(&id).unwrap().status(), "finished");
    let lines = rejected_lines(&trainlog::rejected_path(spool.path(), &id));
    assert_eq!(lines.len(), 1);
    assert_eq!(
        (lines[0]["status"].as_u64(), lines[0]["request"]["section"].as_str()),
        (Some(400), Some("bad.section"))
    );
}
