//! `trainlog import mlflow`: copies an MLflow installation (a running server, or its SQLite
//! database and artifact folder) into a trainlog server, through that server's API. Runs keep
//! their ids, times, params, tags, every metric point and their artifacts; the registry keeps its
//! models, versions, aliases, tags and stages; MLflow 3's logged models keep their ids. A run is
//! marked done (its `import` metadata) only once all of it is copied, so a second import skips
//! what the first finished and completes what it did not.

mod rest;
mod source;
mod sqlite;

use rest::{double_json, retried, text, Rest};
use serde_json::{json, Value};
use source::{Experiment, LoggedModel, RestSource, Source, SourceRun};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{url} cannot be reached: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered {status} {code}: {message}")]
    Refused { url: String, status: u16, code: String, message: String },
    #[error("{0}")]
    Source(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An outage or a busy server: worth asking again.
    fn is_transient(&self) -> bool {
        match self {
            Error::Unreachable { .. } => true,
            Error::Refused { status, .. } => *status >= 500 || *status == 429 || *status == 408,
            Error::Source(_) => false,
        }
    }

    fn is_not_found(&self) -> bool {
        matches!(self, Error::Refused { status: 404, .. })
    }
}

/// Points sent to trainlog in one request.
const POINTS_PER_REQUEST: usize = 10_000;
/// MLflow's own limits on one `log-batch`, which trainlog's MLflow routes keep.
const PARAMS_PER_BATCH: usize = 100;
const TAGS_PER_BATCH: usize = 100;

const DOOR: &str = "/api/2.0/mlflow";
const PROXY: &str = "/api/2.0/mlflow-artifacts/artifacts";

#[derive(Default)]
struct Counts {
    copied: u64,
    skipped: u64,
    failed: u64,
}

impl Counts {
    fn line(&self, what: &str) -> String {
        format!("{what}: {} copied, {} already there, {} not copied", self.copied, self.skipped, self.failed)
    }
}

#[derive(Default)]
struct Report {
    experiments: Counts,
    runs: Counts,
    logged_models: Counts,
    registered_models: Counts,
    versions: Counts,
    points: u64,
    /// Points of a series that share their step with a later point: trainlog keeps one value a step.
    same_step: u64,
    files: u64,
    bytes: u64,
    aliases: u64,
    problems: Vec<String>,
}

impl Report {
    fn text(&self) -> String {
        let mut lines = vec![
            self.experiments.line("experiments"),
            self.runs.line("runs"),
            format!(
                "metric points: {} copied; {} not kept (another point of the same run, metric and step was logged later; trainlog keeps one value a step)",
                self.points, self.same_step
            ),
            format!("artifact files: {} copied ({} bytes)", self.files, self.bytes),
            self.logged_models.line("logged models"),
            self.registered_models.line("registered models"),
            self.versions.line("model versions"),
            format!("aliases: {} set", self.aliases),
        ];
        if self.problems.is_empty() {
            lines.push("nothing failed".into());
        } else {
            lines.push(format!("{} problems:", self.problems.len()));
            lines.extend(self.problems.iter().map(|p| format!("  - {p}")));
        }
        lines.join("\n")
    }
}

/// What to copy, and where.
pub struct Options {
    /// `http(s)://…` (an MLflow server) or `sqlite:///…` (its database).
    pub from: String,
    /// The MLflow server's `--artifacts-destination` folder, for `mlflow-artifacts:` URIs read
    /// from a database.
    pub artifacts: Option<PathBuf>,
    /// The trainlog server to copy into.
    pub server: String,
}

/// Copies everything; the answer is the report, and an error only when the copy had to stop.
pub fn import(options: &Options) -> std::result::Result<String, String> {
    let source = open_source(options).map_err(|e| e.to_string())?;
    let client = trainlog::client_for(&options.server, Duration::from_secs(300)).map_err(|e| e.to_string())?;
    let target = Rest::new(&options.server, client);
    let mut import =
        Import { source: source.as_ref(), target, report: Report::default(), last_progress: Instant::now() };
    eprintln!("copying {} into {}", import.source.describe(), options.server);
    let outcome = import.everything();
    let report = format!("{}\nrequests to trainlog: {}", import.report.text(), import.target.requests_sent());
    match outcome {
        Ok(()) => Ok(report),
        Err(e) => {
            Err(format!("{e}\nthe import stopped; run it again to go on from where it stopped\nso far:\n{report}"))
        }
    }
}

fn open_source(options: &Options) -> Result<Box<dyn Source>> {
    let from = options.from.trim();
    if from.starts_with("http://") || from.starts_with("https://") {
        return Ok(Box::new(RestSource { rest: Rest::for_mlflow(from)? }));
    }
    if let Some(path) = from.strip_prefix("sqlite:///") {
        let path = PathBuf::from(format!("/{}", path.trim_start_matches('/')));
        return Ok(Box::new(sqlite::SqliteSource::open(path, options.artifacts.clone())?));
    }
    if from.starts_with("postgresql://") || from.starts_with("mysql://") {
        return Err(Error::Source(format!(
            "{from}: reading an MLflow database other than SQLite is not supported; start `mlflow server` on it and import from its http:// address"
        )));
    }
    Err(Error::Source(format!(
        "{from}: give an MLflow server (http://host:port) or its database (sqlite:///path/mlflow.db)"
    )))
}

/// Where a run stands in trainlog.
enum Found {
    Missing,
    /// Created by an import that stopped before it was done.
    Unfinished,
    Done,
}

struct Import<'a> {
    source: &'a dyn Source,
    target: Rest,
    report: Report,
    last_progress: Instant,
}

impl Import<'_> {
    fn everything(&mut self) -> Result<()> {
        let experiments = self.source.experiments()?;
        for experiment in &experiments {
            self.experiment(experiment)?;
        }
        let models = self.source.registered_models()?;
        for model in &models {
            self.registered_model(model)?;
        }
        Ok(())
    }

    /// A failure that stops one item but not the import: counted and reported. An outage that
    /// outlasted the retries stops the import.
    fn problem(&mut self, what: String, error: Error) -> Result<()> {
        if error.is_transient() {
            return Err(error);
        }
        self.report.problems.push(format!("{what}: {error}"));
        Ok(())
    }

    fn progress(&mut self, text: impl FnOnce() -> String) {
        if self.last_progress.elapsed() >= Duration::from_secs(1) {
            eprintln!("{}", text());
            self.last_progress = Instant::now();
        }
    }

    fn experiment(&mut self, experiment: &Experiment) -> Result<()> {
        let target_id = match self.target_experiment(experiment) {
            Ok(Some((id, created))) => {
                if created {
                    self.report.experiments.copied += 1;
                } else {
                    self.report.experiments.skipped += 1;
                }
                id
            }
            Ok(None) => {
                self.report.experiments.skipped += 1;
                self.report.runs.skipped += self.source.runs(experiment)?.len() as u64;
                return Ok(());
            }
            Err(e) => {
                self.report.experiments.failed += 1;
                return self.problem(format!("experiment {:?}", experiment.name), e);
            }
        };
        let runs = parents_first(self.source.runs(experiment)?);
        let mut models_by_run: HashMap<String, Vec<LoggedModel>> = HashMap::new();
        let mut runless = Vec::new();
        for model in self.source.logged_models(experiment)? {
            match &model.source_run_id {
                Some(run) => models_by_run.entry(run.clone()).or_default().push(model),
                None => runless.push(model),
            }
        }
        let total = runs.len();
        for (i, run) in runs.iter().enumerate() {
            let models = models_by_run.remove(&run.id).unwrap_or_default();
            match self.run(run, experiment, &target_id, &models) {
                Ok(true) => self.report.runs.copied += 1,
                Ok(false) => self.report.runs.skipped += 1,
                Err(e) => {
                    self.report.runs.failed += 1;
                    self.problem(format!("run {} ({:?}) of experiment {:?}", run.id, run.name, experiment.name), e)?;
                }
            }
            let points = self.report.points;
            self.progress(|| {
                format!("experiment {:?}: run {}/{total}, {points} points so far", experiment.name, i + 1)
            });
        }
        for model in &runless {
            self.logged_model_counted(model, &target_id, "")?;
        }
        for (run, models) in models_by_run {
            self.report.logged_models.failed += models.len() as u64;
            self.report
                .problems
                .push(format!("{} logged models of run {run}, which is not in their experiment", models.len()));
        }
        if experiment.deleted {
            self.target.post(&format!("{DOOR}/experiments/delete"), &json!({"experiment_id": target_id}))?;
        }
        eprintln!("experiment {:?}: {total} runs", experiment.name);
        Ok(())
    }

    /// The id of the experiment in trainlog and whether this import made it; none when a deleted
    /// one is already there (an earlier import finished it).
    fn target_experiment(&mut self, experiment: &Experiment) -> Result<Option<(String, bool)>> {
        let (id, created) =
            match self.target.get(&format!("{DOOR}/experiments/get-by-name"), &[("experiment_name", &experiment.name)])
            {
                Ok(found) => {
                    if found["experiment"]["lifecycle_stage"] == "deleted" {
                        return Ok(None);
                    }
                    (text(&found["experiment"]["experiment_id"]), false)
                }
                Err(e) if e.is_not_found() => {
                    let made =
                        self.target.post(&format!("{DOOR}/experiments/create"), &json!({"name": experiment.name}))?;
                    (text(&made["experiment_id"]), true)
                }
                Err(e) => return Err(e),
            };
        for (key, value) in &experiment.tags {
            self.target.post(
                &format!("{DOOR}/experiments/set-experiment-tag"),
                &json!({"experiment_id": id, "key": key, "value": value}),
            )?;
        }
        Ok(Some((id, created)))
    }

    /// Where a run stands, in one request: trainlog's own answer holds the run's project (an
    /// experiment is the project of the same name), whether it is archived (deleted, in MLflow's
    /// words) and the import's mark.
    fn found(&self, run: &SourceRun, experiment: &str) -> Result<Found> {
        let detail = match self.target.get(&format!("/api/v1/runs/{}", run.id), &[]) {
            Ok(detail) => detail,
            Err(e) if e.is_not_found() => return Ok(Found::Missing),
            Err(e) => return Err(e),
        };
        let project = &detail["project"];
        if project != experiment {
            return Err(Error::Source(format!("trainlog already holds a run with this id, in experiment {project}")));
        }
        if detail["archived"] == true || detail["metadata"]["import"]["done"] == true {
            return Ok(Found::Done);
        }
        Ok(Found::Unfinished)
    }

    /// Copies one run; false when an earlier import already did.
    fn run(
        &mut self,
        run: &SourceRun,
        experiment: &Experiment,
        experiment_id: &str,
        models: &[LoggedModel],
    ) -> Result<bool> {
        match self.found(run, &experiment.name)? {
            Found::Done => return Ok(false),
            Found::Unfinished => {}
            Found::Missing => {
                self.target.post(
                    &format!("{DOOR}/runs/create"),
                    &json!({"experiment_id": experiment_id, "run_id": run.id, "run_name": run.name,
                            "user_id": run.user, "start_time": run.start_time, "tags": key_value_list(&run.tags)}),
                )?;
            }
        }
        for chunk in run.params.chunks(PARAMS_PER_BATCH) {
            self.target
                .post(&format!("{DOOR}/runs/log-batch"), &json!({"run_id": run.id, "params": key_value_list(chunk)}))?;
        }
        for chunk in run.tags.chunks(TAGS_PER_BATCH) {
            self.target
                .post(&format!("{DOOR}/runs/log-batch"), &json!({"run_id": run.id, "tags": key_value_list(chunk)}))?;
        }
        for key in &run.metric_keys {
            self.metric(run, key)?;
        }
        // Through MLflow's artifact proxy, so images logged with a key and step, tables and text
        // land in the media store as they do when MLflow's client logs them.
        for path in &self.source.artifact_files(&run.artifact_uri)? {
            let to = format!("{experiment_id}/{}/artifacts/{path}", run.id);
            self.artifact(&run.artifact_uri, path, PROXY, &to)?;
        }
        for model in models {
            self.logged_model_counted(model, experiment_id, &run.id)?;
        }
        if run.status != "RUNNING" && run.status != "SCHEDULED" {
            self.target.post(
                &format!("{DOOR}/runs/update"),
                &json!({"run_id": run.id, "status": run.status, "end_time": run.end_time}),
            )?;
        }
        self.target.put(
            &format!("/api/v1/runs/{}/metadata/import", run.id),
            &json!({"from": self.source.describe(), "done": true}),
        )?;
        if run.deleted {
            self.target.post(&format!("{DOOR}/runs/delete"), &json!({"run_id": run.id}))?;
        }
        Ok(true)
    }

    fn metric(&mut self, run: &SourceRun, key: &str) -> Result<()> {
        let mut points = self.source.history(run, key)?;
        // The newest point of a step is the one trainlog keeps, as MLflow shows it as latest.
        points.sort_by_key(|p| (p.timestamp, p.step));
        let steps: BTreeSet<i64> = points.iter().map(|p| p.step).collect();
        self.report.same_step += (points.len() - steps.len()) as u64;
        for chunk in points.chunks(POINTS_PER_REQUEST) {
            let body: Vec<Value> = chunk
                .iter()
                .map(|p| json!({"key": key, "step": p.step, "value": double_json(p.value), "timestamp": p.timestamp}))
                .collect();
            self.target.post(&format!("/api/v1/runs/{}/metrics", run.id), &json!({"points": body}))?;
        }
        self.report.points += steps.len() as u64;
        Ok(())
    }

    /// Copies one file: `path` under the source's `uri` to `to` under the trainlog route `route`.
    fn artifact(&mut self, uri: &str, path: &str, route: &str, to: &str) -> Result<()> {
        let mut sent = 0;
        retried(|| {
            let (body, len) = self.source.open_artifact(uri, path)?;
            self.target.put_stream(route, to, body, len)?;
            sent = len.unwrap_or(0);
            Ok(())
        })?;
        self.report.files += 1;
        self.report.bytes += sent;
        Ok(())
    }

    fn logged_model_counted(&mut self, model: &LoggedModel, experiment_id: &str, run: &str) -> Result<()> {
        match self.logged_model(model, experiment_id) {
            Ok(true) => self.report.logged_models.copied += 1,
            Ok(false) => self.report.logged_models.skipped += 1,
            Err(e) => {
                self.report.logged_models.failed += 1;
                let of = if run.is_empty() { String::new() } else { format!(" of run {run}") };
                self.problem(format!("logged model {}{of}", model.id), e)?;
            }
        }
        Ok(())
    }

    /// Copies an MLflow 3 logged model under its own id; false when it is already there.
    fn logged_model(&mut self, model: &LoggedModel, experiment_id: &str) -> Result<bool> {
        let route = format!("{DOOR}/logged-models/{}", model.id);
        match self.target.get(&route, &[]) {
            Ok(found) if found["model"]["info"]["status"] == "LOGGED_MODEL_READY" || !model.ready => return Ok(false),
            Ok(_) => {}
            Err(e) if e.is_not_found() => {
                self.target.post(
                    &format!("{DOOR}/logged-models"),
                    &json!({"experiment_id": experiment_id, "model_id": model.id, "name": model.name,
                            "model_type": model.model_type, "source_run_id": model.source_run_id,
                            "params": key_value_list(&model.params), "tags": key_value_list(&model.tags)}),
                )?;
            }
            Err(e) => return Err(e),
        }
        for path in self.source.artifact_files(&model.artifact_uri)? {
            let to = format!("{experiment_id}/models/{}/artifacts/{path}", model.id);
            self.artifact(&model.artifact_uri, &path, PROXY, &to)?;
        }
        if model.ready {
            self.target.patch(&route, &json!({"model_id": model.id, "status": "LOGGED_MODEL_READY"}))?;
        }
        Ok(true)
    }

    fn registered_model(&mut self, model: &source::RegisteredModel) -> Result<()> {
        let outcome = self.registered_model_inner(model);
        match outcome {
            Ok(created) => {
                if created {
                    self.report.registered_models.copied += 1;
                } else {
                    self.report.registered_models.skipped += 1;
                }
                Ok(())
            }
            Err(e) => {
                self.report.registered_models.failed += 1;
                self.problem(format!("registered model {:?}", model.name), e)
            }
        }
    }

    fn registered_model_inner(&mut self, model: &source::RegisteredModel) -> Result<bool> {
        let created = match self.target.get(&format!("{DOOR}/registered-models/get"), &[("name", &model.name)]) {
            Ok(_) => false,
            Err(e) if e.is_not_found() => {
                self.target.post(
                    &format!("{DOOR}/registered-models/create"),
                    &json!({"name": model.name, "description": model.description}),
                )?;
                true
            }
            Err(e) => return Err(e),
        };
        for (key, value) in &model.tags {
            self.target.post(
                &format!("{DOOR}/registered-models/set-tag"),
                &json!({"name": model.name, "key": key, "value": value}),
            )?;
        }
        let filter = format!("name = '{}'", model.name.replace('\'', "\\'"));
        let existing = self
            .target
            .get(&format!("{DOOR}/model-versions/search"), &[("filter", &filter), ("max_results", "10000")])?;
        let have: BTreeSet<i64> = existing["model_versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| text(&v["version"]).parse().ok())
            .collect();
        let mut numbers: BTreeMap<i64, i64> = have.iter().map(|n| (*n, *n)).collect();
        for version in self.source.versions(&model.name)? {
            if have.contains(&version.number) {
                self.report.versions.skipped += 1;
                continue;
            }
            match self.version(&model.name, &version) {
                Ok(number) => {
                    self.report.versions.copied += 1;
                    numbers.insert(version.number, number);
                    if number != version.number {
                        self.report.problems.push(format!(
                            "model {:?}: version {} is version {number} here (MLflow had deleted versions before it)",
                            model.name, version.number
                        ));
                    }
                }
                Err(e) => {
                    self.report.versions.failed += 1;
                    self.problem(format!("model {:?} version {}", model.name, version.number), e)?;
                }
            }
        }
        for (alias, version) in &model.aliases {
            let Some(number) = numbers.get(version) else { continue };
            self.target.post(
                &format!("{DOOR}/registered-models/alias"),
                &json!({"name": model.name, "alias": alias, "version": number.to_string()}),
            )?;
            self.report.aliases += 1;
        }
        Ok(created)
    }

    fn version(&mut self, name: &str, version: &source::Version) -> Result<i64> {
        let source = version_source(&version.source)?;
        let made = self.target.post(
            &format!("{DOOR}/model-versions/create"),
            &json!({"name": name, "source": source, "run_id": version.run_id, "description": version.description, "tags": key_value_list(&version.tags)}),
        )?;
        let number: i64 = text(&made["model_version"]["version"])
            .parse()
            .map_err(|_| Error::Source(format!("trainlog answered no version number: {made}")))?;
        if !version.stage.is_empty() && version.stage != "None" {
            self.target.post(
                &format!("{DOOR}/model-versions/transition-stage"),
                &json!({"name": name, "version": number.to_string(), "stage": version.stage, "archive_existing_versions": false}),
            )?;
        }
        Ok(number)
    }
}

/// Pairs as MLflow's `[{key, value}]`.
fn key_value_list(pairs: &[(String, String)]) -> Vec<Value> {
    pairs.iter().map(|(k, v)| json!({"key": k, "value": v})).collect()
}

/// A version's source as trainlog's registry takes it: logged models and run paths as they
/// are; a path in the MLflow server's artifact store as the run path it is.
fn version_source(source: &str) -> Result<String> {
    if source.starts_with("models:/m-") || source.starts_with("runs:/") {
        return Ok(source.to_owned());
    }
    if let Some(path) = source::proxied_path(source) {
        // EXPERIMENT/RUN/artifacts/PATH
        let parts: Vec<&str> = path.splitn(4, '/').collect();
        if let [_, run, "artifacts", rest] = parts.as_slice() {
            return Ok(format!("runs:/{run}/{rest}"));
        }
    }
    Err(Error::Source(format!(
        "the version's files at {source:?} are not in a run or a logged model this import copies"
    )))
}

/// Runs ordered so that a parent comes before its children (trainlog checks that a parent exists).
fn parents_first(runs: Vec<SourceRun>) -> Vec<SourceRun> {
    let ids: BTreeSet<String> = runs.iter().map(|r| r.id.clone()).collect();
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut pending = runs;
    let mut out = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let before = pending.len();
        let (ready, rest): (Vec<SourceRun>, Vec<SourceRun>) =
            pending.into_iter().partition(|r| match r.tag("mlflow.parentRunId") {
                Some(parent) => !ids.contains(parent) || placed.contains(parent),
                None => true,
            });
        placed.extend(ready.iter().map(|r| r.id.clone()));
        out.extend(ready);
        pending = rest;
        if pending.len() == before {
            // A cycle of parents, which MLflow cannot make: keep the rest in their order.
            out.append(&mut pending);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_sources_become_run_paths_or_stay_logged_models() {
        assert_eq!(version_source("models:/m-0123").unwrap(), "models:/m-0123");
        assert_eq!(version_source("runs:/abc/model").unwrap(), "runs:/abc/model");
        assert_eq!(version_source("mlflow-artifacts:/3/abc/artifacts/model/x").unwrap(), "runs:/abc/model/x");
        assert_eq!(version_source("mlflow-artifacts://host:5000/3/abc/artifacts/m").unwrap(), "runs:/abc/m");
        assert!(version_source("s3://bucket/model").is_err());
    }

    #[test]
    fn parents_come_before_their_children() {
        let run = |id: &str, parent: Option<&str>| SourceRun {
            id: id.into(),
            name: String::new(),
            user: String::new(),
            status: "FINISHED".into(),
            start_time: None,
            end_time: None,
            deleted: false,
            params: vec![],
            tags: parent.map(|p| vec![("mlflow.parentRunId".to_owned(), p.to_owned())]).unwrap_or_default(),
            metric_keys: vec![],
            artifact_uri: String::new(),
        };
        let order: Vec<String> =
            parents_first(vec![run("c", Some("b")), run("b", Some("a")), run("a", None), run("x", Some("gone"))])
                .into_iter()
                .map(|r| r.id)
                .collect();
        assert_eq!(order, ["a", "x", "b", "c"]);
    }
}
