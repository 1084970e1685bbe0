"""duo.auth: Bearer keys (parsing, constant-time comparison, API vs drafter keys, files and
environment) and TLS settings, plus the command lines that take them."""

from __future__ import annotations

import argparse
import hmac
import io
import shutil
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from duo import auth
from duo.auth import Keys, bearer_token, matches, read_key_file, resolve_keys
from duo.cli import auth_args, chat
from duo.cli.main import main
from duo.errors import UsageError

# -- parsing and comparing -----------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        "Bearer k1",
        "bearer k1",
        "BEARER k1",
        "BeArEr k1",
        "Bearer    k1",
        "Bearer\tk1",
        " Bearer k1 ",
    ],
)
def test_the_scheme_is_case_insensitive_and_whitespace_is_tolerated(header: str) -> None:
    assert bearer_token(header) == "k1"
    assert Keys(api=("k1",)).allows_api(header)


@pytest.mark.parametrize("header", [None, "", "k1", "Bearer", "Bearer ", "Basic k1", "Bearerk1"])
def test_anything_but_a_bearer_token_is_no_token(header: str | None) -> None:
    assert bearer_token(header) is None
    assert not Keys(api=("k1",)).allows_api(header)


def test_keys_are_compared_in_constant_time_against_every_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[object, object]] = []
    real = hmac.compare_digest

    def compare(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", compare)
    assert matches("k1", ("k1", "k2", "k3"))
    assert calls == [(b"k1", b"k1"), (b"k1", b"k2"), (b"k1", b"k3")]  # no early exit, bytes
    calls.clear()
    assert not matches("nope", ("k1", "k2"))
    assert len(calls) == 2
    calls.clear()
    assert not matches(None, ("k1",))
    assert all(isinstance(a, bytes) and isinstance(b, bytes) for a, b in calls)


def test_no_key_means_open() -> None:
    assert Keys().allows_api(None)
    assert Keys().drafter_refusal(None) is None


def test_several_api_keys_each_open_both_the_api_and_the_channel() -> None:
    keys = Keys(api=("k1", "k2"))
    for key in ("k1", "k2"):
        assert keys.allows_api(f"Bearer {key}")
        assert keys.drafter_refusal(f"bearer {key}") is None
    assert not keys.allows_api("Bearer k3")
    assert keys.drafter_refusal("Bearer k3") == "invalid or missing API key"
    assert keys.drafter_refusal(None) == "invalid or missing API key"


def test_a_drafter_key_drafts_but_cannot_use_the_model_and_api_keys_cannot_draft() -> None:
    keys = Keys(api=("api",), drafter=("d1", "d2"))
    assert keys.drafter_refusal("Bearer d1") is None
    assert keys.drafter_refusal("Bearer d2") is None
    assert not keys.allows_api("Bearer d1")  # the API refuses the drafter key
    assert keys.allows_api("Bearer api")
    assert keys.drafter_refusal("Bearer api") == "invalid or missing drafter key"
    assert keys.drafter_refusal(None) == "invalid or missing drafter key"


def test_a_drafter_key_alone_guards_the_channel_only() -> None:
    keys = Keys(drafter=("d",))
    assert keys.allows_api(None)
    assert keys.drafter_refusal(None) is not None
    assert keys.drafter_refusal("Bearer d") is None


def test_a_plain_string_is_one_api_key() -> None:  # LeadConfig(api_key="...") as before
    one = auth.as_keys("s")
    assert one.allows_api("Bearer s") and not one.allows_api("Bearer t")
    assert one.drafter_refusal("Bearer s") is None
    assert auth.as_keys(None).allows_api(None)


# -- reading keys ---------------------------------------------------------------------------


def test_a_key_file_holds_one_key_a_line(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_bytes(b"  k1  \r\n\n\tk2\nk3")
    assert read_key_file(str(path), "--api-key-file") == ("k1", "k2", "k3")


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "holds no key"), (b" \n\n\t\n", "holds no key"), (b"two words\n", "printable ASCII")],
)
def test_a_key_file_without_usable_keys(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "keys"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message) as e:
        read_key_file(str(path), "--api-key-file")
    assert "two" not in str(e.value)  # the message never shows a key


def test_an_unreadable_key_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"cannot read --api-key-file .*missing: No such file"):
        read_key_file(str(tmp_path / "missing"), "--api-key-file")


def test_precedence_is_flag_then_file_then_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys"
    path.write_text("from-file\n")
    env = ["DUO_TEST_KEY", "DUO_TEST_OTHER"]
    monkeypatch.setenv("DUO_TEST_OTHER", "from-other")
    assert resolve_keys(None, None, env, "--api-key") == ("from-other",)
    monkeypatch.setenv("DUO_TEST_KEY", " from-env \n")
    assert resolve_keys(None, None, env, "--api-key") == ("from-env",)
    assert resolve_keys(None, str(path), env, "--api-key") == ("from-file",)
    assert resolve_keys("from-flag", None, env, "--api-key") == ("from-flag",)
    with pytest.raises(UsageError, match="give --api-key or --api-key-file, not both"):
        resolve_keys("from-flag", str(path), env, "--api-key")
    monkeypatch.setenv("DUO_TEST_KEY", "")
    monkeypatch.delenv("DUO_TEST_OTHER")
    assert resolve_keys(None, None, env, "--api-key") == ()  # empty is unset


def test_lead_keys_and_client_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "drafters"
    path.write_text("d1\nd2\n")
    monkeypatch.setenv(auth.API_KEY_ENV, "api")
    args = argparse.Namespace(
        api_key=None, api_key_file=None, drafter_key=None, drafter_key_file=str(path)
    )
    assert auth_args.lead_keys(args) == Keys(api=("api",), drafter=("d1", "d2"))
    client = argparse.Namespace(api_key=None, api_key_file=str(path))
    assert auth_args.client_key(client) == "d1"  # the first key of a file
    monkeypatch.setenv(auth.DRAFTER_KEY_ENV, "drafter")
    env = (auth.DRAFTER_KEY_ENV, auth.API_KEY_ENV)  # duo back's
    assert (
        auth_args.client_key(argparse.Namespace(api_key=None, api_key_file=None), env) == "drafter"
    )


# -- TLS --------------------------------------------------------------------------------------


def make_certificate(directory: Path, name: str = "lead") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1: (key, cert)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    key, cert = directory / f"{name}-key.pem", directory / f"{name}-cert.pem"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
    names = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        ["openssl", "req", "-x509", *ec, *names, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return key, cert


def test_server_tls_needs_both_files_which_must_match(tmp_path: Path) -> None:
    key, cert = make_certificate(tmp_path)
    other_key, _ = make_certificate(tmp_path, "other")
    assert auth.server_tls(None, None) is None
    assert auth.server_tls(str(key), str(cert)) == auth.ServerTls(str(key), str(cert))
    with pytest.raises(UsageError, match="both --ssl-key-file and --ssl-cert-file, or neither"):
        auth.server_tls(str(key), None)
    with pytest.raises(UsageError, match=r"cannot read --ssl-cert-file .*: No such file"):
        auth.server_tls(str(key), str(tmp_path / "missing.pem"))
    with pytest.raises(UsageError, match="not a PEM certificate and its unencrypted private key"):
        auth.server_tls(str(other_key), str(cert))
    with pytest.raises(UsageError, match="not a PEM certificate"):
        auth.server_tls(str(cert), str(key))


def test_client_tls(tmp_path: Path) -> None:
    _, cert = make_certificate(tmp_path)
    assert auth.client_tls(None, url_is_https=False) is None
    assert isinstance(auth.client_tls(None, url_is_https=True), ssl.SSLContext)
    context = auth.client_tls(str(cert), url_is_https=True)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    with pytest.raises(UsageError, match="--ca-file needs an https:// lead URL"):
        auth.client_tls(str(cert), url_is_https=False)
    with pytest.raises(UsageError, match="cannot read --ca-file"):
        auth.client_tls(str(tmp_path / "missing.pem"), url_is_https=True)
    (tmp_path / "junk.pem").write_text("junk\n")
    with pytest.raises(UsageError, match="holds no PEM certificate"):
        auth.client_tls(str(tmp_path / "junk.pem"), url_is_https=True)


def test_certificate_failure_is_found_behind_wrappers() -> None:
    cause = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cause.verify_message = "self-signed certificate"
    try:
        try:
            raise cause
        except ssl.SSLError as e:
            raise httpx.ConnectError("wrapped") from e
    except httpx.ConnectError as wrapped:
        assert auth.certificate_failure(wrapped) is cause
    assert auth.certificate_reason(cause) == "self-signed certificate"
    assert auth.certificate_failure(httpx.ConnectError("refused")) is None


# -- command lines ----------------------------------------------------------------------------


def one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["lead", "--api-key", "a", "--api-key-file", "f"], "give --api-key or --api-key-file"),
        (["lead", "--drafter-key", "a", "--drafter-key-file", "f"], "not both"),
        (["lead", "--api-key-file", "/nonexistent/keys"], "cannot read --api-key-file"),
        (["lead", "--drafter-key-file", "/nonexistent/k"], "cannot read --drafter-key-file"),
        (["lead", "--ssl-key-file", "k.pem"], "both --ssl-key-file and --ssl-cert-file"),
        (["lead", "--ssl-cert-file", "c.pem"], "both --ssl-key-file and --ssl-cert-file"),
        (
            ["lead", "--ssl-key-file", "/nonexistent/k", "--ssl-cert-file", "/nonexistent/c"],
            "cannot read --ssl-key-file",
        ),
        (["back", "--api-key", "a", "--api-key-file", "f"], "not both"),
        (["back", "--ca-file", "/nonexistent/ca"], "--ca-file needs an https:// lead URL"),
        (["back", "--lead", "https://h:1", "--ca-file", "/nonexistent"], "cannot read --ca-file"),
    ],
)
def test_bad_key_and_tls_flags_exit_2_in_one_line_before_any_model_loads(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in one_line_exit_2(argv, capsys)


def test_an_empty_key_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "keys").write_text("\n")
    err = one_line_exit_2(["lead", "--api-key-file", str(tmp_path / "keys")], capsys)
    assert "holds no key" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--api-key", "a", "--api-key-file", "f"], "duo chat: give --api-key or --api-key-file"),
        (["--ca-file", "ca.pem"], "duo chat: --ca-file needs an https:// lead URL"),
    ],
)
def test_chat_flags(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_exit_2(["chat", *argv], capsys)
    assert err.startswith(message)


REAL_CLIENT = httpx.Client


def chat_session(
    monkeypatch: pytest.MonkeyPatch, handler: httpx.MockTransport, *argv: str
) -> tuple[int, dict[str, object]]:
    seen: dict[str, object] = {}

    def client(**kwargs: object) -> httpx.Client:
        seen.update(kwargs)
        return REAL_CLIENT(transport=handler, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx, "Client", client)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    parser = argparse.ArgumentParser()
    chat.add_chat_parser(parser.add_subparsers())
    return chat.cmd_chat(parser.parse_args(["chat", *argv])), seen


def test_chat_sends_the_key_from_the_environment_and_a_failed_certificate_is_explained(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    headers: list[str | None] = []

    def lead(request: httpx.Request) -> httpx.Response:
        headers.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"status": "ok", "model": "m", "data": []})

    monkeypatch.setenv(auth.API_KEY_ENV, "from-env")
    code, seen = chat_session(monkeypatch, httpx.MockTransport(lead))
    assert code == 0
    assert headers == ["Bearer from-env", "Bearer from-env"]
    assert seen["verify"] is True

    def untrusted(request: httpx.Request) -> httpx.Response:
        cause = ssl.SSLCertVerificationError(1, "certificate verify failed")
        cause.verify_message = "self-signed certificate"
        raise httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED]", request=request) from cause

    code, seen = chat_session(monkeypatch, httpx.MockTransport(untrusted), "--url", "https://h:1")
    err = capsys.readouterr().err
    assert isinstance(seen["verify"], ssl.SSLContext)
    assert code == 2
    assert err == (
        "duo chat: the certificate of https://h:1 does not verify (self-signed certificate); "
        "give the CA that signed it (or the self-signed certificate) with --ca-file\n"
    )


def certificate_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    e = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED]")
    e.verify_code, e.verify_message = code, message
    return e


def test_certificate_advice_fits_the_failure() -> None:
    url = "https://lead:5555"
    mismatch = certificate_error(auth.HOSTNAME_MISMATCH, "Hostname mismatch")
    unknown = certificate_error(18, "self-signed certificate")
    by_name = auth.certificate_problem(url, mismatch, "ca.pem")
    assert "Hostname mismatch" in by_name and "--ca-file" not in by_name  # no CA helps
    assert "connect by a name" in by_name
    assert "--ca-file ca.pem did not sign it" in auth.certificate_problem(url, unknown, "ca.pem")
    assert "with --ca-file" in auth.certificate_problem(url, unknown, None)
