"""A `posttrain studio` server on a free port in a thread, a plain HTTP client for it, and the
tiny model and data its plans read (shared by the HTTP and the browser tests)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from posttrain.cli.studio.server import StudioServer
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data


@dataclass
class Reply:
    status: int
    body: bytes
    kind: str

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Client:
    url: str

    def get(self, path: str, headers: dict[str, str] | None = None) -> Reply:
        return self._send(urllib.request.Request(self.url + path.lstrip("/"), headers=headers or {}))

    def post(self, path: str, body: Any, kind: str = "application/json", headers: dict[str, str] | None = None) -> Reply:
        data = (json.dumps(body) if kind == "application/json" else body).encode("utf-8")
        request = urllib.request.Request(self.url + path.lstrip("/"), data=data, method="POST",
                                         headers={"Content-Type": kind, **(headers or {})})
        return self._send(request)

    @staticmethod
    def _send(request: urllib.request.Request) -> Reply:
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return Reply(response.status, response.read(), response.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as err:
            return Reply(err.code, err.read(), err.headers.get("Content-Type", ""))


def serve(opened: str | None = None, cwd: str = ".") -> Iterator[tuple[StudioServer, Client]]:
    """A running studio server (stopped when the generator closes): use as a fixture body."""
    server = StudioServer(0, opened=opened, cwd=cwd)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, Client(server.url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def tiny_files(root: Path) -> dict[str, str]:
    """A 1-layer model and the sort task under ``root``, and form values of an RL config over them
    (4 prompts x 2 responses, one step) that validates and plans."""
    model = make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=8, test=4, sft=0, dpo=0)
    return {
        "model.path": str(model),
        "data.train_files": str(root / "data" / "train.parquet"),
        "data.max_prompt_length": "32",
        "data.max_response_length": "6",
        "data.train_batch_size": "4",
        "rollout.n": "2",
        "actor.ppo_mini_batch_size": "4",
        "actor.ppo_micro_batch_size_per_gpu": "8",
        "trainer.total_training_steps": "1",
        "trainer.logger": "[]",
        "trainer.default_local_dir": str(root / "run"),
    }
