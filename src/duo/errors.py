"""The errors duo reports to its users, and what each one becomes: one table.

    DuoError                   anything duo explains in one line (never a traceback)
    ├── UsageError             bad input: a flag, an argument, a request field
    │   ├── PromptTooLong      the prompt does not fit the context window
    │   └── RequestTooLarge    a request body over --max-body
    ├── NotSupported           a request this model cannot serve (infill without FIM tokens)
    ├── AuthError              a missing or wrong API key
    ├── ModelError             a model file that is missing, corrupt or unsupported
    │   └── IncompatibleModels draft and main vocabularies differ
    ├── ProtocolError          a drafter (or lead) broke the drafter channel's protocol
    ├── Refused                the lead refused this drafter at the handshake
    ├── CertificateError       the lead's TLS certificate did not verify
    ├── ClientError            `duo chat`: the lead answered with an error or went away
    └── GenerationFailed       a generation ended by an error on the lead's side

`STATUS` maps each class to its HTTP status and OpenAI error type, `EXIT` to the exit code
of a command that stops on it; the most specific class listed wins. A drafter failure is
never a request failure: a ProtocolError disconnects the drafter, never the client.
"""

from __future__ import annotations

from collections.abc import Mapping


class DuoError(Exception):
    """An error with a message meant for the user; `param` and `code` go into an API error
    body (OpenAI's shape: the request field at fault, a machine-readable code)."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class UsageError(DuoError):
    """Bad input from the user: a flag, an argument or a request field."""


class PromptTooLong(UsageError):
    """The prompt (plus at least one new token) does not fit the context window."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message, param=param, code="context_length_exceeded")


class RequestTooLarge(UsageError):
    """A request body larger than the lead accepts."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="request_too_large")


class NotSupported(DuoError):
    """A request the served model cannot answer (llama-server's 501)."""


class AuthError(DuoError):
    """A missing or wrong key."""

    def __init__(self, message: str = "invalid or missing API key") -> None:
        super().__init__(message, code="invalid_api_key")


class ModelError(DuoError):
    """A model file that cannot be used."""


class IncompatibleModels(ModelError):
    """A draft model whose vocabulary differs from the main model's."""


class ProtocolError(DuoError):
    """A message on the drafter channel that breaks the protocol."""

    def __init__(self, message: str, *, close_code: int = 1002) -> None:
        super().__init__(message)
        self.close_code = close_code  # the WebSocket close code that says why


class Refused(DuoError):
    """The lead refused this drafter at the handshake (wrong key, other vocabulary):
    unlike a protocol error, retrying cannot help."""


class CertificateError(DuoError):
    """The lead's TLS certificate did not verify: retrying cannot fix that."""


class ClientError(DuoError):
    """`duo chat`: a problem to show in one line; a fatal one ends the session."""

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class GenerationFailed(DuoError):
    """A generation that ended by an error on the lead's side (not the client's input)."""


# class -> (HTTP status, OpenAI error type)
STATUS: dict[type[DuoError], tuple[int, str]] = {
    DuoError: (500, "server_error"),
    UsageError: (400, "invalid_request_error"),
    RequestTooLarge: (413, "invalid_request_error"),
    NotSupported: (501, "not_supported_error"),
    AuthError: (401, "authentication_error"),
}

# class -> exit code of a command that stops on it
EXIT: dict[type[DuoError], int] = {
    DuoError: 1,
    UsageError: 2,
    AuthError: 2,
    ModelError: 2,
    Refused: 2,
    CertificateError: 2,
    ClientError: 2,
}


def http_status(e: DuoError) -> tuple[int, str]:
    return STATUS[_most_specific(type(e), STATUS)]


def exit_code(e: DuoError) -> int:
    return EXIT[_most_specific(type(e), EXIT)]


def _most_specific(kind: type[DuoError], table: Mapping[type[DuoError], object]) -> type[DuoError]:
    return next(k for k in kind.__mro__ if k in table)
