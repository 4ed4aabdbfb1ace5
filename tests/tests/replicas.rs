//! Several servers on one PostgreSQL database and one object store: a run's batches spread over
//! two of them, one killed with -9 mid-run; agents of one sweep asking different servers. Needs
//! the PostgreSQL server `TRAINLOG_TEST_PG` names (scripts/test.sh starts a throwaway one).

use std::time::Duration;
use trainlog_tests::{fresh_postgres_database, json, test_store_url, TestServer, Value};

/// Servers sharing a fresh database and object store, each on a data folder of its own.
struct Installation {
    dir: tempfile::TempDir,
    meta: String,
    store: String,
}

impl Installation {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let unique = dir.path().file_name().and_then(|n| n.to_str()).unwrap_or("replicas").to_owned();
        let store =
            test_store_url(&unique).unwrap_or_else(|| format!("file://{}", dir.path().join("objects").display()));
        std::fs::create_dir_all(dir.path().join("objects")).expect("the shared object folder");
        Self { meta: fresh_postgres_database(), store, dir }
    }

    fn replica(&self, name: &str, flags: &[&str]) -> TestServer {
        let mut all = vec!["--meta", &self.meta, "--store", &self.store];
        all.extend_from_slice(flags);
        TestServer::spawn_on_folder(self.dir.path().join(name), &all)
    }
}

fn batch(first: i64, count: i64) -> Value {
    Value::Array(
        (first..first + count)
            .flat_map(|step| {
                let timestamp = 1_700_000_000_000i64 + step;
                [
                    json!({"key": "loss", "step": step, "value": step as f64, "timestamp": timestamp}),
                    json!({"key": "acc", "step": step, "value": -(step as f64), "timestamp": timestamp}),
                ]
            })
            .collect(),
    )
}

fn stats(s: &TestServer) -> Value {
    s.get("/admin/stats").1
}

/// A client alternates the batches of one run between two servers; one is killed with -9 in
/// the middle and comes back. Every acknowledged point reads back from both, once, and the
/// run's summaries count each point once.
#[test]
fn a_run_whose_batches_alternate_between_two_servers_reads_back_whole_from_both_after_a_crash() {
    const BATCHES: i64 = 40;
    const STEPS: i64 = 50;
    let installation = Installation::new();
    // Nothing is persisted before the crash but by the flushes below: the log holds the rest.
    let quiet = ["--persist-interval", "3600"];
    let mut a = installation.replica("a", &quiet);
    let b = installation.replica("b", &quiet);
    let run = a.create_run("p", "spread");
    for n in 0..BATCHES {
        if n == BATCHES / 2 {
            assert!(stats(&a)["buffered_points"].as_u64().unwrap_or(0) > 0, "a holds unpersisted points");
            a.kill9();
            a.restart();
            assert!(stats(&a)["wal_replayed_records"].as_u64().unwrap_or(0) > 0, "a replays its log");
        }
        let to = if n % 2 == 0 { &a } else { &b };
        let (status, body) = to.log(&run, batch(n * STEPS, STEPS));
        assert_eq!(status, 200, "batch {n}: {body}");
        if n == 10 {
            // Some of each server's points are in files before the crash, some only in its log.
            a.flush();
            b.flush();
        }
    }
    // Before anything more is persisted, each server reads its own buffer and every file.
    let steps = |s: &TestServer, key: &str| s.series(&run, key).into_iter().map(|(step, _)| step).collect::<Vec<_>>();
    let everything: Vec<i64> = (0..BATCHES * STEPS).collect();
    for s in [&a, &b] {
        let seen = steps(s, "loss");
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "each step once, in order");
        assert!(seen.len() < everything.len(), "the other server's buffer is not read");
    }
    b.flush();
    a.flush();
    for (name, s) in [("a", &a), ("b", &b)] {
        for key in ["loss", "acc"] {
            let points = s.series(&run, key);
            let sign = if key == "loss" { 1.0 } else { -1.0 };
            assert_eq!(
                points.iter().map(|p| p.0).collect::<Vec<_>>(),
                everything,
                "{name} reads every {key} step once"
            );
            assert!(points.iter().all(|(step, v)| v.as_f64() == Some(sign * *step as f64)), "{name}: {key} values");
        }
        let (status, body) = s.get(&format!("/runs/{run}"));
        assert_eq!(status, 200, "{body}");
        let loss = &body["summary"]["loss"];
        let last = (BATCHES * STEPS - 1) as f64;
        assert_eq!(loss["count"], json!(BATCHES * STEPS), "{name} counts each point once: {loss}");
        assert_eq!(
            (loss["last"].as_f64(), loss["max"].as_f64(), loss["min"].as_f64()),
            (Some(last), Some(last), Some(0.0))
        );
    }
}

/// Two agents of one sweep, each asking a different server, as fast as they can: no trial is
/// handed out twice and the sweep stops at its `run_cap`.
#[test]
fn agents_of_one_sweep_asking_two_servers_never_share_a_trial_and_stop_at_the_run_cap() {
    const RUN_CAP: u64 = 24;
    let installation = Installation::new();
    let servers = [installation.replica("a", &[]), installation.replica("b", &[])];
    let config = format!(
        "command: [\"python\", \"train.py\"]\nmethod: random\nmetric: {{name: loss, goal: minimize}}\n\
         run_cap: {RUN_CAP}\nparameters:\n  lr: {{min: 0.0001, max: 0.1}}\n"
    );
    let (status, sweep) = servers[0].post("/sweeps", &json!({"config": config, "project": "p", "name": "race"}));
    assert_eq!(status, 201, "{sweep}");
    let id = sweep["id"].as_str().expect("a sweep id").to_owned();
    let handed: Vec<Vec<(i64, String)>> = std::thread::scope(|scope| {
        let agents: Vec<_> = servers
            .iter()
            .enumerate()
            .map(|(n, server)| {
                let id = id.clone();
                scope.spawn(move || {
                    let mut got = Vec::new();
                    for _ in 0..1000 {
                        let (status, answer) = server.post(
                            &format!("/sweeps/{id}/next"),
                            &json!({"agent": format!("agent-{n}"), "slot": "cpu:0"}),
                        );
                        assert_eq!(status, 200, "{answer}");
                        match answer["status"].as_str() {
                            Some("trial") => {
                                let index = answer["index"].as_i64().expect("a trial index");
                                got.push((index, answer["run_id"].as_str().expect("a run").to_owned()));
                                let end = json!({"outcome": "finished", "attempt": answer["attempt"]});
                                let (status, body) = server.post(&format!("/sweeps/{id}/trials/{index}/end"), &end);
                                assert_eq!(status, 200, "{body}");
                            }
                            Some("done") => return got,
                            _ => std::thread::sleep(Duration::from_millis(20)),
                        }
                    }
                    panic!("agent-{n}: the sweep never said done");
                })
            })
            .collect();
        agents.into_iter().map(|a| a.join().expect("the agent")).collect()
    });
    let mut indexes: Vec<i64> = handed.iter().flatten().map(|(index, _)| *index).collect();
    indexes.sort();
    assert_eq!(indexes, (0..RUN_CAP as i64).collect::<Vec<_>>(), "each trial handed out once, up to run_cap");
    let mut runs: Vec<&String> = handed.iter().flatten().map(|(_, run)| run).collect();
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len() as u64, RUN_CAP, "each trial has a run of its own");
    for server in &servers {
        let (status, trials) = server.get(&format!("/sweeps/{id}/trials"));
        assert_eq!(status, 200, "{trials}");
        assert_eq!(trials["trials"].as_array().map(Vec::len), Some(RUN_CAP as usize));
        let (_, sweep) = server.get(&format!("/sweeps/{id}"));
        assert_eq!(
            (sweep["state"].as_str(), sweep["ended_reason"].as_str()),
            (Some("finished"), Some("run_cap")),
            "{sweep}"
        );
    }
}

/// A step logged through two servers keeps the write with the latest timestamp, whichever
/// server persists last; the run's summary follows it once both have persisted.
#[test]
fn a_step_logged_through_two_servers_keeps_the_write_with_the_latest_timestamp() {
    let installation = Installation::new();
    let quiet = ["--persist-interval", "3600"];
    let (a, b) = (installation.replica("a", &quiet), installation.replica("b", &quiet));
    let run = a.create_run("p", "rewritten");
    let point =
        |value: f64, timestamp: i64| json!([{"key": "loss", "step": 5, "value": value, "timestamp": timestamp}]);
    assert_eq!(a.log(&run, point(1.0, 1_700_000_000_100)).0, 200);
    assert_eq!(b.log(&run, point(2.0, 1_700_000_000_200)).0, 200);
    // The newer write is persisted first, the older one last.
    b.flush();
    a.flush();
    b.flush();
    for (name, s) in [("a", &a), ("b", &b)] {
        assert_eq!(s.series(&run, "loss"), vec![(5, json!(2.0))], "{name}");
        let (_, body) = s.get(&format!("/runs/{run}"));
        let loss = &body["summary"]["loss"];
        assert_eq!((loss["last"].as_f64(), loss["count"].as_u64()), (Some(2.0), Some(1)), "{name}: {loss}");
    }
}
