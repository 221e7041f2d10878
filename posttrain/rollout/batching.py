"""Concurrent chat completions gathered into one engine `generate` call (`CallBatcher`).

Two endpoints use it: the agent function's loopback endpoint (posttrain.rollout.agent_endpoint) and
`posttrain serve` / `trainer.mode: serve` (posttrain.rollout.server's ChatService). Each caller
submits one request: its prompt (one row), its `SamplingParams` and the engine it is for (a
`BatchTarget`). The first caller to find the engine idle leads: it waits `window` seconds for
others (skipped when every open caller already waits), takes the waiting calls whose key equals the
oldest one's, generates them together and hands each caller its rows; then the next waiting caller
leads.

Which calls may share a batch (`call_key`): calls of the same target whose sampling is the same in
everything an engine call applies to all its rows (temperature, top_p, top_k, do_sample, penalties,
...). Only `n`, `max_tokens`, `stop` and `seed` may differ, because each row can be given its own:
the batch decodes up to the longest budget with the stops all calls share, and each row is then cut
where its own call would have ended (the token that completes one of its stop strings, or its
budget). A prompt is left-padded in the batch; the engines' masks and positions give each row the
distribution it has alone. Unseeded calls share one batch, each choice a row with a uid of its own
(fresh noise). A seeded call is batched only with calls of the same seed and `n`, each as one prompt
row of its own uid with n samples: the engines key a row's noise by (seed, prompt uid, sample index)
(posttrain.rollout.sampling), never by its place in the batch, so a seeded call draws the same
tokens in any batch as alone, up to floating point: logits computed in a batch of another shape
(and, on a GPU, by other kernels) may differ in the last bits, which changes a token only where its
draw sits on that edge.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.stops import StopStrings, kept_length


class BatchTarget(Protocol):
    """An engine as the batcher calls it: rows and one sampling in, the rows' responses out (the
    weights version that sampled them in `RolloutBatch.weights_version`). Calls of different
    targets never share a batch."""

    def generate(self, prompts: PromptBatch, params: SamplingParams) -> RolloutBatch: ...


def call_key(target: BatchTarget, params: SamplingParams) -> tuple:
    """Calls of equal keys may share one engine call (the module docstring): the same target, the
    same sampling apart from n, budget, stops and seed, and for a seeded call the same seed and n."""
    shared = dataclasses.replace(params, n=1, max_new_tokens=1, stop=(), seed=None)
    return (id(target), shared) if params.seed is None else (id(target), shared, params.seed, params.n)


@dataclass
class _Call:
    """One chat completion waiting for the engine, and its answer once served."""

    target: BatchTarget
    prompt: PromptBatch  # one row
    params: SamplingParams  # this call's own sampling: n, stop, seed and budget included
    done: bool = False
    out: RolloutBatch | None = None
    error: BaseException | None = None

    def key(self) -> tuple:
        return call_key(self.target, self.params)


class CallBatcher:
    """Gathers concurrent calls into one `generate` call of their target (the module docstring)."""

    def __init__(self, tokenizer: Any, window: float = 0.002, max_batch: int | None = None,
                 open_callers: Callable[[], int] | None = None):
        """`window`: seconds the leader waits for more calls (0: only those already waiting);
        `max_batch`: at most this many calls per engine call (None: no limit; 1: one call at a
        time, the throughput benchmarks' baseline); `open_callers`: how many callers are in flight
        (episodes running, requests being answered); when each already has a call waiting there is
        nobody to wait for, and the window is skipped (a lone caller is not slowed)."""
        self.tokenizer, self.window, self.max_batch, self.open_callers = tokenizer, window, max_batch, open_callers
        self.waiting: list[_Call] = []
        self.busy = False
        self.cond = threading.Condition()
        self.generate_calls = 0  # engine calls made (tests and the throughput benchmarks read it)

    def submit(self, target: BatchTarget, prompt: PromptBatch, params: SamplingParams) -> RolloutBatch:
        call = _Call(target, prompt, params)
        with self.cond:
            self.waiting.append(call)
        while True:
            with self.cond:
                while not call.done and self.busy:
                    self.cond.wait()
                if call.done:
                    if call.error is not None:
                        raise call.error
                    assert call.out is not None
                    return call.out
                self.busy = True
            try:
                with self.cond:
                    alone = self.open_callers is not None and len(self.waiting) >= self.open_callers()
                if self.window > 0 and not alone:
                    time.sleep(self.window)  # the gathering window: other callers' calls on their way
                with self.cond:
                    key = self.waiting[0].key()
                    batch = [c for c in self.waiting if c.key() == key][: self.max_batch]
                    self.waiting = [c for c in self.waiting if not any(c is b for b in batch)]
                self._serve(batch)
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()

    def _serve(self, calls: list[_Call]) -> None:
        try:
            outs = self._generate(calls)
        except BaseException as err:  # every call of the batch fails with the engine's error
            outs, error = [None] * len(calls), err
        else:
            error = None
        with self.cond:
            for call, out in zip(calls, outs):
                call.out, call.error, call.done = out, error, True

    def _generate(self, calls: list[_Call]) -> list[RolloutBatch]:
        """One engine call for `calls`; each call's rows (n of them), cut to its own stop and budget."""
        first = calls[0].params
        if first.seed is not None:  # same seed and n: one prompt row per call, the engine draws the n samples
            prompts, n = PromptBatch.cat([c.prompt for c in calls]), first.n
        else:  # a row per choice, each with a uid of its own, so each draws its own noise
            rows = [dataclasses.replace(c.prompt, uid=[f"{c.prompt.uid[0]}/{k}"]) for c in calls for k in range(c.params.n)]
            prompts, n = PromptBatch.cat(rows), 1
        budget = max(c.params.max_new_tokens for c in calls)
        # the engine may end every row at the stops all calls share (less wasted decoding); a row's
        # other stops are found by `_cut`
        stop = tuple(s for s in first.stop if all(s in c.params.stop for c in calls))
        sampling = dataclasses.replace(first, n=n, max_new_tokens=budget, stop=stop, include_stop=True)
        self.generate_calls += 1
        out = calls[0].target.generate(prompts, sampling)
        results, row = [], 0
        for c in calls:
            part = out[row : row + c.params.n]
            row += c.params.n
            results.append(self._cut(part, c.params))
        return results

    def _cut(self, out: RolloutBatch, params: SamplingParams) -> RolloutBatch:
        """`out` (n rows) as the call alone would have ended it: after the token that completes one
        of its stop strings, at most `params.max_new_tokens` tokens, and without the stop string's
        tokens where the call says `include_stop: false`."""
        ids, mask, lps = out.response_ids.clone(), out.response_mask.clone(), out.rollout_logprobs.clone()  # (n, T)
        stops = StopStrings(self.tokenizer, params.stop) if params.stop else None
        for i in range(len(out)):
            n = min(int(mask[i].sum()), params.max_new_tokens)
            if stops is not None:
                n = next((t + 1 for t in range(n) if bool(stops.hits(ids[i : i + 1], t + 1)[0])), n)
            if not params.include_stop and params.stop:
                n = kept_length(ids[i, :n].tolist(), self.tokenizer, params.stop)
            ids[i, n:], mask[i, n:], lps[i, n:] = 0, 0.0, 0.0
        return dataclasses.replace(out, response_ids=ids, response_mask=mask, rollout_logprobs=lps)
