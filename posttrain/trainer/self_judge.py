"""The policy as the judge of its own responses, trained where the gold reward is known (`reward.self_judge`).

After RULER (OpenPipe ART's "relative universal LLM-elicited rewards"), with the judge being the
policy itself, as Trinity-RFT's math_trainable_ruler_workflow does. Once the reward workers have
scored a step's responses (their score is the *gold* reward), each prompt's group of n responses is
shown to the policy in one judge request (posttrain's RULER prompt, posttrain.rewards.chat_judges:
the question, the answers, and a list of one score in [0, 1] per answer at the end of the reply).
Each group draws whether its gold reward is known to training, with probability `gold_probability`
(a draw seeded by trainer.seed and the group's uid, so a resumed run draws the same):

- **gold known**: the responses keep their gold rewards, and the policy writes n judge replies
  (rollout.n, the rollout's sampling). Each reply is a training row of its own, the n of them a group
  (uid ``<prompt uid>-judge``), rewarded

      judge reward = 1 - mean_i |s_i - g_i|,    g_i = (gold_i - low) / (high - low)

  with s_i the reply's score of answer i and [low, high] = `gold_range` (a reply that does not give
  n scores gets 0). So the policy also learns to judge.
- **gold unknown**: one judge reply; its scores are the responses' rewards (all 0 when it does not
  parse), and the reply is not trained on.

A judge request is rendered with the stage's chat template (data.chat_template*) and its own system
message. A judge prompt longer than data.max_prompt_length keeps its last tokens (the engine truncates a long
prompt from the left in the source framework). The step's rows are then the responses followed by
the judge rows; the updates share them over the mini-batches a step of data.train_batch_size
prompts takes (posttrain.trainer.agentic.training_rows). Validation scores with the gold reward.

Metrics: self_judge/gold_groups (share of groups whose gold counts), self_judge/parsed (share of
judge replies that gave n scores), self_judge/judge_rows (trained judge rows), self_judge/judge_reward
(their mean reward) and self_judge/gold_reward (the mean gold reward of every response, which the
step's score no longer is).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import torch

from posttrain.data.dataset import make_formatter
from posttrain.data.examples import RLExample, collate_prompts
from posttrain.errors import UserError
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rewards.chat_judges import clean_response, parse_scores, ruler_messages
from posttrain.rollout.base import SamplingParams
from posttrain.trainer.rewarding import response_texts

# (prompts, sampling) -> the engine's rows for them, at this step's weights
Generate = Callable[[PromptBatch, SamplingParams], RolloutBatch]
JUDGE_SUFFIX = "-judge"


@dataclasses.dataclass
class Judged:
    """A scored batch after the self-judge: the responses then the trained judge rows."""

    batch: RolloutBatch
    scores: torch.Tensor  # (B',)
    texts: list[str]
    metrics: dict[str, float]


def gold_known(seed: int, uid: str, probability: float) -> bool:
    """Whether group `uid`'s gold reward counts: a draw of its own, the same on every rank and resume."""
    return random.Random(f"{seed}:{uid}").random() < probability


def judge_reward(scores: list[float] | None, gold: list[float], low: float, high: float) -> float:
    """1 - the mean absolute gap between a judge reply's scores and the gold rewards mapped to [0, 1].

    >>> judge_reward([1.0, 0.0], [1.1, -0.1], -0.1, 1.1)
    0.9583333333333334
    >>> judge_reward(None, [1.0], 0.0, 1.0)
    0.0
    """
    if scores is None:
        return 0.0
    gaps = [abs(s - (g - low) / (high - low)) for s, g in zip(scores, gold)]
    return 1.0 - sum(gaps) / len(gaps)


class SelfJudge:
    """`reward.self_judge` over one stage (module docstring)."""

    def __init__(self, cfg: Any, tokenizer: Any, pad_id: int, sampling: SamplingParams):
        sj = cfg.reward.self_judge
        self.tokenizer, self.pad_id, self.seed = tokenizer, pad_id, cfg.trainer.seed
        self.formatter = make_formatter(cfg.data, tokenizer)  # the stage's chat template; the judge's own system message
        self.probability, (self.low, self.high), self.instructions = sj.gold_probability, sj.gold_range, sj.instructions
        self.max_prompt = cfg.data.max_prompt_length
        self.sampling = sampling

    def __call__(self, batch: RolloutBatch, texts: list[str], scores: torch.Tensor, questions: dict[int, str],
                 generate: Generate) -> Judged:
        """Judge each group of `batch` (its scored rows; `questions` by row) and return the rows to train."""
        if batch.vision is not None and any(v is not None for v in batch.vision):
            raise UserError("reward.self_judge shows the judge the responses as text, and this batch's prompts hold images or "
                            "videos, which the judge's request would leave out: turn reward.self_judge off for vision data")
        groups: dict[str, list[int]] = {}
        for i, uid in enumerate(batch.group_index):
            groups.setdefault(uid, []).append(i)
        known = {uid: gold_known(self.seed, uid, self.probability) for uid in groups}
        gold, blind = [uid for uid in groups if known[uid]], [uid for uid in groups if not known[uid]]
        gold_scores = scores.tolist()
        final = list(gold_scores)
        parsed = replies = 0
        judged_rows: RolloutBatch | None = None
        judged_texts: list[str] = []
        judged_scores: list[float] = []
        if blind:  # one reply per group: its verdict is the reward
            rows = generate(self._prompts(batch, texts, groups, blind, questions), dataclasses.replace(self.sampling, n=1))
            for uid, reply in zip(blind, response_texts(self.tokenizer, rows)):
                members = groups[uid]
                verdict = parse_scores(reply, len(members))
                parsed, replies = parsed + (verdict is not None), replies + 1
                for i, value in zip(members, verdict or [0.0] * len(members)):
                    final[i] = value
        if gold:  # rollout.n replies per group, trained on against the gold rewards
            rows = generate(self._prompts(batch, texts, groups, gold, questions), self.sampling)
            judged_texts = response_texts(self.tokenizer, rows)
            for uid, reply in zip(rows.group_index, judged_texts):
                members = groups[uid]
                verdict = parse_scores(reply, len(members))
                parsed, replies = parsed + (verdict is not None), replies + 1
                judged_scores.append(judge_reward(verdict, [gold_scores[i] for i in members], self.low, self.high))
            rows.group_index = [f"{uid}{JUDGE_SUFFIX}" for uid in rows.group_index]  # a group of their own
            judged_rows = rows
        metrics = {"self_judge/gold_groups": len(gold) / max(len(groups), 1),
                   "self_judge/parsed": parsed / max(replies, 1),
                   "self_judge/judge_rows": float(len(judged_scores)),
                   "self_judge/gold_reward": float(sum(gold_scores) / max(len(gold_scores), 1))}
        if judged_scores:
            metrics["self_judge/judge_reward"] = sum(judged_scores) / len(judged_scores)
        out = torch.tensor(final + judged_scores, dtype=scores.dtype)  # (B + judge rows,)
        if judged_rows is None:
            return Judged(batch, out, texts, metrics)
        joined = RolloutBatch.cat([batch, judged_rows])
        return Judged(joined, out, texts + judged_texts, metrics)

    def _prompts(self, batch: RolloutBatch, texts: list[str], groups: dict[str, list[int]], uids: list[str],
                 questions: dict[int, str]) -> PromptBatch:
        """One judge request per group of `uids`, chat-templated and cut to its last max_prompt_length tokens."""
        examples = []
        for k, uid in enumerate(uids):
            members = groups[uid]
            messages = ruler_messages(questions.get(members[0], ""), [clean_response(texts[i]) for i in members], self.instructions)
            text = self.formatter.render(messages, generation_prompt=True, what=f"the self-judge's request for prompt {uid}")
            ids = self.formatter.encode(text)[-self.max_prompt:]
            first = members[0]
            examples.append(RLExample(index=k, prompt_ids=ids, prompt=messages, data_source=batch.data_source[first],
                                      ground_truth=None, extra_info={}))
        prompts = collate_prompts(examples, self.pad_id)
        prompts.uid = list(uids)  # the judge rows answer their group's uid (renamed for the trained ones)
        return prompts
