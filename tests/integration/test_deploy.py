"""The deployment recipes run as written: deploy/compose.yaml's commands as plain
processes on loopback (a lead with TLS and keys, two backs), and the systemd units'
command lines with their environment files read by duo's own parser."""

from __future__ import annotations

import shlex
import ssl
import subprocess
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from duo.cli.main import build_parser
from duo.cli.parser import ENV_PREFIX, env_defaults

from .conftest import Proc, free_port, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def compose_argv(service: dict[str, Any], paths: dict[str, str]) -> list[str]:
    """A service's command, its container paths and names mapped to this host's."""
    out = []
    for word in service["command"]:
        for container, host in paths.items():
            word = word.replace(container, host)
        out.append(word)
    return out


def test_compose_runs_a_lead_with_tls_and_keys_and_two_backs(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    secrets = tmp_path / "secrets"
    made = subprocess.run([DEPLOY / "make-secrets.sh", secrets, "lead", "localhost"], check=True)
    assert made.returncode == 0
    before = {p.name: p.read_bytes() for p in secrets.iterdir()}
    assert set(before) == {"api_key", "drafter_key", "tls_key.pem", "tls_cert.pem"}
    subprocess.run([DEPLOY / "make-secrets.sh", secrets], check=True, capture_output=True)
    assert {p.name: p.read_bytes() for p in secrets.iterdir()} == before, "not idempotent"

    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"lead", "back-1", "back-2"}
    for name in compose["secrets"]:
        assert (secrets / name).exists(), f"make-secrets.sh makes no {name}"
    port = free_port()
    paths = {
        "/run/secrets/": f"{secrets}/",
        "/models/main.gguf": str(pair[0]),
        "/models/draft.gguf": str(pair[1]),
        "https://lead:5555": f"https://localhost:{port}",
        "0.0.0.0": "127.0.0.1",  # a test listens on loopback only
        "5555": str(port),
    }
    procs = [Proc(compose_argv(services["lead"], paths), tmp_path / "lead.log")]
    try:
        verify = ssl.create_default_context(cafile=secrets / "tls_cert.pem")
        url = f"https://localhost:{port}"

        def health() -> dict[str, Any]:
            return httpx.get(f"{url}/health", verify=verify, timeout=5).json()  # type: ignore[no-any-return]

        wait_until(lambda: health()["status"] == "ok", 180, "lead ready", procs[0])
        for name in ("back-1", "back-2"):
            procs.append(Proc(compose_argv(services[name], paths), tmp_path / f"{name}.log"))
        wait_until(lambda: health()["drafters"] == 2, 180, "both backs connected", procs[-1])

        key = (secrets / "api_key").read_text().strip()
        client = openai.OpenAI(
            base_url=f"{url}/v1",
            api_key=key,
            http_client=httpx.Client(verify=verify),
            max_retries=0,
        )
        reply = client.chat.completions.create(
            model="duo", messages=[{"role": "user", "content": "Hi!"}], max_tokens=8
        )
        assert reply.choices[0].message.content
        drafter = (secrets / "drafter_key").read_text().strip()
        refused = httpx.get(
            f"{url}/v1/models", headers={"Authorization": f"Bearer {drafter}"}, verify=verify
        )
        assert refused.status_code == 401, "the backs' key must not open the API"
        assert httpx.get(f"{url}/v1/models", verify=verify).status_code == 401
    finally:
        for proc in reversed(procs):
            proc.stop()


def _long_flags(command: str) -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    child = sub.choices[command]  # type: ignore[index]
    return {o for a in child._actions for o in a.option_strings if o.startswith("--")}


@pytest.mark.parametrize(
    ("unit", "env_file", "instance"),
    [("duo-lead.service", "lead.env", ""), ("duo-back@.service", "back.env", "main")],
)
def test_systemd_units_parse_with_their_environment(
    unit: str, env_file: str, instance: str
) -> None:
    text = (DEPLOY / "systemd" / unit).read_text()
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(
        exec_start.removeprefix("ExecStart=").replace("%i", instance).replace("%H", "host")
    )
    assert argv[0] == "/opt/duo/bin/duo"
    env = dict(
        line.split("=", 1)
        for line in (DEPLOY / "systemd" / env_file).read_text().splitlines()
        if line and not line.startswith("#")
    )
    command = argv[1]
    flags = _long_flags(command)
    for name in env:
        assert name.startswith(ENV_PREFIX)
        flag = "--" + name.removeprefix(ENV_PREFIX).lower().replace("_", "-")
        assert flag in flags, f"{env_file}: {name} names no flag of duo {command}"
    parser = build_parser()
    env_defaults(parser, env)
    args, extra = parser.parse_known_args(argv[1:])
    assert not extra
    assert args.model == env["DUO_ARG_MODEL"]
    assert args.threads == int(env["DUO_ARG_THREADS"])


def test_the_dockerfile_copies_what_the_repository_has() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    copies = [
        line.split()[1:-1] for line in lines if line.startswith("COPY ") and "--from" not in line
    ]
    assert copies
    for sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
    assert any("scripts/llama-wheel.sh" in line for line in lines)
    assert 'ENTRYPOINT ["duo"]' in lines
