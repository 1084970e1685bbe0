"""A llama-server user's command line starts duo's lead and behaves as they expect."""

from __future__ import annotations

import httpx
import openai
import pytest

from .conftest import Cluster

pytestmark = pytest.mark.integration


def test_llama_server_flags(cluster: Cluster) -> None:
    proc, url = cluster.lead(
        "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "--alias", "m", "--cors-origins", "*",
        "-c", "0", "--no-mmap", "--quiet", "-sm", "row", "-ts", "3/1", "-mg", "0",
        "--reasoning-format", "none", "-no-kvu",
    )  # fmt: skip
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120)
    assert [m.id for m in client.models.list().data] == ["m"]
    r = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8,
        temperature=0,
    )  # fmt: skip
    assert r.model == "m"
    assert r.choices[0].message.content
    props = httpx.get(f"{url}/props", timeout=10).json()
    assert props["model_alias"] == "m"
    assert props["default_generation_settings"]["n_ctx"] == 8192  # -c 0: SmolLM2's own
    assert props["total_slots"] == 4  # llama-server's default
    assert "duo lead: 4 slots (-np) of 8,192 tokens (-c), a KV buffer each (-no-kvu)\n" in (
        proc.output()
    )
    slots = httpx.get(f"{url}/slots", timeout=10).json()
    assert [s["id"] for s in slots] == [0, 1, 2, 3]
    assert all(s["n_ctx"] == 8192 and not s["is_processing"] for s in slots)  # each its own
    assert [s["n_cached"] > 8 for s in slots] == [True, False, False, False]  # the chat, kept
    preflight = httpx.options(
        f"{url}/v1/chat/completions",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
        timeout=10,
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "*"
