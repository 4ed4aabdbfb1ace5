//! `cargo run --release -p trainlog-bench --bin trainlog-bench-console [-- --reps N]`: metric
//! ingest alone and while 64 ranks send console lines, on fresh servers, alternating which goes
//! first; prints each measurement and the medians.

use trainlog_bench::console::{measure, server_cpu_per_million_lines, LINES_PER_BATCH, RANKS};
use trainlog_bench::measure::median;

fn main() {
    let mut reps = 5;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--reps" => reps = args.next().and_then(|n| n.parse().ok()).unwrap_or(reps),
            other => {
                eprintln!("unknown argument {other:?}; usage: trainlog-bench-console [--reps N]");
                std::process::exit(2);
            }
        }
    }
    if std::env::var_os("TRAINLOG_BIN").is_none() {
        let exe = std::env::current_exe().expect("this executable has a path");
        let beside = exe.parent().expect("target/<profile>").join("trainlog");
        assert!(beside.exists(), "{} is missing: run `cargo build --release --workspace` first", beside.display());
        std::env::set_var("TRAINLOG_BIN", beside);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    let (clients, batches, steps) = (10, 300, 1_000);
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
    let (cpu, rate) = server_cpu_per_million_lines(&rt, &server, 20);
    drop(server);
    let (a, w) = (median(&alone), median(&with));
    println!("\n| measure | median |\n|---|---:|");
    println!("| metric ingest alone, points/s | {a:.0} |");
    println!("| metric ingest with {RANKS} ranks sending {} lines/s each, points/s | {w:.0} |", LINES_PER_BATCH * 2);
    println!("| console lines acknowledged meanwhile, lines/s | {:.0} |", median(&lines));
    println!("| with / alone | {:.3} |", w / a);
    println!(
        "| server CPU per million console lines (64 ranks, {rate:.0} lines/s for 20 s, nothing else) | {cpu:.2} s |"
    );
    println!("\n({reps} servers of each kind, alternating; {clients} clients × {batches} Arrow batches × {steps} steps of 10 keys)");
}
