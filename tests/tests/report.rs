//! The training report against the real binary: an installation of a few hundred runs over eight
//! weeks (three projects, five users), made through the API as the SDKs make it (jobs joined by
//! their processes, spot and on-demand attempts, preemptions, lost attempts, code failures, GPU
//! series with known busy and idle stretches, Slurm submit times, sweep trials with known queue
//! waits, checkpoint restores that work and fail), and every figure of the report checked
//! against a computation by hand, for several filters and breakdowns.

use std::collections::BTreeMap;
use trainlog_tests::{json, urlencode, TestServer, Value};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const WEEK: i64 = 7 * DAY;
const PROJECTS: [&str; 3] = ["vision", "nlp", "speech"];
const USERS: [&str; 5] = ["ana", "ben", "chen", "dara", "eli"];
const RUNS: usize = 240;

/// One run as the fixture made it, with what the report should count for it.
#[derive(Debug, Clone)]
struct Expected {
    project: String,
    user: String,
    team: String,
    lr: f64,
    start_ms: i64,
    /// finished, code, infra or killed.
    outcome: &'static str,
    pricing: &'static str,
    gpu_hours: f64,
    spot_gpu_hours: f64,
    cost: Option<f64>,
    sampled: bool,
    /// Active GPU-hours above 10 % and above 15 %.
    active10: f64,
    active15: f64,
    queue_ms: Option<i64>,
    restores: i64,
    restores_ok: i64,
}

/// One start of a run's job: minutes from the run's start, spot or not, and how it ended (None:
/// its processes went silent and the next attempt found it lost).
struct Attempt {
    from: i64,
    to: i64,
    spot: bool,
    end: Option<(&'static str, Option<&'static str>)>,
}

fn plan(class: usize) -> (Vec<Attempt>, &'static str) {
    let a = |from, to, spot, end| Attempt { from, to, spot, end };
    match class {
        0 => (vec![a(0, 60, true, Some(("preempted", None))), a(60, 180, true, Some(("finished", None)))], "finished"),
        1 => (vec![a(0, 30, false, Some(("failed", Some("ValueError: loss is NaN"))))], "code"),
        2 => (vec![a(0, 90, true, Some(("preempted", None)))], "infra"),
        3 => (vec![a(0, 120, false, Some(("finished", None)))], "finished"),
        4 => (vec![a(0, 60, false, None), a(60, 150, false, Some(("finished", None)))], "finished"),
        5 => (vec![a(0, 45, false, Some(("failed", Some("exited: killed by SIGKILL (OOM killer)"))))], "infra"),
        6 => (vec![a(0, 120, true, Some(("finished", None)))], "finished"),
        _ => (vec![a(0, 20, false, Some(("killed", None)))], "killed"),
    }
}

fn post_ok(s: &TestServer, path: &str, body: &Value) -> Value {
    let (status, answer) = s.post(path, body);
    assert!(status == 200 || status == 201, "POST {path}: {status} {answer}");
    answer
}

/// A run's GPUs and how busy they were: busy (85 %) when the minute modulo 4 is below
/// `busy_of_4`, else idle at `idle`.
struct Gpus {
    nodes: i64,
    per_node: i64,
    busy_of_4: i64,
    idle: f64,
}

/// The GPU series of one run: a sample a minute per GPU.
fn log_gpu_series(s: &TestServer, run: &str, start: i64, minutes: i64, g: &Gpus) {
    let mut points = Vec::new();
    for node in 0..g.nodes {
        for gpu in 0..g.per_node {
            let key =
                if g.nodes > 1 { format!("sys/node/{node}/gpu.{gpu}.util") } else { format!("sys/gpu.{gpu}.util") };
            for m in 0..minutes {
                let value = if m % 4 < g.busy_of_4 { 85.0 } else { g.idle };
                points.push(json!({"key": key, "step": m, "value": value, "timestamp": start + m * MINUTE}));
            }
        }
    }
    let (status, answer) = s.log(run, Value::Array(points));
    assert_eq!(status, 200, "{answer}");
}

/// Makes run `i` of the fixture, starting in week `i % 8` after `base`.
fn make_run(s: &TestServer, i: usize, base: i64) -> Expected {
    let (project, user) = (PROJECTS[i % 3], USERS[i % 5]);
    let class = (i / 8) % 8;
    let start = base + (i % 8) as i64 * WEEK + ((i / 8) % 7) as i64 * DAY + (1 + i % 20) as i64 * HOUR;
    let cpu_only = i % 19 == 4;
    let gpus: i64 = if cpu_only { 0 } else { [1, 2, 4, 8][i % 4] };
    let nodes: i64 = if i.is_multiple_of(7) { 2 } else { 1 };
    let priced = !i.is_multiple_of(11);
    let gpu_price = [2.0, 3.0, 4.0][i % 3];
    let node_price = if cpu_only { 0.5 } else { gpu_price * gpus as f64 };
    let sampled = !cpu_only && i % 17 != 3;
    let busy_of_4 = 1 + (i % 4) as i64;
    let idle = if i.is_multiple_of(5) { 12.0 } else { 3.0 };
    let team = if i.is_multiple_of(2) { "red" } else { "blue" };
    let lr = [0.1, 0.01, 0.001][(i / 3) % 3];
    let slurm = class == 3 && i.is_multiple_of(2);
    let queue_ms = slurm.then(|| (5 + 5 * (i % 3) as i64) * MINUTE);
    let id = format!("run-{i:03}");
    let (attempts, outcome) = plan(class);

    let mut created = false;
    for (number, a) in attempts.iter().enumerate() {
        let started = start + a.from * MINUTE;
        for node in 0..nodes {
            let mut process = json!({
                "rank": node, "world_size": nodes, "node_rank": node, "node_count": nodes,
                "host": format!("{id}-a{number}-n{node}"), "launcher": if slurm { "slurm" } else { "torchrun" },
                "job_id": format!("job-{i}"), "restart": number.to_string(), "cloud": "aws", "spot": a.spot,
                "started_ms": started,
                "node": {"gpus": gpus, "gpu_names": vec!["NVIDIA H100 80GB HBM3"; gpus as usize],
                         "usd_per_hour": if priced { json!(node_price) } else { Value::Null }},
            });
            if let Some(q) = queue_ms {
                process["submitted_ms"] = json!(start - q);
            }
            let body = if created {
                json!({"id": id, "resume": true, "process": process})
            } else {
                json!({"id": id, "project": project, "name": format!("train {i}"), "user": user, "start_time": start,
                       "tags": {"team": team}, "params": {"lr": lr}, "process": process})
            };
            created = true;
            post_ok(s, "/runs", &body);
        }
        let ended = start + a.to * MINUTE;
        for node in 0..nodes {
            match a.end {
                Some((status, reason)) => {
                    let process = json!({"attempt": number + 1, "rank": node, "reason": reason});
                    post_ok(
                        s,
                        &format!("/runs/{id}/finish"),
                        &json!({"status": status, "end_time": ended, "process": process}),
                    );
                }
                None => {
                    let process = json!({"attempt": number + 1, "rank": node, "time": ended});
                    post_ok(s, &format!("/runs/{id}/heartbeat"), &process);
                }
            }
        }
    }
    let minutes = attempts.last().map_or(0, |a| a.to);
    if sampled {
        log_gpu_series(s, &id, start, minutes, &Gpus { nodes, per_node: gpus, busy_of_4, idle });
    }
    let (mut restores, mut restores_ok) = (0, 0);
    if class == 0 {
        post_ok(s, &format!("/runs/{id}/checkpoints"), &json!({"step": 59, "name": "ckpt", "files": []}));
        post_ok(s, &format!("/runs/{id}/checkpoints/ckpt/restores"), &json!({"ok": true, "restored_by": id}));
        (restores, restores_ok) = (1, 1);
        if i.is_multiple_of(3) {
            let failed = json!({"ok": false, "error": "model.pt: sha256 does not match"});
            post_ok(s, &format!("/runs/{id}/checkpoints/ckpt/restores"), &failed);
            restores += 1;
        }
    }

    let gpu_minutes = (nodes * gpus * minutes) as f64;
    let busy_minutes = (0..minutes).filter(|m| m % 4 < busy_of_4).count() as f64;
    let per_gpu = (nodes * gpus) as f64;
    let spot_minutes: i64 = attempts.iter().filter(|a| a.spot).map(|a| a.to - a.from).sum();
    Expected {
        project: project.into(),
        user: user.into(),
        team: team.into(),
        lr,
        start_ms: start,
        outcome,
        pricing: match (spot_minutes, minutes) {
            (0, _) => "on_demand",
            (s, m) if s == m => "spot",
            _ => "mixed",
        },
        gpu_hours: gpu_minutes / 60.0,
        spot_gpu_hours: (nodes * gpus * spot_minutes) as f64 / 60.0,
        cost: priced.then(|| nodes as f64 * node_price * minutes as f64 / 60.0),
        sampled,
        active10: if !sampled {
            0.0
        } else if idle > 10.0 {
            gpu_minutes / 60.0
        } else {
            per_gpu * busy_minutes / 60.0
        },
        active15: if sampled { per_gpu * busy_minutes / 60.0 } else { 0.0 },
        queue_ms,
        restores,
        restores_ok,
    }
}

/// Six trials of a sweep whose processes start 1 to 6 minutes after the trial was made.
fn make_sweep_trials(s: &TestServer) -> Vec<Expected> {
    let config = "command: [\"python\", \"train.py\"]\nmethod: random\nmetric: {name: loss, goal: minimize}\n\
                  parameters:\n  lr: {values: [0.1, 0.01]}\n";
    let sweep = post_ok(s, "/sweeps", &json!({"config": config, "project": "vision", "name": "lr search"}));
    let id = sweep["id"].as_str().expect("a sweep id").to_owned();
    let mut out = Vec::new();
    for j in 0..6i64 {
        let trial = post_ok(s, &format!("/sweeps/{id}/next"), &json!({"agent": "a", "slot": "gpu:0", "gpus": 1}));
        let run = trial["run_id"].as_str().expect("a trial run").to_owned();
        let (_, trials) = s.get(&format!("/sweeps/{id}/trials"));
        let made = trials["trials"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["run_id"] == run.as_str()))
            .and_then(|t| t["created_time"].as_i64())
            .expect("the trial's creation");
        let (_, run_view) = s.get(&format!("/runs/{run}"));
        let wait = (j + 1) * MINUTE;
        let process = json!({"rank": 0, "world_size": 1, "host": format!("trial-{j}"), "launcher": "trainlog",
            "cloud": "aws", "spot": false, "started_ms": made + wait,
            "node": {"gpus": 1, "gpu_names": ["NVIDIA L4"], "usd_per_hour": 1.0}});
        post_ok(s, "/runs", &json!({"id": run, "resume": true, "process": process}));
        post_ok(
            s,
            &format!("/runs/{run}/finish"),
            &json!({"status": "finished", "end_time": made + wait + 30 * MINUTE, "process": {"attempt": 1, "rank": 0}}),
        );
        out.push(Expected {
            project: "vision".into(),
            user: run_view["user"].as_str().unwrap_or_default().into(),
            team: String::new(),
            lr: f64::NAN,
            start_ms: run_view["start_time"].as_i64().expect("a start"),
            outcome: "finished",
            pricing: "on_demand",
            gpu_hours: 0.5,
            spot_gpu_hours: 0.0,
            cost: Some(0.5),
            sampled: false,
            active10: 0.0,
            active15: 0.0,
            queue_ms: Some(wait),
            restores: 0,
            restores_ok: 0,
        });
    }
    out
}

fn close(actual: &Value, expected: Option<f64>, what: &str) {
    match (actual.as_f64(), expected) {
        (None, None) => {}
        (Some(a), Some(e)) => assert!((a - e).abs() <= 1e-9 * e.abs().max(1.0), "{what}: {a} != {e}"),
        (a, e) => panic!("{what}: {a:?} != {e:?} ({actual})"),
    }
}

fn ratio(top: f64, bottom: f64) -> Option<f64> {
    (bottom > 0.0).then(|| top / bottom)
}

/// Checks every figure of a group against the runs it should hold, computed here by hand.
fn check_group(group: &Value, runs: &[&Expected], weeks: f64, threshold: u32, what: &str) {
    let active = |e: &Expected| if threshold == 15 { e.active15 } else { e.active10 };
    let n = runs.len() as f64;
    assert_eq!(group["runs"].as_i64(), Some(runs.len() as i64), "{what}: runs");
    let sampled: Vec<&&Expected> = runs.iter().filter(|e| e.sampled && e.gpu_hours > 0.0).collect();
    let sampled_hours: f64 = sampled.iter().map(|e| e.gpu_hours).sum();
    let active_hours: f64 = sampled.iter().map(|e| active(e)).sum();
    close(&group["gpu_utilization_rate"], ratio(active_hours, sampled_hours), &format!("{what}: utilization"));
    close(
        &group["idle_gpu_hours"],
        (!sampled.is_empty()).then_some(sampled_hours - active_hours),
        &format!("{what}: idle GPU-hours"),
    );
    let queued: Vec<i64> = runs.iter().filter_map(|e| e.queue_ms).collect();
    close(
        &group["queue_wait_s"],
        (!queued.is_empty()).then(|| queued.iter().sum::<i64>() as f64 / queued.len() as f64 / 1000.0),
        &format!("{what}: queue wait"),
    );
    let priced: Vec<f64> = runs.iter().filter_map(|e| e.cost).collect();
    let cost: f64 = priced.iter().sum();
    close(&group["cost_usd"], (!priced.is_empty()).then_some(cost), &format!("{what}: cost"));
    close(
        &group["cost_per_experiment_usd"],
        (!priced.is_empty()).then(|| cost / priced.len() as f64),
        &format!("{what}: cost per experiment"),
    );
    let priced_sampled: Vec<&&Expected> = sampled.iter().filter(|e| e.cost.is_some()).copied().collect();
    close(
        &group["cost_per_gpu_hour_usd"],
        ratio(priced_sampled.iter().filter_map(|e| e.cost).sum(), priced_sampled.iter().map(|e| active(e)).sum()),
        &format!("{what}: cost per active GPU-hour"),
    );
    let idle_usd: f64 = priced_sampled.iter().map(|e| e.cost.unwrap_or(0.0) * (1.0 - active(e) / e.gpu_hours)).sum();
    close(&group["inputs"]["idle_usd"], Some(idle_usd), &format!("{what}: idle dollars"));
    close(
        &group["spot_savings_rate"],
        ratio(runs.iter().map(|e| e.spot_gpu_hours).sum(), runs.iter().map(|e| e.gpu_hours).sum()),
        &format!("{what}: spot share"),
    );
    let count = |o: &str| runs.iter().filter(|e| e.outcome == o).count() as f64;
    let ended = count("finished") + count("code") + count("infra");
    close(&group["job_success_rate"], ratio(count("finished"), ended), &format!("{what}: success"));
    assert_eq!(group["infra_failures"].as_f64(), Some(count("infra")), "{what}: infra failures");
    assert_eq!(group["code_failures"].as_f64(), Some(count("code")), "{what}: code failures");
    close(
        &group["checkpoint_restore_rate"],
        ratio(
            runs.iter().map(|e| e.restores_ok).sum::<i64>() as f64,
            runs.iter().map(|e| e.restores).sum::<i64>() as f64,
        ),
        &format!("{what}: restore rate"),
    );
    let mut users: Vec<&str> = runs.iter().map(|e| e.user.as_str()).collect();
    users.sort_unstable();
    users.dedup();
    close(
        &group["experiments_per_user_week"],
        (n > 0.0 && weeks > 0.0).then(|| n / users.len() as f64 / weeks),
        &format!("{what}: experiments per user-week"),
    );
    // Whatever is null says why.
    for (name, value) in group.as_object().expect("a group") {
        if value.is_null() && !name.starts_with("queue_wait_max") {
            assert!(
                group["reasons"][name].as_str().is_some_and(|r| !r.is_empty()),
                "{what}: {name} is null without a reason"
            );
        }
    }
}

fn all_weeks_at(body: &Value, since: i64) -> f64 {
    (body["until"].as_i64().expect("until") - since) as f64 / WEEK as f64
}

fn report(s: &TestServer, query: &str) -> Value {
    let (status, body) = s.get(&format!("/report?{query}"));
    assert_eq!(status, 200, "{query}: {body}");
    assert_eq!(body["pending_runs"], 0, "{query}: every run's contribution is up to date");
    body
}

fn groups_by(runs: &[Expected], key: impl Fn(&Expected) -> String) -> BTreeMap<String, Vec<&Expected>> {
    let mut out: BTreeMap<String, Vec<&Expected>> = BTreeMap::new();
    for e in runs {
        out.entry(key(e)).or_default().push(e);
    }
    out
}

fn check_breakdown(
    body: &Value,
    expected: &BTreeMap<String, Vec<&Expected>>,
    weeks: impl Fn(&str) -> f64,
    threshold: u32,
) {
    let groups = body["groups"].as_array().expect("groups");
    let names: Vec<&str> = groups.iter().map(|g| g["group"].as_str().unwrap_or_default()).collect();
    assert_eq!(names, expected.keys().map(String::as_str).collect::<Vec<_>>(), "{}", body["by"]);
    for g in groups {
        let name = g["group"].as_str().unwrap_or_default();
        check_group(g, &expected[name], weeks(name), threshold, &format!("{} {name}", body["by"]));
    }
}

#[test]
fn the_report_matches_a_hand_computation_for_every_figure() {
    let s = TestServer::spawn();
    let now = trainlog_meta::now_ms();
    // Eight whole weeks before this one, each from a Monday (1970-01-01 was a Thursday).
    let this_monday = (now / DAY - (now / DAY + 3) % 7) * DAY;
    let base = this_monday - 8 * WEEK;
    let mut runs: Vec<Expected> = (0..RUNS).map(|i| make_run(&s, i, base)).collect();
    let trials = make_sweep_trials(&s);
    runs.extend(trials.iter().cloned());
    let week_of = |ms: i64| {
        let day = ms / DAY;
        day - (day + 3) % 7
    };

    // Everything since the fixture's first Monday, by project.
    let since = base;
    let body = report(&s, &format!("since={since}&by=project"));
    let until = body["until"].as_i64().expect("until");
    let all_weeks = (until - since) as f64 / WEEK as f64;
    check_group(&body["total"], &runs.iter().collect::<Vec<_>>(), all_weeks, 10, "total");
    check_breakdown(&body, &groups_by(&runs, |e| e.project.clone()), |_| all_weeks, 10);
    assert_eq!(body["definitions"].as_object().map(|d| d.len()), Some(17), "every figure is defined");

    // By week: each group's per-week figure counts its own week.
    let body = report(&s, &format!("since={since}&by=week"));
    let until = body["until"].as_i64().expect("until");
    let by_week = groups_by(&runs, |e| trainlog_meta::report::day_text(week_of(e.start_ms)));
    check_breakdown(
        &body,
        &by_week,
        |name| {
            let start =
                runs.iter().find(|e| trainlog_meta::report::day_text(week_of(e.start_ms)) == name).unwrap().start_ms;
            let from = week_of(start) * DAY;
            ((from + WEEK).min(until) - from.max(since)) as f64 / WEEK as f64
        },
        10,
    );

    // By project and week: each group one project's runs of one week.
    let body = report(&s, &format!("since={since}&by=project,week"));
    let until = body["until"].as_i64().expect("until");
    let by_both =
        groups_by(&runs, |e| format!("{} / {}", e.project, trainlog_meta::report::day_text(week_of(e.start_ms))));
    check_breakdown(
        &body,
        &by_both,
        |name| {
            let start = runs
                .iter()
                .find(|e| format!("{} / {}", e.project, trainlog_meta::report::day_text(week_of(e.start_ms))) == name)
                .unwrap()
                .start_ms;
            let from = week_of(start) * DAY;
            ((from + WEEK).min(until) - from.max(since)) as f64 / WEEK as f64
        },
        10,
    );
    assert_eq!(body["groups"][0]["keys"].as_array().map(Vec::len), Some(2), "{}", body["groups"][0]);

    // Two projects of two users, by user, at a threshold of 15 %.
    let body = report(&s, &format!("since={since}&projects=vision,nlp&users=ana,ben&by=user&active_above=15"));
    let chosen: Vec<Expected> = runs
        .iter()
        .filter(|e| ["vision", "nlp"].contains(&e.project.as_str()) && ["ana", "ben"].contains(&e.user.as_str()))
        .cloned()
        .collect();
    let weeks = all_weeks_at(&body, since);
    check_breakdown(&body, &groups_by(&chosen, |e| e.user.clone()), |_| weeks, 15);

    // A tag breakdown over a run-search filter and a range of weeks 2 to 5.
    let (from, to) = (base + 2 * WEEK, base + 6 * WEEK);
    let body = report(&s, &format!("since={from}&until={to}&by=tag:team&filter={}", urlencode("params.lr >= 0.01")));
    let chosen: Vec<Expected> =
        runs.iter().filter(|e| e.start_ms >= from && e.start_ms < to && e.lr >= 0.01).cloned().collect();
    check_breakdown(&body, &groups_by(&chosen, |e| e.team.clone()), |_| 4.0, 10);

    // Spot, on-demand and mixed.
    let body = report(&s, &format!("since={since}&by=pricing"));
    let weeks = all_weeks_at(&body, since);
    check_breakdown(&body, &groups_by(&runs, |e| e.pricing.to_owned()), |_| weeks, 10);

    // The runs behind the figures.
    let body = report(&s, &format!("since={since}"));
    let most = &body["runs"]["most_expensive"];
    let mut costs: Vec<f64> = runs.iter().filter_map(|e| e.cost).collect();
    costs.sort_by(|a, b| b.total_cmp(a));
    let listed: Vec<f64> = most.as_array().expect("a list").iter().map(|r| r["cost_usd"].as_f64().unwrap()).collect();
    assert_eq!(listed.len(), 10);
    for (a, e) in listed.iter().zip(&costs) {
        assert!((a - e).abs() < 1e-9, "{listed:?} vs {costs:?}");
    }
    let infra = body["runs"]["infra_failures"].as_array().expect("a list");
    assert_eq!(infra.len(), 10);
    assert!(infra.iter().all(|r| r["outcome"] == "infra" && r["failure"].is_string()), "{infra:?}");
    let idlest = body["runs"]["idlest"].as_array().expect("a list");
    let idle: Vec<f64> = idlest.iter().map(|r| r["idle_gpu_hours"].as_f64().unwrap()).collect();
    assert!(idle.windows(2).all(|w| w[0] >= w[1]), "{idle:?}");

    // A run made after a report is counted by the next one, and one that changes is counted anew.
    runs.push(make_run(&s, RUNS, base));
    let body = report(&s, &format!("since={since}&by=project"));
    check_group(&body["total"], &runs.iter().collect::<Vec<_>>(), all_weeks_at(&body, since), 10, "a later run");
    let (status, _) = s.patch("/runs/run-001", &json!({"tags": {"team": "green"}}));
    assert_eq!(status, 200);
    runs[1].team = "green".into();
    let body = report(&s, &format!("since={since}&by=tag:team"));
    let weeks = all_weeks_at(&body, since);
    check_breakdown(&body, &groups_by(&runs, |e| e.team.clone()), |_| weeks, 10);
}

#[test]
fn the_report_refuses_what_it_cannot_read_and_names_the_field() {
    let s = TestServer::spawn();
    for (query, field) in [
        ("by=month", "by"),
        ("by=week,week", "by"),
        ("by=project,user,week", "by"),
        ("active_above=12", "active_above"),
        ("since=yesterday", "since"),
        ("since=2026-10-02&until=2026-10-01", "until"),
        ("tags=novalue", "tags"),
        ("filter=params.lr%20%3E", "filter"),
    ] {
        let (status, body) = s.get(&format!("/report?{query}"));
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    let (status, body) = s.get("/report?projects=nowhere");
    assert_eq!(status, 404, "{body}");
    // An empty installation: every figure but the counts is null, with a reason.
    let (status, body) = s.get("/report");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"]["runs"], 0);
    assert!(body["total"]["cost_usd"].is_null() && body["total"]["reasons"]["cost_usd"].is_string(), "{body}");
    // A restore of a checkpoint that does not exist is refused.
    let run = s.create_run("p", "r");
    let (status, body) = s.post(&format!("/runs/{run}/checkpoints/none/restores"), &json!({"ok": true}));
    assert_eq!(status, 404, "{body}");
    let (status, body) = s.post(&format!("/runs/{run}/checkpoints/none/restores"), &json!({"ok": "yes"}));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("ok")), "{body}");
}

/// A run of one node with `gpus` GPUs at `usd_per_hour`, started an hour ago and finished now.
fn priced_run_this_hour(s: &TestServer, project: &str, id: &str, usd_per_hour: Option<f64>) {
    let now = trainlog_meta::now_ms();
    let process = json!({"rank": 0, "world_size": 1, "host": id, "started_ms": now - HOUR,
        "node": {"gpus": 1, "gpu_names": ["NVIDIA L4"], "usd_per_hour": usd_per_hour}});
    post_ok(s, "/runs", &json!({"id": id, "project": project, "start_time": now - HOUR, "process": process}));
    let end = json!({"status": "finished", "end_time": now, "process": {"attempt": 1, "rank": 0}});
    post_ok(s, &format!("/runs/{id}/finish"), &end);
}

#[test]
fn budgets_show_this_month_s_spend_in_the_report_and_in_metrics() {
    let s = TestServer::spawn();
    post_ok(&s, "/projects", &json!({"name": "vision"}));
    let (status, body) = send(&s, "PUT", "/projects/vision/budget", &json!({"monthly_usd": -1}));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("monthly_usd")), "{body}");
    let (status, body) = send(&s, "PUT", "/projects/vision/budget", &json!({"monthly_usd": 10.0}));
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["monthly_usd"].as_f64(), body["spent_usd"].as_f64()), (Some(10.0), Some(0.0)), "{body}");

    priced_run_this_hour(&s, "vision", "b1", Some(4.0));
    priced_run_this_hour(&s, "vision", "b2", Some(2.5));
    priced_run_this_hour(&s, "vision", "b3", None);
    let (status, body) = s.get("/projects/vision/budget");
    assert_eq!(status, 200, "{body}");
    // An hour each; the run started an hour before now may fall in last month on the 1st at 00:xx.
    let (month_start, _, month) = trainlog_meta::report::month_of(trainlog_meta::now_ms());
    let counted = trainlog_meta::now_ms() - HOUR >= month_start;
    let spent = if counted { 6.5 } else { 0.0 };
    assert_eq!(body["month"], month.as_str());
    close(&body["spent_usd"], Some(spent), "spent");
    close(&body["used"], Some(spent / 10.0), "used");
    assert_eq!(body["unpriced_runs"], if counted { 1 } else { 0 });

    let answer = report(&s, "");
    assert_eq!(answer["budgets"].as_array().map(Vec::len), Some(1), "{answer}");
    close(&answer["budgets"][0]["spent_usd"], Some(spent), "the report's budget");

    let text = s.client.get(format!("{}/metrics", s.url)).send().expect("metrics").text().expect("text");
    assert!(text.contains("trainlog_project_budget_usd{project=\"vision\"} 10.0"), "{text}");
    let line =
        text.lines().find(|l| l.starts_with("trainlog_project_spend_usd{project=\"vision\"}")).expect("a spend gauge");
    let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a number");
    assert!((value - spent).abs() < 1e-9, "{line}");

    let (status, body) = send(&s, "PUT", "/projects/vision/budget", &json!({"monthly_usd": null}));
    assert_eq!((status, &body["monthly_usd"]), (200, &Value::Null), "{body}");
    assert_eq!(report(&s, "")["budgets"], json!([]));
}

fn send(s: &TestServer, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let response = s.client.request(method, s.api(path)).json(body).send().expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

#[test]
fn a_reader_s_report_covers_only_what_they_may_read() {
    let s = TestServer::spawn_with(&["--auth", "--default-permission", "none"]);
    priced_run_this_hour(&s, "open", "o1", Some(1.0));
    priced_run_this_hour(&s, "secret", "s1", Some(100.0));
    let key = s.admin_cli(&["users", "add", "reader"]);
    s.admin_cli(&["grant", "reader", "open", "read"]);
    let as_reader = |path: &str| {
        let response = reqwest::blocking::Client::new().get(s.api(path)).bearer_auth(&key).send().expect("an answer");
        let status = response.status().as_u16();
        (status, response.json::<Value>().unwrap_or(Value::Null))
    };
    let (status, body) = as_reader("/report?by=project");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"]["runs"], 1, "{body}");
    close(&body["total"]["cost_usd"], Some(1.0), "the reader's spend");
    let projects: Vec<&str> = body["groups"].as_array().unwrap().iter().map(|g| g["group"].as_str().unwrap()).collect();
    assert_eq!(projects, ["open"]);
    assert_eq!(as_reader("/report?projects=secret").0, 404, "a project the reader may not read does not exist");
    assert_eq!(as_reader("/projects/secret/budget").0, 404);
    let response = reqwest::blocking::Client::new()
        .put(s.api("/projects/open/budget"))
        .bearer_auth(&key)
        .json(&json!({"monthly_usd": 5}))
        .send()
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 403, "setting a budget needs admin on the project");
    let rate = json!({"rows": [{"kind": "rate", "accelerator": "L4", "usd_per_hour": 0.1, "valid_from": 0, "source": "mine"}]});
    let response = reqwest::blocking::Client::new()
        .post(s.api("/prices"))
        .bearer_auth(&key)
        .json(&rate)
        .send()
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 403, "setting prices is for server admins");
    assert_eq!(as_reader("/prices").0, 200, "reading them is not");
    // The admin sees both.
    assert_eq!(report(&s, "")["total"]["runs"], 2);
}

fn spend_gauge(s: &TestServer, project: &str) -> f64 {
    let text = s.client.get(format!("{}/metrics", s.url)).send().expect("metrics").text().expect("text");
    let prefix = format!("trainlog_project_spend_usd{{project=\"{project}\"}}");
    let line = text.lines().find(|l| l.starts_with(&prefix)).expect("a spend gauge");
    line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a number")
}

#[test]
fn archived_runs_and_runs_deleted_for_good_keep_their_spend_until_an_admin_forgets_it() {
    let s = TestServer::spawn();
    post_ok(&s, "/projects", &json!({"name": "vision"}));
    let (status, body) = send(&s, "PUT", "/projects/vision/budget", &json!({"monthly_usd": 100.0}));
    assert_eq!(status, 200, "{body}");
    priced_run_this_hour(&s, "vision", "kept", Some(4.0));
    priced_run_this_hour(&s, "vision", "archived", Some(2.5));
    priced_run_this_hour(&s, "vision", "deleted", Some(1.25));
    // An hour each; on the 1st at 00:xx the runs fall in last month and the budget counts none.
    let (month_start, _, _) = trainlog_meta::report::month_of(trainlog_meta::now_ms());
    let this_month = if trainlog_meta::now_ms() - HOUR >= month_start { 1.0 } else { 0.0 };
    let before = report(&s, "");
    close(&before["total"]["cost_usd"], Some(7.75), "the three runs' cost");
    assert_eq!(before["deleted_for_good"], json!({"runs": 0, "cost_usd": 0.0, "gpu_hours": 0.0}));

    post_ok(&s, "/runs/archived/archive", &json!({}));
    post_ok(&s, "/runs/deleted/archive", &json!({}));
    let (status, body) = send(&s, "DELETE", "/runs/deleted", &Value::Null);
    assert_eq!(status, 200, "{body}");
    assert_eq!(s.get("/runs/deleted").0, 404, "deleted for good");

    let after = report(&s, "");
    assert_eq!(after["total"]["runs"], 3, "{after}");
    close(&after["total"]["cost_usd"], Some(7.75), "the money was spent all the same");
    close(
        &after["total"]["inputs"]["provisioned_gpu_hours"],
        before["total"]["inputs"]["provisioned_gpu_hours"].as_f64(),
        "GPU-hours",
    );
    assert_eq!(after["deleted_for_good"]["runs"], 1, "{after}");
    close(&after["deleted_for_good"]["cost_usd"], Some(1.25), "what the deleted run spent");
    close(&report(&s, "by=day")["total"]["cost_usd"], Some(7.75), "the days added up");
    close(&after["budgets"][0]["spent_usd"], Some(7.75 * this_month), "the budget");
    assert!((spend_gauge(&s, "vision") - 7.75 * this_month).abs() < 1e-9, "/metrics");

    let listed = s.admin_cli_output(&["ledger", "list"]);
    assert!(
        listed.lines().nth(1).is_some_and(|l| l.starts_with("deleted\tvision\t") && l.contains("\t1.25\t")),
        "{listed}"
    );
    assert_eq!(listed.lines().count(), 2, "only the run deleted for good: {listed}");
    s.admin_cli(&["ledger", "forget", "deleted"]);
    let forgotten = report(&s, "");
    close(&forgotten["total"]["cost_usd"], Some(6.5), "forgotten for good");
    assert_eq!(forgotten["total"]["runs"], 2);
    assert_eq!(forgotten["deleted_for_good"]["runs"], 0);
    close(&report(&s, "by=day")["total"]["cost_usd"], Some(6.5), "the days added up again");
    close(&forgotten["budgets"][0]["spent_usd"], Some(6.5 * this_month), "the budget");
}
