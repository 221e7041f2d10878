"""The ``tool_n1`` scorer: Tool-N1's binary reward for one tool-calling reply (the reward of
Trinity-RFT's ``toolcall_workflow``; "Nemotron-Research-Tool-N1", arXiv:2505.00024, section 2).

    score = 1.0 if the reply is well formed and calls exactly the tools of the ground truth, else 0.0

- Well formed: exactly one ``<think>`` and one ``</think>``, the ``</think>`` before the first
  ``<tool_call>``, and the last ``<tool_call>...</tool_call>`` block holding JSON: a list of calls
  (one object is a list of one; JSON text inside a JSON string is read once more), each an object
  with ``name`` and ``arguments``.
- The calls: the same multiset of (name, arguments) as the truth, arguments compared as JSON with
  sorted keys (order of the calls does not matter, their number does). An empty list matches only
  an empty truth (the reply should call nothing).
- The truth is the row's list of calls (the ``answer`` column), or its JSON text.
- The reply is read without the end-of-turn marker the decoder keeps (posttrain.rewards.think_answer.response_text).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from posttrain.rewards.think_answer import response_text

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def tool_calls(text: str) -> list | None:
    """The calls of the last ``<tool_call>`` block as a list, or None (no block, not JSON).

    >>> tool_calls('<tool_call>{"name": "f", "arguments": {}}</tool_call>')
    [{'name': 'f', 'arguments': {}}]
    """
    blocks = _CALL.findall(text)
    if not blocks:
        return None
    try:
        calls = json.loads(blocks[-1].strip())
        if isinstance(calls, str):  # JSON text inside a JSON string
            calls = json.loads(calls)
    except json.JSONDecodeError:
        return None
    return [calls] if isinstance(calls, dict) else calls if isinstance(calls, list) else None


def _layout_ok(text: str) -> bool:
    """One think block, closed before the first tool call."""
    if text.count("<think>") != 1 or text.count("</think>") != 1:
        return False
    first_call = text.find("<tool_call>")
    return first_call == -1 or text.find("</think>") < first_call


def _signature(calls: list) -> Counter | None:
    """The multiset of (name, arguments as sorted JSON); None when a call cannot be read so."""
    try:
        return Counter((c["name"], json.dumps(c["arguments"], sort_keys=True)) for c in calls)
    except (TypeError, KeyError):
        return None


def same_calls(calls: list, truth: list) -> bool:
    """Exactly the truth's calls, in any order; empty matches only empty.

    >>> same_calls([{"name": "f", "arguments": {"b": 1, "a": 2}}], [{"name": "f", "arguments": {"a": 2, "b": 1}}])
    True
    """
    if not calls or not truth:
        return len(calls) == len(truth)
    mine, want = _signature(calls), _signature(truth)
    return mine is not None and mine == want


def tool_n1_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """1.0 for a well-formed reply making exactly the truth's calls, else 0.0 (module docstring).

    >>> tool_n1_score("toolace", '<think>mail Bob</think><tool_call>[{"name": "email", "arguments": {"to": "Bob"}}]</tool_call>',
    ...               '[{"name": "email", "arguments": {"to": "Bob"}}]')
    1.0
    >>> tool_n1_score("toolace", '<tool_call>[{"name": "email", "arguments": {"to": "Bob"}}]</tool_call>', '[{"name": "email", "arguments": {"to": "Bob"}}]')
    0.0
    """
    text = response_text(solution_str)
    truth = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if isinstance(truth, str):
        truth = json.loads(truth)
    calls = tool_calls(text)
    if calls is None or not _layout_ok(text):
        return 0.0
    if not all(isinstance(c, dict) and "name" in c and "arguments" in c for c in calls):
        return 0.0
    return 1.0 if same_calls(calls, list(truth)) else 0.0
