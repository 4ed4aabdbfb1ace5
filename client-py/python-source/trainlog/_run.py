"""`Run`: the Python face of a run, and the process hooks that end it (exit, exception, SIGTERM)."""

from __future__ import annotations

import _thread
import atexit
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import MutableMapping
from datetime import timedelta
from types import TracebackType
from typing import Any, Callable, Dict, Iterator, List, Mapping, NoReturn, Optional, Type, TypedDict, Union, cast

from trainlog._evidence import sigterm_end
from trainlog._media import media_items
from trainlog._trainlog import NativeRun

#: How often a run looks whether a heartbeat brought a stop asked of it.
STOP_POLL_SECONDS = 0.2

#: Seconds a SIGTERM (a preemption notice, or someone cancelling the job) leaves us to flush
#: before the process goes on.
PREEMPT_FLUSH_SECONDS = float(os.environ.get("TRAINLOG_PREEMPT_FLUSH_SECONDS", "10"))


class Config(dict):  # type: ignore[type-arg]
    """The run's hyperparameters; attribute access reads keys (`config.lr`).

    Changing it records the change as params, as `Run.log_params` does (W&B's habit):
    `run.config.update({...})`, `run.config["k"] = v`, `run.config.k = v`, `setdefault`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "_record", None)

    def _recorded_by(self, record: Optional[Callable[[Dict[str, Any]], None]]) -> None:
        object.__setattr__(self, "_record", record)

    def _changed(self, params: Dict[str, Any]) -> None:
        # Read from the instance's own attributes: a copy being rebuilt has none yet.
        record = self.__dict__.get("_record")
        if record is not None and params:
            record(params)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed({key: value})

    def update(self, *args: Any, **kwargs: Any) -> None:
        params = dict(*args, **kwargs)
        super().update(params)
        self._changed(params)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]


class Summary(MutableMapping[str, Any]):
    """The run's summary, as W&B's `run.summary`: reading a key gives the value set here, else
    the last value logged under it (as the server has it, after a flush); setting a key records
    it with the run (its `summary` metadata), where the run page and `Api().run(id)` show it.
    A metric's series is never changed by it."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._set: Dict[str, Any] = {}
        self._warned = False

    def _logged(self) -> Dict[str, Any]:
        run = self._run
        if run.finished or not run._native.flush(5.0):
            return {}
        try:
            from trainlog._api import Api

            summary = Api(run.server).run(run.id).summary
        except Exception as e:  # noqa: BLE001 (reading the summary never breaks training)
            if not self._warned:
                self._warned = True
                print(f"trainlog: the summary of run {run.id} cannot be read from the server ({e})", file=sys.stderr)
            return {}
        return {key: s.get("last") for key, s in summary.items() if isinstance(s, dict)}

    def __getitem__(self, key: str) -> Any:
        if key in self._set:
            return self._set[key]
        return self._logged()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._set.update(dict(*args, **kwargs))
        if self._run._logs:
            self._run._native.set_metadata("summary", dict(self._set))

    def __delitem__(self, key: str) -> None:
        del self._set[key]
        if self._run._logs:
            self._run._native.set_metadata("summary", dict(self._set))

    def __iter__(self) -> Iterator[str]:
        return iter({**self._logged(), **self._set})

    def __len__(self) -> int:
        return len({**self._logged(), **self._set})

    def __repr__(self) -> str:
        return f"<trainlog.Summary {dict(self.items())!r}>"


class FinishReport(TypedDict):
    """How a run's points ended up, as `Run.finish` returns it. Each point is counted once."""

    #: Points the server acknowledged.
    acknowledged: int
    #: Points left in the local spool (offline, or the server was unreachable until the
    #: timeout): `trainlog sync`, or the run resumed, sends them.
    spooled: int
    #: Points the server refused for good, kept with its answer in `rejected_file`.
    rejected: int
    #: Points lost: the server did not take them and they could not be written locally.
    unsaved: int
    #: Other requests (create, params, metadata, finish), counted likewise.
    requests_spooled: int
    requests_rejected: int
    requests_unsaved: int
    #: The spool, when something is left in it.
    spool_file: Optional[str]
    #: `<spool folder>/rejected/<run id>.jsonl`: one JSON line per refused request, with the
    #: server's `status`, `code`, `message` and `field`, and the `request` (points as
    #: `[key, step, timestamp, value]` rows).
    rejected_file: Optional[str]
    #: What went wrong, also printed to stderr.
    warnings: List[str]
    #: Media items the server recorded.
    media_sent: int
    #: Media items left in the media spool (sent when the run is resumed).
    media_spooled: int
    #: Media items the server refused, or that could not be encoded.
    media_rejected: int
    #: Media items dropped: the queue was full, or they could be neither sent nor spooled.
    media_dropped: int
    #: Console lines this process printed and captured.
    console_lines: int
    #: Console lines the server acknowledged; the others are in the spool, or counted among
    #: the requests rejected or unsaved (a request per batch of lines).
    console_lines_acknowledged: int
    #: Console lines the byte cap left out (a line in their place says how many).
    console_lines_dropped: int


class Run:
    """A run being logged. `log` never raises for a tracking problem and never waits on the network."""

    def __init__(self, native: NativeRun, name: Optional[str], config: Mapping[str, Any]) -> None:
        self._native = native
        self.name = name
        self.config = Config(config)
        # A resumed run continues after the steps an earlier process logged.
        self._step = native.next_step()
        self._lock = threading.Lock()
        # Only rank 0 of a job logs, unless every rank keeps its own series.
        self._logs = native.logs_metrics()
        self.config._recorded_by(self._record_params)
        self.summary = Summary(self)
        #: Called (in a thread of its own) with the run when someone asks it to stop; by
        #: default a stop raises KeyboardInterrupt in the main thread.
        self.on_stop: Optional[Callable[[Run], None]] = None
        #: `stopped by WHO[: WHY]` once someone asked the run to stop.
        self.stopped: Optional[str] = None
        threading.Thread(target=self._watch_for_stop, name="trainlog-stop-watch", daemon=True).start()

    def _watch_for_stop(self) -> None:
        """Waits for a stop asked of the run (a heartbeat's answer brings it), then hands it on."""
        while not self._native.is_finished():
            reason = self._native.stop_reason()
            if reason is not None:
                self.stopped = reason
                if self.on_stop is not None:
                    self.on_stop(self)
                else:
                    _thread.interrupt_main()
                return
            time.sleep(STOP_POLL_SECONDS)

    def _record_params(self, params: Dict[str, Any]) -> None:
        if self._logs:
            self._native.log_params(params, True)

    @property
    def id(self) -> str:
        return self._native.id

    @property
    def project(self) -> str:
        return self._native.project

    @property
    def server(self) -> str:
        return self._native.server

    @property
    def url(self) -> str:
        """The run's page in the server's UI."""
        return self._native.url

    @property
    def job(self) -> Dict[str, Any]:
        """This process's place in its job: `launcher`, `job_id`, `rank`, `local_rank`,
        `world_size`, `node_rank`, `node_count`, `restart`, placement (`cloud`, `region`,
        `zone`, ...), and `detected_from` (which variable gave each value)."""
        return dict(self._native.job())

    @property
    def rank(self) -> int:
        return int(self._native.job()["rank"])

    @property
    def attempt(self) -> int:
        """The attempt of the job this process joined (1 for its first start; 0 while unknown)."""
        return self._native.attempt()

    def should_stop(self) -> bool:
        """True when the sweep this run is a trial of pruned it (or was stopped): save and exit.

        Asks the server at most once a second; False outside a sweep or while the server is down.
        """
        return self._native.should_stop()

    def log(self, data: Mapping[str, Any], step: Optional[int] = None) -> None:
        """Log numbers at `step` (default: one past the last step this process logged).

        Nested dicts become dotted keys; values that are not numbers are skipped with one warning.
        Media (`trainlog.Image`, `Text`, `Audio`, `Video`, `File`, or a list of them) is queued
        for the media thread.
        """
        with self._lock:
            if step is None:
                step = self._step
            self._step = max(self._step, step + 1)
        if not self._logs:
            # This rank records no series, but its console lines carry the step.
            self._native.note_step(step)
            return
        media = self._native.log(data if isinstance(data, dict) else dict(data), step)
        if media:
            for key, value in media:
                items = media_items(value)
                if items is not None:
                    self._native.log_media(key, step, items)

    def log_artifact(self, path: str | os.PathLike[str], name: Optional[str] = None) -> Dict[str, Any]:
        """Upload a file as an artifact of the run (blocking); `name` defaults to the file's name."""
        local = os.fspath(path)
        return self._native.log_artifact(local, name or os.path.basename(local))

    def log_checkpoint(
        self,
        path: str | os.PathLike[str],
        step: Optional[int] = None,
        metadata: Optional[Dict[str, Any]] = None,
        keep_last: Optional[int] = None,
        keep_best: Optional[int] = None,
        metric: Optional[str] = None,
        mode: str = "min",
        upload: bool = True,
    ) -> Dict[str, Any]:
        """Save a file or folder as a checkpoint at `step` (default: the last step logged), with
        checksums. `keep_last`/`keep_best` (ranked by `metric`, `mode` "min" or "max") drop older
        checkpoints on the server. Blocks until stored; returns the checkpoint record.

        `upload=False` records the checkpoint without its files: they stay at `path`, which the
        record's metadata keeps as `local_path` (a restart on the same disk resumes from it)."""
        if mode not in ("min", "max"):
            raise ValueError('mode must be "min" or "max"')
        if step is None:
            step = max(self._step - 1, 0)
        if not upload:
            metadata = {**(metadata or {}), "local_path": os.path.abspath(os.fspath(path))}
        return self._native.log_checkpoint(
            os.fspath(path), step, metadata, keep_last, keep_best, metric, mode == "max", upload
        )

    def latest_checkpoint(self) -> Optional[Dict[str, Any]]:
        """The newest checkpoint of this run (after a preemption: the one to resume from), or None."""
        return self._native.latest_checkpoint()

    def alert(
        self, title: str, text: str = "", level: str = "info", wait_duration: Union[float, timedelta, None] = None
    ) -> bool:
        """Raise an alert: recorded on the run at the last step logged and sent to the project's
        channels (webhooks, Slack, Discord), in order with the points. `level` is `info`,
        `warn` or `error`; a repeat of `title` within `wait_duration` (seconds or a timedelta)
        of the last one sent is folded, not sent. Answers whether it was sent."""
        if level not in ("info", "warn", "error"):
            raise ValueError(f"level: one of info, warn, error, not {level!r}")
        wait = wait_duration.total_seconds() if isinstance(wait_duration, timedelta) else float(wait_duration or 0.0)
        if not 0.0 <= wait <= 604_800.0:
            raise ValueError(f"wait_duration: 0 to 604,800 seconds (a week), not {wait_duration!r}")
        if not title.strip() or len(title) > 200:
            raise ValueError("title: 1 to 200 characters")
        return bool(self._native.alert(title, text[:10_000], level, wait))

    def log_params(self, params: Mapping[str, Any], overwrite: bool = True) -> None:
        """Add params to the run after it started (nested dicts become dotted keys); they also
        join `run.config`. Sent in order with the points, through the spool when the server is
        down. Without `overwrite`, the server refuses a different value for a stored key."""
        dict.update(self.config, params)
        if self._logs:
            self._native.log_params(dict(params), overwrite)

    def set_metadata(self, section: str, value: Dict[str, Any]) -> None:
        self._native.set_metadata(section, value)

    @property
    def pending_points(self) -> int:
        """Points logged and not yet acknowledged by the server or written to the spool."""
        return self._native.pending_points()

    @property
    def is_spooling(self) -> bool:
        return self._native.is_spooling()

    @property
    def finished(self) -> bool:
        return self._native.is_finished()

    def flush(self, timeout: float = 60.0) -> bool:
        return self._native.flush(timeout)

    def finish(
        self,
        status: str = "finished",
        timeout: float = 60.0,
        reason: Optional[str] = None,
        last_lines: Optional[str] = None,
    ) -> Optional[FinishReport]:
        """End the run (`finished`, `failed`, `killed`, `preempted`); waits at most `timeout` seconds.

        In a job of several processes this ends this process's part: the run ends when its last
        rank does (failed if any rank failed). `reason` and `last_lines` say why this process
        ended; the run's attempt shows them for a failed rank.

        Returns how the run's points ended up: acknowledged, spooled, rejected or unsaved (see
        `FinishReport`); anything rejected or unsaved is also printed to stderr. Finishing again
        returns the same report (None while another thread is still finishing the run).
        """
        if self.stopped is not None and status in ("finished", "killed"):
            # Stopped from outside: the run ends killed, saying who stopped it.
            status, reason = "killed", self.stopped
        # What Python still buffers goes out before the console capture ends.
        for stream in (sys.stdout, sys.stderr):
            # A closed or odd stream must not stop the finish.
            with contextlib.suppress(Exception):
                stream.flush()
        report = self._native.finish(status, timeout, reason, last_lines)
        _forget(self)
        return cast(Optional[FinishReport], report)

    def __enter__(self) -> Run:  # noqa: PYI034 (typing.Self is 3.11's; Run is not subclassed)
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self.finished:
            return
        if exc_type is None:
            self.finish("finished")
        elif issubclass(exc_type, SystemExit):
            status, reason = _status_of_exit(cast(SystemExit, exc).code)
            self.finish(status, reason=reason)
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("killed")
        else:
            self.finish("failed")

    def __repr__(self) -> str:
        return f"<trainlog.Run id={self.id!r} project={self.project!r}>"


_active: list[Run] = []
_hooks_installed = False
_previous_excepthook = sys.excepthook
_previous_sigterm: Any = None


def _forget(run: Run) -> None:
    if run in _active:
        _active.remove(run)
    import trainlog

    if trainlog.run is run:
        trainlog._set_current(None)


def _finish_all(status: str, timeout: float, reason: Optional[str] = None, last_lines: Optional[str] = None) -> None:
    # A copy: finishing a run removes it from `_active`.
    for run in _active.copy():
        _finish_quietly(run, status, timeout, reason, last_lines)


def _finish_quietly(
    run: Run, status: str, timeout: float, reason: Optional[str] = None, last_lines: Optional[str] = None
) -> None:
    try:
        if not run.finished:
            run.finish(status, timeout, reason, last_lines)
    except Exception as e:  # noqa: BLE001 (a tracking problem must not mask the program's own exit)
        print(f"trainlog: could not finish run {run.id}: {e}", file=sys.stderr)


#: What the program gave `sys.exit`, once it called it.
_exit_code: Any = None
_exit_called = False
_previous_exit = sys.exit


def _exit(code: Any = None) -> NoReturn:
    """`sys.exit`, remembering the code: the exit hook ends the run `failed` for a non-zero one."""
    global _exit_code, _exit_called, _exiting
    _exit_code, _exit_called, _exiting = code, True, True
    _previous_exit(code)


def _status_of_exit(code: Any) -> tuple[str, Optional[str]]:
    """The status an exit with `code` gives a run, and why: `sys.exit(n)` with n not 0 and
    `sys.exit("message")` fail it, as the shell sees it."""
    if code is None or code == 0 or code is False:
        return "finished", None
    if isinstance(code, int):
        return "failed", f"exit code {code}"
    return "failed", f"exit: {code}"


def _at_exit() -> None:
    global _exiting
    _exiting = True
    status, reason = _status_of_exit(_exit_code) if _exit_called else ("finished", None)
    _finish_all(status, 60.0, reason)


#: How many of the last lines of a traceback a failed process sends with its end.
LAST_LINES = 20


def _excepthook(exc_type: Type[BaseException], exc: BaseException, tb: Optional[TracebackType]) -> None:
    lines = "".join(traceback.format_exception(exc_type, exc, tb)).splitlines()[-LAST_LINES:]
    reason = f"{exc_type.__name__}: {exc}" if str(exc) else exc_type.__name__
    status = "killed" if issubclass(exc_type, KeyboardInterrupt) else "failed"
    # The traceback is printed first, so the run's console logs hold it too.
    _previous_excepthook(exc_type, exc, tb)
    _finish_all(status, 30.0, reason, "\n".join(lines))


#: Set once the process is on its way out (sys.exit, the exit hook): a SIGTERM then (a launcher
#: stopping the other ranks of a job one of them ended) lets that exit end the runs.
_exiting = False


def _on_sigterm(signum: int, frame: Any) -> None:
    if _exiting:
        return
    for run in _active.copy():
        status, reason = sigterm_end(run.job)
        _finish_quietly(run, status, PREEMPT_FLUSH_SECONDS, reason)
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_IGN:
        return
    else:
        # Default action: die of SIGTERM, as the process would have without us.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _install_hooks(handle_sigterm: bool) -> None:
    global _hooks_installed, _previous_excepthook, _previous_sigterm, _previous_exit
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(_at_exit)
    _previous_exit = sys.exit
    sys.exit = _exit  # type: ignore[assignment]
    _previous_excepthook = sys.excepthook
    sys.excepthook = _excepthook
    if handle_sigterm and threading.current_thread() is threading.main_thread():
        _previous_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_sigterm)


def _register(run: Run, handle_sigterm: bool) -> None:
    _active.append(run)
    _install_hooks(handle_sigterm)
