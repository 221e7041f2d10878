"""The `sglang` rollout engine: SGLang's offline `sglang.Engine` beside the training process.

Written against SGLang's documented Python API: `Engine(**server_args)`, `Engine.generate(input_ids=,
sampling_params=, return_logprob=True)` (each result a dict with `output_ids` and
`meta_info.output_token_logprobs`, a list of (log-prob, token id, text)),
`Engine.update_weights_from_tensor(named_tensors, flush_cache=)` and
`Engine.release_memory_occupation(tags)` / `resume_memory_occupation(tags)`. SGLang is imported
only when an engine is built or the machine is checked.

- Construction: `engine_kwargs` maps the `rollout` settings onto SGLang's server arguments
  (tp_size, mem_fraction_static, context_length, max_running_requests, chunked_prefill_size,
  disable_radix_cache, disable_cuda_graph, load_format, enable_memory_saver), then
  `rollout.engine_kwargs.sglang` as it is (attention_backend, ...).
- Log-probs: SGLang reports log-probs after temperature scaling unless its
  SGLANG_RETURN_ORIGINAL_LOGPROB is set, which is the contract when top-k, top-p and min-p are off.
- Weights: `update_weights_from_tensor` per bucket of `rollout.update_weights_bucket_megabytes`,
  the cache flushed with the last bucket; `load_format: dummy*` starts from random weights and
  sends the policy's at once.
- Per-request seeds go in SGLang's `sampling_seed`; which SGLang versions honour it is not verified.

Not run here: no GPU or SGLang on the machine this was written on. tests/rollout/test_sglang_adapter.py
checks the translation against a stand-in `sglang` module.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import SamplingParams, Weights, buckets, named_tensors
from posttrain.rollout.registry import register_engine
from posttrain.rollout.requests import (
    Request, check_version, dtype_name, max_model_len, requests_for, rollout_batch, tensor_parallel_note, tensor_parallel_problem,
)


def machine_problem(cfg: Any) -> str | None:
    """What this machine lacks to run the sglang engine, as one line, or None."""
    missing = []
    try:
        import sglang  # noqa: F401
    except ImportError:
        missing.append("SGLang is not installed (pip install 'posttrain[sglang]')")
    if not torch.cuda.is_available():
        missing.append("this machine has no CUDA GPU, which SGLang needs")
    if missing:
        return "; ".join(missing) + f". Use rollout.name=hf on this machine (its SGLang settings are then reported unused){tensor_parallel_note(cfg)}"
    return tensor_parallel_problem(cfg)


def engine_kwargs(cfg: Any, dtype: torch.dtype, seed: int) -> dict[str, Any]:
    """Keyword arguments of `sglang.Engine` for this config (the rollout keys, then engine_kwargs.sglang)."""
    r = cfg.rollout
    kwargs: dict[str, Any] = dict(
        model_path=cfg.model.path,
        tokenizer_path=cfg.model.tokenizer_path or cfg.model.path,
        trust_remote_code=cfg.model.trust_remote_code,
        dtype=dtype_name(dtype),
        random_seed=seed,
        tp_size=r.tensor_model_parallel_size,
        mem_fraction_static=r.gpu_memory_utilization,
        context_length=max_model_len(cfg),
        max_running_requests=r.max_num_seqs,
        chunked_prefill_size=r.max_num_batched_tokens if r.enable_chunked_prefill else -1,
        disable_radix_cache=not r.enable_prefix_caching,
        disable_cuda_graph=r.enforce_eager,
        load_format="dummy" if r.load_format.startswith("dummy") else r.load_format,
        enable_memory_saver=r.free_cache_engine,
        # released weights are kept in host memory, so a wake without a weight update (a validation
        # right after the step's rollout) samples from the right weights, as vLLM's level-1 sleep
        enable_weights_cpu_backup=r.free_cache_engine,
        log_level="error",
    )
    kwargs.update({k: v for k, v in r.engine_kwargs.sglang.items() if v is not None})
    return kwargs


def sampling_dict(params: SamplingParams, request: Request) -> dict[str, Any]:
    """SGLang's sampling parameters (a dict) for one response of `params`."""
    out: dict[str, Any] = dict(
        n=1,
        temperature=params.temperature if params.do_sample else 0.0,  # SGLang: 0 is greedy
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else -1,
        min_p=params.min_p,
        repetition_penalty=params.repetition_penalty,
        max_new_tokens=params.max_new_tokens,
        ignore_eos=params.ignore_eos,
    )
    if params.stop:
        out["stop"] = list(params.stop)
    if params.stop_token_ids:
        out["stop_token_ids"] = list(params.stop_token_ids)
    if request.seed is not None:
        out["sampling_seed"] = request.seed
    return out


def response_of(result: dict[str, Any]) -> tuple[list[int], list[float]]:
    """(token ids, log-probs) of one SGLang generate result."""
    tokens = [int(t) for t in result["output_ids"]]
    entries = result["meta_info"]["output_token_logprobs"]  # [(log-prob, token id, text), ...]
    return tokens, [float(e[0]) for e in entries]


class SGLangEngine:
    """A `RolloutEngine` over `sglang.Engine` (see the module docstring)."""

    name = "sglang"

    def __init__(self, engine: Any, *, pad_token_id: int, bucket_bytes: int, device: torch.device, version: int = 0):
        self.engine = engine
        self.pad_token_id = pad_token_id
        self.bucket_bytes = bucket_bytes
        self.device = device
        self._version = version
        self.asleep = 0
        self.weights_awake = False

    @property
    def weights_version(self) -> int:
        return self._version

    def generate(self, prompts: PromptBatch, params: SamplingParams, *, expected_version: int, seed: int | None = None) -> RolloutBatch:
        check_version(self._version, expected_version, "sglang")
        if self.asleep:
            raise RuntimeError("the sglang engine is asleep: call wake_up() before generate")
        requests = requests_for(prompts, params, seed)
        results = self.engine.generate(
            input_ids=[r.prompt_ids for r in requests], sampling_params=[sampling_dict(params, r) for r in requests],
            return_logprob=True,
        )
        responses = [response_of(r) for r in results]
        return rollout_batch(prompts, params.n, [t for t, _ in responses], [v for _, v in responses],
                             version=self._version, pad_token_id=self.pad_token_id, device=self.device)

    def update_weights(self, weights: Weights, version: int) -> None:
        if self.asleep and not self.weights_awake:
            self.engine.resume_memory_occupation(tags=["weights"])
            self.weights_awake = True
        pending = None
        for bucket in buckets(named_tensors(weights), self.bucket_bytes):
            if pending is not None:
                self.engine.update_weights_from_tensor(named_tensors=pending, flush_cache=False)
            pending = bucket
        if pending is not None:  # the last bucket flushes the cache, computed with the old weights
            self.engine.update_weights_from_tensor(named_tensors=pending, flush_cache=True)
        self._version = int(version)

    def sleep(self, level: int = 1) -> None:
        """SGLang has one release: the KV cache and the weights both (level is not distinguished)."""
        if not self.asleep:
            self.engine.release_memory_occupation()
            self.asleep, self.weights_awake = level, False

    def wake_up(self) -> None:
        if self.asleep:
            self.engine.resume_memory_occupation(tags=["kv_cache"] if self.weights_awake else None)
            self.asleep, self.weights_awake = 0, False


@register_engine("sglang", machine_check=machine_problem)
def build_sglang_engine(cfg: Any, model: nn.Module, tokenizer: Any, *, seed: int, owns_weights: bool) -> SGLangEngine:
    """An SGLang engine for `cfg`; with a dummy load format, `model`'s weights are sent in at once."""
    import sglang

    dtype = next(model.parameters()).dtype
    engine = SGLangEngine(sglang.Engine(**engine_kwargs(cfg, dtype, seed)), pad_token_id=tokenizer.pad_token_id,
                          device=next(model.parameters()).device, bucket_bytes=cfg.rollout.update_weights_bucket_megabytes << 20)
    if cfg.rollout.load_format.startswith("dummy"):
        engine.update_weights(model, version=0)
    return engine
