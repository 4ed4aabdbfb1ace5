//! Where the report's sums come from: each run's row of `run_usage` as a row of sums (the runs
//! themselves), or each project's days added up in advance (`usage_rollup`), which a day marked
//! in `usage_rollup_dirty` is added up into again. Both give rows of the same columns, so one
//! statement groups either, or both at once (whole days from the days, the edges of a period
//! from the runs).

use super::THRESHOLDS;
use crate::db::{vals, Db, Value};
use crate::search::RunScope;
use crate::{MetaStore, Result};

pub(crate) const DAY_MS: i64 = 86_400_000;

/// The day (days since 1970-01-01, UTC) of a time in ms, rounded down, in SQL.
pub(crate) fn day_of(ms: &str) -> String {
    format!("(({ms} - ((({ms} % {DAY_MS}) + {DAY_MS}) % {DAY_MS})) / {DAY_MS})")
}

/// How one column of sums is made from one run's row, and how rows of it add up.
struct Column {
    name: String,
    per_run: String,
    combine: &'static str,
}

const SAMPLED: &str = "u.gpu_series > 0 AND u.gpu_hours > 0";
const PRICED_SAMPLED: &str = "u.priced = 1 AND u.gpu_series > 0 AND u.gpu_hours > 0";

/// The columns every threshold has.
fn at_threshold(t: u32) -> [Column; 3] {
    [
        Column {
            name: format!("sampled_active_s_{t}"),
            per_run: format!("CASE WHEN {SAMPLED} THEN u.active_s_{t} ELSE 0 END"),
            combine: "SUM",
        },
        Column {
            name: format!("priced_active_s_{t}"),
            per_run: format!("CASE WHEN {PRICED_SAMPLED} THEN u.active_s_{t} ELSE 0 END"),
            combine: "SUM",
        },
        Column {
            name: format!("priced_active_usd_{t}"),
            // Each active GPU-second at its attempt's price (a row computed before that was
            // kept: at the run's average price, until it is computed again).
            per_run: format!(
                "CASE WHEN {PRICED_SAMPLED}
                 THEN COALESCE(u.active_usd_{t}, u.cost_usd * u.active_s_{t} / (u.gpu_hours * 3600.0)) ELSE 0 END"
            ),
            combine: "SUM",
        },
    ]
}

/// The columns that do not depend on the threshold, from a run's row `u`, the run `r` and its
/// restores `cr`.
fn base_columns() -> Vec<Column> {
    let outcome = |o: &str| format!("CASE WHEN u.outcome = '{o}' THEN 1 ELSE 0 END");
    let sum = |name: &str, per_run: String| Column { name: name.into(), per_run, combine: "SUM" };
    vec![
        sum("runs", "1".into()),
        Column { name: "first_start_ms".into(), per_run: "r.start_ms".into(), combine: "MIN" },
        Column { name: "last_start_ms".into(), per_run: "r.start_ms".into(), combine: "MAX" },
        sum("finished", outcome("finished")),
        sum("code_failures", outcome("code")),
        sum("infra_failures", outcome("infra")),
        sum("killed", outcome("killed")),
        sum("running", outcome("running")),
        sum("gpu_hours", "u.gpu_hours".into()),
        sum("spot_gpu_hours", "u.spot_gpu_hours".into()),
        sum("gpu_runs", "CASE WHEN u.gpu_hours > 0 THEN 1 ELSE 0 END".into()),
        sum("sampled_runs", format!("CASE WHEN {SAMPLED} THEN 1 ELSE 0 END")),
        sum("sampled_gpu_hours", format!("CASE WHEN {SAMPLED} THEN u.gpu_hours ELSE 0 END")),
        sum("priced_runs", "u.priced".into()),
        sum("cost_usd", "CASE WHEN u.priced = 1 THEN u.cost_usd ELSE 0 END".into()),
        sum("priced_sampled_runs", format!("CASE WHEN {PRICED_SAMPLED} THEN 1 ELSE 0 END")),
        sum("priced_sampled_cost_usd", format!("CASE WHEN {PRICED_SAMPLED} THEN u.cost_usd ELSE 0 END")),
        sum("queued_runs", "CASE WHEN u.queue_wait_ms IS NULL THEN 0 ELSE 1 END".into()),
        sum("queue_wait_ms_sum", "COALESCE(u.queue_wait_ms, 0)".into()),
        Column { name: "queue_wait_ms_max".into(), per_run: "u.queue_wait_ms".into(), combine: "MAX" },
        sum("restores", "COALESCE(cr.n, 0)".into()),
        sum("restores_ok", "COALESCE(cr.ok, 0)".into()),
    ]
}

/// The columns added after the thresholds' (the table's columns keep the order they were added
/// in): sampled GPU-seconds, and what spot capacity saved against on-demand prices.
fn later_columns() -> Vec<Column> {
    let spot = "u.priced = 1 AND u.spot_gpu_hours > 0";
    let sum = |name: &str, per_run: String| Column { name: name.into(), per_run, combine: "SUM" };
    vec![
        sum("sampled_s", format!("CASE WHEN {SAMPLED} THEN COALESCE(u.sampled_s, u.gpu_hours * 3600.0) ELSE 0 END")),
        sum(
            "spot_savings_usd",
            format!("CASE WHEN {spot} AND u.on_demand_usd IS NOT NULL THEN u.on_demand_usd - u.cost_usd ELSE 0 END"),
        ),
        sum("spot_savings_runs", format!("CASE WHEN {spot} AND u.on_demand_usd IS NOT NULL THEN 1 ELSE 0 END")),
        sum("spot_unknown_runs", format!("CASE WHEN {spot} AND u.on_demand_usd IS NULL THEN 1 ELSE 0 END")),
        sum(
            "sm_active_runs",
            format!("CASE WHEN {SAMPLED} AND u.utilization_source IN ('sm_active', 'mixed') THEN 1 ELSE 0 END"),
        ),
        sum("energy_kwh", "COALESCE(u.energy_kwh, 0)".into()),
        sum("energy_runs", "CASE WHEN u.energy_kwh IS NULL THEN 0 ELSE 1 END".into()),
        sum("useful_gpu_hours", "COALESCE(u.useful_gpu_hours, 0)".into()),
        sum("flops_gpu_hours", "CASE WHEN u.useful_gpu_hours IS NULL THEN 0 ELSE u.gpu_hours END".into()),
        sum("flops_runs", "CASE WHEN u.useful_gpu_hours IS NULL THEN 0 ELSE 1 END".into()),
    ]
}

/// Every column of `usage_rollup` after its key, in order.
fn rollup_columns() -> Vec<Column> {
    let mut columns = base_columns();
    let per_threshold: Vec<[Column; 3]> = THRESHOLDS.iter().map(|t| at_threshold(*t)).collect();
    for part in 0..3 {
        for set in &per_threshold {
            let c = &set[part];
            columns.push(Column { name: c.name.clone(), per_run: c.per_run.clone(), combine: c.combine });
        }
    }
    columns.extend(later_columns());
    columns
}

/// The key of a row of sums.
const KEY: &str = "project_id, day, \"user\", group_name, gpu_model, provider, pricing";

/// The threshold's columns under names without it, as a source of the report answers them.
fn threshold_names(t: u32) -> [(String, &'static str); 3] {
    [
        (format!("sampled_active_s_{t}"), "sampled_active_s"),
        (format!("priced_active_s_{t}"), "priced_active_s"),
        (format!("priced_active_usd_{t}"), "priced_active_usd"),
    ]
}

/// The restores of the runs `runs` selects (ids), per run.
fn restores_of(runs: &str) -> String {
    format!(
        "LEFT JOIN (SELECT run_id, COUNT(*) AS n, SUM(ok) AS ok FROM checkpoint_restores {runs} GROUP BY run_id) cr
         ON cr.run_id = r.id"
    )
}

/// Each run `condition` selects as a row of sums at threshold `t`, its id in `run_id`.
pub(super) fn runs_source(condition: &str, t: u32) -> String {
    let mut select = vec![
        "r.project_id AS project_id".to_owned(),
        format!("{} AS day", day_of("r.start_ms")),
        "r.\"user\" AS \"user\"".into(),
        "r.group_name AS group_name".into(),
        "u.gpu_model AS gpu_model".into(),
        "u.provider AS provider".into(),
        "u.pricing AS pricing".into(),
        "r.id AS run_id".into(),
    ];
    select.extend(base_columns().into_iter().chain(later_columns()).map(|c| format!("{} AS {}", c.per_run, c.name)));
    let threshold = at_threshold(t);
    for ((_, short), c) in threshold_names(t).iter().zip(threshold) {
        select.push(format!("{} AS {short}", c.per_run));
    }
    let select = select.join(", ");
    format!(
        "SELECT {select} FROM runs r JOIN run_usage u ON u.run_id = r.id {restores} WHERE {condition}
         UNION ALL SELECT {select} FROM {LEDGER} r JOIN run_usage u ON u.run_id = r.id {restores} WHERE {condition}",
        restores = restores_of("")
    )
}

/// The spend ledger's runs (deleted for good, their rows of `run_usage` kept) under the names of
/// `runs`' columns, so a report adds up what they spent.
const LEDGER: &str = "(SELECT run_id AS id, project_id, start_ms, \"user\", group_name FROM purged_runs
     WHERE start_ms IS NOT NULL)";

/// The days `condition` selects (on `x`) as rows of sums at threshold `t`, with no run id.
pub(super) fn days_source(condition: &str, t: u32) -> String {
    let mut select = vec![KEY.to_owned(), "CAST(NULL AS TEXT) AS run_id".into()];
    select.extend(base_columns().into_iter().chain(later_columns()).map(|c| c.name));
    select.extend(threshold_names(t).iter().map(|(name, short)| format!("{name} AS {short}")));
    format!("SELECT {} FROM usage_rollup x WHERE {condition}", select.join(", "))
}

/// Columns [`sums_sql`] selects.
pub(super) const SUMS: usize = 36;

/// The sums of a group of rows `x` from either source, in the order `sums_from` reads them.
pub(super) fn sums_sql() -> String {
    let int = |e: &str| format!("CAST(SUM({e}) AS BIGINT)");
    let real = |e: &str| format!("CAST(SUM({e}) AS DOUBLE PRECISION)");
    [
        int("x.runs"),
        "COUNT(DISTINCT x.\"user\")".to_owned(),
        "MIN(x.first_start_ms)".to_owned(),
        "MAX(x.last_start_ms)".to_owned(),
        int("x.finished"),
        int("x.code_failures"),
        int("x.infra_failures"),
        int("x.killed"),
        int("x.running"),
        real("x.gpu_hours"),
        real("x.spot_gpu_hours"),
        int("x.gpu_runs"),
        int("x.sampled_runs"),
        real("x.sampled_gpu_hours"),
        real("x.sampled_active_s / 3600.0"),
        int("x.priced_runs"),
        real("x.cost_usd"),
        int("x.priced_sampled_runs"),
        real("x.priced_sampled_cost_usd"),
        real("x.priced_active_s / 3600.0"),
        real("x.priced_sampled_cost_usd - x.priced_active_usd"),
        int("x.queued_runs"),
        int("x.queue_wait_ms_sum"),
        "MAX(x.queue_wait_ms_max)".to_owned(),
        int("x.restores"),
        int("x.restores_ok"),
        real("x.sampled_s / 3600.0"),
        real("x.spot_savings_usd"),
        int("x.spot_savings_runs"),
        int("x.spot_unknown_runs"),
        int("x.sm_active_runs"),
        real("x.energy_kwh"),
        int("x.energy_runs"),
        real("x.useful_gpu_hours"),
        real("x.flops_gpu_hours"),
        int("x.flops_runs"),
    ]
    .join(",\n        ")
}

/// `column` is one of the projects of `scope`, with its values bound through `bind`.
pub(super) fn in_scope(scope: &RunScope, column: &str, bind: &mut dyn FnMut(Value) -> String) -> String {
    let list = |ids: &[i64], bind: &mut dyn FnMut(Value) -> String| {
        ids.iter().map(|id| bind(Value::Int(*id))).collect::<Vec<_>>().join(", ")
    };
    match scope {
        RunScope::All => "1 = 1".into(),
        RunScope::Project(id) => format!("{column} = {}", bind(Value::Int(*id))),
        RunScope::Projects(ids) if ids.is_empty() => "1 = 0".into(),
        RunScope::Projects(ids) => format!("{column} IN ({})", list(ids, bind)),
        RunScope::AllBut(ids) if ids.is_empty() => "1 = 1".into(),
        RunScope::AllBut(ids) => format!("{column} NOT IN ({})", list(ids, bind)),
    }
}

/// Days added up again per transaction.
const DAYS_PER_WRITE: i64 = 200;

impl MetaStore {
    /// Adds up again the days of the projects in `scope` marked out of date, at most `limit` of
    /// them; answers how many marked days of the scope are left.
    pub fn refresh_rollup(&self, scope: &RunScope, limit: i64) -> Result<i64> {
        let mut params = Vec::new();
        let condition = in_scope(scope, "project_id", &mut |v| {
            params.push(v);
            format!("?{}", params.len())
        });
        let mut done = 0;
        while done < limit {
            let mut page = params.clone();
            page.push(Value::Int(DAYS_PER_WRITE.min(limit - done)));
            let marked: Vec<(i64, i64, i64)> = self.read(|db| {
                db.rows(
                    &format!(
                        "SELECT project_id, day, generation FROM usage_rollup_dirty WHERE {condition}
                         ORDER BY project_id, day LIMIT ?{}",
                        page.len()
                    ),
                    &page,
                )?
                .iter()
                .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .collect()
            })?;
            if marked.is_empty() {
                return Ok(0);
            }
            self.write(|tx| marked.iter().try_for_each(|day| add_up_day(tx, *day)))?;
            done += marked.len() as i64;
        }
        self.read(|db| {
            db.row(&format!("SELECT COUNT(*) FROM usage_rollup_dirty WHERE {condition}"), &params)?
                .map(|r| r.get(0))
                .transpose()
                .map(Option::unwrap_or_default)
        })
    }
}

/// Adds up one project's day again from its runs' rows, and unmarks it unless it was marked
/// again since `generation` was read.
fn add_up_day(tx: &dyn Db, (project, day, generation): (i64, i64, i64)) -> Result<()> {
    let from = day.saturating_mul(DAY_MS);
    let to = from.saturating_add(DAY_MS);
    tx.exec("DELETE FROM usage_rollup WHERE project_id = ?1 AND day = ?2", vals![project, day])?;
    let columns = rollup_columns();
    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
    let sums: Vec<String> = columns.iter().map(|c| format!("{}({})", c.combine, c.per_run)).collect();
    let the_day = "r.project_id = ?1 AND r.start_ms >= ?3 AND r.start_ms < ?4";
    // Archived runs and the ledger's count: their money was spent all the same.
    tx.exec(
        &format!(
            "INSERT INTO usage_rollup ({KEY}, {})
             SELECT r.project_id, CAST(?2 AS BIGINT), r.\"user\", r.group_name, u.gpu_model, u.provider, u.pricing, {}
             FROM (SELECT id, project_id, start_ms, \"user\", group_name FROM runs UNION ALL SELECT * FROM {LEDGER} l) r
             JOIN run_usage u ON u.run_id = r.id {}
             WHERE {the_day}
             GROUP BY r.project_id, r.\"user\", r.group_name, u.gpu_model, u.provider, u.pricing",
            names.join(", "),
            sums.join(", "),
            restores_of(&format!("WHERE run_id IN (SELECT r.id FROM runs r WHERE {the_day})")),
        ),
        vals![project, day, from, to],
    )?;
    tx.exec(
        "DELETE FROM usage_rollup_dirty WHERE project_id = ?1 AND day = ?2 AND generation = ?3",
        vals![project, day, generation],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rollup_table_has_the_columns_the_code_adds_up() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        crate::migrate::apply_sqlite(&mut conn).unwrap();
        let table: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('usage_rollup') ORDER BY cid")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let mut expected: Vec<String> = KEY.split(", ").map(|k| k.trim_matches('"').to_owned()).collect();
        expected.extend(rollup_columns().into_iter().map(|c| c.name));
        assert_eq!(table, expected);
    }

    #[test]
    fn days_round_down() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for (ms, day) in [(0, 0), (DAY_MS - 1, 0), (DAY_MS, 1), (-1, -1), (-DAY_MS, -1), (-DAY_MS - 1, -2)] {
            let got: i64 = conn.query_row(&format!("SELECT {}", day_of(&ms.to_string())), [], |r| r.get(0)).unwrap();
            assert_eq!(got, day, "{ms}");
        }
    }

    use super::super::{Breakdown, GroupSums, Report, ReportRequest, RunUsage};
    use crate::{MetaStore, NewRun, RunUpdate};
    use trainlog_schema::{ProjectName, RunId};

    const DAY0: i64 = 20_000 * DAY_MS;

    /// Writes run `i`'s row of the report: outcomes, GPUs, prices, series and queue waits that
    /// vary with `i`.
    fn write_usage(meta: &MetaStore, id: &RunId, i: usize) {
        let now = crate::now_ms();
        let inputs = meta.usage_inputs(id.as_str(), now).unwrap().unwrap();
        let gpu_hours = 1.0 + (i % 5) as f64;
        let mut active_s = [0.0; 20];
        for (k, a) in active_s.iter_mut().enumerate() {
            *a = gpu_hours * 3600.0 * 0.9 * (20 - k) as f64 / 20.0 * (1 + i % 3) as f64 / 3.0;
        }
        let usage = RunUsage {
            outcome: ["finished", "code", "infra", "killed", "running"][i % 5],
            failure: None,
            gpus: 1 + (i % 4) as i64,
            gpu_model: ["A100", "H100"][i % 2].into(),
            provider: "aws".into(),
            pricing: ["spot", "on_demand", "mixed"][i % 3],
            gpu_hours,
            spot_gpu_hours: if i.is_multiple_of(3) { gpu_hours } else { 0.0 },
            priced: !i.is_multiple_of(7),
            cost_usd: 3.25 * (1 + i) as f64,
            gpu_series: i64::from(!i.is_multiple_of(6)),
            active_usd: active_s.map(|a| a * 0.001 * (1 + i % 4) as f64),
            active_s,
            sampled_s: gpu_hours * 3600.0 * (0.5 + (i % 2) as f64 / 2.0),
            on_demand_usd: (i % 3 != 2).then(|| 3.25 * (1 + i) as f64 * 1.5),
            time_to_result_ms: i.is_multiple_of(5).then_some(60_000 * i as i64),
            utilization_source: ["util", "sm_active", "mixed", ""][i % 4],
            energy_kwh: (i % 3 != 1).then_some(0.25 * i as f64),
            useful_gpu_hours: (i % 4 == 1).then_some(gpu_hours * 0.4),
            queue_wait_ms: i.is_multiple_of(4).then_some(1_000 * i as i64),
            queue_source: i.is_multiple_of(4).then_some("launcher"),
        };
        meta.write_usage(&inputs, &usage, now).unwrap();
    }

    fn numbers(s: &GroupSums) -> Vec<f64> {
        let n = |v: i64| v as f64;
        vec![
            n(s.runs),
            n(s.users),
            n(s.first_start_ms.unwrap_or(-1)),
            n(s.last_start_ms.unwrap_or(-1)),
            n(s.finished),
            n(s.code_failures),
            n(s.infra_failures),
            n(s.killed),
            n(s.running),
            s.gpu_hours,
            s.spot_gpu_hours,
            n(s.gpu_runs),
            n(s.sampled_runs),
            s.sampled_gpu_hours,
            s.active_gpu_hours,
            n(s.priced_runs),
            s.cost_usd,
            n(s.priced_sampled_runs),
            s.priced_sampled_cost_usd,
            s.priced_active_gpu_hours,
            s.idle_usd,
            n(s.queued_runs),
            n(s.queue_wait_ms_sum),
            n(s.queue_wait_ms_max.unwrap_or(-1)),
            n(s.restores),
            n(s.restores_ok),
            s.covered_gpu_hours,
            s.spot_savings_usd,
            n(s.spot_savings_runs),
            n(s.spot_unknown_runs),
            n(s.sm_active_runs),
            s.energy_kwh,
            n(s.energy_runs),
            s.useful_gpu_hours,
            s.flops_gpu_hours,
            n(s.flops_runs),
        ]
    }

    fn same_sums(what: &str, a: &GroupSums, b: &GroupSums) {
        for (i, (x, y)) in numbers(a).iter().zip(numbers(b)).enumerate() {
            assert!((x - y).abs() <= 1e-9 * x.abs().max(1.0), "{what}, sum {i}: {x} != {y}\n{a:?}\n{b:?}");
        }
    }

    /// The report read from the days added up in advance answers what it answers from the runs.
    fn the_days_answer_as_the_runs_do(meta: &MetaStore, req: &ReportRequest) {
        let from_runs: Report = meta.report(&ReportRequest { rollup: false, ..req.clone() }).unwrap();
        assert_eq!(meta.refresh_rollup(&req.scope, 10_000).unwrap(), 0, "no day left marked");
        let from_days = meta.report(&ReportRequest { rollup: true, ..req.clone() }).unwrap();
        let what = format!("by {:?} from {:?} to {:?}", req.by, req.since_ms, req.until_ms);
        same_sums(&what, &from_runs.total.sums, &from_days.total.sums);
        let keys = |r: &Report| r.groups.iter().map(|g| g.keys.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&from_runs), keys(&from_days), "{what}");
        for (a, b) in from_runs.groups.iter().zip(&from_days.groups) {
            same_sums(&format!("{what}, group {}", a.group), &a.sums, &b.sums);
            assert_eq!((a.since_ms, a.until_ms), (b.since_ms, b.until_ms), "{what}");
        }
        assert_eq!(from_runs.most_expensive, from_days.most_expensive, "{what}");
        assert_eq!(from_runs.idlest, from_days.idlest, "{what}");
        assert_eq!(from_runs.infra_failures, from_days.infra_failures, "{what}");
    }

    /// Every breakdown over periods of whole days, partial days and part of one day, at two thresholds.
    fn every_request(meta: &MetaStore) -> i64 {
        let hour = 3_600_000;
        let periods = [
            (None, None),
            (Some(DAY0 + 36 * hour), Some(DAY0 + 4 * DAY_MS + 5 * hour)),
            (Some(DAY0 + 2 * DAY_MS), Some(DAY0 + 5 * DAY_MS)),
            (Some(DAY0 + 2 * DAY_MS + 2 * hour), Some(DAY0 + 2 * DAY_MS + 20 * hour)),
            (Some(DAY0 + 3 * DAY_MS + 1), None),
            (None, Some(DAY0 + 3 * DAY_MS - 1)),
        ];
        let breakdowns = [
            vec![],
            vec![Breakdown::Project, Breakdown::Week],
            vec![Breakdown::User],
            vec![Breakdown::Day, Breakdown::Pricing],
            vec![Breakdown::Gpu, Breakdown::Group],
        ];
        let request = |scope, since_ms, until_ms, by: &Vec<Breakdown>, threshold| ReportRequest {
            scope,
            filter: String::new(),
            since_ms,
            until_ms,
            by: by.clone(),
            threshold,
            now_ms: DAY0 + 30 * DAY_MS,
            rollup: true,
        };
        for (since_ms, until_ms) in periods {
            for by in &breakdowns {
                for threshold in [10, 55] {
                    let req = request(RunScope::All, since_ms, until_ms, by, threshold);
                    the_days_answer_as_the_runs_do(meta, &req);
                }
            }
        }
        let b = meta.project_by_name("b").unwrap();
        let req = request(RunScope::Project(b.id), Some(DAY0 + 20 * hour), None, &vec![Breakdown::Week], 10);
        the_days_answer_as_the_runs_do(meta, &req);
        meta.report(&request(RunScope::All, None, None, &vec![], 10)).unwrap().total.sums.runs
    }

    #[test]
    fn the_days_added_up_follow_every_change_to_their_runs() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::test_store(dir.path());
        let mut ids = Vec::new();
        for i in 0..60usize {
            let new = NewRun {
                project: Some(ProjectName::parse("project", ["a", "b", "b"][i % 3]).unwrap()),
                user: format!("user-{}", i % 4),
                group: format!("group-{}", i % 2),
                start_ms: Some(DAY0 + i as i64 * 7 * 3_600_000 / 3 + i as i64 * 1_000),
                ..NewRun::default()
            };
            let (run, _) = meta.create_run(&new).unwrap();
            write_usage(&meta, &run.id, i);
            ids.push(run.id);
        }
        let all = RunScope::All;
        assert!(meta.refresh_rollup(&all, 0).unwrap() > 0, "the rows' days are marked");
        assert_eq!(every_request(&meta), 60);

        // A change to a run marks its day; the days then answer as the runs do again.
        meta.set_run_deleted(&ids[5], true).unwrap();
        assert!(meta.refresh_rollup(&all, 0).unwrap() > 0, "archiving a run marks its day");
        assert_eq!(every_request(&meta), 60, "an archived run still spent what it spent");
        meta.purge_run(&ids[5]).unwrap();
        assert!(meta.refresh_rollup(&all, 0).unwrap() > 0, "deleting a run for good marks its day");
        assert_eq!(every_request(&meta), 60, "a run deleted for good is in the spend ledger");
        assert!(meta.forget_spend(ids[5].as_str()).unwrap());
        assert!(meta.refresh_rollup(&all, 0).unwrap() > 0, "forgetting its spend marks its day");
        assert_eq!(every_request(&meta), 59);
        assert!(!meta.forget_spend(ids[5].as_str()).unwrap(), "forgotten once");
        meta.update_run(&ids[7], &RunUpdate { group: Some("moved".into()), ..RunUpdate::default() }).unwrap();
        assert!(meta.refresh_rollup(&all, 0).unwrap() > 0, "a new group marks its day");
        every_request(&meta);
        write_usage(&meta, &ids[11], 40);
        assert!(meta.refresh_rollup(&all, 0).unwrap() > 0, "a new row marks its day");
        every_request(&meta);
        let a = meta.project_by_name("a").unwrap();
        meta.set_project_deleted(a.id, true).unwrap();
        assert_eq!(every_request(&meta), 59, "an archived project's runs spent what they spent");
    }

    #[test]
    fn a_changed_run_is_stale_and_a_written_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::test_store(dir.path());
        let mut ids = Vec::new();
        for i in 0..5usize {
            let new = NewRun {
                project: Some(ProjectName::parse("project", "p").unwrap()),
                start_ms: Some(DAY0 + i as i64),
                ..NewRun::default()
            };
            ids.push(meta.create_run(&new).unwrap().0.id);
        }
        let now = crate::now_ms();
        let req = ReportRequest {
            scope: RunScope::All,
            filter: String::new(),
            since_ms: None,
            until_ms: None,
            by: vec![],
            threshold: 10,
            now_ms: now,
            rollup: false,
        };
        let (stale, count) = meta.report_stale(&req, 3).unwrap();
        assert_eq!((stale.len(), count), (3, 5), "rows never computed are stale, newest first");
        assert_eq!(stale[0], ids[4].as_str());
        for (i, id) in ids.iter().enumerate() {
            write_usage(&meta, id, i);
        }
        assert_eq!(meta.report_stale(&req, 10).unwrap(), (vec![], 0), "every row is up to date");
        meta.update_run(&ids[2], &RunUpdate { notes: Some("changed".into()), ..RunUpdate::default() }).unwrap();
        assert_eq!(meta.report_stale(&req, 10).unwrap(), (vec![ids[2].to_string()], 1));
        let later = ReportRequest { now_ms: now + 61_000, ..req.clone() };
        assert_eq!(meta.report_stale(&later, 10).unwrap().1, 5, "running runs are computed again after a minute");
    }
}
