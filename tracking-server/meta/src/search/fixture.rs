//! A small SQLite database of runs, params, tags and metric summaries that searches run against in tests.

use super::SearchQuery;
use rusqlite::{params, params_from_iter, Connection};

pub(super) const SCHEMA: &str = "
    CREATE TABLE runs (id TEXT PRIMARY KEY, project_id INTEGER NOT NULL, name TEXT NOT NULL, status TEXT NOT NULL,
      start_ms INTEGER NOT NULL, end_ms INTEGER, user TEXT NOT NULL DEFAULT '', host TEXT NOT NULL DEFAULT '',
      group_name TEXT NOT NULL DEFAULT '', parent_id TEXT, notes TEXT NOT NULL DEFAULT '',
      deleted INTEGER NOT NULL DEFAULT 0, updated_ms INTEGER NOT NULL, revision INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX runs_by_project ON runs(project_id, start_ms);
    CREATE TABLE params (run_id TEXT NOT NULL, key TEXT NOT NULL, type TEXT NOT NULL, value TEXT NOT NULL, num REAL,
      PRIMARY KEY (run_id, key)) WITHOUT ROWID;
    CREATE INDEX params_by_key ON params(key, num);
    CREATE TABLE tags (run_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (run_id, key)) WITHOUT ROWID;
    CREATE TABLE metric_summaries (run_id TEXT NOT NULL, key TEXT NOT NULL, last REAL, last_step INTEGER NOT NULL,
      last_ms INTEGER NOT NULL, min REAL, max REAL, count INTEGER NOT NULL, sum REAL,
      sum_count INTEGER NOT NULL DEFAULT 0, mean REAL GENERATED ALWAYS AS (sum / NULLIF(sum_count, 0)) VIRTUAL,
      PRIMARY KEY (run_id, key)) WITHOUT ROWID;
    CREATE INDEX metric_summaries_by_key ON metric_summaries(key, last);
";

struct RunRow {
    id: &'static str,
    project: i64,
    name: &'static str,
    status: &'static str,
    start: i64,
    end: Option<i64>,
    user: &'static str,
    group: &'static str,
    parent: Option<&'static str>,
    notes: &'static str,
    deleted: bool,
}

fn insert_run(conn: &Connection, run: RunRow) {
    conn.execute(
        "INSERT INTO runs (id, project_id, name, status, start_ms, end_ms, user, host, group_name, parent_id, notes, deleted, updated_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'host', ?8, ?9, ?10, ?11, 0)",
        params![run.id, run.project, run.name, run.status, run.start, run.end, run.user, run.group, run.parent, run.notes, run.deleted],
    )
    .unwrap();
}

pub(super) fn insert_param(conn: &Connection, run: &str, key: &str, type_name: &str, value: &str, num: Option<f64>) {
    conn.execute(
        "INSERT INTO params (run_id, key, type, value, num) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![run, key, type_name, value, num],
    )
    .unwrap();
}

pub(super) fn insert_tag(conn: &Connection, run: &str, key: &str, value: &str) {
    conn.execute("INSERT INTO tags (run_id, key, value) VALUES (?1, ?2, ?3)", params![run, key, value]).unwrap();
}

pub(super) fn insert_summary(
    conn: &Connection,
    run: &str,
    key: &str,
    last: Option<f64>,
    step: i64,
    min: Option<f64>,
    max: Option<f64>,
) {
    conn.execute(
        "INSERT INTO metric_summaries (run_id, key, last, last_step, last_ms, min, max, count, sum, sum_count)
         VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, 10, (?5 + ?6) * 5, 10)",
        params![run, key, last, step, min, max],
    )
    .unwrap();
}

/// Project 1: r1..r4 live, r5 deleted; project 2: r6.
pub(super) fn fixture() -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    let base = RunRow {
        id: "",
        project: 1,
        name: "",
        status: "finished",
        start: 0,
        end: None,
        user: "alice",
        group: "",
        parent: None,
        notes: "",
        deleted: false,
    };
    insert_run(
        &conn,
        RunRow {
            id: "r1",
            name: "resnet-a",
            start: 1000,
            end: Some(5000),
            group: "resnets",
            notes: "Baseline run",
            ..base
        },
    );
    insert_run(
        &conn,
        RunRow { id: "r2", name: "resnet-b", start: 2000, end: Some(3000), user: "bob", group: "resnets", ..base },
    );
    insert_run(&conn, RunRow { id: "r3", name: "vit-a", status: "running", start: 3000, group: "vits", ..base });
    insert_run(
        &conn,
        RunRow {
            id: "r4",
            name: "vit-b",
            status: "failed",
            start: 4000,
            end: Some(4500),
            user: "carol",
            group: "vits",
            parent: Some("r1"),
            ..base
        },
    );
    insert_run(&conn, RunRow { id: "r5", name: "deleted-run", start: 5000, end: Some(6000), deleted: true, ..base });
    insert_run(&conn, RunRow { id: "r6", project: 2, name: "other", start: 500, end: Some(900), ..base });

    insert_param(&conn, "r1", "lr", "float", "0.001", Some(0.001));
    insert_param(&conn, "r1", "optimizer", "str", "adam", None);
    insert_param(&conn, "r1", "depth", "int", "50", Some(50.0));
    insert_param(&conn, "r1", "pretrained", "bool", "true", Some(1.0));
    insert_param(&conn, "r1", "version", "str", "1.0", None);
    insert_param(&conn, "r2", "lr", "float", "0.01", Some(0.01));
    insert_param(&conn, "r2", "optimizer", "str", "sgd", None);
    insert_param(&conn, "r2", "depth", "int", "18", Some(18.0));
    insert_param(&conn, "r2", "pretrained", "bool", "false", Some(0.0));
    insert_param(&conn, "r2", "version", "int", "1", Some(1.0));
    insert_param(&conn, "r3", "lr", "float", "0.001", Some(0.001));
    insert_param(&conn, "r3", "optimizer", "str", "Adam", None);
    insert_param(&conn, "r3", "depth", "int", "12", Some(12.0));
    insert_param(&conn, "r3", "version", "str", "2", None);
    insert_param(&conn, "r4", "lr", "float", "0.001", Some(0.001));
    insert_param(&conn, "r4", "optimizer", "str", "adamw", None);
    insert_param(&conn, "r5", "lr", "float", "0.001", Some(0.001));
    insert_param(&conn, "r6", "lr", "float", "0.001", Some(0.001));

    insert_tag(&conn, "r1", "team", "vision");
    insert_tag(&conn, "r1", "stage", "prod");
    insert_tag(&conn, "r2", "team", "vision");
    insert_tag(&conn, "r3", "team", "NLP");
    insert_tag(&conn, "r4", "city", "Édimbourg");
    insert_tag(&conn, "r5", "team", "vision");

    insert_summary(&conn, "r1", "val_loss", Some(0.25), 100, Some(0.2), Some(0.9));
    insert_summary(&conn, "r1", "train/loss", Some(0.1), 100, Some(0.1), Some(2.0));
    insert_summary(&conn, "r2", "val_loss", Some(0.35), 50, Some(0.3), Some(1.2));
    insert_summary(&conn, "r2", "train/loss", Some(0.2), 50, Some(0.2), Some(2.0));
    insert_summary(&conn, "r2", "val loss", Some(0.7), 50, Some(0.7), Some(0.7));
    insert_summary(&conn, "r3", "val_loss", None, 10, Some(0.5), Some(1.5));
    insert_summary(&conn, "r3", "train/loss", Some(0.4), 10, Some(0.4), Some(2.0));
    insert_summary(&conn, "r4", "train/loss", Some(0.8), 5, Some(0.8), Some(2.0));
    insert_summary(&conn, "r5", "val_loss", Some(0.1), 100, Some(0.1), Some(0.5));
    insert_summary(&conn, "r6", "val_loss", Some(0.05), 100, Some(0.05), Some(0.5));
    conn
}

/// The ids a query selects.
pub(super) fn execute(conn: &Connection, query: &SearchQuery) -> Vec<String> {
    let mut statement = conn.prepare(&query.sql).unwrap();
    let rows = statement.query_map(params_from_iter(query.params.iter()), |row| row.get::<_, String>(0)).unwrap();
    rows.collect::<rusqlite::Result<Vec<_>>>().unwrap()
}
