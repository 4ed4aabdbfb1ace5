"""`Api`: reading runs, summaries and metric histories back from a server."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

from trainlog._trainlog import NativeApi


class ApiRun:
    """A run as stored on the server."""

    def __init__(self, api: "Api", data: Dict[str, Any]) -> None:
        self._api = api
        self._data = data

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
    def params(self) -> Dict[str, Any]:
        return dict(self._data.get("params", {}))

    @property
    def config(self) -> Dict[str, Any]:
        return self.params

    @property
    def tags(self) -> Dict[str, str]:
        return dict(self._data.get("tags", {}))

    @property
    def summary(self) -> Dict[str, Dict[str, Any]]:
        return dict(self._data.get("summary", {}))

    @property
    def metadata(self) -> Dict[str, Any]:
        return dict(self._data.get("metadata", {}))

    def artifacts(self, prefix: str = "") -> List[Dict[str, Any]]:
        """The run's artifacts: `[{"path", "size", "sha256", "created_time"}]`."""
        return list(self._api._native.artifacts(self.id, prefix))

    def download_artifact(self, path: str, dest: str) -> int:
        """Download an artifact to `dest`, verified against its sha256 (ChecksumError if not)."""
        return int(self._api._native.download_artifact(self.id, path, dest))

    def checkpoints(self) -> List[Dict[str, Any]]:
        return list(self._api._native.checkpoints(self.id))

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

    def __repr__(self) -> str:
        return f"<trainlog.ApiRun id={self.id!r} status={self.status!r}>"


class Api:
    """Read access: `Api(server=None)` uses `TRAINLOG_SERVER`, else the local default."""

    def __init__(self, server: Optional[str] = None) -> None:
        self._native = NativeApi(server)

    def runs(self, project: str, filter: str = "", order_by: Optional[str] = None) -> List[ApiRun]:
        """Runs of `project` matching `filter`, e.g. `"metrics.loss < 0.5 and params.lr = 0.001"`."""
        return [ApiRun(self, r) for r in self._native.runs(project, filter, order_by)]

    def run(self, run_id: str) -> ApiRun:
        return ApiRun(self, self._native.run(run_id))
