"""Media to log with `run.log({"samples": trainlog.Image(x)}, step=i)`: images (numpy arrays, PIL
images, torch tensors, paths or encoded bytes) with boxes, masks and class labels, text, audio,
video and files. Each is turned here into the plain dict the native layer queues; encoding
(PNG, thumbnails) and upload happen on the SDK's media thread.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = ["Audio", "File", "Histogram", "Image", "Media", "Table", "Text", "Video"]

PathLike = Union[str, "os.PathLike[str]"]


def _numpy() -> Any:
    import numpy

    return numpy


def _as_array(x: Any) -> Any:
    """A numpy array from an array, a torch tensor (detached, on the CPU), or a nested list."""
    np = _numpy()
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        if hasattr(x, "float") and str(getattr(x, "dtype", "")) == "torch.bfloat16":
            x = x.float()
        x = x.numpy()
    return np.asarray(x)


def _to_uint8(a: Any) -> Any:
    """Pixel values as uint8: floats are read as 0 to 1 (clipped), booleans as 0 or 255, other
    integers clipped to 0 to 255."""
    np = _numpy()
    if a.dtype == np.uint8:
        return a
    if a.dtype == np.bool_:
        return a.astype(np.uint8) * 255
    if np.issubdtype(a.dtype, np.floating):
        return (np.clip(np.nan_to_num(a.astype(np.float64)), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    if np.issubdtype(a.dtype, np.integer):
        return np.clip(a, 0, 255).astype(np.uint8)
    raise TypeError(f"trainlog.Image: pixels of dtype {a.dtype} are not numbers")


def _hwc(a: Any) -> Any:
    """An HW, HWC or CHW array (C of 1, 3 or 4) as HWC."""
    if a.ndim == 2:
        return a[:, :, None]
    if a.ndim == 3:
        if a.shape[2] in (1, 2, 3, 4):
            return a
        if a.shape[0] in (1, 2, 3, 4):
            return a.transpose(1, 2, 0)
    raise ValueError(f"trainlog.Image: expected an HW, HWC or CHW array with 1 to 4 channels, got shape {a.shape}")


def _pil_pixels(img: Any) -> Tuple[bytes, int, int, int]:
    mode = img.mode
    if mode not in ("L", "LA", "RGB", "RGBA"):
        img = img.convert("RGBA" if "A" in mode or "transparency" in img.info else "RGB")
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[img.mode]
    return img.tobytes(), img.width, img.height, channels


def _pixels_of(x: Any) -> Dict[str, Any]:
    if hasattr(x, "mode") and hasattr(x, "tobytes") and hasattr(x, "size"):
        data, width, height, channels = _pil_pixels(x)
        return {"pixels": data, "width": width, "height": height, "channels": channels}
    np = _numpy()
    a = np.ascontiguousarray(_to_uint8(_hwc(_as_array(x))))
    return {"pixels": a.tobytes(), "width": int(a.shape[1]), "height": int(a.shape[0]), "channels": int(a.shape[2])}


def _content(x: Any) -> Dict[str, Any]:
    if isinstance(x, (bytes, bytearray, memoryview)):
        return {"bytes": bytes(x)}
    if isinstance(x, (str, os.PathLike)):
        path = os.fspath(x)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"trainlog: no file at {path}")
        return {"path": path}
    raise TypeError(f"trainlog: expected bytes or a path, got {type(x).__name__}")


class Media:
    """Something `run.log` records as media rather than a number."""

    kind = "file"
    #: What the native layer looks for to tell media from numbers.
    _trainlog_media = True

    def __init__(self, data: Any, caption: Optional[str] = None, mime: Optional[str] = None) -> None:
        self._item: Dict[str, Any] = {"kind": self.kind, "caption": caption, "mime": mime}
        self._item.update(_content(data))

    def _as_item(self) -> Dict[str, Any]:
        return dict(self._item)


class File(Media):
    """Any file or bytes, stored as they are (`mime` sniffed when not given)."""

    kind = "file"


class Audio(Media):
    """A sound clip: a path or encoded bytes (WAV, MP3, FLAC, OGG), played in the UI."""

    kind = "audio"


class Video(Media):
    """A video clip: a path or encoded bytes (MP4, WebM), played in the UI."""

    kind = "video"


class Text(Media):
    """Text, such as a generated sample."""

    kind = "text"

    def __init__(self, text: str, caption: Optional[str] = None) -> None:
        if not isinstance(text, str):
            raise TypeError(f"trainlog.Text: expected str, got {type(text).__name__}")
        self._item = {
            "kind": "text",
            "caption": caption,
            "bytes": text.encode("utf-8"),
            "mime": "text/plain; charset=utf-8",
        }


def _position(box: Mapping[str, Any]) -> Tuple[float, float, float, float]:
    """W&B's `position` (minX/maxX/minY/maxY, or middle/width/height) or trainlog's x_min…y_max."""
    if "x_min" in box:
        return float(box["x_min"]), float(box["y_min"]), float(box["x_max"]), float(box["y_max"])
    p = box["position"]
    if "middle" in p:
        (mx, my), w, h = p["middle"], float(p["width"]), float(p["height"])
        return float(mx) - w / 2, float(my) - h / 2, float(mx) + w / 2, float(my) + h / 2
    return float(p["minX"]), float(p["minY"]), float(p["maxX"]), float(p["maxY"])


def _boxes(boxes: Any) -> Tuple[List[Dict[str, Any]], Dict[int, str]]:
    """Boxes given as W&B does (`{group: {"box_data": [...], "class_labels": {...}}}`) or as a list of
    dicts with x_min, y_min, x_max, y_max (and group, class_id, label, score, domain)."""
    out: List[Dict[str, Any]] = []
    labels: Dict[int, str] = {}
    groups: Sequence[Tuple[str, Any]]
    groups = list(boxes.items()) if isinstance(boxes, Mapping) else [("predictions", {"box_data": list(boxes)})]
    for group, spec in groups:
        data = spec.get("box_data", []) if isinstance(spec, Mapping) else list(spec)
        if isinstance(spec, Mapping):
            labels.update({int(k): str(v) for k, v in (spec.get("class_labels") or {}).items()})
        for box in data:
            x_min, y_min, x_max, y_max = _position(box)
            scores = box.get("scores") or {}
            score = box.get("score", next(iter(scores.values()), None) if scores else None)
            class_id = box.get("class_id")
            out.append(
                {
                    "group": str(box.get("group", group)),
                    "x_min": x_min,
                    "y_min": y_min,
                    "x_max": x_max,
                    "y_max": y_max,
                    "domain": "pixel" if box.get("domain") == "pixel" else "fraction",
                    "class_id": None if class_id is None else int(class_id),
                    "label": box.get("label", box.get("box_caption")),
                    "score": None if score is None else float(score),
                }
            )
    return out, labels


def _masks(masks: Any) -> Tuple[List[Dict[str, Any]], Dict[int, str]]:
    """Masks as W&B gives them (`{group: {"mask_data": HxW class ids, "class_labels": {...}}}`), or
    `{group: HxW array}`."""
    out: List[Dict[str, Any]] = []
    labels: Dict[int, str] = {}
    np = _numpy()
    for group, spec in masks.items():
        data = spec
        if isinstance(spec, Mapping):
            data = spec.get("mask_data")
            labels.update({int(k): str(v) for k, v in (spec.get("class_labels") or {}).items()})
        a = _as_array(data)
        if a.ndim != 2:
            raise ValueError(f"trainlog.Image: a mask is an HxW array of class ids, got shape {a.shape}")
        if a.min(initial=0) < 0 or a.max(initial=0) > 255:
            raise ValueError("trainlog.Image: mask class ids are 0 to 255")
        a = np.ascontiguousarray(a.astype(np.uint8))
        out.append(
            {
                "group": str(group),
                "pixels": a.tobytes(),
                "width": int(a.shape[1]),
                "height": int(a.shape[0]),
                "channels": 1,
            }
        )
    return out, labels


class Image(Media):
    """An image: a numpy array (HW, HWC or CHW; uint8, or floats 0 to 1), a PIL image, a torch
    tensor, a path or encoded bytes (PNG, JPEG). Pixels are stored as a lossless PNG.

    `boxes` and `masks` take W&B's forms; `classes` names class ids
    (`{1: "cat"}`, or W&B's `[{"id": 1, "name": "cat"}]`).
    """

    kind = "image"

    def __init__(
        self,
        data: Any,
        caption: Optional[str] = None,
        boxes: Any = None,
        masks: Optional[Mapping[str, Any]] = None,
        classes: Any = None,
        mime: Optional[str] = None,
    ) -> None:
        item: Dict[str, Any] = {"kind": "image", "caption": caption, "mime": mime}
        if isinstance(data, (bytes, bytearray, memoryview, str, os.PathLike)):
            item.update(_content(data))
        else:
            item.update(_pixels_of(data))
        labels: Dict[int, str] = {}
        if boxes is not None:
            item["boxes"], found = _boxes(boxes)
            labels.update(found)
        if masks is not None:
            item["masks"], found = _masks(masks)
            labels.update(found)
        if classes is not None:
            if isinstance(classes, Mapping):
                labels.update({int(k): str(v) for k, v in classes.items()})
            else:
                labels.update({int(c["id"]): str(c["name"]) for c in classes})
        item["class_labels"] = labels
        self._item = item


#: Bins of a histogram at most, as the server takes them.
MAX_HISTOGRAM_BINS = 512


class Histogram(Media):
    """A histogram: `values` (a sequence, numpy array or torch tensor) binned into `bins` equal
    bins on the media thread, with numpy's edges and counts; or `(counts, edges)` already binned
    (`np_histogram=` as W&B takes it). Values that are not finite are left out.
    """

    kind = "histogram"

    def __init__(
        self,
        sequence: Any = None,
        bins: int = 64,
        *,
        np_histogram: Optional[Tuple[Any, Any]] = None,
        num_bins: Optional[int] = None,
    ) -> None:
        np = _numpy()
        if num_bins is not None:
            bins = num_bins
        if not 1 <= int(bins) <= MAX_HISTOGRAM_BINS:
            raise ValueError(f"trainlog.Histogram: 1 to {MAX_HISTOGRAM_BINS} bins, got {bins}")
        pair = isinstance(sequence, tuple) and len(sequence) == 2 and all(np.ndim(p) == 1 for p in sequence)
        if np_histogram is None and pair:
            np_histogram, sequence = sequence, None
        if np_histogram is not None:
            counts = np.asarray(np_histogram[0], dtype=np.float64).ravel()
            edges = np.asarray(np_histogram[1], dtype=np.float64).ravel()
            if len(edges) != len(counts) + 1:
                raise ValueError(
                    f"trainlog.Histogram: {len(counts)} counts need {len(counts) + 1} edges, got {len(edges)}"
                )
            self._item = {"kind": "histogram", "counts": counts.tolist(), "edges": edges.tolist()}
            return
        if sequence is None:
            raise ValueError("trainlog.Histogram: give values, or (counts, edges)")
        values = np.ascontiguousarray(_as_array(sequence), dtype="<f8").ravel()
        self._item = {"kind": "histogram", "values": values.tobytes(), "bins": int(bins)}


#: W&B's log modes, read as trainlog's.
_TABLE_MODES = {
    "replace": "replace",
    "append": "append",
    "incremental": "append",
    "immutable": "replace",
    "mutable": "replace",
}


def _plain(v: Any) -> Any:
    """A cell as a plain Python value: numpy scalars unwrapped."""
    item = getattr(v, "item", None)
    if item is not None and getattr(v, "ndim", None) == 0:
        return item()
    return v


class Table(Media):
    """A table: a pandas DataFrame, a pyarrow Table, or rows with `columns`. Each log is a part;
    with `mode="append"` the part's rows follow the rows logged before under the key, without
    sending those again; else (`"replace"`) it is the whole table from its step on. W&B's
    `log_mode="INCREMENTAL"` is taken as append.
    """

    kind = "table"

    def __init__(
        self,
        data: Any = None,
        columns: Optional[Sequence[str]] = None,
        *,
        rows: Any = None,
        dataframe: Any = None,
        mode: str = "replace",
        log_mode: Optional[str] = None,
    ) -> None:
        mode = _TABLE_MODES.get(str(log_mode or mode).lower(), "")
        if not mode:
            raise ValueError(f"trainlog.Table: mode is replace or append, got {log_mode or mode!r}")
        self.mode = mode
        self.columns: List[str] = [str(c) for c in columns] if columns is not None else []
        self._arrow: Optional[bytes] = None
        self.data: List[List[Any]] = []
        source = next((d for d in (dataframe, rows, data) if d is not None), None)
        if source is None:
            return
        if hasattr(source, "schema") and hasattr(source, "to_batches"):
            self._arrow = _ipc(source)
            return
        if hasattr(source, "columns") and hasattr(source, "itertuples"):
            try:
                import pyarrow  # type: ignore[import-untyped]

                self._arrow = _ipc(pyarrow.Table.from_pandas(source, preserve_index=False))
                return
            except ImportError:
                self.columns = [str(c) for c in source.columns]
                source = source.itertuples(index=False, name=None)
        for row in source:
            self.add_data(*row)

    def add_data(self, *row: Any) -> None:
        """Adds a row (a value per column), as W&B's `Table.add_data`."""
        if self._arrow is not None:
            raise ValueError("trainlog.Table: rows are added to a table made from rows, not from a DataFrame")
        if len(row) != len(self.columns):
            raise ValueError(f"trainlog.Table: a row has a value per column ({len(self.columns)}), got {len(row)}")
        self.data.append([_plain(v) for v in row])

    def _as_item(self) -> Dict[str, Any]:
        if self._arrow is not None:
            return {"kind": "table", "mode": self.mode, "arrow": self._arrow}
        if not self.columns:
            raise ValueError("trainlog.Table: a table made from rows needs its columns")
        return {"kind": "table", "mode": self.mode, "columns": self.columns, "rows": self.data}


def _ipc(table: Any) -> bytes:
    """A pyarrow Table as Arrow IPC stream bytes."""
    import pyarrow

    sink = pyarrow.BufferOutputStream()
    with pyarrow.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def media_items(value: Any) -> Optional[List[Dict[str, Any]]]:
    """The items of a value `run.log` was given, when it is media or a list of media; else None."""
    if isinstance(value, Media):
        return [value._as_item()]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Media) for v in value):
        return [v._as_item() for v in value]
    return None
