//! The alert rules a benchmark server holds while ingest is measured: 1,000 rules in ten other
//! projects, and 20 metric rules on the project the clients log to, four of them keeping a
//! series' history (a spike's window, a plateau's best).

use crate::data::KEYS;
use serde_json::json;
use trainlog_tests::TestServer;

/// Projects besides the logging one, each with the most rules a project may have.
pub const OTHER_PROJECTS: usize = 10;
pub const RULES_PER_OTHER_PROJECT: usize = 100;

/// The 20 metric rules on the logging project: two per key it logs.
pub fn logging_project_rules() -> Vec<String> {
    KEYS.iter()
        .enumerate()
        .flat_map(|(i, key)| {
            let second = match i {
                0 | 1 => format!("{key} spike > 50 over 100"),
                2 | 3 => format!("{key} no improvement for 1000000 steps"),
                _ => format!("{key} > 1e12"),
            };
            [format!("{key} not finite"), second]
        })
        .collect()
}

fn add_rule(server: &TestServer, project: &str, rule: &str) {
    let (status, body) = server.post(&format!("/projects/{project}/alert-rules"), &json!({ "rule": rule }));
    assert_eq!(status, 201, "adding {rule:?} to {project}: {body}");
}

/// Gives the server its rules: the other projects' and `project`'s (both made here).
pub fn install(server: &TestServer, project: &str) -> usize {
    let mut added = 0;
    for p in 0..OTHER_PROJECTS {
        let other = format!("{project}-other-{p}");
        server.create_run(&other, "setup");
        for r in 0..RULES_PER_OTHER_PROJECT {
            let key = KEYS[r % KEYS.len()];
            let rule = match r % 4 {
                0 => format!("{key} not finite"),
                1 => format!("{key} > {}", 1_000 + r),
                2 => format!("{key} < -{}", 1_000 + r),
                _ => format!("{key} spike > 10"),
            };
            add_rule(server, &other, &rule);
            added += 1;
        }
    }
    server.create_run(project, "setup");
    for rule in logging_project_rules() {
        add_rule(server, project, &rule);
        added += 1;
    }
    added
}

/// Runs `measure(rep, ruled)` for `reps` pairs of fresh servers, without rules and with them,
/// each kind first in every other pair (the second of a pair shares the machine with the first
/// server's teardown); answers the rates and the CPU per million points of each kind: without,
/// with, CPU without, CPU with.
pub fn alternate(reps: usize, mut measure: impl FnMut(usize, bool) -> (f64, f64)) -> [Vec<f64>; 4] {
    let mut out: [Vec<f64>; 4] = Default::default();
    for rep in 0..reps {
        let order = if rep % 2 == 0 { [false, true] } else { [true, false] };
        for ruled in order {
            let (rate, cpu) = measure(rep, ruled);
            out[usize::from(ruled)].push(rate);
            out[2 + usize::from(ruled)].push(cpu);
        }
    }
    out
}
