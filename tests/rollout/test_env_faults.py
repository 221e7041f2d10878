"""Environment faults in the agent loop: an env that raises, hangs or answers malformed ends its
own trajectory with the failure penalty and a logged message; the others play on; too many
failures in one call stop it with the first failure's message."""

from __future__ import annotations

import logging
import threading

import pytest

from posttrain.envs.base import EnvError
from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.walk import Walk
from posttrain.models.tokenizer import CHATML_TEMPLATE
from posttrain.rollout.agent_loop import EnvSlot, LoopLimits, run_episodes
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.env_guard import FaultPolicy
from posttrain.rollout.trajectory import to_rollout_batch
from posttrain.rollout.turns import TurnRenderer
from test_agent_loop import TOK, ScriptedEngine

RENDERER = TurnRenderer(TOK, CHATML_TEMPLATE)
SPEC = parse_custom_envs({"W": {"env_type": "walk", "env_config": {"size": 4}}})["W"]


class Raising(Walk):
    def step(self, action_text):
        raise KeyError("no such move")


class Hanging(Walk):
    def __init__(self, release: threading.Event):
        super().__init__(size=4)
        self.release, self.calls = release, 0

    def step(self, action_text):
        self.calls += 1
        self.release.wait(30)  # far longer than the timeout; the test releases it at the end
        return super().step(action_text)


class Malformed(Walk):
    def step(self, action_text):
        return (["not", "text"], 0.0, False, {})


class NoReset(Walk):
    def reset(self, seed):
        raise OSError("simulator did not start")


class BadState(Walk):
    def state(self):
        return ["unhashable"]


def play(envs, policy: FaultPolicy, script=("L", "L", "L")):
    # seed 0: '_G_P', two moves left reach the goal
    slots = [EnvSlot(env, SPEC, 0, "g0", -0.1) for env in envs]
    return run_episodes(slots, ScriptedEngine(list(script)), SamplingParams(), RENDERER, LoopLimits(128, 96, 0, policy), "s")


@pytest.mark.parametrize("broken,message", [
    (Raising(), "environment W (walk) (seed 0, turn 1): step raised KeyError: 'no such move'"),
    (Malformed(), "environment W (walk) (seed 0, turn 1): the observation must be a str or an image (an RGB uint8 array of shape (height, width, 3) or a PIL image), got list: ['not', 'text']"),
    (BadState(), "environment W (walk) (seed 0, turn 1): state() returned an unhashable list"),
])
def test_a_failing_env_ends_only_its_own_trajectory_with_the_penalty(broken, message, caplog):
    with caplog.at_level(logging.WARNING, logger="posttrain.rollout.env_guard"):
        trajs = play([Walk(size=4), broken, Walk(size=4)], FaultPolicy(None, -2.0, 0.5))
    ok = [trajs[0], trajs[2]]
    assert all(t.success and t.failed is None and len(t.turns) == 2 for t in ok)
    failed = trajs[1]
    assert failed.failed == message and not failed.success and len(failed.turns) == 1
    assert failed.reward == -2.0 and failed.turns[0].valid  # the penalty, not a format penalty
    assert failed.response_ids[-1] == TOK.eos_token_id and failed.model_mask[-1] == 1.0  # it ends on the model's action
    assert f"{message}: trajectory ended as failed (reward -2)" in caplog.text
    batch = to_rollout_batch(trajs, 0, 0, [""] * 3)
    assert [e["failed"] for e in batch.extra_info] == [False, True, False]


def test_a_hung_env_is_abandoned_after_the_timeout_and_never_called_again():
    release = threading.Event()
    hung = Hanging(release)
    try:
        trajs = play([Walk(size=4), hung, Walk(size=4)], FaultPolicy(0.2, -1.0, 0.5))
        assert not release.is_set() and hung.calls == 1  # the loop returned while the env still hangs
        assert trajs[1].failed == ("environment W (walk) (seed 0, turn 1): step took longer than env.step_timeout (0.2 s); "
                                   "the environment was abandoned")
        assert trajs[0].success and trajs[2].success and trajs[1].reward == -1.0
    finally:
        release.set()


def test_a_failed_reset_gives_a_row_that_trains_nothing():
    trajs = play([NoReset(size=4), Walk(size=4)], FaultPolicy(None, -1.0, 0.5), script=("L", "L"))
    row = trajs[0]
    assert row.failed == "environment W (walk) (seed 0, reset): reset raised OSError: simulator did not start"
    assert row.model_mask == [0.0] and row.reward == -1.0 and trajs[1].success
    batch = to_rollout_batch(trajs, 0, 0, ["", ""])
    assert batch.loss_mask[0].sum() == 0 and batch.response_mask[0].sum() == 1  # one environment token, no loss


def test_more_failures_than_the_allowed_share_stop_the_call_with_the_first_message():
    envs = [Raising(), Walk(size=4), Raising(), Walk(size=4)]
    assert sum(t.failed is not None for t in play(envs, FaultPolicy(None, 0.0, 0.5))) == 2  # 2 of 4 is allowed at 0.5
    with pytest.raises(EnvError) as e:
        play([Raising(), Walk(size=4), Raising(), Walk(size=4)], FaultPolicy(None, 0.0, 0.25))
    assert str(e.value) == ("environment W (walk) (seed 0, turn 1): step raised KeyError: 'no such move' (2 of 4 episodes of "
                            "this step failed, more than env.max_failure_rate 0.25 allows; fix the environment or raise env.max_failure_rate)")
