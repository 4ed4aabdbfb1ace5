//! PostgreSQL as the metadata database: `trainlog migrate`, the refusal of a newer schema,
//! `trainlog meta copy` from SQLite, and readiness when the database goes away. Needs the
//! PostgreSQL server `TRAINLOG_TEST_PG` names (scripts/test.sh starts a throwaway one).

use std::process::{Command, Output};
use trainlog_tests::{binary, fresh_postgres_database, json, postgres_server, TestServer, Value};

fn trainlog(args: &[&str]) -> Output {
    Command::new(binary()).args(args).env_remove("TRAINLOG_META").output().expect("trainlog runs")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn sql(url: &str, statement: &str) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("a connection to the test database");
    client.batch_execute(statement).expect("the statement runs");
}

#[test]
fn migrate_brings_a_database_to_this_schema_and_a_server_refuses_a_newer_one() {
    let url = fresh_postgres_database();
    let first = trainlog(&["migrate", "--meta", &url]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(text(&first).contains("schema version 0 → "), "{}", text(&first));
    let again = trainlog(&["migrate", "--meta", &url]);
    assert!(again.status.success() && text(&again).contains("this build's newest"), "{}", text(&again));

    sql(&url, "UPDATE schema_version SET version = 9999");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let refused = Command::new(binary())
        .args(["server", "--host", "127.0.0.1", "--port", "0", "--meta", &url, "--data"])
        .arg(&data)
        .env_remove("TRAINLOG_META")
        .output()
        .expect("trainlog runs");
    assert!(!refused.status.success());
    assert!(text(&refused).contains("schema version 9999, newer than this build knows"), "{}", text(&refused));
    let migrate = trainlog(&["migrate", "--meta", &url]);
    assert!(!migrate.status.success() && text(&migrate).contains("newer than this build knows"), "{}", text(&migrate));
}

/// Searches whose answers must not depend on the database.
fn searches() -> Vec<Value> {
    vec![
        json!({"project": "vision"}),
        json!({"project": "vision", "filter": "params.lr > 0.01", "order_by": ["metrics.loss asc"]}),
        json!({"project": "vision", "filter": "tags.team = 'a' and metrics.loss < 0.5", "order_by": ["params.lr desc"]}),
        json!({"project": "vision", "filter": "name like 'run-1%'", "order_by": ["name"]}),
        json!({"project": "vision", "filter": "name ilike 'RUN-2%'"}),
        json!({"project": "vision", "filter": "metrics.loss is null"}),
        json!({"project": "vision", "order_by": ["metrics.acc desc", "name asc"], "limit": 5}),
        json!({"project": "text", "filter": "params.opt = 'adam' or params.layers >= 4"}),
    ]
}

fn answers(s: &TestServer) -> Vec<Value> {
    searches()
        .iter()
        .map(|body| {
            let (status, answer) = s.post("/runs/search", body);
            assert_eq!(status, 200, "{body}: {answer}");
            answer
        })
        .collect()
}

#[test]
fn a_copied_installation_answers_every_search_as_before_and_keeps_working() {
    postgres_server();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = dir.path().join("meta.db");
    let sqlite_url = format!("sqlite://{}", sqlite.display());
    let mut s = TestServer::spawn_local_with(&["--meta", &sqlite_url]);
    for i in 0..24 {
        let project = if i % 3 == 0 { "text" } else { "vision" };
        let body = json!({
            "project": project,
            "name": format!("run-{i}"),
            "params": {"lr": 0.001 * f64::from(i), "opt": if i % 2 == 0 { "adam" } else { "sgd" }, "layers": i % 6},
            "tags": {"team": if i % 4 == 0 { "a" } else { "b" }},
        });
        let (status, run) = s.post("/runs", &body);
        assert_eq!(status, 201, "{run}");
        let id = run["id"].as_str().unwrap().to_owned();
        if i % 5 != 0 {
            let points: Vec<Value> = (0..10)
                .map(|step| json!({"key": "loss", "step": step, "value": 1.0 / f64::from(i + step + 1)}))
                .chain((0..10).map(|step| json!({"key": "acc", "step": step, "value": f64::from(i * step) / 100.0})))
                .collect();
            assert_eq!(s.log(&id, json!(points)).0, 200);
        }
    }
    let (status, _) = s.post("/projects", &json!({"name": "empty", "description": "nothing yet"}));
    assert_eq!(status, 201);
    s.flush();
    let before = answers(&s);
    let (status, report_before) = s.get("/report?by=project");
    assert_eq!(status, 200, "{report_before}");
    assert_eq!(report_before["total"]["runs"], 24, "{report_before}");
    assert!(before.iter().all(|a| !a["runs"].as_array().unwrap().is_empty() || a == &before[5]));
    assert!(s.terminate(), "the SQLite server stops cleanly");

    let postgres = fresh_postgres_database();
    let copied = trainlog(&["meta", "copy", "--from", &sqlite_url, "--to", &postgres]);
    assert!(copied.status.success(), "{}", text(&copied));
    assert!(text(&copied).contains("\nruns\t24\n"), "{}", text(&copied));

    let again = trainlog(&["meta", "copy", "--from", &sqlite_url, "--to", &postgres]);
    assert!(!again.status.success() && text(&again).contains("copy into an empty database"), "{}", text(&again));

    let data = s.data.clone();
    let mut p = TestServer::spawn_on_folder(data, &["--meta", &postgres]);
    assert_eq!(answers(&p), before, "PostgreSQL answers what SQLite answered");
    // What does not move with the clock (the period ends now).
    let steady = |report: &Value| -> Vec<Value> {
        let groups = report["groups"].as_array().unwrap().iter().chain([&report["total"]]);
        groups
            .map(|g| {
                json!([g["group"], g["runs"], g["cost_usd"], g["job_success_rate"], g["code_failures"], g["covers"]])
            })
            .collect()
    };
    let (_, report_after) = p.get("/report?by=project");
    assert_eq!(steady(&report_after), steady(&report_before), "the report over the copy: {report_after}");
    let (_, projects) = p.get("/projects");
    let names: Vec<&str> =
        projects["projects"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["empty", "text", "vision"]);

    // New rows get ids past the copied ones.
    let (status, created) = p.post("/projects", &json!({"name": "after-the-move"}));
    assert_eq!(status, 201, "{created}");
    let ids: Vec<i64> = projects["projects"].as_array().unwrap().iter().map(|p| p["id"].as_i64().unwrap()).collect();
    assert!(ids.iter().all(|id| *id < created["id"].as_i64().unwrap()), "{created} after {ids:?}");
    let run = p.create_run("vision", "after-the-move");
    assert_eq!(p.log(&run, json!([{"key": "loss", "step": 0, "value": 0.25}])).0, 200);
    assert_eq!(p.series(&run, "loss").len(), 1);
    assert!(p.terminate());
}

#[test]
fn readiness_names_the_database_while_it_is_away_and_liveness_does_not_care() {
    let url = fresh_postgres_database();
    let database = url.rsplit('/').next().unwrap().to_owned();
    let s = TestServer::spawn_local_with(&["--meta", &url]);
    let (status, ready) = s.get("/health/ready");
    assert_eq!((status, ready["database"].as_str(), ready["store"].as_str()), (200, Some("ok"), Some("ok")), "{ready}");

    let admin = postgres_server();
    // Committed first, so no connection opens after it; then the server's backends are ended,
    // again until none is left: pg_terminate_backend only signals, and the server's pool may
    // have opened one while the change was not yet committed.
    sql(&admin, &format!("ALTER DATABASE {database} ALLOW_CONNECTIONS false"));
    let mut client = postgres::Client::connect(&admin, postgres::NoTls).expect("a connection to the test server");
    for _ in 0..100 {
        client
            .execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", &[&database])
            .expect("pg_terminate_backend");
        let left: i64 = client
            .query_one("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = $1", &[&database])
            .expect("pg_stat_activity")
            .get(0);
        if left == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (status, ready) = s.get("/health/ready");
    assert_eq!(
        (status, ready["status"].as_str(), ready["store"].as_str()),
        (503, Some("unavailable"), Some("ok")),
        "{ready}"
    );
    assert_ne!(ready["database"], "ok");
    assert_eq!(s.get("/health/live").0, 200);
    let (status, body) = s.post("/runs", &json!({"project": "p"}));
    assert_eq!(status, 503, "a write while the database is away: {body}");

    sql(&admin, &format!("ALTER DATABASE {database} ALLOW_CONNECTIONS true"));
    let (status, ready) = s.get("/health/ready");
    assert_eq!(status, 200, "{ready}");
    assert_eq!(s.post("/runs", &json!({"project": "p"})).0, 201);
}
