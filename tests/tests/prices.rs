//! The installation's prices against the real binary: `trainlog prices import` of a catalog in
//! SkyPilot's layout, nodes priced by it when they join (zone, region, spot), a price change that
//! leaves the runs costed before it alone, the installation's own rates, and the report's cost.

use std::process::Command;
use trainlog_tests::{binary, json, TestServer, Value};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

fn cli(s: &TestServer, args: &[&str]) -> String {
    let out = Command::new(binary()).args(args).args(["--server", &s.url]).output().expect("trainlog runs");
    assert!(out.status.success(), "trainlog {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn date(ms: i64) -> String {
    trainlog_meta::report::day_text(ms.div_euclid(DAY))
}

/// A one-node run of `gpus` A100s that joins with this placement, started at `start` and
/// finished an hour later; answers its node as the server priced it.
fn run_on(s: &TestServer, id: &str, placement: Value, gpus: i64, start: i64) -> Value {
    let mut process = json!({"rank": 0, "world_size": 1, "host": id, "started_ms": start,
        "node": {"gpus": gpus, "gpu_names": vec!["NVIDIA A100-SXM4-40GB"; gpus as usize]}});
    for (k, v) in placement.as_object().expect("a placement") {
        process[k] = v.clone();
    }
    let (status, body) =
        s.post("/runs", &json!({"id": id, "project": "priced", "start_time": start, "process": process}));
    assert_eq!(status, 201, "{body}");
    let end = json!({"status": "finished", "end_time": start + HOUR, "process": {"attempt": 1, "rank": 0}});
    assert_eq!(s.post(&format!("/runs/{id}/finish"), &end).0, 200);
    let (status, run) = s.get(&format!("/runs/{id}"));
    assert_eq!(status, 200, "{run}");
    run["attempts"][0]["nodes"][0].clone()
}

#[test]
fn a_catalog_prices_nodes_by_the_date_their_attempt_started() {
    let s = TestServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("vms.csv");
    std::fs::write(
        &catalog,
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch\n\
         p4d.24xlarge,A100,8.0,96.0,1152.0,\"{'Gpus': [{'Name': 'A100'}]}\",21.957642,9.1,us-east-1,us-east-1a,x86_64\n\
         p4d.24xlarge,A100,8.0,96.0,1152.0,,21.957642,8.7,us-east-1,us-east-1b,x86_64\n\
         g5.xlarge,A10G,1.0,4.0,16.0,,1.006,0.438,us-east-1,us-east-1a,x86_64\n\
         ,A100,1.0,,,,2.93,1.1,us-central1,us-central1-a,\n",
    )
    .unwrap();
    let now = trainlog_meta::now_ms();
    let long_ago = date(now - 30 * DAY);
    let out = cli(&s, &["prices", "import", catalog.to_str().unwrap(), "--cloud", "aws", "--valid-from", &long_ago]);
    assert!(out.contains("imported 3 price(s) of aws") && out.contains("skipped 1 line"), "{out}");

    let p4d = |zone: &str, spot: bool| json!({"cloud": "aws", "instance_type": "p4d.24xlarge", "region": "us-east-1", "zone": zone, "spot": spot});
    let before = run_on(&s, "before", p4d("us-east-1a", false), 8, now - 3 * HOUR);
    assert_eq!(before["usd_per_hour"].as_f64(), Some(21.957642), "{before}");
    let source = before["price_source"].as_str().unwrap_or_default();
    assert!(
        source.starts_with("catalog: aws p4d.24xlarge on-demand in us-east-1 us-east-1a (vms.csv, from"),
        "{source}"
    );
    let spot = run_on(&s, "spot", p4d("us-east-1b", true), 8, now - 3 * HOUR);
    assert_eq!(spot["usd_per_hour"].as_f64(), Some(8.7), "the zone's spot price: {spot}");
    let unknown = run_on(&s, "unknown", json!({"cloud": "aws", "instance_type": "p9.huge"}), 8, now - 3 * HOUR);
    assert_eq!(unknown["usd_per_hour"], Value::Null, "an instance the catalog lacks is not priced: {unknown}");

    // A new price from today: runs that started before it keep the old one, even one that joins now.
    std::fs::write(
        &catalog,
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
         p4d.24xlarge,A100,8.0,96.0,1152.0,30.0,12.0,us-east-1,us-east-1a\n\
         p4d.24xlarge,A100,8.0,96.0,1152.0,30.0,11.0,us-east-1,us-east-1b\n",
    )
    .unwrap();
    let today = date(now);
    cli(&s, &["prices", "import", catalog.to_str().unwrap(), "--cloud", "aws", "--valid-from", &today]);
    let after = run_on(&s, "after", p4d("us-east-1a", false), 8, now);
    assert_eq!(after["usd_per_hour"].as_f64(), Some(30.0), "{after}");
    let late = run_on(&s, "late", p4d("us-east-1a", false), 8, now - 2 * DAY);
    assert_eq!(late["usd_per_hour"].as_f64(), Some(21.957642), "it started before the change: {late}");
    let (_, again) = s.get("/runs/before");
    assert_eq!(
        again["attempts"][0]["nodes"][0]["usd_per_hour"].as_f64(),
        Some(21.957642),
        "a costed run keeps its price"
    );
    assert!((again["job"]["cost_usd"].as_f64().unwrap() - 21.957642).abs() < 1e-9, "{}", again["job"]);

    // The installation's own rate wins over the catalog; a price the job reports wins over neither.
    cli(&s, &["prices", "set", "--usd-per-gpu-hour", "1.25", "--cluster", "lab", "--valid-from", &long_ago]);
    let lab = run_on(
        &s,
        "lab",
        json!({"cluster": "lab", "cloud": "aws", "instance_type": "p4d.24xlarge", "region": "us-east-1", "zone": "us-east-1a"}),
        4,
        now - HOUR,
    );
    assert_eq!(lab["usd_per_hour"].as_f64(), Some(5.0), "4 GPUs at $1.25: {lab}");
    assert!(
        lab["price_source"].as_str().unwrap_or_default().starts_with("installation rate: 4 x lab at $1.25/GPU-hour"),
        "{lab}"
    );
    let reported = |id: &str, instance: &str, gpus: i64, usd: f64| {
        let process = json!({"rank": 0, "world_size": 1, "host": id, "started_ms": now, "cloud": "aws",
            "instance_type": instance, "region": "us-east-1", "zone": "us-east-1a",
            "node": {"gpus": gpus, "gpu_names": ["NVIDIA A100-SXM4-40GB"], "usd_per_hour": usd,
                     "price_source": "cost per hour given to the SDK"}});
        s.post("/runs", &json!({"id": id, "project": "priced", "process": process}))
    };
    assert_eq!(reported("given", "p4d.24xlarge", 8, 0.0).0, 201);
    let (_, run) = s.get("/runs/given");
    let node = &run["attempts"][0]["nodes"][0];
    assert_eq!(node["usd_per_hour"].as_f64(), Some(30.0), "the catalog's price, not the job's $0: {node}");
    assert!(node["price_source"].as_str().unwrap_or_default().ends_with("; the job reported $0/h, not used"), "{node}");
    assert_eq!(reported("own", "p9.huge", 8, 3.0).0, 201);
    let (_, run) = s.get("/runs/own");
    let node = &run["attempts"][0]["nodes"][0];
    assert_eq!(node["usd_per_hour"].as_f64(), Some(3.0), "no catalog price: the job's own is used: {node}");
    assert_eq!(node["price_source"], "reported by the job: $3/h (cost per hour given to the SDK)");
    // Within bounds: no node of 2^62 GPUs, no price of 1e300 dollars an hour.
    let (status, body) = reported("huge", "p9.huge", 1 << 62, 1.0);
    assert_eq!((status, &body["error"]["field"]), (400, &json!("process.node.gpus")), "{body}");
    let (status, body) = reported("dear", "p9.huge", 8, 1e300);
    assert_eq!((status, &body["error"]["field"]), (400, &json!("process.node.usd_per_hour")), "{body}");
    assert_eq!(s.get("/runs/huge").0, 404, "a refused run is not half-written");

    let listed = cli(&s, &["prices", "list"]);
    assert!(listed.contains("p4d.24xlarge") && listed.contains("30") && listed.contains("lab"), "{listed}");
    assert!(!listed.contains("21.957642"), "the list at today shows today's price: {listed}");
    assert!(cli(&s, &["prices", "list", "--all"]).contains("21.957642"));

    // The report's cost is what the nodes were priced at.
    let (status, report) = s.get("/report?projects=priced&filter=status%20%3D%20%27finished%27");
    assert_eq!(status, 200, "{report}");
    let expected = 21.957642 + 8.7 + 30.0 + 21.957642 + 5.0;
    assert!((report["total"]["cost_usd"].as_f64().unwrap() - expected).abs() < 1e-9, "{}", report["total"]);
    assert_eq!(report["total"]["inputs"]["unpriced_runs"], 1, "the unknown instance");

    // Refusals name their field.
    let (status, body) =
        s.post("/prices", &json!({"rows": [{"kind": "rate", "usd_per_hour": 1.0, "valid_from": 0, "source": "x"}]}));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("rows[0].accelerator")), "{body}");
    let (status, body) = s.post("/prices", &json!({"rows": [{"kind": "instance", "cloud": "aws", "instance_type": "x", "usd_per_hour": -2.0, "valid_from": 0, "source": "x"}]}));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("rows[0].usd_per_hour")), "{body}");
}
