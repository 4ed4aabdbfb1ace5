//! The job benchmarks: 64 ranks of one job joining its run at once, and rank 0's ingest with 63
//! other ranks sending heartbeats beside it.

use crate::client::{self, ClientWork, ARROW};
use crate::data::{self, Precision};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ranks per node in the benchmark's job.
const PER_NODE: usize = 8;

/// The body a rank sends to join its job's run (what the SDK sends).
fn join_body(project: &str, run: &str, job: &str, rank: usize, world: usize) -> Value {
    let node = rank / PER_NODE;
    let mut process = json!({
        "rank": rank,
        "local_rank": rank % PER_NODE,
        "world_size": world,
        "node_rank": node,
        "node_count": world.div_ceil(PER_NODE),
        "host": format!("node-{node}"),
        "pid": 1000 + rank,
        "launcher": "torchrun",
        "job_id": job,
        "restart": "0",
        "context": {"launcher": "torchrun"},
    });
    if rank.is_multiple_of(PER_NODE) {
        process["node"] = json!({"gpus": PER_NODE, "usd_per_hour": 8.0 * PER_NODE as f64, "price_source": "bench"});
    }
    let params = if rank == 0 { json!({"lr": 0.001, "batch": 64}) } else { json!({}) };
    json!({"project": project, "id": run, "resume": true, "params": params, "process": process})
}

/// Every rank's join sent at once; answers the time until the last was answered, in ms.
pub async fn join_all(api: &str, project: &str, run: &str, world: usize) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..world)
        .map(|rank| {
            let http = client::client();
            let url = format!("{api}/runs");
            let body = join_body(project, run, run, rank, world);
            tokio::spawn(async move {
                let resp = http.post(&url).json(&body).send().await.expect("the join reaches the server");
                let status = resp.status();
                let answer: Value = resp.json().await.expect("the join answers JSON");
                assert!(status.is_success(), "rank {rank}: {status} {answer}");
                answer["joined"]["attempt"].as_i64().expect("the answer names the attempt")
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.expect("a join task finishes"), 1, "every rank joins the first attempt");
    }
    started.elapsed().as_secs_f64() * 1e3
}

/// Checks that the run has one attempt with every rank.
pub async fn check_joined(api: &str, run: &str, world: usize) {
    let detail: Value = client::client()
        .get(format!("{api}/runs/{run}"))
        .send()
        .await
        .expect("the run is read")
        .json()
        .await
        .expect("the run is JSON");
    let attempts = detail["attempts"].as_array().map_or(0, Vec::len);
    assert_eq!((attempts, detail["attempts"][0]["ranks"].as_u64()), (1, Some(world as u64)), "{}", detail["job"]);
}

/// Heartbeats of ranks 1..world every `every` (each rank at its own phase, as ranks that
/// started at different moments) until `stop`; answers how many were sent.
fn heartbeats(
    api: &str,
    run: &str,
    world: usize,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u64>> {
    (1..world)
        .map(|rank| {
            let http = client::client();
            let url = format!("{api}/runs/{run}/heartbeat");
            let stop = stop.clone();
            let phase = every.mul_f64(data::XorShift::new(rank as u64 + 1).unit());
            tokio::spawn(async move {
                let mut sent = 0;
                let mut step = 0;
                tokio::time::sleep(phase).await;
                while !stop.load(Ordering::Relaxed) {
                    let body = json!({"attempt": 1, "rank": rank, "first_step": 0, "last_step": step});
                    let resp = http.post(&url).json(&body).send().await.expect("a heartbeat reaches the server");
                    assert!(resp.status().is_success(), "heartbeat of rank {rank}: {}", resp.status());
                    sent += 1;
                    step += 1;
                    tokio::time::sleep(every).await;
                }
                sent
            })
        })
        .collect()
}

/// Rank 0's ingest rate (points/s) over its pre-encoded Arrow bodies; with `others`, ranks
/// 1..world send heartbeats every `every` meanwhile. Also answers the heartbeats sent.
pub async fn rank0_ingest(
    api: &str,
    run: &str,
    world: usize,
    others: bool,
    every: Duration,
    batches: usize,
    steps_per_batch: usize,
) -> (f64, u64) {
    let rows = data::client_batches(0, Precision::Tensor32, batches, steps_per_batch);
    let bodies = rows.into_iter().map(|r| (r.arrow(), r.len())).collect();
    let work = vec![ClientWork { url: format!("{api}/runs/{run}/metrics"), bodies }];
    let stop = Arc::new(AtomicBool::new(false));
    let beats = if others { heartbeats(api, run, world, every, stop.clone()) } else { Vec::new() };
    let ingest = client::ingest(work, ARROW).await;
    stop.store(true, Ordering::Relaxed);
    let sent = AtomicU64::new(0);
    for b in beats {
        sent.fetch_add(b.await.expect("a heartbeat task finishes"), Ordering::Relaxed);
    }
    (ingest.points as f64 / ingest.elapsed.as_secs_f64(), sent.into_inner())
}
