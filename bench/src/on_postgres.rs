//! Figures of servers on PostgreSQL (`trainlog-bench --postgres URL`): run search over a
//! million runs, and (in `replicas.rs`) ingest through several servers. The runs are written
//! with SQL straight into a fresh database (creating a million runs over HTTP would take the
//! better part of an hour), shaped like the runs the HTTP benchmark makes: two params and a
//! `val_loss` summary each.

use crate::client;
use std::time::Instant;
use trainlog_tests::{binary, urlencode, TestServer};

/// Runs in the searched project.
const RUNS: i64 = 1_000_000;

pub(crate) fn sql(url: &str, statement: &str) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("a connection to PostgreSQL");
    client.batch_execute(statement).unwrap_or_else(|e| {
        panic!("{statement}: {}", e.as_db_error().map_or(e.to_string(), |d| d.message().to_owned()))
    });
}

fn count(url: &str, statement: &str) -> i64 {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("a connection to PostgreSQL");
    client.query_one(statement, &[]).and_then(|r| r.try_get(0)).unwrap_or_else(|e| panic!("{statement}: {e}"))
}

/// Fills `url` (migrated) with one project of `RUNS` runs. `lr` cycles through 4 values and
/// `val_loss` spreads over [0.1, 0.6), so one run in 4 × 2.5 matches the benchmark's filter.
fn populate(url: &str) {
    sql(
        url,
        &format!(
            "ALTER TABLE params DISABLE TRIGGER USER;
             INSERT INTO projects (name, created_ms) VALUES ('bench-million', 0);
             INSERT INTO runs (id, project_id, name, status, start_ms, end_ms, updated_ms)
               SELECT md5(i::text), p.id, 'sweep-' || i, 'finished', 1700000000000 + i * 1000, 1700000000000 + i * 1000 + 500, 0
               FROM generate_series(1::bigint, {RUNS}) i, projects p WHERE p.name = 'bench-million';
             INSERT INTO params (run_id, key, type, value, num)
               SELECT md5(i::text), 'lr', 'float', (ARRAY['0.1', '0.01', '0.001', '0.0001'])[1 + i % 4],
                      (ARRAY[0.1, 0.01, 0.001, 0.0001])[1 + i % 4]
               FROM generate_series(1::bigint, {RUNS}) i;
             INSERT INTO params (run_id, key, type, value, num)
               SELECT md5(i::text), 'batch_size', 'int', (32 << (i % 3)::int)::text, 32 << (i % 3)::int
               FROM generate_series(1::bigint, {RUNS}) i;
             INSERT INTO metric_summaries (run_id, key, last, last_step, last_ms, min, max, count, sum, sum_count)
               SELECT md5(i::text), 'val_loss', v, 2000, 0, v, v + 0.3, 3, 3 * v + 0.45, 3
               FROM (SELECT i, 0.1 + 0.5 * ((i * 7919) % 10007) / 10007.0 AS v FROM generate_series(1::bigint, {RUNS}) i) s;
             ALTER TABLE params ENABLE TRIGGER USER;
             ANALYZE;"
        ),
    );
}

/// A fresh, migrated database `name` on the PostgreSQL server `admin`; answers its URL.
pub(crate) fn fresh_database(admin: &str, name: &str) -> String {
    sql(admin, &format!("DROP DATABASE IF EXISTS {name}"));
    sql(admin, &format!("CREATE DATABASE {name}"));
    let mut url = url::Url::parse(admin).expect("a PostgreSQL URL");
    url.set_path(name);
    let url = url.to_string();
    let migrated =
        std::process::Command::new(binary()).args(["migrate", "--meta", &url]).output().expect("trainlog runs");
    assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));
    url
}

/// Measures search over a million runs, then ingest through one and two servers, each on a
/// fresh database of the PostgreSQL server `admin`. Reports (id, name, value, unit, at most).
pub fn run(admin: &str, reps: usize, report: &mut dyn FnMut(&'static str, String, f64, &'static str, f64)) {
    let name = format!("bench_replicas_{}", std::process::id());
    let url = fresh_database(admin, &name);
    crate::replicas::run(&url, &mut |id, text, value, unit| report(id, text, value, unit, f64::NAN));
    sql(admin, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));

    println!("\n== Run search over {} runs on PostgreSQL ==", RUNS);
    let name = format!("bench_{}", std::process::id());
    let url = fresh_database(admin, &name);
    let started = Instant::now();
    populate(&url);
    println!("  wrote {RUNS} runs, 2 params and a summary each, with SQL in {:.1} s", started.elapsed().as_secs_f64());
    let matching = count(
        &url,
        "SELECT count(*) FROM metric_summaries s JOIN params p ON p.run_id = s.run_id
         WHERE s.key = 'val_loss' AND s.last < 0.3 AND p.key = 'lr' AND p.num = 0.001",
    );

    let server = TestServer::spawn_local_with(&["--meta", &url]);
    report(
        "14f",
        format!("Start-up of a server on a database of {RUNS} runs, to its ready line"),
        server.startup_ms as f64,
        "ms",
        f64::NAN,
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let http = client::client();
    let filter = "metrics.val_loss < 0.3 and params.lr = 0.001";
    let search = server.api(&format!("/projects/bench-million/runs?filter={}&limit=100", urlencode(filter)));
    let (first, body) = rt.block_on(client::timed_get(&http, &search));
    let parsed: serde_json::Value = serde_json::from_slice(&body).expect("the search answers JSON");
    let found = parsed["runs"].as_array().map_or(0, Vec::len);
    assert_eq!(found as i64, matching.min(100), "the search answers the matching runs, up to the limit");
    println!("  {matching} runs match; first search {first:.1} ms, {found} runs returned");
    let samples = rt.block_on(client::sample(&http, &search, reps));
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    let p50 = sorted[sorted.len() / 2];
    let p90 = sorted[sorted.len() * 9 / 10];
    report(
        "14a",
        format!("Search {RUNS} runs with a metric filter on PostgreSQL, p50 (p90 {p90:.1} ms)"),
        p50,
        "ms",
        100.0,
    );

    let ordered = server.api(&format!(
        "/projects/bench-million/runs?filter={}&order_by={}&limit=100",
        urlencode(filter),
        urlencode("metrics.val_loss asc")
    ));
    let samples = rt.block_on(client::sample(&http, &ordered, reps));
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    report(
        "14b",
        format!(
            "The same search ordered by metrics.val_loss on PostgreSQL, p50 (p90 {:.1} ms)",
            sorted[sorted.len() * 9 / 10]
        ),
        sorted[sorted.len() / 2],
        "ms",
        f64::NAN,
    );
    drop(server);
    sql(admin, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
}
