"""`duo back`: a drafter for a lead, on a spare device or another machine."""

from __future__ import annotations

import argparse
import asyncio
import sys

from duo import auth
from duo.cli import auth_args
from duo.cli.args import add_fanout_arg, add_max_ahead_arg, add_rpc_arg, half_type, offloaded
from duo.cli.hub import add_hub_args
from duo.cli.progress import Spinner
from duo.cli.values import non_negative, positive
from duo.errors import CertificateError, Refused, UsageError, exit_code
from duo.llama.rpc import setup_rpc
from duo.session.config import parse_pin
from duo.session.threads import math_cores

BACK_KEY_ENV = (auth.DRAFTER_KEY_ENV, auth.API_KEY_ENV)  # a back's key, when no flag gives it


def add_back_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    back = sub.add_parser("back", help="run a drafter for a lead (on a spare device or machine)")
    back.add_argument("-m", "--model", help="draft model GGUF (default: the default pair's draft)")
    add_hub_args(back, draft=False, model="draft model")
    back.add_argument("--pair", help="take the draft model of this named pair")
    back.add_argument(
        "--lead", default="http://127.0.0.1:5555", help="the lead's URL (default %(default)s)"
    )
    back.add_argument(
        "-t",
        "--threads",
        type=positive,
        help="threads (default: the physical cores, as llama.cpp counts them)",
    )
    back.add_argument(
        "-ngl",
        "--n-gpu-layers",
        "-ngld",
        type=non_negative,
        help="GPU or rpc-server layers (default 0; every layer with --rpcd)",
    )
    add_rpc_arg(back, draft=False)
    back.add_argument(
        "-c", "--ctx-size", type=non_negative, default=4096, help="context size of each sequence"
    )
    back.add_argument(
        "-np",
        "--parallel",
        type=positive,
        default=4,
        metavar="N",
        help="draft for up to N of the lead's running requests at once (its slots), each "
        "in a sequence of its own, their next tokens in one pass (default %(default)s)",
    )
    add_max_ahead_arg(back, "the back")
    add_fanout_arg(back, "the back")
    auth_args.add_key_args(
        back, "the key to present to the lead: its API key or drafter key", env=BACK_KEY_ENV
    )
    auth_args.add_ca_file_arg(back)
    back.add_argument(
        "--name", default="", help="name shown in the lead's logs and on its web page"
    )
    back.add_argument("--pin", metavar="CORES", help="pin the drafter to cores, e.g. 1 or 2,3")
    back.set_defaults(func=cmd_back)


def cmd_back(args: argparse.Namespace) -> int:
    from duo.channel.back import Back, BackConfig, drafter_url
    from duo.session.config import ModelConfig, open_draft, resolve_models

    if args.rpc and args.rpcd:
        raise UsageError("give a back's rpc-servers with --rpc or --rpcd, not both")
    url = drafter_url(args.lead)  # a bad URL, key or CA file fails before the model loads
    key = auth_args.client_key(args, env=BACK_KEY_ENV)
    tls = auth.client_tls(args.ca_file, url.startswith("wss://"))
    if args.model is None:
        _, draft = resolve_models(None, None, args.pair, progress=Spinner, half=half_type())
        path = draft
    else:
        path = resolve_models(args.model, None, None)[0]
    assert path is not None
    cores, _ = parse_pin(args.pin) if args.pin else (None, None)
    layers = offloaded(args.n_gpu_layers, args.rpcd)
    placement = setup_rpc(args.rpc, n_gpu_layers=layers, rpcd=args.rpcd, n_gpu_layers_draft=layers)
    drafting = ModelConfig(  # a back's one model is a draft model
        main=path,
        draft=path,
        draft_threads=args.threads or (len(cores) if cores else math_cores()),
        n_gpu_layers_draft=layers,
        draft_devices=placement.draft,
    )
    model = open_draft(
        drafting, args.ctx_size, n_seq=args.parallel, forks=args.parallel * args.fanout
    )
    config = BackConfig(
        lead=args.lead,
        max_ahead=args.max_ahead,
        fanout=args.fanout,
        parallel=args.parallel,
        api_key=key,
        name=args.name,
        cores=cores,
        tls=tls,
        ca_file=args.ca_file,
    )
    back = Back(
        model, config, on_connect=lambda url: print(f"duo back: connected to {url}", flush=True)
    )
    print(f"duo back: {path.name} drafting for {args.lead}", flush=True)
    try:
        asyncio.run(back.run())
    except Refused as e:
        print(f"duo back: refused by the lead: {e}", file=sys.stderr)
        return exit_code(e)
    except (CertificateError, UsageError) as e:  # neither is fixed by retrying
        print(f"duo back: {e}", file=sys.stderr)
        return exit_code(e)
    except KeyboardInterrupt:
        print("duo back: stopped", file=sys.stderr)
        return 0
    finally:
        model.close()
    return 0
