"""`duo lead --rpc` survives the death of an rpc-server: a clear error, then it recovers."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest

from duo import sse
from duo.lead.protocol.llama import Health

from .conftest import Cluster, Proc, free_port, wait_until
from .test_rpc import answers

pytestmark = pytest.mark.integration

PROMPT = "Count from one to one hundred in words: one, two, three,"


def rpc_server(tmp: Path, port: int) -> Proc:
    proc = Proc(["rpc-server", "--port", str(port), "-t", "1"], tmp / f"rpc-{port}-{id(tmp)}.log")
    wait_until(lambda: answers(f"127.0.0.1:{port}"), 60, "rpc-server", proc)
    return proc


def complete(url: str) -> httpx.Response:
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=120)


def test_lead_survives_an_rpc_server_dying_mid_generation(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    ports = [free_port(), free_port()]
    servers = [rpc_server(tmp_path, p) for p in ports]
    cluster = Cluster(tmp_path)
    try:
        rpc = ",".join(f"127.0.0.1:{p}" for p in ports)
        # No drafting: one token per round keeps the generation long enough to be cut.
        lead, url = cluster.lead(
            "-m", str(pair[0]), "--rpc", rpc, "-ngl", "99", "--spec-type", "none", "--quiet"
        )

        def worker_running(label: str) -> None:
            def running() -> bool:
                return bool(httpx.get(f"{url}/health").json().get("worker") == "running")

            wait_until(running, 120, label, lead)

        worker_running("worker running")
        up = httpx.get(f"{url}/health").json()
        before = complete(url)
        assert before.status_code == 200
        reference = before.json()["choices"][0]["text"]

        # Kill one rpc-server in the middle of a long streamed generation.
        body = {"prompt": PROMPT, "max_tokens": 2000, "temperature": 0, "stream": True}
        events = []
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
            for event in sse.iter_events(r.iter_lines()):
                events.append(event.data)
                if len(events) == 20:
                    servers[1].kill(signal.SIGKILL)
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert "interrupted" in error["message"] and error["code"] == "worker_died"
        assert error["type"] == "server_error" and "param" in error  # OpenAI's shape

        # The supervisor stays up, says what is wrong, and refuses work clearly meanwhile.
        assert lead.alive()
        health = httpx.get(f"{url}/health", timeout=10)
        assert health.status_code == 503
        assert health.json()["worker"] in ("down", "starting")
        # still the lead's documented Health shape, unavailable
        assert Health.__annotations__.keys() <= health.json().keys()
        assert health.json()["status"] == "unavailable"
        assert (health.json()["model"], health.json()["slots"]) == (up["model"], up["slots"])
        assert "RPC" in health.json()["last_error"] or "rpc" in health.json()["last_error"]
        down = complete(url)
        assert down.status_code == 503 and "unavailable" in down.json()["error"]["message"]

        # The server comes back on the same port: serving resumes, same text as before.
        servers[1] = rpc_server(tmp_path, ports[1])
        worker_running("worker back")
        after = complete(url)
        assert after.status_code == 200
        assert after.json()["choices"][0]["text"] == reference
    finally:
        cluster.stop()
        for s in servers:
            s.stop()
