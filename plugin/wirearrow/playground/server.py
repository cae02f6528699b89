"""The playground's HTTP server: the page, its assets and a small JSON API, on 127.0.0.1.

``http.server.ThreadingHTTPServer`` from the standard library; no framework. Every handler
runs inside one guard: a bad request of any kind is answered with ``{"error": ...}`` and
the server keeps serving. API (JSON in, JSON out, except downloads):

    GET  /api/state                       schema tree, sample, the starting plan
    POST /api/preview    {plan, mode, record}      problems, preview rows, dead letters, nested record
    POST /api/schema     {kind, value, message, import_paths}
    POST /api/records    {kind: file|paste|again, path, text, INPUT...}
    POST /api/upload?name=N&size=S&INPUT...   the first bytes of a file, as the body
    POST /api/add_column {plan, mode, path}        -> {plan}
    POST /api/download   {plan, mode, format}      -> the file (yaml, parquet, csv)
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import sys
import traceback
from importlib import resources
from urllib.parse import parse_qsl, urlsplit

from wirearrow.playground.session import PAGE_INPUT_FIELDS, PlaygroundError, SchemaSource, Session

__all__ = ["make_server"]

MAX_BODY = 32 << 20  # a pasted record or a plan; bigger requests are refused unread
SOCKET_TIMEOUT = 30  # seconds a client may take to send its request
_ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _text(body: dict, key: str, default: str = "") -> str:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise PlaygroundError(f"{key} must be a string")
    return value


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "wirearrow-playground"
    timeout = SOCKET_TIMEOUT
    session: Session  # set on the subclass made by make_server

    def log_message(self, format: str, *args) -> None:  # quiet: the terminal shows the URL
        pass

    # -- plumbing ---------------------------------------------------------------------

    def _send(self, status: int, body: bytes, media: str, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: object) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def _raw_body(self, limit: int = MAX_BODY) -> bytes:
        try:
            size = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise _BadRequest(400, "bad Content-Length") from None
        if size < 0 or size > limit:
            self.close_connection = True
            raise _BadRequest(413, f"the request is larger than {limit:,} bytes")
        return self.rfile.read(size)

    def _body(self) -> dict:
        raw = self._raw_body()
        try:
            body = json.loads(raw or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _BadRequest(400, "the request body is not JSON") from None
        if not isinstance(body, dict):
            raise _BadRequest(400, "the request body must be a JSON object")
        return body

    def _guarded(self, route) -> None:
        try:
            route()
        except _BadRequest as err:
            self._json(err.status, {"error": str(err)})
        except PlaygroundError as err:
            self._json(400, {"error": str(err)})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page went away
        except Exception as err:  # never let one request take the server down
            traceback.print_exc(file=sys.stderr)
            with contextlib.suppress(OSError):
                self._json(500, {"error": f"internal error: {type(err).__name__}: {err}"})

    # -- routes -----------------------------------------------------------------------

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _get(self) -> None:
        path = urlsplit(self.path).path
        if path in _ASSETS:
            name, media = _ASSETS[path]
            data = resources.files("wirearrow.playground").joinpath("static", name).read_bytes()
            self._send(200, data, media)
        elif path == "/api/state":
            with self.session.lock:
                self._json(200, self.session.state())
        else:
            raise _BadRequest(404, f"no such page: {path}")

    def _post(self) -> None:
        url = urlsplit(self.path)
        path = url.path
        if path == "/api/upload":  # the body is the file's bytes, the rest in the query
            query = dict(parse_qsl(url.query, keep_blank_values=True))
            data = self._raw_body(self.session.limits.max_upload)
            with self.session.lock:
                self._upload(query, data)
            return
        routes = {
            "/api/preview": self._preview,
            "/api/schema": self._schema,
            "/api/records": self._records,
            "/api/add_column": self._add_column,
            "/api/download": self._download,
        }
        route = routes.get(path)
        if route is None:
            raise _BadRequest(404, f"no such API: {path}")
        body = self._body()
        with self.session.lock:
            route(body)

    def _preview(self, body: dict) -> None:
        record = body.get("record", 0)
        if not isinstance(record, int) or isinstance(record, bool):
            raise PlaygroundError("record must be an integer")
        result = self.session.evaluate(_text(body, "plan"), _text(body, "mode", "yaml"), record)
        self._json(200, result)

    def _schema(self, body: dict) -> None:
        kind = _text(body, "kind", "proto")
        value = _text(body, "value").strip()
        roots = body.get("import_paths") or []
        if isinstance(roots, str):
            roots = [r for r in roots.replace(",", "\n").splitlines() if r.strip()]
        if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
            raise PlaygroundError("import_paths must be a list of directories")
        if kind != "module" and os.path.exists(os.path.expanduser(value)):
            value = os.path.abspath(os.path.expanduser(value))
        roots = tuple(os.path.abspath(os.path.expanduser(r.strip())) for r in roots)
        source = SchemaSource(kind, value, _text(body, "message").strip(), roots)
        self.session.set_schema(source)
        self._json(200, self.session.state())

    def _records(self, body: dict) -> None:
        kind = _text(body, "kind", "file")
        fmt = self.session.record_format(_input_fields(body))
        if kind == "paste":
            self.session.set_records_pasted(_text(body, "text"), fmt)
        elif kind == "again":
            self.session.reread_records(fmt)
        elif kind == "file":
            self.session.set_records_file(_text(body, "path"), fmt)
        else:
            raise PlaygroundError("kind must be file, paste or again")
        self._json(200, self.session.state())

    def _upload(self, query: dict, data: bytes) -> None:
        try:
            size = int(query.get("size") or len(data))
        except ValueError:
            raise PlaygroundError("size must be an integer") from None
        fmt = self.session.record_format(_input_fields(query))
        self.session.set_records_upload(query.get("name") or "upload", data, fmt, size)
        self._json(200, self.session.state())

    def _add_column(self, body: dict) -> None:
        text = self.session.add_column(
            _text(body, "plan"), _text(body, "mode", "yaml"), _text(body, "path")
        )
        self._json(200, {"plan": text})

    def _download(self, body: dict) -> None:
        data, media, name = self.session.download(
            _text(body, "plan"), _text(body, "mode", "yaml"), _text(body, "format", "yaml")
        )
        self._send(200, data, media, {"Content-Disposition": f'attachment; filename="{name}"'})


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # pragma: no cover
        traceback.print_exc(file=sys.stderr)  # logged; the server goes on


def make_server(session: Session, port: int = 0, host: str = "127.0.0.1") -> _Server:
    """A server for ``session`` bound to ``host:port`` (0: a free port); not yet serving."""
    handler = type("SessionHandler", (Handler,), {"session": session})
    return _Server((host, port), handler)


def _input_fields(body: dict) -> dict:
    """The RecordFormat fields a request gives (the page's records form; a query string's
    values are text: "true" / "false" for a flag). Empty: the field's default."""
    given = {}
    for name in PAGE_INPUT_FIELDS:
        value = body.get(name)
        if value in (None, "", False, "false"):
            continue
        if value == "true":
            value = True
        if name == "ignore_unknown_fields" and value is not True:
            raise PlaygroundError("ignore_unknown_fields must be true or false")
        if name != "ignore_unknown_fields" and name != "schema_id" and not isinstance(value, str):
            raise PlaygroundError(f"{name} must be a string")
        given[name] = value
    return given
