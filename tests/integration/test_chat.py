"""`duo chat` as a user scripts it: a real lead, a real chat process, piped stdin."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import Cluster

pytestmark = pytest.mark.integration

CHAT = [sys.executable, "-m", "duo", "chat"]
STATS = re.compile(
    r"^\[(\d+) tokens, [\d.]+ tok/s, drafted \d+, accepted \d+, mean acceptance length [\d.]+"
)


def duo_chat(*args: str, stdin: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CHAT, *args], input=stdin, capture_output=True, text=True, timeout=timeout
    )


def test_a_scripted_session(pair: tuple[Path, Path], cluster: Cluster) -> None:
    main, draft = pair
    _, url = cluster.lead("-m", str(main), "-md", str(draft), "--quiet")

    script = "What is 2 + 2?\nAnd times three?\n:new\nName a colour.\n:quit\nnot asked\n"
    r = duo_chat("--url", url, "--no-stats", "-n", "16", stdin=script)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # --no-stats, and no prompt or notes when stdin is piped
    assert "you>" not in r.stdout
    assert len(r.stdout.strip()) > 10
    assert r.stdout.count("\n") >= 3  # each answer ends its line

    r = duo_chat("--url", url, "-n", "16", "--system", "Answer briefly.", stdin="Hi!\nBye!\n")
    assert r.returncode == 0, r.stderr
    stats = r.stderr.splitlines()
    assert len(stats) == 2, r.stderr
    for line in stats:
        match = STATS.match(line)
        assert match and int(match[1]) > 0, line


def test_a_refused_api_key(pair: tuple[Path, Path], cluster: Cluster) -> None:
    main, draft = pair
    _, url = cluster.lead("-m", str(main), "-md", str(draft), "--quiet", "--api-key", "sesame")
    r = duo_chat("--url", url, "--api-key", "wrong", stdin="Hi!\n")
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr == "duo chat: the lead refused the API key\n"

    r = duo_chat("--url", url, "--api-key", "sesame", "--no-stats", "-n", "8", stdin="Hi!\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


def test_an_unreachable_lead_is_one_readable_line() -> None:
    r = duo_chat("--url", "http://127.0.0.1:1", stdin="Hi!\n", timeout=60)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("duo chat: cannot reach the lead at http://127.0.0.1:1 (")
    assert "start it with `duo lead`" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
