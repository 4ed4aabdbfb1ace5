//! Kubernetes manifests for a sweep: pods that each run `trainlog agent SWEEP --max-trials 1`,
//! so every pod asks the server for its trial when it starts (which is what lets adaptive
//! methods work), with `nvidia.com/gpu` limits and a pod failure policy under which a
//! preempted or evicted pod is replaced without counting as a failure.

use serde_json::{json, Value};

/// What the manifest needs besides the sweep.
#[derive(Debug, Clone)]
pub struct ManifestOptions {
    pub sweep_id: String,
    /// The tracking server as the pods reach it.
    pub server: String,
    /// An image with the trial's code, Python and the trainlog package.
    pub image: String,
    pub namespace: Option<String>,
    pub gpus_per_trial: u32,
    /// How many trials run at once.
    pub parallelism: u32,
    /// How many trials in all (the sweep's run cap, or its grid's size).
    pub trials: u32,
    /// One Job per trial instead of one Indexed Job.
    pub job_per_trial: bool,
    /// Failed pods of one trial before it is given up (preemptions do not count).
    pub retries: u32,
}

pub(crate) fn name_of(sweep_id: &str) -> String {
    let clean: String =
        sweep_id.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    format!("trainlog-sweep-{}", clean.trim_matches('-'))
}

fn pod_template(o: &ManifestOptions, labels: &Value) -> Value {
    let mut resources = json!({"requests": {"cpu": "1", "memory": "2Gi"}});
    if o.gpus_per_trial > 0 {
        resources["limits"] = json!({"nvidia.com/gpu": o.gpus_per_trial});
    }
    let mut args = vec!["agent".to_owned(), o.sweep_id.clone(), "--max-trials".into(), "1".into()];
    if o.gpus_per_trial > 0 {
        // One slot holding every GPU of the pod.
        args.extend(["--gpus".into(), "all".into(), "--gpus-per-trial".into(), o.gpus_per_trial.to_string()]);
    } else {
        args.extend(["--cpu-slots".into(), "1".into()]);
    }
    json!({
        "metadata": {"labels": labels},
        "spec": {
            "restartPolicy": "Never",
            // Long enough for the trial to save a checkpoint when the node is preempted.
            "terminationGracePeriodSeconds": 60,
            "containers": [{
                "name": "trial",
                "image": o.image,
                "command": ["trainlog"],
                "args": args,
                "env": [
                    {"name": "TRAINLOG_SERVER", "value": o.server},
                    {"name": "TRAINLOG_SWEEP_ID", "value": o.sweep_id},
                ],
                "resources": resources,
            }],
        },
    })
}

/// The pod failure policy: disruptions (preemption, eviction, node drain) neither count nor fail
/// the job; the agent's own exit code 2 (a usage error) fails the job at once.
fn failure_policy() -> Value {
    json!({"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": "trial", "operator": "In", "values": [2]}},
    ]})
}

/// The manifests as Kubernetes objects (one Indexed Job, or one Job per trial).
pub fn manifests(o: &ManifestOptions) -> Vec<Value> {
    let name = name_of(&o.sweep_id);
    let mut metadata =
        json!({"name": name, "labels": {"app.kubernetes.io/managed-by": "trainlog", "trainlog/sweep": o.sweep_id}});
    if let Some(ns) = &o.namespace {
        metadata["namespace"] = json!(ns);
    }
    let labels = json!({"trainlog/sweep": o.sweep_id});
    if !o.job_per_trial {
        return vec![json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata,
            "spec": {
                "completionMode": "Indexed",
                "completions": o.trials.max(1),
                "parallelism": o.parallelism.clamp(1, o.trials.max(1)),
                "backoffLimitPerIndex": o.retries,
                "maxFailedIndexes": o.trials.max(1),
                "podFailurePolicy": failure_policy(),
                "template": pod_template(o, &labels),
            },
        })];
    }
    (0..o.trials.max(1))
        .map(|i| {
            let mut m = metadata.clone();
            m["name"] = json!(format!("{name}-{i:03}"));
            json!({
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": m,
                "spec": {
                    "backoffLimit": o.retries,
                    "podFailurePolicy": failure_policy(),
                    "template": pod_template(o, &labels),
                },
            })
        })
        .collect()
}

/// The manifests as a YAML stream (JSON is YAML; one document per object).
pub fn manifest_yaml(o: &ManifestOptions) -> String {
    manifests(o).iter().map(|m| format!("---\n{}\n", serde_json::to_string_pretty(m).unwrap_or_default())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> ManifestOptions {
        ManifestOptions {
            sweep_id: "ab12cd".into(),
            server: "http://trainlog:7310".into(),
            image: "registry.example/train:1".into(),
            namespace: Some("ml".into()),
            gpus_per_trial: 2,
            parallelism: 4,
            trials: 20,
            job_per_trial: false,
            retries: 3,
        }
    }

    #[test]
    fn an_indexed_job_runs_one_agent_per_trial_with_gpu_limits() {
        let [job] = manifests(&options()).try_into().unwrap();
        assert_eq!(job["spec"]["completionMode"], "Indexed");
        assert_eq!((job["spec"]["completions"].as_u64(), job["spec"]["parallelism"].as_u64()), (Some(20), Some(4)));
        let c = &job["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 2);
        assert_eq!(
            c["args"],
            json!(["agent", "ab12cd", "--max-trials", "1", "--gpus", "all", "--gpus-per-trial", "2"])
        );
        assert_eq!(job["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"], "DisruptionTarget");
        assert_eq!(job["metadata"]["namespace"], "ml");
    }

    #[test]
    fn adaptive_sweeps_can_have_one_job_per_trial() {
        let jobs = manifests(&ManifestOptions { job_per_trial: true, trials: 3, gpus_per_trial: 0, ..options() });
        let names: Vec<&str> = jobs.iter().map(|j| j["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["trainlog-sweep-ab12cd-000", "trainlog-sweep-ab12cd-001", "trainlog-sweep-ab12cd-002"]);
        assert!(jobs[0]["spec"]["template"]["spec"]["containers"][0]["resources"].get("limits").is_none());
        assert!(
            manifest_yaml(&ManifestOptions { job_per_trial: true, trials: 3, ..options() }).matches("---\n").count()
                == 3
        );
    }
}
