"""The learn-to-ask reward (posttrain.rewards.learn2ask) with a scripted judge: the decision, the
judge's format and content scores, the fusion of each train_mode, and what the judge is shown."""

from __future__ import annotations

import pytest

from posttrain.rewards import learn2ask
from posttrain.rewards.learn2ask import Learn2AskReward

HISTORY = [{"role": "system", "content": "ignored"}, {"role": "user", "content": "I have had a headache since Monday."},
           {"role": "assistant", "content": "Is it on one side or both?"}, {"role": "user", "content": "Both."}]
INFO = {"messages": HISTORY, "decision_truth": "continue", "info_truth": "fever: yes; nausea: no"}
JUDGED = "<think>one question, about fever</think>\n<format_score>1.0</format_score>\n<content_score>0.5</content_score>"


class Judge:
    def __init__(self, *replies):
        self.replies, self.seen = list(replies), []

    def __call__(self, messages):
        self.seen.append(messages)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def score(response, info=INFO, judge=None, **kwargs):
    judge = judge or Judge(JUDGED)
    return Learn2AskReward(chat=judge, **kwargs)("", response, None, info), judge


def test_a_right_question_is_judged_and_fused():
    got, judge = score("Do you have a fever, yes or no?<|im_end|>")
    assert got == {"score": 1 * (1 + 2 * 0.5) + 1.0, "action_score": 1.0, "content_score": 0.5, "format_score": 1.0, "judge_parsed": 1.0}
    system, user = judge.seen[0]
    assert "fever: yes; nausea: no" in system["content"] and "<content_score>" in system["content"]
    assert user["content"] == ("patient: I have had a headache since Monday.\ndoctor: Is it on one side or both?\npatient: Both.\n"
                               "doctor: Do you have a fever, yes or no?\n")  # the end-of-turn marker is not the doctor's


@pytest.mark.parametrize("mode, fusion, expected", [("Ra+Rs", "sum", 1 + 0.5 + 1), ("Ra", "default", 2 * 0.5 + 1), ("Rs", "default", 3 + 1)])
def test_train_modes_fuse_the_same_scores_differently(mode, fusion, expected):
    assert score("Fever?", train_mode=mode, fusion_mode=fusion)[0]["score"] == expected


def test_stopping_is_scored_without_the_judge():
    stop = {**INFO, "decision_truth": "stop"}
    got, judge = score("<stop />", stop)
    assert (got["score"], got["format_score"], judge.seen) == (1 * (1 + 2) + 1, 1.0, [])
    assert score("Take ibuprofen. <stop />", stop)[0]["score"] == 3.0  # right decision, not only the tag: format 0
    assert score("Any fever?", stop)[0]["score"] == 0.0  # the wrong decision scores nothing
    assert score("<stop />")[0]["score"] == 0.0  # stopping where the doctor should go on
    assert score("Any fever?", {"messages": HISTORY})[0]["action_score"] == 1.0  # no decision_truth: continue


def test_a_reply_without_scores_gives_zero_and_a_failing_judge_is_retried(monkeypatch):
    got, _ = score("Fever?", judge=Judge("I think it is fine."))
    assert (got["score"], got["judge_parsed"]) == (1.0, 0.0)  # action 1, content and format 0
    waits = []
    monkeypatch.setattr(learn2ask.time, "sleep", waits.append)
    got, judge = score("Fever?", judge=Judge(*[RuntimeError("down")] * 2, JUDGED))
    assert got["content_score"] == 0.5 and waits == [1, 2] and len(judge.seen) == 3
    got, judge = score("Fever?", judge=Judge(*[RuntimeError("down")] * 6))
    assert got["score"] == 1.0 and len(judge.seen) == 6  # the first try and 5 retries, then 0 and 0
    with pytest.raises(ValueError, match="train_mode 'Rx'"):
        Learn2AskReward(train_mode="Rx")
