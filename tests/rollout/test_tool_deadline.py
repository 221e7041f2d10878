"""A deadline (explorer.max_timeout) in tool calling: a conversation whose turn the engine cut ends
there, unfinished and flagged, with no tool call made from the cut turn; past the deadline between
turns, the live conversations end before the next turn."""

from __future__ import annotations

import time

import torch

from posttrain.rollout.base import SamplingParams
from posttrain.rollout.tool_loop import ToolRollout
from posttrain.config.sections.rollout import MultiTurnConfig
from posttrain.models.tokenizer import CHATML_TEMPLATE
from tests.rollout.test_tool_loop import CALC, TOK, Engine, prompts, tool_file


class CuttingEngine(Engine):
    """Engine whose call `at` flags the rows whose prompt holds `marker` as cut by the deadline."""

    def __init__(self, script, at: int, marker: str):
        super().__init__(script)
        self.at, self.marker, self.deadlines = at, marker, []

    def __call__(self, prompts, params):
        self.deadlines.append(params.deadline)
        out = super().__call__(prompts, params)
        cut = len(self.prompts) - 1 == self.at
        out.timed_out = torch.tensor([cut and self.marker in p for p in self.prompts[-1]])
        return out


def test_a_turn_the_engine_cut_ends_its_conversation_flagged(tmp_path):
    tools = ToolRollout(MultiTurnConfig(enable=True, tool_config_path=tool_file(tmp_path)), TOK, CHATML_TEMPLATE)
    engine = CuttingEngine([CALC.format("3*4"), CALC.format("1+1"), "done"], at=1, marker="second")
    deadline = time.time() + 600
    batch, metrics = tools.generate(engine, prompts(["first 3*4?", "second 3*4?"], tools), SamplingParams(max_new_tokens=512, deadline=deadline), version=0)
    assert engine.deadlines == [deadline] * 3  # every turn's engine call gets the deadline
    assert batch.timed_out.tolist() == [False, True]
    assert [len(p) for p in engine.prompts] == [2, 2, 1]  # the cut conversation took no third turn
    # the first conversation called the tool twice, the cut one only from its first (whole) turn
    assert metrics["tool/calls_per_traj"] == 1.5
    free, _ = tools.generate(Engine([CALC.format("3*4"), "12"]), prompts(["first 3*4?"], tools), SamplingParams(max_new_tokens=512), version=0)
    assert free.timed_out is None  # no deadline: the field stays empty


def test_past_the_deadline_between_turns_no_turn_is_taken(tmp_path):
    tools = ToolRollout(MultiTurnConfig(enable=True, tool_config_path=tool_file(tmp_path)), TOK, CHATML_TEMPLATE)
    engine = Engine([CALC.format("3*4"), "12"])
    batch, _ = tools.generate(engine, prompts(["3*4?", "5*5?"], tools), SamplingParams(max_new_tokens=512, deadline=time.time() - 1), version=0)
    assert engine.prompts == [] and batch.timed_out.tolist() == [True, True]
