#!/usr/bin/env python3
"""The measuring half of scripts/gpu/check.sh (which builds llama.cpp and sets up Python
first): synthetic models, correctness, device costs, and throughput, each step timed and
every result written under --out.

    check.py run --bin DIR --out DIR --work DIR [--gpu] [--tiny] [--deadline EPOCH]
    check.py costs --model GGUF --ngl N --threads N --role main|draft   (one model's
        pass times by batch size, as JSON on stdout: a process of its own per model)

Steps, in order of what matters most when time runs short (a step that would start past
--deadline is skipped and recorded so):

    models       synth.py's main and draft (llama3-8b and llama3.2-1b, or tiny ones),
                 quantized: the main to Q4_K_M, the draft to Q8_0 (llama-quantize, or
                 llama.cpp's llama_model_quantize through llama-cpp-python without it)
    correctness  greedy text: `duo generate --mode target` equals llama-completion on the
                 same model, and `--mode async` equals `--mode target` (on the GPU with
                 --gpu: -ngl 99 -ngld 99)
    costs        each model's pass time by batch size 1, 2, 4, 8, 16 on the GPU (with
                 --gpu) and on the CPU (every core), by duo's calibration
                 (duo.llama.calibrate): profile.json, a device-costs file for
                 `duo sim --profile`
    defaults     the CPU with no thread flags: duo generate (target and its default
                 async) and llama-completion
    seed002      seed 002's placement, the main model on the CPU (-ngl 0) and the drafter
                 on the GPU (-ngld 99): duo generate --mode target and async, duo lead +
                 duo back, and llama-server -md (tok/s)

128 tokens a generation on the GPU, 64 where the main model runs on the CPU (24 with
--tiny); $DUO_CHECK_THREADS: the costs' CPU threads (default every core).

Writes OUT/results.json (every step's figures and seconds), OUT/profile.json and
OUT/logs/ (each command's output, its last 20 kB).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROMPT = "The quick brown fox jumps over the lazy dog and the"  # ends in a plain word
BATCHES = (1, 2, 4, 8, 16)
SHAPES = {  # (main, draft)
    False: (("llama3-8b", "Q4_K_M"), ("llama3.2-1b", "Q8_0")),
    True: (("tiny", "Q4_K_M"), ("tiny", "Q8_0")),
}
FTYPES = {"Q4_K_M": 15, "Q8_0": 7}  # enum llama_ftype
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) s, speed:\s+([\d.]+) t/s")
DRAFTED = re.compile(r"drafted (\d+), accepted (\d+)")
EVAL = re.compile(r"(?<!prompt )eval time\s*=\s*([\d.]+) ms /\s*(\d+) (?:runs|tokens)")
LOG_BYTES = 20_000


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.logs = self.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.work = Path(args.work)
        self.bin = Path(args.bin)
        self.gpu_layers = 99 if args.gpu else 0
        self.n = 24 if args.tiny else 128
        self.n_cpu = 24 if args.tiny else 64  # where the main model runs on the CPU
        self.cores = os.cpu_count() or 1
        # the costs' CPU threads: every core (a loaded test machine: fewer)
        self.threads = int(os.environ.get("DUO_CHECK_THREADS", self.cores))
        self.results: dict[str, Any] = {
            "date": date.today().isoformat(),
            "device": device_name(args.gpu),
            "gpu": args.gpu,
            "tiny": args.tiny,
            "prompt": PROMPT,
            "n_predict": self.n,
            "steps": {},
        }
        self.main = self.draft = Path()

    # -- plumbing ----------------------------------------------------------------------

    def save(self) -> None:
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1) + "\n")

    def step(self, name: str, fn: Any, needs_s: float) -> None:
        left = self.args.deadline - time.time()
        if left < needs_s:
            print(f"[check] {name}: skipped ({left:.0f} s left, needs ~{needs_s:.0f})", flush=True)
            self.results["steps"][name] = {"skipped": f"out of time ({left:.0f} s left)"}
            self.save()
            return
        print(f"[check] {name} ...", flush=True)
        t0 = time.monotonic()
        record: dict[str, Any] = {}
        try:
            record.update(fn() or {})
        except Exception as e:  # a step's failure is a result: the next steps still run
            record["error"] = f"{type(e).__name__}: {e}"
            print(f"[check] {name}: FAILED: {record['error']}", flush=True)
        record["seconds"] = round(time.monotonic() - t0, 1)
        self.results["steps"][name] = record
        self.save()
        print(f"[check] {name}: {record['seconds']} s", flush=True)

    def run(self, label: str, argv: list[str], timeout: float = 300) -> str:
        """Run a command to completion; its output (stderr after stdout) is logged."""
        t0 = time.monotonic()
        p = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        seconds = time.monotonic() - t0
        self._log(label, argv, p.stdout + "\n--- stderr ---\n" + p.stderr, seconds)
        if p.returncode != 0:
            tail = " / ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"{label} exited {p.returncode}: {tail}")
        print(f"[check]   {label}: {seconds:.1f} s", flush=True)
        self._stdout, self._stderr = p.stdout, p.stderr
        return p.stderr

    def _log(self, label: str, argv: list[str], text: str, seconds: float) -> None:
        head = f"$ {' '.join(argv)}\n({seconds:.1f} s)\n"
        (self.logs / f"{label}.log").write_text(head + text[-LOG_BYTES:])

    def duo(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "duo", *args]

    # -- steps -------------------------------------------------------------------------

    def models(self) -> dict[str, Any]:
        (main_shape, main_q), (draft_shape, draft_q) = SHAPES[self.args.tiny]
        models = self.work / "models"
        models.mkdir(parents=True, exist_ok=True)
        made = {}
        for role, shape, quant, extra in (
            ("main", main_shape, main_q, ["--seed", "1"]),
            ("draft", draft_shape, draft_q, ["--seed", "2", "--agree", "0.75"]),
        ):
            final = models / f"{role}-{shape}-{quant}.gguf"
            stamp = final.with_suffix(".stamp")
            key = f"{shape} {extra} {file_hash(HERE / 'synth.py')}"
            if not (final.exists() and stamp.exists() and stamp.read_text() == key):
                f16 = models / f"{role}-{shape}-F16.gguf"
                self.run(
                    f"synth-{role}",
                    [sys.executable, str(HERE / "synth.py"), "--shape", shape, "-o", str(f16),
                     *extra, "--llama-src", self.args.llama_src],
                    timeout=600,
                )  # fmt: skip
                self.quantize(role, f16, final, quant)
                f16.unlink()
                stamp.write_text(key)
            made[role] = {"file": final.name, "bytes": final.stat().st_size}
        self.main = models / made["main"]["file"]
        self.draft = models / made["draft"]["file"]
        return made

    def quantize(self, role: str, src: Path, dst: Path, quant: str) -> None:
        tool = self.bin / "llama-quantize"
        if tool.exists():
            self.run(f"quantize-{role}", [str(tool), str(src), str(dst), quant, str(self.cores)])
            return
        code = (
            "import ctypes, sys, llama_cpp as l; p = l.llama_model_quantize_default_params(); "
            "p.ftype = int(sys.argv[3]); p.nthread = int(sys.argv[4]); "
            "sys.exit(l.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), "
            "ctypes.byref(p)))"
        )
        argv = [sys.executable, "-c", code, str(src), str(dst), str(FTYPES[quant])]
        self.run(f"quantize-{role}", [*argv, str(self.cores)])

    def correctness(self) -> dict[str, Any]:
        g = str(self.gpu_layers)
        common = ["-p", PROMPT, "-n", str(self.n), "--temp", "0", "-c", "4096"]
        self.run(
            "llama-completion",
            [str(self.bin / "llama-completion"), "-m", str(self.main), *common, "-ngl", g,
             "-no-cnv", "--ignore-eos"],
        )  # fmt: skip
        reference = self._stdout.removeprefix(PROMPT).rstrip("\n")
        llama = completion_speed(self._stderr + self._stdout)
        pair = ["-m", str(self.main), "-md", str(self.draft), "-ngl", g, "-ngld", g]
        texts, stats = {}, {}
        for mode in ("target", "async"):
            err = self.run(
                f"duo-{mode}",
                self.duo("generate", *pair, "--mode", mode, "--color", "never", *common),
            )
            texts[mode] = self._stdout.rstrip("\n")
            stats[mode] = speed(err)
        ok_target = texts["target"] == reference
        ok_async = texts["async"] == texts["target"]
        print(
            f"[check]   duo target == llama-completion: {ok_target}; async == target: {ok_async}",
            flush=True,
        )
        return {
            "gpu_layers": self.gpu_layers,
            "target_equals_llama_completion": ok_target,
            "async_equals_target": ok_async,
            "llama_completion": reference[:300],
            "duo_target": texts["target"][:300],
            "duo_async": texts["async"][:300],
            "duo": stats,
            "llama_completion_speed": llama,
        }

    def costs(self) -> dict[str, Any]:
        devices = (("gpu", 99), ("cpu", 0)) if self.args.gpu else (("cpu", 0),)
        costs: dict[str, Any] = {}
        for where, ngl in devices:
            costs[where] = {"threads": self.threads}
            for role, path in (("main", self.main), ("draft", self.draft)):
                self.run(
                    f"costs-{where}-{role}",
                    [sys.executable, __file__, "costs", "--model", str(path), "--ngl", str(ngl),
                     "--threads", str(self.threads), "--role", role],
                )  # fmt: skip
                costs[where][role] = json.loads(self._stdout)
        (main_shape, main_q), (draft_shape, draft_q) = SHAPES[self.args.tiny]
        profile = {
            "format": "duo-device-costs/1",
            "device": self.results["device"],
            "date": self.results["date"],
            "models": {
                "main": f"{main_shape} {main_q} (synthetic: scripts/gpu/synth.py)",
                "draft": f"{draft_shape} {draft_q} (synthetic)",
            },
            "costs_ms": costs,
            "note": (
                "scripts/gpu/check.sh: each model alone, loaded in a process of its own, "
                "by duo.llama.calibrate (median of 3 passes after 8 tokens of context; the "
                "main model's logits for every position, as a verification; the draft's "
                "for the last, as a catch-up); the CPU's with every core's thread"
            ),
        }
        (self.out / "profile.json").write_text(json.dumps(profile, indent=1) + "\n")
        return {"profile": "profile.json", "costs_ms": costs}

    def defaults(self) -> dict[str, Any]:
        """The CPU as a user runs each tool with no thread flags."""
        common = ["-p", PROMPT, "-n", str(self.n_cpu), "--temp", "0"]
        out: dict[str, Any] = {}
        err = self.run(
            "defaults-llama-completion",
            [str(self.bin / "llama-completion"), "-m", str(self.main), *common, "-ngl", "0",
             "-no-cnv", "--ignore-eos"],
        )  # fmt: skip
        out["llama_completion"] = completion_speed(err + self._stdout)
        for mode in ("target", "async"):
            err = self.run(
                f"defaults-duo-{mode}",
                self.duo("generate", "-m", str(self.main), "-md", str(self.draft),
                         "--mode", mode, "--color", "never", *common),
            )  # fmt: skip
            out[f"duo_{mode}"] = speed(err)
        return out

    def seed002(self) -> dict[str, Any]:
        """Main model on the CPU, drafter on the GPU (both on the CPU without one)."""
        g = str(self.gpu_layers)
        common = ["-p", PROMPT, "-n", str(self.n_cpu), "--temp", "0"]
        out: dict[str, Any] = {"draft_gpu_layers": self.gpu_layers}
        for mode in ("target", "async"):
            err = self.run(
                f"seed002-duo-{mode}",
                self.duo("generate", "-m", str(self.main), "-md", str(self.draft), "-ngl", "0",
                         "-ngld", g, "--mode", mode, "--color", "never", *common),
            )  # fmt: skip
            out[f"duo_{mode}"] = speed(err)
        out["duo_lead_back"] = self._lead_back(g)
        out["llama_server"] = self._llama_server(g)
        return out

    def _lead_back(self, g: str) -> dict[str, Any]:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        lead = self._serve(
            "seed002-duo-lead",
            self.duo("lead", "-m", str(self.main), "-ngl", "0", "--port", str(port), "--quiet"),
        )
        back = None
        try:
            wait_http(f"{url}/health", lead, 300, lambda r: r.json().get("status") == "ok")
            back = self._serve(
                "seed002-duo-back",
                self.duo("back", "--lead", url, "-m", str(self.draft), "-ngl", g),
            )
            wait_http(f"{url}/health", back, 300, lambda r: r.json().get("drafters", 0) > 0)
            return complete(f"{url}/v1/completions", self.n_cpu)
        finally:
            for proc in (back, lead):
                stop(proc)

    def _llama_server(self, g: str) -> dict[str, Any]:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = self._serve(
            "seed002-llama-server",
            [str(self.bin / "llama-server"), "-m", str(self.main), "-ngl", "0", "-md",
             str(self.draft), "-ngld", g, "--port", str(port), "-c", "4096"],
        )  # fmt: skip
        try:
            wait_http(f"{url}/health", server, 300, lambda r: r.status_code == 200)
            return complete(f"{url}/v1/completions", self.n_cpu)
        finally:
            stop(server)

    def _serve(self, label: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{label}.log").open("wb")
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


# -- helpers ----------------------------------------------------------------------------


def speed(stderr: str) -> dict[str, Any]:
    """duo generate's summary: tokens, seconds, tok/s, drafted and accepted."""
    m = DECODED.search(stderr)
    if m is None:
        raise RuntimeError("no 'decoded N tokens' line in duo generate's output")
    d = DRAFTED.search(stderr)
    placement = next((x for x in stderr.splitlines() if x.startswith("placement:")), None)
    return {
        "tokens": int(m.group(1)),
        "seconds": float(m.group(2)),
        "tokens_per_second": float(m.group(3)),
        "drafted": int(d.group(1)) if d else 0,
        "accepted": int(d.group(2)) if d else 0,
        "placement": placement,
    }


def completion_speed(text: str) -> dict[str, Any]:
    """llama-completion's eval time: the passes after the prompt's."""
    m = EVAL.findall(text)
    if not m:
        raise RuntimeError("no eval time in llama-completion's output")
    ms, runs = float(m[-1][0]), int(m[-1][1])
    return {"tokens": runs, "seconds": ms / 1000, "tokens_per_second": 1000 * runs / ms}


def complete(url: str, n: int) -> dict[str, Any]:
    """One greedy completion; its server's timings and the wall clock."""
    import httpx

    body = {"prompt": PROMPT, "max_tokens": n, "temperature": 0}
    t0 = time.monotonic()
    r = httpx.post(url, json=body, timeout=600)
    wall = time.monotonic() - t0
    r.raise_for_status()
    data = r.json()
    timings = data.get("timings", {})
    tokens = data.get("usage", {}).get("completion_tokens")
    return {
        "tokens": tokens,
        "wall_seconds": round(wall, 3),
        "wall_tokens_per_second": tokens / wall if tokens else None,
        "tokens_per_second": timings.get("predicted_per_second"),
        "drafted": timings.get("draft_n"),
        "accepted": timings.get("draft_n_accepted"),
        "timings": {k: v for k, v in timings.items() if not isinstance(v, (dict, list))},
        "text": data["choices"][0]["text"][:300],
    }


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float, ok: Any) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited {proc.returncode} before {url} was ready")
        try:
            if ok(httpx.get(url, timeout=5)):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready in {timeout:.0f} s")


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def file_hash(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def device_name(gpu: bool) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpus = f"{cpu}, {os.cpu_count()} cores"
    if not gpu or not shutil.which("nvidia-smi"):
        return cpus
    q = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True
    )
    return f"{q.stdout.strip().splitlines()[0] if q.stdout.strip() else 'GPU'}; {cpus}"


def costs_main(args: argparse.Namespace) -> int:
    """One model's pass times by batch size (ms), as JSON on stdout."""
    from duo.llama.backend import Model
    from duo.llama.calibrate import calibrate

    model = Model(args.model, n_ctx=512, n_threads=args.threads, n_gpu_layers=args.ngl)
    model.decode([100] * 16, all_logits=False)  # load the weights, warm the kernels
    model.truncate(0)
    cost = calibrate(model, 1, context=8, all_logits=args.role == "main", extra=BATCHES[1:])
    print(json.dumps({str(b): round(1000 * s, 4) for b, s in sorted(cost.seconds.items())}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--bin", required=True, help="llama.cpp's binaries")
    r.add_argument("--out", required=True)
    r.add_argument("--work", required=True, help="where the models go")
    r.add_argument("--llama-src", required=True, help="llama-cpp-python's source tree")
    r.add_argument("--gpu", action="store_true")
    r.add_argument("--tiny", action="store_true")
    r.add_argument("--deadline", type=float, default=time.time() + 540)
    c = sub.add_parser("costs")
    c.add_argument("--model", required=True)
    c.add_argument("--ngl", type=int, default=0)
    c.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    c.add_argument("--role", choices=("main", "draft"), default="main")
    args = p.parse_args(argv)
    if args.cmd == "costs":
        return costs_main(args)
    check = Check(args)
    t0 = time.monotonic()
    # (step, seconds it needs at least: a step started later is skipped)
    big = not args.tiny
    check.step("models", check.models, 0)  # nothing runs without them
    if not check.main.name:
        print("[check] no models: nothing else to do", flush=True)
        return 1
    check.step("correctness", check.correctness, 40 if big else 5)
    check.step("costs", check.costs, 60 if big else 5)
    check.step("defaults", check.defaults, 60 if big else 5)
    check.step("seed002", check.seed002, 90 if big else 5)
    check.results["seconds"] = round(time.monotonic() - t0, 1)
    shell = check.out / "steps.txt"  # check.sh's own steps: sources, build, python
    if shell.exists():
        check.results["shell_steps"] = {
            name: float(sec)
            for name, sec in (ln.split() for ln in shell.read_text().split("\n") if ln)
        }
    check.save()
    steps = check.results["steps"]
    correct = steps.get("correctness", {})
    ok = correct.get("target_equals_llama_completion") and correct.get("async_equals_target")
    failed = [name for name, s in steps.items() if "error" in s]
    print(
        f"[check] done in {check.results['seconds']} s: correctness "
        f"{'ok' if ok else 'NOT ok'}; failed steps: {', '.join(failed) or 'none'}; "
        f"results in {check.out}",
        flush=True,
    )
    return 0 if ok and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
