"""scripts/gpu, the kit for a rented GPU machine, on this machine's CPU: pack.sh's .gpu/
(size, sources that configure, wheels for CPython 3.12 that install offline), synth.py's
models (llama.cpp loads and decodes them, two of them pair), and check.sh --cpu-only
--tiny end to end, its profile read by duo sim.

They need llama-cpp-python's sdist and the CPU binaries scripts/build-llama-cpp.sh makes
(`make test` runs it first: ~8 minutes on 2 cores, once), and pack.sh the package index
(pip download, from pip's cache once fetched)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from duo.llama.backend import Model
from duo.session.session import check_compatible
from tests.unit.bench.sim.test_sim import bench_report

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
GPU = ROOT / "scripts" / "gpu"
VERSION = "0.3.36"
HOME = Path(os.environ.get("DUO_HOME", Path.home() / ".cache/duo")) / "llama.cpp"
SDIST = HOME / "download" / f"llama_cpp_python-{VERSION}.tar.gz"
SOURCES = HOME / f"src-{VERSION}"
CPU_BINS = sorted(HOME.glob(f"{VERSION}-*/bin/llama-completion"))
PROMPT = "The quick brown fox jumps over the lazy dog and the"


def need(path: Path | None, what: str) -> None:
    if path is None or not path.exists():
        pytest.fail(f"no {what}: run scripts/build-llama-cpp.sh (make test does)")


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need(SDIST, str(SDIST))
    out = tmp_path_factory.mktemp("pack") / ".gpu"
    run = subprocess.run(
        ["bash", str(GPU / "pack.sh"), str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert re.search(r"in all \d+ MiB", run.stdout)
    return out


def test_the_pack_fits_what_the_device_tool_carries(pack: Path) -> None:
    size = sum(f.stat().st_size for f in pack.rglob("*") if f.is_file())
    assert size < 60 * 2**20
    again = subprocess.run(
        ["bash", str(GPU / "pack.sh"), str(pack)], capture_output=True, text=True, timeout=300
    )
    assert (
        again.returncode == 0
        and sum(f.stat().st_size for f in pack.rglob("*") if f.is_file()) == size
    )  # idempotent


def test_a_pack_over_the_limit_fails_in_one_line(pack: Path, tmp_path: Path) -> None:
    over = tmp_path / ".gpu"
    shutil.copytree(pack, over)
    (over / "ballast").write_bytes(b"\0" * 50 * 2**20)
    run = subprocess.run(
        ["bash", str(GPU / "pack.sh"), str(over)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 1
    assert "over the 60 MiB" in run.stderr.strip().splitlines()[-1]


def test_the_packed_sources_configure(pack: Path, tmp_path: Path) -> None:
    assert shutil.which("cmake"), "cmake is needed (scripts/build-llama-cpp.sh needs it too)"
    with tarfile.open(pack / f"llama-cpp-python-{VERSION}.tar.gz") as t:
        t.extractall(tmp_path, filter="tar")
    src = tmp_path / f"llama-cpp-python-{VERSION}"
    models = [p.name for p in (src / "vendor/llama.cpp/models").glob("*.gguf")]
    assert models == ["ggml-vocab-llama-bpe.gguf"]
    assert (src / "llama_cpp" / "llama_cpp.py").exists()  # the Python package, for check.sh
    run = subprocess.run(
        ["cmake", "-S", str(src / "vendor/llama.cpp"), "-B",
         str(tmp_path / "build"), "-DGGML_NATIVE=OFF", "-DGGML_RPC=ON",
         "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
         "-DLLAMA_OPENSSL=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Generating done" in run.stdout


def test_the_wheels_are_for_cpython_312_and_install_offline(pack: Path, tmp_path: Path) -> None:
    wheels = sorted((pack / "wheels").glob("*.whl"))
    names = {w.name.split("-")[0].lower().replace("_", "-") for w in wheels}
    for dep in ("starlette", "uvicorn", "msgspec", "websockets", "uvloop", "httptools", "shtab"):
        assert dep in names
    for w in wheels:
        python, abi, plat = w.stem.split("-")[-3:]
        assert python in ("py3", "cp312") and abi in ("none", "abi3", "cp312"), w.name
        assert plat == "any" or "x86_64" in plat, w.name
    run = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-index", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
         "--implementation", "cp", "--abi", "cp312", "--platform", "manylinux_2_28_x86_64",
         "--target", str(tmp_path / "site"), *map(str, wheels)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    for module in ("starlette", "uvicorn", "msgspec", "uvloop", "jinja2", "yaml", "diskcache"):
        assert (tmp_path / "site" / module).is_dir(), module
    # every wheel's requirements: packed, or in the device's image (numpy, httpx and its own)
    image = {"numpy", "httpx", "anyio", "idna", "sniffio", "certifi", "httpcore"}
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            text = z.read(meta).decode()
        for line in text.splitlines():
            if not line.startswith("Requires-Dist:") or "extra ==" in line:
                continue
            if "python_version < " in line or 'sys_platform == "win32"' in line:
                continue  # backports for older Pythons, Windows only
            dep = re.split(r"[ ;<>=!~\[(]", line.split(":", 1)[1].strip())[0].lower()
            assert dep.replace("_", "-") in names | image, f"{w.name} needs {dep}"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    need(SOURCES, str(SOURCES))
    d = tmp_path_factory.mktemp("synth")
    paths = d / "main.gguf", d / "draft.gguf"
    for path, extra in zip(paths, ([], ["--seed", "2", "--agree", "0.5"]), strict=True):
        subprocess.run(
            [sys.executable, str(GPU / "synth.py"), "--shape", "tiny",
             "-o", str(path), *extra],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    return paths


def test_synth_writes_a_model_llama_cpp_decodes_greedily_along_the_word_order(
    tiny: tuple[Path, Path],
) -> None:
    main = Model(tiny[0], n_ctx=256)
    draft = Model(tiny[1], n_ctx=256)
    try:
        check_compatible(main, draft)  # the same vocabulary: a pair
        assert main.n_vocab == 128256
        tokens = main.vocab.tokenize(PROMPT)
        logits = main.decode(tokens)
        for _ in range(8):
            last = logits[-1]
            assert bool(last.max() < 100) and bool(last.min() > -100)  # finite, moderate
            second, best = np.partition(last, -2)[-2:]
            assert best - second > 1.0  # a wide margin: no near tie for a backend to flip
            logits = main.decode([int(last.argmax())])
        # the draft, agreeing on half the words, guesses about half the main's tokens
        seq = main.tokens[len(tokens) - 1 :]
        d = draft.decode(seq)
        agree = sum(int(d[i].argmax()) == seq[i + 1] for i in range(len(seq) - 1))
        assert 0 < agree < len(seq) - 1
    finally:
        main.close()
        draft.close()


def test_check_cpu_only_tiny_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    need(CPU_BINS[0] if CPU_BINS else None, "CPU binaries of llama.cpp")
    need(SDIST, str(SDIST))
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "DUO_GPU_WORK": str(tmp_path / "work"),
           "DUO_CHECK_THREADS": "1"}  # fmt: skip
    run = subprocess.run(
        ["bash", str(GPU / "check.sh"), "--cpu-only", "--tiny"],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    for step in ("sources", "build", "python", "models", "correctness", "costs", "seed002"):
        assert re.search(rf"\[check\] {step}: [\d.]+ s", run.stdout), step
    results = json.loads((out / "results.json").read_text())
    steps = results["steps"]
    assert steps["correctness"]["target_equals_llama_completion"] is True
    assert steps["correctness"]["async_equals_target"] is True
    seed002 = steps["seed002"]
    for run_name in ("duo_async", "duo_lead_back", "llama_server"):
        assert seed002[run_name]["tokens_per_second"] > 0, run_name
    assert seed002["duo_lead_back"]["text"] == steps["correctness"]["duo_target"]
    assert seed002["llama_server"]["text"] == steps["correctness"]["duo_target"]

    from duo.cli.main import main

    profile = out / "profile.json"
    costs = json.loads(profile.read_text())["costs_ms"]["cpu"]
    assert sorted(map(int, costs["main"])) == [1, 2, 4, 8, 16]
    assert main(["sim", "--bench", str(bench_report(tmp_path)), "--profile", str(profile)]) == 0
    assert "main cpu, draft cpu" in capsys.readouterr().out
