//! The training report over many runs on PostgreSQL (`trainlog-bench --report URL`): the runs
//! and their rows of the report are written with SQL straight into a fresh database (as
//! `on_postgres.rs` does for search), then the report is asked for one project by week and for
//! every project, at several sizes to show how it scales. The first answer adds up every day
//! (the rows' triggers marked them), as after an upgrade; the medians read the days.

use crate::client;
use crate::on_postgres::{fresh_database, sql};
use trainlog_tests::TestServer;

/// Projects the runs are spread over.
const PROJECTS: i64 = 10;

/// Fills `url` (migrated) with `runs` runs over 8 weeks, 10 projects and 40 users, each with its
/// row of the report up to date: GPUs, cost, spot share, GPU utilization, outcome, queue wait.
fn populate(url: &str, runs: i64) {
    let active: Vec<String> = (0..100).step_by(5).map(|t| format!("active_s_{t}")).collect();
    // A run of g GPUs for h hours; its GPUs busy a share that falls with the threshold.
    let active_values: Vec<String> = (0..100)
        .step_by(5)
        .map(|t| format!("g * h * 3600 * GREATEST(0.0, 0.9 - {t} / 120.0) * (i % 7 + 3) / 9.0"))
        .collect();
    sql(
        url,
        &format!(
            "INSERT INTO projects (name, created_ms) SELECT 'team-' || n, 0 FROM generate_series(0, {last}) n;
             INSERT INTO runs (id, project_id, name, status, start_ms, end_ms, \"user\", updated_ms)
               SELECT md5(i::text), p.id, 'run-' || i,
                      (ARRAY['finished', 'finished', 'finished', 'failed', 'preempted', 'killed'])[1 + i % 6],
                      1790000000000 + (i * 4838400000 / {runs}), 1790000000000 + (i * 4838400000 / {runs}) + 3600000,
                      'user-' || (i % 40), 0
               FROM generate_series(1::bigint, {runs}) i JOIN projects p ON p.name = 'team-' || (i % {PROJECTS});
             INSERT INTO run_usage (run_id, revision, summaries_revision, computed_ms, outcome, failure, gpus,
                 gpu_model, provider, pricing, gpu_hours, spot_gpu_hours, priced, cost_usd, gpu_series,
                 queue_wait_ms, queue_source, project_id, start_ms, {active})
               SELECT md5(i::text), r.revision, r.summaries_revision, 0,
                      (ARRAY['finished', 'finished', 'finished', 'code', 'infra', 'killed'])[1 + i % 6], NULL, g,
                      'NVIDIA H100 80GB HBM3', 'aws', CASE WHEN i % 2 = 0 THEN 'spot' ELSE 'on_demand' END,
                      g * h, CASE WHEN i % 2 = 0 THEN g * h ELSE 0 END, CASE WHEN i % 13 = 0 THEN 0 ELSE 1 END,
                      g * h * 3.5, CASE WHEN i % 11 = 0 THEN 0 ELSE g END,
                      CASE WHEN i % 3 = 0 THEN (i % 1800) * 1000 END, CASE WHEN i % 3 = 0 THEN 'launcher' END,
                      r.project_id, r.start_ms, {values}
               FROM (SELECT i, (1 << (i % 4)::int)::double precision AS g, 1 + (i % 5)::double precision AS h
                     FROM generate_series(1::bigint, {runs}) i) s
               JOIN runs r ON r.id = md5(s.i::text);
             UPDATE runs SET usage_revision = revision, usage_summaries_revision = summaries_revision;",
            last = PROJECTS - 1,
            active = active.join(", "),
            values = active_values.join(", "),
        ),
    );
    // After the updates, as autovacuum would: the lists' index-only scans need the visibility map.
    sql(url, "VACUUM ANALYZE");
}

/// The median and the slowest of the samples.
fn p50(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (samples[samples.len() / 2], samples[samples.len() - 1])
}

/// Measures the report at each size. Reports (id, name, value, unit, at most).
pub fn run(admin: &str, reps: usize, report: &mut dyn FnMut(&'static str, String, f64, &'static str, f64)) {
    // A report over a million runs takes seconds: medians of 5.
    let reps = reps.min(5);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let http = client::client();
    for (size, ids) in [
        (100_000, ["R1a", "R2a", "R3a", "R4a"]),
        (300_000, ["R1b", "R2b", "R3b", "R4b"]),
        (1_000_000, ["R1c", "R2c", "R3c", "R4c"]),
    ] {
        let name = format!("bench_report_{}_{size}", std::process::id());
        let url = fresh_database(admin, &name);
        let started = std::time::Instant::now();
        populate(&url, size);
        println!("\n== The report over {size} runs on PostgreSQL ==");
        println!(
            "  wrote {size} runs and their rows of the report with SQL in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let server = TestServer::spawn_local_with(&["--meta", &url]);
        let one = server.api("/report?projects=team-3&by=week");
        let (first, body) = rt.block_on(client::timed_get(&http, &one));
        let parsed: serde_json::Value = serde_json::from_slice(&body).expect("the report answers JSON");
        assert_eq!(parsed["pending_runs"], 0, "every row is up to date");
        assert_eq!(parsed["total"]["runs"].as_i64(), Some(size / PROJECTS), "one project's runs");
        println!(
            "  first answer {first:.1} ms (it adds up the project's days), {} weeks",
            parsed["groups"].as_array().map_or(0, Vec::len)
        );
        let (median, slowest) = p50(rt.block_on(client::sample(&http, &one, reps)));
        report(
            ids[0],
            format!(
                "Report of one project ({} runs) by week, median of {reps} (slowest {slowest:.1} ms)",
                size / PROJECTS
            ),
            median,
            "ms",
            f64::NAN,
        );
        let all = server.api("/report?by=project,week");
        let (first, _) = rt.block_on(client::timed_get(&http, &all));
        println!("  first answer by project and week {first:.1} ms (it adds up the other projects' days)");
        let (median, slowest) = p50(rt.block_on(client::sample(&http, &all, reps)));
        report(
            ids[1],
            format!(
                "Report of every project ({size} runs) by project and week, median of {reps} (slowest {slowest:.1} ms)"
            ),
            median,
            "ms",
            1000.0,
        );
        // 10 days and 5 hours into the eight weeks: whole days and the runs of a partial one.
        let since = 1_790_000_000_000i64 + 10 * 86_400_000 + 5 * 3_600_000;
        let period = server.api(&format!("/report?by=project,week&since={since}"));
        let (median, slowest) = p50(rt.block_on(client::sample(&http, &period, reps)));
        report(
            ids[2],
            format!(
                "Report of every project by project and week from a time of day (10 days 5 hours in), median of {reps} (slowest {slowest:.1} ms)"
            ),
            median,
            "ms",
            1000.0,
        );
        let filtered = server.api("/report?by=project,week&filter=status%20%3D%20%27finished%27");
        let (median, slowest) = p50(rt.block_on(client::sample(&http, &filtered, reps)));
        report(
            ids[3],
            format!(
                "Report of every project by project and week with a filter (status = 'finished', so it adds up the runs), median of {reps} (slowest {slowest:.1} ms)"
            ),
            median,
            "ms",
            f64::NAN,
        );
        drop(server);
        sql(admin, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    }
}
