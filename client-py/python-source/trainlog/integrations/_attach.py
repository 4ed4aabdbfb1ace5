"""The run an integration logs to, and the framework's params flattened into numbers and texts."""

from __future__ import annotations

import enum
import json
import math
from typing import Any, Dict, Mapping, Optional, Tuple

import trainlog
from trainlog._run import Run


def attach(init_kwargs: Mapping[str, Any]) -> Tuple[Run, bool]:
    """`trainlog.run` when one is started and no `init` arguments were given, else a new run
    started with them; and whether the integration started it (and so finishes it)."""
    current = trainlog.run
    if current is not None and not current.finished and not init_kwargs:
        return current, False
    return trainlog.init(**init_kwargs), True


def release(run: Optional[Run], owned: bool) -> None:
    """The end of an integration's training: the run it started is finished, a run it joined is
    only flushed (its owner finishes it)."""
    if run is None or run.finished:
        return
    if owned:
        run.finish("finished")
    else:
        run.flush()


def scalar(value: Any) -> Any:
    """A param value as a number, a bool or a text: texts that spell numbers become numbers
    (frameworks' configs often hold "0.3"), None becomes "None" (as MLflow records it; a param
    has a value), an enum its value, anything else its JSON (sets sorted) or its text."""
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None:
        return "None"
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return _number(str(value))
    try:
        return json.dumps(value, sort_keys=True, default=_plain)
    except (TypeError, ValueError):
        return str(value)


def _plain(value: Any) -> Any:
    """What JSON cannot write, as it can: sets as sorted lists, enums as their values."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    if isinstance(value, enum.Enum):
        return value.value
    return str(value)


def _number(text: str) -> Any:
    """`text` as an int or a float when it spells one, else `text`."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def flatten(prefix: str, value: Any, out: Dict[str, Any]) -> Dict[str, Any]:
    """`value`'s leaves under dotted keys below `prefix`."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        out[prefix] = scalar(value)
    return out


def metric_value(value: Any) -> Optional[float]:
    """`value` as a float when it is a number or a tensor (or array) of one number, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "numel", lambda: 0)() == 1:
        inner = item()
        return float(inner) if isinstance(inner, (int, float)) and not isinstance(inner, bool) else None
    return None
