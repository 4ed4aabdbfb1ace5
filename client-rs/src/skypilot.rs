//! A SkyPilot task for a sweep: a managed job whose one node runs `trainlog agent SWEEP`,
//! asking the server for trials until the sweep is finished, with the node's accelerators
//! (`resources.accelerators`), spot instances (`resources.use_spot`) and where to run
//! (`resources.infra`).
//!
//! **One agent per managed job.** The file holds one task with one node, and
//! `sky jobs launch --num-jobs N` starts N managed jobs from it, each on its own cluster. Two
//! other layouts were turned down. A task with `num_nodes: N` is provisioned and recovered as a
//! whole: all N nodes must be found at once, in one region, and one preempted spot node
//! restarts every agent, with the trials they ran. A file of N documents is, to
//! `sky jobs launch`, a pipeline whose tasks run one after another, not side by side.
//!
//! **Where the key goes.** The server's URL and the sweep are plain `envs`. The API key is only
//! named, as a `secrets` entry with no value: `sky jobs launch … --secret TRAINLOG_API_KEY`
//! fills it from the launching shell, and SkyPilot keeps secret values out of its logs and
//! dashboards. A key's value is never written into the file.
//!
//! **Recovery.** SkyPilot restarts a preempted managed job from scratch on a new cluster (setup
//! again, then the `run` command), so the agent starts afresh and keeps no state of its own.
//! The trials the lost agent ran are the server's to resume: when the node went down with a
//! SIGTERM the agent reported them preempted at once; otherwise they miss their heartbeats and
//! the server takes them as preempted after `trainlog server --trial-timeout` (60 s by default,
//! well under the time a new cluster takes to come up). Whichever agent asks for work next (the
//! recovered one, or another job of the sweep) gets a preempted trial before any new one, with
//! the same run and one more attempt (`TRAINLOG_SWEEP_ATTEMPT`), so the trial resumes its run
//! and restores what it saved with `run.latest_checkpoint()`: the cluster's disk is gone, so
//! checkpoints must be stored as trainlog artifacts, not only as local files. Each preemption
//! counts against the sweep's `max_retries` (2 by default): raise it for spot sweeps. The agent
//! names itself `HOST:$SKYPILOT_TASK_ID`, an id SkyPilot keeps across recoveries, so a trial
//! shows which managed job ran it.
//!
//! The text is JSON, which is YAML (as `k8s.rs` writes its manifests), after comment lines.

use serde_json::{json, Value};
use std::fmt;
use std::str::FromStr;

/// `resources.accelerators`: a name and a whole number of devices per node (`A100:1`, `H100:8`;
/// a bare name means one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accelerators {
    pub name: String,
    pub count: u32,
}

impl FromStr for Accelerators {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let usage = "expected NAME or NAME:COUNT with a whole number of devices, e.g. A100:1";
        let (name, count) = match s.split_once(':') {
            Some((name, count)) => {
                let count =
                    count.parse::<u32>().ok().filter(|n| (1..=1024).contains(n)).ok_or_else(|| {
                        format!("{s:?}: the count {count:?} is not a number from 1 to 1024 ({usage})")
                    })?;
                (name, count)
            }
            None => (s, 1),
        };
        let first_ok = name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
        if !first_ok || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
            return Err(format!("{s:?}: {name:?} is not an accelerator name ({usage})"));
        }
        Ok(Self { name: name.to_owned(), count })
    }
}

impl fmt::Display for Accelerators {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.count)
    }
}

/// A cloud (`aws`, `gcp`, `k8s`, …) or region name as SkyPilot's `infra` spells its parts:
/// letters, digits, `-`, `_`, `.`; SkyPilot itself checks the name when the job is launched.
pub fn parse_infra_part(s: &str) -> Result<String, String> {
    let first_ok = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if first_ok && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')) {
        Ok(s.to_owned())
    } else {
        Err(format!("{s:?}: expected letters, digits, '-', '_', '.' or ':', e.g. aws or us-east-1"))
    }
}

/// What the task needs besides the sweep.
#[derive(Debug, Clone)]
pub struct TaskOptions {
    pub sweep_id: String,
    /// The tracking server as the jobs' machines reach it.
    pub server: String,
    /// Accelerators of each job's node; None runs the agent with one CPU slot.
    pub accelerators: Option<Accelerators>,
    /// Devices each trial gets, so a node runs `count / gpus_per_trial` trials at once; None
    /// gives one trial all of them.
    pub gpus_per_trial: Option<u32>,
    pub use_spot: bool,
    pub cloud: Option<String>,
    pub region: Option<String>,
    /// A container image (`resources.image_id: docker:IMAGE`) holding the trial's code and
    /// trainlog.
    pub image: Option<String>,
    /// Commands that install the trial's dependencies (and trainlog, without `wheel` or an image).
    pub setup: Option<String>,
    /// A trainlog wheel on this machine (`maturin build --release` in client-py/): uploaded to
    /// each node (`file_mounts`) and installed there before `setup`.
    pub wheel: Option<String>,
    /// A folder SkyPilot uploads and runs the agent in (the trial's code).
    pub workdir: Option<String>,
    /// Agents to launch: one managed job each (`--num-jobs`), named in the file's comments.
    pub workers: u32,
    /// The server needs an API key: the file names `TRAINLOG_API_KEY` as a secret to give at launch.
    pub api_key: bool,
}

/// The task's name, which is also the managed jobs' name: `trainlog-sweep-<id>`, in the letters
/// SkyPilot allows.
pub fn task_name(sweep_id: &str) -> String {
    crate::k8s::name_of(sweep_id).trim_end_matches('-').to_owned()
}

/// The `sky jobs launch` command that starts the agents from the file at `path`.
pub fn launch_command(o: &TaskOptions, path: &str) -> String {
    let mut cmd = String::from("sky jobs launch");
    if o.workers > 1 {
        cmd += &format!(" --num-jobs {}", o.workers);
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ',');
    let path = if !path.is_empty() && path.chars().all(plain) {
        path.to_owned()
    } else {
        format!("'{}'", path.replace('\'', r"'\''"))
    };
    cmd += &format!(" -n {} {path}", task_name(&o.sweep_id));
    if o.api_key {
        cmd += " --secret TRAINLOG_API_KEY";
    }
    cmd
}

/// The Python distribution that installs trainlog (`import trainlog`, the `trainlog` command).
pub const PYTHON_DISTRIBUTION: &str = "trainlog-ml";

/// The task as SkyPilot's YAML fields; an error when the options do not fit together.
pub fn task(o: &TaskOptions) -> Result<Value, String> {
    let mut resources = serde_json::Map::new();
    let slots = match (&o.accelerators, o.gpus_per_trial) {
        (Some(acc), per) => {
            let per = per.unwrap_or(acc.count);
            if per == 0 || per > acc.count {
                return Err(format!("--gpus-per-trial {per}: a node of {acc} has {} device(s) to share", acc.count));
            }
            resources.insert("accelerators".into(), json!(acc.to_string()));
            format!("--gpus all --gpus-per-trial {per}")
        }
        (None, Some(_)) => return Err("--gpus-per-trial needs --gpus".into()),
        (None, None) => "--cpu-slots 1".to_owned(),
    };
    if o.use_spot {
        resources.insert("use_spot".into(), json!(true));
    }
    let infra = match (&o.cloud, &o.region) {
        (Some(cloud), Some(region)) => Some(format!("{cloud}/{region}")),
        (Some(cloud), None) => Some(cloud.clone()),
        (None, Some(region)) => Some(format!("*/{region}")),
        (None, None) => None,
    };
    if let Some(infra) = infra {
        resources.insert("infra".into(), json!(infra));
    }
    if let Some(image) = &o.image {
        resources.insert("image_id".into(), json!(format!("docker:{image}")));
    }
    let wheel = o.wheel.as_deref().map(wheel_mount).transpose()?;
    let setup = match (&wheel, &o.setup, &o.image) {
        (Some((remote, _)), setup, _) => Some(match setup.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            Some(setup) => format!("pip install {remote}\n{setup}"),
            None => format!("pip install {remote}"),
        }),
        (None, Some(setup), _) => Some(setup.clone()).filter(|s| !s.trim().is_empty()),
        (None, None, Some(_)) => None,
        // This client's own release, by the distribution's name (`trainlog` on PyPI is another
        // project's).
        (None, None, None) => Some(format!("pip install {PYTHON_DISTRIBUTION}=={}", env!("CARGO_PKG_VERSION"))),
    };
    // The sweep and the name come from variables, so nothing here needs shell quoting.
    let run = format!("trainlog agent \"$TRAINLOG_SWEEP_ID\" {slots} --name \"$(hostname):$SKYPILOT_TASK_ID\"");
    let mut task = json!({
        "name": task_name(&o.sweep_id),
        "num_nodes": 1,
        "resources": resources,
        "envs": {"TRAINLOG_SERVER": o.server, "TRAINLOG_SWEEP_ID": o.sweep_id},
    });
    if o.api_key {
        task["secrets"] = json!({"TRAINLOG_API_KEY": null});
    }
    if let Some(workdir) = &o.workdir {
        task["workdir"] = json!(workdir);
    }
    if let Some((remote, local)) = wheel {
        task["file_mounts"] = json!({ remote: local });
    }
    if let Some(setup) = setup {
        task["setup"] = json!(setup);
    }
    task["run"] = json!(run);
    Ok(task)
}

/// Every field `task` may set, in the order the file shows them.
const FIELD_ORDER: [&str; 9] =
    ["name", "num_nodes", "resources", "workdir", "file_mounts", "envs", "secrets", "setup", "run"];

/// Where a wheel lands on a node, and its path here: its file name must be a wheel's
/// (`NAME-VERSION-TAGS.whl`, letters, digits, `.`, `_`, `-`, `+`), which needs no shell quoting.
fn wheel_mount(local: &str) -> Result<(String, String), String> {
    let name = std::path::Path::new(local).file_name().and_then(|n| n.to_str()).unwrap_or("");
    let plain = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+'));
    if !name.ends_with(".whl") || !plain || name.len() <= 4 {
        return Err(format!("--wheel {local:?}: expected a wheel file, NAME-VERSION-TAGS.whl"));
    }
    Ok((format!("~/.trainlog-wheels/{name}"), local.to_owned()))
}

/// The task file: comment lines on how to launch it, then the task (JSON, which is YAML).
pub fn task_yaml(o: &TaskOptions) -> Result<String, String> {
    let task = task(o)?;
    let agents = if o.workers > 1 { format!("{} agents", o.workers) } else { "the agent".to_owned() };
    let mut text = format!(
        "# SkyPilot managed jobs {name}: each runs one trainlog agent of the sweep.\n\
         # Launch {agents}, one managed job and cluster each:\n\
         #   {launch}\n",
        name = task_name(&o.sweep_id),
        launch = launch_command(o, "THIS_FILE.yaml"),
    );
    if o.api_key {
        text += "# --secret TRAINLOG_API_KEY takes the key from the launching shell; it is not in this file.\n";
    }
    text += "# A preempted job restarts on a new cluster; its trials resume from their checkpoints.\n";
    // The fields in the order SkyPilot's documentation shows them. JSON strings hold no raw line
    // break, so indenting after each one only indents the nesting.
    let fields: Vec<String> = FIELD_ORDER
        .iter()
        .filter_map(|key| task.get(*key).map(|value| (key, value)))
        .map(|(key, value)| {
            let value = serde_json::to_string_pretty(value).unwrap_or_default().replace('\n', "\n  ");
            format!("  {}: {value}", json!(key))
        })
        .collect();
    text += &format!("{{\n{}\n}}\n", fields.join(",\n"));
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> TaskOptions {
        TaskOptions {
            sweep_id: "Ab12cd".into(),
            server: "https://trainlog.example:7310".into(),
            accelerators: Some("A100:2".parse().unwrap()),
            gpus_per_trial: None,
            use_spot: true,
            cloud: Some("aws".into()),
            region: Some("us-east-1".into()),
            image: None,
            setup: None,
            wheel: Some("target/wheels/trainlog-0.1.0-cp39-abi3-manylinux_2_34_x86_64.whl".into()),
            workdir: Some(".".into()),
            workers: 4,
            api_key: true,
        }
    }

    /// The task as SkyPilot reads it: the comment lines dropped, the rest parsed.
    fn parsed(text: &str) -> Value {
        let body: String = text.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
        serde_json::from_str(&body).unwrap()
    }

    #[test]
    fn accelerators_are_a_name_and_a_whole_count() {
        assert_eq!("A100:1".parse(), Ok(Accelerators { name: "A100".into(), count: 1 }));
        assert_eq!("H100".parse(), Ok(Accelerators { name: "H100".into(), count: 1 }));
        assert_eq!("A100-80GB:8".parse::<Accelerators>().unwrap().to_string(), "A100-80GB:8");
        for bad in ["A100:x", "A100:0", "A100:0.5", "A100:", ":1", "", "A 100:1", "A100:1:2", "-A100"] {
            assert!(bad.parse::<Accelerators>().is_err(), "{bad:?} was taken");
        }
        let why = "A100:x".parse::<Accelerators>().unwrap_err();
        assert!(why.contains("\"x\" is not a number") && why.contains("A100:1"), "{why}");
        assert!(parse_infra_part("us-east-1").is_ok() && parse_infra_part("aws/x").is_err());
    }

    #[test]
    fn one_node_runs_one_agent_with_the_accelerators_on_spot() {
        let t = parsed(&task_yaml(&options()).unwrap());
        assert_eq!(t["name"], "trainlog-sweep-ab12cd");
        assert_eq!(t["num_nodes"], 1);
        assert_eq!(t["resources"], json!({"accelerators": "A100:2", "use_spot": true, "infra": "aws/us-east-1"}));
        assert_eq!(
            t["run"],
            "trainlog agent \"$TRAINLOG_SWEEP_ID\" --gpus all --gpus-per-trial 2 --name \"$(hostname):$SKYPILOT_TASK_ID\""
        );
        assert_eq!(
            t["envs"],
            json!({"TRAINLOG_SERVER": "https://trainlog.example:7310", "TRAINLOG_SWEEP_ID": "Ab12cd"})
        );
        assert_eq!(t["secrets"], json!({"TRAINLOG_API_KEY": null}));
        let remote = "~/.trainlog-wheels/trainlog-0.1.0-cp39-abi3-manylinux_2_34_x86_64.whl";
        assert_eq!((t["setup"].as_str(), t["workdir"].as_str()), (Some(&*format!("pip install {remote}")), Some(".")));
        assert_eq!(
            t["file_mounts"],
            json!({ remote: "target/wheels/trainlog-0.1.0-cp39-abi3-manylinux_2_34_x86_64.whl" })
        );
    }

    #[test]
    fn nothing_is_installed_by_a_name_the_project_does_not_own() {
        let plain = task(&TaskOptions { wheel: None, ..options() }).unwrap();
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(plain["setup"].as_str(), Some(&*format!("pip install trainlog-ml=={version}")), "{plain}");
        for o in [options(), TaskOptions { wheel: None, setup: Some("pip install -r r.txt".into()), ..options() }] {
            let setup = task(&o).unwrap()["setup"].as_str().unwrap_or("").to_owned();
            assert!(!setup.split_whitespace().any(|w| w == "trainlog" || w.starts_with("trainlog=")), "{setup}");
        }
        let imaged =
            task(&TaskOptions { wheel: None, image: Some("ghcr.io/team/train:1".into()), ..options() }).unwrap();
        assert!(imaged.get("setup").is_none(), "the image holds trainlog: {imaged}");
        let both = task(&TaskOptions { setup: Some("pip install -r r.txt".into()), ..options() }).unwrap();
        assert!(both["setup"].as_str().unwrap().ends_with(".whl\npip install -r r.txt"), "{both}");
        for bad in ["trainlog.tar.gz", "dir/it's.whl", ".whl", "a b.whl"] {
            assert!(task(&TaskOptions { wheel: Some(bad.into()), ..options() }).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_comments_say_how_to_launch_every_agent() {
        let text = task_yaml(&options()).unwrap();
        assert!(text.contains(
            "#   sky jobs launch --num-jobs 4 -n trainlog-sweep-ab12cd THIS_FILE.yaml --secret TRAINLOG_API_KEY\n"
        ));
        let one = TaskOptions { workers: 1, api_key: false, ..options() };
        assert_eq!(launch_command(&one, "s.yaml"), "sky jobs launch -n trainlog-sweep-ab12cd s.yaml");
        assert_eq!(
            launch_command(&one, "my jobs/it's.yaml"),
            r"sky jobs launch -n trainlog-sweep-ab12cd 'my jobs/it'\''s.yaml'"
        );
        assert!(parsed(&task_yaml(&one).unwrap()).get("secrets").is_none());
    }

    #[test]
    fn slots_images_and_setup_follow_the_options() {
        let shared =
            task(&TaskOptions { accelerators: Some("H100:8".parse().unwrap()), gpus_per_trial: Some(1), ..options() });
        assert!(shared.unwrap()["run"].as_str().unwrap().contains("--gpus all --gpus-per-trial 1 "));
        let cpu = task(&TaskOptions { accelerators: None, cloud: None, use_spot: false, ..options() }).unwrap();
        assert!(cpu["run"].as_str().unwrap().contains(" --cpu-slots 1 "));
        assert_eq!(cpu["resources"], json!({"infra": "*/us-east-1"}));
        let image =
            task(&TaskOptions { image: Some("registry.example/train:1".into()), wheel: None, ..options() }).unwrap();
        assert_eq!(image["resources"]["image_id"], "docker:registry.example/train:1");
        assert!(image.get("setup").is_none());
        let setup = "pip install -r requirements.txt\necho \"ready\"";
        let custom = task_yaml(&TaskOptions { setup: Some(setup.into()), wheel: None, ..options() }).unwrap();
        assert_eq!(parsed(&custom)["setup"], setup);
        assert!(task(&TaskOptions { gpus_per_trial: Some(3), ..options() }).is_err());
        assert!(task(&TaskOptions { accelerators: None, gpus_per_trial: Some(1), ..options() }).is_err());
    }

    #[test]
    fn the_file_holds_every_field_in_order() {
        let o = TaskOptions { image: Some("i".into()), setup: Some("s".into()), ..options() };
        let (text, t) = (task_yaml(&o).unwrap(), task(&o).unwrap());
        assert_eq!(parsed(&text), t);
        assert_eq!(t.as_object().unwrap().len(), FIELD_ORDER.len());
        let at = |key: &str| text.find(&format!("\n  \"{key}\": ")).unwrap();
        assert!(FIELD_ORDER.windows(2).all(|w| at(w[0]) < at(w[1])));
    }

    #[test]
    fn strings_are_quoted_whatever_they_hold() {
        let o = TaskOptions { server: "http://h:1/\"#: {x}\n- y".into(), sweep_id: "a\nb".into(), ..options() };
        let text = task_yaml(&o).unwrap();
        // Every line is a comment or part of the JSON document; none starts a YAML key of its own.
        assert_eq!(parsed(&text)["envs"]["TRAINLOG_SERVER"], "http://h:1/\"#: {x}\n- y");
        assert!(text.lines().all(|l| l.starts_with('#') || l.starts_with(['{', '}', ' '])));
    }
}
