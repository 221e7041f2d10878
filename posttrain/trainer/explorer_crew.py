"""An explorer of several processes (one engine each) that explores as one.

Rank 0 runs the explorer's loop (`posttrain.trainer.decoupled.run_explorer`): it alone reads and
writes the experience buffer, follows the trainer's weights and keeps the validation schedule. The
other ranks hold engines and wait for its orders, each a step every rank takes together:

- explore batch b: every rank draws the same prompts (the same sampler, in the same order), generates
  its share of them and the whole batch is gathered (`posttrain.workers.rollout`), then scored (with
  dynamic sampling every rank draws and generates the same further rounds: all hold every score);
- load the published weights of trainer step k: every rank reads the same file;
- validate the weights it holds;
- stop (with rank 0's error message when it gave up: the others end with the same message).

So the buffer receives the batch one explorer would write (sampling noise is keyed by prompt and
sample, not by rank), with the generation spread over the engines. With one process the orders
cost nothing (`World.from_main` returns its argument).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

from posttrain.data import collate_prompts
from posttrain.errors import UserError
from posttrain.records import PromptBatch
from posttrain.trainer.metrics import PhaseTimer

EXPLORE, LOAD, VALIDATE, STOP = "explore", "load", "validate", "stop"


def batch_prompts(explorer, b: int) -> PromptBatch | int:
    """Batch b's prompts: the sampler's next rows, or for an agentic stage the step number its env
    groups are seeded by, as in the synchronous loop (so the explorer plays the same episodes)."""
    if explorer.agent is not None:
        return b
    return collate_prompts(explorer.reader(explorer.sampler.next_batch()), explorer.pad_id, uid_prefix=f"s{b}")


def refill_of(explorer, b: int):
    """Round r's prompts of batch b under dynamic sampling (algorithm.filter_groups): the sampler's
    next rows, drawn alike on every rank, whose scores every rank holds, so all keep the same groups."""
    return None if explorer.agent is not None else functools.partial(explorer._next_prompts, b)


class Crew:
    """Rank 0's handle on the explorer ranks: what the synchronizer's `Follower` drives as "the
    explorer" (`validate`, `roles.engine.update_weights`) and the batch loop's `explore`, each
    ordered on the other ranks first. `busy` is true while the ranks are inside an order (a
    collective): an error then ends every rank through the launcher, not through a stop order."""

    def __init__(self, explorer, world):
        self.explorer, self.world = explorer, world
        self.roles = SimpleNamespace(engine=SimpleNamespace(update_weights=self._update_weights))
        self.busy = False

    def _order(self, op: str, arg: Any, run):
        self.world.from_main((op, arg))
        self.busy = True
        result = run()
        self.busy = False
        return result

    def explore(self, b: int, timer: PhaseTimer, policy_step: int):
        engine = self.explorer.roles.engine
        return self._order(EXPLORE, b, lambda: self.explorer.explore(
            batch_prompts(self.explorer, b), timer, expected_version=engine.weights_version, policy_step=policy_step,
            refill=refill_of(self.explorer, b)))

    def validate(self, step: int) -> dict[str, float]:
        return self._order(VALIDATE, step, lambda: self.explorer.validate(step))

    def _update_weights(self, state: dict, step: int) -> None:
        self._order(LOAD, step, lambda: self.explorer.roles.engine.update_weights(state, step))

    def stop(self, error: BaseException | None = None) -> None:
        """Release the other ranks; with rank 0's user error they end with its message."""
        if not self.busy:
            self.world.from_main((STOP, str(error) if isinstance(error, UserError) else None))


def follow_orders(explorer, world, weights) -> None:
    """The loop of an explorer rank other than 0: carry out rank 0's orders until it stops."""
    engine = explorer.roles.engine
    while True:
        op, arg = world.from_main(None)
        if op == EXPLORE:
            explorer.explore(batch_prompts(explorer, arg), PhaseTimer(), expected_version=engine.weights_version,
                             refill=refill_of(explorer, arg))
        elif op == LOAD:
            engine.update_weights(weights.load(arg), arg)
        elif op == VALIDATE:
            explorer.validate(arg)
        elif op == STOP:
            if arg is not None:
                raise UserError(arg)
            return
