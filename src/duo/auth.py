"""Keys and TLS: who may use the lead, who may draft for it, and how both reach it.

Keys are Bearer tokens (`Authorization: Bearer KEY`; the scheme in any case, RFC 7235), or
an `X-Api-Key: KEY` header (Anthropic's clients) where no Authorization header is sent,
compared in constant time. Two sets:

    API keys      --api-key / --api-key-file / DUO_API_KEY: the API (all but /health), and
                  the drafter channel when no drafter key is set
    drafter keys  --drafter-key / --drafter-key-file / DUO_DRAFTER_KEY: when set, the drafter
                  channel accepts these and only these, and the API never does: a credential
                  that can draft but not use the model (and API clients cannot draft, which
                  would show them everyone's prompts and outputs)

Each set comes from the flag, else the file (one key per line, as llama-server's
--api-key-file), else the environment, so a key need not appear in the process list.

TLS: the lead serves https (and wss for drafters) with --ssl-key-file/--ssl-cert-file;
`duo back` and `duo chat` verify its certificate, against --ca-file when given.
"""

from __future__ import annotations

import hmac
import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from duo.errors import UsageError

API_KEY_ENV = "DUO_API_KEY"
DRAFTER_KEY_ENV = "DUO_DRAFTER_KEY"


# -- checking keys -------------------------------------------------------------------------


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header; None for any other header."""
    parts = (authorization or "").split(None, 1)
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return None
    return parts[1].strip() or None


def credential(headers: Mapping[str, str]) -> str | None:
    """A request's Authorization header; failing that, its X-Api-Key as a Bearer one."""
    authorization = headers.get("authorization")
    key = headers.get("x-api-key")
    return f"Bearer {key}" if authorization is None and key is not None else authorization


def matches(token: str | None, keys: Sequence[str]) -> bool:
    """Whether `token` is one of `keys`, in time that does not depend on where they differ."""
    given = (token or "").encode()
    found = False
    for key in keys:  # every key, even after a match
        found |= hmac.compare_digest(given, key.encode())
    return found and token is not None


@dataclass(frozen=True)
class Keys:
    """Every key the lead accepts; no API key means an open API."""

    api: tuple[str, ...] = ()
    drafter: tuple[str, ...] = ()

    def allows_api(self, authorization: str | None) -> bool:
        return not self.api or matches(bearer_token(authorization), self.api)

    def drafter_refusal(self, authorization: str | None) -> str | None:
        """Why the drafter channel refuses this header; None if it accepts it."""
        keys = self.drafter or self.api
        if not keys or matches(bearer_token(authorization), keys):
            return None
        return "invalid or missing drafter key" if self.drafter else "invalid or missing API key"


KeySpec = Keys | str | None  # LeadConfig.api_key: every key, one API key, or none


def as_keys(keys: KeySpec) -> Keys:
    if isinstance(keys, Keys):
        return keys
    return Keys(api=(keys,)) if keys is not None else Keys()


# -- reading keys --------------------------------------------------------------------------


def _valid(key: str, where: str) -> str:
    if not key or not all("!" <= c <= "~" for c in key):
        raise UsageError(f"{where}: a key must be printable ASCII without spaces")
    return key


def read_key_file(path: str, flag: str) -> tuple[str, ...]:
    """The keys of a key file: one a line, surrounding whitespace and blank lines ignored."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read {flag} {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{flag} {path} is not a text file") from None
    keys = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not keys:
        raise UsageError(f"{flag} {path} holds no key")
    return tuple(_valid(key, f"{flag} {path}") for key in keys)


def resolve_keys(
    value: str | None, file: str | None, env: Sequence[str], flag: str
) -> tuple[str, ...]:
    """Keys from `flag KEY`, else `flag-file PATH`, else the first environment variable set."""
    if value is not None and file is not None:
        raise UsageError(f"give {flag} or {flag}-file, not both")
    if value is not None:
        return (_valid(value.strip(), flag),)
    if file is not None:
        return read_key_file(file, f"{flag}-file")
    for name in env:
        if os.environ.get(name, "").strip():
            return (_valid(os.environ[name].strip(), name),)
    return ()


# -- TLS -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerTls:
    keyfile: str
    certfile: str


def server_tls(keyfile: str | None, certfile: str | None) -> ServerTls | None:
    """The lead's TLS files, checked now so that a bad one fails in one line."""
    if keyfile is None and certfile is None:
        return None
    if keyfile is None or certfile is None:
        raise UsageError("give both --ssl-key-file and --ssl-cert-file, or neither")
    for flag, path in (("--ssl-key-file", keyfile), ("--ssl-cert-file", certfile)):
        try:
            Path(path).read_bytes()
        except OSError as e:
            raise UsageError(f"cannot read {flag} {path}: {e.strerror or e}") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:  # a passphrase-protected key fails here instead of prompting on the terminal
        context.load_cert_chain(certfile, keyfile, password=b"")
    except (ssl.SSLError, OSError) as e:
        raise UsageError(
            f"--ssl-cert-file {certfile} and --ssl-key-file {keyfile} are not a PEM certificate "
            f"and its unencrypted private key ({getattr(e, 'reason', None) or e})"
        ) from None
    return ServerTls(keyfile=keyfile, certfile=certfile)


def client_tls(ca_file: str | None, url_is_https: bool) -> ssl.SSLContext | None:
    """What verifies the lead's certificate: None for a plain http:// lead."""
    if not url_is_https:
        if ca_file is not None:
            raise UsageError("--ca-file needs an https:// lead URL")
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError as e:
        raise UsageError(f"--ca-file {ca_file} holds no PEM certificate ({e.reason})") from None
    except OSError as e:
        raise UsageError(f"cannot read --ca-file {ca_file}: {e.strerror or e}") from None


def certificate_failure(e: BaseException | None) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind an exception, if that is what it is."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, ssl.SSLCertVerificationError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def certificate_reason(e: ssl.SSLCertVerificationError) -> str:
    """'self-signed certificate', 'Hostname mismatch, ...' and the like."""
    return str(e.verify_message or e.reason or e)


HOSTNAME_MISMATCH = 62  # OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH


def certificate_problem(url: str, e: ssl.SSLCertVerificationError, ca_file: str | None) -> str:
    """Why the lead's certificate does not verify, and what fixes that: a certificate for
    another name needs another name (no CA helps); otherwise the CA that signed it."""
    reason = certificate_reason(e)
    if getattr(e, "verify_code", None) == HOSTNAME_MISMATCH:
        fix = (
            "connect by a name or address the certificate holds, or give the lead a "
            "certificate for this one"
        )
    elif ca_file is not None:
        fix = (
            f"--ca-file {ca_file} did not sign it: give the CA that did (or the lead's own "
            "certificate)"
        )
    else:
        fix = "give the CA that signed it (or the self-signed certificate) with --ca-file"
    return f"the certificate of {url} does not verify ({reason}); {fix}"
