//! Numbered schema migrations, tracked in SQLite's `user_version`.

use crate::{Error, Result};
use rusqlite::Connection;

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("migrations/0001_core.sql")),
    (2, include_str!("migrations/0002_run_metadata.sql")),
    (3, include_str!("migrations/0003_artifacts.sql")),
    (4, include_str!("migrations/0004_checkpoints.sql")),
    (5, include_str!("migrations/0005_registry.sql")),
    (6, include_str!("migrations/0006_summary_mean.sql")),
    (7, include_str!("migrations/0007_sweeps.sql")),
    (8, include_str!("migrations/0008_auth.sql")),
    (9, include_str!("migrations/0009_roles.sql")),
    (10, include_str!("migrations/0010_logged_models.sql")),
    (11, include_str!("migrations/0011_runless_logged_models.sql")),
    (12, include_str!("migrations/0012_saved_views.sql")),
    (13, include_str!("migrations/0013_run_revision.sql")),
    (14, include_str!("migrations/0014_run_purges.sql")),
];

pub(crate) fn apply(conn: &mut Connection) -> Result<()> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let newest = MIGRATIONS.last().map(|m| m.0).unwrap_or(0);
    if current > newest {
        return Err(Error::Corrupt(format!(
            "the database is at schema version {current}, newer than this build knows ({newest})"
        )));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
    }
    Ok(())
}
