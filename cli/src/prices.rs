//! `trainlog prices`: import a price catalog in SkyPilot's CSV layout, set the installation's own
//! rates per GPU-hour, and list the prices valid at a date, through the server's `/prices`.

use clap::Subcommand;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Rows sent per request.
const CHUNK: usize = 2_000;

#[derive(Subcommand, Debug)]
pub enum PricesCommand {
    /// Load a catalog in SkyPilot's layout (columns InstanceType, AcceleratorName,
    /// AcceleratorCount, vCPUs, MemoryGiB, Price, SpotPrice, Region, AvailabilityZone; others
    /// are ignored): one price per instance type, region and zone.
    Import {
        file: PathBuf,
        /// The cloud the catalog prices (its files have no cloud column): aws, gcp, azure, …
        #[arg(long)]
        cloud: String,
        /// The prices hold from this date (YYYY-MM-DD, UTC); today by default.
        #[arg(long)]
        valid_from: Option<String>,
        /// Where the prices come from; the file's name by default.
        #[arg(long)]
        source: Option<String>,
    },
    /// Set the installation's own price per GPU-hour (reserved, committed use, an on-premises or
    /// Slurm cluster's) for a GPU model, a cluster, or both.
    Set {
        #[arg(long)]
        usd_per_gpu_hour: f64,
        /// The GPU model, as a catalog names it (H100, A100-80GB).
        #[arg(long)]
        gpu: Option<String>,
        /// The cluster (Slurm's SLURM_CLUSTER_NAME, SkyPilot's cluster).
        #[arg(long)]
        cluster: Option<String>,
        /// Only in this cloud.
        #[arg(long)]
        cloud: Option<String>,
        /// From this date (YYYY-MM-DD, UTC); today by default.
        #[arg(long)]
        valid_from: Option<String>,
        /// Where the rate comes from (a contract, an internal chargeback sheet).
        #[arg(long, default_value = "set by trainlog prices set")]
        source: String,
    },
    /// The prices valid at a date (today by default), or every row with --all.
    List {
        #[arg(long)]
        at: Option<String>,
        #[arg(long, conflicts_with = "at")]
        all: bool,
    },
}

/// A date (YYYY-MM-DD) as ms since the epoch at UTC midnight; today's when None.
fn date_ms(date: Option<&str>) -> Result<i64, String> {
    let now = trainlog_meta::now_ms();
    let Some(date) = date else { return Ok(now - now.rem_euclid(86_400_000)) };
    trainlog::slurm::parse_utc_time(&format!("{}T00:00:00", date.trim()))
        .ok_or_else(|| format!("expected a date as YYYY-MM-DD, got {date:?}"))
}

fn day(ms: i64) -> String {
    trainlog_meta::report::day_text(ms.div_euclid(86_400_000))
}

fn number(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

/// The rows of a catalog in SkyPilot's layout, and how many lines had no instance type or no price.
pub fn catalog_rows(file: &Path, cloud: &str, valid_from: i64, source: &str) -> Result<(Vec<Value>, usize), String> {
    let mut reader = csv::Reader::from_path(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let headers = reader.headers().map_err(|e| e.to_string())?.clone();
    let column = |name: &str| headers.iter().position(|h| h.trim() == name);
    let needed =
        ["InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice", "Region", "AvailabilityZone"];
    let missing: Vec<&str> = needed.iter().filter(|n| column(n).is_none()).copied().collect();
    if !missing.is_empty() {
        return Err(format!("{}: no column {} (SkyPilot's catalog layout)", file.display(), missing.join(", ")));
    }
    let at = |record: &csv::StringRecord, name: &str| {
        column(name).and_then(|i| record.get(i)).unwrap_or("").trim().to_owned()
    };
    let (mut rows, mut skipped) = (Vec::new(), 0);
    for (line, record) in reader.records().enumerate() {
        let record = record.map_err(|e| format!("{} line {}: {e}", file.display(), line + 2))?;
        let (price, spot) = (number(&at(&record, "Price")), number(&at(&record, "SpotPrice")));
        let instance = at(&record, "InstanceType");
        if instance.is_empty() || (price.is_none() && spot.is_none()) {
            skipped += 1;
            continue;
        }
        rows.push(json!({
            "kind": "instance",
            "cloud": cloud,
            "instance_type": instance,
            "accelerator": at(&record, "AcceleratorName"),
            "accelerator_count": number(&at(&record, "AcceleratorCount")).unwrap_or(0.0),
            "region": at(&record, "Region"),
            "zone": at(&record, "AvailabilityZone"),
            "usd_per_hour": price,
            "spot_usd_per_hour": spot,
            "valid_from": valid_from,
            "source": source,
        }));
    }
    Ok((rows, skipped))
}

fn send(api: &trainlog::Api, rows: &[Value]) -> Result<usize, String> {
    let mut added = 0;
    for chunk in rows.chunks(CHUNK) {
        let answer = api.post_json("/prices", &json!({ "rows": chunk })).map_err(|e| e.to_string())?;
        added += answer["added"].as_u64().unwrap_or(0) as usize;
    }
    Ok(added)
}

/// Runs a `prices` command against `server`; answers what to print.
pub fn run(server: Option<&str>, command: PricesCommand) -> Result<String, String> {
    let api = trainlog::Api::new(server).map_err(|e| e.to_string())?;
    match command {
        PricesCommand::Import { file, cloud, valid_from, source } => {
            let from = date_ms(valid_from.as_deref())?;
            let source = source
                .unwrap_or_else(|| file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
            let (rows, skipped) = catalog_rows(&file, &cloud.to_ascii_lowercase(), from, &source)?;
            let added = send(&api, &rows)?;
            let from = day(from);
            Ok(format!("imported {added} price(s) of {cloud} valid from {from}; skipped {skipped} line(s) with no instance type or price"))
        }
        PricesCommand::Set { usd_per_gpu_hour, gpu, cluster, cloud, valid_from, source } => {
            if gpu.is_none() && cluster.is_none() {
                return Err("a rate names --gpu, --cluster, or both".into());
            }
            let from = date_ms(valid_from.as_deref())?;
            let row = json!({
                "kind": "rate", "cloud": cloud.unwrap_or_default(), "accelerator": gpu.unwrap_or_default(),
                "accelerator_count": 1, "cluster": cluster.unwrap_or_default(), "usd_per_hour": usd_per_gpu_hour,
                "valid_from": from, "source": source,
            });
            send(&api, &[row])?;
            Ok(format!("set ${usd_per_gpu_hour}/GPU-hour from {}", day(from)))
        }
        PricesCommand::List { at, all } => {
            let path = if all {
                "/prices".to_owned()
            } else {
                format!("/prices?at={}", date_ms(at.as_deref())? + 86_400_000 - 1)
            };
            let answer = api.get_json(&path).map_err(|e| e.to_string())?;
            let mut out =
                String::from("KIND\tCLOUD\tINSTANCE\tGPU\tREGION\tZONE\tCLUSTER\tUSD/H\tSPOT USD/H\tFROM\tSOURCE\n");
            for r in answer["rows"].as_array().into_iter().flatten() {
                let text = |k: &str| r[k].as_str().unwrap_or("").to_owned();
                let price = |k: &str| r[k].as_f64().map_or("-".to_owned(), |v| v.to_string());
                out.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                    text("kind"),
                    text("cloud"),
                    text("instance_type"),
                    text("accelerator"),
                    text("region"),
                    text("zone"),
                    text("cluster"),
                    price("usd_per_hour"),
                    price("spot_usd_per_hour"),
                    day(r["valid_from"].as_i64().unwrap_or(0)),
                    text("source")
                ));
            }
            Ok(out)
        }
    }
}
