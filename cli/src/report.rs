//! `trainlog report`: the server's training report as a table, CSV or JSON, and a budget check
//! for CI or cron (`--fail-over`).

use clap::Args;
use serde_json::{json, Value};
use trainlog_meta::report::FIGURES;

/// Exit code when spend passes `--fail-over`.
pub const OVER_BUDGET: u8 = 3;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Server URL; default TRAINLOG_SERVER, else the local default.
    #[arg(long, env = "TRAINLOG_SERVER")]
    server: Option<String>,
    /// Runs that started at or after this: a span back from now (30d, 12h, 4w), a date
    /// (2026-10-01, UTC) or an RFC 3339 time; all of them by default.
    #[arg(long)]
    since: Option<String>,
    /// Runs that started before this (same forms); now by default.
    #[arg(long)]
    until: Option<String>,
    /// Groups: project, user, group, tag:KEY, gpu, provider, pricing, week or day.
    #[arg(long)]
    by: Option<String>,
    /// Only these projects (comma-separated); all you may read by default.
    #[arg(long)]
    projects: Option<String>,
    /// Only runs of these users (comma-separated).
    #[arg(long)]
    users: Option<String>,
    /// Only runs of these groups (comma-separated).
    #[arg(long)]
    groups: Option<String>,
    /// Only runs with these tags, KEY:VALUE (comma-separated).
    #[arg(long)]
    tags: Option<String>,
    /// A run-search filter, e.g. "params.lr < 0.01 and status = 'finished'".
    #[arg(long)]
    filter: Option<String>,
    /// A GPU-second is active above this utilization, percent (a multiple of 5; default 10).
    #[arg(long)]
    active_above: Option<u32>,
    /// table (default), csv or json (a list of groups, each with `group`, `runs`, the figures
    /// and `reasons` for the null ones).
    #[arg(long, default_value = "table", value_parser = ["table", "csv", "json"])]
    format: String,
    /// Exit with status 3 when the report's spend (cost_usd of every run in it) is above this
    /// many USD.
    #[arg(long, value_name = "USD")]
    fail_over: Option<f64>,
}

/// Runs the command: prints the report; answers the exit code.
pub fn run(args: ReportArgs) -> std::process::ExitCode {
    match fetch(&args).and_then(|report| Ok((render(&report, &args.format)?, report))) {
        Ok((text, report)) => {
            println!("{}", text.trim_end());
            let spend = report["total"]["cost_usd"].as_f64().unwrap_or(0.0);
            match args.fail_over {
                Some(budget) if spend > budget => {
                    eprintln!("trainlog: spend ${spend:.2} is over the budget of ${budget:.2}");
                    std::process::ExitCode::from(OVER_BUDGET)
                }
                _ => std::process::ExitCode::SUCCESS,
            }
        }
        Err(e) => {
            eprintln!("trainlog: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn fetch(args: &ReportArgs) -> Result<Value, String> {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    let active_above = args.active_above.map(|a| a.to_string());
    let pairs = [
        ("since", &args.since),
        ("until", &args.until),
        ("by", &args.by),
        ("projects", &args.projects),
        ("users", &args.users),
        ("groups", &args.groups),
        ("tags", &args.tags),
        ("filter", &args.filter),
        ("active_above", &active_above),
    ];
    for (name, value) in pairs {
        if let Some(value) = value {
            query.append_pair(name, value);
        }
    }
    let api = trainlog::Api::new(args.server.as_deref()).map_err(|e| e.to_string())?;
    api.get_json(&format!("/report?{}", query.finish())).map_err(|e| e.to_string())
}

/// The groups as `--format json` lists them: `group`, `runs`, each figure, `cancelled`, and
/// `reasons`.
fn groups(report: &Value) -> Vec<Value> {
    let list = report["groups"].as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|g| {
            let mut out = serde_json::Map::new();
            let name = g["group"].as_str().unwrap_or_default();
            out.insert("group".into(), json!(if name.is_empty() && report["by"] == "all" { "all" } else { name }));
            out.insert("runs".into(), g["runs"].clone());
            for figure in FIGURES {
                out.insert(figure.into(), g[figure].clone());
            }
            // Runs someone cancelled (ended `killed`): neither a code nor an infrastructure failure.
            out.insert("cancelled".into(), g["inputs"]["killed"].clone());
            out.insert("reasons".into(), g["reasons"].clone());
            Value::Object(out)
        })
        .collect()
}

fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::Number(n) if n.is_f64() => format!("{:.4}", n.as_f64().unwrap_or_default()),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn reasons_text(reasons: &Value) -> String {
    reasons
        .as_object()
        .map(|m| {
            m.iter().map(|(k, v)| format!("{k}: {}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join("; ")
        })
        .unwrap_or_default()
}

fn render(report: &Value, format: &str) -> Result<String, String> {
    let groups = groups(report);
    match format {
        "json" => serde_json::to_string_pretty(&groups).map_err(|e| e.to_string()),
        "csv" => {
            let mut out = csv::Writer::from_writer(Vec::new());
            let mut header = vec!["group", "runs"];
            // The scorecard's name, with what it measures: it is not a saving in dollars.
            header.extend(FIGURES.iter().map(|f| match *f {
                "spot_savings_rate" => "spot_savings_rate (share of GPU-hours on spot)",
                other => other,
            }));
            header.push("cancelled");
            header.push("reasons");
            out.write_record(&header).map_err(|e| e.to_string())?;
            for g in &groups {
                let mut row = vec![cell(&g["group"]), cell(&g["runs"])];
                row.extend(FIGURES.iter().chain(&["cancelled"]).map(|f| match &g[*f] {
                    Value::Number(n) => n.to_string(),
                    other => cell(other),
                }));
                row.push(reasons_text(&g["reasons"]));
                out.write_record(&row).map_err(|e| e.to_string())?;
            }
            String::from_utf8(out.into_inner().map_err(|e| e.to_string())?).map_err(|e| e.to_string())
        }
        _ => Ok(table(report, &groups)),
    }
}

fn table(report: &Value, groups: &[Value]) -> String {
    let short = [
        ("gpu_utilization_rate", "util"),
        ("idle_gpu_hours", "idle_gpu_h"),
        ("queue_wait_s", "queue_s"),
        ("cost_usd", "cost_usd"),
        ("cost_per_gpu_hour_usd", "usd/gpu_h"),
        ("cost_per_experiment_usd", "usd/run"),
        ("spot_savings_rate", "spot_share"),
        ("spot_savings_usd", "spot_saved_usd"),
        ("job_success_rate", "success"),
        ("infra_failures", "infra"),
        ("code_failures", "code"),
        ("cancelled", "cancelled"),
        ("checkpoint_restore_rate", "restore"),
        ("experiments_per_user_week", "runs/user/wk"),
        ("time_to_result_median_s", "result_s_p50"),
        ("time_to_result_p90_s", "result_s_p90"),
        ("energy_kwh", "kwh"),
        ("mfu", "mfu"),
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["group".to_owned(), "runs".to_owned()];
    header.extend(short.iter().map(|(_, s)| (*s).to_owned()));
    rows.push(header);
    for g in groups {
        let mut row = vec![cell(&g["group"]), cell(&g["runs"])];
        row.extend(short.iter().map(|(f, _)| match &g[*f] {
            Value::Null => "-".to_owned(),
            Value::Number(n) if f.ends_with("_rate") => format!("{:.1}%", n.as_f64().unwrap_or_default() * 100.0),
            Value::Number(n) if n.is_f64() => format!("{:.2}", n.as_f64().unwrap_or_default()),
            other => cell(other),
        }));
        rows.push(row);
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut text = String::new();
    for row in &rows {
        let line: Vec<String> = row.iter().zip(&widths).map(|(v, w)| format!("{v:<w$}")).collect();
        text.push_str(line.join("  ").trim_end());
        text.push('\n');
    }
    let total = &report["total"];
    text.push_str(&format!(
        "\n{} run(s); spend ${:.2}; {} pending; a dash is a figure that cannot be computed:\n",
        total["runs"],
        total["cost_usd"].as_f64().unwrap_or(0.0),
        report["pending_runs"]
    ));
    let deleted = &report["deleted_for_good"];
    if deleted["runs"].as_i64().is_some_and(|n| n > 0) {
        text.push_str(&format!(
            "  the spend includes {} run(s) deleted for good: ${:.2} (trainlog ledger list)\n",
            deleted["runs"],
            deleted["cost_usd"].as_f64().unwrap_or(0.0)
        ));
    }
    if let Some(reasons) = total["reasons"].as_object() {
        for (figure, why) in reasons {
            text.push_str(&format!("  {figure}: {}\n", why.as_str().unwrap_or_default()));
        }
    }
    text
}
