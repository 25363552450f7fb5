"""A local stand-in for the hub's HTTP API, as much of it as huggingface_hub's ``create_repo`` and
``upload_folder`` use, so that ``--push-to-hub`` runs as a user runs it (``HF_ENDPOINT`` pointing here) without
the network.

- ``POST /api/repos/create``: records the repository and its visibility; answers its URL.
- ``POST /api/validate-yaml``: the card's front matter must be a YAML mapping (records what was validated).
- ``POST /api/models/{repo}/preupload/{revision}``: every file goes up as a regular (inline, base64) git file,
  so no LFS or Xet storage is involved.
- ``POST /api/models/{repo}/commit/{revision}``: the NDJSON commit; the files are kept, decoded.

A repository named in ``refuse`` is answered 403 at creation, as the hub answers a token without write access.
Every other request is answered 404 and listed in ``unexpected``.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml


@dataclass
class Repository:
    visibility: str | None
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)
    token: str | None = None


class HubStandIn:
    """Start with ``start()`` (a thread serves ``endpoint``), stop with ``stop()``."""

    def __init__(self, refuse: tuple[str, ...] = ()):
        self.repositories: dict[str, Repository] = {}
        self.refuse = set(refuse)
        self.unexpected: list[str] = []
        self.validated: list[dict] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> HubStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self, status: int, payload: dict) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))

            def do_POST(self):
                body = self._body()
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if self.path == "/api/repos/create":
                    payload = json.loads(body)
                    repo_id = f"{payload['organization']}/{payload['name']}"
                    if repo_id in hub.refuse:
                        return self._answer(403, {"error": f"You don't have the rights to create {repo_id}"})
                    hub.repositories.setdefault(repo_id, Repository(payload.get("visibility"), token=token))
                    return self._answer(200, {"url": f"{hub.endpoint}/{repo_id}", "name": repo_id})
                if self.path == "/api/validate-yaml":
                    content = json.loads(body)["content"]
                    matter = re.match(r"---\n(.*?)\n---\n", content, re.DOTALL)
                    metadata = yaml.safe_load(matter.group(1)) if matter else None
                    if not isinstance(metadata, dict):
                        return self._answer(400, {"errors": [{"message": "no YAML metadata mapping"}]})
                    hub.validated.append(metadata)
                    return self._answer(200, {})
                found = re.fullmatch(r"/api/models/(.+)/(preupload|commit)/([^/?]+)", self.path)
                if found is None or found.group(1) not in hub.repositories:
                    hub.unexpected.append(f"POST {self.path}")
                    return self._answer(404, {"error": "not found"})
                repo_id, action = found.group(1), found.group(2)
                if action == "preupload":
                    files = json.loads(body)["files"]
                    return self._answer(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                         "shouldIgnore": False, "oid": None} for f in files]})
                repository = hub.repositories[repo_id]
                for line in body.splitlines():
                    item = json.loads(line)
                    if item["key"] == "header":
                        repository.commits.append(item["value"]["summary"])
                    elif item["key"] == "file":
                        repository.files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    else:
                        hub.unexpected.append(f"commit operation {item['key']}")
                oid = f"{len(repository.commits):040x}"
                return self._answer(200, {"commitUrl": f"{hub.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid})

            def do_GET(self):
                hub.unexpected.append(f"GET {self.path}")
                self._answer(404, {"error": "not found"})

            do_HEAD = do_PUT = do_DELETE = do_GET

        return Handler
