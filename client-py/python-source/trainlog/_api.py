"""`Api`: reading runs, summaries and metric histories back from a server."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from trainlog._trainlog import NativeApi


class _Details:
    """The params, tags and summaries of the runs one search found, read for all of them at the
    first access to any one's: the search answered their attributes only."""

    def __init__(self, api: Api, project: str, filter: str, order_by: Optional[str]) -> None:
        self._api = api
        self._query = (project, filter, order_by)
        self._by_id: Optional[Dict[str, Dict[str, Any]]] = None

    def of(self, run_id: str) -> Dict[str, Any]:
        if self._by_id is None:
            project, filter, order_by = self._query
            self._by_id = {r["id"]: r for r in self._api._search(project, filter, order_by, None)}
        found = self._by_id.get(run_id)
        # A run changed since the search so that it no longer matches: read it alone.
        return found if found is not None else self._api._native.run(run_id)


class ApiRun:
    """A run as stored on the server."""

    def __init__(self, api: Api, data: Dict[str, Any], details: Optional[_Details] = None) -> None:
        self._api = api
        self._data = data
        self._details = details

    def _full(self) -> Dict[str, Any]:
        """The run's data with its params, tags and summaries, read when the search left them out."""
        if self._details is not None:
            full = self._details.of(self.id)
            self._data = {**self._data, **{k: full[k] for k in ("params", "tags", "summary") if k in full}}
            self._details = None
        return self._data

    @property
    def id(self) -> str:
        return str(self._data["id"])

    @property
    def name(self) -> str:
        return str(self._data.get("name", ""))

    @property
    def project(self) -> str:
        return str(self._data.get("project", ""))

    @property
    def status(self) -> str:
        return str(self._data.get("status", ""))

    @property
    def user(self) -> str:
        """Who ran it: the API key's user on a server run with --auth."""
        return str(self._data.get("user", ""))

    @property
    def params(self) -> Dict[str, Any]:
        return dict(self._full().get("params", {}))

    @property
    def config(self) -> Dict[str, Any]:
        return self.params

    @property
    def tags(self) -> Dict[str, str]:
        return dict(self._full().get("tags", {}))

    @property
    def summary(self) -> Dict[str, Dict[str, Any]]:
        return dict(self._full().get("summary", {}))

    @property
    def metadata(self) -> Dict[str, Any]:
        return dict(self._data.get("metadata", {}))

    @property
    def job(self) -> Optional[Dict[str, Any]]:
        """The job the run follows: launcher, job id, world size, node count, attempts, GPUs,
        cost so far across nodes and attempts (`cost_usd`), lost work (`lost_usd`,
        `lost_gpu_hours`) and `steps_replayed`; None when no process joined it as a job."""
        job = self._data.get("job")
        return dict(job) if job else None

    @property
    def attempts(self) -> List[Dict[str, Any]]:
        """Each start of the job, oldest first: number, status, start/end time, world size,
        nodes (host, GPUs, price), placement (cloud, region, zone, instance type, spot), price
        and cost, last step and last checkpoint step, lost work and replayed steps."""
        return [dict(a) for a in self._data.get("attempts", [])]

    def stop(self, reason: str = "") -> Dict[str, Any]:
        """Ask the running run to stop: each of its processes sees it with its next heartbeat and
        the run ends `killed`, saying who stopped it. Answers `{time, by, reason}`."""
        return dict(self._api._native.stop(self.id, reason))

    @property
    def alerts(self) -> List[Dict[str, Any]]:
        """The run's alerts, oldest first: `title`, `text`, `level`, `step`, `time` (ms),
        `rule` (empty for `trainlog.alert` from code), `count` (repeats folded into it)."""
        return [dict(a) for a in self._api._native.alerts(self.id)]

    def artifacts(self, prefix: str = "") -> List[Dict[str, Any]]:
        """The run's artifacts: `[{"path", "size", "sha256", "created_time"}]`."""
        return list(self._api._native.artifacts(self.id, prefix))

    def download_artifact(self, path: str, dest: str) -> int:
        """Download an artifact to `dest`, verified against its sha256 (ChecksumError if not)."""
        return int(self._api._native.download_artifact(self.id, path, dest))

    def checkpoints(self) -> List[Dict[str, Any]]:
        return list(self._api._native.checkpoints(self.id))

    def media(self, key: Optional[str] = None, steps: Optional[Tuple[int, int]] = None) -> List[MediaItem]:
        """The run's media under `key` (every key when None), by key, step and index; `steps` is an
        inclusive (first, last) range."""
        first, last = steps if steps is not None else (None, None)
        return [MediaItem(self, item) for item in self._api._native.media(self.id, key, first, last)]

    def table(self, key: str, step: Optional[int] = None) -> Any:
        """The table logged under `key` as of `step` (the last when None): every row of its parts,
        in order, as a `pyarrow.Table`."""
        import pyarrow  # type: ignore[import-untyped]

        stream = self._api._native.table_arrow(self.id, key, step)
        return pyarrow.ipc.open_stream(pyarrow.py_buffer(stream)).read_all()

    def histograms(self, key: str) -> List[Dict[str, Any]]:
        """The histograms logged under `key`, by step: `[{"step", "edges", "counts", "timestamp"}]`,
        edges and counts as numpy arrays."""
        import numpy

        return [
            {
                "step": int(h["step"]),
                "edges": numpy.asarray(h["edges"], dtype=numpy.float64),
                "counts": numpy.asarray(h["counts"], dtype=numpy.float64),
                "timestamp": int(h["timestamp"]),
            }
            for h in self._api._native.histograms(self.id, key)
        ]

    def history(self, key: str) -> List[Dict[str, Any]]:
        """Every point of one metric: `[{"step", "timestamp", "value"}]`, sorted by step."""
        return [
            {"step": step, "timestamp": ts, "value": value}
            for step, ts, value in self._api._native.history(self.id, key)
        ]

    def history_arrow(self, keys: Iterable[str]) -> Any:
        """The histories of `keys` as one pyarrow Table with columns key, step, timestamp, value."""
        try:
            import pyarrow as pa  # type: ignore[import-untyped]
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("history_arrow needs pyarrow: pip install pyarrow") from e
        names: List[str] = []
        steps: List[int] = []
        stamps: List[int] = []
        values: List[float] = []
        for key in keys:
            for step, ts, value in self._api._native.history(self.id, key):
                names.append(key)
                steps.append(step)
                stamps.append(ts)
                values.append(value)
        return pa.table(
            {
                "key": pa.array(names, pa.string()).dictionary_encode(),
                "step": pa.array(steps, pa.int64()),
                "timestamp": pa.array(stamps, pa.int64()),
                "value": pa.array(values, pa.float64()),
            }
        )

    def logs(
        self,
        rank: Optional[Union[int, Iterable[int]]] = None,
        stream: Optional[str] = None,
        attempt: Optional[int] = None,
        search: Optional[str] = None,
        regex: bool = False,
        step_min: Optional[int] = None,
        step_max: Optional[int] = None,
        since: Optional[int] = None,
        until: Optional[int] = None,
        tail: Optional[int] = None,
        limit: Optional[int] = None,
        arrow: bool = False,
    ) -> Any:
        """The run's console lines, in order: a list of `{"n", "time", "rank", "node", "attempt",
        "step", "stream", "text"}` (`time` in ms since the epoch), or a pyarrow Table with those
        columns when `arrow=True`.

        Filters: `rank` (one or several), `stream` ("stdout" or "stderr"), `attempt`, a step or
        time range (`since`/`until` in ms), and `search`, text found ignoring case and ANSI
        colours, or a regular expression with `regex=True`. `tail=N` answers the last N matching
        lines; `limit` the first N. Every matching line otherwise, read in pages.
        """
        query: List[Tuple[str, str]] = []
        if rank is not None:
            ranks = [rank] if isinstance(rank, int) else list(rank)
            query.append(("rank", ",".join(str(int(r)) for r in ranks)))
        for name, value in (
            ("stream", stream),
            ("attempt", attempt),
            ("q", search),
            ("step_min", step_min),
            ("step_max", step_max),
            ("since", since),
            ("until", until),
        ):
            if value is not None:
                query.append((name, str(value)))
        if regex:
            query.append(("regex", "true"))
        lines: List[Dict[str, Any]] = []
        if tail is not None:
            page = json.loads(self._api._native.logs_page(self.id, [*query, ("tail", "true"), ("limit", str(tail))]))
            lines = page["lines"]
        else:
            offset = 0
            while True:
                size = 10_000 if limit is None else min(10_000, limit - len(lines))
                if size <= 0:
                    break
                page = json.loads(
                    self._api._native.logs_page(self.id, [*query, ("offset", str(offset)), ("limit", str(size))])
                )
                lines.extend(page["lines"])
                offset += len(page["lines"])
                if not page["lines"] or offset >= page["matched"]:
                    break
        if not arrow:
            return lines
        try:
            import pyarrow as pa  # type: ignore[import-untyped]
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("logs(arrow=True) needs pyarrow: pip install pyarrow") from e
        column = lambda name: [line[name] for line in lines]  # noqa: E731
        return pa.table(
            {
                "n": pa.array(column("n"), pa.int64()),
                "time": pa.array(column("time"), pa.timestamp("ms", tz="UTC")),
                "rank": pa.array(column("rank"), pa.uint32()),
                "node": pa.array(column("node"), pa.string()).dictionary_encode(),
                "attempt": pa.array(column("attempt"), pa.int64()),
                "step": pa.array(column("step"), pa.int64()),
                "stream": pa.array(column("stream"), pa.string()).dictionary_encode(),
                "text": pa.array(column("text"), pa.string()),
            }
        )

    def __repr__(self) -> str:
        return f"<trainlog.ApiRun id={self.id!r} status={self.status!r}>"


class MediaItem:
    """One media item of a run: what the server lists, and `read()` for its bytes."""

    def __init__(self, run: ApiRun, data: Dict[str, Any]) -> None:
        self._run = run
        self.data = data

    key = property(lambda self: str(self.data["key"]))
    step = property(lambda self: int(self.data["step"]))
    index = property(lambda self: int(self.data["index"]))
    kind = property(lambda self: str(self.data["kind"]))
    mime = property(lambda self: str(self.data["mime"]))
    caption = property(lambda self: self.data.get("caption"))
    width = property(lambda self: self.data.get("width"))
    height = property(lambda self: self.data.get("height"))
    sha256 = property(lambda self: str(self.data["sha256"]))
    boxes = property(lambda self: list(self.data.get("boxes") or []))
    class_labels = property(lambda self: {int(k): v for k, v in (self.data.get("class_labels") or {}).items()})

    def read(self) -> bytes:
        """The item's bytes, checked against their SHA-256."""
        return bytes(self._run._api._native.media_blob(self._run.id, self.sha256))

    def read_thumbnail(self) -> Optional[bytes]:
        """The thumbnail's bytes, for an image that has one."""
        sha = self.data.get("thumbnail_sha256")
        return None if sha is None else bytes(self._run._api._native.media_blob(self._run.id, sha))

    def masks(self) -> Dict[str, bytes]:
        """Each mask's PNG bytes (one class id per pixel), by group."""
        return {
            m["group"]: bytes(self._run._api._native.media_blob(self._run.id, m["sha256"]))
            for m in self.data.get("masks") or []
        }

    def __repr__(self) -> str:
        return f"MediaItem(key={self.key!r}, step={self.step}, index={self.index}, kind={self.kind!r})"


class ModelVersion:
    """One version of a registered model, with its lineage back to the run."""

    def __init__(self, api: Api, data: Dict[str, Any]) -> None:
        self._api = api
        self._data = data

    @property
    def model(self) -> str:
        return str(self._data["model"])

    @property
    def version(self) -> int:
        return int(self._data["version"])

    @property
    def run_id(self) -> str:
        return str(self._data["run_id"])

    @property
    def status(self) -> str:
        return str(self._data["status"])

    @property
    def aliases(self) -> List[str]:
        return list(self._data.get("aliases", []))

    @property
    def tags(self) -> Dict[str, str]:
        return dict(self._data.get("tags", {}))

    @property
    def lineage(self) -> Dict[str, Any]:
        """The run at registration: run, params, metrics, tags, code, environment, python, packages."""
        return dict(self._data.get("lineage", {}))

    @property
    def source(self) -> Dict[str, Any]:
        return dict(self._data.get("source", {}))

    @property
    def source_available(self) -> bool:
        return bool(self._data.get("source_available", False))

    def download(self, dest: str) -> ModelVersion:
        """Download the version's files into `dest`, each verified against its sha256."""
        self._api._native.download_model_version(self.model, str(self.version), os.fspath(dest))
        return self

    def set_alias(self, alias: str) -> ModelVersion:
        self._data = self._api._native.set_model_alias(self.model, alias, str(self.version))
        return self

    def archive(self) -> ModelVersion:
        self._data = self._api._native.update_model_version(self.model, str(self.version), {"status": "archived"})
        return self

    def __repr__(self) -> str:
        return f"<trainlog.ModelVersion {self.model} v{self.version} aliases={self.aliases}>"


class Model:
    """A registered model."""

    def __init__(self, api: Api, data: Dict[str, Any]) -> None:
        self._api = api
        self._data = data

    @property
    def name(self) -> str:
        return str(self._data["name"])

    @property
    def description(self) -> str:
        return str(self._data.get("description", ""))

    @property
    def aliases(self) -> Dict[str, int]:
        return dict(self._data.get("aliases", {}))

    @property
    def tags(self) -> Dict[str, str]:
        return dict(self._data.get("tags", {}))

    def versions(self) -> List[ModelVersion]:
        return [ModelVersion(self._api, v) for v in self._api._native.model_versions(self.name)]

    def version(self, version: int | str) -> ModelVersion:
        """A version by number or alias (`model.version("champion")`)."""
        return ModelVersion(self._api, self._api._native.model_version(self.name, str(version)))

    def set_alias(self, alias: str, version: int | str) -> ModelVersion:
        return ModelVersion(self._api, self._api._native.set_model_alias(self.name, alias, str(version)))

    def __repr__(self) -> str:
        return f"<trainlog.Model {self.name!r} aliases={self.aliases}>"


class Api:
    """Read access: `Api(server=None)` uses `TRAINLOG_SERVER`, else the local default."""

    def __init__(self, server: Optional[str] = None) -> None:
        self._native = NativeApi(server)

    def runs(self, project: str, filter: str = "", order_by: Optional[str] = None) -> List[ApiRun]:
        """Runs of `project` matching `filter`, e.g. `"metrics.loss < 0.5 and params.lr = 0.001"`.
        The search answers each run's attributes (id, name, status, times, user, job, …); their
        params, tags and summaries are read for every run of the list at the first access to
        any one's."""
        details = _Details(self, project, filter, order_by)
        return [ApiRun(self, r, details) for r in self._search(project, filter, order_by, "")]

    def _search(
        self, project: str, filter: str, order_by: Optional[str], columns: Optional[str]
    ) -> List[Dict[str, Any]]:
        """Every run of a search, as dicts: `columns` as the search takes it (None: everything)."""
        return [
            run
            for page in self._native.runs_pages(project, filter, order_by, columns)
            for run in json.loads(page)["runs"]
        ]

    def run(self, run_id: str) -> ApiRun:
        return ApiRun(self, self._native.run(run_id))

    def report(
        self,
        since: Optional[str] = None,
        until: Optional[str] = None,
        by: Optional[str] = None,
        projects: Optional[Iterable[str]] = None,
        users: Optional[Iterable[str]] = None,
        groups: Optional[Iterable[str]] = None,
        tags: Optional[Dict[str, str]] = None,
        filter: Optional[str] = None,
        active_above: Optional[int] = None,
    ) -> Dict[str, Any]:
        """The training report (what the server's `GET /report` answers): each group's figures
        (`gpu_utilization_rate`, `cost_usd`, `job_success_rate`, ...; None with a reason in
        `reasons` when not computable), the total, the runs behind them and the budgets.
        `since`/`until`: a span back from now ("30d"), a date ("2026-10-01") or ms since the epoch.
        `by`: project, user, group, tag:KEY, gpu, provider, pricing, week or day."""
        query: List[Any] = []
        for name, value in (("since", since), ("until", until), ("by", by), ("filter", filter)):
            if value is not None:
                query.append((name, str(value)))
        for name, values in (("projects", projects), ("users", users), ("groups", groups)):
            if values is not None:
                query.append((name, ",".join(values)))
        if tags:
            query.append(("tags", ",".join(f"{k}:{v}" for k, v in tags.items())))
        if active_above is not None:
            query.append(("active_above", str(active_above)))
        return dict(self._native.report(query))

    def record_restore(
        self, run_id: str, name: str, error: Optional[str] = None, restored_by: Optional[str] = None
    ) -> None:
        """Record one restore of a run's checkpoint: it worked (`error` None) or failed and why
        (say so when your loader could not read the files `restore_checkpoint` verified)."""
        self._native.record_restore(run_id, name, error, restored_by)

    def model(self, name: str) -> Model:
        return Model(self, self._native.model(name))

    def models(self, search: str = "") -> List[Model]:
        """Registered models whose name or tags contain `search`."""
        return [Model(self, m) for m in self._native.models(search)]
