"""A local stand-in for the Hugging Face Hub: the endpoints huggingface_hub uses to list a
model repository and download its files, serving local files. Point $HF_ENDPOINT at it."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """`repos` maps "org/name" to {file name in the repo: local path}. `downloads` counts
    the GETs of each file's bytes."""

    def __init__(self, repos: dict[str, dict[str, Path]]) -> None:
        self.repos = repos
        self.downloads: Counter[str] = Counter()
        self._etags: dict[Path, str] = {}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hub._answer(self, body=True)

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _etag(self, path: Path) -> str:
        if path not in self._etags:
            digest = hashlib.sha256()
            with path.open("rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
            self._etags[path] = digest.hexdigest()
        return self._etags[path]

    def _answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(h.path).path).strip("/").split("/")
        if path[:2] == ["api", "models"]:
            repo = "/".join(path[2:4])
            files = self.repos.get(repo)
            if files is None:
                return _send(h, 404, {"error": "Repository not found"}, body, repo_missing=True)
            siblings = [{"rfilename": name} for name in files]
            return _send(h, 200, {"id": repo, "sha": COMMIT, "siblings": siblings}, body)
        if len(path) >= 5 and path[2] == "resolve":
            repo, name = "/".join(path[:2]), "/".join(path[4:])
            local = self.repos.get(repo, {}).get(name)
            if local is None:
                return _send(h, 404, {"error": "Entry not found"}, body)
            size = local.stat().st_size
            h.send_response(200)
            h.send_header("X-Repo-Commit", COMMIT)
            h.send_header("ETag", f'"{self._etag(local)}"')
            h.send_header("Content-Length", str(size))
            h.send_header("Content-Type", "application/octet-stream")
            h.end_headers()
            if body:
                self.downloads[name] += 1
                with local.open("rb") as f:
                    while chunk := f.read(1 << 20):
                        h.wfile.write(chunk)
            return None
        return _send(h, 404, {"error": "not found"}, body)


def _send(
    h: BaseHTTPRequestHandler, status: int, obj: object, body: bool, repo_missing: bool = False
) -> None:
    data = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.send_header("X-Repo-Commit", COMMIT)
    if repo_missing:
        h.send_header("X-Error-Code", "RepoNotFound")
    h.end_headers()
    if body:
        h.wfile.write(data)
