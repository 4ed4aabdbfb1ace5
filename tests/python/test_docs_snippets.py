"""Every ```python block of README.md and docs/**/*.md runs against a real server.

Each block is one test: it is written to a file in a fresh folder and run there by this
interpreter, in a subprocess with a timeout, with `TRAINLOG_SERVER` naming a server started for
this module (the address the package reads when `init` and `Api` get no `server=`) and
`TRAINLOG_DIR` a folder of its own for spools. A block that exits non-zero fails the test, so a
snippet that stops working fails the build. The blocks of a page run in order against the same
server: a later block may read what an earlier one logged.

A block that needs what the test machine lacks (a GPU, torchrun, a cluster) is skipped by an
HTML comment on the line before its fence, with the reason: `<!-- snippet: skip (needs a GPU) -->`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO_ROOT

SNIPPET_TIMEOUT_S = 120
PYTHON_INFO = {"python", "py", "python3"}
FENCE_RE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARKER_RE = re.compile(r"^\s*<!--\s*snippet\b")
SKIP_RE = re.compile(r"^\s*<!--\s*snippet:\s*skip\s*\((?P<reason>[^()]*\S[^()]*)\)\s*-->\s*$")


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    skip: str | None  # the reason, when marked to skip

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT).as_posix()}:{self.line}"


@dataclass(frozen=True)
class Marker:
    path: Path
    line: int
    text: str
    before_python: bool  # the next line opens a python block


def markdown_files() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def parse(path: Path) -> tuple[list[Snippet], list[Marker]]:
    """The python blocks of one Markdown file, and every `<!-- snippet ... -->` comment in it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    snippets: list[Snippet] = []
    markers: list[Marker] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = FENCE_RE.match(line)
        if not m:
            if MARKER_RE.match(line):
                nxt = FENCE_RE.match(lines[i + 1]) if i + 1 < len(lines) else None
                is_python = bool(nxt) and nxt.group("info").strip().split(" ")[0].lower() in PYTHON_INFO
                markers.append(Marker(path, i + 1, line.strip(), is_python))
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        info = m.group("info").strip().split(" ")[0].lower() if m.group("info").strip() else ""
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = FENCE_RE.match(lines[i])
            if close and close.group("fence")[0] == fence[0] and len(close.group("fence")) >= len(fence) \
                    and not close.group("info").strip():
                break
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1  # past the closing fence
        if info not in PYTHON_INFO:
            continue
        skip = None
        if start > 0:
            sm = SKIP_RE.match(lines[start - 1])
            if sm:
                skip = sm.group("reason").strip()
        snippets.append(Snippet(path, start + 1, textwrap.dedent("\n".join(body)) + "\n", skip))
    return snippets, markers


def all_snippets() -> list[Snippet]:
    return [s for path in markdown_files() for s in parse(path)[0]]


SNIPPETS = all_snippets()


def test_the_pages_have_snippets() -> None:
    # A parser that finds nothing would pass every page; the README alone has several.
    assert len([s for s in SNIPPETS if s.path.name == "README.md"]) >= 1
    assert len(SNIPPETS) >= 10, [s.id for s in SNIPPETS]


def test_every_snippet_marker_is_a_skip_with_a_reason_before_a_python_block() -> None:
    bad = []
    for path in markdown_files():
        for marker in parse(path)[1]:
            where = f"{marker.path.relative_to(REPO_ROOT)}:{marker.line}"
            if not SKIP_RE.match(marker.text):
                bad.append(f"{where}: {marker.text!r} is not `<!-- snippet: skip (the reason) -->`")
            elif not marker.before_python:
                bad.append(f"{where}: a skip marker must be on the line just before a ```python fence")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet_runs(snippet: Snippet, trainlog_server, tmp_path: Path) -> None:
    if snippet.skip:
        pytest.skip(snippet.skip)
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINLOG_", "MLFLOW_"))}
    env.update(
        TRAINLOG_SERVER=trainlog_server.url,
        TRAINLOG_DIR=str(tmp_path / "trainlog-home"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    try:
        done = subprocess.run(
            [sys.executable, script.name], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=SNIPPET_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{snippet.id}: still running after {SNIPPET_TIMEOUT_S} s\n--- stdout ---\n{e.stdout}\n"
                    f"--- stderr ---\n{e.stderr}")
    assert done.returncode == 0, (
        f"{snippet.id} exited with {done.returncode}\n--- snippet ---\n{snippet.code}\n"
        f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
    )


def test_the_store_page_shows_the_one_liner_that_test_store_layout_runs() -> None:
    # test_store_layout.py runs docs/store-one-liner.sh; the page must show that very line.
    line = next(ln for ln in (REPO_ROOT / "docs" / "store-one-liner.sh").read_text().splitlines()
                if ln.strip() and not ln.startswith("#"))
    assert line in (REPO_ROOT / "docs" / "store.md").read_text(encoding="utf-8").splitlines()
