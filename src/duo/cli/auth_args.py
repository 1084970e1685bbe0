"""The flags of keys and TLS (duo.auth holds what they mean), and reading them back."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from duo import auth


def lead_keys(args: argparse.Namespace) -> auth.Keys:
    """`duo lead`'s keys from its flags (add_key_args with drafter=True) and environment."""
    return auth.Keys(
        api=auth.resolve_keys(args.api_key, args.api_key_file, [auth.API_KEY_ENV], "--api-key"),
        drafter=auth.resolve_keys(
            args.drafter_key, args.drafter_key_file, [auth.DRAFTER_KEY_ENV], "--drafter-key"
        ),
    )


def client_key(args: argparse.Namespace, env: Sequence[str] = (auth.API_KEY_ENV,)) -> str | None:
    """The key a client presents: --api-key, else the first of --api-key-file, else env."""
    keys = auth.resolve_keys(args.api_key, args.api_key_file, env, "--api-key")
    return keys[0] if keys else None


def add_key_args(
    p: argparse._ActionsContainer,
    what: str,
    *,
    drafter: bool = False,
    env: Sequence[str] = (auth.API_KEY_ENV,),
) -> None:
    """--api-key and --api-key-file (and, with drafter, the lead's drafter keys); `env`:
    the variables read, in order, when neither flag is given (client_key's)."""
    p.add_argument("--api-key", metavar="KEY", help=what)
    p.add_argument(
        "--api-key-file",
        metavar="PATH",
        help="read --api-key from a file (keeps it off the process list; "
        f"default {', else '.join(f'${name}' for name in env)})",
    )
    if drafter:
        p.add_argument(
            "--drafter-key",
            metavar="KEY",
            help="the drafter channel accepts this key instead of --api-key, and the API "
            "refuses it: a key that can draft but not use the model",
        )
        p.add_argument(
            "--drafter-key-file",
            metavar="PATH",
            help="read --drafter-key from a file, one key a line "
            f"(default ${auth.DRAFTER_KEY_ENV})",
        )


def add_server_tls_args(p: argparse._ActionsContainer) -> None:
    p.add_argument("--ssl-key-file", metavar="PEM", help="serve https with this private key")
    p.add_argument("--ssl-cert-file", metavar="PEM", help="... and this certificate (chain)")


def add_ca_file_arg(p: argparse._ActionsContainer) -> None:
    p.add_argument(
        "--ca-file",
        metavar="PEM",
        help="verify the lead's https certificate against this CA (or self-signed "
        "certificate) instead of the system's",
    )
