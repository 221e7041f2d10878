"""An explorer of several processes: rank 0's orders reach the other ranks in the order it gives them,
each rank carries them out on its own engine, and rank 0's user error ends the others with its message."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from posttrain.buffer.sqlite import BufferError
from posttrain.errors import UserError
from posttrain.trainer.explorer_crew import Crew, follow_orders
from posttrain.trainer.metrics import PhaseTimer


class Line:
    """World.from_main between rank 0 and one other rank, as a queue (rank 0 sends, the other reads)."""

    def __init__(self):
        self.sent: list = []

    def rank(self, main: bool):
        return SimpleNamespace(is_main=main, from_main=(lambda obj: (self.sent.append(obj), obj)[1]) if main
                               else (lambda obj: self.sent.pop(0)))


def explorer(log: list) -> SimpleNamespace:
    """What the crew drives: an agentic stage (its "prompts" are the batch number), an engine and validation."""
    engine = SimpleNamespace(weights_version=0)

    def update_weights(state, step):
        engine.weights_version = step
        log.append(("load", step, state["w"]))

    engine.update_weights = update_weights
    return SimpleNamespace(
        agent=object(), roles=SimpleNamespace(engine=engine),
        explore=lambda prompts, timer, expected_version, policy_step=0, refill=None: log.append(("explore", prompts, expected_version)) or f"batch {prompts}",
        validate=lambda step: log.append(("validate", step)) or {"val/score/mean": 0.5},
    )


def test_the_other_ranks_do_what_rank_0_does_in_its_order():
    line, main_log, other_log = Line(), [], []
    crew = Crew(explorer(main_log), line.rank(True))
    assert crew.explore(1, PhaseTimer(), policy_step=0) == "batch 1"
    crew.roles.engine.update_weights({"w": 2}, 2)  # what the synchronizer's Follower calls
    assert crew.validate(2) == {"val/score/mean": 0.5}
    assert crew.explore(2, PhaseTimer(), policy_step=2) == "batch 2"
    crew.stop()
    weights = SimpleNamespace(load=lambda step: {"w": step})  # each rank reads the published file itself
    follow_orders(explorer(other_log), line.rank(False), weights)
    assert main_log == other_log == [("explore", 1, 0), ("load", 2, 2), ("validate", 2), ("explore", 2, 2)]
    assert line.sent == []


def test_rank_0s_user_error_ends_the_others_with_its_message():
    line = Line()
    crew = Crew(explorer([]), line.rank(True))
    crew.stop(BufferError("the explorer waited 5 s for the weights of trainer step 3"))
    with pytest.raises(UserError, match="waited 5 s for the weights of trainer step 3"):
        follow_orders(explorer([]), line.rank(False), None)


def test_no_stop_order_while_the_ranks_are_inside_an_order():
    line = Line()
    crew = Crew(explorer([]), line.rank(True))
    crew.explorer.explore = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("engine failed"))
    with pytest.raises(RuntimeError):
        crew.explore(1, PhaseTimer(), policy_step=0)
    crew.stop(RuntimeError("engine failed"))  # the others are in the batch's collectives: the launcher ends them
    assert line.sent == [("explore", 1)]
