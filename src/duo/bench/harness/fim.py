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
SUITES = {"fim": PACKAGES, "fim-holdout": HOLDOUT}
REQUESTS = 16  # per suite
PREFIX_LINES = 64
SUFFIX_LINES = 24
CHUNK_LINES = 32  # llama.vscode's window (llama.vim takes 33)
CHUNKS = 3
FIELDS = ("input_prefix", "input_suffix", "input_extra", "prompt")

InfillRequest = dict[str, Any]  # the body's fill-in-the-middle fields


def requests(suite: str, count: int = REQUESTS, seed: int = 0) -> list[InfillRequest]:
    """`count` requests from the suite's packages, the same for the same arguments."""
    rng = random.Random(f"{suite}-{seed}")
    root = Path(sysconfig.get_paths()["stdlib"])
    packages = [sorted((root / p).glob("*.py")) for p in SUITES[suite]]
    packages = [files for files in packages if len(files) > 1]
    return [_request(rng, packages[i % len(packages)], root) for i in range(count)]


def _request(rng: random.Random, files: list[Path], root: Path) -> InfillRequest:
    here = rng.choice([f for f in files if len(_lines(f)) > 20])
    lines = _lines(here)
    cursor = rng.randrange(10, len(lines) - 5)
    line = lines[cursor].rstrip("\n")
    indent = len(line) - len(line.lstrip())
    column = rng.randrange(indent, max(indent + 1, len(line) // 2 + 1))
    others = rng.sample([f for f in files if f != here], min(CHUNKS, len(files) - 1))
    extra = []
    for other in others:
        text = _lines(other)
        start = rng.randrange(max(1, len(text) - CHUNK_LINES))
        name = str(other.relative_to(root))  # editors send a path
        extra.append({"filename": name, "text": "".join(text[start : start + CHUNK_LINES])})
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
    input_extra and prompt if they like (other fields are left out)."""
    out = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        if not isinstance(item, dict) or "input_prefix" not in item or "input_suffix" not in item:
            raise ValueError(f"{path}:{number}: not an object with input_prefix and input_suffix")
        out.append({k: item[k] for k in FIELDS if k in item})
    return out
