"""Which servers `duo bench --clients` measures, at which settings, and its table; how
it stops them."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import pytest

from duo.bench.harness import servers
from duo.bench.harness.clients import ClientsReport, LoadResult, _variants, schedule
from duo.bench.harness.traffic import ClientFigures, stream_completion, stream_infill
from duo.core.sampling import GREEDY
from duo.errors import GenerationFailed
from duo.session.config import SpecConfig


def test_speculative_peers_run_at_each_setting_and_the_rest_once() -> None:
    spec = SpecConfig(draft_max=8)
    servers = ["duo", "llama-server", "llama-server+ngram", "llama-server+md"]
    got = _variants(servers, spec, [4, 16], [3, 6], ["ngram-mod"])
    assert [(label, kind, s.draft_max, key) for label, (kind, s, key, _) in got.items()] == [
        ("duo", "duo", 8, 3),
        ("llama-server", "llama-server", 8, 3),
        ("llama-server+ngram/k4/n3", "llama-server+ngram", 4, 3),
        ("llama-server+ngram/k4/n6", "llama-server+ngram", 4, 6),
        ("llama-server+ngram/k16/n3", "llama-server+ngram", 16, 3),
        ("llama-server+ngram/k16/n6", "llama-server+ngram", 16, 6),
        ("llama-server+md/k4", "llama-server+md", 4, 3),
        ("llama-server+md/k16", "llama-server+md", 16, 3),
    ]
    plain = _variants(servers, spec, [8], [3], ["ngram-mod"])  # one setting each: plain names
    assert [(label, s.draft_max) for label, (_, s, *_) in plain.items()] == [
        (n, 8) for n in servers
    ]


def test_each_kind_of_n_gram_pool_is_a_peer_of_its_own() -> None:
    kinds = ["ngram-simple", "ngram-mod", "ngram-cache"]
    got = _variants(["duo", "llama-server+ngram"], SpecConfig(), [8], [3], kinds)
    assert {label: v[3] for label, v in got.items()} == {
        "duo": "ngram-mod",
        "llama-server+ngram-simple": "ngram-simple",
        "llama-server+ngram-mod": "ngram-mod",
        "llama-server+ngram-cache": "ngram-cache",
    }


def test_interleaved_servers_take_turns_block_by_block_each_going_first_in_turn() -> None:
    work = [f"p{i}" for i in range(5)]
    got = schedule(["a", "b", "c"], work, 2, interleave=True)
    assert [(name, part) for name, part, _ in got] == [
        ("a", ["p0", "p1"]), ("b", ["p0", "p1"]), ("c", ["p0", "p1"]),
        ("b", ["p2", "p3"]), ("c", ["p2", "p3"]), ("a", ["p2", "p3"]),
        ("c", ["p4"]), ("a", ["p4"]), ("b", ["p4"]),
    ]  # fmt: skip
    assert got[-1][2] == ", block 3/3"
    for name in "abc":  # each server answers every prompt once, in the suite's order
        assert [p for n, part, _ in got if n == name for p in part] == work
    one = schedule(["a", "b"], work, 1, interleave=True)
    assert [name for name, _, _ in one] == ["a", "b", "b", "a"] * 2 + ["a", "b"]


def test_sequential_servers_take_the_whole_work_one_after_another() -> None:
    work = ["p0", "p1", "p2"]
    assert schedule(["a", "b"], work, 2, interleave=False) == [("a", work, ""), ("b", work, "")]


def test_an_error_in_the_stream_fails_the_bench_instead_of_counting_a_short_answer() -> None:
    body = b'data: {"error": {"message": "internal error: boom"}}\n\ndata: [DONE]\n\n'
    transport = httpx.MockTransport(lambda _: httpx.Response(200, content=body))
    with (
        httpx.Client(base_url="http://lead", transport=transport) as http,
        pytest.raises(GenerationFailed, match="internal error: boom"),
    ):
        stream_completion(http, "hi", 8, GREEDY, ClientFigures())


def test_a_warm_up_counts_in_no_request_s_figures() -> None:
    """llama-server samples a token for an editor's warm-up (n_predict 0), duo none: its
    first token would pass for a completion's time to first token."""
    token = b'data: {"content": "x", "tokens": [7], "stop": false}\n\n'
    end = b'data: {"content": "", "stop": true, "timings": {"predicted_n": 1}}\n\n'
    transport = httpx.MockTransport(lambda _: httpx.Response(200, content=token + end))
    out = ClientFigures()
    with httpx.Client(base_url="http://lead", transport=transport) as http:
        stream_infill(
            http, {"input_prefix": "a", "input_suffix": "b", "n_predict": 0}, 8, GREEDY, out
        )
        assert (out.ttft, out.tokens) == ([], 0)
        stream_infill(http, {"input_prefix": "a", "input_suffix": "b"}, 8, GREEDY, out)
        assert (len(out.ttft), out.tokens) == (1, 1)


def test_the_table_keeps_its_columns_for_long_server_names() -> None:
    """A peer's label with its settings is longer than a plain name: every row's figures
    still start where the header's do."""
    ms = {"p50": 1.0, "p99": 2.0}
    report = ClientsReport({})
    for server in ["duo", "llama-server+ngram/k16/n12"]:
        for clients in (1, 4):
            report.results.append(LoadResult(server, clients, 100 * clients, 2.0, ms, ms, ms))
    header, *rows = report.table().splitlines()
    assert len(rows) == 4
    column = header.index("clients") + len("clients")  # the counts are right-aligned to it
    assert all(row[column - 1] in "14" and row[column] == " " for row in rows), rows


def test_the_table_shows_each_server_s_median_repeat_not_its_best() -> None:
    ms = {"p50": 1.0, "p99": 2.0}
    report = ClientsReport({})
    for tokens in (90, 120, 100):
        report.results.append(LoadResult("duo", 1, tokens, 1.0, ms, ms, ms))
    assert report.median("duo", 1) == report.results[2]
    assert report.table().splitlines()[1].split()[2] == "100.0"
    report.results.pop()  # of two, the lower
    assert report.median("duo", 1) == report.results[0]
    assert report.median("llama-server", 1) is None


def test_a_server_that_will_not_end_is_killed_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # llama-server once hung in its shutdown at the end of a bench: the run's figures went
    # with the TimeoutExpired. A process that ignores SIGTERM stands in for it.
    monkeypatch.setattr(servers, "STOP_SECONDS", 0.2)
    ignores = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + (
        "print(flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", ignores], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline()  # SIGTERM is ignored by now
    server = servers.Server.__new__(servers.Server)
    server.procs = [proc]
    server.stop()
    assert proc.returncode == -signal.SIGKILL
