//! Figures of several servers sharing one PostgreSQL database and one object store
//! (`trainlog-bench --postgres URL`): ingest through two servers against one, each run's
//! batches going to one server as a load balancer hashing the run id sends them, and the
//! start-up of a server joining the installation.

use crate::client::{self, ClientWork, ARROW};
use crate::data::{self, Precision, KEYS};
use crate::measure;
use std::time::Instant;
use trainlog_tests::TestServer;

/// Concurrent clients, each logging its own run.
const CLIENTS: usize = 8;
const BATCHES_PER_CLIENT: usize = 80;
const STEPS_PER_BATCH: usize = 1_000;
/// Measurements of each setup, alternated so drift of the machine falls on both.
const ROUNDS: usize = 5;

/// One ingest through `servers`, client `c` sending to server `c % servers.len()`: points per
/// second, the CPU seconds each server used, and those the clients used.
fn ingest(rt: &tokio::runtime::Runtime, servers: &[&TestServer], round: usize) -> (f64, Vec<f64>, f64) {
    let work: Vec<ClientWork> = (0..CLIENTS)
        .map(|c| {
            let server = servers[c % servers.len()];
            let run = server.create_run("bench-replicas", &format!("r{round}-{}-c{c}", servers.len()));
            let bodies = data::client_batches(c as u64, Precision::Tensor32, BATCHES_PER_CLIENT, STEPS_PER_BATCH)
                .into_iter()
                .map(|rows| (rows.arrow(), rows.len()))
                .collect();
            ClientWork { url: server.api(&format!("/runs/{run}/metrics")), bodies }
        })
        .collect();
    let pids: Vec<String> = servers.iter().map(|s| s.pid().expect("a running server").to_string()).collect();
    let cpu_before: Vec<f64> = pids.iter().map(|p| measure::cpu_seconds(p)).collect();
    let client_before = measure::cpu_seconds("self");
    let outcome = rt.block_on(client::ingest(work, ARROW));
    let cpu: Vec<f64> = pids.iter().zip(cpu_before).map(|(p, before)| measure::cpu_seconds(p) - before).collect();
    let client_cpu = measure::cpu_seconds("self") - client_before;
    let elapsed = outcome.elapsed.as_secs_f64();
    println!(
        "  {} server(s): {:.2} M points/s over {elapsed:.2} s; CPU seconds: server(s) {}, clients {client_cpu:.2}, of {:.2} the 2 cores had",
        servers.len(),
        outcome.points as f64 / elapsed / 1e6,
        cpu.iter().map(|c| format!("{c:.2}")).collect::<Vec<_>>().join(" + "),
        2.0 * elapsed
    );
    (outcome.points as f64 / elapsed, cpu, client_cpu)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measures ingest through one and two servers on the fresh database `url`, with a shared
/// object store in a temporary folder. Reports (id, name, value, unit).
pub fn run(url: &str, report: &mut dyn FnMut(&'static str, String, f64, &'static str)) {
    let points = CLIENTS * BATCHES_PER_CLIENT * STEPS_PER_BATCH * KEYS.len();
    println!("\n== Ingest through one and two servers on one database and object store ({points} points a round) ==");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let store = format!("file://{}", dir.path().join("objects").display());
    std::fs::create_dir_all(dir.path().join("objects")).expect("the shared object folder");
    let flags = ["--meta", url, "--store", &store];
    let first = TestServer::spawn_on_folder(dir.path().join("a"), &flags);
    first.create_run("bench-replicas", "warm-up");
    let joined = Instant::now();
    let second = TestServer::spawn_on_folder(dir.path().join("b"), &flags);
    let join_ms = joined.elapsed().as_secs_f64() * 1e3;
    println!("  a second server joined in {join_ms:.0} ms (its process printed ready after {} ms)", second.startup_ms);

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        one.push(ingest(&rt, &[&first], round).0);
        two.push(ingest(&rt, &[&first, &second], round).0);
    }
    let (one, two) = (median(one), median(two));
    report("14c", format!("Ingest through one server on PostgreSQL, median of {ROUNDS}"), one, "points/s");
    report(
        "14d",
        format!(
            "Ingest through two servers on one database and object store, median of {ROUNDS} ({:.2}× one)",
            two / one
        ),
        two,
        "points/s",
    );
    report(
        "14e",
        "Start-up of a server joining an installation, to its ready line".into(),
        second.startup_ms as f64,
        "ms",
    );
}
