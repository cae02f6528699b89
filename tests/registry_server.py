"""A small Confluent-REST-compatible schema registry for the tests, on 127.0.0.1.

No schema registry server installs from the package registries here, so the tests talk to
this one with confluent-kafka's real ``SchemaRegistryClient`` (over HTTP, as to Confluent's
server, Karapace, Redpanda or Apicurio's compatibility API). It answers what a client
reading and registering schemas asks (the endpoints of Confluent's API reference):

* ``GET /schemas/ids/{id}``: ``{"schema", "schemaType", "references"}`` (404 + error_code
  40403 for an unknown id);
* ``GET /subjects/{subject}/versions/{version}`` (a number or ``latest``): ``{"subject",
  "id", "version", "schema", "schemaType", "references"}`` (404 + 40401 / 40402);
* ``GET /subjects``, ``GET /subjects/{subject}/versions``;
* ``POST /subjects/{subject}/versions``: registers ``{"schema", "schemaType",
  "references"}``, answers ``{"id"}`` (the same text under the same subject: its id);
* ``POST /subjects/{subject}``: looks a schema up (404 40403 when not registered).

It counts the requests per path so a test can assert what was fetched, and how often.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryServer:
    """Start with :meth:`start` (a free port on 127.0.0.1), stop with :meth:`stop`."""

    def __init__(self) -> None:
        self.schemas: dict[int, dict[str, Any]] = {}  # id -> {schema, schemaType, references}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids, version i+1 at [i]
        self.requests: Counter[str] = Counter()
        self.fail = False  # True: every request is answered 500 (a registry that is down)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- the registry ------------------------------------------------------------------

    def register(
        self, subject: str, schema: str, references: list[dict] | None = None, kind: str = "PROTOBUF"
    ) -> int:
        """Register ``schema`` under ``subject`` (its next version); returns its id."""
        refs = list(references or [])
        with self._lock:
            for sid, held in self.schemas.items():
                if held["schema"] == schema and held["references"] == refs and held["schemaType"] == kind:
                    versions = self.subjects.setdefault(subject, [])
                    if sid not in versions:
                        versions.append(sid)
                    return sid
            sid = max(self.schemas, default=0) + 1
            self.schemas[sid] = {"schema": schema, "schemaType": kind, "references": refs}
            self.subjects.setdefault(subject, []).append(sid)
            return sid

    # -- serving -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> RegistryServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                server._answer(self, "GET", None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server._answer(self, "POST", body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def _answer(self, handler: BaseHTTPRequestHandler, method: str, body: Any) -> None:
        path = urlsplit(handler.path).path
        parts = [unquote(p) for p in path.strip("/").split("/")]
        with self._lock:
            self.requests[f"{method} {path}"] += 1
        if self.fail:
            return _send(handler, 500, {"error_code": 50001, "message": "registry down"})
        status, answer = self._route(method, parts, body)
        _send(handler, status, answer)

    def _route(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
        with self._lock:
            if method == "GET" and parts[:2] == ["schemas", "ids"] and len(parts) == 3:
                held = self.schemas.get(int(parts[2]))
                if held is None:
                    return 404, {"error_code": 40403, "message": "Schema not found"}
                return 200, {k: v for k, v in held.items() if v or k == "schema"}
            if method == "GET" and parts == ["subjects"]:
                return 200, sorted(self.subjects)
            if parts[:1] == ["subjects"] and len(parts) >= 2:
                subject = parts[1]
                versions = self.subjects.get(subject)
                if method == "GET" and parts[2:] == ["versions"]:
                    if versions is None:
                        return 404, {"error_code": 40401, "message": "Subject not found"}
                    return 200, list(range(1, len(versions) + 1))
                if method == "GET" and len(parts) == 4 and parts[2] == "versions":
                    if versions is None:
                        return 404, {"error_code": 40401, "message": "Subject not found"}
                    n = len(versions) if parts[3] in ("latest", "-1") else int(parts[3])
                    if not 1 <= n <= len(versions):
                        return 404, {"error_code": 40402, "message": "Version not found"}
                    return 200, self._registered(subject, n)
                if method == "POST" and len(parts) == 2:  # look a schema up
                    for n, sid in enumerate(versions or [], start=1):
                        if self.schemas[sid]["schema"] == body.get("schema"):
                            return 200, self._registered(subject, n)
                    return 404, {"error_code": 40403, "message": "Schema not found"}
        if method == "POST" and parts[:1] == ["subjects"] and parts[2:] == ["versions"]:
            sid = self.register(
                parts[1], body["schema"], body.get("references"), body.get("schemaType", "AVRO")
            )
            return 200, {"id": sid}
        return 404, {"error_code": 404, "message": f"no such endpoint: {'/'.join(parts)}"}

    def _registered(self, subject: str, version: int) -> dict[str, Any]:
        sid = self.subjects[subject][version - 1]
        held = self.schemas[sid]
        return {"subject": subject, "version": version, "id": sid, **held}


def _send(handler: BaseHTTPRequestHandler, status: int, answer: Any) -> None:
    data = json.dumps(answer).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", _TYPE)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
