//! `trainlog logs RUN`: a run's console lines, filtered and searched, and followed with `-f`.

use serde_json::Value;
use std::io::Write;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    run_id: String,
    /// Keep printing lines as they arrive, until the run has ended and printed nothing for 10 s.
    #[arg(short, long)]
    follow: bool,
    /// Only these ranks (repeat the flag, or separate with commas).
    #[arg(long, value_delimiter = ',')]
    rank: Vec<u32>,
    /// Only `stdout` or `stderr`.
    #[arg(long)]
    stream: Option<String>,
    /// Only this attempt of the job.
    #[arg(long)]
    attempt: Option<i64>,
    /// Only lines matching this regular expression (`(?i)` ignores case).
    #[arg(long)]
    grep: Option<String>,
    /// Only lines holding this text, ignoring case.
    #[arg(long, conflicts_with = "grep")]
    search: Option<String>,
    /// Only the last N matching lines.
    #[arg(long)]
    tail: Option<usize>,
    /// Print each line's time, rank and step before it.
    #[arg(long)]
    prefix: bool,
    /// Server URL; default TRAINLOG_SERVER, else the local default.
    #[arg(long, env = "TRAINLOG_SERVER")]
    server: Option<String>,
}

const PAGE: usize = 10_000;
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
const QUIET_AFTER_END: Duration = Duration::from_secs(10);

fn filters(args: &LogsArgs) -> Vec<(String, String)> {
    let mut q = Vec::new();
    if !args.rank.is_empty() {
        q.push(("rank".into(), args.rank.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
    }
    if let Some(s) = &args.stream {
        q.push(("stream".into(), s.clone()));
    }
    if let Some(a) = args.attempt {
        q.push(("attempt".into(), a.to_string()));
    }
    if let Some(g) = &args.grep {
        q.push(("q".into(), g.clone()));
        q.push(("regex".into(), "true".into()));
    }
    if let Some(s) = &args.search {
        q.push(("q".into(), s.clone()));
    }
    q
}

fn page(api: &trainlog::Api, run: &str, query: Vec<(String, String)>) -> Result<Value, String> {
    let text = api.logs_page(run, &query).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("the server's answer: {e}"))
}

fn print_lines(out: &mut impl Write, page: &Value, prefix: bool) -> Result<Option<u64>, String> {
    let mut last = None;
    for line in page["lines"].as_array().into_iter().flatten() {
        let text = line["text"].as_str().unwrap_or("");
        let written = if prefix {
            let time = line["time"].as_i64().unwrap_or(0);
            let clock = format!("{:02}:{:02}:{:02}", (time / 3_600_000) % 24, (time / 60_000) % 60, (time / 1000) % 60);
            let step = line["step"].as_i64().map_or_else(|| "-".to_owned(), |s| s.to_string());
            writeln!(out, "{clock} rank {} step {step} {}| {text}", line["rank"], line["stream"].as_str().unwrap_or(""))
        } else {
            writeln!(out, "{text}")
        };
        // A closed pipe (`| head`) ends the command quietly.
        written.map_err(|_| String::new())?;
        last = line["n"].as_u64();
    }
    Ok(last)
}

pub fn logs(args: LogsArgs) -> Result<(), String> {
    let api = trainlog::Api::new(args.server.as_deref()).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    let base = filters(&args);
    let mut last = None;
    if let Some(n) = args.tail {
        let mut q = base.clone();
        q.extend([("tail".into(), "true".into()), ("limit".into(), n.clamp(1, PAGE).to_string())]);
        last = print_lines(&mut out, &page(&api, &args.run_id, q)?, args.prefix)?;
    } else {
        let mut offset = 0u64;
        loop {
            let mut q = base.clone();
            q.extend([("offset".into(), offset.to_string()), ("limit".into(), PAGE.to_string())]);
            let p = page(&api, &args.run_id, q)?;
            let n = p["lines"].as_array().map_or(0, Vec::len) as u64;
            last = print_lines(&mut out, &p, args.prefix)?.or(last);
            offset += n;
            if n == 0 || offset >= p["matched"].as_u64().unwrap_or(0) {
                break;
            }
        }
    }
    if !args.follow {
        return Ok(());
    }
    let mut quiet_since: Option<Instant> = None;
    loop {
        let _ = out.flush();
        std::thread::sleep(FOLLOW_EVERY);
        let mut q = base.clone();
        match last {
            Some(n) => q.push(("after".into(), n.to_string())),
            None => q.push(("offset".into(), "0".into())),
        }
        q.push(("limit".into(), PAGE.to_string()));
        let p = page(&api, &args.run_id, q)?;
        match print_lines(&mut out, &p, args.prefix)? {
            Some(n) => {
                last = Some(n);
                quiet_since = None;
            }
            None => {
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= QUIET_AFTER_END {
                    let run = api.run(&args.run_id).map_err(|e| e.to_string())?;
                    let status = run.json["status"].as_str().unwrap_or("running");
                    if !matches!(status, "running" | "queued") {
                        return Ok(());
                    }
                    quiet_since = Some(Instant::now());
                }
            }
        }
    }
}
