"""Artifact upload and download throughput over loopback, beside a plain copy of the same file on
the same disk. Upload: the SDK streams the file to the server, which writes it to the local object
store (multipart, sha256 on the way). Download: streamed back, sha256 verified, fsynced.

    python bench/python/bench_artifacts.py [--mib 1024] [--reps 3]

Prints medians; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import trainlog

REPO = Path(__file__).resolve().parents[2]


def copy_fsync(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=REPO / "target") as tmp:
        tmp_path = Path(tmp)
        src = tmp_path / "payload.bin"
        with open(src, "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(args.mib):
                f.write(block)
        server = subprocess.Popen([str(REPO / "target/release/trainlog"), "server", "--port", "0", "--data", str(tmp_path / "data")],
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None
        url = re.search(r"listening on (http://\S+)", server.stdout.readline()).group(1)  # type: ignore[union-attr]
        try:
            run = trainlog.init(project="bench", server=url, system_metrics_interval=None, capture_packages=False, capture_code=False,
                                spool_dir=str(tmp_path / "spool"))
            copy_t, up_t, down_t = [], [], []
            for i in range(args.reps):
                t = time.perf_counter(); copy_fsync(src, tmp_path / f"copy-{i}.bin"); copy_t.append(time.perf_counter() - t)
                (tmp_path / f"copy-{i}.bin").unlink()
                t = time.perf_counter(); run.log_artifact(src, f"blob-{i}.bin"); up_t.append(time.perf_counter() - t)
                t = time.perf_counter()
                trainlog.Api(url).run(run.id).download_artifact(f"blob-{i}.bin", str(tmp_path / f"down-{i}.bin"))
                down_t.append(time.perf_counter() - t)
                (tmp_path / f"down-{i}.bin").unlink()
            run.finish()
        finally:
            server.terminate()
            server.wait(timeout=60)
    mb = args.mib * (1 << 20) / 1e6
    print(f"| operation ({args.mib} MiB, median of {args.reps}) | MB/s |")
    print("|---|---:|")
    for name, times in [("plain copy + fsync, same disk", copy_t), ("upload to the server (stream, sha256, object store)", up_t),
                        ("download (stream, sha256 verified, fsync)", down_t)]:
        print(f"| {name} | {mb / statistics.median(times):,.0f} |")


if __name__ == "__main__":
    main()
