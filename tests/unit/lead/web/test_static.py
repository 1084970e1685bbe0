"""The web page's scripts under Node's test runner (tests/web/*.test.mjs), so that one
command runs every test. Node is required, as Chromium is for the page's browser tests:
without it this test fails, saying so (`make node` installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

WEB_TESTS = Path(__file__).resolve().parents[3] / "web"
OLDEST = 18  # node --test with --test-reporter


def test_the_web_pages_scripts_pass_their_node_tests() -> None:
    node = shutil.which("node")
    assert node, "Node.js is not installed: `make node` installs it (the web page's script tests)"
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=30
    ).stdout.strip()
    found = re.match(r"v(\d+)\.", version)
    assert found and int(found[1]) >= OLDEST, f"Node.js {OLDEST} or later is needed, not {version}"
    # The files by name: Node 21 and later take a directory argument for a test file
    # (nodejs/node#50219).
    tests = sorted(str(p) for p in WEB_TESTS.glob("*.test.mjs"))
    assert tests, f"no *.test.mjs in {WEB_TESTS}"
    result = subprocess.run(
        [node, "--test", "--test-reporter=spec", *tests],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=WEB_TESTS,
    )
    assert result.returncode == 0, f"node --test failed:\n{result.stdout}\n{result.stderr}"
