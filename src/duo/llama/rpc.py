"""Split a model across machines with llama.cpp's RPC backend (ggml-rpc), through ctypes.

    duo rpc-server --host 10.0.0.2 --port 50052   # on each machine that lends its compute
    duo generate --rpc 10.0.0.2:50052,10.0.0.3:50052 -ngl 99 ...
    duo generate ... --rpcd 10.0.0.4:50052         # the draft model's layers on another

`duo.llama.rpc_server.serve()` runs ggml's RPC server on this machine's CPU (the client's
ctypes typing of ggml is shared with it here); `register()` makes remote servers
visible to llama.cpp as devices (RPC0, RPC1, ...) before a model loads, and `-ngl` then puts
layers on them (llama.cpp splits the layers by the memory each server reports). With
`--rpcd`, `setup_rpc` says which devices each model may use (`Placement`): the draft model
those servers, the main model every other one.

ggml aborts the whole process when it cannot reach or parse an endpoint, so `register()`
first checks each one in Python (TCP connect plus the RPC HELLO handshake, with timeouts) and
reports a problem as a one-line error. A server that dies after that still aborts the
process (ggml has no recovery); `register()` installs an abort hook that at least says why in
one line instead of a backtrace.

llama-cpp-python ships each library twice, as copies (libggml.so and libggml.so.0), and each
copy has its own device list: a client registers its servers in the libggml.so.0 that
libllama linked, or llama.cpp never sees them. The RPC protocol has no authentication: a
server reachable from a network lends this machine's compute and memory to anyone on it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import socket
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duo.errors import UsageError

log = logging.getLogger(__name__)

DEFAULT_PORT = 50052  # llama.cpp's rpc-server default
GGML_LIB = "libggml.so.0"  # the soname libllama links (not the wheel's separate libggml.so copy)
CPU_DEVICE, _GPU, _IGPU = 0, 1, 2  # enum ggml_backend_dev_type
ALL_LAYERS = 999  # -ngl/-ngld: every layer (llama.cpp caps it at the model's count)

# The HELLO handshake of ggml-rpc (ggml/include/ggml-rpc.h, ggml/src/ggml-rpc/ggml-rpc.cpp):
# request  | cmd u8 = 14 | size u64 = 24 | conn_caps[24] (all zero: plain TCP) |
# response | size u64 = 28 | major u8 | minor u8 | patch u8 | pad u8 | conn_caps[24] |
_PROTO_MAJOR, _PROTO_MINOR = 7, 0
_HELLO = bytes([14]) + struct.pack("=Q", 24) + bytes(24)
_HELLO_RSP = 28

_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")
_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)  # -> ggml_backend_reg_t
_ABORT_HOOK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)

_lock = threading.Lock()
_registered: dict[str, list[str]] = {}  # endpoint -> names of its devices (RPC0, ...)
_abort_hook: Any = None  # kept alive for as long as ggml may call it


# -- endpoints (pure) --------------------------------------------------------------------


def parse_endpoints(text: str, flag: str = "--rpc") -> list[str]:
    """'HOST:PORT[,HOST:PORT...]' -> normalised endpoints; UsageError on anything else."""
    endpoints: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            raise UsageError(f"{flag} expects HOST:PORT[,HOST:PORT...], not {text!r}")
        host, sep, port_text = item.rpartition(":")
        if not sep or not host:
            raise UsageError(f"{flag}: {item!r} needs a port, as in {item}:{DEFAULT_PORT}")
        if ":" in host or host.startswith("["):
            raise UsageError(f"{flag}: {item!r}: llama.cpp's RPC backend supports IPv4 only")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise UsageError(f"{flag}: {item!r}: the port must be a number from 1 to 65535")
        if not _HOST.fullmatch(host):
            raise UsageError(f"{flag}: {item!r}: {host!r} is not a host name or IPv4 address")
        endpoint = f"{host}:{int(port_text)}"
        if endpoint in endpoints:
            raise UsageError(f"{flag}: {endpoint} is listed twice")
        endpoints.append(endpoint)
    return endpoints


def probe(endpoint: str, timeout: float = 5.0, flag: str = "--rpc") -> tuple[int, int, int]:
    """Check that a llama.cpp RPC server answers at `endpoint`; return its protocol version.

    Mirrors what ggml does (IPv4, then HELLO) so ggml cannot abort on what this accepts.
    """
    host, _, port_text = endpoint.rpartition(":")
    port = int(port_text)
    try:
        ip = str(socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except (socket.gaierror, UnicodeError):
        raise UsageError(f"{flag} {endpoint}: cannot resolve {host!r}") from None
    try:
        with socket.create_connection((ip, port), timeout=timeout) as s:
            s.sendall(_HELLO)
            size = struct.unpack("=Q", _recv(s, 8))[0]
            if size != _HELLO_RSP:
                raise ConnectionResetError
            major, minor, patch = _recv(s, _HELLO_RSP)[:3]
    except ConnectionRefusedError:
        raise UsageError(
            f"{flag} {endpoint}: nothing listens there (start one with duo rpc-server "
            f"--host {host} --port {port})"
        ) from None
    except TimeoutError:
        raise UsageError(
            f"{flag} {endpoint}: no RPC answer within {timeout:g} s (an rpc-server serves "
            "one client at a time: is another process using it? or is it no rpc-server?)"
        ) from None
    except (ConnectionError, struct.error):
        raise UsageError(
            f"{flag} {endpoint}: not a llama.cpp RPC server (no valid HELLO answer)"
        ) from None
    except OSError as e:
        raise UsageError(f"{flag} {endpoint}: cannot connect: {e.strerror or e}") from None
    if major != _PROTO_MAJOR or minor > _PROTO_MINOR:
        raise UsageError(
            f"{flag} {endpoint}: the server speaks RPC protocol {major}.{minor}.{patch}, this "
            f"llama.cpp speaks {_PROTO_MAJOR}.{_PROTO_MINOR}.x (use the same version on both)"
        )
    return major, minor, patch


def check_endpoints(text: str | None, flag: str = "--rpc") -> None:
    """Each endpoint of a flag answers as an rpc-server (else a one-line UsageError), without
    registering it: for a process that leaves the servers to another (a worker, a back)."""
    for endpoint in parse_endpoints(text, flag) if text else ():
        probe(endpoint, flag=flag)


def _recv(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError
        data += chunk
    return data


# -- client ------------------------------------------------------------------------------


def register(endpoints: list[str], timeout: float = 5.0, flag: str = "--rpc") -> list[str]:
    """Make the RPC servers at `endpoints` llama.cpp devices; call before any model loads.

    Every endpoint is checked first (UsageError if one does not answer), so ggml never gets
    to abort on it. Idempotent per endpoint. Returns the names of these endpoints' devices.
    """
    with _lock:
        new = [e for e in endpoints if e not in _registered]
        for endpoint in new:
            probe(endpoint, timeout, flag)
        if new:
            ggml = _client_ggml()
            add_server = _ADD_SERVER(rpc_proc(ggml, "ggml_backend_rpc_add_server"))
            _install_abort_hook(ggml)
            for endpoint in new:
                reg = add_server(endpoint.encode())
                if not reg:
                    raise UsageError(f"{flag} {endpoint}: the server offers no devices")
                ggml.ggml_backend_register(reg)
                count = ggml.ggml_backend_reg_dev_count(reg)
                names = [
                    ggml.ggml_backend_dev_name(ggml.ggml_backend_reg_dev_get(reg, i)).decode()
                    for i in range(count)
                ]
                _registered[endpoint] = names
                log.info("rpc: %s -> device %s", endpoint, ", ".join(names))
        return [name for e in endpoints for name in _registered[e]]


@dataclass(frozen=True)
class Placement:
    """The devices each model may put its offloaded layers on (None: llama.cpp's choice,
    every GPU and rpc-server there is)."""

    main: tuple[str, ...] | None = None
    draft: tuple[str, ...] | None = None


def setup_rpc(
    rpc: str | None, *, n_gpu_layers: int, rpcd: str | None = None, n_gpu_layers_draft: int = 0
) -> Placement:
    """--rpc and --rpcd: register their servers (before any model loads). With --rpcd the
    draft model's layers go to its servers only, and the main model's to every other
    device; without it llama.cpp chooses, as before."""
    main = register(parse_endpoints(rpc)) if rpc is not None else []
    if rpc is not None and n_gpu_layers == 0:
        log.warning(
            "--rpc without -ngl: no layers go to the RPC servers "
            "(use -ngl 99 to put them all there)"
        )
    if rpcd is None:
        return Placement()
    draft = register(parse_endpoints(rpcd, "--rpcd"), flag="--rpcd")
    if n_gpu_layers_draft == 0:
        log.warning("--rpcd with -ngld 0: no draft layers go to its servers")
    return Placement(main=(*main, *local_gpus()), draft=tuple(draft))


def local_gpus() -> list[str]:
    """The names of this machine's own GPUs, as llama.cpp would offload to them by default
    (integrated ones only when there is no other)."""
    ggml = _client_ggml()
    gpus: list[str] = []
    igpus: list[str] = []
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        reg = ggml.ggml_backend_reg_name(ggml.ggml_backend_dev_backend_reg(dev)).decode()
        kind = ggml.ggml_backend_dev_type(dev)
        if reg != "RPC" and kind in (_GPU, _IGPU):
            (gpus if kind == _GPU else igpus).append(ggml.ggml_backend_dev_name(dev).decode())
    return gpus or igpus


def device_list(names: Sequence[str] | None) -> ctypes.Array[ctypes.c_void_p] | None:
    """Model(devices=) for these device names: a NULL-terminated array (an empty one keeps
    every layer on the CPU); None for llama.cpp's own choice."""
    if names is None:
        return None
    ggml = _client_ggml()
    handles = []
    for name in names:
        dev = ggml.ggml_backend_dev_by_name(name.encode())
        if not dev:
            raise UsageError(f"llama.cpp has no device named {name}")
        handles.append(dev)
    return (ctypes.c_void_p * (len(handles) + 1))(*handles, None)


def _client_ggml() -> ctypes.CDLL:
    """The libggml.so.0 that libllama linked (loading libllama first), never another copy."""
    from duo.llama.backend import _llama

    libllama = Path(_llama().llama_cpp._lib._name)
    path = libllama.with_name(GGML_LIB)
    try:
        # RTLD_NOLOAD: only an already loaded library, i.e. the one libllama itself uses.
        return typed_ggml(ctypes.CDLL(str(path), mode=os.RTLD_NOLOAD))
    except OSError:
        raise UsageError(f"cannot find the ggml library llama.cpp uses ({path})") from None


def _install_abort_hook(ggml: ctypes.CDLL) -> None:
    global _abort_hook
    if _abort_hook is None:
        _abort_hook = _ABORT_HOOK(_on_abort)
        ggml.ggml_set_abort_callback.restype = ctypes.c_void_p
        ggml.ggml_set_abort_callback.argtypes = [_ABORT_HOOK]
        ggml.ggml_set_abort_callback(_abort_hook)


def _on_abort(message: bytes | None) -> None:
    # ggml calls abort() right after this: say why in one line (no traceback, no backtrace).
    text = (message or b"").decode("utf-8", "replace").strip().replace("\n", " ")
    text = re.sub(r"^\S*/", "", text)  # the build directory of the source file says nothing
    os.write(2, f"\nduo: fatal: llama.cpp aborted: {text}\n".encode())


def typed_ggml(ggml: ctypes.CDLL) -> ctypes.CDLL:
    vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    for name, restype, argtypes in (
        ("ggml_backend_reg_by_name", vp, [cp]),
        ("ggml_backend_reg_get_proc_address", vp, [vp, cp]),
        ("ggml_backend_register", None, [vp]),
        ("ggml_backend_reg_dev_count", sz, [vp]),
        ("ggml_backend_reg_dev_get", vp, [vp, sz]),
        ("ggml_backend_dev_by_type", vp, [ctypes.c_int]),
        ("ggml_backend_dev_by_name", vp, [cp]),
        ("ggml_backend_dev_count", sz, []),
        ("ggml_backend_dev_get", vp, [sz]),
        ("ggml_backend_dev_type", ctypes.c_int, [vp]),
        ("ggml_backend_dev_backend_reg", vp, [vp]),
        ("ggml_backend_reg_name", cp, [vp]),
        ("ggml_backend_dev_name", cp, [vp]),
        ("ggml_backend_dev_description", cp, [vp]),
        ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
    ):
        fn = getattr(ggml, name)
        fn.restype, fn.argtypes = restype, argtypes
    return ggml


def rpc_proc(ggml: ctypes.CDLL, name: str) -> int:
    reg = ggml.ggml_backend_reg_by_name(b"RPC")
    address = ggml.ggml_backend_reg_get_proc_address(reg, name.encode()) if reg else None
    if not address:
        raise UsageError(
            "this llama.cpp build has no RPC backend (rebuild llama-cpp-python with "
            "-DGGML_RPC=ON, as scripts/llama-wheel.sh does)"
        )
    return int(address)
