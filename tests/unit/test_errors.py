from __future__ import annotations

import pytest

from duo import errors as e


@pytest.mark.parametrize(
    ("error", "status", "kind", "code"),
    [
        (e.UsageError("bad"), 400, "invalid_request_error", 2),
        (e.PromptTooLong("long", param="messages"), 400, "invalid_request_error", 2),
        (e.RequestTooLarge("big"), 413, "invalid_request_error", 2),
        (e.AuthError(), 401, "authentication_error", 2),
        (e.ModelError("corrupt"), 500, "server_error", 2),
        (e.IncompatibleModels("vocab"), 500, "server_error", 2),
        (e.Refused("key"), 500, "server_error", 2),
        (e.CertificateError("untrusted"), 500, "server_error", 2),
        (e.ClientError("gone"), 500, "server_error", 2),
        (e.GenerationFailed("engine"), 500, "server_error", 1),
        (e.ProtocolError("frame"), 500, "server_error", 1),
    ],
)
def test_one_table_maps_every_error(error: e.DuoError, status: int, kind: str, code: int) -> None:
    assert e.http_status(error) == (status, kind)
    assert e.exit_code(error) == code


def test_errors_carry_what_an_api_error_body_needs() -> None:
    too_long = e.PromptTooLong("the prompt has 5000 tokens", param="prompt")
    assert (too_long.message, too_long.param, too_long.code) == (
        "the prompt has 5000 tokens",
        "prompt",
        "context_length_exceeded",
    )
    assert e.AuthError().code == "invalid_api_key"
    assert e.RequestTooLarge("x").code == "request_too_large"
