"""The rollout role: sampling responses with this process's engine, on this rank's share of prompts.

With several worker processes every rank holds a whole copy of the policy in its engine (the weights
arrive through `posttrain.cluster.weight_sync`), samples the responses of its consecutive share of
the step's prompts, and every rank then receives the whole batch in prompt order, which is what the
roles after it expect (`posttrain.cluster.parallel`). With `cluster.device_mapping.rollout` on the
first m of the workers only those m ranks generate and the others wait for the batch (ROLL's layouts
that give the engines fewer devices than training). Those others still hold an engine, kept in step
by the weight sync like every rank's, which keeps the sync one collective for all ranks.

An engine spread over t consecutive worker processes (`engine.ranks_per_engine` = t:
`rollout.tensor_model_parallel_size` of the vllm and sglang engines) samples one share for its group.
The vllm engine's tensor-parallel ranks are those processes, and every one of them is given the same
share, as that engine needs; the sglang engine runs in the group's first process only, and the
others, whose handle does not sample (`engine.samples` False), only receive the batch. Either way
the batch takes the group's first rank's copy.

Each response's sampling noise is keyed by the rollout seed, its prompt's uid and its sample index
(`posttrain.rollout.sampling`), not by the rank or the batch it was decoded in, so the batch is the
same on any number of ranks (to float rounding of the logits in other batch shapes).

With `free_cache` (`rollout.free_cache_engine`) the engine sleeps after every generation and wakes
before the next (level 1: KV cache released, weights kept in host memory), so that training has the
device memory in between; weights pushed while it sleeps land in the sleeping engine.
"""

from __future__ import annotations

from typing import Any

from posttrain.cluster.parallel import DataParallel, contiguous_shares
from posttrain.data.dataset import pad_token_id
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import RolloutEngine, SamplingParams
from posttrain.rollout.stops import drop_stop_strings
from posttrain.workers.microbatch import SINGLE


class RolloutWorker:
    """An engine and this rank's place among the rollout ranks; `generate` returns the whole batch."""

    def __init__(self, engine: RolloutEngine, dp: DataParallel = SINGLE, free_cache: bool = False, tokenizer: Any = None,
                 engines: int | None = None):
        self.engine = engine
        self.dp = dp
        # ranks 0..engines-1 generate (cluster.device_mapping.rollout on a subset of the workers); None: every rank
        self.engines = dp.size if engines is None else min(engines, dp.size)
        # worker processes that run one engine together (its tensor-parallel ranks), each given the same prompts
        self.group = getattr(engine, "ranks_per_engine", 1)
        if self.engines % self.group or dp.size % self.group:
            raise ValueError(f"{self.group} ranks per engine do not divide the {self.engines} generating ranks of {dp.size}")
        self.free_cache = free_cache
        self.tokenizer = tokenizer  # decodes responses for stop strings left out of the output

    def generate(
        self, prompts: PromptBatch, params: SamplingParams, *, expected_version: int, seed: int | None = None
    ) -> RolloutBatch:
        """`params.n` responses for every prompt of `prompts` (see `RolloutEngine.generate`); with
        `params.include_stop` False, each stop string's tokens are taken off again, whatever the engine."""
        if not self.free_cache:
            batch = self._generate(prompts, params, expected_version, seed)
        else:
            self.engine.wake_up()
            try:
                batch = self._generate(prompts, params, expected_version, seed)
            finally:
                self.engine.sleep(level=1)
        if params.stop and not params.include_stop:
            if self.tokenizer is None:
                raise ValueError("stop strings left out of the output need the tokenizer: build RolloutWorker with tokenizer=")
            batch.response_ids, batch.response_mask, batch.rollout_logprobs = drop_stop_strings(
                batch.response_ids, batch.response_mask, batch.rollout_logprobs, self.tokenizer, params.stop, pad_token_id(self.tokenizer))
        return batch

    def _generate(self, prompts: PromptBatch, params: SamplingParams, expected_version: int, seed: int | None) -> RolloutBatch:
        if not self.dp.distributed:
            return self.engine.generate(prompts, params, expected_version=expected_version, seed=seed)
        # Consecutive shares keep every prompt's group on one engine and the gathered rows in order;
        # the ranks of one engine that sample all generate its share; ranks past the engines' get none
        # and only receive the batch.
        engines = self.engines // self.group
        shares = contiguous_shares(len(prompts), engines) + [[]] * ((self.dp.size - self.engines) // self.group)
        rows = shares[self.dp.rank // self.group]
        mine = None
        if rows and getattr(self.engine, "samples", True):
            # pickled between ranks from host memory: a CUDA tensor would unpickle onto the sender's GPU
            mine = self.engine.generate(prompts[rows], params, expected_version=expected_version, seed=seed).to("cpu")
        # one copy of each engine's rows: its first rank's (the others sampled the same tokens)
        parts = [p for p in self.dp.gather_objects(mine if self.dp.rank % self.group == 0 else None) if p is not None]
        return RolloutBatch.cat(parts).to(self.engine.device)
