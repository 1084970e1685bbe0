"""scripts/llama-wheel.sh, with a stand-in Python whose pip 'builds' a wheel in a second."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parents[3] / "scripts" / "llama-wheel.sh"

FAKE_PYTHON = """#!/usr/bin/env bash
case "$*" in
  *cache_tag*) echo cpython-311 ;;
  *"import llama_cpp"*) exit 1 ;;
  *"pip wheel"*)
    out=${@: -1}
    sleep 1
    touch "$out/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    echo built >> "$LOG"
    echo "$CMAKE_ARGS | $*" >> "$LOG.wheel" ;;
  *"pip install"*) echo installed >> "$LOG" ;;
esac
"""


def _setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    env = {**os.environ, "DUO_HOME": str(tmp_path / "home"), "LOG": str(tmp_path / "log")}
    env.pop("DUO_CMAKE_ARGS", None)
    return python, env


def test_two_setups_at_once_both_install_one_cached_wheel(tmp_path: Path) -> None:
    python, env = _setup(tmp_path)
    runs = [
        subprocess.Popen(
            ["bash", str(SCRIPT), str(python)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    for run in runs:
        out, _ = run.communicate(timeout=60)
        assert run.returncode == 0, out
    cached = list((tmp_path / "home" / "wheels").iterdir())
    assert len(cached) == 1, cached  # no build directory left behind
    assert list(cached[0].glob("llama_cpp_python-*.whl"))
    assert (cached[0] / "CMAKE_ARGS").is_file()


def test_a_cached_wheel_is_not_built_again(tmp_path: Path) -> None:
    python, env = _setup(tmp_path)
    for _ in range(2):
        subprocess.run(["bash", str(SCRIPT), str(python)], env=env, check=True, capture_output=True)
    log = (tmp_path / "log").read_text().split()
    assert log.count("built") == 1
    assert log.count("installed") >= 2


def test_other_cmake_flags_build_another_wheel_not_pips_cached_one(tmp_path: Path) -> None:
    python, env = _setup(tmp_path)
    for flags in ("-DGGML_RPC=ON", "-DGGML_RPC=ON -DGGML_CUDA=ON"):
        run_env = {**env, "DUO_CMAKE_ARGS": flags}
        subprocess.run(["bash", str(SCRIPT), str(python)], env=run_env, check=True)
    builds = (tmp_path / "log.wheel").read_text().splitlines()
    assert [b.split(" | ")[0] for b in builds] == ["-DGGML_RPC=ON", "-DGGML_RPC=ON -DGGML_CUDA=ON"]
    # pip's wheel cache is keyed by the sdist alone: asked, it returns the first build.
    assert all("--no-cache-dir" in b.split(" | ")[1] for b in builds)
    assert len(list((tmp_path / "home" / "wheels").iterdir())) == 2
