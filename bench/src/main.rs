//! trainlog benchmark: starts the real server binary on loopback and measures ingest rate
//! (Arrow and JSON), memory, bytes on disk per point, series reads, run search and start-up
//! time; prints each figure beside its target and an MLflow anchor, then a markdown table.
//! Usage: `cargo run --release -p trainlog-bench [-- --quick]`.

use std::time::{Duration, Instant};
use trainlog_bench::client::{self, ClientWork, ARROW, JSON};
use trainlog_bench::data::{self, Precision, KEYS};
use trainlog_bench::measure::{self, median, percentile};
use trainlog_tests::{json, urlencode, TestServer};

/// Sizes of one benchmark run.
struct Scale {
    clients: usize,
    batches_per_client: usize,
    steps_per_batch: usize,
    long_series: usize,
    search_runs: usize,
    reps: usize,
    restarts: usize,
}

impl Scale {
    fn new(quick: bool) -> Self {
        Self {
            clients: 10,
            batches_per_client: if quick { 10 } else { 100 },
            steps_per_batch: 1_000,
            long_series: if quick { 100_000 } else { 1_000_000 },
            search_runs: if quick { 1_000 } else { 10_000 },
            // TRAINLOG_BENCH_REPS raises the repetitions, e.g. to profile a read under load.
            reps: std::env::var("TRAINLOG_BENCH_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(30).max(30),
            restarts: 5,
        }
    }

    fn points_per_batch(&self) -> usize {
        self.steps_per_batch * KEYS.len()
    }

    fn total_points(&self) -> usize {
        self.clients * self.batches_per_client * self.points_per_batch()
    }

    /// Points of one key in one ingest run.
    fn per_key_points(&self) -> usize {
        self.batches_per_client * self.steps_per_batch
    }
}

/// Whether a figure should be at most or at least its target.
#[derive(Clone, Copy)]
enum Goal {
    AtMost(f64),
    AtLeast(f64),
    None,
}

struct Figure {
    id: &'static str,
    name: String,
    value: f64,
    decimals: usize,
    unit: &'static str,
    goal: Goal,
    anchor: &'static str,
}

impl Figure {
    fn value_text(&self) -> String {
        format!("{} {}", thousands(self.value, self.decimals), self.unit)
    }

    fn target_text(&self) -> String {
        match self.goal {
            Goal::AtMost(t) => format!("≤ {} {}", thousands(t, if t.fract() == 0.0 { 0 } else { 1 }), self.unit),
            Goal::AtLeast(t) => format!("≥ {} {}", thousands(t, if t.fract() == 0.0 { 0 } else { 2 }), self.unit),
            Goal::None => "—".into(),
        }
    }

    fn met(&self) -> &'static str {
        match self.goal {
            Goal::AtMost(t) if self.value <= t => "yes",
            Goal::AtLeast(t) if self.value >= t => "yes",
            Goal::None => "—",
            _ => "**no**",
        }
    }
}

/// Figures in the order measured; printed as they come and in a table at the end.
#[derive(Default)]
struct Report {
    figures: Vec<Figure>,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        id: &'static str,
        name: impl Into<String>,
        value: f64,
        decimals: usize,
        unit: &'static str,
        goal: Goal,
        anchor: &'static str,
    ) {
        let f = Figure { id, name: name.into(), value, decimals, unit, goal, anchor };
        let mut line = format!("{}: {}", f.name, f.value_text());
        if !matches!(f.goal, Goal::None) {
            line.push_str(&format!(" (target {})", f.target_text()));
        }
        if !f.anchor.is_empty() {
            line.push_str(&format!(" [MLflow: {}]", f.anchor));
        }
        println!("{line}");
        self.figures.push(f);
    }

    fn table(&self) -> String {
        let mut rows: Vec<&Figure> = self.figures.iter().collect();
        rows.sort_by_key(|f| f.id);
        let mut out =
            String::from("| # | Figure | Value | Target | Met | MLflow anchor |\n|---|---|---:|---|---|---|\n");
        for f in rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                f.id,
                f.name,
                f.value_text(),
                f.target_text(),
                f.met(),
                if f.anchor.is_empty() { "—" } else { f.anchor }
            ));
        }
        out
    }
}

/// `1234567.891` with `decimals` → `1,234,567.89`.
fn thousands(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = s.split_once('.').map_or((s.as_str(), ""), |(a, b)| (a, b));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if v < 0.0 { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

fn info(s: impl AsRef<str>) {
    println!("    {}", s.as_ref());
}

fn stats(server: &TestServer) -> serde_json::Value {
    let (status, body) = server.get("/admin/stats");
    assert_eq!(status, 200, "GET /admin/stats: {body}");
    body
}

/// Warns when the metric files hold more rows than points were logged (files left behind or
/// written twice); answers bytes per stored row (file_bytes / file_rows).
fn check_rows(server: &TestServer, points: u64) -> f64 {
    let s = stats(server);
    let rows = s["file_rows"].as_u64().unwrap_or(0);
    let bytes = s["file_bytes"].as_u64().unwrap_or(0);
    if rows != points {
        info(format!(
            "NOTE: /admin/stats file_rows {rows} for {points} points logged ({:.2}x): the Parquet files hold duplicate or missing rows, and bytes/point counts them",
            rows as f64 / points as f64
        ));
    }
    bytes as f64 / rows.max(1) as f64
}

fn timed_flush(server: &TestServer) -> Duration {
    let t = Instant::now();
    server.flush();
    t.elapsed()
}

fn finish_all(server: &TestServer, runs: &[String]) {
    for id in runs {
        let (status, body) = server.post(&format!("/runs/{id}/finish"), &json!({"status": "finished"}));
        assert_eq!(status, 200, "finishing run {id}: {body}");
    }
}

/// Outcome of a concurrent ingest benchmark.
struct IngestOutcome {
    runs: Vec<String>,
    points: u64,
    rate: f64,
    /// The server's CPU seconds over the timed window.
    server_cpu: f64,
}

/// Creates one run per client, pre-encodes every body, then sends them all concurrently.
fn ingest_bench(
    rt: &tokio::runtime::Runtime,
    server: &TestServer,
    scale: &Scale,
    project: &str,
    content_type: &'static str,
    precision: Precision,
) -> IngestOutcome {
    let runs: Vec<String> = (0..scale.clients).map(|c| server.create_run(project, &format!("client-{c:02}"))).collect();

    let encode_started = Instant::now();
    let work: Vec<ClientWork> = std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .enumerate()
            .map(|(c, id)| {
                let url = server.api(&format!("/runs/{id}/metrics"));
                s.spawn(move || {
                    let batches =
                        data::client_batches(c as u64, precision, scale.batches_per_client, scale.steps_per_batch);
                    let bodies = batches
                        .into_iter()
                        .map(|rows| {
                            let body = if content_type == ARROW { rows.arrow() } else { rows.json() };
                            (body, rows.len())
                        })
                        .collect();
                    ClientWork { url, bodies }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("an encoding thread finishes")).collect()
    });
    let encode = encode_started.elapsed();

    let pid = server.pid().expect("the server is running");
    let (server_cpu0, client_cpu0) = (measure::cpu_seconds(&pid.to_string()), measure::cpu_seconds("self"));
    let r = rt.block_on(client::ingest(work, content_type));
    let (server_cpu, client_cpu) =
        (measure::cpu_seconds(&pid.to_string()) - server_cpu0, measure::cpu_seconds("self") - client_cpu0);

    let secs = r.elapsed.as_secs_f64();
    let rate = r.points as f64 / secs;
    info(format!(
        "{} clients × {} batches × {} points = {} points in {:.2} s; {} requests, {:.1} MB of bodies ({:.1} bytes/point), pre-encoded in {:.1} s",
        scale.clients,
        scale.batches_per_client,
        thousands(scale.points_per_batch() as f64, 0),
        thousands(r.points as f64, 0),
        secs,
        r.requests,
        r.body_bytes as f64 / 1e6,
        r.body_bytes as f64 / r.points as f64,
        encode.as_secs_f64()
    ));
    info(format!(
        "{} sends answered 503 at the buffer bound and sent again; request latency p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms; CPU over the timed window: server {:.1} s ({:.0}% of one core), client {:.1} s ({:.0}%), of {:.1} core-seconds available",
        r.refused,
        percentile(&r.latencies_ms, 50.0),
        percentile(&r.latencies_ms, 90.0),
        percentile(&r.latencies_ms, 100.0),
        server_cpu,
        100.0 * server_cpu / secs,
        client_cpu,
        100.0 * client_cpu / secs,
        2.0 * secs
    ));
    IngestOutcome { runs, points: r.points, rate, server_cpu }
}

/// J1-J4: 64 ranks of one job joining its run at once, and rank 0's ingest alone and beside 63
/// other ranks sending heartbeats (at the SDK's rate, one per 30 s, and at 300 times it).
fn job_bench(rt: &tokio::runtime::Runtime, scale: &Scale, report: &mut Report) {
    const WORLD: usize = 64;
    let reps = scale.restarts;
    println!("\n== One job of {WORLD} ranks on {} nodes ==", WORLD / 8);
    let server = bench_server();
    let api = server.api("");
    let mut joins = Vec::new();
    for rep in 0..reps {
        let run = format!("bench-job-{rep}");
        joins.push(rt.block_on(trainlog_bench::jobs::join_all(&api, "bench-jobs", &run, WORLD)));
        rt.block_on(trainlog_bench::jobs::check_joined(&api, &run, WORLD));
    }
    info(format!("{WORLD} ranks joining at once, ms: {joins:.1?}"));
    report.add(
        "J1",
        format!("{WORLD} ranks of one job joining its run at once (median of {reps})"),
        median(&joins),
        1,
        "ms",
        Goal::None,
        "",
    );
    let batches = scale.batches_per_client * 10;
    let points = (batches * scale.points_per_batch()) as f64;
    // The SDK's rate (one heartbeat per rank per 30 s), then 300 times it.
    let rates = [
        (Duration::from_secs(30), "J3", "every 30 s, the SDK's rate"),
        (Duration::from_millis(100), "J4", "every 100 ms"),
    ];
    let mut alone = Vec::new();
    let mut beside: Vec<Vec<f64>> = vec![Vec::new(); rates.len()];
    let mut beats = vec![(0u64, 0.0f64); rates.len()];
    for rep in 0..reps {
        // Interleaved, so every variant sees the same server state as it grows.
        let solo = format!("bench-solo-{rep}");
        rt.block_on(trainlog_bench::jobs::join_all(&api, "bench-jobs", &solo, 1));
        let (rate, _) = rt.block_on(trainlog_bench::jobs::rank0_ingest(
            &api,
            &solo,
            1,
            false,
            rates[0].0,
            batches,
            scale.steps_per_batch,
        ));
        alone.push(rate);
        let run = format!("bench-job-{rep}");
        for (i, (every, _, _)) in rates.iter().enumerate() {
            let (rate, sent) = rt.block_on(trainlog_bench::jobs::rank0_ingest(
                &api,
                &run,
                WORLD,
                true,
                *every,
                batches,
                scale.steps_per_batch,
            ));
            beside[i].push(rate);
            beats[i].0 += sent;
            beats[i].1 += points / rate;
        }
    }
    info(format!("rank 0 alone, points/s: {alone:.0?}"));
    report.add(
        "J2",
        format!("Rank 0's Arrow ingest, alone in its job (median of {reps})"),
        median(&alone),
        0,
        "points/s",
        Goal::None,
        "",
    );
    for (i, (_, id, label)) in rates.iter().enumerate() {
        info(format!(
            "beside {} ranks heartbeating {label}: {:.0?} points/s; {} heartbeats answered, {:.0} per second",
            WORLD - 1,
            beside[i],
            beats[i].0,
            beats[i].0 as f64 / beats[i].1
        ));
        report.add(
            id,
            format!("Rank 0's Arrow ingest, {} other ranks heartbeating {label} (median of {reps})", WORLD - 1),
            median(&beside[i]),
            0,
            "points/s",
            Goal::None,
            "",
        );
    }
    liveness_bench(report);
}

/// R1: Arrow ingest on servers with no rules and with 1,000 rules in other projects and 20 on
/// the logging project, alternating fresh servers (each kind first in every other pair);
/// medians of the rates and of the server's CPU per point.
fn rules_bench(rt: &tokio::runtime::Runtime, scale: &Scale, report: &mut Report) {
    let reps = if scale.batches_per_client < 100 { 3 } else { 15 };
    println!("\n== Ingest with and without alert rules ({reps} servers each, alternating) ==");
    let [without, with, cpu_without, cpu_with] = trainlog_bench::rules::alternate(reps, |rep, ruled| {
        let server = bench_server();
        if ruled {
            let added = trainlog_bench::rules::install(&server, "bench-rules");
            info(format!("{added} rules installed"));
        }
        let out = ingest_bench(rt, &server, scale, "bench-rules", ARROW, Precision::Tensor32);
        info(format!("rep {rep}, {}: {} points/s", if ruled { "rules" } else { "none" }, thousands(out.rate, 0)));
        if ruled {
            let (_, alerts) = server.get("/projects/bench-rules/alerts");
            info(format!("alerts the rules raised: {}", alerts["alerts"].as_array().map_or(0, Vec::len)));
        }
        (out.rate, out.server_cpu / out.points as f64 * 1e6)
    });
    let (none, ruled) = (median(&without), median(&with));
    report.add("R1a", "Ingest, Arrow IPC, no rules (median)", none, 0, "points/s", Goal::None, "");
    report.add(
        "R1b",
        "Ingest, Arrow IPC, 1,000 rules elsewhere + 20 metric rules on the project (median)",
        ruled,
        0,
        "points/s",
        Goal::None,
        "",
    );
    report.add("R1", "R1b / R1a", ruled / none, 3, "×", Goal::AtLeast(0.95), "");
    let (cpu_none, cpu_ruled) = (median(&cpu_without), median(&cpu_with));
    report.add("R1c", "Server CPU per million points, no rules (median)", cpu_none * 1e3, 1, "ms", Goal::None, "");
    report.add(
        "R1d",
        "Server CPU per million points, with the rules (median)",
        cpu_ruled * 1e3,
        1,
        "ms",
        Goal::None,
        "",
    );
}

/// J5: one round of the server's liveness check over 10,000 running jobs, none silent (SQLite);
/// its share of a core at the default bound's pace (a round every 30 s).
fn liveness_bench(report: &mut Report) {
    const JOBS: usize = 10_000;
    const ROUNDS: usize = 21;
    let cost = trainlog_bench::liveness::measure(JOBS, ROUNDS);
    let per_round = median(&cost.rounds_ms);
    info(format!(
        "liveness check over {JOBS} running jobs (recorded in {:.1} s): {ROUNDS} rounds, median {per_round:.2} ms, max {:.2} ms",
        cost.setup_s,
        percentile(&cost.rounds_ms, 100.0)
    ));
    let pace_ms = trainlog_meta::jobs::liveness::check_every().as_secs_f64() * 1e3;
    report.add(
        "J5",
        format!(
            "Liveness check, {} running jobs: share of one core at a round every {:.0} s",
            thousands(JOBS as f64, 0),
            pace_ms / 1e3
        ),
        100.0 * per_round / pace_ms,
        3,
        "%",
        Goal::AtMost(1.0),
        "",
    );
}

/// Latency summary line and (p50, p90).
fn summarize(label: &str, samples: &[f64]) -> (f64, f64) {
    let (p50, p90) = (percentile(samples, 50.0), percentile(samples, 90.0));
    info(format!(
        "{label}: {} reps, p50 {:.2} ms, p90 {:.2} ms, min {:.2} ms, max {:.2} ms",
        samples.len(),
        p50,
        p90,
        percentile(samples, 0.0),
        percentile(samples, 100.0)
    ));
    (p50, p90)
}

/// A server for a benchmark: with `--auth` when `TRAINLOG_BENCH_AUTH=1`, its clients then
/// sending the key of an ordinary user (not an admin), so ingest is measured with a key and the
/// caller's role on the project checked on every request. The harness makes the projects with
/// the admin's key; `--default-permission write` lets the user log to them.
fn bench_server() -> TestServer {
    let auth = std::env::var("TRAINLOG_BENCH_AUTH").is_ok_and(|v| v == "1");
    if !auth {
        client::use_api_key(None);
        return TestServer::spawn_local();
    }
    let server = TestServer::spawn_local_with(&["--auth", "--default-permission", "write"]);
    let added = std::process::Command::new(trainlog_tests::binary())
        .args(["users", "add", "bench", "--data"])
        .arg(&server.data)
        .output()
        .expect("trainlog users add runs");
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let key = String::from_utf8_lossy(&added.stdout).lines().last().unwrap_or_default().trim().to_owned();
    client::use_api_key(Some(key));
    server
}

fn main() {
    let mut quick = false;
    let mut jobs_only = false;
    let mut postgres: Option<String> = None;
    let mut report_on: Option<String> = None;
    let mut bounds = false;
    let mut rules_only = false;
    let usage =
        "usage: trainlog-bench [--quick] [--jobs] [--rules] [--bounds] [--postgres URL] [--report URL]   (--quick scales sizes down ~10x for a smoke run; \
                 --jobs measures only the job figures (J1-J4); \
                 --rules measures ingest with and without alert rules (R1); \
                 --bounds measures the worst read each budget allows, with the server's peak memory and the health check's latency; \
                 --postgres measures a server on PostgreSQL instead, making databases on the server URL names; \
                 --report measures the training report over 100,000 to 1,000,000 runs there)";
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--jobs" => jobs_only = true,
            "--rules" => rules_only = true,
            "--bounds" => bounds = true,
            "--postgres" => postgres = args.next(),
            "--report" => report_on = args.next(),
            "-h" | "--help" => {
                println!("{usage}");
                return;
            }
            other => {
                eprintln!("unknown argument {other:?}; {usage}");
                std::process::exit(2);
            }
        }
    }
    trainlog_bench::use_the_server_beside_this_binary();
    let scale = Scale::new(quick);
    let started = Instant::now();
    if bounds {
        let worst = trainlog_bench::bounds::run(quick);
        println!("\n## The worst reads the budgets allow ({} mode)\n", if quick { "quick" } else { "full" });
        print!("{}", trainlog_bench::bounds::table(&worst));
        println!("\ntotal benchmark time {:.1} s", started.elapsed().as_secs_f64());
        return;
    }
    if let Some(admin) = report_on {
        let mut report = Report::default();
        trainlog_bench::report::run(&admin, scale.reps, &mut |id, name, value, unit, target| {
            let goal = if target.is_nan() { Goal::None } else { Goal::AtMost(target) };
            report.add(id, name, value, 1, unit, goal, "");
        });
        println!("\n## The training report on PostgreSQL\n");
        print!("{}", report.table());
        println!("\ntotal benchmark time {:.1} s", started.elapsed().as_secs_f64());
        return;
    }
    if let Some(admin) = postgres {
        let mut report = Report::default();
        trainlog_bench::on_postgres::run(&admin, scale.reps, &mut |id, name, value, unit, target| {
            let goal = if target.is_nan() { Goal::None } else { Goal::AtMost(target) };
            let decimals = if unit == "ms" { 1 } else { 0 };
            report.add(id, name, value, decimals, unit, goal, "");
        });
        println!("\n## trainlog benchmark on PostgreSQL\n");
        print!("{}", report.table());
        println!("\ntotal benchmark time {:.1} s", started.elapsed().as_secs_f64());
        return;
    }
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime");
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    println!(
        "trainlog benchmark ({} mode): server {}, {} cores shared by server and client, everything on 127.0.0.1",
        if quick { "quick" } else { "full" },
        trainlog_tests::binary().display(),
        cores
    );
    if let Ok(age) = std::fs::metadata(trainlog_tests::binary()).and_then(|m| m.modified()).map(|t| t.elapsed()) {
        println!("server binary last built {} s ago", age.map_or(0, |d| d.as_secs()));
    }
    if std::env::var("TRAINLOG_BENCH_AUTH").is_ok_and(|v| v == "1") {
        println!("servers run with --auth; every request carries the API key of a user who is not an admin (TRAINLOG_BENCH_AUTH=1)");
    }
    let mut report = Report::default();
    let n_points = scale.total_points();
    if rules_only {
        rules_bench(&rt, &scale, &mut report);
        println!("\n## trainlog benchmark, alert rules ({} cores shared by client and server)\n", cores);
        print!("{}", report.table());
        println!("\ntotal benchmark time {:.1} s", started.elapsed().as_secs_f64());
        return;
    }
    if jobs_only {
        job_bench(&rt, &scale, &mut report);
        println!("\n## trainlog benchmark, jobs ({} cores shared by client and server)\n", cores);
        print!("{}", report.table());
        println!("\ntotal benchmark time {:.1} s", started.elapsed().as_secs_f64());
        return;
    }

    // 2. JSON ingest, on its own server; then bytes per point with all values full-precision f64.
    println!("\n== JSON ingest ({} points, all values full-precision f64) ==", thousands(n_points as f64, 0));
    {
        let server = bench_server();
        let out = ingest_bench(&rt, &server, &scale, "bench-json", JSON, Precision::Full64);
        report.add("2", "Ingest, JSON", out.rate, 0, "points/s", Goal::AtLeast(400_000.0), "");
        finish_all(&server, &out.runs);
        let flush = timed_flush(&server);
        let (files, bytes) = measure::metric_parquet(&server.data);
        info(format!(
            "finish + flush {:.2} s; {files} metric Parquet files, {:.1} MB",
            flush.as_secs_f64(),
            bytes as f64 / 1e6
        ));
        let per_row = check_rows(&server, out.points);
        report.add(
            "4b",
            "Bytes on disk per point after compaction, all values full f64 (JSON-ingest data)",
            bytes as f64 / out.points as f64,
            2,
            "bytes",
            Goal::AtMost(8.0),
            "229 bytes of SQLite per point",
        );
        report.add(
            "4c",
            "Bytes per stored row, all values full f64 (file_bytes / file_rows)",
            per_row,
            2,
            "bytes",
            Goal::None,
            "",
        );
    }

    // 1. Arrow ingest on a fresh server, which then serves every later figure.
    println!(
        "\n== Arrow ingest ({} points; 6 of 10 keys float32-tensor values, lr/throughput/epoch full f64, memory in MiB) ==",
        thousands(n_points as f64, 0)
    );
    let mut server = bench_server();
    let out = ingest_bench(&rt, &server, &scale, "bench-arrow", ARROW, Precision::Tensor32);
    report.add(
        "1",
        "Ingest, Arrow IPC",
        out.rate,
        0,
        "points/s",
        Goal::AtLeast(1_000_000.0),
        "log_batch ≈ 3,900-6,000 points/s",
    );

    // 3. Memory after ingest, then 4. bytes on disk after finish + flush (compaction).
    let pid = server.pid().expect("the server is running");
    let s = stats(&server);
    let rss_ingest = measure::rss_mib(pid);
    info(format!(
        "after ingest: VmRSS {rss_ingest:.1} MiB, VmHWM (peak) {:.1} MiB; buffered_points {}, files {}",
        measure::hwm_mib(pid),
        s["buffered_points"],
        s["files"]
    ));
    let label = format!("Server RSS after ingesting {} points", thousands(out.points as f64, 0));
    report.add("3", label, rss_ingest, 1, "MiB", Goal::AtMost(300.0), "idle server 0.55-2 GB");

    finish_all(&server, &out.runs);
    let flush = timed_flush(&server);
    let rss_flush = measure::rss_mib(pid);
    let (files, bytes) = measure::metric_parquet(&server.data);
    let s = stats(&server);
    info(format!(
        "finish {} runs + flush {:.2} s; after flush: VmRSS {rss_flush:.1} MiB, VmHWM {:.1} MiB",
        out.runs.len(),
        flush.as_secs_f64(),
        measure::hwm_mib(pid)
    ));
    info(format!(
        "{files} metric Parquet files, {} bytes ({:.1} MB); /admin/stats: files {}, file_bytes {}, file_rows {}, buffered_points {}; wal folder {} bytes; whole data folder {:.1} MB",
        bytes,
        bytes as f64 / 1e6,
        s["files"],
        s["file_bytes"],
        s["file_rows"],
        s["buffered_points"],
        measure::dir_bytes(&server.data.join("wal")),
        measure::dir_bytes(&server.data) as f64 / 1e6
    ));
    let per_row = check_rows(&server, out.points);
    report.add(
        "3b",
        "Server RSS after finish + flush",
        rss_flush,
        1,
        "MiB",
        Goal::AtMost(300.0),
        "idle server 0.55-2 GB",
    );
    report.add(
        "4",
        "Bytes on disk per point after compaction (metric Parquet files)",
        bytes as f64 / out.points as f64,
        2,
        "bytes",
        Goal::AtMost(8.0),
        "229 bytes of SQLite per point",
    );
    if let Some(fb) = s["file_bytes"].as_f64() {
        report.add(
            "4a",
            "Bytes per point by /admin/stats file_bytes",
            fb / out.points as f64,
            2,
            "bytes",
            Goal::AtMost(8.0),
            "",
        );
    }
    report.add("4d", "Bytes per stored row (file_bytes / file_rows)", per_row, 2, "bytes", Goal::None, "");

    let http = client::client();

    // 6. Full read of one key of a compacted run (100,000 points in full mode).
    let per_key = scale.per_key_points();
    println!("\n== Full series read ({} points, JSON) ==", thousands(per_key as f64, 0));
    let url = server.api(&format!("/runs/{}/metrics?key={}", out.runs[0], urlencode("train/loss")));
    let (first, body) = rt.block_on(client::timed_get(&http, &url));
    let parsed: serde_json::Value = serde_json::from_slice(&body).expect("the series is JSON");
    let got = parsed["points"].as_array().map_or(0, Vec::len);
    assert_eq!(got, per_key, "the full read answers every point of the key");
    info(format!("first (warm-up) read {first:.2} ms, {} points, {:.1} MB of JSON", got, body.len() as f64 / 1e6));
    let samples = rt.block_on(client::sample(&http, &url, scale.reps));
    let (p50, _) = summarize("full read", &samples);
    report.add(
        "6",
        format!("Full read of a {}-point series, p50", thousands(per_key as f64, 0)),
        p50,
        2,
        "ms",
        Goal::AtMost(50.0),
        "5-10 s",
    );

    // 5. Downsampled read of a long single-key series, persisted to Parquet.
    println!(
        "\n== Downsampled read ({} points → 1,000 buckets, from Parquet) ==",
        thousands(scale.long_series as f64, 0)
    );
    let long_run = server.create_run("bench-arrow", "long-series");
    let bodies: Vec<(Vec<u8>, usize)> = data::single_key_batches(99, "train/loss", scale.long_series, 100_000)
        .into_iter()
        .map(|r| (r.arrow(), r.len()))
        .collect();
    let w = ClientWork { url: server.api(&format!("/runs/{long_run}/metrics")), bodies };
    let r = rt.block_on(client::ingest(vec![w], ARROW));
    let flush = timed_flush(&server);
    let (run_files, run_bytes) = measure::run_parquet(&server.data, &long_run);
    info(format!(
        "ingested {} points in {:.2} s, flush {:.2} s; this run has {run_files} Parquet file(s), {:.1} MB",
        thousands(r.points as f64, 0),
        r.elapsed.as_secs_f64(),
        flush.as_secs_f64(),
        run_bytes as f64 / 1e6
    ));
    let bucket_path = format!("/runs/{long_run}/metrics?key={}&buckets=1000", urlencode("train/loss"));
    let bucket_url = server.api(&bucket_path);
    let (cold, body) = rt.block_on(client::timed_get(&http, &bucket_url));
    let parsed: serde_json::Value = serde_json::from_slice(&body).expect("the buckets are JSON");
    let buckets = parsed["buckets"].as_array().map_or(0, Vec::len);
    assert!(buckets > 0 && buckets <= 1000, "expected up to 1000 buckets, got {buckets}");
    info(format!("first (cold) read {cold:.2} ms, {buckets} buckets; it is the warm-up"));
    let samples = rt.block_on(client::sample(&http, &bucket_url, scale.reps));
    let (p50, p90) = summarize("downsampled read", &samples);
    let n_label = thousands(scale.long_series as f64, 0);
    report.add("5", format!("Read {n_label} points → 1,000 buckets, p50"), p50, 2, "ms", Goal::AtMost(30.0), "");
    report.add("5a", format!("Read {n_label} points → 1,000 buckets, p90"), p90, 2, "ms", Goal::AtMost(30.0), "");
    report.add(
        "5b",
        format!("Read {n_label} points → 1,000 buckets, first (cold) read"),
        cold,
        2,
        "ms",
        Goal::None,
        "",
    );

    // 7. Run search with a metric filter over many runs.
    println!("\n== Run search ({} runs) ==", thousands(scale.search_runs as f64, 0));
    let (took, matching) =
        rt.block_on(client::create_search_runs(server.api(""), "bench-search", scale.search_runs, 8, 3));
    info(format!(
        "created {} runs with 3 val_loss points each over 8 tasks in {:.1} s ({:.0} runs/s); {matching} match the filter",
        scale.search_runs,
        took.as_secs_f64(),
        scale.search_runs as f64 / took.as_secs_f64()
    ));
    let filter = "metrics.val_loss < 0.3 and params.lr = 0.001";
    let search_url = server.api(&format!("/projects/bench-search/runs?filter={}&limit=100", urlencode(filter)));
    let (first, body) = rt.block_on(client::timed_get(&http, &search_url));
    let parsed: serde_json::Value = serde_json::from_slice(&body).expect("the search answers JSON");
    let found = parsed["runs"].as_array().map_or(0, Vec::len);
    assert_eq!(found, matching.min(100), "the search answers the matching runs, up to the limit");
    info(format!("first (warm-up) search {first:.2} ms, {found} runs returned, {:.1} KB", body.len() as f64 / 1e3));
    let samples = rt.block_on(client::sample(&http, &search_url, scale.reps));
    let (p50, _) = summarize("search", &samples);
    report.add(
        "7",
        format!("Search {} runs with a metric filter, p50", thousands(scale.search_runs as f64, 0)),
        p50,
        2,
        "ms",
        Goal::AtMost(50.0),
        "0.7 s over 1,000 runs",
    );

    // 7a-7c. A resumed run re-sends steps it had already logged (from its last checkpoint on):
    // search and run reads must stay as fast as while runs only append.
    println!("\n== Search and run reads while a run re-sends old steps ==");
    let project_search = server.api("/projects/bench-arrow/runs?limit=100");
    let run_url = server.api(&format!("/runs/{long_run}"));
    let metrics_url = server.api(&format!("/runs/{long_run}/metrics"));
    let mut appended = scale.long_series as i64;
    let mut resent = 0i64;
    let mut send_then_get = |url: &str, resend: bool| -> Vec<f64> {
        (0..scale.reps)
            .map(|_| {
                let step = if resend { &mut resent } else { &mut appended };
                let point = format!(r#"{{"points":[{{"key":"train/loss","step":{step},"value":0.5}}]}}"#);
                *step += 1;
                rt.block_on(client::post_json(&http, &metrics_url, point));
                rt.block_on(client::timed_get(&http, url)).0
            })
            .collect()
    };
    let (after_append, _) = summarize("search while appending", &send_then_get(&project_search, false));
    let (after_rewrite, _) = summarize("search while re-sending old steps", &send_then_get(&project_search, true));
    let (run_after_rewrite, _) = summarize("run read while re-sending old steps", &send_then_get(&run_url, true));
    let label = thousands(scale.long_series as f64, 0);
    report.add("7a", "Search a project while a run appends, p50", after_append, 2, "ms", Goal::None, "");
    report.add(
        "7b",
        format!("Search the same while its {label}-point run re-sends old steps, p50"),
        after_rewrite,
        2,
        "ms",
        Goal::AtMost(50.0),
        "",
    );
    report.add(
        "7c",
        "Read that run while it re-sends old steps, p50",
        run_after_rewrite,
        2,
        "ms",
        Goal::AtMost(50.0),
        "",
    );

    // 7d-7f. The answer a runs table or `Api().runs()` reads: 1,000 runs with 10 params and 5
    // metric summaries each, in one page: all columns as JSON, two named columns, and Arrow.
    println!("\n== Answer 1,000 runs with their params and summaries ==");
    let took = rt.block_on(client::create_wide_runs(server.api(""), "bench-wide", 1_000, 8));
    info(format!("created 1,000 runs with 10 params and 5 metrics each in {:.1} s", took.as_secs_f64()));
    let wide = |extra: &str| server.api(&format!("/projects/bench-wide/runs?limit=1000{extra}"));
    // Each answer is timed twice: at the client (network and reading included) and by the
    // server itself (its Server-Timing header: from the request's handler to the body, encoded).
    let answer = |label: &str, url: String, accept: &str| -> (f64, f64) {
        let (_, _, bytes) = rt.block_on(client::timed_get_server(&http, &url, accept));
        let samples: Vec<(f64, f64)> = (0..scale.reps.max(10))
            .map(|_| {
                let (client_ms, server_ms, _) = rt.block_on(client::timed_get_server(&http, &url, accept));
                (client_ms, server_ms)
            })
            .collect();
        let (client_p50, _) =
            summarize(&format!("{label}, at the client"), &samples.iter().map(|s| s.0).collect::<Vec<_>>());
        let (server_p50, _) =
            summarize(&format!("{label}, in the server"), &samples.iter().map(|s| s.1).collect::<Vec<_>>());
        info(format!("{label}: {:.0} KB", bytes as f64 / 1e3));
        (server_p50, client_p50)
    };
    let all_json = answer("1,000 runs, every column, JSON", wide(""), "application/json");
    let named_json = answer(
        "1,000 runs, columns params.p0 and metrics.m0, JSON",
        wide("&columns=params.p0,metrics.m0"),
        "application/json",
    );
    let all_arrow = answer("1,000 runs, every column, Arrow", wide(""), "application/vnd.apache.arrow.stream");
    for (id, client_id, label, (server_ms, client_ms)) in [
        ("7d", "7d'", "Answer 1,000 runs with 10 params and 5 summaries, JSON, server time p50", all_json),
        ("7e", "7e'", "The same with 2 named columns, JSON, server time p50", named_json),
        ("7f", "7f'", "The same, every column, Arrow IPC, server time p50", all_arrow),
    ] {
        report.add(id, label, server_ms, 2, "ms", Goal::AtMost(10.0), "");
        report.add(client_id, "The same at the client (loopback, body read), p50", client_ms, 2, "ms", Goal::None, "");
    }

    // 8. Start-up: kill -9 and restart with data present, graceful restart, empty folder.
    println!("\n== Start-up ==");
    drop(http);
    info(format!(
        "data folder {:.1} MB (metadata db {:.1} MB, wal {:.1} MB)",
        measure::dir_bytes(&server.data) as f64 / 1e6,
        std::fs::metadata(server.data.join("trainlog.db")).map_or(0, |m| m.len()) as f64 / 1e6,
        measure::dir_bytes(&server.data.join("wal")) as f64 / 1e6
    ));
    // Graceful restarts first: SIGTERM persists what is buffered, so each start finds Parquet
    // files and the metadata database, and little or nothing to replay.
    let mut after_term = Vec::new();
    for _ in 0..scale.restarts {
        let t = Instant::now();
        let clean = server.terminate();
        let stop = t.elapsed();
        server.restart();
        after_term.push(server.startup_ms as f64);
        let s = stats(&server);
        info(format!(
            "SIGTERM (stopped in {} ms, clean exit {clean}) + restart: ready in {} ms (wal_replayed_records {}, files {})",
            stop.as_millis(),
            server.startup_ms,
            s["wal_replayed_records"],
            s["files"]
        ));
    }
    // Then crashes with unflushed points: log a series without flushing, kill -9, and restart, so
    // each start replays the write-ahead log.
    let crash_run = server.create_run("bench-arrow", "crash-unflushed");
    let bodies: Vec<(Vec<u8>, usize)> = data::single_key_batches(7, "train/loss", scale.long_series, 100_000)
        .into_iter()
        .map(|r| (r.arrow(), r.len()))
        .collect();
    let w = ClientWork { url: server.api(&format!("/runs/{crash_run}/metrics")), bodies };
    let r = rt.block_on(client::ingest(vec![w], ARROW));
    let s = stats(&server);
    info(format!(
        "logged {} unflushed points to a new run; buffered_points {}, wal folder {:.1} MB",
        thousands(r.points as f64, 0),
        s["buffered_points"],
        measure::dir_bytes(&server.data.join("wal")) as f64 / 1e6
    ));
    let mut after_kill = Vec::new();
    for _ in 0..scale.restarts {
        server.restart(); // kill -9, then spawn on the same folder
        after_kill.push(server.startup_ms as f64);
        let s = stats(&server);
        info(format!(
            "kill -9 + restart: ready in {} ms (wal_replayed_records {}, buffered_points {})",
            server.startup_ms, s["wal_replayed_records"], s["buffered_points"]
        ));
    }
    {
        let http = client::client();
        let probe = Duration::from_secs(10);
        let search_path = format!("/projects/bench-search/runs?filter={}&limit=100", urlencode(filter));
        let probes = [
            ("downsampled read of the flushed series", server.api(&bucket_path)),
            (
                "downsampled read of the replayed series",
                server.api(&format!("/runs/{crash_run}/metrics?key={}&buckets=1000", urlencode("train/loss"))),
            ),
            ("search", server.api(&search_path)),
        ];
        for (label, url) in probes {
            match rt.block_on(client::try_timed_get(&http, &url, probe)) {
                Ok((ms, len)) => info(format!("first {label} after the crash restart: {ms:.2} ms ({len} bytes)")),
                Err(e) => info(format!("first {label} after the crash restart FAILED: {e}")),
            }
        }
    }
    drop(server);
    let mut empty = Vec::new();
    for _ in 0..scale.restarts {
        let s = bench_server();
        empty.push(s.startup_ms as f64);
    }
    info(format!("empty-folder starts: {:?} ms", empty));
    report.add(
        "8",
        "Start-up with data, after kill -9 with log replay (median of 5)",
        median(&after_kill),
        0,
        "ms",
        Goal::AtMost(1000.0),
        "",
    );
    report.add(
        "8a",
        "Start-up with data, after SIGTERM (median of 5)",
        median(&after_term),
        0,
        "ms",
        Goal::AtMost(1000.0),
        "",
    );
    report.add("8b", "Start-up on an empty folder (median of 5)", median(&empty), 0, "ms", Goal::AtMost(1000.0), "");
    job_bench(&rt, &scale, &mut report);

    println!(
        "\n## trainlog benchmark ({} mode, {} points per ingest, {} cores shared by client and server)\n",
        if quick { "quick" } else { "full" },
        thousands(n_points as f64, 0),
        cores
    );
    print!("{}", report.table());
    println!("\ntotal benchmark time {:.1} s", started.elapsed().as_secs_f64());
}
