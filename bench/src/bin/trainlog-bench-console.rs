//! `cargo run --release -p trainlog-bench --bin trainlog-bench-console [-- --reps N]`: metric
//! ingest alone and while 64 ranks send console lines, on fresh servers, alternating which goes
//! first; prints each measurement and the medians. `--lines-only SECONDS` only measures the
//! server's CPU per console line, for that long (to profile the server meanwhile);
//! `--metrics-only` only ingests metrics, `--reps` times, with the server's CPU per point.

use trainlog_bench::console::{cpu_per_million_lines, measure, paced_latencies, LINES_PER_BATCH, RANKS};
use trainlog_bench::measure::median;
use trainlog_bench::measure::percentile;

fn main() {
    let mut reps = 5;
    let mut lines_only = None;
    let mut metrics_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--reps" => reps = args.next().and_then(|n| n.parse().ok()).unwrap_or(reps),
            "--lines-only" => lines_only = args.next().and_then(|n| n.parse().ok()),
            "--metrics-only" => metrics_only = true,
            other => {
                eprintln!(
                    "unknown argument {other:?}; usage: trainlog-bench-console [--reps N] [--lines-only SECONDS] [--metrics-only]"
                );
                std::process::exit(2);
            }
        }
    }
    trainlog_bench::use_the_server_beside_this_binary();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    if let Some(seconds) = lines_only {
        let server = trainlog_tests::TestServer::spawn_local();
        println!("server pid {}", server.pid().unwrap_or(0));
        let cpu = cpu_per_million_lines(&server, seconds);
        println!(
            "CPU per million console lines: server {:.2} s, sender {:.2} s ({:.0} lines/s for {seconds} s)",
            cpu.server, cpu.sender, cpu.lines_per_s
        );
        return;
    }
    let (clients, batches, steps) = (10, 300, 1_000);
    if metrics_only {
        for rep in 0..reps {
            let server = trainlog_tests::TestServer::spawn_local();
            let pid = server.pid().unwrap_or(0).to_string();
            let cpu0 = trainlog_bench::measure::cpu_seconds(&pid);
            let out = measure(&rt, &server, clients, batches, steps, false);
            let cpu = trainlog_bench::measure::cpu_seconds(&pid) - cpu0;
            let points = (clients * batches * steps * 10) as f64;
            println!(
                "rep {rep}: {:.0} metric points/s, server CPU {:.1} ms per million points",
                out.points_per_s,
                cpu / points * 1e9
            );
        }
        return;
    }
    let (mut alone, mut with, mut lines) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        let order = if rep % 2 == 0 { [false, true] } else { [true, false] };
        for ranks in order {
            let server = trainlog_tests::TestServer::spawn_local();
            let out = measure(&rt, &server, clients, batches, steps, ranks);
            println!(
                "rep {rep}, {}: {:.0} metric points/s{}",
                if ranks { "with 64 ranks' lines" } else { "alone" },
                out.points_per_s,
                if ranks {
                    format!(", {:.0} console lines/s acknowledged meanwhile", out.lines_per_s)
                } else {
                    String::new()
                }
            );
            if ranks {
                with.push(out.points_per_s);
                lines.push(out.lines_per_s);
            } else {
                alone.push(out.points_per_s);
            }
        }
    }
    let server = trainlog_tests::TestServer::spawn_local();
    let cpu = cpu_per_million_lines(&server, 20);
    drop(server);
    // A steady 1,000,000 points/s (10 clients, a batch of 10,000 points each every 100 ms), as a
    // busy server sees it: the latency of each batch, alone and beside the ranks.
    let (mut paced_alone, mut paced_with) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let order = if rep % 2 == 0 { [false, true] } else { [true, false] };
        for ranks in order {
            let server = trainlog_tests::TestServer::spawn_local();
            let l = paced_latencies(&rt, &server, 10, 100, 1_000, std::time::Duration::from_millis(100), ranks);
            println!(
                "rep {rep}, paced, {}: batch p50 {:.2} ms, p99 {:.2} ms",
                if ranks { "with the ranks" } else { "alone" },
                percentile(&l, 50.0),
                percentile(&l, 99.0)
            );
            if ranks {
                paced_with.extend(l);
            } else {
                paced_alone.extend(l);
            }
        }
    }
    let (a, w) = (median(&alone), median(&with));
    println!("\n| measure | median |\n|---|---:|");
    println!("| metric ingest alone, points/s | {a:.0} |");
    println!("| metric ingest with {RANKS} ranks sending {} lines/s each, points/s | {w:.0} |", LINES_PER_BATCH * 2);
    println!("| console lines acknowledged meanwhile, lines/s | {:.0} |", median(&lines));
    println!("| with / alone | {:.3} |", w / a);
    let (pa, pw) = (&paced_alone, &paced_with);
    let (a50, a99, w50, w99) = (percentile(pa, 50.0), percentile(pa, 99.0), percentile(pw, 50.0), percentile(pw, 99.0));
    println!("| metric batch latency at 1,000,000 points/s, alone: p50 / p99, ms | {a50:.2} / {a99:.2} |");
    println!("| the same beside the {RANKS} ranks: p50 / p99, ms | {w50:.2} / {w99:.2} |");
    println!(
        "| CPU per million console lines (64 ranks, {:.0} lines/s for 20 s, nothing else): server / sender | {:.2} s / {:.2} s |",
        cpu.lines_per_s, cpu.server, cpu.sender
    );
    // Flat out, the clients and the server share this machine's cores: the lines' CPU, the
    // server's and the sender's, is what they leave to metric ingest.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let lines_cores = median(&lines) * (cpu.server + cpu.sender) / 1e6;
    println!(
        "| with / alone if the lines cost only their CPU: ({cores:.0} cores − {lines_cores:.3} for the lines) / {cores:.0} | {:.3} |",
        (cores - lines_cores) / cores
    );
    println!("\n({reps} servers of each kind, alternating; {clients} clients × {batches} Arrow batches × {steps} steps of 10 keys)");
}
