//! The report's figures from one group's sums, with a reason for each figure that cannot be
//! computed and the runs each one covers: pure arithmetic, no SQL.

use std::collections::BTreeMap;

/// What the report's SQL adds up over one group of runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupSums {
    pub runs: i64,
    pub users: i64,
    pub first_start_ms: Option<i64>,
    pub last_start_ms: Option<i64>,
    pub finished: i64,
    pub code_failures: i64,
    pub infra_failures: i64,
    pub killed: i64,
    pub running: i64,
    /// Provisioned GPU-hours of every run.
    pub gpu_hours: f64,
    pub spot_gpu_hours: f64,
    /// Runs with GPUs, and those of them with a GPU utilization series.
    pub gpu_runs: i64,
    pub sampled_runs: i64,
    /// Provisioned and active GPU-hours of the runs with a series.
    pub sampled_gpu_hours: f64,
    pub active_gpu_hours: f64,
    pub priced_runs: i64,
    pub cost_usd: f64,
    /// Of the runs both priced and sampled: how many, their cost, active GPU-hours and the cost
    /// of their idle GPU-hours.
    pub priced_sampled_runs: i64,
    pub priced_sampled_cost_usd: f64,
    pub priced_active_gpu_hours: f64,
    pub idle_usd: f64,
    pub queued_runs: i64,
    pub queue_wait_ms_sum: i64,
    pub queue_wait_ms_max: Option<i64>,
    pub restores: i64,
    pub restores_ok: i64,
    /// GPU-hours the samples of the runs with a series cover (each sample for at most one
    /// sampling interval): the rest of `sampled_gpu_hours` was not measured.
    pub covered_gpu_hours: f64,
    /// Of the priced runs with spot GPU-hours: what they saved against the catalog's on-demand
    /// prices, over those whose on-demand prices are known, and how many are not.
    pub spot_savings_usd: f64,
    pub spot_savings_runs: i64,
    pub spot_unknown_runs: i64,
    /// Of the runs with a series: those measured by SM active (GPM) on some GPU.
    pub sm_active_runs: i64,
    /// Kilowatt-hours used by the GPUs of the runs that measured it, and how many did.
    pub energy_kwh: f64,
    pub energy_runs: i64,
    /// Of the runs that logged their FLOPs on a GPU model of known peak: useful GPU-hours (FLOPs
    /// / peak FLOPS), their provisioned GPU-hours, and how many runs.
    pub useful_gpu_hours: f64,
    pub flops_gpu_hours: f64,
    pub flops_runs: i64,
}

/// The figures of one group, as the report answers them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupFigures {
    pub gpu_utilization_rate: Option<f64>,
    pub idle_gpu_hours: Option<f64>,
    pub queue_wait_s: Option<f64>,
    pub cost_usd: Option<f64>,
    pub cost_per_gpu_hour_usd: Option<f64>,
    pub cost_per_experiment_usd: Option<f64>,
    pub spot_savings_rate: Option<f64>,
    pub spot_savings_usd: Option<f64>,
    pub job_success_rate: Option<f64>,
    pub infra_failures: i64,
    pub code_failures: i64,
    pub checkpoint_restore_rate: Option<f64>,
    pub experiments_per_user_week: Option<f64>,
    /// Seconds from submission to the end of a finished run: the median and the 90th percentile.
    pub time_to_result_median_s: Option<f64>,
    pub time_to_result_p90_s: Option<f64>,
    pub energy_kwh: Option<f64>,
    pub mfu: Option<f64>,
    /// Why a figure is null, or what it leaves out, by figure name.
    pub reasons: BTreeMap<&'static str, String>,
    /// How many runs each figure is computed from, by figure name.
    pub covers: BTreeMap<&'static str, i64>,
}

/// The names of the figures, in the order the report lists them.
pub const FIGURES: [&str; 17] = [
    "gpu_utilization_rate",
    "idle_gpu_hours",
    "queue_wait_s",
    "cost_usd",
    "cost_per_gpu_hour_usd",
    "cost_per_experiment_usd",
    "spot_savings_rate",
    "spot_savings_usd",
    "job_success_rate",
    "infra_failures",
    "code_failures",
    "checkpoint_restore_rate",
    "experiments_per_user_week",
    "time_to_result_median_s",
    "time_to_result_p90_s",
    "energy_kwh",
    "mfu",
];

/// How each figure is defined: the one text the answers, the OpenAPI document and
/// `docs/report.md` give (a test holds the page to it).
pub fn definitions(threshold: u32) -> BTreeMap<&'static str, String> {
    let threshold_note = if threshold == super::usage::DEFAULT_THRESHOLD {
        format!("{threshold} % by default; a multiple of 5")
    } else {
        format!("{threshold} % in this answer, {} % by default; a multiple of 5", super::usage::DEFAULT_THRESHOLD)
    };
    let d = [
        ("gpu_utilization_rate", format!("active GPU-hours / provisioned GPU-hours, over the runs with a GPU utilization series. A GPU-second is active when its utilization sample is above `active_above` ({threshold_note}). Each sample stands for the time to the next one of its GPU, but for at most one sampling interval (the series' median gap), and only inside the attempt it was taken in: a sample taken while no attempt ran counts for nothing. Time no sample measured is not active; `inputs.unmeasured_gpu_hours` says how much of the provisioned time that is.")),
        ("idle_gpu_hours", "provisioned − active GPU-hours, same runs. Provisioned: each node's GPUs × how long it ran, over every attempt (a run with no job record: its GPU series' span). `inputs.idle_usd` prices them: the runs' cost less each active GPU-second at its own attempt's price (an attempt's cost / its GPU-seconds), so an idle on-demand hour after a busy spot hour costs the on-demand price.".to_owned()),
        ("queue_wait_s", "mean seconds from submission to start: a sweep trial's creation to its run's first start; a Slurm job's SubmitTime (rank 0 asks `scontrol`, else `sacct`) or a launcher's `submitted_ms` to the first attempt's start.".to_owned()),
        ("cost_usd", "the cost of the runs whose every node had a price (the job's cost; for a run with no job record, its `cost/usd` series).".to_owned()),
        ("cost_per_gpu_hour_usd", "effective: the cost of the priced runs with a GPU series / their *active* GPU-hours, so spot prices lower it and idle GPUs raise it.".to_owned()),
        ("cost_per_experiment_usd", "`cost_usd` / priced runs (an experiment is a run, whatever its attempts).".to_owned()),
        ("spot_savings_rate", "the scorecard's definition: the share of provisioned GPU-hours on spot capacity, 0 to 1. It is not a saving in dollars; `trainlog report --format csv` heads its column `spot_savings_rate (share of GPU-hours on spot)`, the table `spot_share`.".to_owned()),
        ("spot_savings_usd", "dollars spot capacity saved: Σ (the catalog's on-demand price − the price paid) × hours, over each spot node of the priced runs. A spot node's on-demand price is its catalog row's (`usd_per_hour` beside `spot_usd_per_hour`), or an installation rate's; where the catalog has none (or the job reported its own spot price), the run is left out and `reasons` says how many. Null when no priced run ran on spot.".to_owned()),
        ("job_success_rate", "finished / ended runs (finished, failed, preempted, lost); runs killed by their user and running runs are left out.".to_owned()),
        ("infra_failures", "ended runs that failed because of the infrastructure: the run or its last attempt ended preempted or lost, or a process was killed by SIGKILL or the OOM killer.".to_owned()),
        ("code_failures", "ended runs that failed on their own: a rank raised or exited non-zero.".to_owned()),
        ("checkpoint_restore_rate", "restores of the runs' checkpoints that worked / restores attempted. `trainlog.restore_checkpoint` records each (a missing file or a sha256 mismatch fails); a loader that fails after that says so with `Api().record_restore(run, name, error=...)`.".to_owned()),
        ("experiments_per_user_week", "runs / distinct users / weeks in the period (the group's own week or day in a time breakdown).".to_owned()),
        ("time_to_result_median_s", "the median of the seconds from a finished run's submission (its launcher's submit time, else its sweep trial's creation, else its first start) to its end; the mean of the middle two of an even count. Computed from each run's row, in every group.".to_owned()),
        ("time_to_result_p90_s", "the 90th percentile (nearest rank) of the same seconds as `time_to_result_median_s`.".to_owned()),
        ("energy_kwh", "kilowatt-hours the runs' GPUs used: each GPU's `…energy_j` series (NVML's energy counter since the run's sampler opened) at its last value, added up over the runs that measured it (`covers`); `reasons` counts the runs with GPUs that did not.".to_owned()),
        ("mfu", "model FLOPs utilization: useful GPU-hours / provisioned GPU-hours, over the runs that logged the FLOPs their model did on a GPU model whose peak is known. A run's FLOPs are the last value of its `flops` series (`run.log({\"flops\": total})`: every GPU's together, since the start; e.g. 6 × parameters × tokens for a transformer), else of `train/total_flos`, which the Hugging Face callback logs. Useful GPU-hours (`inputs.useful_gpu_hours`) = FLOPs / (the GPU model's peak dense BF16 TFLOPS × 10¹²) / 3600. The peaks come from `schema/data/peak_tflops.csv`, a dated, versioned file of datasheet figures (H200, H100 SXM/PCIe/NVL, A100, L40S, L4, V100); a GPU it does not hold gets no MFU, and `reasons` says how many runs that leaves out. Each such run also has an `mfu` series its rank 0 logs beside each FLOPs value: the FLOPs since its process started over what the job's GPUs could do in that time (a resumed run counts from its first FLOPs value).".to_owned()),
    ];
    d.into_iter().collect()
}

fn ratio(top: f64, bottom: f64) -> Option<f64> {
    (bottom > 0.0).then(|| top / bottom)
}

/// The figures from a group's sums; `weeks` is the length of the group's period in weeks.
pub fn figures(s: &GroupSums, weeks: f64) -> GroupFigures {
    let mut f = GroupFigures { infra_failures: s.infra_failures, code_failures: s.code_failures, ..Default::default() };
    let mut why = |figure: &'static str, reason: String| {
        f.reasons.insert(figure, reason);
    };
    let without_series = s.gpu_runs - s.sampled_runs;
    if s.sampled_runs > 0 {
        f.gpu_utilization_rate = ratio(s.active_gpu_hours, s.sampled_gpu_hours);
        f.idle_gpu_hours = Some((s.sampled_gpu_hours - s.active_gpu_hours).max(0.0));
        if without_series > 0 {
            let note = format!("{without_series} run(s) with GPUs have no GPU utilization series and are left out");
            why("gpu_utilization_rate", note.clone());
            why("idle_gpu_hours", note);
        }
    } else {
        let reason = if s.gpu_runs == 0 {
            "no run in this group had GPUs".to_owned()
        } else {
            format!("none of the {} run(s) with GPUs has a GPU utilization series", s.gpu_runs)
        };
        why("gpu_utilization_rate", reason.clone());
        why("idle_gpu_hours", reason);
    }
    if s.queued_runs > 0 {
        f.queue_wait_s = Some(s.queue_wait_ms_sum as f64 / s.queued_runs as f64 / 1000.0);
    } else {
        why("queue_wait_s", "no run has a submit time (a sweep trial's or a launcher's)".into());
    }
    let unpriced = s.runs - s.priced_runs;
    if s.priced_runs > 0 {
        f.cost_usd = Some(s.cost_usd);
        f.cost_per_experiment_usd = Some(s.cost_usd / s.priced_runs as f64);
        if unpriced > 0 {
            let note = format!("{unpriced} run(s) have no price and are left out");
            why("cost_usd", note.clone());
            why("cost_per_experiment_usd", note);
        }
    } else {
        why("cost_usd", "no run in this group has a price".into());
        why("cost_per_experiment_usd", "no run in this group has a price".into());
    }
    match ratio(s.priced_sampled_cost_usd, s.priced_active_gpu_hours) {
        Some(v) => f.cost_per_gpu_hour_usd = Some(v),
        None if s.priced_sampled_runs > 0 => {
            why("cost_per_gpu_hour_usd", "the priced runs with a GPU series have no active GPU-hour".into())
        }
        None => why("cost_per_gpu_hour_usd", "no run has both a price and a GPU utilization series".into()),
    }
    match ratio(s.spot_gpu_hours, s.gpu_hours) {
        Some(v) => f.spot_savings_rate = Some(v),
        None => why("spot_savings_rate", "no run in this group had GPUs".into()),
    }
    if s.spot_savings_runs > 0 {
        f.spot_savings_usd = Some(s.spot_savings_usd + 0.0);
        if s.spot_unknown_runs > 0 {
            let note =
                format!("{} spot run(s) have no on-demand price in the catalog and are left out", s.spot_unknown_runs);
            why("spot_savings_usd", note);
        }
    } else if s.spot_unknown_runs > 0 {
        why(
            "spot_savings_usd",
            format!("the catalog has no on-demand price for the {} spot run(s)", s.spot_unknown_runs),
        );
    } else {
        why("spot_savings_usd", "no priced run in this group ran on spot".into());
    }
    let ended = s.finished + s.code_failures + s.infra_failures;
    match ratio(s.finished as f64, ended as f64) {
        Some(v) => f.job_success_rate = Some(v),
        None => why("job_success_rate", "no run in this group has ended".into()),
    }
    match ratio(s.restores_ok as f64, s.restores as f64) {
        Some(v) => f.checkpoint_restore_rate = Some(v),
        None => why("checkpoint_restore_rate", "no checkpoint of these runs was restored".into()),
    }
    if s.flops_runs > 0 {
        f.mfu = ratio(s.useful_gpu_hours, s.flops_gpu_hours);
        if s.flops_runs < s.gpu_runs {
            why(
                "mfu",
                format!(
                    "{} run(s) with GPUs logged no FLOPs, or ran on a GPU of unknown peak, and are left out",
                    s.gpu_runs - s.flops_runs
                ),
            );
        }
    } else {
        why("mfu", "no run in this group logged its FLOPs on a GPU of known peak".into());
    }
    if s.energy_runs > 0 {
        f.energy_kwh = Some(s.energy_kwh);
        if s.energy_runs < s.gpu_runs {
            why(
                "energy_kwh",
                format!("{} run(s) with GPUs have no energy series and are left out", s.gpu_runs - s.energy_runs),
            );
        }
    } else {
        why("energy_kwh", "no run in this group measured its GPUs' energy".into());
    }
    // Percentiles come from each run's row, not from sums: the report fills them in after.
    for figure in ["time_to_result_median_s", "time_to_result_p90_s"] {
        why(figure, "no run in this group has finished".into());
    }
    match (s.users > 0 && weeks > 0.0).then(|| s.runs as f64 / s.users as f64 / weeks) {
        Some(v) => f.experiments_per_user_week = Some(v),
        None => why("experiments_per_user_week", "no run, or a period of no length".into()),
    }
    // Which source measured the runs, where SM active (GPM) measured any.
    if s.sm_active_runs > 0 {
        let note = format!(
            "{} of the {} run(s) with a series were measured by SM active (GPM), the rest by NVML utilization",
            s.sm_active_runs, s.sampled_runs
        );
        f.reasons.entry("gpu_utilization_rate").and_modify(|r| *r = format!("{r}; {note}")).or_insert(note);
    }
    let covers = [
        ("gpu_utilization_rate", s.sampled_runs),
        ("idle_gpu_hours", s.sampled_runs),
        ("queue_wait_s", s.queued_runs),
        ("cost_usd", s.priced_runs),
        ("cost_per_gpu_hour_usd", s.priced_sampled_runs),
        ("cost_per_experiment_usd", s.priced_runs),
        ("spot_savings_rate", s.gpu_runs),
        ("spot_savings_usd", s.spot_savings_runs),
        ("energy_kwh", s.energy_runs),
        ("mfu", s.flops_runs),
        ("job_success_rate", ended),
        ("infra_failures", ended),
        ("code_failures", ended),
        ("checkpoint_restore_rate", s.restores),
        ("experiments_per_user_week", s.runs),
    ];
    f.covers = covers.into_iter().collect();
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows `| `name` | text |` of the figures table in `docs/report.md`.
    fn documented() -> BTreeMap<String, String> {
        let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/report.md"))
            .expect("docs/report.md");
        page.lines()
            .filter_map(|line| {
                let row = line.strip_prefix("| `")?.strip_suffix(" |")?;
                let (name, text) = row.split_once("` | ")?;
                Some((name.to_owned(), text.to_owned()))
            })
            .collect()
    }

    #[test]
    fn docs_report_md_defines_every_figure_in_the_words_the_answers_carry() {
        let page = documented();
        let code = definitions(super::super::usage::DEFAULT_THRESHOLD);
        assert_eq!(code.len(), FIGURES.len(), "one definition per figure");
        for figure in FIGURES {
            assert_eq!(
                page.get(figure),
                code.get(figure),
                "{figure}: docs/report.md and the code say different things"
            );
        }
        for name in page.keys() {
            assert!(
                FIGURES.contains(&name.as_str()) || name.starts_with("inputs."),
                "docs/report.md defines `{name}`, which the report does not answer"
            );
        }
        assert!(definitions(25)["gpu_utilization_rate"].contains("25 % in this answer"));
    }

    #[test]
    fn figures_divide_what_they_cover_and_say_what_they_cannot() {
        let s = GroupSums {
            runs: 10,
            users: 2,
            finished: 6,
            code_failures: 1,
            infra_failures: 2,
            killed: 1,
            gpu_hours: 100.0,
            spot_gpu_hours: 25.0,
            gpu_runs: 8,
            sampled_runs: 6,
            sampled_gpu_hours: 80.0,
            active_gpu_hours: 60.0,
            priced_runs: 9,
            cost_usd: 300.0,
            priced_sampled_runs: 5,
            priced_sampled_cost_usd: 240.0,
            priced_active_gpu_hours: 48.0,
            queued_runs: 4,
            queue_wait_ms_sum: 4 * 90_000,
            restores: 4,
            restores_ok: 3,
            ..Default::default()
        };
        let f = figures(&s, 2.0);
        assert_eq!(f.gpu_utilization_rate, Some(0.75));
        assert_eq!(f.idle_gpu_hours, Some(20.0));
        assert!(f.reasons["gpu_utilization_rate"].starts_with("2 run(s)"));
        assert_eq!(f.queue_wait_s, Some(90.0));
        assert_eq!(f.cost_usd, Some(300.0));
        assert!(f.reasons["cost_usd"].starts_with("1 run(s)"));
        assert_eq!(f.cost_per_experiment_usd, Some(300.0 / 9.0));
        assert_eq!(f.cost_per_gpu_hour_usd, Some(5.0));
        assert_eq!(f.spot_savings_rate, Some(0.25));
        assert_eq!(f.job_success_rate, Some(6.0 / 9.0));
        assert_eq!(f.checkpoint_restore_rate, Some(0.75));
        assert_eq!(f.experiments_per_user_week, Some(2.5));
        assert_eq!(f.covers["job_success_rate"], 9);

        let empty = figures(&GroupSums::default(), 1.0);
        for name in FIGURES.iter().filter(|n| !n.ends_with("_failures")) {
            assert!(empty.reasons.contains_key(name), "{name} says why it is null");
        }
        assert_eq!(empty.cost_usd, None);
    }
}
