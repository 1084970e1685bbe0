"""OpenAI's Responses API requests translated into the chat request every door runs, and
their faults named (duo.lead.responses.requests)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from duo.errors import UsageError
from duo.lead.body import decode
from duo.lead.responses.requests import ResponsesRequest

SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Runs a command",
    "strict": False,
    "parameters": {"type": "object", "properties": {"command": {"type": "array"}}},
}


def request(**fields: Any) -> ResponsesRequest:
    body = {"model": "any", "input": "hi", **fields}
    return decode(json.dumps(body).encode(), ResponsesRequest)


def shown(r: ResponsesRequest) -> list[dict[str, Any]]:
    return [m.shown() for m in r.chat().messages]


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    r = request(instructions="Be brief.", max_output_tokens=20, temperature=0)
    assert shown(r) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert (r.chat().max_tokens, r.chat().temperature) == (20, 0)


def test_items_become_messages_calls_and_results() -> None:
    r = request(
        tools=[SHELL],
        input=[
            {"role": "developer", "content": "Use the shell."},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "List files"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text",
                                                             "text": "ls it"}]},
            {"type": "function_call", "call_id": "call_1", "name": "shell",
             "arguments": '{"command":["ls"]}'},
            {"type": "function_call", "call_id": "call_2", "name": "shell",
             "arguments": '{"command":["pwd"]}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.py"},
            {"type": "function_call_output", "call_id": "call_2",
             "output": [{"type": "input_text", "text": "/src"}]},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "One file."}]},
        ],
    )  # fmt: skip
    messages = shown(r)
    assert messages[0] == {"role": "system", "content": "Use the shell."}
    assert messages[1] == {"role": "user", "content": "List files"}
    assert messages[2]["role"] == "assistant" and messages[2]["reasoning_content"] == "ls it"
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["call_1", "call_2"]
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "a.py"}
    assert messages[4] == {"role": "tool", "tool_call_id": "call_2", "content": "/src"}
    assert messages[5] == {"role": "assistant", "content": "One file."}
    tools = r.chat().offered_tools()
    assert tools is not None and tools.parallel and tools.choice == "auto"


def test_tool_choice_and_text_format() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    r = request(
        tools=[SHELL],
        tool_choice={"type": "function", "name": "shell"},
        parallel_tool_calls=False,
        text={"format": {"type": "json_schema", "name": "n", "schema": schema, "strict": True}},
    )
    chat = r.chat()
    tools = chat.offered_tools()
    assert tools is not None and tools.choice == "shell" and not tools.parallel
    assert chat.response_format is not None and chat.response_format.json_schema is not None
    assert chat.response_format.json_schema.schema == schema


def test_tools_the_model_cannot_call_are_skipped() -> None:
    web = {"type": "web_search", "external_web_access": False}
    space = {"type": "namespace", "name": "multi_agent_v1", "tools": [SHELL]}
    chat = request(tools=[web, SHELL, space]).chat()
    assert [t.function.name for t in chat.tools or ()] == ["shell"]
    assert request(tools=[web]).chat().tools is None


def test_store_is_accepted_and_nothing_is_kept() -> None:
    assert request(store=True).chat().messages[0].content == "hi"


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"previous_response_id": "resp_1"}, "duo keeps none"),
        ({"conversation": "conv_1"}, "duo keeps none"),
        ({"background": True}, "background"),
        ({"input": [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]},
         "no earlier function_call has the call_id 'call_9'"),
        ({"input": [{"type": "function_call", "name": "shell", "arguments": "{}"}]},
         "'input[0].call_id' is required"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "only text parts are supported"),
        ({"input": [{"type": "web_search_call"}]}, "input[0].type"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": []}, "input"),
        ({"input": 3}, "input"),
        ({"tools": [{"type": "function"}]}, "'tools[0].name' is required"),
        ({"tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
    ],
)  # fmt: skip
def test_bad_requests_name_the_field(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError) as e:
        request(**fields)
    assert words in e.value.message
    assert e.value.param is not None
