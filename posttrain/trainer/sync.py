"""The synchronizer of a decoupled run: when the trainer's weights reach the explorer.

`synchronizer.sync_style` (Trinity-RFT's SyncStyle, read from its explorer and trainer loops; its
0.5 names explorer_driven and trainer_driven are the dynamic styles' aliases):

- `fixed`: the trainer publishes every sync_interval steps (and at validation steps and the last);
  the explorer may not sample batch b before the weights of step b - 1 - max_staleness are published
  (max_staleness = sync_interval - 1 + sync_offset), and samples with the newest it finds.
- `dynamic_by_explorer`: the explorer asks for the trainer's weights once it has explored
  sync_interval batches since its last sync, and waits for the answer; the trainer answers after the
  step it is training (or at once while it waits for a batch or an evaluation) with its current
  weights. An answer that brings no newer weights leaves the explorer due, so it asks again before
  its next batch (Trinity-RFT's `last_sync_successful`).
- `dynamic_by_trainer`: the trainer wants a sync once it has trained sync_interval steps since the
  last one; the explorer, before its next batch, sees the wish, asks, and waits for the answer.

In both dynamic styles nothing else bounds how far the explorer runs ahead except the buffer's
capacity, and sync_offset is not read (Trinity-RFT reads it only in the fixed style). Each batch
still records the step of the weights that sampled it, so the trainer logs its staleness.

Messages travel as files beside the published weights (`posttrain.buffer.sync_requests`).
"""

from __future__ import annotations

import time
from typing import Callable

from posttrain.buffer.sqlite import BufferError
from posttrain.buffer.sync_requests import SyncRequests
from posttrain.buffer.weights import WeightFiles
from posttrain.config.access import DYNAMIC_SYNC, EXPLORER_DRIVEN, TRAINER_DRIVEN


class Follower:
    """The explorer's side of the synchronizer: which weights it holds, and the validations it owes.

    Without a trainer (mode explore) it holds the starting weights and owes only their validation
    (step 0, with val_before_train). With one, every wait for newer weights also runs the
    validations whose weights are published, in order: the trainer waits for each of them before
    it trains further, so the explorer must never wait for weights without doing them. Loading the
    weights of a validation step leaves them in the engine: the explorer samples with them after."""

    def __init__(self, explorer, buffer, weights: WeightFiles | None, timeout_s: float, steps: list[int],
                 style: str = "fixed", interval: int = 1):
        self.explorer, self.buffer, self.weights, self.timeout_s = explorer, buffer, weights, timeout_s
        self.style, self.interval = style, interval
        self.requests = SyncRequests(weights.dir) if weights is not None else None
        done = buffer.evaluations_through(max(steps, default=0))
        self.pending = [s for s in steps if s not in done and (weights is not None or s == 0)]
        self.loaded = 0  # the trainer step whose weights the engine holds (0: the starting weights)
        self.last_sync: int | None = None  # batches explored at the last sync that brought new weights (dynamic)
        self.idle_s = 0.0  # seconds spent waiting for the trainer's weights (validations not counted)
        self.sleep = time.sleep  # one poll of a wait (tests drive a fake trainer from it)

    def before_batch(self, b: int, max_staleness: int) -> None:
        """Hold the weights batch b may be sampled with, as the sync style says."""
        if self.style not in DYNAMIC_SYNC or self.weights is None:
            self.freshen(b - 1 - max_staleness)
            return
        if self.last_sync is None:  # (re)start: both sides sync once before the first batch, as Trinity-RFT's launcher does
            self.sync(b - 1)
            self.last_sync = b - 1
            return
        self._validate_due(self.weights.latest())
        asked = (b - 1 - self.last_sync >= self.interval if self.style in EXPLORER_DRIVEN
                 else self.requests.trainer_wants() is not None)
        if asked:
            self.sync(b - 1)

    def sync(self, explored: int) -> None:
        """Ask the trainer for its weights and wait for the answer; `explored` batches are done."""
        request = self.requests.ask(self.loaded)
        self.buffer.report("explorer", f"waiting for the trainer to answer sync request {request} (holding the weights of step {self.loaded})")
        self._wait(lambda: self.requests.answer_to(request) is not None or self._trainer_finished(), f"an answer to its sync request {request}")
        latest = max(self.weights.latest() or 0, self.requests.answer_to(request) or 0)
        if latest > self.loaded:
            self._load(latest)
            self.last_sync = explored

    def _trainer_finished(self) -> bool:
        """A trainer that finished (with replay it may need fewer batches) answers nothing more; the
        explorer goes on with what it holds, as Trinity-RFT's does once its trainer has stopped."""
        return self.buffer.state("trainer").startswith("finished")

    def freshen(self, needed: int) -> None:
        """Hold the newest published weights, waiting until they are at least those of `needed`."""
        if self.weights is None:
            self._validate_due(0)
            return
        self._wait(lambda: needed <= 0 or (self.weights.latest() or 0) >= needed, f"the weights of trainer step {needed}")
        latest = self.weights.latest()
        if latest is not None and latest != self.loaded:
            self._load(latest)

    def finish(self) -> None:
        """Run the validations still owed (the last waits for the trainer's last weights)."""
        while self.pending:
            self.freshen(self.pending[0])

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            latest = self.weights.latest()
            self._validate_due(latest)
            if ready():
                return
            if time.monotonic() > deadline:
                raise BufferError(
                    f"{self.weights.dir}: the explorer waited {self.timeout_s:g} s for {what} "
                    f"(newest published: {latest if latest is not None else 'none'}; trainer: {self.buffer.state('trainer')}); "
                    "raise synchronizer.sync_timeout or check the trainer"
                )
            slept = time.monotonic()
            self.sleep(self.buffer.poll_s)
            self.idle_s += time.monotonic() - slept

    def _validate_due(self, latest: int | None) -> None:
        while self.pending and latest is not None and self.pending[0] <= latest:
            step = self.pending.pop(0)
            if step != self.loaded:  # the trainer publishes its starting (or resumed) weights too
                self._load(step)
            self.buffer.report("explorer", f"validating the weights of step {step}")
            self.buffer.write_evaluation(step, self.explorer.validate(step))

    def _load(self, step: int) -> None:
        self.explorer.roles.engine.update_weights(self.weights.load(step), step)
        self.loaded = step


class Publisher:
    """The trainer's side: publishes its weights (`publish(step)`, whole tensors into the weights
    directory) when the sync style says, and answers the explorer's requests.

    With several trainer ranks every rank calls every method at the same points (publishing is a
    collective when the actor is sharded): rank 0 reads the explorer's files and decides, `share`
    (World.from_main) gives its decision to the others, and only rank 0 writes files."""

    def __init__(self, publish: Callable[[int], None], weights: WeightFiles, style: str, interval: int,
                 must_publish: set[int], start: int, world=None):
        self.publish, self.weights, self.style, self.interval = publish, weights, style, interval
        self.must_publish = must_publish  # the steps the explorer validates, and the last
        self.requests = SyncRequests(weights.dir)
        self.main = world is None or world.is_main
        self.share = world.from_main if world is not None else (lambda decision: decision)
        self.trained = start  # the step whose weights the actor holds
        self.last_sync = start
        self.publish(start)  # the starting (or resumed) weights: the explorer's first sync brings them
        self.answer()

    def after_step(self, step: int) -> None:
        self.trained = step
        fixed = self.style not in DYNAMIC_SYNC and step % self.interval == 0
        if fixed or step in self.must_publish:
            self.publish(step)
        if self.style in TRAINER_DRIVEN and step - self.last_sync >= self.interval and self.main:
            self.requests.want(step)
        self.answer()

    def answer(self) -> None:
        """Answer the explorer's pending request with the current weights (publishing them first
        unless they are the newest already). Called after each step and while the trainer waits."""
        if self.style not in DYNAMIC_SYNC:
            return
        pending = self.requests.pending() if self.main else None
        stale = pending is not None and self.weights.latest() != self.trained
        pending, stale = self.share((pending, stale))
        if pending is None:
            return
        if stale:
            self.publish(self.trained)
        if self.main:
            self.requests.answer(pending[0], self.trained)
        self.last_sync = self.trained
