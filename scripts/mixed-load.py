#!/usr/bin/env python3
"""Fair serving under mixed load: `duo lead` and llama-server, each under the same load.

Each server is started in turn on loopback with -np 2 and its own defaults otherwise (its
own n_batch among them), on the same model (default: the default pair's main model), and
measured alone:

  pass        a /v1/completions whose prompt is exactly n_batch tokens, max_tokens 1: one
              full pass of n_batch tokens on this host (best of 2)
  completion  a --prompt-tokens prompt goes to /v1/completions (max_tokens 1), and 1 s
              later a greedy 16-token chat request (the short request): its latency, and
              the long prompt's time. Then another prompt as long (nothing of it
              cached) beside a running greedy stream: the stream's largest gap
              between chunks while the long prompt is read. (Two requests at a time
              each: both fit -np 2, so no request waits for a free slot.)
  prefill     duo only: the same, with the long prompt sent to duo's POST /prefill

Prompts are deterministic text, sized with the server's own /tokenize and sent as token IDs,
each new to the server (no cached prefix). Prints one table; --out FILE writes it as JSON.

    .venv/bin/python scripts/mixed-load.py [--prompt-tokens 4000] [--servers duo llama-server]
        [-m MODEL] [--threads N] [--llama-cpp-bin DIR] [--out FILE]

llama-server is taken from --llama-cpp-bin, else from scripts/build-llama-cpp.sh's build
(made on first use, about 8 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from duo.bench.harness.llamacpp import find_bin
from duo.bench.harness.servers import Server
from duo.net import free_port
from duo.session.config import resolve_models

SLOTS = 2
STREAM: dict[str, Any] = {
    "prompt": "10, 20, 30,",
    "max_tokens": 4000,  # closed once the long prompt beside it has been read
    "temperature": 0,
    "stream": True,
}
SHORT: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Name three colours."}],
    "max_tokens": 16,
    "temperature": 0,
}
SHORT_AFTER = 1.0  # seconds after the long prompt was sent
TIMEOUT = 900.0
WORDS = [
    "the", "river", "city", "light", "morning", "stone", "garden", "market", "window",
    "story", "winter", "music", "road", "field", "letter", "harbor", "summer", "paper",
    "forest", "bridge", "village", "evening", "silver", "mountain", "question", "answer",
]  # fmt: skip
COLUMNS = (
    ("server", "server", "{}"),
    ("scenario", "scenario", "{}"),
    ("n_batch", "n_batch", "{}"),
    ("pass ms", "pass_ms", "{:.0f}"),
    ("short request s", "short_s", "{:.2f}"),
    ("largest stream gap s", "stream_gap_s", "{:.2f}"),
    ("long prompt s", "long_s", "{:.2f}"),
)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model, _ = resolve_models(args.model, None, None)
    rows: list[dict[str, Any]] = []
    for name in args.servers:
        rows += measure(name, command(name, model, args), args.prompt_tokens)
    print(table(rows))
    if args.out:
        meta = {"model": str(model), "prompt_tokens": args.prompt_tokens, "threads": args.threads}
        Path(args.out).write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-tokens", type=int, default=4000, help="the long prompt")
    parser.add_argument(
        "--servers", nargs="+", choices=("duo", "llama-server"), default=["duo", "llama-server"]
    )
    parser.add_argument("-m", "--model", help="a GGUF (default: the default pair's main model)")
    parser.add_argument("--threads", type=int, help="-t for both servers (default: their own)")
    parser.add_argument("--llama-cpp-bin", help="where llama-server is (default: the build's)")
    parser.add_argument("--out", help="write the table here as JSON")
    return parser.parse_args(argv)


def command(name: str, model: Path, args: argparse.Namespace) -> list[str]:
    """The server's command line, without its port: -np 2, --threads if given."""
    threads = ["-t", str(args.threads)] if args.threads else []
    if name == "duo":
        duo = [sys.executable, "-m", "duo", "lead", "-m", str(model), "--quiet"]
        return [*duo, "-np", str(SLOTS), *threads]
    binary = find_bin(args.llama_cpp_bin or llama_cpp_build(), "llama-server")
    server = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--no-webui"]
    return [*server, "-np", str(SLOTS), *threads]


def llama_cpp_build() -> str:
    """The directory of llama.cpp's binaries built by scripts/build-llama-cpp.sh."""
    script = Path(__file__).with_name("build-llama-cpp.sh")
    out = subprocess.run([str(script), sys.executable], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"mixed-load: {script.name} failed:\n{out.stderr[-2000:]}")
    return out.stdout.strip().splitlines()[-1]


def default_n_batch(cmd: list[str]) -> int:
    """The server's n_batch, as its --help states the default."""
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True)
    text = out.stdout + out.stderr
    found = re.search(r"--batch-size.*?default:? (\d+)\)", text, re.DOTALL)
    if found is None:
        sys.exit(f"mixed-load: no --batch-size default in {Path(cmd[0]).name} --help")
    return int(found.group(1))


def measure(name: str, cmd: list[str], prompt_tokens: int) -> list[dict[str, Any]]:
    """One server: started, its pass measured, each scenario run, stopped."""
    n_batch = default_n_batch(cmd)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    print(f"mixed-load: {name} (n_batch {n_batch})", file=sys.stderr)
    server = Server(name, [[*cmd, "--port", str(port)]], "", url)
    try:
        variant = iter(range(1, 100))
        passes = [timed_pass(url, prompt(url, n_batch, next(variant))) for _ in range(2)]
        rows = []
        for scenario in ("completion", "prefill") if name == "duo" else ("completion",):
            wait_idle(url)
            long = prompt(url, prompt_tokens, next(variant))
            again = prompt(url, prompt_tokens, next(variant))
            result = mixed_load(url, scenario, long, again)
            row = {"server": name, "scenario": scenario, "n_batch": n_batch}
            rows.append({**row, "pass_ms": 1000 * min(passes), **result})
            print(f"mixed-load: {name} {scenario}: {json.dumps(result)}", file=sys.stderr)
        return rows
    finally:
        server.stop()


def prompt(url: str, n: int, variant: int) -> list[int]:
    """n token IDs of deterministic text that no other prompt here begins with."""
    rng = random.Random(variant)
    words: list[str] = [f"Report {variant}:"]
    while True:
        words += [rng.choice(WORDS) for _ in range(n)]
        text = " ".join(words)
        r = httpx.post(f"{url}/tokenize", json={"content": text}, timeout=TIMEOUT)
        r.raise_for_status()
        tokens: list[int] = r.json()["tokens"]
        if len(tokens) >= n:
            return tokens[:n]


def timed_pass(url: str, tokens: list[int]) -> float:
    """Seconds of a completion of these prompt tokens and one generated token."""
    body = {"prompt": tokens, "max_tokens": 1, "temperature": 0}
    started = time.monotonic()
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=TIMEOUT)
    r.raise_for_status()
    took = time.monotonic() - started
    if r.json()["usage"]["prompt_tokens"] != len(tokens):
        sys.exit(f"mixed-load: {len(tokens)} prompt tokens read as {r.json()['usage']}")
    return took


def wait_idle(url: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while any(s["is_processing"] for s in httpx.get(f"{url}/slots", timeout=30).json()):
        if time.monotonic() > deadline:
            sys.exit("mixed-load: the server never became idle")
        time.sleep(0.1)


def mixed_load(url: str, scenario: str, long: list[int], again: list[int]) -> dict[str, Any]:
    """Two runs of the long prompt, each beside one other request (both fit -np 2): the
    short request SHORT_AFTER seconds after it, then a stream running while it is read."""
    if scenario == "prefill":
        path, body = "/prefill", {"prompt": long, "session": "mixed-load"}
    else:
        path, body = "/v1/completions", {"prompt": long, "max_tokens": 1}
    times: dict[str, tuple[float, float]] = {}
    short = threading.Thread(target=timed, args=(url, "/v1/chat/completions", SHORT, times))
    later = threading.Timer(SHORT_AFTER, short.start)
    later.start()
    timed(url, path, body, times, "long")
    later.join()
    short.join(TIMEOUT)
    wait_idle(url)
    body = {**body, "prompt": again}  # another prompt as long: nothing of it is cached
    if scenario == "prefill":
        body["session"] = "mixed-load-2"
    chunks = streamed_beside(url, path, body, times)
    return figures(chunks, times)


def timed(
    url: str, path: str, body: dict[str, Any], times: dict[str, Any], what: str = "short"
) -> None:
    started = time.monotonic()
    r = httpx.post(f"{url}{path}", json=body, timeout=TIMEOUT)
    if r.status_code != 200:
        sys.exit(f"mixed-load: {path} answered {r.status_code}: {r.text[:300]}")
    times[what] = started, time.monotonic()


def streamed_beside(
    url: str, path: str, body: dict[str, Any], times: dict[str, Any]
) -> list[float]:
    """A greedy stream's chunk times, from its first chunk until the long prompt (sent
    then) has been read; the stream is closed then (the server cancels it)."""
    chunks: list[float] = []
    first, done = threading.Event(), threading.Event()

    def stream() -> None:
        with httpx.stream("POST", f"{url}/v1/completions", json=STREAM, timeout=TIMEOUT) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                choices = json.loads(line[6:])["choices"] if line.startswith("data: {") else []
                if choices and choices[0].get("text"):
                    chunks.append(time.monotonic())
                    first.set()
                if done.is_set():
                    return

    reader = threading.Thread(target=stream)
    reader.start()
    if not first.wait(TIMEOUT):
        sys.exit("mixed-load: the stream sent nothing")
    timed(url, path, body, times, "beside")
    done.set()
    reader.join(TIMEOUT)
    return chunks


def figures(chunks: list[float], times: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """The short request's and the long prompt's seconds, and the stream's largest gap
    between chunks that overlaps the long prompt's reading (its second run)."""
    start, end = times["beside"]
    gaps = [b - a for a, b in itertools.pairwise(chunks) if b > start and a < end]
    return {
        "short_s": times["short"][1] - times["short"][0],
        "stream_gap_s": max(gaps, default=0.0),
        "long_s": times["long"][1] - times["long"][0],
        "long_beside_stream_s": end - start,
        "stream_outlasted_long": bool(chunks) and chunks[-1] >= end,
    }


def table(rows: list[dict[str, Any]]) -> str:
    cells = [[head for head, _, _ in COLUMNS]]
    cells += [[fmt.format(row[key]) for _, key, fmt in COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in cells)
    return "\n".join(line.rstrip() for line in lines)


if __name__ == "__main__":
    sys.exit(main())
