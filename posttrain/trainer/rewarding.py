"""The reward role as the trainer sees it: responses in, one score per response out.

Combines the rule/custom reward function (through a reward manager) with an optional reward model:
score = function_weight x function score + reward_model_weight x reward-model score. Built once per
stage from the `reward` section; the trainer only calls `score` and `close`.
"""

from __future__ import annotations

from typing import Any

import torch

from posttrain.config.schema import Config
from posttrain.records import RolloutBatch
from posttrain.rewards import RewardInput, build_reward_manager, load_reward_function


class RewardStage:
    """Scores decoded responses; `score` returns (scores (B,), metrics)."""

    def __init__(self, cfg: Config, tokenizer: Any):
        r = cfg.reward
        fn = load_reward_function(
            r.custom_reward_function.path, r.custom_reward_function.name, dict(r.custom_reward_function.reward_kwargs)
        )
        options: dict[str, Any] = {"on_error": r.on_error, "failure_reward": r.failure_reward}
        if r.reward_manager == "parallel":
            options.update(num_workers=r.num_workers, timeout_s=r.timeout_s)
        self.manager = build_reward_manager(r.reward_manager, fn, **options)
        self.tokenizer = tokenizer
        self.function_weight = r.function_weight
        self.rm_weight = r.reward_model_weight
        self.reward_model = None
        if r.reward_model.enable:
            from posttrain.rewards import RewardModelScorer

            rm = r.reward_model
            self.reward_model = RewardModelScorer(
                rm.path, micro_batch_size=rm.micro_batch_size_per_gpu, max_length=rm.max_length,
                max_tokens=rm.forward_max_token_len_per_gpu if rm.use_dynamic_bsz else None,
            )

    def decode(self, batch: RolloutBatch) -> list[str]:
        """Response texts without padding (special tokens kept, as verl passes them to scorers)."""
        lengths = batch.response_mask.sum(1).long().tolist()
        return [
            self.tokenizer.decode(ids[:n].tolist(), skip_special_tokens=False)
            for ids, n in zip(batch.response_ids, lengths)
        ]

    def score(
        self, batch: RolloutBatch, texts: list[str]
    ) -> tuple[torch.Tensor, dict[str, float], dict[str, list[float]]]:
        """Scores (B,), batch metrics, and the per-sample extra values of dict-returning functions."""
        samples = [
            RewardInput(data_source=ds, solution_str=text, ground_truth=gt, extra_info=info, index=i)
            for i, (ds, text, gt, info) in enumerate(zip(batch.data_source, texts, batch.ground_truth, batch.extra_info))
        ]
        out = self.manager.score(samples)
        scores = out.tensor() * self.function_weight  # (B,)
        metrics = out.metrics()
        if self.reward_model is not None:
            rm = self._reward_model_scores(batch, texts)  # (B,)
            scores = scores + self.rm_weight * rm
            metrics["reward/rm_score"] = float(rm.mean())
        return scores, metrics, out.extra

    def _reward_model_scores(self, batch: RolloutBatch, texts: list[str]) -> torch.Tensor:
        """The reward model's score of each response: of the conversation rebuilt in the reward
        model's own chat template from the raw messages (data.return_raw_chat, as verl), else of
        the policy's prompt text followed by the response."""
        if batch.raw_chat is not None and all(chat is not None for chat in batch.raw_chat):
            eos = self.tokenizer.eos_token or ""
            answers = [t.removesuffix(eos) if eos else t for t in texts]  # the template closes the turn itself
            return self.reward_model.score_conversations(batch.raw_chat, answers)
        return self.reward_model.score_texts([p + t for p, t in zip(self._prompt_texts(batch), texts)])

    def _prompt_texts(self, batch: RolloutBatch) -> list[str]:
        """Templated prompt texts: the dataset's (data.return_full_prompt), else decoded from the ids."""
        if all(p is not None for p in batch.raw_prompt):
            return list(batch.raw_prompt)
        rows = [ids[mask > 0].tolist() for ids, mask in zip(batch.prompt_ids, batch.prompt_mask)]
        return self.tokenizer.batch_decode(rows, skip_special_tokens=False)

    def baseline_scores(self, greedy: RolloutBatch, batch: RolloutBatch) -> torch.Tensor:
        """Scores of `greedy` (one response per prompt) for every row of `batch`, matched by prompt
        uid (`group_index`): the per-sample baseline (B,) of estimators such as ReMax."""
        scores, _, _ = self.score(greedy, self.decode(greedy))
        by_prompt = dict(zip(greedy.group_index, scores.tolist()))
        rows = [by_prompt[uid] for uid in batch.group_index]
        return torch.tensor(rows, dtype=torch.float32, device=batch.response_mask.device)  # (B,)

    def close(self) -> None:
        self.manager.close()
