"""Bad command lines fail with a one-line message and exit code 2, before any model loads."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import pytest

from duo.cli.main import build_parser, main
from duo.cli.parser import env_defaults


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["generate", "-p", "hi", "-n", "0"], "positive integer"),
        (["generate", "-p", "hi", "-n", "many"], "positive integer"),
        (["generate", "-p", "hi", "--mode", "turbo"], "invalid choice"),
        (["generate", "-p", "hi", "-t", "-1"], "positive integer"),
        (["generate", "-p", "hi", "-ngl", "-2"], "integer >= 0"),
        (["generate"], "give a prompt"),
        (["generate", "-p", "hi", "-md", "draft.gguf"], "-md needs -m"),
        (["generate", "-p", "hi", "--pair", "nope"], "unknown model pair"),
        (["generate", "-p", "hi", "--pin", "a:b"], "--pin"),
        (["generate", "-p", "hi", "--pin", "0:4096"], "not available"),
        (["generate", "-f", "/nonexistent/prompt.txt"], "cannot read prompt file"),
        (
            ["generate", "-p", "hi", "-m", "m.gguf", "--chat-template-file", "/nonexistent/t"],
            "--chat-template-file: cannot read",
        ),
        (
            ["generate", "-p", "hi", "-m", "/nonexistent/model.gguf", "--mode", "target"],
            "model file not found",
        ),
        (
            ["generate", "-p", "hi", "-m", "/nonexistent/model.gguf", "--spec-type", "model"],
            "needs a draft model",
        ),
        (["generate", "-p", "hi", "--spec-type", "ngram,lookahead"], "unknown draft source"),
        (["models", "prepare", "nope"], "unknown model pair"),
        (["back", "--lead", "ftp://host"], "--lead expects a URL"),
        (["lead", "--port", "0"], "positive integer"),
        (["lead", "--port", "99999"], "expected a port in 1..65535, got 99999"),
        (["rpc-server", "--port", "70000"], "expected a port in 1..65535"),
        (["generate", "-p", "hi", "-f", "prompt.txt"], "-p TEXT or -f FILE, not both"),
        (["lead", "--bogus"], "duo lead: error: unrecognized arguments: --bogus"),
        (["chat", "--url", "ftp://host"], "expected an http:// or https:// URL"),
        (["generate", "-p", "hi", "--fanout", "-1"], "integer >= 0"),
        (["bench", "--fanout", "0,x"], "expected settings like 0,2"),
        (["bench", "--fanout", "0,99"], "between 0 and 16"),
        (["bench", "--rtt", "20ms"], "expected milliseconds like 0,20"),
        (["bench", "--jitter", "1,2"], "expected one number of milliseconds"),
        (["bench", "--jitter", "-1"], "a delay is between 0 and 10000 ms"),
        (["bench", "--rate", "0"], "a rate is above 0 Mbit/s"),
        (["generate", "-ts", "3,x"], "expected shares like 3,1, got '3,x'"),
        (["lead", "-ts", "0/0"], "not all 0"),
        (["lead", "-ts", ",".join(["1"] * 17)], "at most 16 shares"),
        (["lead", "-sm", "tensor"], "invalid choice: 'tensor'"),
        (["bench", "--rate", "fast"], "expected Mbit/s like 100"),
        (["bench", "--loss", "101"], "a loss is between 0 and 100%"),
        (["bench", "--link", "wifi"], "invalid choice: 'wifi'"),
        (["bench", "--link", "loopback", "--rate", "10"], "not --link loopback"),
        (["bench", "--peer-draft", "0,8"], "draft lengths must be between 1 and 256"),
        (["bench", "--peer-draft", "4,8"], "--peer-draft, --peer-key and --peer-ngram set"),
        (["bench", "--peer-ngram", "ngram-mod,ngram-big"], "ngram-big: give any of ngram-simple"),
        (["bench", "--suite", "agent-edit"], "is requests to a server: add --clients"),
        (["bench", "--peer-key", "3,x"], "expected lengths like 4,8,16"),
        (["bench", "--half", "BF16,Q8_0"], "expected BF16, F16 or BF16,F16"),
        (["lead", "--prompt-stretch", "0.5"], "the stretch is 1 or more (or inf), not 0.5"),
        (["lead", "--prompt-stretch", "nan"], "the stretch is 1 or more"),
        (["lead", "--prompt-stretch", "fast"], "expected a factor like 8 or inf"),
        (["lead", "-cram", "-2"], "expected MiB (0 or more, -1: no limit), got '-2'"),
        (["lead", "--cache-ram", "8G"], "expected MiB (0 or more, -1: no limit), got '8G'"),
        (["bench", "--half", "F16", "-m", "main.gguf"], "give --pair, not -m"),
        (["bench", "--half", "BF16,F16", "--clients", "1"], "once per DUO_HALF instead"),
        (["back", "--fanout", "two"], "integer >= 0"),
        (["back", "--rpc", "127.0.0.1:1", "--rpcd", "127.0.0.1:2"], "--rpc or --rpcd, not both"),
        (["generate", "-p", "hi", "--rpcd", "host"], "--rpcd: 'host' needs a port"),
        (["generate", "-p", "hi", "-ngld", "-1"], "integer >= 0"),
        (["generate", "-p", "hi", "-ctk", "q3_k"], "invalid choice"),
        (["lead", "-fa", "yes"], "invalid choice"),
        (["generate", "-p", "hi", "-c", "-1"], "integer >= 0"),
        ([], "required"),
    ],
)
def test_bad_usage_exits_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = int(e.code or 0)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err  # one line, not argparse's usage block
    if "argument" in err or "unrecognized" in err or "required" in err:
        assert err.rstrip().endswith("--help)"), err  # where to look


@pytest.mark.parametrize(
    "argv", [["-v", "lead"], ["lead", "-v"], ["lead", "--verbose", "-np", "2"]]
)
def test_verbose_is_taken_anywhere_on_the_line(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).verbose is True
    assert build_parser().parse_args(["lead"]).verbose is False


def test_a_file_that_is_not_gguf_is_refused(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a model at all")
    assert main(["generate", "-p", "hi", "-m", str(bogus), "--mode", "target"]) == 2
    assert "is not a GGUF file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "template",
    ["{% for m in messages %}{{ m.content }", "{{ raise_exception('no user turns here') }}"],
)
def test_a_broken_chat_template_is_refused_when_given(
    template: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jinja"
    path.write_text(template)
    argv = ["generate", "-p", "hi", "-m", "m.gguf", "--chat-template-file", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--chat-template-file {path}: not a chat template" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_the_lead_hints_the_back_command_with_the_key_it_needs() -> None:
    from duo.auth import Keys
    from duo.cli.lead import back_hint

    url = "http://h:5555"
    assert back_hint(url, Keys()) == f"drafters: duo back --lead {url}"
    assert "(an API key; or $DUO_API_KEY)" in back_hint(url, Keys(api=("k",)))
    assert "(a drafter key; or $DUO_DRAFTER_KEY)" in back_hint(url, Keys(("k",), ("d",)))


def test_cors_origins_are_checked() -> None:
    from duo.cli.lead import cors_origins

    assert cors_origins("*") == ("*",)
    assert cors_origins("https://a.example/, http://localhost:3000") == (
        "https://a.example",
        "http://localhost:3000",
    )
    for bad in ("a.example", "https://a.example/app", "*,https://a.example", "ftp://x"):
        with pytest.raises(argparse.ArgumentTypeError):
            cors_origins(bad)


def test_every_long_flag_takes_its_default_from_duo_arg(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """$DUO_ARG_<FLAG>, as llama-server's LLAMA_ARG_*: the flag on the line still wins."""
    env = {
        "DUO_ARG_CTX_SIZE": "0",
        "DUO_ARG_ALIAS": "m",
        "DUO_ARG_NO_MMAP": "on",
        "DUO_ARG_FLASH_ATTN": "off",
        "DUO_ARG_PARALLEL": "3",
    }
    parser = build_parser()
    env_defaults(parser, env)
    args = parser.parse_args(["lead"])
    assert (args.ctx_size, args.alias, args.no_mmap, args.flash_attn) == (0, "m", True, "off")
    assert args.parallel == 3
    args = parser.parse_args(["lead", "-c", "512", "-np", "2", "--alias", "x"])
    assert (args.ctx_size, args.parallel, args.alias) == (512, 2, "x")
    assert [build_parser().parse_args(["lead", *a]).cache_ram for a in ([], ["-cram", "-1"])] == [
        8192,  # llama-server's default
        -1,
    ]
    assert build_parser().parse_args(["lead"]).ctx_size == 4096  # no environment, no change
    for bad, message in [
        ({"DUO_ARG_FLASH_ATTN": "yes"}, "$DUO_ARG_FLASH_ATTN is 'yes': expected one of on, off"),
        ({"DUO_ARG_NO_MMAP": "maybe"}, "$DUO_ARG_NO_MMAP is 'maybe': expected 1 or 0"),
        ({"DUO_ARG_CTX_SIZE": "lots"}, "$DUO_ARG_CTX_SIZE: expected an integer >= 0, got 'lots'"),
    ]:
        env_defaults(parser := build_parser(), bad)
        with pytest.raises(SystemExit):
            parser.parse_args(["lead"])
        assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "argv", "message"),
    [
        ({"DUO_ARG_PORT": "abc"}, ["lead"], "$DUO_ARG_PORT: expected a positive integer"),
        (
            {"DUO_ARG_PORT": "abc"},
            ["lead", "--port", "18081"],
            "$DUO_ARG_PORT: expected a positive integer, got 'abc'",
        ),
        ({"DUO_ARG_PORT": "70000"}, ["lead", "--port=18081"], "$DUO_ARG_PORT: expected a port"),
        ({"DUO_ARG_HOST": ""}, ["lead"], "$DUO_ARG_HOST: expected an address to listen on"),
        (
            {"DUO_ARG_HOST": ""},
            ["lead", "--host", "127.0.0.1"],
            "$DUO_ARG_HOST: expected an address to listen on",
        ),
        ({"DUO_ARG_HOST": ""}, ["rpc-server"], "$DUO_ARG_HOST: expected an address"),
        ({"DUO_ARG_NO_MMAP": "maybe"}, ["lead", "--no-mmap"], "$DUO_ARG_NO_MMAP is 'maybe'"),
        ({"DUO_ARG_FLASH_ATTN": "yes"}, ["lead", "-fa", "on"], "$DUO_ARG_FLASH_ATTN is 'yes'"),
        ({"DUO_ARG_PROMPT_STRETCH": "0"}, ["lead", "--prompt-stretch", "2"], "is 1 or more"),
        ({"DUO_ARG_VERBOSE": "loud"}, ["-v", "models"], "$DUO_ARG_VERBOSE is 'loud'"),
    ],
)
def test_a_bad_duo_arg_is_refused_even_where_the_flag_overrides_it(
    env: dict[str, str],
    argv: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As llama-server applies each LLAMA_ARG_* before its command line (common/arg.cpp,
    "error while handling environment variable"): one line naming the variable, exit 2."""
    stub_servers(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"duo {argv[0]}: error: " if argv[0] != "-v" else "duo: error: ")


def test_a_duo_arg_of_another_command_is_left_to_that_command() -> None:
    """$DUO_ARG_FANOUT=0,2 suits `duo bench --fanout`, not `duo generate --fanout`; as
    llama.cpp's tools read only their own options' variables, each command checks its own."""
    env = {"DUO_ARG_FANOUT": "0,2", "DUO_ARG_PORT": "abc"}
    env_defaults(parser := build_parser(), env)
    assert parser.parse_args(["bench"]).fanout == [0, 2]
    assert parser.parse_args(["models"]).action == "list"
    with pytest.raises(SystemExit):
        parser.parse_args(["generate", "-p", "hi"])


def stub_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing starts (no model loads, nothing listens) if a check misses."""
    for command in ("duo.cli.lead.cmd_lead", "duo.cli.rpc_server.cmd_rpc_server"):
        monkeypatch.setattr(command, lambda args: 0)
    monkeypatch.setattr(sys.modules["duo.cli.main"], "cmd_models", lambda args: 0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["lead", "--host", ""], "argument --host: expected an address to listen on"),
        (["lead", "--host="], "argument --host: expected an address to listen on"),
        (["lead", "--host", "127.0.0.1:5555"], "got '127.0.0.1:5555'"),
        (["lead", "--host", "[::1]"], "an IPv6 address goes without brackets"),
        (["lead", "--host", "two words"], "expected an address to listen on"),
        (["rpc-server", "--host", ""], "argument --host: expected an address to listen on"),
    ],
)
def test_an_empty_or_unparsable_host_is_refused(
    argv: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An empty host would listen on every interface (0.0.0.0 and ::), and the warnings
    would name no address: refused in one line, before anything starts."""
    stub_servers(monkeypatch)
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::", "::1", "localhost", "lead.lan"])
def test_addresses_and_host_names_are_valid_hosts(host: str) -> None:
    assert build_parser().parse_args(["lead", "--host", host]).host == host
    env_defaults(parser := build_parser(), {"DUO_ARG_HOST": host})
    assert parser.parse_args(["lead"]).host == host


class ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_output_into_a_closed_pipe_ends_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`duo models | head -1`: the reader went away; no 'internal error', the shell's code."""
    with monkeypatch.context() as m:
        m.setattr(sys, "stdout", ClosedPipe())
        code = main(["models"])
    assert code == 141
    assert capsys.readouterr().err == ""
