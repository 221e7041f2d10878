"""Calling a test's HTTP server (posttrain serve, trainer.mode serve) the way a client would."""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def call(port, path, body=None, raw=None):
    """(status, parsed JSON) of a GET (no body) or a POST of `body` as JSON, or of the bytes `raw` as they are."""
    data = raw if raw is not None else json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
