//! What a run costs: a shipped table of cloud GPU prices, the run's price per hour and the cost
//! accumulated so far.
//!
//! The table (`prices.csv` next to the crate's Cargo.toml, embedded at build time) holds one price
//! per GPU-hour per GPU model, provider and pricing (`on_demand` or `spot`), each with the date
//! it was recorded and where it comes from. Lines starting with `#` are comments.

use trainlog_schema::gpu_names::{gpu_name_match, gpu_name_words};

/// One row of the price table.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceRow {
    /// GPU model as a few words that all appear in NVML's name, e.g. "H100 80GB".
    pub gpu: String,
    /// Cloud provider, lower case: aws, gcp, azure, lambda.
    pub provider: String,
    /// `on_demand` or `spot`.
    pub pricing: String,
    /// Price of one GPU for one hour, USD.
    pub usd_per_hour: f64,
    /// When the price was recorded (YYYY-MM-DD).
    pub date: String,
    /// Where the price comes from.
    pub source: String,
}

const PRICES_CSV: &str = include_str!("../../prices.csv");

/// Provider assumed when neither the caller nor TRAINLOG_CLOUD_PROVIDER names one.
pub const DEFAULT_PROVIDER: &str = "aws";

/// The shipped price table (rows that do not parse are skipped).
pub fn price_table() -> Vec<PriceRow> {
    parse_table(PRICES_CSV)
}

fn parse_table(text: &str) -> Vec<PriceRow> {
    let mut rows = Vec::new();
    let mut header_seen = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !header_seen {
            header_seen = true;
            if line.starts_with("gpu,") {
                continue;
            }
        }
        let fields = split_csv_line(line);
        let [gpu, provider, pricing, price, date, source] = fields.as_slice() else { continue };
        let Ok(usd_per_hour) = price.trim().parse::<f64>() else { continue };
        if !usd_per_hour.is_finite() || usd_per_hour < 0.0 {
            continue;
        }
        rows.push(PriceRow {
            gpu: gpu.trim().to_owned(),
            provider: provider.trim().to_ascii_lowercase(),
            pricing: pricing.trim().to_ascii_lowercase(),
            usd_per_hour,
            date: date.trim().to_owned(),
            source: source.trim().to_owned(),
        });
    }
    rows
}

/// Splits one CSV line; fields may be double-quoted (with `""` for a quote inside).
fn split_csv_line(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

fn lookup_in(rows: &[PriceRow], gpu_name: &str, provider: &str, spot: bool) -> Option<PriceRow> {
    let pricing = if spot { "spot" } else { "on_demand" };
    let nvml_words = gpu_name_words(gpu_name);
    rows.iter()
        .filter(|row| row.provider.eq_ignore_ascii_case(provider.trim()) && row.pricing == pricing)
        .filter(|row| gpu_name_match(&row.gpu, &nvml_words).is_some())
        // The most specific (longest) table name wins; on a tie, the first row.
        .fold(None::<&PriceRow>, |best, row| match best {
            Some(best) if best.gpu.len() >= row.gpu.len() => Some(best),
            _ => Some(row),
        })
        .cloned()
}

/// Price per hour of one GPU of this model (matched case-insensitively by the table's gpu name
/// appearing in NVML's name, word by word, e.g. "NVIDIA H100 80GB HBM3" matches "H100 80GB";
/// prefer the longest match), for a provider and pricing.
pub fn lookup(gpu_name: &str, provider: &str, spot: bool) -> Option<PriceRow> {
    lookup_in(&price_table(), gpu_name, provider, spot)
}

/// Cost accumulated at a fixed price per hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostMeter {
    usd_per_hour: f64,
}

impl CostMeter {
    /// A meter at this price; a negative or non-finite price counts as 0.
    pub fn new(usd_per_hour: f64) -> Self {
        let usd_per_hour = if usd_per_hour.is_finite() && usd_per_hour > 0.0 { usd_per_hour } else { 0.0 };
        CostMeter { usd_per_hour }
    }

    /// The price per hour, USD.
    pub fn usd_per_hour(&self) -> f64 {
        self.usd_per_hour
    }

    /// Accumulated cost given elapsed seconds (negative or non-finite elapsed time counts as 0).
    pub fn accumulated_usd(&self, elapsed_secs: f64) -> f64 {
        if !elapsed_secs.is_finite() || elapsed_secs <= 0.0 {
            return 0.0;
        }
        self.usd_per_hour * elapsed_secs / 3600.0
    }
}

/// The environment variables that [`resolve_price`] reads, as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceEnv {
    /// TRAINLOG_COST_PER_HOUR
    pub cost_per_hour: Option<String>,
    /// TRAINLOG_CLOUD_PROVIDER
    pub cloud_provider: Option<String>,
    /// TRAINLOG_SPOT
    pub spot: Option<String>,
}

impl PriceEnv {
    /// Reads the variables from the process environment.
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
        PriceEnv {
            cost_per_hour: var("TRAINLOG_COST_PER_HOUR"),
            cloud_provider: var("TRAINLOG_CLOUD_PROVIDER"),
            spot: var("TRAINLOG_SPOT"),
        }
    }
}

fn valid_price(price: f64) -> bool {
    price.is_finite() && price >= 0.0
}

fn truthy(value: &str) -> bool {
    matches!(value.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}

/// Resolves the run's price per hour: an explicit per-hour price wins (`explicit`), else
/// TRAINLOG_COST_PER_HOUR, else the table for the detected GPUs (sum over GPUs of the per-GPU
/// price; provider from the `provider` argument, else TRAINLOG_CLOUD_PROVIDER, default "aws";
/// spot when `spot` or TRAINLOG_SPOT=1). Answers (usd_per_hour, source description) or None.
pub fn resolve_price(
    explicit: Option<f64>,
    provider: Option<&str>,
    spot: bool,
    gpu_names: &[String],
) -> Option<(f64, String)> {
    resolve_price_with(&price_table(), &PriceEnv::from_process(), explicit, provider, spot, gpu_names)
}

/// [`resolve_price`] over a given table and environment (no process state read).
///
/// Invalid prices (negative, non-finite, unparsable) are skipped. The table is used only when
/// every GPU has a price (a partial sum would understate the cost); for spot pricing, a GPU
/// without a spot row falls back to its on-demand price, which the description says.
pub fn resolve_price_with(
    table: &[PriceRow],
    env: &PriceEnv,
    explicit: Option<f64>,
    provider: Option<&str>,
    spot: bool,
    gpu_names: &[String],
) -> Option<(f64, String)> {
    if let Some(price) = explicit.filter(|p| valid_price(*p)) {
        return Some((price, "cost per hour given to the SDK".to_owned()));
    }
    if let Some(text) = env.cost_per_hour.as_deref() {
        if let Some(price) = text.trim().parse::<f64>().ok().filter(|p| valid_price(*p)) {
            return Some((price, "TRAINLOG_COST_PER_HOUR".to_owned()));
        }
    }
    if gpu_names.is_empty() {
        return None;
    }
    let provider = provider
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .or_else(|| env.cloud_provider.as_deref().map(str::trim).filter(|p| !p.is_empty()))
        .unwrap_or(DEFAULT_PROVIDER)
        .to_ascii_lowercase();
    let spot = spot || env.spot.as_deref().is_some_and(truthy);

    let mut total = 0.0;
    // (row, count, fell back to on-demand), in first-seen order.
    let mut used: Vec<(PriceRow, usize, bool)> = Vec::new();
    for name in gpu_names {
        let (row, fallback) = match lookup_in(table, name, &provider, spot) {
            Some(row) => (row, false),
            None if spot => (lookup_in(table, name, &provider, false)?, true),
            None => return None,
        };
        total += row.usd_per_hour;
        match used.iter_mut().find(|(r, _, f)| *r == row && *f == fallback) {
            Some(entry) => entry.1 += 1,
            None => used.push((row, 1, fallback)),
        }
    }
    let parts: Vec<String> = used
        .iter()
        .map(|(row, count, fallback)| {
            let pricing = if *fallback { "on_demand (no spot price known)".to_owned() } else { row.pricing.clone() };
            format!(
                "{count} x {} at ${}/h ({} {pricing}, {}, {})",
                row.gpu, row.usd_per_hour, row.provider, row.date, row.source
            )
        })
        .collect();
    Some((total, format!("price table: {}", parts.join("; "))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn shipped_table_is_complete_and_well_formed() {
        let table = price_table();
        let data_lines = PRICES_CSV.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).count();
        assert_eq!(table.len() + 1, data_lines, "every data row parses");
        for row in &table {
            assert!(["aws", "gcp", "azure", "lambda"].contains(&row.provider.as_str()), "{row:?}");
            assert!(["on_demand", "spot"].contains(&row.pricing.as_str()), "{row:?}");
            assert!(row.usd_per_hour > 0.0 && row.usd_per_hour < 50.0, "{row:?}");
            assert!(row.date.len() == 10 && row.date.starts_with("2026-"), "{row:?}");
            assert!(!row.source.is_empty(), "{row:?}");
        }
        for gpu in ["H100 80GB", "H200", "A100 80GB", "A100 40GB", "L4", "A10G", "T4", "V100"] {
            assert!(table.iter().any(|r| r.gpu == gpu && r.provider == "aws" && r.pricing == "on_demand"), "{gpu}");
        }
    }

    #[test]
    fn lookup_matches_nvml_names() {
        let row = lookup("NVIDIA H100 80GB HBM3", "aws", false).unwrap();
        assert_eq!(row.gpu, "H100 80GB");
        assert_eq!(row.provider, "aws");
        assert_eq!(row.pricing, "on_demand");
        assert_eq!(lookup("NVIDIA A100-SXM4-80GB", "AWS", false).unwrap().gpu, "A100 80GB");
        assert_eq!(lookup("NVIDIA A100-PCIE-40GB", "aws", false).unwrap().gpu, "A100 40GB");
        assert_eq!(lookup("NVIDIA A10G", "aws", false).unwrap().gpu, "A10G");
        assert_eq!(lookup("Tesla T4", "gcp", false).unwrap().provider, "gcp");
        assert_eq!(lookup("NVIDIA L4", "aws", true).unwrap().pricing, "spot");
        // Whole words: an L40S is not an L4, an A100 is not an A10G.
        assert_eq!(lookup("NVIDIA L40S", "aws", false), None);
        assert_eq!(lookup("NVIDIA A100", "aws", false), None);
        assert_eq!(lookup("NVIDIA H100 80GB HBM3", "nowhere", false), None);
    }

    #[test]
    fn lookup_prefers_longest_match() {
        let row = |gpu: &str, price: f64| PriceRow {
            gpu: gpu.to_owned(),
            provider: "aws".to_owned(),
            pricing: "on_demand".to_owned(),
            usd_per_hour: price,
            date: "2026-01-01".to_owned(),
            source: "test".to_owned(),
        };
        let table = vec![row("H100", 1.0), row("H100 80GB", 2.0), row("H100 NVL", 3.0)];
        assert_eq!(lookup_in(&table, "NVIDIA H100 80GB HBM3", "aws", false).unwrap().usd_per_hour, 2.0);
        assert_eq!(lookup_in(&table, "NVIDIA H100 NVL", "aws", false).unwrap().usd_per_hour, 3.0);
        assert_eq!(lookup_in(&table, "NVIDIA H100 PCIe", "aws", false).unwrap().usd_per_hour, 1.0);
    }

    #[test]
    fn cost_meter_accumulates() {
        let meter = CostMeter::new(3.6);
        assert_eq!(meter.usd_per_hour(), 3.6);
        assert!((meter.accumulated_usd(1800.0) - 1.8).abs() < 1e-12);
        assert_eq!(meter.accumulated_usd(0.0), 0.0);
        assert_eq!(meter.accumulated_usd(-5.0), 0.0);
        assert_eq!(CostMeter::new(f64::NAN).accumulated_usd(3600.0), 0.0);
    }

    #[test]
    fn explicit_price_wins() {
        let env = PriceEnv { cost_per_hour: Some("9.5".to_owned()), ..PriceEnv::default() };
        let gpus = names(&["NVIDIA H100 80GB HBM3"]);
        let (price, source) = resolve_price_with(&price_table(), &env, Some(1.25), None, false, &gpus).unwrap();
        assert_eq!(price, 1.25);
        assert!(source.contains("given"), "{source}");
        // Through the public wrapper too (whatever the process environment holds).
        assert_eq!(resolve_price(Some(2.5), None, false, &gpus).map(|r| r.0), Some(2.5));
    }

    #[test]
    fn env_price_beats_table() {
        let env = PriceEnv { cost_per_hour: Some(" 9.5 ".to_owned()), ..PriceEnv::default() };
        let gpus = names(&["NVIDIA H100 80GB HBM3"]);
        assert_eq!(
            resolve_price_with(&price_table(), &env, None, None, false, &gpus),
            Some((9.5, "TRAINLOG_COST_PER_HOUR".to_owned()))
        );
        // An invalid value is skipped, so the table answers.
        let env = PriceEnv { cost_per_hour: Some("cheap".to_owned()), ..PriceEnv::default() };
        let (price, source) = resolve_price_with(&price_table(), &env, Some(-1.0), None, false, &gpus).unwrap();
        assert_eq!(price, lookup("NVIDIA H100 80GB HBM3", "aws", false).unwrap().usd_per_hour);
        assert!(source.starts_with("price table: 1 x H100 80GB"), "{source}");
    }

    #[test]
    fn table_price_sums_over_gpus() {
        let env = PriceEnv::default();
        let gpus = names(&["NVIDIA H100 80GB HBM3"; 8]);
        let per_gpu = lookup("NVIDIA H100 80GB HBM3", "lambda", false).unwrap().usd_per_hour;
        let (price, source) = resolve_price_with(&price_table(), &env, None, Some("Lambda"), false, &gpus).unwrap();
        assert!((price - 8.0 * per_gpu).abs() < 1e-9, "{price}");
        assert!(source.contains("8 x H100 80GB") && source.contains("lambda on_demand"), "{source}");
        // Provider from the environment, and default aws.
        let env = PriceEnv { cloud_provider: Some("gcp".to_owned()), ..PriceEnv::default() };
        let (price, _) = resolve_price_with(&price_table(), &env, None, None, false, &gpus[..1]).unwrap();
        assert_eq!(price, lookup("NVIDIA H100 80GB HBM3", "gcp", false).unwrap().usd_per_hour);
        let (price, _) =
            resolve_price_with(&price_table(), &PriceEnv::default(), None, None, false, &gpus[..1]).unwrap();
        assert_eq!(price, lookup("NVIDIA H100 80GB HBM3", "aws", false).unwrap().usd_per_hour);
    }

    #[test]
    fn spot_and_unknown_gpus() {
        let t4 = names(&["Tesla T4"]);
        let env = PriceEnv { spot: Some("1".to_owned()), ..PriceEnv::default() };
        let (price, source) = resolve_price_with(&price_table(), &env, None, None, false, &t4).unwrap();
        assert_eq!(price, lookup("Tesla T4", "aws", true).unwrap().usd_per_hour);
        assert!(source.contains("aws spot"), "{source}");
        // No spot row for the H200: its on-demand price, said so.
        let h200 = names(&["NVIDIA H200"]);
        let (price, source) =
            resolve_price_with(&price_table(), &PriceEnv::default(), None, None, true, &h200).unwrap();
        assert_eq!(price, lookup("NVIDIA H200", "aws", false).unwrap().usd_per_hour);
        assert!(source.contains("no spot price"), "{source}");
        // The H100 has one, below its on-demand price.
        let h100 = lookup("NVIDIA H100 80GB HBM3", "aws", true).unwrap();
        assert!(h100.usd_per_hour < lookup("NVIDIA H100 80GB HBM3", "aws", false).unwrap().usd_per_hour);
        // p4d.24xlarge: $21.957642 an hour for 8 A100 40GB.
        assert_eq!(lookup("NVIDIA A100-SXM4-40GB", "aws", false).unwrap().usd_per_hour, 2.7447);
        // One unknown GPU, or none at all: no price.
        let mixed = names(&["NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"]);
        assert_eq!(resolve_price_with(&price_table(), &PriceEnv::default(), None, None, false, &mixed), None);
        assert_eq!(resolve_price_with(&price_table(), &PriceEnv::default(), None, None, false, &[]), None);
    }

    #[test]
    fn csv_parsing_handles_quotes_comments_and_bad_rows() {
        let text = "# comment\ngpu,provider,pricing,usd_per_hour,date,source\n\
                    T4,AWS,On_Demand,0.5,2026-01-01,\"page, with comma\"\n\
                    T4,aws,on_demand,abc,2026-01-01,bad price\n\
                    T4,aws,on_demand,0.5\n";
        let rows = parse_table(text);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].provider, "aws");
        assert_eq!(rows[0].pricing, "on_demand");
        assert_eq!(rows[0].source, "page, with comma");
    }
}
