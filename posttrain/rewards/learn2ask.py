"""Learn-to-ask: the reward of Trinity-RFT's ``learn_to_ask`` example, a doctor that learns to ask.

The example (its workflow ``examples.learn_to_ask.workflow.workflow_learn2ask.Learn2AskWorkflow``)
trains a policy that reads a doctor-patient conversation and either asks the next question or, when
enough is known, answers ``<stop />``. Each row holds the conversation (the prompt column), whether
the doctor should go on (``decision_truth``: ``continue`` or ``stop``; ``continue`` when absent) and
the facts a good question would ask about (``info_truth``; ``None`` when absent). A response scores:

- **action** R_s: 1 when its decision (``stop`` if it contains ``<stop />``, else ``continue``) is the
  row's, else 0 (and then the other two are 0);
- **format** P and **content** R_a: for a right ``continue``, a judge (an auxiliary model) reads the
  conversation with the response as the doctor's last line, and the facts, and gives a format score
  (1 for one question, 0.5 for two, 0 for more) and a content score (1 when the question asks about
  one of the facts, 0.5 when it is close, 0 otherwise) in ``<format_score>`` / ``<content_score>``
  tags; a reply without them (or after the retries, a failed request) gives 0 and 0. For a right
  ``stop``: content 1, format 1 only when the response is exactly ``<stop />``.

The reward by ``train_mode``: ``Ra+Rs`` (default) R_s (1 + 2 R_a) + P, or R_s + R_a + P with
``fusion_mode: sum``; ``Ra`` 2 R_a + P; ``Rs`` 3 R_s + P. The judge's instructions are posttrain's
own words for the example's grading policy (same scales, same tags). The judge is called with the
OpenAI defaults the example leaves (temperature 1) and at most ``max_tokens`` reply tokens.

Used as a reward worker class: ``worker_cls: posttrain.rewards.learn2ask:Learn2AskReward`` with
``reward_kwargs`` {model, train_mode, fusion_mode, max_tokens} and the row's columns in its
extra_info (``data.extra_info_keys``: the conversation column, decision_truth, info_truth).
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from posttrain.tasks.answers import END_MARKERS

STOP = "<stop />"
TRAIN_MODES = ("Ra+Rs", "Ra", "Rs")
RETRIES = 5  # the example's judge retries: a failed request is tried again up to 5 times, then scores 0
JUDGE_SYSTEM = """You grade the last message of a doctor in a conversation with a patient.

Format score (format_score): 1.0 when that message asks exactly one question, 0.5 when it asks two, 0.0 when it asks three or more.
Content score (content_score): 1.0 when the question asks directly about one of the facts below, 0.5 when it is closely related to one of them without asking about it, 0.0 when it has nothing to do with any of them.

Facts the doctor should find out:
{}

Reply with exactly these three tags and nothing else:
<think>a short reason for both scores</think>
<format_score>the format score, e.g. 1.0</format_score>
<content_score>the content score, e.g. 0.5</content_score>
Judge the doctor's last message only, against these facts only."""
_TAG = re.compile(r"<(\w+)>(.*?)</\1>")  # one line per tag, as the example reads them

Chat = Callable[[list[dict[str, Any]]], str]


def tags(text: str) -> dict[str, str]:
    """The ``<tag>value</tag>`` pairs of a reply (the last of a repeated tag wins).

    >>> tags("<think>ok</think><format_score>1.0</format_score><content_score>0.5</content_score>")["content_score"]
    '0.5'
    """
    return {tag: value for tag, value in _TAG.findall(text)}


def transcript(messages: list[dict[str, Any]], response: str) -> str:
    """The conversation as the judge reads it: ``patient:`` for the user, ``doctor:`` for the
    assistant (system messages left out), the response as the doctor's last line."""
    lines = []
    for message in [*messages, {"role": "assistant", "content": response}]:
        who = {"user": "patient", "assistant": "doctor"}.get(message.get("role"))
        if who:
            lines.append(f"{who}: {message.get('content')}\n")
    return "".join(lines)


def fuse(action: float, content: float, fmt: float, train_mode: str = "Ra+Rs", fusion_mode: str = "default") -> float:
    """The reward from the action, content and format scores (module docstring).

    >>> fuse(1.0, 0.5, 1.0), fuse(1.0, 0.5, 1.0, fusion_mode="sum"), fuse(0.0, 0.0, 0.0, "Rs"), fuse(1.0, 1.0, 0.5, "Ra")
    (3.0, 2.5, 0.0, 2.5)
    """
    if train_mode == "Ra+Rs":
        return action * (1 + 2 * content) + fmt if fusion_mode != "sum" else action + content + fmt
    if train_mode == "Ra":
        return 2 * content + fmt
    return action * 3 + fmt


class Learn2AskReward:
    """The reward worker (module docstring). `chat` replaces the auxiliary model in tests."""

    def __init__(self, model: str = "judge", train_mode: str = "Ra+Rs", fusion_mode: str = "default", max_tokens: int = 1024,
                 messages_key: str = "messages", chat: Chat | None = None):
        if train_mode not in TRAIN_MODES:
            raise ValueError(f"train_mode {train_mode!r}: the example knows {', '.join(TRAIN_MODES)}")
        self.model, self.train_mode, self.fusion_mode, self.max_tokens = model, train_mode, fusion_mode, int(max_tokens)
        self.messages_key = messages_key
        self.chat = chat or self._call

    def _call(self, messages: list[dict[str, Any]]) -> str:
        from posttrain.rewards.auxiliary import chat

        return chat(self.model, messages, max_tokens=self.max_tokens, temperature=1.0)

    def __call__(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None) -> dict[str, float]:
        info = extra_info or {}
        response = solution_str
        for marker in END_MARKERS:  # the text the model wrote, as the engine's response text
            response = response.replace(marker, "")
        truth = info.get("decision_truth") or "continue"
        decision = "stop" if STOP in response else "continue"
        action = content = fmt = 0.0
        judged = 0.0
        if decision == truth:
            action = 1.0
            if truth == "continue":
                scores = self._judge(info, response)
                judged = float(bool(scores))
                fmt, content = float(scores.get("format_score", 0.0)), float(scores.get("content_score", 0.0))
            else:
                content, fmt = 1.0, 1.0 if response == STOP else 0.0
        return {"score": fuse(action, content, fmt, self.train_mode, self.fusion_mode), "action_score": action,
                "content_score": content, "format_score": fmt, "judge_parsed": judged}

    def _judge(self, info: dict[str, Any], response: str) -> dict[str, str]:
        """The judge's tags, or {} when every try failed (the example's retries, waiting 1 s more each time)."""
        history = info.get(self.messages_key) or []
        messages = [{"role": "system", "content": JUDGE_SYSTEM.format(info.get("info_truth") or "None")},
                    {"role": "user", "content": transcript(list(history), response)}]
        for attempt in range(RETRIES + 1):
            try:
                return tags(self.chat(messages))
            except Exception:  # noqa: BLE001 - the example retries any failure of the call, then scores 0
                if attempt == RETRIES:
                    return {}
                time.sleep(attempt + 1)
        return {}
