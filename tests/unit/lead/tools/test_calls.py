"""Tool calling: request checks, template probing and rendering, parsing replies (whole and
streamed), with real chat templates (Jinja, as the lead renders them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from duo.errors import DuoError, http_status
from duo.lead.body import decode
from duo.lead.openai.chat import ChatRequest
from duo.lead.tools.calls import (
    ToolCallStream,
    Tools,
    parse_tool_calls,
    template_caps,
    template_messages,
)

# Qwen 2.5 Instruct's chat template (from llama.cpp's models/templates): it shows
# the tools in the system turn, asks for <tool_call> blocks, and writes earlier calls'
# arguments with tojson (it wants them as objects).
QWEN25 = (Path(__file__).parent / "templates" / "qwen2.5-instruct.jinja").read_text()

# SmolLM2-Instruct's template (the default main model): it knows nothing of tools.
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# A template that shows tool calls by writing the arguments text as it is.
STRING_ARGS = (
    "{% for m in messages %}{{ m.role }}: {{ m.content }}"
    "{% for c in m.tool_calls or [] %} call {{ c.function.name }}({{ c.function.arguments }})"
    "{% endfor %}\n{% endfor %}"
)


def renderer(template: str):  # type: ignore[no-untyped-def]
    formatter = Jinja2ChatFormatter(template=template, eos_token="</s>", bos_token="<s>")

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return formatter(messages=messages, tools=tools).prompt  # type: ignore[arg-type]

    return render


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
NAMES = {"get_weather", "get_time"}


def chat(body: dict[str, Any]) -> ChatRequest:
    """A chat request with these fields (and a message, unless they give messages)."""
    messages = [{"role": "user", "content": "hi"}]
    return decode(json.dumps({"messages": messages, **body}).encode(), ChatRequest)


def tool_fields(body: dict[str, Any]) -> Tools | None:
    return chat(body).offered_tools()


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return chat(body).template_messages()


def refused(body: dict[str, Any], param: str) -> None:
    with pytest.raises(DuoError) as info:
        tool_fields(body)
    assert http_status(info.value)[0] == 400
    assert info.value.param == param, info.value.message


# -- the request ------------------------------------------------------------------------


def test_tool_choice_forms() -> None:
    assert tool_fields({}) is None
    assert tool_fields({"tools": [], "tool_choice": "auto"}) is None
    assert tool_fields({"tools": [WEATHER], "tool_choice": "none"}) is None
    auto = tool_fields({"tools": [WEATHER, TIME]})
    assert auto is not None and auto.choice == "auto" and auto.names == NAMES
    assert not auto.forced
    required = tool_fields({"tools": [WEATHER, TIME], "tool_choice": "required"})
    assert required is not None and len(required.shown()) == 2
    assert required.forced
    named = tool_fields(
        {
            "tools": [WEATHER, TIME],
            "tool_choice": {"type": "function", "function": {"name": "get_time"}},
        }
    )
    assert named is not None and named.choice == "get_time"
    assert named.shown() == [TIME]
    assert named.forced


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": "get_weather"}, "tools"),
        ({"tools": [{"type": "retrieval"}]}, "tools"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tools": [WEATHER] * 129}, "tools"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"functions": [WEATHER["function"]]}, "functions"),
    ],
)
def test_bad_tools_are_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    refused(body, param)


def test_chat_messages_keep_tool_calls_and_results() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    messages = chat_messages(
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ]
        }
    )
    assert messages[1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert messages[2] == {"role": "tool", "content": "42", "tool_call_id": "c1"}
    for bad in (
        [{"role": "assistant", "content": None, "tool_calls": "f"}],
        [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}],
        [{"role": "tool", "content": "x", "tool_call_id": 3}],
    ):
        with pytest.raises(DuoError) as info:
            chat_messages({"messages": bad})
        assert info.value.param == "messages"


# -- the template -----------------------------------------------------------------------


def test_template_caps() -> None:
    qwen = template_caps(renderer(QWEN25))
    assert (qwen.supports_tools, qwen.supports_tool_calls, qwen.object_arguments) == (
        True,
        True,
        True,
    )
    assert qwen.tool_call_tags  # it asks for <tool_call> blocks: the Hermes form
    smol = template_caps(renderer(SMOLLM2))
    assert not smol.supports_tools and not smol.supports_tool_calls
    strings = template_caps(renderer(STRING_ARGS))
    assert not strings.supports_tools
    assert strings.supports_tool_calls and not strings.object_arguments
    assert not strings.tool_call_tags and not smol.tool_call_tags


def test_tools_and_calls_render_through_a_real_template() -> None:
    render = renderer(QWEN25)
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    prompt = render(template_messages(messages, object_arguments=True), [WEATHER])
    assert json.dumps(WEATHER, ensure_ascii=False) in prompt  # the tool, as the model sees it
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    assert "<tool_response>\nsunny\n</tool_response>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    # Without converting, the template would write the arguments as a JSON string.
    doubled = render(messages, [WEATHER])
    assert '"arguments": "{\\"city\\": \\"Paris\\"}"' in doubled


# -- the reply --------------------------------------------------------------------------

HERMES = (
    'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
    '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
)


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        (
            HERMES,
            "Let me check.",
            [("get_weather", {"city": "Paris"}), ("get_time", {})],
        ),
        ('{"name": "get_time", "arguments": {}}', None, [("get_time", {})]),
        (
            '<tool_call>[{"name": "get_time", "arguments": {}}]</tool_call>',
            None,
            [("get_time", {})],
        ),
        (' {"name": "get_time", "parameters": {"tz": "UTC"}}', None, [("get_time", {"tz": "UTC"})]),
        ('{"tool_call": {"name": "get_time", "arguments": {}}}', None, [("get_time", {})]),
        (
            '{"tool_calls": [{"name": "get_time", "arguments": {}}, '
            '{"name": "get_weather", "arguments": {"city": "Oslo"}}]}',
            None,
            [("get_time", {}), ("get_weather", {"city": "Oslo"})],
        ),
        ('[{"name": "get_time", "arguments": "{}"}]', None, [("get_time", {})]),
        # Mistral: a list after [TOOL_CALLS], or name[ARGS]{...} (its later models)
        (
            '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "a1"}, '
            '{"name": "get_time", "arguments": {}}]',
            None,
            [("get_weather", {"city": "Oslo"}), ("get_time", {})],
        ),
        (
            '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]get_time[ARGS]{}',
            None,
            [("get_weather", {"city": "Oslo"}), ("get_time", {})],
        ),
        # Llama 3.x: its python tag, and several objects a line or a semicolon apart
        (
            '<|python_tag|>{"name": "get_time", "parameters": {"tz": "UTC"}}',
            None,
            [("get_time", {"tz": "UTC"})],
        ),
        (
            '{"name": "get_time", "parameters": {}}; {"name": "get_weather", "parameters": '
            '{"city": "Rome"}}',
            None,
            [("get_time", {}), ("get_weather", {"city": "Rome"})],
        ),
        # Gemma: a fenced block, of Python-style calls or of JSON
        (
            '```tool_code\nget_weather(city="Oslo")\nprint(get_time(tz="UTC"))\n```',
            None,
            [("get_weather", {"city": "Oslo"}), ("get_time", {"tz": "UTC"})],
        ),
        ('```json\n{"name": "get_time", "arguments": {}}\n```', None, [("get_time", {})]),
        # Not calls: the text exactly.
        ("It is sunny in Paris.", "It is sunny in Paris.", []),
        ("```python\nprint('hello')\n```", None, []),
        ("```tool_code\nget_weather(*cities)\n```", None, []),
        ("```tool_code\nget_weather(city=open('x'))\n```", None, []),
        ("[TOOL_CALLS]delete_everything[ARGS]{}", None, []),
        ("[TOOL_CALLS]get_time[ARGS]not json", None, []),
        ('{"name": "get_time", "arguments": {}} and then some words', None, []),
        ('{"name": "delete_everything", "arguments": {}}', None, []),
        ('{"city": "Paris"}', None, []),
        ("<tool_call>not json</tool_call>", None, []),
        ("[1, 2, 3] are numbers", None, []),
    ],
)
def test_parse_tool_calls(text: str, content: str | None, calls: list[tuple[str, Any]]) -> None:
    got_content, got = parse_tool_calls(text, NAMES)
    assert [(c.name, json.loads(c.arguments)) for c in got] == calls
    if not calls:
        assert got_content == text  # no call: the reply is the generated text, unchanged
    else:
        assert got_content == content
    assert len({c.id for c in got}) == len(got)
    assert all(c.id.startswith("call_") for c in got)


def stream_pieces(text: str, cuts: list[int]) -> tuple[str, list[Any]]:
    stream = ToolCallStream(NAMES)
    out, pieces = [], []
    last = 0
    for cut in [*sorted(set(cuts)), len(text)]:
        content, more = stream.feed(text[last:cut])
        out.append(content)
        pieces += more
        last = cut
    rest, calls = stream.finish()
    # A streamed call's pieces spell its arguments as written, with the ID it ends with.
    for k in range(len(stream.streamed)):
        assert [p.id for p in pieces if p.index == k and p.id] == [calls[k].id]
        written = "".join(p.arguments for p in pieces if p.index == k)
        assert json.loads(written) == json.loads(calls[k].arguments)
    return "".join(out) + rest, calls


@pytest.mark.parametrize(
    "text",
    [
        HERMES,
        "Plain text <tool and more",
        "Text that ends with <tool_ca",
        "  leading spaces",
        '{"name": "get_time", "arguments": {}}',
        'Sure.\n\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\nDone.',
        "[TOOL_CALLS]get_time[ARGS]{}",
        '```tool_code\nget_time(tz="UTC")\n```',
        "``` is how Markdown fences code",
        "[TOOL] is not the tag",
    ],
)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_streamed_parse_equals_the_whole_parse(text: str, cuts: list[int]) -> None:
    content, calls = parse_tool_calls(text, NAMES)
    streamed, streamed_calls = stream_pieces(text, [c for c in cuts if c <= len(text)])
    assert streamed == (content or "")
    assert [(c.name, c.arguments) for c in streamed_calls] == [(c.name, c.arguments) for c in calls]


def test_content_streams_before_the_call_and_the_call_s_arguments_as_they_come() -> None:
    stream = ToolCallStream(NAMES)
    assert stream.feed("Let me") == ("Let me", [])
    assert stream.feed(" check.\n<tool") == (" check.", [])
    assert stream.feed('_call>{"name": "get_time", ') == ("", [])
    content, pieces = stream.feed('"arguments": {"tz": "U')
    assert content == "" and pieces[0].name == "get_time" and pieces[0].id.startswith("call_")
    assert "".join(p.arguments for p in pieces) == '{"tz": "U'
    content, pieces = stream.feed('TC"}}</tool_call>')
    assert "".join(p.arguments for p in pieces) == 'TC"}'  # the arguments' end, no more
    rest, calls = stream.finish()
    assert rest == "" and [(c.name, c.id) for c in calls] == [("get_time", stream.streamed[0].id)]


def test_a_call_cut_short_stands_as_it_was_streamed() -> None:
    stream = ToolCallStream(NAMES)
    _, pieces = stream.feed('```json\n{"name": "get_time", "arguments": {"tz": "Europe/')
    assert [p.name for p in pieces if p.id] == ["get_time"]
    assert stream.finish() == ("", [])  # no content, and no call but the one sent


def test_a_brace_in_a_string_does_not_end_the_arguments() -> None:
    stream = ToolCallStream(NAMES)
    _, pieces = stream.feed('{"name": "get_time", "arguments": {"tz": "a}\\"}", "x": [1]}}')
    assert "".join(p.arguments for p in pieces) == '{"tz": "a}\\"}", "x": [1]}'


def test_an_unoffered_function_does_not_stream() -> None:
    stream = ToolCallStream(NAMES)
    assert stream.feed('{"name": "rm_rf", "arguments": {"path": "/"}}') == ("", [])


def test_only_json_streams_an_escape_waits_until_whole() -> None:
    stream = ToolCallStream(NAMES)
    _, pieces = stream.feed('{"name": "get_time", "arguments": {"tz": "a\\')
    assert "".join(p.arguments for p in pieces) == '{"tz": "a'  # the backslash waits
    _, pieces = stream.feed("u00")
    assert pieces == []
    _, pieces = stream.feed('e9"}}')
    assert "".join(p.arguments for p in pieces) == '\\u00e9"}'
    assert [c.name for c in stream.finish()[1]] == ["get_time"]


@pytest.mark.parametrize(("bad", "sent"), [("it\\'s", "it"), ("a\\@b", "a"), ("two\nlines", "two")])
def test_what_json_refuses_ends_the_streaming_and_the_call_stands_as_sent(
    bad: str, sent: str
) -> None:
    stream = ToolCallStream(NAMES)
    text = '{"name": "get_time", "arguments": {"tz": "' + bad + '"}}'
    pieces = [p for i in range(0, len(text), 5) for p in stream.feed(text[i : i + 5])[1]]
    written = "".join(p.arguments for p in pieces)
    assert written == '{"tz": "' + sent  # up to the fault
    assert stream.finish() == ("", [])  # the reply is no valid call: nothing more is sent


def test_what_follows_a_whole_streamed_call_that_is_no_call_stays_content() -> None:
    stream = ToolCallStream(NAMES)
    _, pieces = stream.feed('{"name": "get_time", "arguments": {"tz": "UTC"}}\n')
    assert "".join(p.arguments for p in pieces) == '{"tz": "UTC"}'
    assert stream.feed('{"name": "temperature", "value": "24"}') == ("", [])
    rest, calls = stream.finish()  # read whole, the reply is text; the call was sent
    assert rest == '{"name": "temperature", "value": "24"}'
    assert [(c.name, c.arguments) for c in calls] == [("get_time", '{"tz": "UTC"}')]
