//! The commands that act on a server's data folder directly (`users`, `keys`, `grant`, `ledger`): they
//! open its metadata database, as the server does, while it may be running.

use crate::{KeysCommand, LedgerCommand, UsersCommand};
use std::path::{Path, PathBuf};

/// The SQLite database of the data folder `data`. A folder that does not exist, or holds no
/// database, is refused rather than made: the command would act on a server that is not there.
fn existing_database(data: &Path) -> Result<PathBuf, String> {
    let db = data.join("trainlog.db");
    if !data.is_dir() {
        return Err(format!(
            "no data folder at {}: run this where the server keeps its data (`trainlog server` uses ./trainlog-data), \
             or name the folder with --data",
            data.display()
        ));
    }
    if !db.is_file() {
        return Err(format!(
            "{} holds no trainlog.db: name the server's data folder with --data, or its database with --meta \
             (a server whose metadata is in PostgreSQL)",
            data.display()
        ));
    }
    Ok(db)
}

/// Opens the metadata database `--meta` names, else the data folder's, as the server does (it
/// may be running).
fn open_meta(data: &Path, meta: Option<&str>) -> Result<trainlog_meta::MetaStore, String> {
    let url = match meta {
        Some(url) => trainlog_meta::MetaUrl::parse(url).map_err(|e| e.to_string())?,
        None => trainlog_meta::MetaUrl::Sqlite(existing_database(data)?),
    };
    trainlog_meta::MetaStore::connect(&url).map_err(|e| format!("opening {}: {e}", url.redacted()))
}

pub(crate) fn users(data: &Path, meta: Option<&str>, action: UsersCommand) -> Result<String, String> {
    let meta = open_meta(data, meta)?;
    Ok(match action {
        UsersCommand::Add { name, admin } => {
            let key = meta.add_user(&name, admin).map_err(|e| e.to_string())?;
            let role = if admin { "an admin" } else { "a user" };
            format!("created {role} {name:?}; its API key (shown once; key id {}):\n{}", key.id, key.key)
        }
        UsersCommand::List => {
            let mut out = String::from("NAME\tADMIN\tKEYS\tCREATED\n");
            for u in meta.users().map_err(|e| e.to_string())? {
                out += &format!(
                    "{}\t{}\t{}\t{}\n",
                    u.name,
                    if u.is_admin { "yes" } else { "no" },
                    u.active_keys,
                    time_text(Some(u.created_ms))
                );
            }
            out
        }
        UsersCommand::Remove { name } => {
            meta.remove_user(&name).map_err(|e| e.to_string())?;
            format!("removed user {name:?} and their keys")
        }
    })
}

pub(crate) fn grant(
    (data, meta): (&Path, Option<&str>),
    user: &str,
    name: &str,
    role: &str,
    model: bool,
) -> Result<String, String> {
    let meta = open_meta(data, meta)?;
    let role = trainlog_meta::Role::parse("role", role).map_err(|e| e.to_string())?;
    let scope = if model { trainlog_meta::Scope::Model } else { trainlog_meta::Scope::Project };
    meta.grant(scope, name, user, role).map_err(|e| e.to_string())?;
    Ok(format!("{user} now has the {role} role on {} {name:?}", scope.noun()))
}

pub(crate) fn keys(data: &Path, meta: Option<&str>, action: KeysCommand) -> Result<String, String> {
    let meta = open_meta(data, meta)?;
    Ok(match action {
        KeysCommand::Create { user } => {
            let key = meta.create_key(&user).map_err(|e| e.to_string())?;
            format!("a new API key for {user:?} (shown once; key id {}):\n{}", key.id, key.key)
        }
        KeysCommand::Revoke { key_id } => {
            meta.revoke_key(&key_id).map_err(|e| e.to_string())?;
            format!("revoked key {key_id}; it stops working at once")
        }
        KeysCommand::List { user } => {
            let mut out = String::from("KEY ID\tUSER\tCREATED\tLAST USED\tREVOKED\n");
            for k in meta.keys(user.as_deref()).map_err(|e| e.to_string())? {
                out += &format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    k.id,
                    k.user,
                    time_text(Some(k.created_ms)),
                    time_text(k.last_used_ms),
                    time_text(k.revoked_ms)
                );
            }
            out
        }
    })
}

pub(crate) fn ledger(data: &Path, meta: Option<&str>, action: LedgerCommand) -> Result<String, String> {
    let meta = open_meta(data, meta)?;
    Ok(match action {
        LedgerCommand::List => {
            let mut out = String::from("RUN\tPROJECT\tUSER\tSTARTED\tDELETED\tCOST_USD\tGPU_HOURS\n");
            for e in meta.spend_ledger().map_err(|e| e.to_string())? {
                let cost = e.cost_usd.map_or_else(|| "unpriced".to_owned(), |c| format!("{c:.2}"));
                out += &format!(
                    "{}\t{}\t{}\t{}\t{}\t{cost}\t{:.3}\n",
                    e.run_id,
                    e.project,
                    e.user,
                    time_text(Some(e.start_ms)),
                    time_text(Some(e.purged_ms)),
                    e.gpu_hours
                );
            }
            out
        }
        LedgerCommand::Forget { run_ids } => {
            let mut out = String::new();
            for id in run_ids {
                if !meta.forget_spend(&id).map_err(|e| e.to_string())? {
                    return Err(format!("{out}run {id} is not in the spend ledger (`trainlog ledger list` lists it)"));
                }
                out += &format!("forgot what run {id} spent\n");
            }
            out.trim_end().to_owned()
        }
    })
}

pub(crate) fn time_text(ms: Option<i64>) -> String {
    match ms {
        None => "-".into(),
        Some(ms) => {
            let secs = ms / 1000;
            let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
            let (y, m, d) = civil_from_days(days);
            format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
        }
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
