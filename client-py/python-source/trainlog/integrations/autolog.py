"""`trainlog.autolog()`: adds trainlog's integration to every training of the frameworks it knows,
imported already or later, without changing the training code; `trainlog.autolog(disable=True)`
puts the frameworks back as they were.

- Hugging Face `Trainer` (and its subclasses): a `hf.TrainlogCallback` joins its callbacks.
- Accelerate `Accelerator`: the "trainlog" tracker joins `log_with`.
- Lightning `Trainer`: a `lightning.TrainlogLogger` joins its loggers.
- Keras `Model.fit`: a `keras.TrainlogCallback` joins its callbacks.
- XGBoost `train`/`cv` and LightGBM `train`/`cv` (and so their scikit-learn estimators): their
  callbacks gain trainlog's.

A training that already has trainlog's integration is left as it is. The keyword arguments are
`trainlog.init`'s, given to every integration (each training then starts its own run); without
them each training logs to `trainlog.run` when one is started, else starts a run.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

#: What was replaced, to put back: (owner, attribute, the owner's own value or _ABSENT).
_patched: List[Tuple[Any, str, Any]] = []
_ABSENT = object()
_lock = threading.RLock()
_init_kwargs: Dict[str, Any] = {}
_finder: Optional[_PatchOnImport] = None


def autolog(disable: bool = False, **init_kwargs: Any) -> None:
    """Patch every framework trainlog integrates with (see the module's text), or undo it."""
    global _finder, _init_kwargs
    with _lock:
        _undo()
        if disable:
            return
        _init_kwargs = dict(init_kwargs)
        _finder = _PatchOnImport()
        sys.meta_path.insert(0, _finder)
        for module in list(_PATCHERS):
            if module in sys.modules:
                _patch(module, sys.modules[module])


def _patch(name: str, module: ModuleType) -> None:
    """Patch one framework; a framework version this cannot patch trains as it would without."""
    try:
        _PATCHERS[name](module)
    except Exception as e:  # noqa: BLE001 (the training must go on without its tracking)
        print(f"trainlog: autolog could not patch {name}: {type(e).__name__}: {e}", file=sys.stderr)


def _undo() -> None:
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None
    while _patched:
        owner, name, own = _patched.pop()
        if own is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, own)


def _replace(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    """Set `owner.name` to `make(current value)`, remembering what to put back."""
    current = getattr(owner, name, None)
    if current is None or getattr(current, "__trainlog_patch__", False):
        return
    replacement = make(current)
    replacement.__trainlog_patch__ = True
    _patched.append((owner, name, owner.__dict__.get(name, _ABSENT) if hasattr(owner, "__dict__") else current))
    setattr(owner, name, replacement)


def _after_init(cls: Any, add: Callable[[Any], None]) -> None:
    """Run `add(instance)` after `cls.__init__`."""

    def make(init: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(init)
        def patched(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            add(self)

        return patched

    _replace(cls, "__init__", make)


def _with_callback(
    function: Callable[..., Any], new: Callable[[], Any], present: Callable[[Any], bool]
) -> Callable[..., Any]:
    """`function` whose `callbacks` argument gains `new()` unless one already satisfies `present`."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def patched(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        callbacks = list(bound.arguments.get("callbacks") or [])
        if not any(present(c) for c in callbacks):
            callbacks.append(new())
        bound.arguments["callbacks"] = callbacks
        return function(*bound.args, **bound.kwargs)

    return patched


def _patch_transformers(module: ModuleType) -> None:
    from trainlog.integrations.hf import TrainlogCallback

    def add(trainer: Any) -> None:
        if not any(isinstance(c, TrainlogCallback) for c in trainer.callback_handler.callbacks):
            trainer.add_callback(TrainlogCallback(**_init_kwargs))

    _after_init(module.Trainer, add)


def _patch_accelerate(module: ModuleType) -> None:
    from trainlog.integrations.accelerate import TrainlogTracker

    def add(accelerator: Any) -> None:
        names = [t if isinstance(t, str) else getattr(t, "name", "") for t in accelerator.log_with]
        if "trainlog" not in names and not any(isinstance(t, TrainlogTracker) for t in accelerator.log_with):
            # With autolog's own `init` arguments, a tracker made here carries them; without, the
            # name lets `init_trackers` make it with its project and `init_kwargs`.
            accelerator.log_with.append(TrainlogTracker(None, **_init_kwargs) if _init_kwargs else "trainlog")

    _after_init(module.Accelerator, add)


def _patch_lightning(module: ModuleType) -> None:
    from trainlog.integrations.lightning import TrainlogLogger

    def add(trainer: Any) -> None:
        if not any(isinstance(logger, TrainlogLogger) for logger in trainer.loggers):
            trainer.loggers = [*trainer.loggers, TrainlogLogger(**_init_kwargs)]

    _after_init(module.Trainer, add)


def _patch_keras(module: ModuleType) -> None:
    from trainlog.integrations.keras import TrainlogCallback

    _replace(
        module.Model,
        "fit",
        lambda fit: _with_callback(
            fit, lambda: TrainlogCallback(**_init_kwargs), lambda c: isinstance(c, TrainlogCallback)
        ),
    )


def _patch_boosting(
    modules: Sequence[ModuleType], names: Sequence[str], new: Callable[[], Any], present: Callable[[Any], bool]
) -> None:
    """Each of `modules`' functions `names` (the package's, its engine's and its scikit-learn
    module's own references) gains the callback."""
    replaced: Dict[int, Any] = {}
    for module in modules:
        for name in names:
            original = getattr(module, name, None)
            if original is None:
                continue
            if id(original) not in replaced:
                replaced[id(original)] = _with_callback(original, new, present)
            patched = replaced[id(original)]
            _replace(module, name, functools.partial(_same, patched))


def _same(replacement: Any, current: Any) -> Any:
    return replacement


def _patch_xgboost(module: ModuleType) -> None:
    import xgboost.sklearn
    import xgboost.training

    from trainlog.integrations.xgboost import TrainlogCallback

    def new() -> Any:
        return TrainlogCallback(**_init_kwargs)

    _patch_boosting(
        [module, xgboost.training, xgboost.sklearn], ["train", "cv"], new, lambda c: isinstance(c, TrainlogCallback)
    )


def _patch_lightgbm(module: ModuleType) -> None:
    import lightgbm.engine
    import lightgbm.sklearn

    from trainlog.integrations import lightgbm as integration

    def new() -> Any:
        return integration.trainlog_callback(**_init_kwargs)

    _patch_boosting(
        [module, lightgbm.engine, lightgbm.sklearn],
        ["train", "cv"],
        new,
        lambda c: getattr(c, "is_trainlog_callback", False),
    )


#: The module whose import completes a framework's classes, and how to patch it.
_PATCHERS: Dict[str, Callable[[ModuleType], None]] = {
    "transformers.trainer": _patch_transformers,
    "accelerate.accelerator": _patch_accelerate,
    "lightning.pytorch.trainer.trainer": _patch_lightning,
    "keras": _patch_keras,
    "xgboost": _patch_xgboost,
    "lightgbm": _patch_lightgbm,
}


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a framework's module right after it is first imported."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in _PATCHERS:
            return None
        # Find the real spec with the other finders, then run the patch after the module runs.
        index = sys.meta_path.index(self) if self in sys.meta_path else -1
        for finder in sys.meta_path[index + 1 :]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, fullname)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self.loader = loader
        self.name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        with _lock:
            if _finder is not None:
                _patch(self.name, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
