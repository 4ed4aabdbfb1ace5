//! Time to result: seconds from a finished run's submission to its end, per group, as a median
//! and a 90th percentile. Percentiles do not add up, so they come from each run's own row,
//! never from the days added up in advance.

use super::{day_text, group_expression, ReportGroup, ReportRequest, Scoped, FROM_SOURCE};
use crate::db::Db;
use crate::Result;
use std::collections::BTreeMap;

/// The median (the mean of the middle two of an even count) and the nearest-rank 90th
/// percentile of `seconds`, which it sorts; None for none.
pub fn median_and_p90(seconds: &mut [f64]) -> Option<(f64, f64)> {
    if seconds.is_empty() {
        return None;
    }
    seconds.sort_by(f64::total_cmp);
    let n = seconds.len();
    let median = if n % 2 == 1 { seconds[n / 2] } else { (seconds[n / 2 - 1] + seconds[n / 2]) / 2.0 };
    let rank = (0.9 * n as f64).ceil() as usize;
    Some((median, seconds[rank.clamp(1, n) - 1]))
}

/// Fills the time to result of the total and of each group from the runs of the request.
pub(super) fn fill(
    db: &dyn Db,
    req: &ReportRequest,
    total: &mut ReportGroup,
    groups: &mut [ReportGroup],
) -> Result<()> {
    let mut scoped = Scoped::new(db, req)?;
    let source = scoped.source(&ReportRequest { rollup: false, ..req.clone() });
    let keys_sql: Vec<String> = req.by.iter().map(|b| group_expression(b, &mut scoped)).collect();
    let select = keys_sql.iter().map(|k| format!("{k}, ")).collect::<String>();
    let rows = db.rows(
        &format!(
            "{} SELECT {select}t.time_to_result_ms FROM ({source}) {FROM_SOURCE}
             JOIN run_usage t ON t.run_id = x.run_id WHERE t.time_to_result_ms IS NOT NULL",
            scoped.with
        ),
        &scoped.params,
    )?;
    let mut all = Vec::with_capacity(rows.len());
    let mut by_group: BTreeMap<Vec<String>, Vec<f64>> = BTreeMap::new();
    for r in &rows {
        let mut keys = Vec::with_capacity(req.by.len());
        for (i, by) in req.by.iter().enumerate() {
            match by.period_ms() {
                Some(_) => keys.push(day_text(r.get(i)?)),
                None => keys.push(r.get::<Option<String>>(i)?.unwrap_or_default()),
            }
        }
        let seconds = r.get::<i64>(req.by.len())? as f64 / 1000.0;
        all.push(seconds);
        by_group.entry(keys).or_default().push(seconds);
    }
    set(total, &mut all);
    for group in groups.iter_mut() {
        set(group, by_group.get_mut(&group.keys).map_or(&mut [][..], Vec::as_mut_slice));
    }
    Ok(())
}

fn set(group: &mut ReportGroup, seconds: &mut [f64]) {
    let f = &mut group.figures;
    if let Some((median, p90)) = median_and_p90(seconds) {
        (f.time_to_result_median_s, f.time_to_result_p90_s) = (Some(median), Some(p90));
        f.reasons.remove("time_to_result_median_s");
        f.reasons.remove("time_to_result_p90_s");
    }
    let n = seconds.len() as i64;
    f.covers.insert("time_to_result_median_s", n);
    f.covers.insert("time_to_result_p90_s", n);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_90th_percentiles_by_hand() {
        assert_eq!(median_and_p90(&mut []), None);
        assert_eq!(median_and_p90(&mut [7.0]), Some((7.0, 7.0)));
        // 1..=10: the median is between 5 and 6; the 90th percentile's rank is 9.
        let mut ten: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        assert_eq!(median_and_p90(&mut ten), Some((5.5, 9.0)));
        // 11 values: rank ceil(9.9) = 10.
        let mut eleven: Vec<f64> = (1..=11).map(f64::from).collect();
        assert_eq!(median_and_p90(&mut eleven), Some((6.0, 10.0)));
    }
}
