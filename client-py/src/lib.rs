//! `trainlog._trainlog`: the native module of the Python package, a thin layer over the Rust
//! SDK. Logging only enqueues; blocking calls (start, flush, finish, reads) release the GIL.

mod media;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString};
use serde_json::Value;
use std::time::Duration;

pyo3::create_exception!(_trainlog, TrainlogError, PyException, "Base class of trainlog's errors.");
pyo3::create_exception!(_trainlog, ServerError, TrainlogError, "The server refused a request.");
pyo3::create_exception!(
    _trainlog,
    InvalidArgumentError,
    ServerError,
    "The server found the request malformed (HTTP 400)."
);
pyo3::create_exception!(_trainlog, NotFoundError, ServerError, "The run or project does not exist (HTTP 404).");
pyo3::create_exception!(_trainlog, ConflictError, ServerError, "The request conflicts with what is stored (HTTP 409).");
pyo3::create_exception!(_trainlog, UnreachableError, TrainlogError, "The server cannot be reached.");
pyo3::create_exception!(
    _trainlog,
    ChecksumError,
    TrainlogError,
    "A downloaded file does not match its recorded sha256."
);

pyo3::create_exception!(_trainlog, SourceDeletedError, TrainlogError, "A model version's files were deleted.");

fn to_py_err(e: trainlog::Error) -> PyErr {
    match &e {
        trainlog::Error::Server { status, .. } => match status {
            400 => InvalidArgumentError::new_err(e.to_string()),
            404 => NotFoundError::new_err(e.to_string()),
            409 => ConflictError::new_err(e.to_string()),
            _ => ServerError::new_err(e.to_string()),
        },
        trainlog::Error::Unreachable { .. } => UnreachableError::new_err(e.to_string()),
        trainlog::Error::Corrupt { .. } => ChecksumError::new_err(e.to_string()),
        trainlog::Error::SourceDeleted { .. } => SourceDeletedError::new_err(e.to_string()),
        _ => TrainlogError::new_err(e.to_string()),
    }
}

/// Converts a Python value (dict, list, str, number, bool, None) to JSON.
pub(crate) fn to_json(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = value.extract::<i64>() {
        if !value.is_instance_of::<pyo3::types::PyFloat>() {
            return Ok(Value::from(i));
        }
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut map = serde_json::Map::new();
        for (k, v) in d.iter() {
            map.insert(k.str()?.to_cow()?.into_owned(), to_json(&v)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(l) = value.cast::<PyList>() {
        return l.iter().map(|v| to_json(&v)).collect::<PyResult<Vec<_>>>().map(Value::Array);
    }
    if let Ok(t) = value.cast::<pyo3::types::PyTuple>() {
        return t.iter().map(|v| to_json(&v)).collect::<PyResult<Vec<_>>>().map(Value::Array);
    }
    if let Ok(f) = value.extract::<f64>() {
        return Ok(trainlog_schema_float(f));
    }
    Ok(Value::String(value.str()?.to_cow()?.into_owned()))
}

/// Params are typed and have no null; Python configs often hold `None`, kept as the text "None".
fn nulls_as_text(value: Value) -> Value {
    match value {
        Value::Null => Value::String("None".into()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, nulls_as_text(v))).collect()),
        other => other,
    }
}

fn trainlog_schema_float(f: f64) -> Value {
    if f.is_finite() {
        serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)
    } else {
        Value::String(
            if f.is_nan() {
                "NaN"
            } else if f > 0.0 {
                "Infinity"
            } else {
                "-Infinity"
            }
            .into(),
        )
    }
}

fn to_py(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    let json = py.import("json")?;
    Ok(json.call_method1("loads", (value.to_string(),))?.unbind())
}

/// A run being logged. Created by `trainlog.init`; use the Python wrapper.
#[pyclass(module = "trainlog._trainlog", frozen)]
struct NativeRun {
    run: trainlog::Run,
}

#[pymethods]
impl NativeRun {
    #[new]
    #[pyo3(signature = (project, *, name=None, run_id=None, config=None, tags=None, group=None, notes=None,
        server=None, resume="never", mode="online", spool_dir=None, metadata=None,
        system_interval=10.0, capture_environment=true, capture_code=true, capture_code_diff=true, cost=true,
        cost_per_hour=None, cost_per_gpu_hour=None, job=None, rank_metrics=false, console="all",
        console_max_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        project: String,
        name: Option<String>,
        run_id: Option<String>,
        config: Option<&Bound<'_, PyAny>>,
        tags: Option<&Bound<'_, PyAny>>,
        group: Option<String>,
        notes: Option<String>,
        server: Option<String>,
        resume: &str,
        mode: &str,
        spool_dir: Option<String>,
        metadata: Option<&Bound<'_, PyDict>>,
        system_interval: f64,
        capture_environment: bool,
        capture_code: bool,
        capture_code_diff: bool,
        cost: bool,
        cost_per_hour: Option<f64>,
        cost_per_gpu_hour: Option<f64>,
        job: Option<&Bound<'_, PyDict>>,
        rank_metrics: bool,
        console: &str,
        console_max_bytes: Option<u64>,
    ) -> PyResult<Self> {
        let mut b = trainlog::Run::builder(project)
            .resume(trainlog::Resume::parse(resume).map_err(to_py_err)?)
            .mode(trainlog::Mode::parse(mode).map_err(to_py_err)?)
            .system_metrics((system_interval > 0.0).then(|| Duration::from_secs_f64(system_interval)))
            .capture_environment(capture_environment)
            .capture_code(capture_code)
            .capture_code_diff(capture_code_diff)
            .cost(cost);
        if let Some(v) = name {
            b = b.name(v);
        }
        if let Some(v) = run_id {
            b = b.id(v);
        }
        if let Some(c) = config {
            b = b.config(nulls_as_text(to_json(c)?));
        }
        match tags.map(to_json).transpose()? {
            Some(Value::Array(labels)) => {
                for l in labels {
                    b = b.label(l.as_str().map(str::to_owned).unwrap_or_else(|| l.to_string()));
                }
            }
            Some(Value::Object(map)) => {
                for (k, v) in map {
                    b = b.tag(k, v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()));
                }
            }
            Some(Value::Null) | None => {}
            Some(_) => return Err(pyo3::exceptions::PyTypeError::new_err("tags must be a list of labels or a dict")),
        }
        if let Some(v) = group {
            b = b.group(v);
        }
        if let Some(v) = notes {
            b = b.notes(v);
        }
        if let Some(v) = server {
            b = b.server(v);
        }
        if let Some(v) = spool_dir {
            b = b.spool_dir(v);
        }
        if let Some(v) = cost_per_hour {
            b = b.cost_per_hour(v);
        }
        if let Some(v) = cost_per_gpu_hour {
            b = b.cost_per_gpu_hour(v);
        }
        if let Some(overrides) = job {
            let mut context = trainlog::collect::job::detect_from_process();
            trainlog::membership::apply_overrides(&mut context, &to_json(overrides.as_any())?).map_err(to_py_err)?;
            b = b.job(context);
        }
        b = b.rank_metrics(rank_metrics).console(trainlog::console::ConsoleMode::parse(console).map_err(to_py_err)?);
        if let Some(bytes) = console_max_bytes {
            b = b.console_max_bytes(bytes);
        }
        if let Some(m) = metadata {
            for (k, v) in m.iter() {
                b = b.metadata(k.str()?.to_cow()?.into_owned(), to_json(&v)?);
            }
        }
        let run = py.detach(move || b.start()).map_err(to_py_err)?;
        Ok(Self { run })
    }

    #[getter]
    fn id(&self) -> &str {
        self.run.id()
    }

    #[getter]
    fn project(&self) -> &str {
        self.run.project()
    }

    #[getter]
    fn server(&self) -> &str {
        self.run.server()
    }

    /// The run's page in the server's UI.
    #[getter]
    fn url(&self) -> String {
        self.run.url()
    }

    /// This process's place in its job: launcher, job id, rank, world size, node, restart,
    /// placement, and where each value was read from.
    fn job(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &self.run.job().to_json())
    }

    /// The attempt of the job this process joined (0 while the server has not answered).
    fn attempt(&self) -> i64 {
        self.run.attempt()
    }

    /// Whether `log` records anything in this process (rank 0, or per-rank series).
    fn logs_metrics(&self) -> bool {
        self.run.logs_metrics()
    }

    /// Whether the sweep this run is a trial of wants it to stop (asks at most once a second).
    fn should_stop(&self, py: Python<'_>) -> bool {
        py.detach(|| self.run.should_stop())
    }

    /// One past the highest step already logged (by an earlier process, for a resumed run).
    fn next_step(&self) -> i64 {
        self.run.next_step()
    }

    /// The run as the server described it at creation (None when it was spooled).
    fn server_view(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, self.run.server_view())
    }

    /// Enqueues `{key: number}` at `step`. Values that are not numbers are skipped and reported
    /// once, but media (`trainlog.Image` and its kin, or a list of them), which are answered as
    /// `[(dotted key, value)]` for the Python layer to queue (None when there are none). Never
    /// raises for a tracking problem and never waits on the network.
    fn log<'py>(&self, data: &Bound<'py, PyDict>, step: i64) -> PyResult<Option<KeyedMedia<'py>>> {
        if !self.run.logs_metrics() {
            return Ok(None);
        }
        let mut items: Vec<(String, f64)> = Vec::with_capacity(data.len());
        let mut media = Vec::new();
        flatten_numbers(data, "", &mut items, &mut media)?;
        let refs: Vec<(&str, f64)> = items.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        self.run.log(step, &refs);
        Ok((!media.is_empty()).then_some(media))
    }

    /// Queues media items (dicts built by `trainlog.Image` and its kin) under `key` at `step`.
    /// A malformed item raises; a tracking problem never does.
    fn log_media(&self, key: &str, step: i64, items: Vec<Bound<'_, PyDict>>) -> PyResult<()> {
        let media = items.iter().map(media::media_from_dict).collect::<PyResult<Vec<_>>>()?;
        self.run.log_media(key, step, media);
        Ok(())
    }

    fn set_metadata(&self, section: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.run.set_metadata(section, to_json(value)?);
        Ok(())
    }

    /// `stopped by WHO[: WHY]` once someone asked the run to stop (seen with a heartbeat), else None.
    fn stop_reason(&self) -> Option<String> {
        self.run.stop_reason()
    }

    /// Raises an alert on the run; answers whether it was sent (false: a repeat within `wait_duration`).
    #[pyo3(signature = (title, text, level, wait_duration))]
    fn alert(&self, title: &str, text: &str, level: &str, wait_duration: f64) -> bool {
        let wait = if wait_duration.is_finite() { wait_duration.clamp(0.0, 604_800.0) } else { 0.0 };
        self.run.alert(title, text, level, Duration::from_secs_f64(wait))
    }

    #[pyo3(signature = (params, overwrite = true))]
    fn log_params(&self, params: &Bound<'_, PyAny>, overwrite: bool) -> PyResult<()> {
        self.run.log_params(to_json(params)?, overwrite);
        Ok(())
    }

    /// Uploads a file as the run's artifact `path`; answers `{path, size, sha256}`.
    fn log_artifact(&self, py: Python<'_>, local: std::path::PathBuf, path: &str) -> PyResult<Py<PyAny>> {
        let stored = py.detach(|| self.run.log_artifact(&local, path)).map_err(to_py_err)?;
        to_py(py, &stored)
    }

    /// Saves a checkpoint at `step`: uploads `local` with checksums, or with `upload` false only
    /// records it (its files stay where the training wrote them, which `metadata` says).
    #[pyo3(signature = (local, step, metadata=None, keep_last=None, keep_best=None, metric=None, maximize=false, upload=true))]
    #[allow(clippy::too_many_arguments)]
    fn log_checkpoint(
        &self,
        py: Python<'_>,
        local: std::path::PathBuf,
        step: i64,
        metadata: Option<&Bound<'_, PyAny>>,
        keep_last: Option<usize>,
        keep_best: Option<usize>,
        metric: Option<String>,
        maximize: bool,
        upload: bool,
    ) -> PyResult<Py<PyAny>> {
        let metadata = metadata.map(to_json).transpose()?.unwrap_or(Value::Object(Default::default()));
        let retention = trainlog::Retention { keep_last, keep_best, metric, maximize };
        let saved = py
            .detach(|| {
                if upload {
                    self.run.log_checkpoint(&local, step, metadata, &retention)
                } else {
                    self.run.record_checkpoint(step, metadata, &retention)
                }
            })
            .map_err(to_py_err)?;
        to_py(py, &saved)
    }

    /// The run's newest checkpoint, or None.
    fn latest_checkpoint(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let latest = py.detach(|| self.run.latest_checkpoint()).map_err(to_py_err)?;
        to_py(py, &latest.unwrap_or(Value::Null))
    }

    fn pending_points(&self) -> u64 {
        self.run.pending_points()
    }

    fn is_spooling(&self) -> bool {
        self.run.is_spooling()
    }

    fn is_finished(&self) -> bool {
        self.run.is_finished()
    }

    /// Notes that this process reached `step` (a rank that records no series): its console
    /// lines carry it.
    fn note_step(&self, step: i64) {
        self.run.note_step(step);
    }

    /// Waits until everything logged is sent or spooled; False if `timeout` seconds passed first.
    #[pyo3(signature = (timeout=60.0))]
    fn flush(&self, py: Python<'_>, timeout: f64) -> bool {
        py.detach(|| self.run.flush(Duration::from_secs_f64(timeout.max(0.0))))
    }

    /// Ends the run; sends what is queued for at most `timeout` seconds, then spools the rest.
    /// Answers how its points ended up; the same again once finished, None while another
    /// thread is still finishing it.
    /// `reason` and `last_lines` say why this process ended (shown for a failed rank).
    #[pyo3(signature = (status="finished", timeout=60.0, reason=None, last_lines=None))]
    fn finish(
        &self,
        py: Python<'_>,
        status: &str,
        timeout: f64,
        reason: Option<String>,
        last_lines: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let timeout = Duration::from_secs_f64(timeout.max(0.0));
        let finished = py.detach(|| self.run.finish_because(status, timeout, reason.as_deref(), last_lines.as_deref()));
        let summary = match finished {
            Ok(summary) => Some(summary),
            Err(trainlog::Error::Finished) => self.run.finish_summary(),
            Err(e) => return Err(to_py_err(e)),
        };
        to_py(py, &summary.map_or(Value::Null, |s| s.to_json()))
    }
}

/// Media values met among logged numbers, with their dotted keys.
type KeyedMedia<'py> = Vec<(String, Bound<'py, PyAny>)>;

/// Whether a logged value is media: an object the Python layer marks as such, or a list of them.
fn is_media(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    let marked = |v: &Bound<'_, PyAny>| v.hasattr("_trainlog_media");
    if let Ok(list) = value.cast::<PyList>() {
        return Ok(list.len() > 0 && marked(&list.get_item(0)?)?);
    }
    if let Ok(tuple) = value.cast::<pyo3::types::PyTuple>() {
        return Ok(tuple.len() > 0 && marked(&tuple.get_item(0)?)?);
    }
    marked(value)
}

/// Collects numbers from a (possibly nested) dict, and media beside them; nested keys are
/// joined with '.'.
fn flatten_numbers<'py>(
    data: &Bound<'py, PyDict>,
    prefix: &str,
    out: &mut Vec<(String, f64)>,
    media: &mut KeyedMedia<'py>,
) -> PyResult<()> {
    for (k, v) in data.iter() {
        let key = match k.cast::<PyString>() {
            Ok(s) => s.to_cow()?.into_owned(),
            Err(_) => k.str()?.to_cow()?.into_owned(),
        };
        let key = if prefix.is_empty() { key } else { format!("{prefix}.{key}") };
        if let Ok(inner) = v.cast::<PyDict>() {
            flatten_numbers(inner, &key, out, media)?;
        } else if v.is_instance_of::<pyo3::types::PyFloat>() || v.is_instance_of::<pyo3::types::PyInt>() {
            match v.extract::<f64>() {
                Ok(x) => out.push((key, x)),
                Err(_) => warn_skipped(&key, &v),
            }
        } else if is_media(&v)? {
            media.push((key, v));
        } else if let Some(x) = number(&v)? {
            out.push((key, x));
        } else {
            warn_skipped(&key, &v);
        }
    }
    Ok(())
}

/// A logged value as a number. A tensor that tracks gradients is detached first, as reading a
/// number from it directly makes PyTorch warn on every call.
fn number(value: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if value.is_instance_of::<pyo3::types::PyFloat>() || value.is_instance_of::<pyo3::types::PyInt>() {
        return Ok(value.extract::<f64>().ok());
    }
    let tracks_grad = value.getattr_opt("requires_grad")?.is_some_and(|g| g.is_truthy().unwrap_or(false));
    if tracks_grad {
        return Ok(value.call_method0("detach")?.extract::<f64>().ok());
    }
    Ok(value.extract::<f64>().ok())
}

fn warn_skipped(key: &str, value: &Bound<'_, PyAny>) {
    use std::sync::Mutex;
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if !seen.iter().any(|k| k == key) {
        let kind = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        eprintln!("trainlog: skipping {key:?}: a {kind} is not a number");
        seen.push(key.to_owned());
    }
}

/// Read access to a server.
#[pyclass(module = "trainlog._trainlog", frozen)]
struct NativeApi {
    api: trainlog::Api,
}

#[pymethods]
impl NativeApi {
    #[new]
    #[pyo3(signature = (server=None))]
    fn new(server: Option<String>) -> PyResult<Self> {
        Ok(Self { api: trainlog::Api::new(server.as_deref()).map_err(to_py_err)? })
    }

    /// The pages of a search of a project's runs as the server wrote them (JSON text, each with
    /// its `runs`): with only the params, tags and metrics `columns` names (the search's
    /// `columns`; none when empty), every one when None. Python's `json` reads them faster than
    /// values built one by one.
    #[pyo3(signature = (project, filter="", order_by=None, columns=None))]
    fn runs_pages(
        &self,
        py: Python<'_>,
        project: &str,
        filter: &str,
        order_by: Option<&str>,
        columns: Option<&str>,
    ) -> PyResult<Vec<String>> {
        py.detach(|| self.api.runs_pages(project, filter, order_by, columns)).map_err(to_py_err)
    }

    /// The training report for these query parameters.
    fn report(&self, py: Python<'_>, query: Vec<(String, String)>) -> PyResult<Py<PyAny>> {
        let report = py.detach(|| self.api.report(&query)).map_err(to_py_err)?;
        to_py(py, &report)
    }

    fn run(&self, py: Python<'_>, run_id: &str) -> PyResult<Py<PyAny>> {
        let run = py.detach(|| self.api.run(run_id)).map_err(to_py_err)?;
        to_py(py, &run.json)
    }

    /// Asks a running run to stop; answers `{time, by, reason}`.
    fn stop(&self, py: Python<'_>, run_id: &str, reason: &str) -> PyResult<Py<PyAny>> {
        let answer = py.detach(|| self.api.stop_run(run_id, reason)).map_err(to_py_err)?;
        to_py(py, &answer)
    }

    /// A run's alerts, oldest first.
    fn alerts(&self, py: Python<'_>, run_id: &str) -> PyResult<Py<PyAny>> {
        let path = format!("/runs/{}/alerts", trainlog::api::encode(run_id));
        let answer = py.detach(|| self.api.get_json(&path)).map_err(to_py_err)?;
        to_py(py, &answer["alerts"])
    }

    #[pyo3(signature = (run_id, prefix=""))]
    fn artifacts(&self, py: Python<'_>, run_id: &str, prefix: &str) -> PyResult<Py<PyAny>> {
        let list = py.detach(|| self.api.list_artifacts(run_id, prefix)).map_err(to_py_err)?;
        to_py(py, &Value::Array(list))
    }

    /// Downloads an artifact to `dest`, verified against its sha256; answers its size.
    fn download_artifact(&self, py: Python<'_>, run_id: &str, path: &str, dest: std::path::PathBuf) -> PyResult<u64> {
        py.detach(|| self.api.download_artifact(run_id, path, &dest, None)).map_err(to_py_err)
    }

    fn checkpoints(&self, py: Python<'_>, run_id: &str) -> PyResult<Py<PyAny>> {
        let list = py.detach(|| self.api.checkpoints(run_id)).map_err(to_py_err)?;
        to_py(py, &Value::Array(list))
    }

    /// Restores a checkpoint (the latest when `name` is None) into `dest`, every file verified.
    #[pyo3(signature = (run_id, dest, name=None, restored_by=None))]
    fn restore_checkpoint(
        &self,
        py: Python<'_>,
        run_id: &str,
        dest: std::path::PathBuf,
        name: Option<&str>,
        restored_by: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let restored =
            py.detach(|| self.api.restore_checkpoint(run_id, &dest, name, restored_by)).map_err(to_py_err)?;
        to_py(py, &restored)
    }

    /// Records one restore of a checkpoint: it worked (`error` None) or failed, and why.
    #[pyo3(signature = (run_id, name, error=None, restored_by=None))]
    fn record_restore(
        &self,
        py: Python<'_>,
        run_id: &str,
        name: &str,
        error: Option<&str>,
        restored_by: Option<&str>,
    ) -> PyResult<()> {
        py.detach(|| self.api.record_restore(run_id, name, error, restored_by)).map_err(to_py_err)
    }

    /// Adds a version of model `name` from a run's checkpoint (a name or a step; the latest
    /// when None) or artifact path.
    #[pyo3(signature = (name, run_id, checkpoint=None, artifact=None, alias=None, description="", tags=None))]
    #[allow(clippy::too_many_arguments)]
    fn register_model(
        &self,
        py: Python<'_>,
        name: &str,
        run_id: &str,
        checkpoint: Option<&Bound<'_, PyAny>>,
        artifact: Option<String>,
        alias: Option<String>,
        description: &str,
        tags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let source = match (checkpoint, artifact) {
            (Some(_), Some(_)) => {
                return Err(pyo3::exceptions::PyValueError::new_err("give checkpoint or artifact, not both"))
            }
            (None, Some(path)) => trainlog::ModelSource::Artifact(path),
            (None, None) => trainlog::ModelSource::LatestCheckpoint,
            (Some(c), None) => match to_json(c)? {
                Value::Number(n) => trainlog::ModelSource::Step(n.as_i64().unwrap_or_default()),
                Value::String(s) => trainlog::ModelSource::Checkpoint(s),
                Value::Object(m) => match m.get("name").and_then(Value::as_str) {
                    Some(n) => trainlog::ModelSource::Checkpoint(n.to_owned()),
                    None => {
                        return Err(pyo3::exceptions::PyValueError::new_err("a checkpoint dict needs its \"name\""))
                    }
                },
                _ => {
                    return Err(pyo3::exceptions::PyValueError::new_err(
                        "checkpoint: a step, a name, or what log_checkpoint returned",
                    ))
                }
            },
        };
        let tags = tags.map(to_json).transpose()?.unwrap_or(Value::Null);
        let v = py
            .detach(|| self.api.register_model(name, run_id, &source, alias.as_deref(), description, tags))
            .map_err(to_py_err)?;
        to_py(py, &v)
    }

    #[pyo3(signature = (search=""))]
    fn models(&self, py: Python<'_>, search: &str) -> PyResult<Py<PyAny>> {
        let list = py.detach(|| self.api.models(search)).map_err(to_py_err)?;
        to_py(py, &Value::Array(list))
    }

    fn model(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        let m = py.detach(|| self.api.model(name)).map_err(to_py_err)?;
        to_py(py, &m)
    }

    fn model_versions(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        let list = py.detach(|| self.api.model_versions(name)).map_err(to_py_err)?;
        to_py(py, &Value::Array(list))
    }

    fn model_version(&self, py: Python<'_>, name: &str, version: &str) -> PyResult<Py<PyAny>> {
        let v = py.detach(|| self.api.model_version(name, version)).map_err(to_py_err)?;
        to_py(py, &v)
    }

    fn set_model_alias(&self, py: Python<'_>, name: &str, alias: &str, version: &str) -> PyResult<Py<PyAny>> {
        let v = py.detach(|| self.api.set_model_alias(name, alias, version)).map_err(to_py_err)?;
        to_py(py, &v)
    }

    fn update_model_version(
        &self,
        py: Python<'_>,
        name: &str,
        version: &str,
        changes: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let changes = to_json(changes)?;
        let v = py.detach(|| self.api.update_model_version(name, version, &changes)).map_err(to_py_err)?;
        to_py(py, &v)
    }

    fn download_model_version(
        &self,
        py: Python<'_>,
        name: &str,
        version: &str,
        dest: std::path::PathBuf,
    ) -> PyResult<Py<PyAny>> {
        let v = py.detach(|| self.api.download_model_version(name, version, &dest)).map_err(to_py_err)?;
        to_py(py, &v)
    }

    /// A run's media items (every page), as the server lists them.
    #[pyo3(signature = (run_id, key=None, step_min=None, step_max=None))]
    fn media(
        &self,
        py: Python<'_>,
        run_id: &str,
        key: Option<&str>,
        step_min: Option<i64>,
        step_max: Option<i64>,
    ) -> PyResult<Py<PyAny>> {
        let items = py.detach(|| self.api.media(run_id, key, step_min, step_max)).map_err(to_py_err)?;
        to_py(py, &Value::Array(items))
    }

    /// A run's histograms under `key` (every page), by step.
    fn histograms(&self, py: Python<'_>, run_id: &str, key: &str) -> PyResult<Py<PyAny>> {
        let rows = py.detach(|| self.api.histograms(run_id, key)).map_err(to_py_err)?;
        to_py(py, &Value::Array(rows))
    }

    /// A run's table under `key` as of `step` (the last when None), as Arrow IPC stream bytes.
    #[pyo3(signature = (run_id, key, step=None))]
    fn table_arrow(&self, py: Python<'_>, run_id: &str, key: &str, step: Option<i64>) -> PyResult<Py<PyAny>> {
        let bytes = py.detach(|| self.api.table_arrow(run_id, key, step)).map_err(to_py_err)?;
        Ok(pyo3::types::PyBytes::new(py, &bytes).into_any().unbind())
    }

    /// The bytes of a media blob of the run, checked against its SHA-256.
    fn media_blob(&self, py: Python<'_>, run_id: &str, sha256: &str) -> PyResult<Py<PyAny>> {
        let bytes = py.detach(|| self.api.media_blob(run_id, sha256)).map_err(to_py_err)?;
        Ok(pyo3::types::PyBytes::new(py, &bytes).into_any().unbind())
    }

    /// One page of a run's console lines as the server answers it (JSON text); `query` holds
    /// the read's parameters as text.
    fn logs_page(&self, py: Python<'_>, run_id: &str, query: Vec<(String, String)>) -> PyResult<String> {
        py.detach(|| self.api.logs_page(run_id, &query)).map_err(to_py_err)
    }

    /// `[(step, timestamp_ms, value)]` of one metric, sorted by step.
    fn history(&self, py: Python<'_>, run_id: &str, key: &str) -> PyResult<Vec<(i64, i64, f64)>> {
        let points = py.detach(|| self.api.history(run_id, key)).map_err(to_py_err)?;
        Ok(points.into_iter().map(|p| (p.step, p.timestamp_ms, p.value)).collect())
    }
}

/// Sends spools left on this machine; answers `{"synced": [...], "live": [...], "failed": [[run, why]], "requests": n}`.
#[pyfunction]
#[pyo3(signature = (dir=None, server=None, include_live=false))]
fn sync(py: Python<'_>, dir: Option<String>, server: Option<String>, include_live: bool) -> PyResult<Py<PyAny>> {
    let dir = dir.map(std::path::PathBuf::from).unwrap_or_else(trainlog::spool::default_dir);
    let report = py.detach(|| trainlog::sync_all(&dir, server.as_deref(), include_live)).map_err(to_py_err)?;
    to_py(
        py,
        &serde_json::json!({
            "synced": report.synced, "live": report.live, "failed": report.failed, "requests": report.requests,
            "media_sent": report.media_sent, "media_rejected": report.media_rejected, "media_waiting": report.media_waiting,
        }),
    )
}

/// `args` with the values of secret flags, the credentials of URLs and other secrets masked, as
/// the SDK records a command line, and how many secrets were masked.
#[pyfunction]
fn redact_command_line(args: Vec<String>) -> (Vec<String>, usize) {
    trainlog::collect::redact::redact_command_line(&args)
}

/// Runs the `trainlog` command line (`server`, `sync`) with `argv`; answers its exit code.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    let code = py.detach(|| trainlog_cli::main_with_args(argv));
    // The codes the command line gives a meaning to; any other failure is 1.
    [0, 2, trainlog_cli::OVER_BUDGET]
        .into_iter()
        .find(|c| code == std::process::ExitCode::from(*c))
        .map_or(1, i32::from)
}

#[pymodule]
fn _trainlog(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<NativeRun>()?;
    m.add_class::<NativeApi>()?;
    m.add_function(wrap_pyfunction!(sync, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(redact_command_line, m)?)?;
    m.add("TrainlogError", py.get_type::<TrainlogError>())?;
    m.add("ServerError", py.get_type::<ServerError>())?;
    m.add("InvalidArgumentError", py.get_type::<InvalidArgumentError>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("ConflictError", py.get_type::<ConflictError>())?;
    m.add("UnreachableError", py.get_type::<UnreachableError>())?;
    m.add("ChecksumError", py.get_type::<ChecksumError>())?;
    m.add("SourceDeletedError", py.get_type::<SourceDeletedError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
