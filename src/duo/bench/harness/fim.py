"""Fill-in-the-middle requests for `duo bench --clients --suite fim`, made as llama.vscode
makes them, from real source files that ship on every machine: the Python standard library.

A request is a cursor at a random line of a module: the lines before it (up to
PREFIX_LINES) are `input_prefix`, the text left of the cursor on its line is `prompt`, the
lines after it (up to SUFFIX_LINES) are `input_suffix`, and windows of other modules of the
same package (up to CHUNK_LINES lines each, as the editors' ring buffer cuts them) are
`input_extra`. Time limits are off (the editors' t_max_predict_ms would cut answers by the
clock, which is not what is measured here).

    fim         requests from the packages in PACKAGES (tune and look at these)
    fim-holdout the same, from HOLDOUT: packages kept aside for the final measurement
    fim-edit    an editing session: one file worked through from top to bottom over EDITS
                requests, the cursor a few lines further each time, while the editor's ring
                buffer of chunks takes a chunk of another file every other request (a
                warm-up request of the chunks alone, n_predict 0, tells the server, as
                llama.vscode sends one)
                and drops its oldest once it holds RING chunks: the chunks move between
                requests, which is what llama-server's --cache-reuse is for

`--prompts FILE` takes such requests too: JSON lines with input_prefix, input_suffix,
input_extra and prompt (`load`). Generated, not stored: the same seed gives the same
requests on any machine with the same Python.
"""

from __future__ import annotations

import json
import random
import sysconfig
from pathlib import Path
from typing import Any

PACKAGES = ("json", "email", "http", "logging", "concurrent/futures", "importlib", "xml/dom")
HOLDOUT = ("asyncio", "urllib", "unittest", "xml/etree", "wsgiref")
SUITES = {"fim": PACKAGES, "fim-holdout": HOLDOUT, "fim-edit": PACKAGES}
REQUESTS = 16  # per suite
EDITS = 20  # completions in an editing session
RING = 8  # chunks the session's ring buffer holds (llama.vscode: 16, of up to 64 lines)
PREFIX_LINES = 64
SUFFIX_LINES = 24
CHUNK_LINES = 32  # llama.vscode's window (llama.vim takes 33)
CHUNKS = 3
FIELDS = ("input_prefix", "input_suffix", "input_extra", "prompt")

InfillRequest = dict[str, Any]  # the body's fill-in-the-middle fields


def requests(suite: str, count: int = REQUESTS, seed: int = 0) -> list[InfillRequest]:
    """`count` requests from the suite's packages (fim-edit: one session of EDITS), the
    same for the same arguments."""
    rng = random.Random(f"{suite}-{seed}")
    root = Path(sysconfig.get_paths()["stdlib"])
    packages = [sorted((root / p).glob("*.py")) for p in SUITES[suite]]
    packages = [files for files in packages if len(files) > 1]
    if suite == "fim-edit":
        return _session(rng, rng.choice(packages), root)
    out = []
    for i in range(count):
        files = packages[i % len(packages)]
        here = rng.choice([f for f in files if len(_lines(f)) > 20])
        cursor = rng.randrange(10, len(_lines(here)) - 5)
        request = _at(rng, here, cursor, [])
        others = rng.sample([f for f in files if f != here], min(CHUNKS, len(files) - 1))
        request["input_extra"] = [_chunk(rng, f, root) for f in others]
        out.append(request)
    return out


def _session(rng: random.Random, files: list[Path], root: Path) -> list[InfillRequest]:
    """An editing session's requests, warm-ups among them (see the module's docstring)."""
    here = max(files, key=lambda f: len(_lines(f)))
    others = [f for f in files if f != here]
    ring = [_chunk(rng, rng.choice(others), root) for _ in range(CHUNKS)]
    cursor = 20
    out = []
    for i in range(EDITS):
        if i and i % 2 == 0:
            ring = [*ring[-(RING - 1) :], _chunk(rng, rng.choice(others), root)]
            # llama.vscode's warm-up: the chunks alone, nothing generated
            out.append({**dict.fromkeys(("input_prefix", "input_suffix", "prompt"), ""),
                        "input_extra": list(ring), "n_predict": 0})  # fmt: skip
        out.append(_at(rng, here, cursor, list(ring)))
        cursor = min(cursor + rng.randint(3, 8), len(_lines(here)) - 2)
    return out


def _chunk(rng: random.Random, path: Path, root: Path) -> dict[str, str]:
    """A window of a file, as the editors' ring buffer cuts it."""
    text = _lines(path)
    start = rng.randrange(max(1, len(text) - CHUNK_LINES))
    name = str(path.relative_to(root))  # editors send a path
    return {"filename": name, "text": "".join(text[start : start + CHUNK_LINES])}


def _at(rng: random.Random, here: Path, cursor: int, extra: list[dict[str, str]]) -> InfillRequest:
    """A request with the cursor on line `cursor` of `here`, at a random column of its
    first half."""
    lines = _lines(here)
    line = lines[cursor].rstrip("\n")
    indent = len(line) - len(line.lstrip())
    column = rng.randrange(indent, max(indent + 1, len(line) // 2 + 1))
    return {
        "input_prefix": "".join(lines[max(0, cursor - PREFIX_LINES) : cursor]),
        "input_suffix": "".join(lines[cursor + 1 : cursor + 1 + SUFFIX_LINES]),
        "input_extra": extra,
        "prompt": line[:column],
    }


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)


def load(path: str) -> list[InfillRequest]:
    """Requests from a JSON-lines file: objects with input_prefix and input_suffix, and
    input_extra, prompt and n_predict (0: a warm-up) if they like (other fields are left
    out)."""
    out = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        if not isinstance(item, dict) or "input_prefix" not in item or "input_suffix" not in item:
            raise ValueError(f"{path}:{number}: not an object with input_prefix and input_suffix")
        out.append({k: item[k] for k in (*FIELDS, "n_predict") if k in item})
    return out
