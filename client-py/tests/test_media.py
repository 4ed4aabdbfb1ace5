"""Media from Python against the real server: every input form of `trainlog.Image` (numpy shapes
and dtypes, PIL, torch, paths, encoded bytes) read back through the API pixel for pixel, boxes,
masks and class labels preserved, text, audio and files byte for byte, lists under one key, and
media logged through a server outage sent once the run resumes."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage

import trainlog
from helpers import Server


def decoded(item: trainlog.MediaItem) -> np.ndarray:
    return np.asarray(PILImage.open(io.BytesIO(item.read())))


def start(name: str, **kwargs) -> trainlog.Run:
    return trainlog.init(project="vision", name=name, system_metrics_interval=None, **kwargs)


def test_every_image_form_reads_back_pixel_for_pixel(server: Server, client_env: dict, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    rgb = rng.integers(0, 256, size=(12, 20, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, size=(9, 5), dtype=np.uint8)
    rgba = rng.integers(0, 256, size=(4, 6, 4), dtype=np.uint8)
    floats = rng.random((8, 8, 3))
    chw = rgb.transpose(2, 0, 1).copy()
    pil = PILImage.fromarray(rgb)
    png_path = tmp_path / "x.png"
    pil.save(png_path)
    jpeg = io.BytesIO()
    pil.save(jpeg, format="JPEG")
    forms = {
        "hwc_uint8": (rgb, rgb),
        "hw_uint8": (grey, grey),
        "hwc_rgba": (rgba, rgba),
        "hwc_float": (floats, (np.clip(floats, 0, 1) * 255 + 0.5).astype(np.uint8)),
        "chw_uint8": (chw, rgb),
        "bool_mask": (grey > 127, (grey > 127).astype(np.uint8) * 255),
        "pil": (pil, rgb),
        "path": (str(png_path), rgb),
        "png_bytes": (png_path.read_bytes(), rgb),
    }
    try:
        import torch

        forms["torch_chw_float"] = (torch.from_numpy(floats.transpose(2, 0, 1).copy()), forms["hwc_float"][1])
    except ImportError:
        pass
    run = start("forms")
    for i, (key, (data, _)) in enumerate(forms.items()):
        run.log({key: trainlog.Image(data, caption=key), "loss": 1.0 / (i + 1)}, step=i)
    run.log({"jpeg": trainlog.Image(jpeg.getvalue())}, step=0)
    report = run.finish()
    assert report["media_sent"] == len(forms) + 1 and report["media_rejected"] == 0, report

    stored = trainlog.Api().run(run.id)
    assert len(stored.history("loss")) == len(forms), "numbers logged beside media are kept"
    for i, (key, (_, expected)) in enumerate(forms.items()):
        [item] = stored.media(key)
        assert (item.step, item.index, item.kind, item.caption) == (i, 0, "image", key)
        got = decoded(item)
        assert got.shape[:2] == expected.shape[:2] == (item.height, item.width), key
        assert np.array_equal(got.reshape(expected.shape), expected), key
        assert item.mime == "image/png", key
    [jpeg_item] = stored.media("jpeg")
    assert jpeg_item.mime == "image/jpeg" and jpeg_item.read() == jpeg.getvalue(), "encoded bytes stay as given"
    assert (jpeg_item.width, jpeg_item.height) == (20, 12)


def test_boxes_masks_and_class_labels_in_wandbs_form_are_kept(server: Server, client_env: dict) -> None:
    image = np.zeros((300, 400, 3), dtype=np.uint8)
    mask = np.zeros((300, 400), dtype=np.uint8)
    mask[100:200, 50:150] = 2
    boxes = {
        "predictions": {
            "box_data": [
                {
                    "position": {"minX": 0.1, "maxX": 0.4, "minY": 0.2, "maxY": 0.6},
                    "class_id": 1,
                    "box_caption": "cat",
                    "scores": {"confidence": 0.75},
                },
                {"position": {"middle": [200, 150], "width": 40, "height": 20}, "domain": "pixel", "class_id": 2},
            ],
            "class_labels": {1: "cat", 2: "dog"},
        },
        "ground_truth": {
            "box_data": [{"position": {"minX": 0.0, "maxX": 0.5, "minY": 0.0, "maxY": 0.5}, "class_id": 1}]
        },
    }
    masks = {"truth": {"mask_data": mask, "class_labels": {0: "background", 2: "dog"}}}
    run = start("boxes")
    run.log({"detections": [trainlog.Image(image, boxes=boxes, masks=masks), trainlog.Image(image[:10, :10])]}, step=3)
    run.finish()
    first, second = trainlog.Api().run(run.id).media("detections")
    assert (first.index, second.index) == (0, 1), "a list is the items of one step, in order"
    assert [
        (b["group"], b["x_min"], b["y_min"], b["x_max"], b["y_max"], b["domain"], b["class_id"], b["label"], b["score"])
        for b in first.boxes
    ] == [
        ("predictions", 0.1, 0.2, 0.4, 0.6, "fraction", 1, "cat", 0.75),
        ("predictions", 180.0, 140.0, 220.0, 160.0, "pixel", 2, None, None),
        ("ground_truth", 0.0, 0.0, 0.5, 0.5, "fraction", 1, None, None),
    ]
    assert first.class_labels == {0: "background", 1: "cat", 2: "dog"}
    back = np.asarray(PILImage.open(io.BytesIO(first.masks()["truth"])))
    assert np.array_equal(back, mask), "the mask's class ids come back exactly"
    thumb = PILImage.open(io.BytesIO(first.read_thumbnail() or b""))
    assert max(thumb.size) == 256, "an image larger than 256 pixels has a thumbnail"
    assert second.read_thumbnail() is None


def test_text_audio_video_and_files_round_trip_byte_for_byte(server: Server, client_env: dict, tmp_path: Path) -> None:
    wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(range(200))
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(300))
    notes = tmp_path / "notes.md"
    notes.write_text("# results\n")
    run = start("files")
    run.log(
        {
            "sample": trainlog.Text("the cat sat on the mat ✓"),
            "speech": trainlog.Audio(wav, caption="hello"),
            "clip": trainlog.Video(clip),
            "notes": trainlog.File(notes),
        },
        step=0,
    )
    run.finish()
    stored = trainlog.Api().run(run.id)
    by_key = {item.key: item for item in stored.media()}
    assert set(by_key) == {"sample", "speech", "clip", "notes"}
    assert by_key["sample"].read().decode() == "the cat sat on the mat ✓"
    assert (by_key["sample"].kind, by_key["sample"].mime) == ("text", "text/plain; charset=utf-8")
    assert (by_key["speech"].read(), by_key["speech"].mime, by_key["speech"].caption) == (wav, "audio/wav", "hello")
    assert (by_key["clip"].read(), by_key["clip"].mime, by_key["clip"].kind) == (
        clip.read_bytes(),
        "video/mp4",
        "video",
    )
    assert (by_key["notes"].read(), by_key["notes"].mime) == (b"# results\n", "text/markdown")


def test_bad_media_raises_at_once_and_logs_nothing(server: Server, client_env: dict) -> None:
    run = start("bad")
    with pytest.raises(ValueError, match="HW, HWC or CHW"):
        trainlog.Image(np.zeros((2, 3, 4, 5)))
    with pytest.raises(FileNotFoundError):
        trainlog.Video("/no/such/clip.mp4")
    with pytest.raises(TypeError):
        trainlog.Text(b"bytes")  # type: ignore[arg-type]
    report = run.finish()
    assert report["media_sent"] == 0 and report["media_rejected"] == 0


def test_media_logged_during_an_outage_is_sent_when_the_run_resumes(server: Server, client_env: dict) -> None:
    run = start("outage", run_id="media-outage", resume="allow")
    run.log({"samples": trainlog.Image(np.full((4, 4), 10, dtype=np.uint8))}, step=0)
    assert run.flush(timeout=30)
    server.kill9()
    for step in range(1, 4):
        run.log({"samples": trainlog.Image(np.full((4, 4), 10 * step + 10, dtype=np.uint8))}, step=step)
    report = run.finish(timeout=3)
    assert (report["media_sent"], report["media_spooled"]) == (1, 3), report
    server.restart_same_port()
    resumed = start("outage", run_id="media-outage", resume="must")
    report = resumed.finish()
    assert (report["media_sent"], report["media_spooled"]) == (3, 0), report
    items = trainlog.Api().run("media-outage").media("samples")
    assert [int(decoded(i)[0, 0]) for i in items] == [10, 20, 30, 40], "every image once, in order"


def test_histograms_equal_numpys_for_every_input_form(server: Server, client_env: dict) -> None:
    rng = np.random.default_rng(3)
    weights = rng.normal(size=10_000)
    forms = {
        "floats": (weights, 64),
        "ints": (rng.integers(-50, 50, size=999), 17),
        "float32_matrix": (rng.random((30, 40), dtype=np.float32), 512),
        "constant": (np.full(5, 2.5), 3),
        "list": ([0.0, 1.0, 1.0, 2.0, 3.0, 10.0], 4),
    }
    try:
        import torch

        forms["torch"] = (torch.from_numpy(weights.copy()).reshape(100, 100), 32)
    except ImportError:
        pass
    run = start("histograms")
    for step in range(3):
        for key, (values, bins) in forms.items():
            run.log({f"h/{key}": trainlog.Histogram(values, bins=bins)}, step=step)
    counts, edges = np.histogram(weights, bins=10, density=True)
    run.log({"given": trainlog.Histogram(np_histogram=(counts, edges))}, step=0)
    run.log({"pair": trainlog.Histogram((counts, edges))}, step=1)
    report = run.finish()
    assert report["media_sent"] == 3 * len(forms) + 2 and report["media_rejected"] == 0, report

    api_run = trainlog.Api().run(run.id)
    for key, (values, bins) in forms.items():
        expected = np.asarray(values.numpy() if hasattr(values, "numpy") else values, dtype=np.float64)
        want_counts, want_edges = np.histogram(expected, bins=bins)
        got = api_run.histograms(f"h/{key}")
        assert [h["step"] for h in got] == [0, 1, 2]
        assert np.array_equal(got[0]["edges"], want_edges), key
        assert np.array_equal(got[0]["counts"], want_counts), key
    for key in ("given", "pair"):
        (got,) = api_run.histograms(key)
        assert np.array_equal(got["counts"], counts) and np.array_equal(got["edges"], edges), key
    with pytest.raises(ValueError, match="bins"):
        trainlog.Histogram(weights, bins=0)
    with pytest.raises(ValueError, match="edges"):
        trainlog.Histogram(np_histogram=([1, 2], [0, 1]))


def test_a_table_appended_100_times_reads_back_whole_and_in_order(server: Server, client_env: dict) -> None:
    pa = pytest.importorskip("pyarrow")
    pd = pytest.importorskip("pandas")
    run = start("tables")
    run.log({"preds": trainlog.Table(columns=["step", "label", "score"], data=[[0, "start", 0.0]])}, step=0)
    for step in range(1, 101):
        rows = [[step, f"row {step}.{i}", float(np.float32(step) / 7)] for i in range(3)]
        run.log({"preds": trainlog.Table(rows, columns=["step", "label", "score"], mode="append")}, step=step)
    frame = pd.DataFrame({"name": ["a", "b", "c"], "value": [1.5, float("nan"), 3.0], "ok": [True, False, True]})
    run.log({"frame": trainlog.Table(frame)}, step=0)
    run.log({"frame": trainlog.Table(dataframe=frame.iloc[:1], log_mode="INCREMENTAL")}, step=1)
    arrow = pa.table({"id": pa.array([1, 2], pa.int32()), "when": pa.array([1.0, 2.0], pa.float32())})
    run.log({"arrow": trainlog.Table(arrow)}, step=5)
    added = trainlog.Table(columns=["x", "y"])
    added.add_data(np.int64(1), np.float64(0.5))
    added.add_data(2, None)
    run.log({"added": added}, step=0)
    report = run.finish()
    assert report["media_sent"] == 101 + 2 + 1 + 1 and report["media_rejected"] == 0, report

    api_run = trainlog.Api().run(run.id)
    table = api_run.table("preds")
    assert table.num_rows == 1 + 100 * 3
    assert table.column("step").to_pylist() == [0] + [s for s in range(1, 101) for _ in range(3)]
    assert table.column("label").to_pylist()[1:4] == ["row 1.0", "row 1.1", "row 1.2"]
    assert table.column("label").to_pylist()[-1] == "row 100.2"
    assert api_run.table("preds", step=10).num_rows == 1 + 10 * 3, "the table as of step 10"

    frames = api_run.table("frame").to_pandas()
    assert frames["name"].tolist() == ["a", "b", "c", "a"]
    assert frames["ok"].tolist() == [True, False, True, True]
    assert np.isnan(frames["value"][1]) and frames["value"][3] == 1.5
    assert api_run.table("arrow").equals(arrow), "a pyarrow table comes back with its types"
    assert api_run.table("added").to_pylist() == [{"x": 1, "y": 0.5}, {"x": 2, "y": None}]
    with pytest.raises(ValueError, match="mode"):
        trainlog.Table(columns=["a"], data=[[1]], mode="merge")
    with pytest.raises(ValueError, match="per column"):
        trainlog.Table(columns=["a"], data=[[1, 2]])
