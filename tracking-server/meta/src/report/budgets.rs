//! Projects' monthly budgets and what their runs spent against them in a calendar month (UTC):
//! the cost of the priced runs that started in it, from their rows of the report.

use crate::db::vals;
use crate::search::RunScope;
use crate::{not_found, Error, MetaStore, Result};

/// A project's budget and its spend in one month.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetSpend {
    pub project: String,
    pub monthly_usd: f64,
    /// The month, YYYY-MM.
    pub month: String,
    pub spent_usd: f64,
    /// Runs of the month whose cost is not known (not every node had a price), left out of
    /// `spent_usd`.
    pub unpriced_runs: i64,
}

/// The calendar month (UTC) holding `ms`: its first instant, the next month's, and YYYY-MM.
pub fn month_of(ms: i64) -> (i64, i64, String) {
    let at = time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000)).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let first = time::Date::from_calendar_date(at.year(), at.month(), 1).unwrap_or(at.date());
    let (next_year, next_month) = match at.month() {
        time::Month::December => (at.year() + 1, time::Month::January),
        m => (at.year(), m.next()),
    };
    let next = time::Date::from_calendar_date(next_year, next_month, 1).unwrap_or(first);
    let ms_of = |d: time::Date| d.midnight().assume_utc().unix_timestamp() * 1000;
    (ms_of(first), ms_of(next), format!("{:04}-{:02}", at.year(), u8::from(at.month())))
}

impl MetaStore {
    /// Sets (or with None removes) a project's monthly budget, USD.
    pub fn set_budget(&self, project_id: i64, monthly_usd: Option<f64>) -> Result<()> {
        if monthly_usd.is_some_and(|b| !b.is_finite() || b < 0.0) {
            return Err(Error::Invalid {
                field: "monthly_usd".into(),
                reason: "a budget is a finite number of dollars, at least 0".into(),
            });
        }
        self.write(|tx| {
            let changed =
                tx.exec("UPDATE projects SET monthly_budget_usd = ?2 WHERE id = ?1", vals![project_id, monthly_usd])?;
            if changed == 0 {
                return Err(not_found(format!("project {project_id}")));
            }
            Ok(())
        })
    }

    /// A project's monthly budget, USD.
    pub fn budget(&self, project_id: i64) -> Result<Option<f64>> {
        self.read(|db| {
            Ok(db
                .row("SELECT monthly_budget_usd FROM projects WHERE id = ?1", vals![project_id])?
                .map(|r| r.get::<Option<f64>>(0))
                .transpose()?
                .flatten())
        })
    }

    /// Whether any project in `scope` has a budget.
    pub fn has_budgets(&self, scope: &RunScope) -> Result<bool> {
        let ids: Vec<i64> = self.read(|db| {
            db.rows("SELECT id FROM projects WHERE monthly_budget_usd IS NOT NULL AND deleted = 0", &[])?
                .iter()
                .map(|r| r.get(0))
                .collect()
        })?;
        Ok(ids.iter().any(|id| match scope {
            RunScope::All => true,
            RunScope::Project(p) => p == id,
            RunScope::Projects(list) => list.contains(id),
            RunScope::AllBut(list) => !list.contains(id),
        }))
    }

    /// The projects in `scope` with a budget, and what their runs that started in the month
    /// holding `now_ms` spent, by project name.
    pub fn budgets(&self, scope: &RunScope, now_ms: i64) -> Result<Vec<BudgetSpend>> {
        let (from, to, month) = month_of(now_ms);
        let mut params = vals![from, to].to_vec();
        let condition = super::in_scope(scope, "p.id", &mut |v| {
            params.push(v);
            format!("?{}", params.len())
        });
        self.read(|db| {
            db.rows(
                &format!(
                    "SELECT p.name, p.monthly_budget_usd,
                        CAST(SUM(CASE WHEN u.priced = 1 THEN u.cost_usd ELSE 0 END) AS DOUBLE PRECISION),
                        CAST(SUM(CASE WHEN r.id IS NOT NULL AND (u.priced IS NULL OR u.priced = 0) THEN 1 ELSE 0 END) AS BIGINT)
                     FROM projects p
                     LEFT JOIN (SELECT id, project_id, start_ms FROM runs
                                UNION ALL SELECT run_id, project_id, start_ms FROM purged_runs WHERE start_ms IS NOT NULL) r
                         ON r.project_id = p.id AND r.start_ms >= ?1 AND r.start_ms < ?2
                     LEFT JOIN run_usage u ON u.run_id = r.id
                     WHERE p.monthly_budget_usd IS NOT NULL AND p.deleted = 0 AND {condition}
                     GROUP BY p.name, p.monthly_budget_usd ORDER BY p.name"
                ),
                &params,
            )?
            .iter()
            .map(|r| {
                Ok(BudgetSpend {
                    project: r.get(0)?,
                    monthly_usd: r.get(1)?,
                    month: month.clone(),
                    spent_usd: r.get::<Option<f64>>(2)?.unwrap_or(0.0),
                    unpriced_runs: r.get::<Option<i64>>(3)?.unwrap_or(0),
                })
            })
            .collect()
        })
    }
}

impl MetaStore {
    /// What the project's running priced jobs that started from `from_ms` cost by `now_ms`
    /// beyond their rows of the report (each row is as old as its last refresh): the spend a
    /// budget rule adds to the rows' to read the money as it burns.
    pub fn running_spend_since_rows(&self, project_id: i64, from_ms: i64, now_ms: i64) -> Result<f64> {
        self.read(|db| {
            let rows = db.rows(
                "SELECT u.cost_usd, j.cost_usd, j.usd_per_hour, j.cost_at_ms FROM runs r
                 JOIN run_usage u ON u.run_id = r.id JOIN run_jobs j ON j.run_id = r.id
                 WHERE r.project_id = ?1 AND r.status = 'running' AND r.start_ms >= ?2 AND u.priced = 1
                   AND j.cost_usd IS NOT NULL AND j.usd_per_hour IS NOT NULL AND j.cost_at_ms IS NOT NULL",
                vals![project_id, from_ms],
            )?;
            let mut more = 0.0;
            for r in &rows {
                let (row_cost, cost, per_hour, at): (f64, f64, f64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
                let live =
                    crate::jobs::JobCost { cost_usd: cost, usd_per_hour: per_hour, at_ms: at, unpriced_nodes: 0 };
                more += (live.at(now_ms) - row_cost).max(0.0);
            }
            Ok(more)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_run_from_their_first_day_to_the_next_month_s() {
        // 2026-11-26T12:00:00Z
        let (from, to, name) = month_of(1_795_694_400_000);
        assert_eq!(name, "2026-11");
        assert_eq!(from, 1_793_491_200_000, "2026-11-01");
        assert_eq!(to, 1_796_083_200_000, "2026-12-01");
        let (from, to, name) = month_of(1_798_761_600_000 - 1);
        assert_eq!((name.as_str(), from, to), ("2026-12", 1_796_083_200_000, 1_798_761_600_000));
    }
}
