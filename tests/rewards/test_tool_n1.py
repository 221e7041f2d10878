"""The tool_n1 scorer gives Tool-N1's reward as Trinity-RFT's toolcall_workflow computes it
(trinity/common/workflows/customized_toolcall_workflows.py compute_score_v0_toolN1), on hand-written replies."""

from __future__ import annotations

import json

import pytest

from posttrain.rewards.scorers import load_scorer
from posttrain.rewards.tool_n1 import tool_n1_score

TRUTH = [{"name": "email", "arguments": {"to": "Bob", "n": 1}}]
RIGHT = '[{"name": "email", "arguments": {"n": 1, "to": "Bob"}}]'  # the same call, keys in another order


@pytest.mark.parametrize("reply, truth, score", [
    (f"<think>mail Bob</think><tool_call>{RIGHT}</tool_call>", TRUTH, 1.0),
    (f"<think>mail Bob</think><tool_call>{RIGHT}</tool_call><|im_end|>", json.dumps(TRUTH), 1.0),  # truth as JSON text
    ('<think>x</think><tool_call>{"name": "email", "arguments": {"to": "Bob", "n": 1}}</tool_call>', TRUTH, 1.0),  # one object
    (f"<think>x</think><tool_call>{json.dumps(RIGHT)}</tool_call>", TRUTH, 1.0),   # JSON text inside a JSON string
    (f"<tool_call>{RIGHT}</tool_call>", TRUTH, 0.0),                                 # no reasoning
    (f"<think>a</think><think>b</think><tool_call>{RIGHT}</tool_call>", TRUTH, 0.0), # two think blocks
    (f"<tool_call>{RIGHT}</tool_call><think>late</think>", TRUTH, 0.0),             # reasoning after the call
    (f"<think>x</think><tool_call>[]</tool_call> <tool_call>{RIGHT}</tool_call>", TRUTH, 1.0),  # the last block counts
    ('<think>x</think><tool_call>[{"name": "email", "arguments": {"to": "Al", "n": 1}}]</tool_call>', TRUTH, 0.0),  # wrong argument
    (f"<think>x</think><tool_call>{RIGHT[:-1]}, {{\"name\": \"x\", \"arguments\": {{}}}}]</tool_call>", TRUTH, 0.0),  # an extra call
    ('<think>x</think><tool_call>[{"name": "email"}]</tool_call>', TRUTH, 0.0),      # no arguments
    ("<think>x</think><tool_call>not json</tool_call>", TRUTH, 0.0),
    ("<think>nothing to call</think><tool_call>[]</tool_call>", [], 1.0),           # an empty truth: call nothing
    (f"<think>x</think><tool_call>{RIGHT}</tool_call>", [], 0.0),
    ("<think>x</think> no call", [], 0.0),                                           # no block at all
])
def test_tool_n1_reward(reply, truth, score):
    assert tool_n1_score("toolace", reply, truth) == score


def test_tool_n1_is_a_built_in_scorer():
    scorer = load_scorer("tool_n1", {}, "reward.custom_reward_function.name")
    assert scorer("toolace", f"<think>x</think><tool_call>{RIGHT}</tool_call>", TRUTH, {}) == 1.0
