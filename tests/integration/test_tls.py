"""A lead on https with keys from a file and the environment, as real processes on loopback:
the openai client, duo back (wss) and duo chat verify its self-signed certificate with a CA
file; without it they fail in one clear line instead of hanging or retrying forever."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from duo.auth import API_KEY_ENV, DRAFTER_KEY_ENV
from tests.unit.test_auth import make_certificate

from .conftest import Proc, free_port, wait_until

pytestmark = pytest.mark.integration

API_KEY = "api-secret-1f6c"
DRAFTER_KEY = "drafter-secret-9b2e"


@dataclass
class TlsLead:
    proc: Proc
    url: str  # https://127.0.0.1:PORT
    cert: Path
    keys: Path  # the lead's --api-key-file
    drafter_key: Path  # a file holding the drafter key, for duo back --api-key-file
    verify: ssl.SSLContext
    draft: Path
    tmp: Path

    def get(self, path: str, key: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"bearer   {key}"} if key else {}
        return httpx.get(f"{self.url}{path}", headers=headers, verify=self.verify, timeout=10)

    def drafters(self) -> int:
        return int(self.get("/health").json()["drafters"])


@pytest.fixture(scope="module")
def lead(pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsLead]:
    main, draft = pair
    tmp = tmp_path_factory.mktemp("tls")
    key, cert = make_certificate(tmp)
    keys = tmp / "api-keys"
    keys.write_text(f"another-key\n  {API_KEY}  \n")
    drafter_key = tmp / "drafter-key"
    drafter_key.write_text(DRAFTER_KEY + "\n")
    port = free_port()
    args = ["lead", "-m", str(main), "--port", str(port), "--quiet", "--policy", "fixed"]
    args += ["--ssl-key-file", str(key), "--ssl-cert-file", str(cert), "--api-key-file", str(keys)]
    with pytest.MonkeyPatch.context() as env:  # the drafter key reaches the lead by environment
        env.setenv(DRAFTER_KEY_ENV, DRAFTER_KEY)
        env.delenv(API_KEY_ENV, raising=False)
        proc = Proc(args, tmp / "lead.log")
    try:
        url = f"https://127.0.0.1:{port}"
        verify = ssl.create_default_context(cafile=cert)
        t = TlsLead(proc, url, cert, keys, drafter_key, verify, draft, tmp)
        wait_until(lambda: t.get("/health").json()["status"] == "ok", 180, "lead ready", proc)
        yield t
    finally:
        proc.stop()


def run_back(lead: TlsLead, name: str, *args: str) -> Proc:
    """duo back ARGS, presenting the drafter key from a file unless ARGS give a key."""
    argv = ["back", "--lead", lead.url, "-m", str(lead.draft), *args]
    if "--api-key" not in args:
        argv += ["--api-key-file", str(lead.drafter_key)]
    return Proc(argv, lead.tmp / f"back-{name}.log")


def exit_code(proc: Proc, timeout: float = 120) -> int:
    try:
        return proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout}s:\n{proc.output()[-2000:]}") from None


def test_the_startup_line_shows_https_and_no_key_is_on_the_command_line(lead: TlsLead) -> None:
    hint = f"(drafters: duo back --lead {lead.url} --api-key-file FILE (a drafter key; or "
    assert f"on {lead.url} {hint}${DRAFTER_KEY_ENV}))" in lead.proc.output()  # the key it needs
    cmdline = Path(f"/proc/{lead.proc.popen.pid}/cmdline").read_bytes().split(b"\0")
    assert any(arg.endswith(b"api-keys") for arg in cmdline)  # the file's path, not its keys
    for secret in (API_KEY, DRAFTER_KEY, "another-key"):
        assert not any(secret.encode() in arg for arg in cmdline), cmdline


def test_the_openai_client_verifies_the_certificate_and_the_keys_are_kept_apart(
    lead: TlsLead,
) -> None:
    with httpx.Client(verify=lead.verify) as http:
        client = openai.OpenAI(
            base_url=f"{lead.url}/v1", api_key=API_KEY, http_client=http, max_retries=0
        )
        r = client.completions.create(
            model="duo", prompt="a, b, c, d,", max_tokens=16, temperature=0
        )
        assert r.choices[0].text.strip()
        drafting = openai.OpenAI(
            base_url=f"{lead.url}/v1", api_key=DRAFTER_KEY, http_client=http, max_retries=0
        )
        with pytest.raises(openai.AuthenticationError):  # the drafter key cannot use the model
            drafting.models.list()
    assert lead.get("/v1/models", "another-key").status_code == 200  # every key of the file
    assert lead.get("/v1/models", DRAFTER_KEY).status_code == 401
    assert lead.get("/v1/models").status_code == 401
    with pytest.raises(httpx.HTTPError):  # plain http to the TLS port
        httpx.get(lead.url.replace("https://", "http://") + "/health", timeout=10)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):  # system CAs
        httpx.get(f"{lead.url}/health", timeout=10)


def test_duo_back_connects_over_wss_with_the_ca_file_and_fails_clearly_without(
    lead: TlsLead,
) -> None:
    before = lead.drafters()
    back = run_back(lead, "trusted", "--ca-file", str(lead.cert))
    try:
        wait_until(lambda: lead.drafters() == before + 1, 120, "back connected", back)
        assert f"duo back: connected to {lead.url}" in back.output()
        with httpx.Client(verify=lead.verify) as http:
            client = openai.OpenAI(
                base_url=f"{lead.url}/v1", api_key=API_KEY, http_client=http, max_retries=0
            )
            r = client.completions.create(
                model="duo", prompt="10, 20, 30,", max_tokens=24, temperature=0
            )
        assert r.choices[0].text.strip()
    finally:
        back.stop()

    untrusted = run_back(lead, "untrusted")  # the system's CAs do not know this certificate
    try:
        assert exit_code(untrusted) == 2
    finally:
        untrusted.stop()
    out = untrusted.output()
    assert "Traceback" not in out
    assert "does not verify" in out and "--ca-file" in out and "not retrying" in out, out
    assert "self-signed certificate" in out, out

    refused = run_back(lead, "api-key", "--ca-file", str(lead.cert), "--api-key", API_KEY)
    try:  # with a drafter key set, the API key cannot draft (it would see everyone's prompts)
        assert exit_code(refused) == 2
    finally:
        refused.stop()
    assert "refused by the lead: invalid or missing drafter key" in refused.output()


def duo_chat(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "duo", "chat", *args],
        input="Hi!\n",
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
    )


def test_duo_chat_over_https(lead: TlsLead) -> None:
    key = {API_KEY_ENV: API_KEY}  # the key by environment
    r = duo_chat("--url", lead.url, "--ca-file", str(lead.cert), "--no-stats", "-n", "8", env=key)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()

    r = duo_chat("--url", lead.url, env=key)
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr.startswith(f"duo chat: the certificate of {lead.url} does not verify (")
    assert "--ca-file" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
