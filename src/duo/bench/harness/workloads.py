"""Server workloads for `duo bench --clients --suite agent|multiturn|code-edit`: sessions of
dependent requests, as agents, chats and code assistants send them.

A session is a system prompt and a list of turns; a turn is the messages a client adds
(a user message, or a tool's result) before it asks for the next answer. The answers are
the model's own: each request holds every earlier turn and answer, so a server that
remembers (a KV prefix, a suffix cache, an n-gram pool) meets text it has seen.

    agent       a recorded agent loop replayed: the same tool schemas in every session's
                system prompt, a task, tool results as JSON fed back after each answer,
                then a request for the final answer (the model's calls are not parsed: the
                trace is the same whatever it answers)
    multiturn   chats whose later turns ask to quote, restate or reformat earlier answers
    code-edit   a Python file of 40-150 lines and an edit; the answer is the whole file,
                then a second edit of the same file (for a code model: --pair qwen-coder)

Generated, not stored: `sessions(kind)` gives the same sessions on every call and machine
(a seeded generator), and `duo bench` bundles nothing but this code.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
WORKLOADS = ("agent", "multiturn", "code-edit")
SESSIONS = 8  # per workload
# `duo bench -n`'s default per workload: room for a whole answer (a code-edit answer is
# the whole file, 350-500 tokens of the code model's), so the servers do what a client
# asks rather than the first lines of it.
ANSWER_TOKENS = {"code-edit": 512, "agent-edit": 512}  # (agent-edit: duo.bench.harness.agents)


@dataclass(frozen=True)
class WorkloadSession:
    name: str
    system: str | None
    turns: tuple[tuple[Message, ...], ...]  # the messages added before each request

    def start(self) -> list[Message]:
        return [{"role": "system", "content": self.system}] if self.system else []


def sessions(kind: str, count: int = SESSIONS, seed: int = 0) -> list[WorkloadSession]:
    """`count` sessions of a workload, the same for the same arguments."""
    make = {"agent": _agent, "multiturn": _multiturn, "code-edit": _code_edit}[kind]
    rng = random.Random(f"{kind}-{seed}")
    return [make(rng, i) for i in range(count)]


# -- agent ----------------------------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}},
            "required": ["amount", "from", "to"]}}},
    {"type": "function", "function": {
        "name": "search_flights", "description": "Direct flights between two cities on a date.",
        "parameters": {"type": "object", "properties": {
            "origin": {"type": "string"}, "destination": {"type": "string"},
            "date": {"type": "string", "description": "YYYY-MM-DD"}},
            "required": ["origin", "destination", "date"]}}},
]  # fmt: skip
AGENT_SYSTEM = (
    "You are a travel assistant with these tools:\n"
    + "\n".join(json.dumps(t["function"]) for t in TOOLS)
    + '\nTo call a tool, answer with <tool_call>{"name": ..., "arguments": {...}}</tool_call> '
    "and nothing else. Tool results come back as JSON. When you have what you need, answer "
    "the user in plain sentences."
)
CITIES = [("Oslo", "NOK"), ("Rome", "EUR"), ("Tokyo", "JPY"), ("Lima", "PEN"),
          ("Cairo", "EGP"), ("Seoul", "KRW"), ("Dublin", "EUR"), ("Quito", "USD")]  # fmt: skip
SKIES = ["clear", "light rain", "overcast", "snow showers", "sunny", "fog"]


def _agent(rng: random.Random, i: int) -> WorkloadSession:
    (home, _), (away, currency) = rng.sample(CITIES, 2)
    date = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    amount = rng.choice([100, 250, 400, 1200])
    weather = {"city": away, "temperature_c": rng.randint(-5, 31),
               "conditions": rng.choice(SKIES), "wind_kph": rng.randint(0, 40)}  # fmt: skip
    flights = [
        {"flight": f"{rng.choice('ABCDEFGH')}{rng.choice('KLMNPRST')}{rng.randint(100, 999)}",
         "departs": f"{date}T{rng.randint(6, 21):02d}:{rng.choice(['05', '20', '45'])}",
         "price_eur": rng.randint(90, 640)}
        for _ in range(3)
    ]  # fmt: skip
    rate = round(rng.uniform(0.5, 160.0), 4)
    money = {"amount": amount, "from": "EUR", "to": currency, "rate": rate,
             "result": round(amount * rate, 2)}  # fmt: skip

    def result(name: str, value: Any) -> tuple[Message, ...]:
        return ({"role": "tool", "name": name, "content": json.dumps(value)},)

    task = (
        f"I fly from {home} to {away} on {date}. Find me a direct flight, tell me the weather "
        f"in {away}, and how much {amount} EUR is in {currency}."
    )
    return WorkloadSession(
        f"agent-{i}",
        AGENT_SYSTEM,
        (
            ({"role": "user", "content": task},),
            result("search_flights", {"origin": home, "destination": away, "flights": flights}),
            result("get_weather", weather),
            result("convert_currency", money),
            ({"role": "user", "content": "Summarize it all for me: flight, weather, money."},),
        ),
    )


# -- multiturn ------------------------------------------------------------------------------

TOPICS = [
    "five tips for sleeping better", "four ways to save money on groceries",
    "five habits of good programmers", "four reasons to learn a second language",
    "five steps to start running", "four ideas for a rainy weekend",
    "five rules for writing clear emails", "four ways to keep houseplants alive",
]  # fmt: skip
FOLLOW_UPS = [
    "Quote your second point word for word, then explain it in two sentences.",
    "Repeat your whole first answer, but as a numbered list.",
    "Now repeat the list again, adding one short example to each point.",
]


def _multiturn(rng: random.Random, i: int) -> WorkloadSession:
    topic = TOPICS[i % len(TOPICS)]
    follow = FOLLOW_UPS[:]
    rng.shuffle(follow)
    turns = [f"Give me {topic}, one short sentence each.", *follow]
    return WorkloadSession(
        f"multiturn-{i}",
        None,
        tuple(({"role": "user", "content": t},) for t in turns),
    )


# -- code edit ------------------------------------------------------------------------------

NOUNS = ["order", "invoice", "ticket", "parcel", "booking", "account", "device", "report"]
FIELDS = ["name", "price", "quantity", "owner", "status", "created", "weight", "region"]


def _code_edit(rng: random.Random, i: int) -> WorkloadSession:
    noun = NOUNS[i % len(NOUNS)]
    fields = rng.sample(FIELDS, rng.randint(3, 5))
    file = _python_file(rng, noun, fields)
    old = f"load_{noun}s"
    new = f"read_{noun}s"
    first = (
        f"Here is a Python file:\n\n```python\n{file}```\n\nRename `{old}` to `{new}` "
        "everywhere. Answer with the whole file, in one code block, and nothing else."
    )
    # An edit that touches several lines, which the model makes whole; asked to add a
    # docstring, it answered with the file unchanged, or with the one function.
    second = (
        "Next, change every `ValueError` to `TypeError`. Answer with the whole file again, "
        "in one code block, and nothing else."
    )
    return WorkloadSession(
        f"code-edit-{i}",
        None,
        (({"role": "user", "content": first},), ({"role": "user", "content": second},)),
    )


def _python_file(rng: random.Random, noun: str, fields: list[str]) -> str:
    """A small, plausible module: a dataclass, loading, checks, a summary, a main."""
    cls = noun.capitalize()
    lines = ["import csv", "import sys", "from dataclasses import dataclass", "", "", "@dataclass",
             f"class {cls}:"]  # fmt: skip
    lines += [f"    {f}: str" for f in fields]
    lines += ["", "", f"def load_{noun}s(path):", f"    {noun}s = []",
              "    with open(path, newline='') as f:", "        for row in csv.DictReader(f):",
              f"            {noun}s.append({cls}(**{{k: row[k] for k in {fields!r}}}))",
              f"    return {noun}s"]  # fmt: skip
    for f in fields:
        limit = rng.randint(8, 64)
        lines += ["", "", f"def check_{f}({noun}):",
                  f"    if not {noun}.{f}:", f"        raise ValueError('{noun} has no {f}')",
                  f"    if len({noun}.{f}) > {limit}:",
                  f"        raise ValueError('{f} is longer than {limit} characters')",
                  "    return True"]  # fmt: skip
    lines += ["", "", f"def summarize_{noun}s({noun}s):", "    counts = {}",
              f"    for {noun} in {noun}s:",
              f"        counts[{noun}.{fields[0]}] = counts.get({noun}.{fields[0]}, 0) + 1",
              "    return sorted(counts.items(), key=lambda kv: -kv[1])",
              "", "", "def main(argv):", f"    {noun}s = load_{noun}s(argv[1])",
              f"    for {noun} in {noun}s:"]  # fmt: skip
    lines += [f"        check_{f}({noun})" for f in fields]
    lines += [f"    for key, count in summarize_{noun}s({noun}s):",
              "        print(f'{key}: {count}')", "    return 0", "", "",
              "if __name__ == '__main__':", "    sys.exit(main(sys.argv))"]  # fmt: skip
    return "\n".join(lines) + "\n"
