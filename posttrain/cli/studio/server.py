"""The studio's HTTP server: the standard library's, on 127.0.0.1 only.

Routes (JSON in and out unless said otherwise):

- ``GET /`` (and ``/studio.js``, ``/studio.css``): the page, plain files shipped in ``page/``.
- ``GET /api/schema``: the form (`form.schema_tree`), the file the studio was opened with, its
  working directory.
- ``POST /api/check``: ``{"values", "name", "base"}`` from the form -> the YAML, its problems, the
  plan and the commands; or a YAML document itself (``Content-Type: application/yaml``) -> its
  problems and plan.
- ``POST /api/import``: ``{"path"}`` or ``{"name", "text"}`` -> form values and a translation report.
- ``POST /api/save``: ``{"values", "path", "overwrite"}`` -> writes the config file.

A page on another site could make the browser send requests here: every request must name this
server in ``Host`` (no DNS rebinding) and, when it has an ``Origin``, come from this server's own
page; posts must be JSON or YAML, which browsers do not send across origins without asking first.
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from posttrain.cli.studio import actions
from posttrain.cli.studio.form import schema_tree
from posttrain.errors import UserError

PAGE_FILES = {"/": ("index.html", "text/html"), "/studio.js": ("studio.js", "text/javascript"),
              "/studio.css": ("studio.css", "text/css")}
MAX_BODY = 8 * 2**20  # a config is a few KB; refuse anything absurd before reading it


class StudioServer(ThreadingHTTPServer):
    """The HTTP server and what the page needs from it: the file the studio was opened with, and
    one lock so that one check at a time reads the model and data directories."""

    daemon_threads = True

    def __init__(self, port: int, opened: str | None = None, cwd: str = "."):
        super().__init__(("127.0.0.1", port), StudioHandler)
        self.opened = opened
        self.cwd = cwd
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


class StudioHandler(BaseHTTPRequestHandler):
    server: StudioServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per keystroke's check would drown the URL the command printed

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        if not self._trusted():
            return
        path = self.path.split("?", 1)[0]
        if path in PAGE_FILES:
            name, kind = PAGE_FILES[path]
            body = resources.files("posttrain.cli.studio").joinpath("page", name).read_bytes()
            self._send(HTTPStatus.OK, body, f"{kind}; charset=utf-8")
        elif path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        elif path == "/api/schema":
            self._json({"sections": schema_tree(), "opened": self.server.opened, "cwd": self.server.cwd})
        else:
            self._json({"error": f"no such page: {path}"}, HTTPStatus.NOT_FOUND)

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        if not self._trusted():
            return
        route = {"/api/check": self._check, "/api/import": self._import, "/api/save": self._save}.get(self.path)
        if route is None:
            return self._json({"error": f"no such endpoint: {self.path}"}, HTTPStatus.NOT_FOUND)
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        length = int(self.headers.get("Content-Length") or 0)
        if kind not in ("application/json", "application/yaml", "text/yaml") or length > MAX_BODY:
            return self._json({"error": "send JSON (or YAML to /api/check), at most 8 MiB"}, HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
        body = self.rfile.read(length).decode("utf-8", errors="replace")
        try:
            with self.server.lock:
                self._json(route(kind, body))
        except UserError as err:
            self._json({"error": str(err)}, HTTPStatus.BAD_REQUEST)
        except Exception:  # a bug: the page says so, the terminal keeps the traceback
            traceback.print_exc(file=sys.stderr)
            self._json({"error": "internal error in posttrain studio (the traceback is in its terminal)"},
                       HTTPStatus.INTERNAL_SERVER_ERROR)

    def _check(self, kind: str, body: str) -> dict[str, Any]:
        if kind != "application/json":
            return actions.check_text(body)
        data = _object(body)
        values = data.get("values") or {}
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise UserError("values: expected an object of dotted key -> YAML text")
        return actions.check_values(values, data.get("name") or "studio.yaml", data.get("base"))

    def _import(self, kind: str, body: str) -> dict[str, Any]:
        data = _object(body)
        if data.get("path"):
            return actions.import_config(path=str(data["path"]))
        return actions.import_config(name=data.get("name"), text=str(data.get("text") or ""))

    def _save(self, kind: str, body: str) -> dict[str, Any]:
        data = _object(body)
        return actions.save(data.get("values") or {}, str(data.get("path") or ""), bool(data.get("overwrite")))

    def _trusted(self) -> bool:
        port = self.server.server_address[1]
        hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        origin = self.headers.get("Origin")
        if self.headers.get("Host") not in hosts or (origin is not None and origin not in {f"http://{h}" for h in hosts}):
            self._json({"error": "posttrain studio answers its own page only"}, HTTPStatus.FORBIDDEN)
            return False
        return True

    def _json(self, data: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(status, json.dumps(data).encode("utf-8"), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)


def _object(body: str) -> dict[str, Any]:
    try:
        data = json.loads(body or "{}")
    except json.JSONDecodeError as err:
        raise UserError(f"the request is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise UserError("the request must be a JSON object")
    return data
