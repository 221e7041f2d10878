"""The built-in `hf` rollout engine: batched sampling with a KV cache from any HF causal LM.

Our own decode loop rather than `model.generate`, for three reasons: the per-token log-probs must
be computed exactly as the actor computes them (`posttrain.models.lm_head_logits`, fp32, divided
by the temperature) and `generate`'s scores are post-processing; the LM head should run on the last
position only; and stopping, padding and masks should follow our record conventions directly.

The loop: prefill the left-padded prompt batch with position ids that ignore the padding, then one
forward per new token through a `StaticCache` allocated once at its final length (a growing cache
re-copies itself every token), sampling from the last position's logits. Rows stop at EOS (unless
`ignore_eos`) or a stop id; the stopping token is part of the response (mask 1.0), everything after
it is `pad_token_id` with mask 0.0 and log-prob 0.0. Finished rows leave the decode batch (their
cache rows are dropped), and the loop ends when every row has stopped or `max_new_tokens` is
reached, so T is at most `max_new_tokens`. With `SamplingParams.deadline` the clock is read between
decode steps: once past it, the rows still being decoded end where they are and are flagged in
`RolloutBatch.timed_out` (every row gets at least one token). With `SamplingParams.over_rollout` the
deadline moves earlier once enough of the call's prompt groups have finished (posttrain.rollout.progress),
the rows it ends flagged in `RolloutBatch.over_rolled` too. Before `min_new_tokens` the stop ids cannot be drawn;
the first token is drawn with `first_token_temperature`/`first_token_top_k` when they are set
(FIRE sampling); recorded log-probs are unaffected by either (posttrain.rollout.sampling). With `share_prompt_prefill` the prompt of a group is
run through the model once and its cache copied to the group's n rows (vLLM's prefix caching,
restricted to identical prompts): the same arithmetic on fewer rows, equal up to float rounding.

On CPU the rows are decoded by several threads at once (`decode_workers`), each taking a shard of
the batch with its share of the torch threads. A decode step's ops are small (batch 64 x hidden
256): torch runs them on one core even when it has two, so one batch on 2 threads decoded no faster
than on 1. Two shards of 32 rows on one thread each keep both cores busy; measured on this 2-core
machine (batch 64, 64 tokens, vocabulary 100, `benchmarks/rollout_throughput.py`): see
docs/performance.md. Sampling randomness is keyed per response row (`posttrain.rollout.sampling`), so
the samples are the same whatever the number of decode threads, rollout workers or batch cut.

Two forwards behind one small interface (prefill, step, reorder): for Llama/Qwen2-family models
`LeanDecoder` (models/lean_decoder.py: the same arithmetic as the HF modules in a short list of
torch ops, attention over the written cache prefix only), otherwise -- or with `lean_decode=False`
-- the HF decoder body over a `StaticCache`.

Weights: by default the engine keeps its own copy of the policy (`copy_weights=True`) and
`update_weights` copies the actor's tensors into it in place. A copy costs one more set of
parameters (a quarter of what fp32 AdamW training already holds) but keeps the engine's model in
eval mode and out of the actor's autograd, lets it run in another dtype, and is what overlapping
rollout with training will need. `copy_weights=False` shares the actor's module (no extra memory;
the engine switches it to eval mode while sampling). Either way the engine records the version it
was given and refuses to sample when the trainer expects another one.

Sleeping (`sleep`/`wake_up`, what `rollout.free_cache_engine` asks between generations): the engine
keeps no KV cache between calls (each `generate` allocates its cache and drops it on return), so
what sleep can free is the weight copy the engine owns (`copy_weights=True`, or `owns_weights=True`
for a copy made by the caller) and, on CUDA, the allocator's cached blocks. Level 1 moves an owned
copy to host memory and `wake_up` moves it back; level 2 drops it (its storage is freed; `wake_up`
reallocates it uninitialised and the next `update_weights` refills it, before which `generate`
refuses). An engine that shares the actor's module frees nothing of it: the actor trains those
weights. On a CPU device nothing moves at either level. `generate` while asleep is refused.
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn

from posttrain.models.logprobs import check_head_matches, lm_head_logits
from posttrain.models.positions import position_ids_from_mask
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import SamplingParams, StalePolicyError, Weights, named_tensors
from posttrain.rollout.progress import GroupProgress
from posttrain.models.lean_decoder import LeanDecoder, lean_unsupported_reason
from posttrain.models.vision import has_images
from posttrain.rollout.hf_decoder import HFDecoder, VisionDecoder, auto_decode_workers
from posttrain.rollout.sampling import keyed_uniforms, next_tokens, row_keys
from posttrain.rollout.stops import StopStrings


def _token_ids(value: int | Sequence[int] | None) -> list[int]:
    if value is None:
        return []
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]


class HFEngine:
    """Rollout engine over an in-process HF causal LM (CPU or GPU)."""

    def __init__(
        self,
        model: nn.Module,
        *,
        eos_token_ids: Sequence[int] | int | None = None,
        pad_token_id: int | None = None,
        copy_weights: bool = True,
        dtype: torch.dtype | None = None,
        max_num_seqs: int | None = None,
        seed: int = 0,
        version: int = 0,
        attn_implementation: str | None = "auto",
        share_prompt_prefill: bool = False,
        lean_decode: bool = True,
        decode_workers: int | None = None,
        tokenizer: Any = None,
        owns_weights: bool = False,
    ):
        """`eos_token_ids`/`pad_token_id` default to the model's generation config, then its config.
        `max_num_seqs` caps the rows decoded at once (KV-cache memory); None decodes all together.
        `attn_implementation` is the attention kernel used while sampling (restored afterwards):
        "auto" is eager on CPU, where torch's fused CPU kernel costs 2-3x more than plain matmuls
        at one query token and short contexts (hidden 256, batch 64: 2.1 vs 0.8 ms per layer and
        token), and the model's own kernel elsewhere; None always keeps the model's own.
        `share_prompt_prefill` prefills each distinct prompt once (see the module docstring).
        `lean_decode` uses `LeanDecoder` when `lean_unsupported_reason` accepts the model (checked
        at every `generate`, so hooks added later are honoured); False always takes the HF path.
        `decode_workers` is how many threads decode shards of the batch at once (see the module
        docstring); None picks `auto_decode_workers`. `tokenizer` decodes responses for stop
        strings (`SamplingParams.stop`). `owns_weights`: `model` is a copy no one else uses, so
        `sleep` may move it (implied by `copy_weights`)."""
        self.model = copy.deepcopy(model) if copy_weights else model
        if copy_weights:
            self.model.eval().requires_grad_(False)
            if dtype is not None:
                self.model.to(dtype)
        check_head_matches(self.model)
        gen_cfg = getattr(model, "generation_config", None)
        eos = eos_token_ids
        if eos is None:
            eos = getattr(gen_cfg, "eos_token_id", None) or getattr(model.config, "eos_token_id", None)
        self.eos_token_ids = _token_ids(eos)
        if pad_token_id is None:
            pad_token_id = getattr(gen_cfg, "pad_token_id", None) or getattr(model.config, "pad_token_id", None)
        if pad_token_id is None:
            pad_token_id = self.eos_token_ids[0] if self.eos_token_ids else 0
        self.pad_token_id = int(pad_token_id)
        self.max_num_seqs = max_num_seqs
        self.device = next(self.model.parameters()).device
        self.seed = int(seed)  # with each row's prompt uid and sample index, keys its sampling noise
        self._version = version
        if attn_implementation == "auto":
            attn_implementation = "eager" if self.device.type == "cpu" else None
        self.attn_implementation = attn_implementation
        self.share_prompt_prefill = share_prompt_prefill
        self.lean_decode = lean_decode
        if decode_workers is not None and decode_workers < 1:
            raise ValueError(f"decode_workers must be >= 1 or None (auto), got {decode_workers}")
        self.decode_workers = decode_workers
        self._pool: ThreadPoolExecutor | None = None  # created at the first sharded rollout
        self._pool_size = 0
        self.tokenizer = tokenizer
        self.owns_weights = copy_weights or owns_weights
        self.asleep = 0  # the level of the last sleep, 0 when awake
        self.weights_dropped = False  # a level-2 sleep freed the owned copy; update_weights refills it
        self.clock = time.time  # what SamplingParams.deadline is compared with; tests pass a fake one

    def workers_for(self, rows: int) -> int:
        """Threads that decode a batch of `rows` rows: `decode_workers`, else `auto_decode_workers`;
        never more than the rows."""
        workers = self.decode_workers or auto_decode_workers(self.device, rows)
        return max(1, min(workers, rows))

    def uses_lean_decoder(self) -> bool:
        """Whether `generate` will run `LeanDecoder` (else the HF decoder body)."""
        return self.lean_decode and lean_unsupported_reason(self.model) is None

    @property
    def weights_version(self) -> int:
        return self._version

    def sleep(self, level: int = 1) -> None:
        """Free what the engine holds between generations (see the module docstring)."""
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 (offload the weights) or 2 (drop them), got {level}")
        if self.owns_weights and self.device.type != "cpu" and not self.asleep:
            # level 2 keeps the parameter objects but frees their storage (meta tensors)
            self.model.to("cpu" if level == 1 else "meta")
            self.weights_dropped = level == 2
        if self._pool is not None and level == 2:
            self._pool.shutdown(wait=True)
            self._pool, self._pool_size = None, 0
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # the finished rollout's cache blocks go back to the device
        self.asleep = max(self.asleep, level)

    def wake_up(self) -> None:
        """Retake the device memory: an offloaded copy moves back, a dropped one is reallocated
        (uninitialised, until `update_weights`)."""
        if not self.asleep:
            return
        if self.owns_weights and self.device.type != "cpu":
            if self.weights_dropped:
                self.model.to_empty(device=self.device)
            else:
                self.model.to(self.device)
        self.asleep = 0

    def update_weights(self, weights: Weights, version: int) -> None:
        """Take the actor's weights as `version`: copied in place (no reallocation), or nothing to
        copy when the engine shares the very module it is given. An iterable of (name, tensor)
        pairs is copied one tensor at a time as it arrives (a sharded actor gathers each parameter
        just before it is needed); every parameter and buffer of the engine must be named once.
        Asleep at level 1 the copy lands in the offloaded weights; at level 2 the engine wakes
        its weights first (they are about to be refilled)."""
        if self.weights_dropped:
            self.model.to_empty(device=self.device)
            self.asleep = 0
        if weights is self.model:
            pass
        elif isinstance(weights, (nn.Module, Mapping)):
            state = weights.state_dict() if isinstance(weights, nn.Module) else weights
            with torch.no_grad():
                self.model.load_state_dict(state, strict=True)
        else:
            own = self.model.state_dict(keep_vars=True)
            missing = set(own)
            with torch.no_grad():
                for name, tensor in named_tensors(weights):
                    if name not in own:
                        raise KeyError(f"update_weights: the engine's model has no tensor {name!r}")
                    own[name].copy_(tensor)  # in place, casting to the engine's dtype and device
                    missing.discard(name)
            if missing:
                raise KeyError(f"update_weights: no value was given for {sorted(missing)[:3]}")
        self.weights_dropped = False
        self._version = int(version)

    def generate(
        self, prompts: PromptBatch, params: SamplingParams, *, expected_version: int, seed: int | None = None
    ) -> RolloutBatch:
        """`params.n` responses per prompt; rows of one prompt are adjacent and share `group_index`.

        `expected_version` is the actor's current weights version; a mismatch raises
        `StalePolicyError`. Row i's sampling noise is keyed by (seed, its prompt's uid, its index
        within the group) (`posttrain.rollout.sampling.row_keys`); `seed` replaces the engine's seed
        for this call and `params.seed` both. Prompts that must sample independently need distinct
        uids (the trainer makes them unique per step; a validation reuses its uids, so every
        validation draws the same noise).
        """
        if self.asleep:
            raise RuntimeError(f"the hf engine is asleep (level {self.asleep}): call wake_up() before generate")
        if self.weights_dropped:
            raise RuntimeError("the hf engine's weights were dropped by sleep(level=2): call update_weights before generate")
        if expected_version != self._version:
            raise StalePolicyError(
                f"rollout engine holds weights version {self._version} but the trainer expects "
                f"{expected_version}: call update_weights(actor weights, version={expected_version}) "
                "after every optimizer step before generating"
            )
        if bool((prompts.attention_mask.sum(1) == 0).any()):
            raise ValueError("every prompt needs at least one real token (a row of attention_mask is all 0)")
        rows = prompts.repeat_interleave(params.n)
        samples = list(range(params.n)) * len(prompts)  # index of each row within its group
        seed = params.seed if params.seed is not None else self.seed if seed is None else seed
        keys = row_keys(seed, rows.uid, samples, self.device)  # (B, 2)
        chunk = self.max_num_seqs or len(rows)
        # explorer.over_rollout: one count of finished groups for every chunk and decode thread of this call
        progress = GroupProgress(rows.uid, params.over_rollout, self.clock) if params.over_rollout is not None else None
        pieces = []
        was_training = self.model.training
        own_attn = getattr(self.model.config, "_attn_implementation", None)
        lean = self.uses_lean_decoder() and not has_images(prompts.vision)
        switch = (
            not lean and self.attn_implementation is not None and own_attn is not None
            and self.attn_implementation != own_attn
        )
        self.model.eval()
        if switch:
            self.model.set_attn_implementation(self.attn_implementation)
        try:
            for start in range(0, len(rows), chunk):
                part = rows[start : start + chunk]
                pieces.extend(self._rollout_sharded(part, params, lean, keys[start : start + chunk], progress))
        finally:
            self.model.train(was_training)
            if switch:
                self.model.set_attn_implementation(own_attn)
        return RolloutBatch.cat(pieces)

    def _rollout_sharded(
        self, rows: PromptBatch, params: SamplingParams, lean: bool, keys: Tensor, progress: GroupProgress | None = None,
    ) -> list[RolloutBatch]:
        """`_rollout` on `workers_for(len(rows))` consecutive shards of `rows` at once, one thread
        each with an equal share of the torch threads (at least one); results in row order. Each
        row keeps its own sampling key (`keys`, (B, 2)), so the shards do not change the samples."""
        workers = self.workers_for(len(rows))
        if workers == 1:
            return [self._rollout(rows, params, lean, keys, progress)]
        size = -(-len(rows) // workers)  # consecutive shards: a group's rows stay together when they fit
        starts = range(0, len(rows), size)
        threads = torch.get_num_threads()
        per_worker = max(1, threads // len(starts))

        def work(start: int) -> RolloutBatch:
            torch.set_num_threads(per_worker)  # this thread's share; thread-local for the ops it runs
            return self._rollout(rows[start : start + size], params, lean, keys[start : start + size], progress)

        try:
            return list(self._decode_pool(len(starts)).map(work, starts))
        finally:
            torch.set_num_threads(threads)  # the count new threads start with is process-wide

    def _decode_pool(self, size: int) -> ThreadPoolExecutor:
        """The engine's decode threads, kept across calls: fresh threads per call each set up their
        own allocator arenas and BLAS buffers, which measurably grew the resident memory from call
        to call (batch 64: +127 MiB over 48 rollouts against +58 MiB with kept threads)."""
        if self._pool is None or self._pool_size < size:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="posttrain-decode")
            self._pool_size = size
        return self._pool

    def _rollout(
        self, rows: PromptBatch, params: SamplingParams, lean: bool, keys: Tensor, progress: GroupProgress | None = None,
    ) -> RolloutBatch:
        prompt_ids = rows.input_ids.to(self.device)  # (B, P)
        prompt_mask = rows.attention_mask.to(self.device, torch.float32)  # (B, P)
        groups = list(rows.uid) if progress is not None else None  # each row's group, for the progress count
        with torch.inference_mode():
            response_ids, response_mask, logprobs, cut, over = self._decode(
                prompt_ids, prompt_mask, params, lean, keys, rows.vision, progress, groups)
        # Inference tensors cannot be saved for backward; the actor's forward will use these ids.
        batch = RolloutBatch.sampled(rows, response_ids.clone(), response_mask.clone(), logprobs.clone(), self._version)
        if params.deadline is not None or progress is not None:  # which rows the deadline ended (RolloutBatch.timed_out)
            batch.timed_out = cut.clone()
        if progress is not None:  # and whether over-rollout's deadline was the one (one stop per shard)
            batch.over_rolled = cut.clone() if over else torch.zeros_like(cut)
        return batch

    def _prefill(self, decoder: LeanDecoder | HFDecoder, ids: Tensor, mask: Tensor, positions: Tensor) -> Tensor:
        """Run the prompts (B, P) into the decoder's cache; return each row's last hidden state (B, H).

        With `share_prompt_prefill`, identical rows (the n samples of a prompt) are computed once
        and their cache rows copied, which cuts prefill work by n.
        """
        if self.share_prompt_prefill:
            key = torch.cat([ids, mask], dim=1)  # (B, 2P): same tokens and same padding
            unique, inverse = torch.unique(key, dim=0, return_inverse=True)  # (U, 2P), (B,)
            if len(unique) < len(ids):
                first = torch.full((len(unique),), len(ids), dtype=torch.long, device=ids.device)
                first = first.scatter_reduce(0, inverse, torch.arange(len(ids), device=ids.device), "amin")  # (U,)
                hidden = decoder.prefill(ids[first], mask[first], positions[first])  # (U, H)
                decoder.reorder(inverse)  # (U, ...) -> (B, ...): each row gets its prompt's cache
                return hidden[inverse]  # (B, H)
        return decoder.prefill(ids, mask, positions)

    def _decode(
        self, prompt_ids: Tensor, prompt_mask: Tensor, params: SamplingParams, lean: bool, keys: Tensor,
        vision: list | None = None, progress: GroupProgress | None = None, groups: list[str] | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, bool]:
        """Prefill + token-by-token decode; returns response ids (B, T), mask (B, T), log-probs (B, T),
        which rows `params.deadline` (or over-rollout's, through `progress`) cut (B,) bool, and whether
        the cut was over-rollout's. `groups` names each row's group, whose finished rows `progress`
        counts. A batch with images (`vision`) prefills through `VisionDecoder` (posttrain.models.vision)."""
        B, P = prompt_ids.shape
        # The cache is allocated once at its final length and written in place: a growing cache
        # re-copies every layer's keys and values at every token, which on CPU cost more than the
        # model's matmuls.
        max_len = P + params.max_new_tokens
        if has_images(vision):
            decoder = VisionDecoder(self.model, max_len, vision)
            positions = decoder.positions(prompt_ids, prompt_mask)  # (3, B, P)
            hidden = decoder.prefill(prompt_ids, prompt_mask.long(), positions)  # (B, H)
            next_pos = positions[0, :, -1] + 1  # (B,): prompts end in text, whose three positions are equal
        else:
            decoder = LeanDecoder(self.model, max_len) if lean else HFDecoder(self.model, max_len)
            position_ids = position_ids_from_mask(prompt_mask)  # (B, P)
            hidden = self._prefill(decoder, prompt_ids, prompt_mask.long(), position_ids)  # (B, H)
            next_pos = position_ids[:, -1] + 1  # (B,)
        stop_ids = torch.tensor(
            sorted(set(params.stop_token_ids) | (set() if params.ignore_eos else set(self.eos_token_ids))),
            dtype=torch.long, device=self.device,
        )
        stops = StopStrings(self.tokenizer, params.stop) if params.stop else None
        seen = None
        if params.repetition_penalty != 1.0:
            vocab = self.model.get_output_embeddings().weight.shape[0]
            seen = torch.zeros(B, vocab, dtype=torch.bool, device=self.device)  # (B, V)
            seen.scatter_(1, prompt_ids, prompt_mask > 0)  # padding is not "seen" text
        T = params.max_new_tokens
        ids = torch.full((B, T), self.pad_token_id, dtype=torch.long, device=self.device)  # (B, T)
        masks = torch.zeros(B, T, dtype=torch.float32, device=self.device)  # (B, T)
        lps = torch.zeros(B, T, dtype=torch.float32, device=self.device)  # (B, T)
        rows = torch.arange(B, device=self.device)  # (b,): the rows of the output still being decoded
        finished = torch.zeros(B, dtype=torch.bool, device=self.device)  # (b,)
        cut = torch.zeros(B, dtype=torch.bool, device=self.device)  # (B,): rows the deadline ended
        budget = None
        if params.max_total_tokens is not None:  # each row's room under the prompt + response cap
            budget = (params.max_total_tokens - prompt_mask.sum(1).long()).clamp(min=1)  # (B,)
        used, over = 0, False
        for step in range(T):
            used = step + 1
            logits = lm_head_logits(self.model, hidden)  # (b, V) fp32
            uniforms = keyed_uniforms(keys, step) if params.do_sample else None  # (b,): row i's noise at this step
            # the stop ids cannot be drawn before min_new_tokens (the row's budget still ends it)
            banned = stop_ids if step < params.min_new_tokens and len(stop_ids) else None
            token, logprob = next_tokens(logits, params, seen, uniforms, step=step, banned=banned)  # (b,), (b,)
            alive = ~finished
            token = torch.where(alive, token, self.pad_token_id)
            ids[rows, step] = token
            masks[rows, step] = alive.float()
            lps[rows, step] = torch.where(alive, logprob, 0.0)
            if seen is not None:
                seen[torch.arange(len(rows), device=self.device), token] |= alive
            finished = finished | torch.isin(token, stop_ids)
            if budget is not None:  # this row has used up its share of max_total_tokens
                finished = finished | (step + 1 >= budget[rows])
            if stops is not None:
                finished = finished | (stops.hits(ids[rows], step + 1) & alive)
            if progress is not None:  # rows a stop or their length ended now (the last step's: by length)
                done = finished & alive if step + 1 < T else alive
                progress.rows_done(groups[i] for i in rows[done].tolist())
            if step + 1 == T or bool(finished.all()):
                break
            limit = params.deadline if progress is None else progress.limit(params.deadline)
            if limit is not None and self.clock() >= limit:
                # checked between decode steps, after this step's token: a row still going ends here,
                # unfinished, told apart from one that a stop or its length ended (explorer.max_timeout,
                # or explorer.over_rollout once enough groups finished)
                cut[rows[~finished]] = True
                over = progress is not None and progress.cut_by_it(params.deadline)
                break
            if 4 * int(finished.sum()) >= len(rows):
                # Drop finished rows once they are a quarter of the batch: their remaining tokens are
                # padding, so decoding them is wasted work. Each drop copies the kept rows of the
                # cache; dropping only at 1/4 bounds those copies to ~4 full-batch cache copies per
                # rollout, which a few decode steps pay back.
                keep = (~finished).nonzero().squeeze(1)  # (b',)
                decoder.reorder(keep)
                rows, token, next_pos, finished = rows[keep], token[keep], next_pos[keep], finished[keep]
                keys = keys[keep]
                seen = seen[keep] if seen is not None else None
            hidden = decoder.step(token, next_pos)  # (b, H)
            next_pos = next_pos + 1
        return ids[:, :used], masks[:, :used], lps[:, :used], cut, over  # (B, T) each, (B,)
