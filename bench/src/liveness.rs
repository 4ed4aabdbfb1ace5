//! The liveness check's cost: one round over many running jobs whose processes all sent a
//! heartbeat within the bound (the check finds none to end, the common case), on SQLite.

use std::time::Instant;
use trainlog_meta::jobs::{NodeInfo, ProcessJoin};
use trainlog_meta::{MetaStore, MetaUrl, NewRun};
use trainlog_schema::{ProjectName, RunId};

/// What one measurement found.
pub struct CheckCost {
    /// Milliseconds one round took, each round.
    pub rounds_ms: Vec<f64>,
    /// Seconds to record the jobs first.
    pub setup_s: f64,
}

/// `jobs` running single-process jobs in a fresh SQLite store, then `rounds` rounds of the check.
pub fn measure(jobs: usize, rounds: usize) -> CheckCost {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let meta = MetaStore::connect(&MetaUrl::Sqlite(dir.path().join("trainlog.db"))).expect("a metadata store");
    let project = ProjectName::parse("project", "bench-liveness").expect("a project name");
    let started = Instant::now();
    for i in 0..jobs {
        let new = NewRun {
            id: Some(RunId::parse("id", &format!("job-{i:06}")).expect("a run id")),
            project: Some(project.clone()),
            resume: true,
            process: Some(ProcessJoin {
                world_size: 1,
                node_count: 1,
                host: format!("node-{i}"),
                launcher: "torchrun".into(),
                job_id: Some(format!("job-{i}")),
                context: "{}".into(),
                node: Some(NodeInfo { gpus: 8, usd_per_hour: Some(20.0), ..NodeInfo::default() }),
                ..ProcessJoin::default()
            }),
            ..NewRun::default()
        };
        meta.create_run_joining(&new).expect("a job joins its run");
    }
    let setup_s = started.elapsed().as_secs_f64();
    let rounds_ms = (0..rounds)
        .map(|_| {
            let round = Instant::now();
            let ended = meta.close_silent_attempts().expect("a round of the check");
            assert!(ended.is_empty(), "every job is alive");
            round.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    CheckCost { rounds_ms, setup_s }
}
