"""The main model split over two `duo rpc-server`s on loopback (llama.cpp RPC)."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from duo.errors import UsageError
from duo.llama.rpc import probe
from duo.sse import json_events

from .conftest import Cluster, Proc, duo, free_port, health, wait_until

pytestmark = pytest.mark.integration

PROMPT = "The three primary colors are"


def answers(endpoint: str) -> bool:
    try:
        probe(endpoint, timeout=2)
    except UsageError:
        return False
    return True


def start_server(tmp: Path, *args: str) -> tuple[Proc, str]:
    port = free_port()
    proc = Proc(["rpc-server", "--port", str(port), "-t", "1", *args], tmp / f"rpc-{port}.log")
    endpoint = f"127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(endpoint), 60, f"rpc-server on {endpoint}", proc)
    except BaseException:
        proc.stop()
        raise
    return proc, endpoint


@contextmanager
def started(tmp: Path, count: int) -> Iterator[tuple[list[Proc], list[str]]]:
    """`count` rpc-servers on loopback, one thread each, ready: (processes, endpoints)."""
    procs: list[Proc] = []
    endpoints: list[str] = []
    try:
        for _ in range(count):
            proc, endpoint = start_server(tmp)
            procs.append(proc)
            endpoints.append(endpoint)
        yield procs, endpoints
    finally:
        for proc in procs:
            proc.stop()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[list[Proc], list[str]]]:
    with started(tmp_path, 2) as out:
        yield out


@pytest.fixture
def three_servers(tmp_path: Path) -> Iterator[tuple[list[Proc], list[str]]]:
    with started(tmp_path, 3) as out:
        yield out


def generate(
    main: Path, *extra: str, n: int = 32, verbose: bool = False
) -> subprocess.CompletedProcess[str]:
    return duo(
        *(["-v"] if verbose else []),
        "generate",
        "-m",
        str(main),
        "--mode",
        "target",
        "-p",
        PROMPT,
        "-n",
        str(n),
        "--temp",
        "0",
        "--color",
        "never",
        *extra,
    )


def test_main_model_over_two_rpc_servers_equals_local(
    pair: tuple[Path, Path], servers: tuple[list[Proc], list[str]]
) -> None:
    main, _ = pair
    _, (first, second) = servers
    local = generate(main)
    remote = generate(main, "--rpc", f"{first},{second}", "-ngl", "99", verbose=True)
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr[-3000:]
    # F16 weights are not repacked on the CPU: the remote logits are bitwise the local ones.
    assert remote.stdout == local.stdout
    assert len(local.stdout.strip()) > 10
    assert "decoded   32 tokens" in remote.stderr
    # The load used both servers: llama.cpp's own log (duo -v) names each device and layer.
    log = remote.stderr
    assert f"using device RPC0 ({first})" in log
    assert f"using device RPC1 ({second})" in log
    assert "assigned to device RPC0" in log
    assert "assigned to device RPC1" in log
    assert "assigned to device CPU" not in log  # every repeating layer went remote


def test_unreachable_server_fails_fast_with_one_line(pair: tuple[Path, Path]) -> None:
    main, _ = pair
    endpoint = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    r = generate(main, "--rpc", endpoint, "-ngl", "99")
    assert time.monotonic() - started < 30
    assert r.returncode == 2, r.stderr
    assert f"--rpc {endpoint}: nothing listens there" in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bad_endpoint_is_a_usage_error(pair: tuple[Path, Path]) -> None:
    main, _ = pair
    r = generate(main, "--rpc", "127.0.0.1", "-ngl", "99")
    assert r.returncode == 2, r.stderr
    assert "needs a port" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_rpc_server_refuses_a_busy_port_and_a_host_name() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = duo("rpc-server", "--port", str(s.getsockname()[1]), timeout=60)
    assert busy.returncode == 2, busy.stderr
    assert "already in use" in busy.stderr
    named = duo("rpc-server", "--host", "localhost", "--port", str(free_port()), timeout=60)
    assert named.returncode == 2, named.stderr
    assert "IPv4 address" in named.stderr
    for r in (busy, named):
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_rpc_server_stops_on_ctrl_c(tmp_path: Path) -> None:
    proc, endpoint = start_server(tmp_path)
    try:
        proc.popen.send_signal(signal.SIGINT)
        assert proc.popen.wait(timeout=15) == 0
        assert "duo rpc-server: stopped" in proc.output()
        assert not answers(endpoint)
    finally:
        proc.stop()


def test_a_server_dying_mid_generation_aborts_with_one_line(
    pair: tuple[Path, Path], servers: tuple[list[Proc], list[str]], tmp_path: Path
) -> None:
    """Documented limitation: ggml cannot lose a device, so the process aborts (SIGABRT)."""
    main, _ = pair
    procs, endpoints = servers
    gen = Proc(
        [
            "generate",
            "-m",
            str(main),
            "--mode",
            "target",
            "--rpc",
            ",".join(endpoints),
            "-ngl",
            "99",
            "-p",
            "1, 2, 3, 4,",  # counts on for all of -n
            "-n",
            "3000",
            "--temp",
            "0",
            "--color",
            "never",
        ],
        tmp_path / "generate.log",
    )
    try:
        wait_until(lambda: " 12," in gen.output(), 120, "generation under way", gen)
        procs[1].kill()
        assert gen.popen.wait(timeout=60) == -signal.SIGABRT
        out = gen.output()
        assert "duo: fatal: llama.cpp aborted: ggml-rpc.cpp:" in out
        assert "Remote RPC server crashed" in out
        assert "Traceback" not in out
        # The surviving server dropped the dead client and serves the next one.
        assert answers(endpoints[0])
    finally:
        gen.stop()


def devices_of_layers(log: str) -> Counter[str]:
    """How many layers llama.cpp's load log (duo -v) assigned to each device."""
    return Counter(re.findall(r"layer +\d+ assigned to device (\w+)", log))


def test_seed_000_command_line_equals_the_main_model_alone(
    pair: tuple[Path, Path], three_servers: tuple[list[Proc], list[str]]
) -> None:
    """The main model split over two rpc-servers, the draft model on a third (--rpcd), as
    seed 000 runs them: the main model alone's text, with drafts from the remote draft."""
    main, draft = pair
    _, (first, second, third) = three_servers
    local = generate(main)
    seed = duo(
        "-v", "generate", "-m", str(main), "-md", str(draft), "--rpc", f"{first},{second}",
        "--rpcd", third.replace("127.0.0.1", "localhost"), "-p", PROMPT, "-n", "32",
        "-ngl", "99", "-t", "1", "--temp", "0", "--color", "never",
    )  # fmt: skip
    assert local.returncode == 0, local.stderr
    assert seed.returncode == 0, seed.stderr[-3000:]
    assert seed.stdout == local.stdout
    log = seed.stderr
    # Its servers share the cores with the main model's: it is judged with both running
    # (contended timings), and where its drafts would not pay it rests from the start;
    # where they would, it drafts.
    resting = "the draft model resting on rpc-servers that share the cores" in log
    drafted = re.search(r"by source: .*model \d+/\d+ \([1-9]\d* received\)", log)
    assert resting or drafted, log[-2000:]
    layers = devices_of_layers(log)
    # The main model's 30 layers and output over RPC0 and RPC1, the draft's all on RPC2.
    assert layers["RPC0"] > 0 and layers["RPC1"] > 0
    assert layers["RPC0"] + layers["RPC1"] == layers["RPC2"] == 31, layers
    assert "CPU" not in layers


def test_seed_000_topology_behind_a_lead_reports_its_back(
    pair: tuple[Path, Path], three_servers: tuple[list[Proc], list[str]], tmp_path: Path
) -> None:
    """`duo lead --rpc A,B --rpcd C`: the draft model drafts from a back of the lead's
    own, on a server that shares this machine. The text is the main model alone's; the
    lead judges the back (it cannot move the main model's threads: they are the
    servers'), and /slots says what it is doing and why."""
    main, draft = pair
    _, (first, second, third) = three_servers
    alone = generate(main, n=48)
    assert alone.returncode == 0, alone.stderr
    cluster = Cluster(tmp_path)
    try:
        lead, url = cluster.lead(
            "-m", str(main), "-md", str(draft), "--rpc", f"{first},{second}", "--rpcd", third,
            "-ngl", "99", "-t", "1",
        )  # fmt: skip
        wait_until(lambda: health(url)["drafters"] == 1, 120, "the draft's back", lead)
        body = {"prompt": PROMPT, "max_tokens": 48, "temperature": 0}
        out = httpx.post(f"{url}/v1/completions", json=body, timeout=300).json()
        assert out["choices"][0]["text"] == alone.stdout.removesuffix("\n")
        (drafter,) = httpx.get(f"{url}/slots", timeout=10).json()[0]["drafters"]
        assert drafter["state"] in ("drafting", "resting", "looking") and drafter["why"]
        assert "shares this machine; the main model's threads are fixed" in lead.output()
    finally:
        cluster.stop()


def test_a_dead_draft_endpoint_fails_fast_with_one_line(pair: tuple[Path, Path]) -> None:
    main, draft = pair
    endpoint = f"127.0.0.1:{free_port()}"
    r = generate(main, "--mode", "sync", "-md", str(draft), "--rpcd", endpoint)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (
        f"duo: error: --rpcd {endpoint}: nothing listens there (start one with duo "
        f"rpc-server --host 127.0.0.1 --port {endpoint.rpartition(':')[2]})"
    )


def stream_text(url: str, body: dict[str, Any], on_first: Callable[[], object]) -> str:
    """A streamed completion's text; on_first() runs once its first tokens arrive."""
    parts: list[str] = []
    with httpx.stream(
        "POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=120
    ) as r:
        for chunk in json_events(r.iter_lines()):
            assert "error" not in chunk, chunk
            parts.append(chunk["choices"][0]["text"])
            if len(parts) == 1:
                on_first()
    return "".join(parts)


def test_the_lead_goes_on_when_its_draft_device_dies(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """`duo lead --rpcd`: the draft model drafts from a back of the lead's own. When its
    rpc-server dies mid-generation, the request ends as the main model alone would end it."""
    main, draft = pair
    cluster = Cluster(tmp_path)
    with started(tmp_path, 1) as (procs, (endpoint,)):
        try:
            lead, url = cluster.lead("-m", str(main), "-md", str(draft), "--rpcd", endpoint)
            wait_until(lambda: health(url)["drafters"] == 1, 120, "the draft's back", lead)
            body = {"prompt": "10, 20, 30,", "max_tokens": 160, "temperature": 0}
            streamed = stream_text(url, body, on_first=procs[0].kill)
            wait_until(lambda: "its drafter stopped" in lead.output(), 30, "the log", lead)
            alone = httpx.post(f"{url}/v1/completions", json=body, timeout=120).json()
            assert health(url)["drafters"] == 0
            assert streamed == alone["choices"][0]["text"]
            assert alone["choices"][0]["finish_reason"] == "length"
            assert "llama.cpp aborted" in lead.output()
            assert "Traceback" not in lead.output()
        finally:
            cluster.stop()


def test_the_bench_puts_every_modes_draft_model_on_the_rpcd_server(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """In this process (sync), in a back (lead+back) and in a drafter-driven client."""
    main, draft = pair
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"kind": "raw", "category": "count", "text": "1, 2, 3,"}) + "\n")
    out = tmp_path / "bench.json"
    with started(tmp_path, 1) as (_, (endpoint,)):
        r = duo(
            "bench", "-m", str(main), "-md", str(draft), "--prompts", str(prompts), "--modes",
            "sync", "lead+back", "lead+client", "-n", "12", "--repeat", "1", "--rpcd", endpoint,
            "--json", str(out), "--no-costs",
        )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["profile"] == {}  # --no-costs: no device-cost round
    assert report["settings"]["order"] == "sequential"  # one mode on the server at a time
    for mode in report["modes"]:
        draft_on = mode["devices"].partition("; draft: ")[2]
        assert f" + rpc-servers {endpoint}" in draft_on, mode
        assert mode["tokens_per_second"] > 0, mode
        if mode["mode"] != "lead+back":  # (a back's drafts are verified only if ready in time)
            assert mode["acceptance_rate"] > 0, mode
