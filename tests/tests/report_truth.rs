//! The report's money and time against a hand computation, for what a cloud bill is checked
//! against: an on-demand and a spot run of one instance (what spot saved, by the catalog's
//! on-demand price), a run recovered on demand after a spot preemption whose GPU samples run past
//! its first attempt (each sample counts for at most one interval, never where no GPU existed,
//! and idle dollars at each attempt's own price), a GPU whose utilization reads 100 % while its
//! SM-active series says it is idle, its energy, and time to result.

use std::process::Command;
use trainlog_tests::{binary, json, TestServer, Value};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

fn post_ok(s: &TestServer, path: &str, body: &Value) -> Value {
    let (status, answer) = s.post(path, body);
    assert!(status == 200 || status == 201, "{path}: {status} {answer}");
    answer
}

fn close(actual: &Value, expected: f64, what: &str) {
    let got = actual.as_f64().unwrap_or_else(|| panic!("{what}: not a number: {actual}"));
    assert!((got - expected).abs() < 1e-6 * expected.abs().max(1.0), "{what}: {got} != {expected}");
}

/// One attempt of a one-GPU g5.xlarge job: from and to (ms), spot or not, how it ended.
fn attempt(
    s: &TestServer,
    run: &str,
    number: usize,
    (from, to): (i64, i64),
    spot: bool,
    end: &str,
    submitted: Option<i64>,
) {
    let mut process = json!({"rank": 0, "world_size": 1, "host": format!("{run}-{number}"), "launcher": "skypilot",
        "job_id": run, "restart": number.to_string(), "cloud": "aws", "instance_type": "g5.xlarge",
        "region": "us-east-1", "zone": "us-east-1a", "spot": spot, "started_ms": from,
        "node": {"gpus": 1, "gpu_names": ["NVIDIA A10G"]}});
    if let Some(at) = submitted {
        process["submitted_ms"] = json!(at);
    }
    let body = if number == 0 {
        json!({"id": run, "project": "bill", "start_time": from, "process": process})
    } else {
        json!({"id": run, "resume": true, "process": process})
    };
    post_ok(s, "/runs", &body);
    let end = json!({"status": end, "end_time": to, "process": {"attempt": number + 1, "rank": 0}});
    post_ok(s, &format!("/runs/{run}/finish"), &end);
}

/// GPU utilization samples, one a minute at each of `minutes` after `start`.
fn samples(s: &TestServer, run: &str, start: i64, minutes: &[(i64, f64)]) {
    let points: Vec<Value> = minutes
        .iter()
        .map(|(m, value)| json!({"key": "sys/gpu.0.util", "step": m, "value": value, "timestamp": start + m * MINUTE}))
        .collect();
    let (status, answer) = s.log(run, Value::Array(points));
    assert_eq!(status, 200, "{answer}");
}

#[test]
fn spot_savings_idle_dollars_around_a_recovery_gap_and_time_to_result_match_a_hand_computation() {
    let s = TestServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("vms.csv");
    // $4 an hour on demand, $1.60 on spot.
    std::fs::write(
        &catalog,
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
         g5.xlarge,A10G,1.0,4.0,16.0,4.0,1.6,us-east-1,us-east-1a\n",
    )
    .unwrap();
    let start = trainlog_meta::now_ms() - DAY;
    let valid_from = trainlog_meta::report::day_text((start - 2 * DAY).div_euclid(DAY));
    let out = Command::new(binary())
        .args(["prices", "import", catalog.to_str().unwrap(), "--cloud", "aws", "--valid-from", &valid_from])
        .args(["--server", &s.url])
        .output()
        .expect("trainlog runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Two hours on demand, submitted 10 minutes before it started: $8, 130 minutes to its result.
    attempt(&s, "on-demand", 0, (start, start + 2 * HOUR), false, "finished", Some(start - 10 * MINUTE));
    // Two hours on spot: $3.20, saving $4.80; 120 minutes to its result.
    attempt(&s, "spot", 0, (start, start + 2 * HOUR), true, "finished", None);
    // An hour on spot ($1.60, saving $2.40), preempted; 30 minutes with no GPU; an hour on demand
    // ($4): $5.60 in all, 150 minutes to its result.
    attempt(&s, "recovered", 0, (start, start + HOUR), true, "preempted", None);
    attempt(&s, "recovered", 1, (start + 90 * MINUTE, start + 150 * MINUTE), false, "finished", None);
    // Busy on spot, idle on demand; a sample at minute 62, while no GPU existed, counts for nothing,
    // and the one at minute 59 only up to the attempt's end.
    let mut gpu: Vec<(i64, f64)> = (0..60).map(|m| (m, 85.0)).collect();
    gpu.push((62, 85.0));
    gpu.extend((90..150).map(|m| (m, 3.0)));
    samples(&s, "recovered", start, &gpu);
    // A GPU running one tiny kernel at a time for an hour on demand: NVML's utilization reads 100,
    // SM active 2 %: it is idle. Its GPU used 1 kWh.
    attempt(&s, "tiny-kernels", 0, (start, start + HOUR), false, "finished", None);
    let mut points: Vec<Value> = Vec::new();
    for m in 0..60 {
        let at = start + m * MINUTE;
        points.push(json!({"key": "sys/gpu.0.util", "step": m, "value": 100.0, "timestamp": at}));
        points.push(json!({"key": "sys/gpu.0.sm_active", "step": m, "value": 2.0, "timestamp": at}));
        points.push(
            json!({"key": "sys/gpu.0.energy_j", "step": m, "value": 3.6e6 * (m + 1) as f64 / 60.0, "timestamp": at}),
        );
    }
    let (status, answer) = s.log("tiny-kernels", Value::Array(points));
    assert_eq!(status, 200, "{answer}");
    // FLOPs logged on an A10G, which the peak-TFLOPS file does not hold: no MFU is guessed.
    let (status, answer) = s.log("on-demand", json!([{"key": "flops", "step": 1, "value": 1e18}]));
    assert_eq!(status, 200, "{answer}");
    // A failed run: no result.
    attempt(&s, "failed", 0, (start, start + 30 * MINUTE), false, "failed", None);

    let (status, report) = s.get("/report");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["pending_runs"], 0, "{report}");
    let total = &report["total"];
    close(&total["cost_usd"], 8.0 + 3.2 + 5.6 + 4.0 + 2.0, "cost");
    close(&total["spot_savings_usd"], (4.0 - 1.6) * 2.0 + (4.0 - 1.6), "spot savings: by hand");
    assert_eq!(total["covers"]["spot_savings_usd"], 2, "{total}");
    // The scorecard's share of GPU-hours on spot: 3 of 7.5.
    close(&total["spot_savings_rate"], 3.0 / 7.5, "the share of GPU-hours on spot");
    // Two sampled runs: 3 GPU-hours provisioned; the spot hour active, the tiny kernels' hour not.
    let inputs = &total["inputs"];
    close(&inputs["sampled_gpu_hours"], 3.0, "provisioned, sampled");
    close(&inputs["active_gpu_hours"], 1.0, "active: the spot hour");
    close(&inputs["unmeasured_gpu_hours"], 0.0, "every minute of every attempt measured");
    close(&total["gpu_utilization_rate"], 1.0 / 3.0, "utilization");
    assert_eq!(inputs["runs_measured_by_sm_active"], 1, "{inputs}");
    // The recovered run's idle hour was the on-demand one: $4, not half of $5.60; and the tiny
    // kernels' whole $4 hour.
    close(&inputs["idle_usd"], 4.0 + 4.0, "idle dollars at their own attempt's price");
    close(&total["energy_kwh"], 1.0, "the energy counter's last value, in kWh");
    assert_eq!(total["covers"]["energy_kwh"], 1, "{total}");
    // 60, 120, 130 and 150 minutes: the median 125, the 90th percentile (nearest rank 4 of 4) 150.
    close(&total["time_to_result_median_s"], 125.0 * 60.0, "time to result, median");
    close(&total["time_to_result_p90_s"], 150.0 * 60.0, "time to result, p90");
    assert_eq!(total["covers"]["time_to_result_median_s"], 4, "{total}");
    assert!(total["mfu"].is_null(), "{total}");
    assert!(total["reasons"]["mfu"].as_str().is_some_and(|r| r.contains("on a GPU of known peak")), "{total}");
    let idlest = report["runs"]["idlest"].as_array().cloned().unwrap_or_default();
    let source = |id: &str| idlest.iter().find(|r| r["id"] == id).map(|r| r["utilization_source"].clone());
    assert_eq!(source("tiny-kernels"), Some(json!("sm_active")), "{idlest:?}");
    assert_eq!(source("recovered"), Some(json!("util")), "{idlest:?}");

    // By pricing: the spot run alone, the mixed one alone.
    let (status, by) = s.get("/report?by=pricing");
    assert_eq!(status, 200, "{by}");
    let group = |name: &str| {
        by["groups"].as_array().and_then(|g| g.iter().find(|g| g["group"] == name)).cloned().unwrap_or(Value::Null)
    };
    close(&group("spot")["spot_savings_usd"], 4.8, "the spot run's saving");
    close(&group("mixed")["time_to_result_median_s"], 150.0 * 60.0, "the recovered run's time to result");
    assert!(group("on_demand")["spot_savings_usd"].is_null(), "{}", group("on_demand"));
    assert!(group("on_demand")["reasons"]["spot_savings_usd"].is_string(), "{}", group("on_demand"));
}
