//! The installation's price catalog: instance prices imported from a catalog (SkyPilot's CSV
//! layout: per instance type, region and zone, on-demand and spot) and the installation's own
//! rates (per GPU-hour, for a GPU model or a cluster: reserved, committed-use, on-premises),
//! each valid from a date until a newer row of the same key. A node is priced when it joins,
//! with the rows valid when its attempt started, so a later price never changes a run's cost.

use crate::db::{vals, Db, Row};
use crate::jobs::ProcessJoin;
use crate::{Error, MetaStore, Result};

/// What a price row prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceKind {
    /// A cloud instance type (in a region and zone, or any): the whole instance, per hour.
    Instance,
    /// The installation's own rate per GPU-hour, for a GPU model and/or a cluster.
    Rate,
}

impl PriceKind {
    fn as_str(self) -> &'static str {
        match self {
            PriceKind::Instance => "instance",
            PriceKind::Rate => "rate",
        }
    }
}

/// One price, valid from `valid_from_ms` until a newer row of the same key.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceRow {
    pub kind: PriceKind,
    /// Lower case (aws, gcp, …); empty: any.
    pub cloud: String,
    /// Empty for a rate.
    pub instance_type: String,
    /// The accelerator's name (H100, A100-80GB, …); empty: any (a rate for a whole cluster).
    pub accelerator: String,
    pub accelerator_count: f64,
    /// Empty: any.
    pub region: String,
    pub zone: String,
    /// A rate's cluster (Slurm's cluster name, SkyPilot's); empty: any.
    pub cluster: String,
    /// An instance's on-demand price per hour; a rate's price per GPU-hour.
    pub usd_per_hour: Option<f64>,
    /// An instance's spot price per hour.
    pub spot_usd_per_hour: Option<f64>,
    pub valid_from_ms: i64,
    /// Where the price comes from (a file, a contract).
    pub source: String,
}

const COLUMNS: &str = "kind, cloud, instance_type, accelerator, accelerator_count, region, zone, cluster, usd_per_hour,
    spot_usd_per_hour, valid_from_ms, source";

fn row_of(r: &Row) -> Result<PriceRow> {
    let kind: String = r.get(0)?;
    Ok(PriceRow {
        kind: if kind == "rate" { PriceKind::Rate } else { PriceKind::Instance },
        cloud: r.get(1)?,
        instance_type: r.get(2)?,
        accelerator: r.get(3)?,
        accelerator_count: r.get(4)?,
        region: r.get(5)?,
        zone: r.get(6)?,
        cluster: r.get(7)?,
        usd_per_hour: r.get(8)?,
        spot_usd_per_hour: r.get(9)?,
        valid_from_ms: r.get(10)?,
        source: r.get(11)?,
    })
}

fn check(i: usize, p: &PriceRow) -> Result<()> {
    let invalid =
        |field: &str, reason: &str| Err(Error::Invalid { field: format!("rows[{i}].{field}"), reason: reason.into() });
    let bad = |v: Option<f64>| v.is_some_and(|v| !v.is_finite() || v < 0.0);
    if bad(p.usd_per_hour) || bad(p.spot_usd_per_hour) {
        return invalid("usd_per_hour", "a price is a finite number of dollars, at least 0");
    }
    if p.usd_per_hour.is_none() && p.spot_usd_per_hour.is_none() {
        return invalid("usd_per_hour", "a row needs a price, on-demand or spot");
    }
    match p.kind {
        PriceKind::Instance if p.instance_type.is_empty() => {
            invalid("instance_type", "an instance price names its instance type")
        }
        PriceKind::Instance if p.cloud.is_empty() => invalid("cloud", "an instance price names its cloud"),
        PriceKind::Rate if p.accelerator.is_empty() && p.cluster.is_empty() => {
            invalid("accelerator", "a rate names a GPU model, a cluster, or both")
        }
        PriceKind::Rate if p.usd_per_hour.is_none() => invalid("usd_per_hour", "a rate is a price per GPU-hour"),
        _ if !p.accelerator_count.is_finite() || p.accelerator_count < 0.0 => {
            invalid("accelerator_count", "a count is at least 0")
        }
        _ => Ok(()),
    }
}

/// Whether a catalog's accelerator name ("A100-80GB", "H100") names this GPU ("NVIDIA A100-SXM4-80GB").
pub fn accelerator_matches(accelerator: &str, gpu_name: &str) -> bool {
    use trainlog_schema::gpu_names::{gpu_name_match, gpu_name_words};
    gpu_name_match(accelerator, &gpu_name_words(gpu_name)).is_some()
}

/// The price of a node, from the rows valid when its attempt started: the installation's rate
/// for its cluster and GPU model (either alone if no row names both), else its instance type's
/// price in its zone, its region, or anywhere (spot when the process says spot). Answers the
/// node's price per hour, where it comes from, and its on-demand price (the same, but for a
/// spot node: its catalog row's on-demand price, None where the row has none).
pub(crate) fn price_node(
    db: &dyn Db,
    p: &ProcessJoin,
    gpus: i64,
    gpu_names: &[String],
    at_ms: i64,
) -> Result<Option<(f64, String, Option<f64>)>> {
    // The newest row of each key valid at `at_ms`, of one instance type (a rate has none).
    let valid = |kind: PriceKind, instance: &str| -> Result<Vec<PriceRow>> {
        db.rows(
            &format!(
                "SELECT {COLUMNS} FROM prices p WHERE kind = ?1 AND instance_type = ?3 AND valid_from_ms <= ?2 AND valid_from_ms = (
                    SELECT MAX(q.valid_from_ms) FROM prices q WHERE q.kind = p.kind AND q.cloud = p.cloud
                      AND q.instance_type = p.instance_type AND q.accelerator = p.accelerator AND q.region = p.region
                      AND q.zone = p.zone AND q.cluster = p.cluster AND q.valid_from_ms <= ?2)"
            ),
            vals![kind.as_str(), at_ms, instance],
        )?
        .iter()
        .map(row_of)
        .collect()
    };
    let cluster = p.cluster.clone().unwrap_or_default();
    let cloud = p.cloud.clone().unwrap_or_default().to_ascii_lowercase();
    if gpus > 0 {
        let gpu = gpu_names.first().cloned().unwrap_or_default();
        let rates = valid(PriceKind::Rate, "")?;
        let fits = |r: &&PriceRow| {
            (r.cluster.is_empty() || r.cluster == cluster)
                && (r.cloud.is_empty() || r.cloud == cloud)
                && (r.accelerator.is_empty() || accelerator_matches(&r.accelerator, &gpu))
        };
        // The most specific rate: a cluster and a GPU model, then a cluster, then a GPU model.
        let best = rates
            .iter()
            .filter(fits)
            .max_by_key(|r| (!r.cluster.is_empty(), !r.accelerator.is_empty(), r.valid_from_ms));
        if let Some(rate) = best {
            let per_gpu = rate.usd_per_hour.unwrap_or(0.0);
            let what = [rate.accelerator.as_str(), rate.cluster.as_str()]
                .iter()
                .filter(|s| !s.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" on ");
            return Ok(Some((
                per_gpu * gpus as f64,
                format!(
                    "installation rate: {gpus} x {what} at ${per_gpu}/GPU-hour ({}, from {})",
                    rate.source,
                    day(rate.valid_from_ms)
                ),
                Some(per_gpu * gpus as f64),
            )));
        }
    }
    let Some(instance) = p.instance_type.as_deref().filter(|i| !i.is_empty()) else { return Ok(None) };
    let region = p.region.clone().unwrap_or_default();
    let zone = p.zone.clone().unwrap_or_default();
    let spot = p.spot == Some(true);
    let instances = valid(PriceKind::Instance, instance)?;
    let candidates = || {
        instances.iter().filter(|r| {
            r.instance_type == instance
                && (cloud.is_empty() || r.cloud == cloud)
                && (r.region.is_empty() || r.region == region)
                && (r.zone.is_empty() || r.zone == zone)
        })
    };
    // The zone's row, else the region's, else any; the price asked for, when it has one.
    let most_specific = |r: &&PriceRow| (!r.zone.is_empty(), !r.region.is_empty(), r.valid_from_ms);
    let best = candidates()
        .filter(|r| if spot { r.spot_usd_per_hour.is_some() } else { r.usd_per_hour.is_some() })
        .max_by_key(most_specific);
    let on_demand =
        candidates().filter(|r| r.usd_per_hour.is_some()).max_by_key(most_specific).and_then(|r| r.usd_per_hour);
    Ok(best.map(|r| {
        let (price, pricing) = if spot { (r.spot_usd_per_hour, "spot") } else { (r.usd_per_hour, "on-demand") };
        let place = [r.region.as_str(), r.zone.as_str()]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        (
            price.unwrap_or(0.0),
            format!(
                "catalog: {} {instance} {pricing}{} ({}, from {})",
                r.cloud,
                if place.is_empty() { String::new() } else { format!(" in {place}") },
                r.source,
                day(r.valid_from_ms)
            ),
            on_demand,
        )
    }))
}

fn day(ms: i64) -> String {
    crate::report::day_text(ms.div_euclid(86_400_000))
}

impl MetaStore {
    /// Adds prices (a row with the key and date of a stored one replaces it); all or none.
    pub fn import_prices(&self, rows: &[PriceRow]) -> Result<usize> {
        for (i, p) in rows.iter().enumerate() {
            check(i, p)?;
        }
        self.write(|tx| {
            for p in rows {
                tx.exec(
                    "DELETE FROM prices WHERE kind = ?1 AND cloud = ?2 AND instance_type = ?3 AND accelerator = ?4
                       AND region = ?5 AND zone = ?6 AND cluster = ?7 AND valid_from_ms = ?8",
                    vals![
                        p.kind.as_str(),
                        &p.cloud,
                        &p.instance_type,
                        &p.accelerator,
                        &p.region,
                        &p.zone,
                        &p.cluster,
                        p.valid_from_ms
                    ],
                )?;
                tx.exec(
                    &format!(
                        "INSERT INTO prices ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
                    ),
                    vals![
                        p.kind.as_str(),
                        &p.cloud,
                        &p.instance_type,
                        &p.accelerator,
                        p.accelerator_count,
                        &p.region,
                        &p.zone,
                        &p.cluster,
                        p.usd_per_hour,
                        p.spot_usd_per_hour,
                        p.valid_from_ms,
                        &p.source
                    ],
                )?;
            }
            Ok(rows.len())
        })
    }

    /// Every stored price row, or with `at_ms` only the ones valid then; by kind, cloud, instance
    /// type, place and date.
    pub fn prices(&self, at_ms: Option<i64>) -> Result<Vec<PriceRow>> {
        self.read(|db| {
            let rows = match at_ms {
                None => db.rows(&format!("SELECT {COLUMNS} FROM prices ORDER BY kind, cloud, instance_type, accelerator, region, zone, cluster, valid_from_ms"), &[])?,
                Some(at) => db.rows(
                    &format!(
                        "SELECT {COLUMNS} FROM prices p WHERE valid_from_ms <= ?1 AND valid_from_ms = (
                            SELECT MAX(q.valid_from_ms) FROM prices q WHERE q.kind = p.kind AND q.cloud = p.cloud
                              AND q.instance_type = p.instance_type AND q.accelerator = p.accelerator
                              AND q.region = p.region AND q.zone = p.zone AND q.cluster = p.cluster AND q.valid_from_ms <= ?1)
                         ORDER BY kind, cloud, instance_type, accelerator, region, zone, cluster"
                    ),
                    vals![at],
                )?,
            };
            rows.iter().map(row_of).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accelerators_match_gpu_names_by_whole_words() {
        assert!(accelerator_matches("A100-80GB", "NVIDIA A100-SXM4-80GB"));
        assert!(accelerator_matches("H100", "NVIDIA H100 80GB HBM3"));
        assert!(!accelerator_matches("A100-80GB", "NVIDIA A100-SXM4-40GB"));
        assert!(!accelerator_matches("L4", "NVIDIA L40S"));
        assert!(!accelerator_matches("", "NVIDIA L4"));
    }

    fn instance(zone: &str, price: f64, spot: Option<f64>, from: i64) -> PriceRow {
        PriceRow {
            kind: PriceKind::Instance,
            cloud: "aws".into(),
            instance_type: "p4d.24xlarge".into(),
            accelerator: "A100".into(),
            accelerator_count: 8.0,
            region: "us-east-1".into(),
            zone: zone.into(),
            cluster: String::new(),
            usd_per_hour: Some(price),
            spot_usd_per_hour: spot,
            valid_from_ms: from,
            source: "vms.csv".into(),
        }
    }

    #[test]
    fn a_node_is_priced_by_the_rows_valid_when_its_attempt_started() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::test_store(dir.path());
        let day = 86_400_000;
        meta.import_prices(&[
            instance("", 21.957642, Some(9.0), 10 * day),
            instance("us-east-1a", 22.0, Some(8.0), 10 * day),
            instance("", 30.0, None, 20 * day),
        ])
        .unwrap();
        let gpus = vec!["NVIDIA A100-SXM4-40GB".to_owned(); 8];
        let join = |zone: &str, spot: bool| ProcessJoin {
            cloud: Some("aws".into()),
            instance_type: Some("p4d.24xlarge".into()),
            region: Some("us-east-1".into()),
            zone: Some(zone.into()),
            spot: Some(spot),
            ..ProcessJoin::default()
        };
        let priced = |p: &ProcessJoin, at: i64| meta.read(|db| price_node(db, p, 8, &gpus, at)).unwrap();
        let price = |p: &ProcessJoin, at: i64| priced(p, at).map(|(p, _, _)| p);
        assert_eq!(price(&join("us-east-1b", false), 15 * day), Some(21.957642), "the region's row");
        assert_eq!(price(&join("us-east-1a", false), 15 * day), Some(22.0), "the zone's row wins");
        assert_eq!(price(&join("us-east-1a", true), 15 * day), Some(8.0), "spot");
        let on_demand = |p: &ProcessJoin, at: i64| priced(p, at).and_then(|(_, _, on_demand)| on_demand);
        assert_eq!(on_demand(&join("us-east-1a", true), 15 * day), Some(22.0), "a spot node's on-demand price");
        assert_eq!(on_demand(&join("us-east-1b", false), 15 * day), Some(21.957642), "on demand: what it paid");
        assert_eq!(price(&join("us-east-1b", false), 25 * day), Some(30.0), "the newer price from its date");
        assert_eq!(price(&join("us-east-1b", true), 25 * day), None, "the newer row of the region has no spot price");
        assert_eq!(price(&join("us-east-1b", false), 5 * day), None, "no price before the first date");

        // An installation's rate wins, the one naming the cluster first.
        let rate = |cluster: &str, accelerator: &str, usd: f64| PriceRow {
            kind: PriceKind::Rate,
            cloud: String::new(),
            instance_type: String::new(),
            accelerator: accelerator.into(),
            accelerator_count: 1.0,
            region: String::new(),
            zone: String::new(),
            cluster: cluster.into(),
            usd_per_hour: Some(usd),
            spot_usd_per_hour: None,
            valid_from_ms: 12 * day,
            source: "contract".into(),
        };
        meta.import_prices(&[rate("", "A100", 1.5), rate("lab", "", 0.9)]).unwrap();
        assert_eq!(price(&join("us-east-1a", false), 15 * day), Some(12.0), "8 GPUs at 1.5");
        let on_lab = ProcessJoin { cluster: Some("lab".into()), ..join("us-east-1a", false) };
        let (usd, source, _) = meta.read(|db| price_node(db, &on_lab, 8, &gpus, 15 * day)).unwrap().unwrap();
        assert_eq!(usd, 8.0 * 0.9);
        assert!(
            source.starts_with("installation rate: 8 x lab at $0.9/GPU-hour (contract, from 1970-01-13)"),
            "{source}"
        );
        assert_eq!(meta.prices(Some(15 * day)).unwrap().len(), 4);
        assert_eq!(meta.prices(None).unwrap().len(), 5);

        let refused =
            meta.import_prices(&[PriceRow { usd_per_hour: Some(-1.0), ..rate("", "A100", 1.0) }]).unwrap_err();
        assert!(matches!(refused, Error::Invalid { ref field, .. } if field == "rows[0].usd_per_hour"), "{refused}");
    }
}
