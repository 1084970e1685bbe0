"""`duo rpc-server`: lend this machine's compute to a main model elsewhere (llama.cpp RPC)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from duo.cli.values import bind_address, port, positive
from duo.llama.rpc import DEFAULT_PORT
from duo.llama.rpc_server import serve
from duo.net import is_loopback


def add_rpc_server_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    p = sub.add_parser(
        "rpc-server", help="lend this machine's CPU to a main model elsewhere (llama.cpp RPC)"
    )
    p.add_argument(
        "--host",
        type=bind_address,
        default="127.0.0.1",
        help="IPv4 address to bind (default %(default)s)",
    )
    p.add_argument("--port", type=port, default=DEFAULT_PORT, help="port (default %(default)s)")
    p.add_argument(
        "-t", "--threads", type=positive, default=threads, help="CPU threads (default %(default)s)"
    )
    p.add_argument(
        "--cache",
        metavar="DIR",
        type=Path,
        help="keep received tensors in DIR, so a client reloading the model sends only hashes",
    )
    p.set_defaults(func=cmd_rpc_server)


def cmd_rpc_server(args: argparse.Namespace) -> int:
    def ready(device: str) -> None:
        if not is_loopback(args.host):
            _warn_exposed(args.host, args.port)
        reach = "THIS_HOST" if args.host == "0.0.0.0" else args.host
        print(
            f"duo rpc-server: serving {device} with {args.threads} thread(s) on "
            f"{args.host}:{args.port} (clients: --rpc {reach}:{args.port})",
            flush=True,
        )

    try:
        serve(args.host, args.port, args.threads, args.cache, ready)
    except KeyboardInterrupt:
        print("duo rpc-server: stopped", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)  # ggml's server thread sits in accept() and cannot be joined
    return 0


def _warn_exposed(host: str, port: int) -> None:
    bar = "!" * 88
    print(
        f"{bar}\n"
        f"duo rpc-server: WARNING: listening on {host}:{port}, reachable from other machines.\n"
        "The llama.cpp RPC protocol has NO authentication and NO encryption: anyone who can\n"
        "connect can use this machine's compute and memory. Use a trusted private network.\n"
        f"{bar}",
        file=sys.stderr,
        flush=True,
    )
