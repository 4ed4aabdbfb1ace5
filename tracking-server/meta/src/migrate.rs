//! Numbered schema migrations, one list per database: SQLite tracks the applied version in its
//! `user_version`, PostgreSQL in the table `schema_version`, under an advisory lock so servers
//! starting together apply each migration once.

use crate::{Error, Result};

/// (version, SQLite text, PostgreSQL text).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, include_str!("migrations/0001_core.sql"), include_str!("migrations/postgres/0001_core.sql")),
    (2, include_str!("migrations/0002_run_metadata.sql"), include_str!("migrations/postgres/0002_run_metadata.sql")),
    (3, include_str!("migrations/0003_artifacts.sql"), include_str!("migrations/postgres/0003_artifacts.sql")),
    (4, include_str!("migrations/0004_checkpoints.sql"), include_str!("migrations/postgres/0004_checkpoints.sql")),
    (5, include_str!("migrations/0005_registry.sql"), include_str!("migrations/postgres/0005_registry.sql")),
    (6, include_str!("migrations/0006_summary_mean.sql"), include_str!("migrations/postgres/0006_summary_mean.sql")),
    (7, include_str!("migrations/0007_sweeps.sql"), include_str!("migrations/postgres/0007_sweeps.sql")),
    (8, include_str!("migrations/0008_auth.sql"), include_str!("migrations/postgres/0008_auth.sql")),
    (9, include_str!("migrations/0009_roles.sql"), include_str!("migrations/postgres/0009_roles.sql")),
    (10, include_str!("migrations/0010_logged_models.sql"), include_str!("migrations/postgres/0010_logged_models.sql")),
    (
        11,
        include_str!("migrations/0011_runless_logged_models.sql"),
        include_str!("migrations/postgres/0011_runless_logged_models.sql"),
    ),
    (12, include_str!("migrations/0012_saved_views.sql"), include_str!("migrations/postgres/0012_saved_views.sql")),
    (13, include_str!("migrations/0013_run_revision.sql"), include_str!("migrations/postgres/0013_run_revision.sql")),
    (14, include_str!("migrations/0014_run_purges.sql"), include_str!("migrations/postgres/0014_run_purges.sql")),
    (15, include_str!("migrations/0015_replicas.sql"), include_str!("migrations/postgres/0015_replicas.sql")),
    (16, include_str!("migrations/0016_jobs.sql"), include_str!("migrations/postgres/0016_jobs.sql")),
    (17, include_str!("migrations/0017_report.sql"), include_str!("migrations/postgres/0017_report.sql")),
    (18, include_str!("migrations/0018_prices.sql"), include_str!("migrations/postgres/0018_prices.sql")),
    (19, include_str!("migrations/0019_report_rollup.sql"), include_str!("migrations/postgres/0019_report_rollup.sql")),
    (20, include_str!("migrations/0020_media.sql"), include_str!("migrations/postgres/0020_media.sql")),
    (
        21,
        include_str!("migrations/0021_media_histograms.sql"),
        include_str!("migrations/postgres/0021_media_histograms.sql"),
    ),
    (
        22,
        include_str!("migrations/0022_project_settings.sql"),
        include_str!("migrations/postgres/0022_project_settings.sql"),
    ),
    (
        23,
        include_str!("migrations/0023_media_collection.sql"),
        include_str!("migrations/postgres/0023_media_collection.sql"),
    ),
    (
        24,
        include_str!("migrations/0024_table_part_writers.sql"),
        include_str!("migrations/postgres/0024_table_part_writers.sql"),
    ),
    (
        25,
        include_str!("migrations/0025_numeric_text_params.sql"),
        include_str!("migrations/postgres/0025_numeric_text_params.sql"),
    ),
    (
        26,
        include_str!("migrations/0026_attempt_evidence.sql"),
        include_str!("migrations/postgres/0026_attempt_evidence.sql"),
    ),
    (27, include_str!("migrations/0027_spend_ledger.sql"), include_str!("migrations/postgres/0027_spend_ledger.sql")),
    (
        28,
        include_str!("migrations/0028_interval_prices.sql"),
        include_str!("migrations/postgres/0028_interval_prices.sql"),
    ),
    (29, include_str!("migrations/0029_alerts.sql"), include_str!("migrations/postgres/0029_alerts.sql")),
    (30, include_str!("migrations/0030_run_stop.sql"), include_str!("migrations/postgres/0030_run_stop.sql")),
    (31, include_str!("migrations/0031_alert_rules.sql"), include_str!("migrations/postgres/0031_alert_rules.sql")),
    (32, include_str!("migrations/0032_alert_reads.sql"), include_str!("migrations/postgres/0032_alert_reads.sql")),
    (
        33,
        include_str!("migrations/0033_installation_rules.sql"),
        include_str!("migrations/postgres/0033_installation_rules.sql"),
    ),
    (34, include_str!("migrations/0034_run_color.sql"), include_str!("migrations/postgres/0034_run_color.sql")),
];

/// The newest schema version this build knows.
pub fn newest() -> i64 {
    MIGRATIONS.last().map(|m| m.0).unwrap_or(0)
}

fn refuse_newer(current: i64) -> Result<()> {
    let newest = newest();
    if current > newest {
        return Err(Error::Corrupt(format!(
            "the database is at schema version {current}, newer than this build knows ({newest}); run a newer trainlog"
        )));
    }
    Ok(())
}

pub(crate) fn apply_sqlite(conn: &mut rusqlite::Connection) -> Result<()> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    refuse_newer(current)?;
    for (version, sql, _) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
    }
    Ok(())
}

/// Any number fixed for this purpose: the advisory lock taken while migrating.
const MIGRATION_LOCK: i64 = 0x7472_6169_6e6c_6f67;

/// The schema version of a PostgreSQL database (0 when it has none yet).
pub(crate) fn postgres_version(client: &mut postgres::Client) -> Result<i64> {
    let exists: bool = client.query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])?.try_get(0)?;
    if !exists {
        return Ok(0);
    }
    Ok(client.query_one("SELECT version FROM schema_version", &[])?.try_get(0)?)
}

/// Applies pending migrations in one transaction; answers the version the database is at.
pub(crate) fn apply_postgres(client: &mut postgres::Client) -> Result<i64> {
    let current = postgres_version(client)?;
    refuse_newer(current)?;
    if current == newest() {
        return Ok(current);
    }
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")?;
    let mut current: i64 = match tx.query_opt("SELECT version FROM schema_version", &[])? {
        Some(row) => row.try_get(0)?,
        None => {
            tx.execute("INSERT INTO schema_version (version) VALUES (0)", &[])?;
            0
        }
    };
    refuse_newer(current)?;
    let pending: Vec<_> = MIGRATIONS.iter().filter(|m| m.0 > current).collect();
    for (version, _, sql) in pending {
        tx.batch_execute(sql)?;
        tx.execute("UPDATE schema_version SET version = $1", &[version])?;
        current = *version;
    }
    tx.commit()?;
    Ok(current)
}

#[cfg(test)]
mod tests {
    use crate::db::{Dialect, Value};
    use trainlog_schema::ParamValue;

    /// Migration 0025 gives a stored text param the number the server gives a new one: the SQL
    /// of each database and `ParamValue::search_number` agree on every sample.
    #[test]
    fn numbers_written_as_text_get_the_same_number_from_the_migration_as_from_the_server() {
        let samples = [
            "0.01",
            "1e-3",
            "128",
            "-5",
            "0",
            "-0.5",
            "1E+2",
            "3.0e10",
            "9.99e307",
            "1e308",
            "1e400",
            "01",
            "+1",
            ".5",
            "1.",
            "1e",
            "-",
            "nan",
            "NaN",
            "inf",
            "Infinity",
            " 1",
            "1 ",
            "1_000",
            "0x10",
            "true",
            "abc",
            "",
            "12345678901234567890123456789012345678901",
            "1234567890123456789012345678901234567890",
        ];
        let dir = tempfile::tempdir().unwrap();
        let store = crate::test_store(dir.path());
        store
            .write(|tx| {
                for (i, value) in samples.iter().enumerate() {
                    tx.exec(
                        "INSERT INTO params (run_id, key, type, value, num) VALUES (?1, ?2, 'str', ?3, NULL)",
                        &[Value::Text("r".into()), Value::Text(format!("k{i}")), Value::Text((*value).into())],
                    )?;
                }
                let sql = super::MIGRATIONS.iter().find(|m| m.0 == 25).unwrap();
                tx.batch(if tx.dialect() == Dialect::Postgres { sql.2 } else { sql.1 })
            })
            .unwrap();
        let nums = store
            .read(|db| {
                samples
                    .iter()
                    .enumerate()
                    .map(|(i, _)| {
                        let row = db.row("SELECT num FROM params WHERE key = ?1", &[Value::Text(format!("k{i}"))])?;
                        row.unwrap().get::<Option<f64>>(0)
                    })
                    .collect::<crate::Result<Vec<_>>>()
            })
            .unwrap();
        for (value, num) in samples.iter().zip(nums) {
            assert_eq!(num, ParamValue::Str((*value).into()).search_number(), "{value:?}");
        }
        assert_eq!(ParamValue::Str("1e-3".into()).search_number(), Some(0.001));
        assert_eq!(ParamValue::Str("nan".into()).search_number(), None);
    }

    /// A new run takes the palette's next colour in its project; migration 0034 gives runs stored
    /// before it the colours they would have been given, in the order they started.
    #[test]
    fn runs_take_the_palette_in_their_projects_order_and_the_migration_agrees() {
        use crate::{NewRun, RunUpdate};
        use trainlog_schema::{palette_color, ProjectName, RunColor};
        let dir = tempfile::tempdir().unwrap();
        let store = crate::test_store(dir.path());
        let mut made = Vec::new();
        for (i, project) in ["a", "a", "b", "a", "b"].iter().enumerate() {
            let new = NewRun {
                project: Some(ProjectName::parse("project", project).unwrap()),
                start_ms: Some(1_000 + i as i64),
                ..NewRun::default()
            };
            made.push(store.create_run(&new).unwrap().0);
        }
        let colors: Vec<_> = made.iter().map(|r| r.color.clone()).collect();
        let want = [palette_color(0), palette_color(1), palette_color(0), palette_color(2), palette_color(1)];
        assert_eq!(colors, want);
        let sql = super::MIGRATIONS.iter().find(|m| m.0 == 34).unwrap();
        store
            .write(|tx| {
                tx.exec("UPDATE runs SET color = NULL", &[])?;
                let text = if tx.dialect() == Dialect::Postgres { sql.2 } else { sql.1 };
                tx.batch(&text[text.find("UPDATE runs").unwrap()..])
            })
            .unwrap();
        let again: Vec<_> = made.iter().map(|r| store.run(&r.id).unwrap().color).collect();
        assert_eq!(again, want);
        // The project's count goes on: the next run of `a` takes the palette's fourth colour.
        let next = NewRun { project: Some(ProjectName::parse("project", "a").unwrap()), ..NewRun::default() };
        assert_eq!(store.create_run(&next).unwrap().0.color, palette_color(3));
        let chosen = RunColor::parse("color", "#123ABC").unwrap();
        store.update_run(&made[0].id, &RunUpdate { color: Some(chosen), ..RunUpdate::default() }).unwrap();
        assert_eq!(store.run(&made[0].id).unwrap().color, "#123abc");
    }
}
