//! Storage end to end: durability across kill -9, torn log tails, last-write-wins identity,
//! Parquet persistence and compaction, downsampling. CI runs these against the local folder
//! and again against an S3-compatible server (`TRAINLOG_TEST_STORE=s3://…`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trainlog_tests::{arrow_stream, json, TestServer, Value};

/// How long a test waits for something that must happen before it fails.
const EVENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until `done` holds, failing the test with `what` if it never does.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not seen in {EVENT_TIMEOUT:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn points(key: &str, steps: std::ops::Range<i64>, f: impl Fn(i64) -> f64) -> Value {
    Value::Array(
        steps.map(|s| json!({"key": key, "step": s, "value": f(s), "timestamp": 1_700_000_000_000i64 + s})).collect(),
    )
}

fn values(series: &[(i64, Value)]) -> Vec<f64> {
    series.iter().map(|(_, v)| v.as_f64().expect("a finite value")).collect()
}

fn wal_segments(data: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(data.join("wal")).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().flat_map(|e| if e.path().is_dir() { walk(&e.path()) } else { vec![e.path()] }).collect()
}

fn stats(s: &TestServer) -> Value {
    s.get("/admin/stats").1
}

#[test]
fn storage_points_round_trip_with_non_finite_values_before_and_after_persisting() {
    let mut s = TestServer::spawn();
    let run = s.create_run("p", "n");
    let (status, body) = s.log(
        &run,
        json!([{"key": "loss", "step": 0, "value": 1.5, "timestamp": 1_700_000_000_000i64},
               {"key": "loss", "step": 1, "value": "NaN"},
               {"key": "loss", "step": 2, "value": "Infinity"},
               {"key": "loss", "step": 3, "value": "-Infinity"},
               {"key": "loss", "step": 4, "value": -0.25}]),
    );
    assert_eq!((status, body), (200, json!({"accepted": 5})));
    let expected = vec![json!(1.5), json!("NaN"), json!("Infinity"), json!("-Infinity"), json!(-0.25)];
    let read = |s: &TestServer| s.series(&run, "loss").into_iter().map(|(_, v)| v).collect::<Vec<_>>();
    assert_eq!(read(&s), expected, "queryable at once from the buffer");
    let (_, body) = s.get(&format!("/runs/{run}/metrics?key=loss"));
    assert_eq!(body["points"][0], json!({"step": 0, "value": 1.5, "timestamp": 1_700_000_000_000i64}));
    s.flush();
    assert_eq!(stats(&s)["buffered_points"], 0);
    assert_eq!(read(&s), expected, "read back from Parquet");
    s.restart();
    assert_eq!(read(&s), expected, "after a restart");
    let (_, run_body) = s.get(&format!("/runs/{run}"));
    let summary = &run_body["summary"]["loss"];
    assert_eq!(
        (summary["last"].clone(), summary["min"].clone(), summary["max"].clone(), summary["count"].clone()),
        (json!(-0.25), json!("-Infinity"), json!("Infinity"), json!(5))
    );
}

#[test]
fn storage_arrow_batches_and_step_ranges() {
    let s = TestServer::spawn();
    let run = s.create_run("p", "arrow");
    let n = 10_000;
    let keys: Vec<&str> = (0..n).map(|i| if i % 2 == 0 { "train/loss" } else { "lr" }).collect();
    let steps: Vec<i64> = (0..n).map(|i| i / 2).collect();
    let vals: Vec<f64> = (0..n).map(|i| i as f64 * 0.5).collect();
    let (status, body) = s.post_raw(
        &format!("/runs/{run}/metrics"),
        "application/vnd.apache.arrow.stream",
        arrow_stream(&keys, &steps, &vals, None),
    );
    assert_eq!((status, body), (200, json!({"accepted": n})));
    let loss = s.series(&run, "train/loss");
    assert_eq!(loss.len(), 5000);
    assert_eq!(loss[10], (10, json!(10.0)));
    let (_, body) = s.get(&format!("/runs/{run}/metrics?key=lr&step_min=100&step_max=102"));
    let steps: Vec<i64> = body["points"].as_array().unwrap().iter().map(|p| p["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![100, 101, 102]);
    // A run named twice is read and answered once.
    let (_, many) = s.get(&format!("/metrics?key=lr&runs={run},{run}&buckets=10"));
    assert_eq!(many["series"].as_array().unwrap().len(), 1);
    assert_eq!(many["series"][0]["buckets"].as_array().unwrap().len(), 10);
}

#[test]
fn storage_resent_batches_never_duplicate_and_the_last_write_wins() {
    let mut s = TestServer::spawn();
    let run = s.create_run("p", "retry");
    let batch = points("loss", 0..100, |i| i as f64);
    assert_eq!(s.log(&run, batch.clone()).0, 200);
    assert_eq!(s.log(&run, batch.clone()).0, 200);
    assert_eq!(s.series(&run, "loss").len(), 100);
    s.flush();
    assert_eq!(s.log(&run, batch).0, 200, "a retry after persisting");
    // A resumed run replays steps 50..150 with new values.
    assert_eq!(s.log(&run, points("loss", 50..150, |i| -(i as f64))).0, 200);
    let check = |s: &TestServer| {
        let series = s.series(&run, "loss");
        assert_eq!(series.len(), 150);
        assert_eq!(series.iter().map(|p| p.0).collect::<Vec<_>>(), (0..150).collect::<Vec<_>>());
        assert_eq!(values(&series)[49..52], [49.0, -50.0, -51.0]);
    };
    check(&s);
    s.flush();
    check(&s);
    s.post(&format!("/runs/{run}/finish"), &json!({}));
    s.flush();
    check(&s);
    s.kill9();
    s.restart();
    check(&s);
    let (_, body) = s.get(&format!("/runs/{run}"));
    assert_eq!(
        (
            body["summary"]["loss"]["last"].clone(),
            body["summary"]["loss"]["min"].clone(),
            body["summary"]["loss"]["count"].clone()
        ),
        (json!(-149.0), json!(-149.0), json!(150))
    );
}

#[test]
fn storage_kill9_during_ingest_loses_no_acknowledged_point() {
    let mut s = TestServer::spawn();
    let runs: Vec<String> = (0..4).map(|i| s.create_run("crash", &format!("c{i}"))).collect();
    let acked: Arc<Mutex<Vec<(usize, i64)>>> = Arc::new(Mutex::new(Vec::new()));
    let sent: Arc<Mutex<Vec<(usize, i64)>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let url = s.url.clone();
    let batch_len = 500i64;
    let writers: Vec<_> = runs
        .iter()
        .cloned()
        .enumerate()
        .map(|(r, run)| {
            let (acked, sent, stop, url) = (acked.clone(), sent.clone(), stop.clone(), url.clone());
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
                for b in 0..400i64 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let first = b * batch_len;
                    let body =
                        json!({"points": points("loss", first..first + batch_len, |i| (i * 7 + r as i64) as f64)});
                    sent.lock().unwrap().push((r, b));
                    match client.post(format!("{url}/api/v1/runs/{run}/metrics")).json(&body).send() {
                        Ok(resp) if resp.status().is_success() => acked.lock().unwrap().push((r, b)),
                        _ => break,
                    }
                }
            })
        })
        .collect();
    // Kill once a fair amount has been acknowledged, while the writers are still sending.
    wait_until("60 batches acknowledged", || {
        let n = acked.lock().unwrap().len();
        assert!(
            n >= 60 || !writers.iter().all(|w| w.is_finished()),
            "the writers stopped with {n} batches acknowledged"
        );
        n >= 60
    });
    s.kill9();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 60, "batches acknowledged before the kill: {}", acked.len());
    s.restart();
    assert!(stats(&s)["wal_replayed_records"].as_u64().unwrap() > 0);
    let sent = sent.lock().unwrap().clone();
    for (r, run) in runs.iter().enumerate() {
        let series = s.series(run, "loss");
        let by_step: BTreeMap<i64, f64> = series.iter().map(|(st, v)| (*st, v.as_f64().unwrap())).collect();
        assert_eq!(by_step.len(), series.len(), "no step twice");
        for &(_, b) in acked.iter().filter(|a| a.0 == r) {
            for step in b * batch_len..(b + 1) * batch_len {
                assert_eq!(
                    by_step.get(&step),
                    Some(&((step * 7 + r as i64) as f64)),
                    "run {r} step {step} of an acknowledged batch"
                );
            }
        }
        // A batch is atomic: a batch that was sent but not acknowledged is wholly present or wholly absent.
        for &(_, b) in sent.iter().filter(|a| a.0 == r) {
            let present = (b * batch_len..(b + 1) * batch_len).filter(|st| by_step.contains_key(st)).count() as i64;
            assert!(present == 0 || present == batch_len, "batch {b} of run {r} is torn: {present} points");
        }
    }
}

#[test]
fn storage_a_torn_or_corrupt_log_tail_is_cut_at_start_up() {
    let mut s = TestServer::spawn();
    let run = s.create_run("p", "torn");
    assert_eq!(s.log(&run, points("a", 0..100, |i| i as f64)).0, 200);
    assert_eq!(s.log(&run, points("a", 100..200, |i| i as f64)).0, 200);
    s.kill9();
    let segment = wal_segments(&s.data).into_iter().last().expect("a log segment");
    let len = std::fs::metadata(&segment).unwrap().len();
    assert!(len > 0);
    // A torn write: the second record loses its last bytes.
    std::fs::OpenOptions::new().write(true).open(&segment).unwrap().set_len(len - 7).unwrap();
    s.restart();
    assert!(stats(&s)["wal_cut_bytes"].as_u64().unwrap() > 0);
    assert_eq!(s.series(&run, "a").len(), 100, "the whole first record survives, the torn one is cut");

    // Garbage after valid records: the valid ones survive.
    assert_eq!(s.log(&run, points("b", 0..50, |i| i as f64)).0, 200);
    s.kill9();
    let segment = wal_segments(&s.data).into_iter().last().unwrap();
    use std::io::Write;
    std::fs::OpenOptions::new().append(true).open(&segment).unwrap().write_all(&[0xAB; 1000]).unwrap();
    s.restart();
    assert_eq!(stats(&s)["wal_cut_bytes"], 1000);
    assert_eq!(s.series(&run, "b").len(), 50);
    assert_eq!(s.series(&run, "a").len(), 100);
    // And the server keeps working on top.
    assert_eq!(s.log(&run, points("b", 50..60, |i| i as f64)).0, 200);
    s.restart();
    assert_eq!(s.series(&run, "b").len(), 60);
}

#[test]
fn storage_finished_runs_are_compacted_into_one_file() {
    let s = TestServer::spawn();
    let run = s.create_run("p", "compact");
    for chunk in 0..5 {
        let first = chunk * 1000;
        s.log(&run, points("loss", first..first + 1000, |i| 1.0 / (i as f64 + 1.0)));
        s.log(&run, points("acc", first..first + 1000, |i| i as f64 / 5000.0));
        s.flush();
    }
    assert_eq!(stats(&s)["files"], 5);
    s.post(&format!("/runs/{run}/finish"), &json!({"status": "finished"}));
    s.flush();
    let st = stats(&s);
    assert_eq!((st["files"].clone(), st["file_rows"].clone()), (json!(1), json!(10_000)));
    let local_files =
        walk(&s.data.join("store")).into_iter().filter(|p| p.to_string_lossy().contains("/metrics/")).count();
    let expected_local = if trainlog_tests::test_store_url("x").is_some() { 0 } else { 1 };
    assert_eq!(local_files, expected_local, "metric files live in the configured object store");
    assert_eq!(s.series(&run, "loss").len(), 5000);
    assert_eq!(values(&s.series(&run, "acc"))[4999], 4999.0 / 5000.0);
}

#[test]
fn storage_downsampling_keeps_spikes_first_and_last() {
    let s = TestServer::spawn();
    let run = s.create_run("p", "spiky");
    let n = 100_000i64;
    for chunk in 0..10 {
        let first = chunk * n / 10;
        let batch =
            points("loss", first..first + n / 10, |i| if i == 77_777 { 1e6 } else { 1.0 + (i % 10) as f64 * 0.01 });
        assert_eq!(s.log(&run, batch).0, 200);
        if chunk == 4 {
            s.flush();
        }
    }
    let (status, body) = s.get(&format!("/runs/{run}/metrics?key=loss&buckets=1000"));
    assert_eq!(status, 200);
    let buckets = body["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 1000);
    assert_eq!(buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum::<u64>(), n as u64);
    let spike: Vec<&Value> = buckets.iter().filter(|b| b["max"] == json!(1e6)).collect();
    assert_eq!(spike.len(), 1);
    assert!(spike[0]["step_min"].as_i64().unwrap() <= 77_777 && spike[0]["step_max"].as_i64().unwrap() >= 77_777);
    assert_eq!(buckets[0]["step_min"], 0);
    assert_eq!(buckets[999]["step_max"], n - 1);
    // Each bucket carries the timestamps of its first and last points, for wall-time charts.
    assert_eq!(
        (&buckets[0]["time_first"], &buckets[999]["time_last"]),
        (&json!(1_700_000_000_000i64), &json!(1_700_000_000_000i64 + n - 1))
    );
    assert_eq!(buckets[1]["time_first"], json!(1_700_000_000_000i64 + buckets[1]["step_min"].as_i64().unwrap()));
    assert_eq!(buckets[999]["last"], json!(1.0 + ((n - 1) % 10) as f64 * 0.01));
    // Zooming into the spike's neighbourhood gives finer buckets that still hold it.
    let (_, zoom) = s.get(&format!("/runs/{run}/metrics?key=loss&buckets=10&step_min=77000&step_max=78000"));
    let zb = zoom["buckets"].as_array().unwrap();
    assert_eq!(zb.len(), 10);
    assert_eq!(zb.iter().filter(|b| b["max"] == json!(1e6)).count(), 1);
}

#[test]
fn storage_sigterm_persists_buffered_points_and_empties_the_log() {
    let mut s = TestServer::spawn();
    let run = s.create_run("p", "term");
    assert_eq!(s.log(&run, points("loss", 0..1000, |i| i as f64)).0, 200);
    assert!(s.terminate(), "the server exits cleanly on SIGTERM");
    s.restart();
    let st = stats(&s);
    assert_eq!((st["wal_replayed_records"].clone(), st["file_rows"].clone()), (json!(0), json!(1000)));
    assert_eq!(s.series(&run, "loss").len(), 1000);
}

#[test]
fn storage_a_running_run_with_many_files_is_compacted_without_losing_points() {
    let s = TestServer::spawn();
    let run = s.create_run("p", "long");
    for chunk in 0..20i64 {
        let first = chunk * 100;
        assert_eq!(s.log(&run, points("loss", first..first + 100, |i| i as f64)).0, 200);
        if chunk == 10 {
            // A rewrite of earlier steps lands in a newer file and must keep winning after merges.
            assert_eq!(s.log(&run, points("loss", 0..10, |i| -(i as f64))).0, 200);
        }
        s.flush();
    }
    s.flush();
    let files = stats(&s)["files"].as_u64().unwrap();
    assert!(files <= 16, "the run was compacted while running: {files} files");
    let series = s.series(&run, "loss");
    assert_eq!(series.len(), 2000);
    assert_eq!(values(&series)[..3], [0.0, -1.0, -2.0]);
    assert_eq!(values(&series)[1999], 1999.0);
}

#[test]
fn storage_concurrent_batches_share_fsyncs() {
    let s = TestServer::spawn();
    let runs: Vec<String> = (0..16).map(|i| s.create_run("p", &format!("g{i}"))).collect();
    let before = stats(&s);
    let url = s.url.clone();
    let writers: Vec<_> = runs
        .iter()
        .cloned()
        .map(|run| {
            let url = url.clone();
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                for b in 0..40i64 {
                    let body = json!({"points": points("x", b * 10..b * 10 + 10, |i| i as f64)});
                    let r = client.post(format!("{url}/api/v1/runs/{run}/metrics")).json(&body).send().unwrap();
                    assert!(r.status().is_success());
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let after = stats(&s);
    let records = after["wal_records"].as_u64().unwrap() - before["wal_records"].as_u64().unwrap();
    let syncs = after["wal_syncs"].as_u64().unwrap() - before["wal_syncs"].as_u64().unwrap();
    assert_eq!(records, 16 * 40);
    assert!(syncs < records, "group commit: {records} batches took {syncs} fsyncs");
    for run in &runs {
        assert_eq!(s.series(run, "x").len(), 400);
    }
}

#[test]
fn storage_files_left_unrecorded_by_a_crash_are_swept_at_start_up() {
    let mut s = TestServer::spawn_local();
    let run = s.create_run("p", "orphans");
    assert_eq!(s.log(&run, points("loss", 0..100, |i| i as f64)).0, 200);
    s.flush();
    s.kill9();
    let run_dir = s.data.join(format!("store/projects/1/metrics/{run}"));
    let recorded: Vec<_> = std::fs::read_dir(&run_dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(recorded.len(), 1);
    // As if a crash hit between uploading a file and recording it in the catalog, two hours ago.
    let orphan = run_dir.join("00000000000000099999.parquet");
    std::fs::copy(&recorded[0], &orphan).unwrap();
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 3600);
    std::fs::File::options().write(true).open(&orphan).unwrap().set_modified(two_hours_ago).unwrap();
    // A file uploaded a moment ago may be another server's, not recorded yet: it stays.
    let young = run_dir.join("00000000000000099998.parquet");
    std::fs::copy(&recorded[0], &young).unwrap();
    s.restart();
    wait_until("the start-up sweep removes the unrecorded file", || !orphan.exists());
    assert_eq!(stats(&s)["orphan_sweep_failures"], 0);
    assert!(recorded[0].exists(), "the recorded file stays");
    assert!(young.exists(), "an unrecorded file younger than an hour stays");
    assert_eq!(s.series(&run, "loss").len(), 100);
}

/// `--persist-interval` bounds how long acknowledged points live only in the data folder: once
/// it has passed, losing the folder's write-ahead log (a server that never comes back) loses
/// none of them.
#[test]
fn points_older_than_the_persist_interval_outlive_the_loss_of_the_servers_log() {
    let mut s = TestServer::spawn_with(&["--persist-interval", "1"]);
    let run = s.create_run("durable", "interval");
    assert_eq!(s.log(&run, points("loss", 0..100, |x| x as f64)).0, 200);
    wait_until("the points are in the object store without a flush", || {
        let (_, stats) = s.get("/admin/stats");
        stats["buffered_points"] == 0 && stats["files"].as_u64().unwrap_or(0) >= 1
    });
    s.kill9();
    std::fs::remove_dir_all(s.data.join("wal")).expect("the log folder is removed");
    s.restart();
    assert_eq!(s.series(&run, "loss").len(), 100);
}
