"""The server workloads of `duo bench --clients`: generated the same every time, each the
shape its name says."""

from __future__ import annotations

import json
import re

import pytest

from duo.bench.harness.workloads import TOOLS, WORKLOADS, sessions


@pytest.mark.parametrize("kind", WORKLOADS)
def test_sessions_are_deterministic_and_distinct(kind: str) -> None:
    first, again = sessions(kind), sessions(kind)
    assert first == again
    assert len({s.name for s in first}) == len(first) == 8
    texts = [json.dumps(s.turns) for s in first]
    assert len(set(texts)) == len(texts), "no two sessions alike"
    assert sessions(kind, seed=1) != first


def test_the_agent_trace_has_valid_tools_and_json_results() -> None:
    for s in sessions("agent"):
        assert s.system is not None
        for tool in TOOLS:  # every tool's schema, as JSON, in every session's system prompt
            assert json.dumps(tool["function"]) in s.system
        roles = [m["role"] for turn in s.turns for m in turn]
        assert roles[0] == "user" and roles[-1] == "user" and roles.count("tool") == 3
        for turn in s.turns:
            for m in turn:
                if m["role"] == "tool":
                    assert m["name"] in {t["function"]["name"] for t in TOOLS}
                    assert isinstance(json.loads(m["content"]), dict)


def test_later_multiturn_turns_refer_back() -> None:
    for s in sessions("multiturn"):
        follow_ups = " ".join(t[0]["content"] for t in s.turns[1:])
        assert "Repeat your whole first answer" in follow_ups and "word for word" in follow_ups


def test_code_edit_files_are_real_python_of_40_to_150_lines() -> None:
    for s in sessions("code-edit"):
        text = s.turns[0][0]["content"]
        code = re.search(r"```python\n(.*?)```", text, re.DOTALL)
        assert code is not None
        compile(code[1], s.name, "exec")  # it parses
        assert 40 <= code[1].count("\n") <= 150
        old = re.search(r"Rename `(\w+)`", text)
        assert old is not None and f"def {old[1]}(" in code[1]
