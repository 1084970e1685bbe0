"""The errors duo reports to its users.

    DuoError                 anything duo explains to the user in one line
    ├── UsageError           bad command-line or request input (exit 2 / HTTP 400)
    │   └── PromptTooLong    the prompt does not fit the context window
    ├── ModelError           a model file is missing, corrupt or unsupported (exit 2)
    │   └── IncompatibleModels  draft and main vocabularies differ
    └── ProtocolError        a drafter sent something the protocol does not allow

A drafter failure is never a request failure: ProtocolError disconnects the drafter,
never the client.
"""

from __future__ import annotations


class DuoError(Exception):
    """An error with a message meant for the user; never shown as a traceback."""


class UsageError(DuoError):
    """Bad input from the user: a flag, an argument or a request field."""


class PromptTooLong(UsageError):
    """The prompt (plus at least one new token) does not fit the context window."""


class ModelError(DuoError):
    """A model file that cannot be used."""


class IncompatibleModels(ModelError):
    """A draft model whose vocabulary differs from the main model's."""


class ProtocolError(DuoError):
    """A message on the drafter channel that breaks the protocol."""

    def __init__(self, message: str, *, close_code: int = 1002) -> None:
        super().__init__(message)
        self.close_code = close_code  # the WebSocket close code that says why
