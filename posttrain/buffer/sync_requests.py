"""The dynamic synchronizer's messages between explorer and trainer, as small files beside the
published weights (`posttrain.buffer.weights`).

Trinity-RFT's `sync_style: dynamic_by_explorer | dynamic_by_trainer` move weights when one side
asks, not on a fixed schedule. Three messages carry that here, each one file written atomically:

- `sync_request.json` {"id", "held"}: the explorer asks for the trainer's current weights (request
  `id`, counting up over the run; `held` is the trainer step whose weights it samples with);
- `sync_answer.json` {"id", "step"}: the trainer answered request `id` with the weights of `step`
  (published before the answer, so the explorer finds them; the same step as `held` when the
  trainer has trained nothing since);
- `trainer_wants_sync.json` {"step"}: with dynamic_by_trainer, the trainer wants the explorer to sync
  (it has trained sync_interval steps since the last sync); removed when it answers.

A side that is killed leaves its files; the rerun reads them: a pending request is answered by the
resumed trainer, a stale wish makes the explorer sync once more. Neither loses or repeats a batch.
"""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.files import atomic_write_text

REQUEST, ANSWER, WANT = "sync_request.json", "sync_answer.json", "trainer_wants_sync.json"


class SyncRequests:
    """The request/answer files in `directory` (the published weights' directory)."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)

    # ---------------------------------------------------------------- explorer side
    def ask(self, held: int) -> int:
        """Ask for the trainer's current weights while holding those of step `held`; returns the request id."""
        last = max(self._read(REQUEST).get("id", 0), self._read(ANSWER).get("id", 0))
        atomic_write_text(self.dir / REQUEST, json.dumps({"id": last + 1, "held": held}))
        return last + 1

    def answer_to(self, request: int) -> int | None:
        """The trainer step whose weights answered `request`, or None while it is unanswered."""
        found = self._read(ANSWER)
        return int(found["step"]) if found.get("id", 0) >= request else None

    def trainer_wants(self) -> int | None:
        """The trainer step after which the trainer asked for a sync (dynamic_by_trainer), if it did."""
        return self._read(WANT).get("step")

    # ---------------------------------------------------------------- trainer side
    def pending(self) -> tuple[int, int] | None:
        """(id, held step) of the explorer's unanswered request, if there is one."""
        request = self._read(REQUEST)
        if not request or request["id"] <= self._read(ANSWER).get("id", 0):
            return None
        return int(request["id"]), int(request["held"])

    def answer(self, request: int, step: int) -> None:
        """Tell the explorer that the weights of `step` (already published) answer `request`; a wish
        to sync is fulfilled by it."""
        atomic_write_text(self.dir / ANSWER, json.dumps({"id": request, "step": step}))
        (self.dir / WANT).unlink(missing_ok=True)

    def want(self, step: int) -> None:
        if self.trainer_wants() is None:
            atomic_write_text(self.dir / WANT, json.dumps({"step": step}))

    def _read(self, name: str) -> dict:
        try:
            return json.loads((self.dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # absent (nothing asked yet) or, never expected, unreadable
            return {}
