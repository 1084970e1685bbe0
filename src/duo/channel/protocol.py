"""The drafter channel: compact binary messages between the lead and its backs.

One WebSocket binary message per frame: a 1-byte type, then fixed little-endian fields,
then token IDs packed at the width agreed in the handshake (2 bytes when the vocabulary
has at most 65536 tokens, else 4). Only token IDs and small integers cross the wire.

    back -> lead   HELLO    version u16, n_vocab u32, fingerprint 8 bytes, machine 8 bytes,
                            threads u16, name (<= 64 bytes)   (machine and threads: since 4)
    lead -> back   WELCOME  version u16, token width u8        (the version both speak)
    lead -> back   REFUSE   reason (utf-8), then the lead closes the connection
    lead -> back   BEGIN    session u32, prompt tokens          (a new generation)
    lead -> back   COMMIT   session u32, start u32, tokens      (committed at start, start+1...)
    lead -> back   END      session u32                         (the generation is over)
    back -> lead   DRAFT    session u32, start u32, tokens      (guesses from position start on;
                                                                 replaces any earlier guess there)
    back -> lead   APPEND   tokens                              (guesses right after the last
                                                                 DRAFT/APPEND, for the session
                                                                 of the last DRAFT)
    back -> lead   BRANCH   session u32, fork u32, at u8, tokens
                                                                (a branch of the session's
                                                                 draft: its guesses up to
                                                                 position fork, then these from
                                                                 the branch's token `at` on;
                                                                 at 0 replaces the branch at fork)
    lead -> back   REST     resting u8                          (1: draft nothing; the lead sends
                                                                 no COMMIT meanwhile; 0: draft
                                                                 again, after a COMMIT per
                                                                 session of what it missed.
                                                                 Since 4)

A back drafts one token at a time, so most of its frames are APPENDs: 1 byte of header.
A lead takes at most MAX_DRAFT_TOKENS tokens in one DRAFT, APPEND or BRANCH (more cannot
be used).

The lead speaks every version from OLDEST on and answers in the older of the two: a back
of version 3 never hears REST, and is served as before (its drafts are never rested).
`machine` tells the lead whether the back shares its machine (and so its cores): a hash
of the machine's ID, never the ID itself; `threads`, how many the back drafts on.

A draft is a small tree: a chain of guesses, and branches that leave the chain at a
position where the drafter was unsure, with its runner-up token there (fan-out). Each
branch's parent is a node of the chain, so a branch travels as its fork position and its
own tokens; the lead rebuilds the whole path from the chain it holds.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from duo.errors import ProtocolError

VERSION = 4  # 3: BRANCH frames; 4: REST frames, HELLO's machine and threads
OLDEST = 3  # the oldest version a lead serves
PATH = "/v1/drafter"
MAX_TOKENS_PER_FRAME = 1 << 16
MAX_DRAFT_TOKENS = 256  # per DRAFT/APPEND frame: far more than a round verifies
MAX_NAME = 64  # bytes of a drafter's name
# Shown on the lead's dashboard, never trusted: the back's draft model, and the back's
# address as `duo lead --rpc`'s supervisor saw it (taken from loopback peers only).
MODEL_HEADER = "x-duo-model"
PEER_HEADER = "x-duo-peer"

HELLO, WELCOME, REFUSE, BEGIN, COMMIT, END, DRAFT, APPEND, BRANCH, REST = range(1, 11)

_HELLO_V3 = struct.Struct("<BHI8s")
_HELLO = struct.Struct("<BHI8s8sH")
_WELCOME = struct.Struct("<BHB")
_SESSION = struct.Struct("<BI")
_POSITIONED = struct.Struct("<BII")
_BRANCH = struct.Struct("<BIIB")
MAX_AT = 255  # a branch's tokens past its fork, as one frame's `at` can say


@dataclass(frozen=True, slots=True)
class Hello:
    version: int
    n_vocab: int
    fingerprint: str  # 16 hex digits
    name: str
    machine: str = ""  # 16 hex digits: a hash of the back's machine ID ("": not told)
    threads: int = 0  # the back's drafting threads (0: not told)


@dataclass(frozen=True, slots=True)
class Welcome:
    version: int
    token_width: int


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


@dataclass(frozen=True, slots=True)
class Rest:
    resting: bool


@dataclass(frozen=True, slots=True)
class Begin:
    session: int
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Commit:
    session: int
    start: int
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class End:
    session: int


@dataclass(frozen=True, slots=True)
class DraftMsg:
    session: int
    start: int
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Append:
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Branch:
    session: int
    fork: int
    at: int
    tokens: tuple[int, ...]


Message = Hello | Welcome | Refuse | Begin | Commit | End | DraftMsg | Append | Branch | Rest


def token_width(n_vocab: int) -> int:
    return 2 if n_vocab <= 1 << 16 else 4


def _pack_tokens(tokens: Sequence[int], width: int) -> bytes:
    try:
        return array("H" if width == 2 else "I", tokens).tobytes()
    except OverflowError:
        raise ProtocolError("token ID does not fit the agreed width") from None


def _unpack_tokens(data: bytes, width: int, most: int = MAX_TOKENS_PER_FRAME) -> tuple[int, ...]:
    if len(data) % width:
        raise ProtocolError("token payload is not a whole number of tokens")
    if len(data) // width > most:
        raise ProtocolError(f"more than {most} tokens in one frame")
    values = array("H" if width == 2 else "I")
    values.frombytes(data)
    return tuple(values)


def printable(raw: bytes) -> str:
    """A peer's name as it may be shown: MAX_NAME bytes at most, no control characters
    (no forged log lines, no terminal escapes)."""
    text = raw[:MAX_NAME].decode("utf-8", "replace")
    return "".join(c for c in text if c.isprintable())


def encode(msg: Message, width: int = 4) -> bytes:
    match msg:
        case Hello(version, n_vocab, fingerprint, name, machine, threads):
            fp = bytes.fromhex(fingerprint)
            head = (
                _HELLO_V3.pack(HELLO, version, n_vocab, fp)
                if version < 4
                else _HELLO.pack(
                    HELLO, version, n_vocab, fp, bytes.fromhex(machine or "0" * 16), threads
                )
            )
            return head + name.encode()[:MAX_NAME]
        case Welcome(version, w):
            return _WELCOME.pack(WELCOME, version, w)
        case Refuse(reason):
            return bytes([REFUSE]) + reason.encode()
        case Begin(session, tokens):
            return _SESSION.pack(BEGIN, session) + _pack_tokens(tokens, width)
        case End(session):
            return _SESSION.pack(END, session)
        case Commit(session, start, tokens):
            return _POSITIONED.pack(COMMIT, session, start) + _pack_tokens(tokens, width)
        case DraftMsg(session, start, tokens):
            return _POSITIONED.pack(DRAFT, session, start) + _pack_tokens(tokens, width)
        case Append(tokens):
            return bytes([APPEND]) + _pack_tokens(tokens, width)
        case Branch(session, fork, at, tokens):
            return _BRANCH.pack(BRANCH, session, fork, at) + _pack_tokens(tokens, width)
        case Rest(resting):
            return bytes([REST, resting])
    raise TypeError(f"not a protocol message: {msg!r}")


def decode(data: bytes | str, width: int = 4) -> Message:
    """Parse one frame; raise ProtocolError for anything malformed."""
    if not isinstance(data, bytes | bytearray) or not data:
        raise ProtocolError("expected a non-empty binary frame")
    data = bytes(data)
    kind = data[0]
    try:
        if kind == HELLO:
            _, version, n_vocab, fp = _HELLO_V3.unpack_from(data)
            if version < 4:
                return Hello(version, n_vocab, fp.hex(), printable(data[_HELLO_V3.size :]))
            *_, machine, threads = _HELLO.unpack_from(data)
            name = printable(data[_HELLO.size :])
            return Hello(version, n_vocab, fp.hex(), name, machine.hex(), threads)
        if kind == WELCOME:
            _, version, w = _WELCOME.unpack(data)
            if w not in (2, 4):
                raise ProtocolError(f"bad token width {w}")
            return Welcome(version, w)
        if kind == REFUSE:
            return Refuse(data[1:].decode("utf-8", "replace"))
        if kind in (BEGIN, END):
            _, session = _SESSION.unpack_from(data)
            if kind == END:
                if len(data) != _SESSION.size:
                    raise ProtocolError("END frame has trailing bytes")
                return End(session)
            return Begin(session, _unpack_tokens(data[_SESSION.size :], width))
        if kind in (COMMIT, DRAFT):
            _, session, start = _POSITIONED.unpack_from(data)
            tokens = _unpack_tokens(data[_POSITIONED.size :], width)
            return (Commit if kind == COMMIT else DraftMsg)(session, start, tokens)
        if kind == APPEND:
            return Append(_unpack_tokens(data[1:], width))
        if kind == BRANCH:
            _, session, fork, at = _BRANCH.unpack_from(data)
            return Branch(session, fork, at, _unpack_tokens(data[_BRANCH.size :], width))
        if kind == REST:
            if len(data) != 2 or data[1] > 1:
                raise ProtocolError("a REST frame is one byte, 0 or 1")
            return Rest(bool(data[1]))
    except struct.error:
        raise ProtocolError(f"truncated frame of type {kind}") from None
    raise ProtocolError(f"unknown frame type {kind}")


def decode_draft(data: bytes, width: int, n_vocab: int) -> DraftMsg | Append | Branch:
    """Parse a frame from a back: only DRAFT, APPEND or BRANCH, at most MAX_DRAFT_TOKENS
    tokens, every token inside the vocabulary (checked in C: max() over the packed array)."""
    kind = data[0] if data else None
    most = MAX_DRAFT_TOKENS
    try:
        msg: DraftMsg | Append | Branch
        if kind == DRAFT:
            _, session, start = _POSITIONED.unpack_from(data)
            msg = DraftMsg(session, start, _unpack_tokens(data[_POSITIONED.size :], width, most))
        elif kind == APPEND:
            msg = Append(_unpack_tokens(data[1:], width, most))
        elif kind == BRANCH:
            _, session, fork, at = _BRANCH.unpack_from(data)
            msg = Branch(session, fork, at, _unpack_tokens(data[_BRANCH.size :], width, most))
        else:
            raise ProtocolError(f"a drafter may only send drafts, got a frame of type {kind}")
    except struct.error:
        raise ProtocolError(f"truncated frame of type {kind}") from None
    if msg.tokens and max(msg.tokens) >= n_vocab:
        raise ProtocolError("draft token outside the vocabulary")
    return msg
