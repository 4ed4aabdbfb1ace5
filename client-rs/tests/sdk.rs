//! The Rust SDK against the real server binary.

use serde_json::json;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use trainlog::collect::job::JobContext;
use trainlog::{Api, HistoryPoint, Mode, Resume, Run};
use trainlog_tests::TestServer;

/// How long a test waits for something that must happen before it fails.
const EVENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until `done` holds, failing the test with `what` if it never does.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not seen in {EVENT_TIMEOUT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many points of `key` the server holds for the run.
fn points_on_server(api: &Api, run: &str, key: &str) -> u64 {
    api.run(run).ok().and_then(|r| r.summary()[key]["count"].as_u64()).unwrap_or(0)
}

/// Dollars per second between the first and last points, by the points' own timestamps.
fn usd_per_second(points: &[HistoryPoint]) -> f64 {
    let (first, last) = (points.first().unwrap(), points.last().unwrap());
    assert!(last.timestamp_ms > first.timestamp_ms, "the samples span some time: {points:?}");
    (last.value - first.value) / ((last.timestamp_ms - first.timestamp_ms) as f64 / 1000.0)
}

/// A server that hangs: it takes connections on the address and never answers.
struct HungServer {
    listener: TcpListener,
}

impl HungServer {
    fn bind(url: &str) -> Self {
        let listener = TcpListener::bind(url.trim_start_matches("http://")).expect("the port is free again");
        listener.set_nonblocking(true).unwrap();
        Self { listener }
    }

    /// Waits for a connection and the head of a request on it; the request stays unanswered.
    fn next_request(&self) -> TcpStream {
        let deadline = Instant::now() + EVENT_TIMEOUT;
        let mut stream = loop {
            match self.listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "no request reached the hung server in {EVENT_TIMEOUT:?}");
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("accepting a connection: {e}"),
            }
        };
        stream.set_nonblocking(false).unwrap();
        stream.set_read_timeout(Some(EVENT_TIMEOUT)).unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).expect("the head of a request");
            assert!(n > 0, "the connection closed before a request: {:?}", String::from_utf8_lossy(&head));
            head.extend_from_slice(&buf[..n]);
        }
        stream
    }
}

/// Whether the client still waits on the connection: neither closed nor reset (body bytes
/// still arriving are read and dropped).
fn still_waiting(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1 << 16];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

fn builder(s: &TestServer, project: &str, spool: &std::path::Path) -> trainlog::RunBuilder {
    Run::builder(project).server(s.url.clone()).spool_dir(spool).system_metrics(None).cost(false).capture_code(false)
}

#[test]
fn a_whole_run_lifecycle() {
    let s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let run = builder(&s, "resnet", spool.path())
        .name("lr-3e-4")
        .config(json!({"lr": 3e-4, "model": {"depth": 50}}))
        .label("baseline")
        .start()
        .unwrap();
    for step in 0..1000 {
        run.log(step, &[("train/loss", 1.0 / (step as f64 + 1.0)), ("lr", 3e-4)]);
    }
    run.log(1000, &[("train/loss", f64::NAN)]);
    run.finish().unwrap();
    let api = Api::new(Some(&s.url)).unwrap();
    let info = api.run(run.id()).unwrap();
    assert_eq!(info.status(), "finished");
    assert_eq!(info.params()["model.depth"], 50);
    assert_eq!(info.tags()["baseline"], "");
    assert!(info.json["metadata"]["environment"]["cpu"].is_object(), "{}", info.json["metadata"]);
    let history = api.history(run.id(), "train/loss").unwrap();
    assert_eq!(history.len(), 1001);
    assert_eq!(history[3].value, 0.25);
    assert!(history[1000].value.is_nan());
    assert_eq!(info.summary()["lr"]["count"], 1000);
    let found = api.runs("resnet", "metrics.lr > 0.0001", None).unwrap();
    assert_eq!(found.len(), 1);
    assert!(!spool.path().join(format!("{}.spool", run.id())).exists(), "nothing left in the spool");
}

#[test]
fn resuming_a_run_replays_steps_without_duplicates() {
    let s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let first = builder(&s, "p", spool.path()).id("job-7").config(json!({"lr": 0.1})).start().unwrap();
    for step in 0..100 {
        first.log(step, &[("loss", step as f64)]);
    }
    first.finish_with("preempted", Duration::from_secs(30)).unwrap();
    let api = Api::new(Some(&s.url)).unwrap();
    assert_eq!(api.run("job-7").unwrap().status(), "preempted");

    let again = builder(&s, "p", spool.path()).id("job-7").config(json!({"lr": 0.1})).start();
    assert!(matches!(again, Err(trainlog::Error::Server { status: 409, .. })), "resume=never refuses an existing id");
    let missing = builder(&s, "p", spool.path()).id("job-8").resume(Resume::Must).start();
    assert!(matches!(missing, Err(trainlog::Error::Server { status: 404, .. })));

    let resumed =
        builder(&s, "p", spool.path()).id("job-7").config(json!({"lr": 0.1})).resume(Resume::Must).start().unwrap();
    assert_eq!(api.run("job-7").unwrap().status(), "running");
    for step in 80..150 {
        resumed.log(step, &[("loss", -(step as f64))]);
    }
    resumed.finish().unwrap();
    let h = api.history("job-7", "loss").unwrap();
    assert_eq!(h.len(), 150);
    assert_eq!((h[79].value, h[80].value, h[149].value), (79.0, -80.0, -149.0));
    assert_eq!(api.run("job-7").unwrap().status(), "finished");
}

#[test]
fn a_server_crash_mid_run_loses_and_duplicates_nothing() {
    let mut s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let run = builder(&s, "crash", spool.path()).start().unwrap();
    for step in 0..5000 {
        run.log(step, &[("loss", step as f64)]);
    }
    assert!(run.flush(Duration::from_secs(30)));
    assert_eq!(run.pending_points(), 0);
    s.kill9();
    // In the server's place, one that hangs: the sender's next request is never answered.
    let hung = HungServer::bind(&s.url);
    run.log(5000, &[("loss", 5000.0)]);
    let mut request = hung.next_request();
    // Logging goes on while the sender waits on the network: every call returns, and the
    // points wait in memory, none lost.
    for step in 5001..10_000 {
        run.log(step, &[("loss", step as f64)]);
    }
    assert!(
        still_waiting(&mut request),
        "the sender's request was still unanswered when the logging above returned, so logging never waited on it"
    );
    let queued = run.pending_points();
    assert!((4999..=5000).contains(&queued), "the points logged during the hang are queued: {queued}");
    // The hung server goes away too: everything logged meanwhile moves to the spool.
    drop((request, hung));
    wait_until("the run spools what it logged while the server was away", || {
        run.is_spooling() && run.pending_points() == 0
    });
    assert!(spool.path().join(format!("{}.spool", run.id())).exists());
    s.restart_same_port();
    for step in 10_000..12_000 {
        run.log(step, &[("loss", step as f64)]);
    }
    run.finish().unwrap();
    let h = Api::new(Some(&s.url)).unwrap().history(run.id(), "loss").unwrap();
    assert_eq!(h.len(), 12_000);
    assert!(h.iter().enumerate().all(|(i, p)| p.step == i as i64 && p.value == i as f64));
}

#[test]
fn offline_runs_are_sent_by_sync() {
    let s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let run = builder(&s, "offline", spool.path()).mode(Mode::Offline).config(json!({"lr": 0.5})).start().unwrap();
    for step in 0..3000 {
        run.log(step, &[("loss", step as f64 * 0.5)]);
    }
    let id = run.id().to_owned();
    run.finish().unwrap();
    let api = Api::new(Some(&s.url)).unwrap();
    assert!(matches!(api.run(&id), Err(trainlog::Error::Server { status: 404, .. })), "offline sends nothing");
    let report = trainlog::sync_all(spool.path(), None, false).unwrap();
    assert_eq!(report.synced, vec![id.clone()]);
    let info = api.run(&id).unwrap();
    assert_eq!((info.status(), info.params()["lr"].as_f64()), ("finished", Some(0.5)));
    assert_eq!(api.history(&id, "loss").unwrap().len(), 3000);
    assert_eq!(std::fs::read_dir(spool.path()).unwrap().count(), 0, "synced spools are removed");
    assert_eq!(trainlog::sync_all(spool.path(), None, false).unwrap().synced.len(), 0);
}

#[test]
fn an_unreachable_server_at_start_spools_and_sync_sends_later() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let spool = tempfile::tempdir().unwrap();
    let run =
        Run::builder("later").server(dead).spool_dir(spool.path()).system_metrics(None).cost(false).start().unwrap();
    for step in 0..100 {
        run.log(step, &[("loss", 1.0)]);
    }
    assert!(run.is_spooling());
    let id = run.id().to_owned();
    run.finish_with("finished", Duration::from_secs(2)).unwrap();
    let s = TestServer::spawn_local();
    let report = trainlog::sync_all(spool.path(), Some(&s.url), false).unwrap();
    assert_eq!(report.synced, vec![id.clone()]);
    let api = Api::new(Some(&s.url)).unwrap();
    assert_eq!(api.history(&id, "loss").unwrap().len(), 100);
    assert_eq!(api.run(&id).unwrap().status(), "finished");
}

#[test]
fn cost_accumulates_at_a_set_price_while_the_run_goes() {
    let s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let run = Run::builder("cost")
        .server(s.url.clone())
        .spool_dir(spool.path())
        .capture_code(false)
        .system_metrics(Some(Duration::from_millis(100)))
        .cost_per_hour(3600.0)
        .start()
        .unwrap();
    let api = Api::new(Some(&s.url)).unwrap();
    wait_until("ten cost samples on the server while the run goes", || {
        points_on_server(&api, run.id(), "cost/usd") >= 10
    });
    let live = api.run(run.id()).unwrap();
    assert_eq!(live.status(), "running");
    let usd = live.summary()["cost/usd"]["last"].as_f64().expect("cost in the summary while running");
    assert!(usd > 0.0, "{usd}");
    // $3600 an hour is a dollar a second of the time the samples' own timestamps cover.
    let rate = usd_per_second(&api.history(run.id(), "cost/usd").unwrap());
    assert!((0.8..1.25).contains(&rate), "about one dollar per second: {rate}");
    assert!(live.summary()["sys/cpu.percent"].is_object(), "{}", live.summary());
    assert!(live.summary()["sys/proc.rss_bytes"]["last"].as_f64().unwrap() > 1e6);
    assert_eq!(live.json["metadata"]["cost"]["usd_per_hour"], 3600.0);
    run.finish().unwrap();
    let h = api.history(run.id(), "cost/usd").unwrap();
    assert!(h.windows(2).all(|w| w[1].value >= w[0].value), "cost only grows");
    assert!(h.len() >= 11, "the samples seen while running, and one at the end: {}", h.len());
}

#[test]
fn a_resumed_run_continues_its_system_steps_and_cost() {
    let s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let start = || {
        Run::builder("resume-cost")
            .server(s.url.clone())
            .spool_dir(spool.path())
            .id("spot-1")
            .resume(Resume::Allow)
            .capture_code(false)
            .system_metrics(Some(Duration::from_millis(100)))
            .cost_per_hour(3600.0)
            .start()
            .unwrap()
    };
    let api = Api::new(Some(&s.url)).unwrap();
    let first = start();
    for step in 0..100 {
        first.log(step, &[("loss", 1.0)]);
    }
    wait_until("five cost samples of the first attempt", || points_on_server(&api, "spot-1", "cost/usd") >= 5);
    first.finish_with("preempted", Duration::from_secs(10)).unwrap();
    let samples_before = points_on_server(&api, "spot-1", "cost/usd");
    let cost_before = api.run("spot-1").unwrap().summary()["cost/usd"]["last"].as_f64().unwrap();
    let second = start();
    assert_eq!(second.next_step(), 100);
    wait_until("ten cost samples of the second attempt", || {
        points_on_server(&api, "spot-1", "cost/usd") >= samples_before + 10
    });
    second.finish().unwrap();
    let cost = api.history("spot-1", "cost/usd").unwrap();
    assert!(cost.windows(2).all(|w| w[1].step == w[0].step + 1), "one point per sample, none overwritten");
    assert!(
        cost.windows(2).all(|w| w[1].value >= w[0].value),
        "cost only grows across the restart: {:?}",
        cost.iter().map(|p| (p.step, p.value)).collect::<Vec<_>>()
    );
    assert!(cost.last().unwrap().value > cost_before, "the second attempt adds to the first");
    // The second attempt charges the set price from where the first one stopped.
    let second_attempt = &cost[samples_before as usize..];
    assert!(second_attempt[0].value >= cost_before, "{:?} after {cost_before}", second_attempt[0]);
    let rate = usd_per_second(second_attempt);
    assert!((0.8..1.25).contains(&rate), "about one dollar per second: {rate}");
}

#[test]
fn a_spool_left_by_a_dead_process_is_sent_before_the_new_processs_points() {
    let s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    // The first process logged offline (as if the server were down) and died.
    let first = builder(&s, "inherit", spool.path()).id("job-9").mode(Mode::Offline).start().unwrap();
    for step in 0..100 {
        first.log(step, &[("loss", 1.0)]);
    }
    first.finish_with("preempted", Duration::from_secs(5)).unwrap();
    // The restarted process resumes from step 50 with the server reachable.
    let second = builder(&s, "inherit", spool.path()).id("job-9").resume(Resume::Allow).start().unwrap();
    for step in 50..150 {
        second.log(step, &[("loss", 2.0)]);
    }
    second.finish().unwrap();
    let api = Api::new(Some(&s.url)).unwrap();
    let h = api.history("job-9", "loss").unwrap();
    assert_eq!(h.len(), 150);
    assert_eq!((h[49].value, h[50].value, h[149].value), (1.0, 2.0, 2.0), "the newer process's values win");
    assert_eq!(api.run("job-9").unwrap().status(), "finished");
    // The earlier process's attempt, then this one's: its join went after the inherited records.
    let info = api.run("job-9").unwrap();
    let statuses: Vec<&str> = info.attempts().iter().map(|a| a["status"].as_str().unwrap_or("?")).collect();
    assert_eq!(statuses, ["preempted", "finished"]);
    assert_eq!(second.attempt(), 2, "the process learned its attempt from the spooled join's answer");
    assert_eq!(std::fs::read_dir(spool.path()).unwrap().count(), 0);
}

#[test]
fn checkpoints_are_kept_by_retention_restored_verified_and_corruption_is_reported() {
    let s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let run = builder(&s, "ckpt", spool.path()).start().unwrap();
    let retention = trainlog::Retention {
        keep_last: Some(2),
        keep_best: Some(1),
        metric: Some("val/loss".into()),
        maximize: false,
    };
    for (step, loss) in [(10, 0.5), (20, 0.2), (30, 0.4), (40, 0.6)] {
        let dir = work.path().join(format!("ckpt-{step}"));
        std::fs::create_dir_all(dir.join("optimizer")).unwrap();
        std::fs::write(dir.join("model.bin"), vec![step as u8; 100_000]).unwrap();
        std::fs::write(dir.join("optimizer/state.json"), format!("{{\"step\": {step}}}")).unwrap();
        run.log(step, &[("val/loss", loss)]);
        let saved = run.log_checkpoint(&dir, step, json!({"epoch": step / 10}), &retention).unwrap();
        assert_eq!(saved["files"].as_array().unwrap().len(), 2);
    }
    let api = Api::new(Some(&s.url)).unwrap();
    let names: Vec<String> =
        api.checkpoints(run.id()).unwrap().iter().map(|c| c["name"].as_str().unwrap().to_owned()).collect();
    assert_eq!(
        names,
        vec!["step-000000000040", "step-000000000030", "step-000000000020"],
        "last two, and the best val/loss"
    );
    assert!(
        api.list_artifacts(run.id(), "checkpoints/step-000000000010/").unwrap().is_empty(),
        "a dropped checkpoint loses its files"
    );

    let latest = run.latest_checkpoint().unwrap().unwrap();
    assert_eq!((latest["step"].as_i64(), latest["metadata"]["epoch"].as_i64()), (Some(40), Some(4)));
    let dest = work.path().join("restored");
    api.restore_checkpoint(run.id(), &dest, None, None).unwrap();
    assert_eq!(std::fs::read(dest.join("model.bin")).unwrap(), vec![40u8; 100_000]);
    assert_eq!(std::fs::read_to_string(dest.join("optimizer/state.json")).unwrap(), "{\"step\": 40}");

    // Corrupt the stored bytes behind the server's back: the restore refuses them.
    let stored =
        s.data.join(format!("store/projects/1/artifacts/{}/checkpoints/step-000000000030/model.bin", run.id()));
    let mut bytes = std::fs::read(&stored).unwrap();
    bytes[500] ^= 0xFF;
    std::fs::write(&stored, bytes).unwrap();
    let bad = work.path().join("bad");
    match api.restore_checkpoint(run.id(), &bad, Some("step-000000000030"), None) {
        Err(trainlog::Error::Corrupt { path, .. }) => assert!(path.ends_with("model.bin")),
        other => panic!("expected a corrupt checkpoint, got {other:?}"),
    }
    assert!(!bad.join("model.bin").exists(), "a corrupt file is never left in place");

    // A checkpoint whose file was deleted says so.
    api.delete_artifact(run.id(), "checkpoints/step-000000000020/model.bin").unwrap();
    let gone = api.restore_checkpoint(run.id(), &work.path().join("gone"), Some("step-000000000020"), None);
    assert!(matches!(gone, Err(trainlog::Error::Server { status: 404, .. })), "{gone:?}");
    run.finish().unwrap();
}

#[test]
fn ranks_given_their_job_by_the_builder_join_one_run() {
    let s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let context = |rank: u32| JobContext {
        launcher: "trainlog".into(),
        job_id: Some("rust-ddp-1".into()),
        rank,
        local_rank: rank,
        world_size: 3,
        node_count: 1,
        ..JobContext::default()
    };
    // Ranks start in reverse order, each on its own thread, and know nothing of one another.
    let ranks: Vec<_> = [2, 1, 0]
        .into_iter()
        .map(|rank| {
            let run =
                builder(&s, "rust-jobs", spool.path()).config(json!({"lr": 0.01})).job(context(rank)).start().unwrap();
            std::thread::spawn(move || {
                for step in 0..10 {
                    run.log(step, &[("loss", f64::from(rank) * 100.0 + step as f64)]);
                }
                run.finish().unwrap();
                (run.id().to_owned(), run.attempt())
            })
        })
        .collect();
    let ended: Vec<(String, i64)> = ranks.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(ended.iter().all(|e| e == &ended[0]), "one run, one attempt: {ended:?}");
    assert_eq!(ended[0], (trainlog::membership::run_id_for_job("rust-jobs", "trainlog:rust-ddp-1"), 1));
    let api = Api::new(Some(&s.url)).unwrap();
    assert_eq!(api.runs("rust-jobs", "", None).unwrap().len(), 1);
    let info = api.run(&ended[0].0).unwrap();
    assert_eq!(info.status(), "finished");
    assert_eq!(info.params()["lr"], 0.01);
    assert_eq!((info.job()["launcher"].as_str(), info.job()["world_size"].as_i64()), (Some("trainlog"), Some(3)));
    let [attempt] = info.attempts() else { panic!("one attempt: {:?}", info.attempts()) };
    assert_eq!((attempt["status"].as_str(), attempt["ranks"].as_i64()), (Some("finished"), Some(3)));
    // Only rank 0's log records.
    let loss: Vec<f64> = api.history(&ended[0].0, "loss").unwrap().iter().map(|p| p.value).collect();
    assert_eq!(loss, (0..10).map(f64::from).collect::<Vec<_>>());
}
