"""The `vllm` rollout engine: vLLM's offline `LLM` in the training process (colocated placement).

Written against vLLM's documented Python API (`vllm.LLM`, `vllm.SamplingParams`, `LLM.generate`
with token-id prompts, `LLM.sleep(level)` / `LLM.wake_up(tags)`, `LLM.collective_rpc`,
`LLM.reset_prefix_cache`) for the versions in `SUPPORTED`. vLLM is imported only when an engine is
built or the machine is checked, so configs naming it load and plan anywhere.

- Construction: `llm_kwargs` maps the `rollout` settings (verl's keys) onto `LLM(...)` keywords;
  `rollout.engine_kwargs.vllm` is passed last, as it is, so it can set or override anything.
  `logprobs_mode="processed_logprobs"` makes vLLM report the log-probs of the distribution it
  samples from after temperature scaling, which is the contract (log softmax(logits / T)) when
  top-k, top-p, min-p and the repetition penalty are off; with truncation on, vLLM reports the
  truncated, renormalised distribution where the hf engine reports the untruncated one. Greedy
  requests (temperature 0 in vLLM) report log softmax of the unscaled logits.
- Weights: `load_format: dummy*` builds the engine with random weights and sends the policy's
  before the first rollout; `update_weights` sends (name, tensor) pairs in buckets of
  `rollout.update_weights_bucket_megabytes` through `collective_rpc` to each vLLM worker's
  `model_runner.model.load_weights` (the colocate recipe: in place, no engine reload), then drops
  the prefix cache, whose entries were computed with the old weights. With one tensor-parallel
  rank, the engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so the tensors
  are handed over by reference.
- Shared by worker processes: in a run of several worker processes with
  `rollout.tensor_model_parallel_size` = t > 1, every t consecutive processes are the
  tensor-parallel ranks of one engine (vLLM's `distributed_executor_backend="external_launcher"`,
  its torchrun-style SPMD mode: one engine rank per process, in the torch.distributed world the run
  already joined, which vLLM cuts into groups of t consecutive ranks). Every rank of a group is
  given the same prompts and seeds by the rollout role (`ranks_per_engine`), so all of them sample
  the same tokens, and each loads its own slice of the whole weights the sync hands it. This is the
  layout of verl's hybrid engine.
- In an explorer process (a decoupled run's, or trainer.mode explore's) the engine is the process's
  own over its t GPUs: vLLM starts its t rank processes itself, shown the engine's devices of
  `cluster.device_mapping.rollout` (CUDA_VISIBLE_DEVICES; it takes the first t it sees).
- Memory: `sleep(level)` / `wake_up()` are vLLM's (the engine is built with
  `enable_sleep_mode=rollout.free_cache_engine`); weights arriving while asleep wake the weights
  alone first (`wake_up(tags=["weights"])`), as vLLM's docs advise against an out-of-memory spike.

Not run here: no GPU or vLLM on the machine this was written on. tests/rollout/test_vllm_adapter.py
checks the translation both ways against a stand-in `vllm` module; tests/rollout/test_engine_contract.py
runs the conformance suite on vLLM where it and CUDA are present.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from posttrain.config.access import engine_devices, explores_apart
from posttrain.errors import ConfigError
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import SamplingParams, Weights, buckets, named_tensors
from posttrain.rollout.registry import register_engine
from posttrain.rollout.requests import (
    RANKS, Request, check_version, dtype_name, group_size_problem, max_model_len, requests_for, rollout_batch, tensor_parallel_note,
    tensor_parallel_problem,
)

# [lowest, first unsupported): logprobs_mode arrived in 0.10.2; 0.33 is the newest release seen
# when this adapter was written (a newer one is named at start, not refused).
SUPPORTED = ((0, 10, 2), (0, 34))


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _shown(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def version_problem(version: str) -> str | None:
    """Why this vLLM version cannot run the adapter (too old), else None."""
    if _version_tuple(version) < SUPPORTED[0]:
        return (f"vLLM {version} is older than {_shown(SUPPORTED[0])}, the first with the log-prob mode this engine "
                f"needs; pip install 'vllm>={_shown(SUPPORTED[0])},<{_shown(SUPPORTED[1])}'")
    return None


def version_note(version: str) -> str | None:
    """A line naming a vLLM newer than the adapter was written against, else None."""
    if _version_tuple(version) >= SUPPORTED[1]:
        return (f"note: vLLM {version} is newer than the versions the vllm engine was written against "
                f"({_shown(SUPPORTED[0])} to <{_shown(SUPPORTED[1])}); if it fails, pin 'vllm<{_shown(SUPPORTED[1])}'")
    return None


def machine_problem(cfg: Any) -> str | None:
    """What this machine lacks to run the vllm engine, as one line, or None."""
    missing = []
    try:
        import vllm
    except ImportError:
        vllm = None
        missing.append("vLLM is not installed (pip install 'posttrain[vllm]')")
    if not torch.cuda.is_available():
        missing.append("this machine has no CUDA GPU, which vLLM needs")
    if missing:
        return "; ".join(missing) + f". Use rollout.name=hf on this machine (its vLLM settings are then reported unused){tensor_parallel_note(cfg, RANKS)}"
    return version_problem(getattr(vllm, "__version__", "0")) or tensor_parallel_problem(cfg, RANKS)


def llm_kwargs(cfg: Any, dtype: torch.dtype, seed: int) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM` for this config (verl's rollout keys, then engine_kwargs.vllm)."""
    r = cfg.rollout
    kwargs: dict[str, Any] = dict(
        model=cfg.model.path,
        tokenizer=cfg.model.tokenizer_path or cfg.model.path,
        trust_remote_code=cfg.model.trust_remote_code,
        dtype=dtype_name(dtype),
        seed=seed,
        tensor_parallel_size=r.tensor_model_parallel_size,
        gpu_memory_utilization=r.gpu_memory_utilization,
        max_model_len=max_model_len(cfg),
        max_num_batched_tokens=r.max_num_batched_tokens,
        max_num_seqs=r.max_num_seqs,
        enable_chunked_prefill=r.enable_chunked_prefill,
        enable_prefix_caching=r.enable_prefix_caching,
        enforce_eager=r.enforce_eager,
        disable_log_stats=r.disable_log_stats,
        load_format="dummy" if r.load_format.startswith("dummy") else r.load_format,
        enable_sleep_mode=r.free_cache_engine,
        logprobs_mode="processed_logprobs",
    )
    kwargs.update({k: v for k, v in r.engine_kwargs.vllm.items() if v is not None})
    return kwargs


def sampling_kwargs(params: SamplingParams, request: Request) -> dict[str, Any]:
    """Keyword arguments of `vllm.SamplingParams` for one response of `params`."""
    return dict(
        n=1,
        temperature=params.temperature if params.do_sample else 0.0,  # vLLM: 0 is greedy
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else -1,
        min_p=params.min_p,
        repetition_penalty=params.repetition_penalty,
        max_tokens=params.max_new_tokens,
        ignore_eos=params.ignore_eos,
        stop=list(params.stop) or None,
        stop_token_ids=list(params.stop_token_ids) or None,
        seed=request.seed,
        logprobs=0,  # the sampled token's log-prob only
        detokenize=bool(params.stop),  # stop strings are matched on text
    )


def response_of(output: Any) -> tuple[list[int], list[float]]:
    """(token ids, log-probs) of a `vllm.RequestOutput` with one completion."""
    completion = output.outputs[0]
    tokens = list(completion.token_ids)
    per_token = completion.logprobs or []
    # each entry maps token id -> Logprob; the sampled token is always among them (logprobs=0)
    values = [float(entry[token].logprob) for token, entry in zip(tokens, per_token)]
    return tokens, values


def _load_bucket(worker: Any, bucket: list[tuple[str, torch.Tensor]]) -> None:
    """Run in each vLLM worker by `collective_rpc`: load one bucket into its model."""
    worker.model_runner.model.load_weights(weights=bucket)


class VLLMEngine:
    """A `RolloutEngine` over `vllm.LLM` (see the module docstring)."""

    name = "vllm"

    def __init__(self, llm: Any, vllm: Any, *, pad_token_id: int, bucket_bytes: int, device: torch.device, version: int = 0,
                 ranks_per_engine: int = 1):
        self.llm, self.vllm = llm, vllm
        self.ranks_per_engine = ranks_per_engine  # worker processes that are this engine's tensor-parallel ranks
        self.pad_token_id = pad_token_id
        self.bucket_bytes = bucket_bytes
        self.device = device
        self._version = version
        self.asleep = 0
        self.weights_awake = False  # woken for a weight update while the KV cache sleeps

    @property
    def weights_version(self) -> int:
        return self._version

    def generate(self, prompts: PromptBatch, params: SamplingParams, *, expected_version: int, seed: int | None = None) -> RolloutBatch:
        check_version(self._version, expected_version, "vllm")
        if self.asleep:
            raise RuntimeError("the vllm engine is asleep: call wake_up() before generate")
        requests = requests_for(prompts, params, seed)
        inputs = [{"prompt_token_ids": r.prompt_ids} for r in requests]
        sampling = [self.vllm.SamplingParams(**sampling_kwargs(params, r)) for r in requests]
        outputs = self.llm.generate(inputs, sampling_params=sampling, use_tqdm=False)
        responses = [response_of(o) for o in outputs]
        return rollout_batch(prompts, params.n, [t for t, _ in responses], [v for _, v in responses],
                             version=self._version, pad_token_id=self.pad_token_id, device=self.device)

    def update_weights(self, weights: Weights, version: int) -> None:
        if self.asleep and not self.weights_awake:
            self.llm.wake_up(tags=["weights"])  # the KV cache stays released while weights load
            self.weights_awake = True
        for bucket in buckets(named_tensors(weights), self.bucket_bytes):
            self.llm.collective_rpc(_load_bucket, args=(bucket,))
        self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights
        self._version = int(version)

    def sleep(self, level: int = 1) -> None:
        if self.asleep:
            return
        self.llm.reset_prefix_cache()
        self.llm.sleep(level=level)
        self.asleep, self.weights_awake = level, False

    def wake_up(self) -> None:
        if not self.asleep:
            return
        self.llm.wake_up(tags=["kv_cache"] if self.weights_awake else None)
        self.asleep, self.weights_awake = 0, False


def shared_engine(tp: int, world: int, rank: int) -> dict[str, str] | None:
    """How this worker process joins an engine shared by `tp` consecutive worker processes of a
    `world`-process run (vLLM's external launcher: each process runs one tensor-parallel rank of its
    group's engine over its own GPU, inside the torch.distributed world the run already joined, and
    every rank of a group is given the same prompts and seeds, so all of them sample the same
    tokens): the environment vLLM reads for it. None for an engine of this process alone."""
    if tp <= 1 or world <= 1:
        return None
    problem = group_size_problem(tp, world)
    if problem is not None:
        raise ConfigError(problem)
    # RANK and LOCAL_RANK name the process in the world and its GPU (the launcher sets LOCAL_RANK and
    # MASTER_ADDR/PORT); the engine core must run in this process for the ranks to step together.
    return {"RANK": str(rank), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def visible_devices(ids: list[int], visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES naming the devices `ids` (indices among those this process sees, which
    `visible`, its own CUDA_VISIBLE_DEVICES, names when set)."""
    names = visible.split(",") if visible else None
    return ",".join(names[i].strip() if names else str(i) for i in ids)


@register_engine("vllm", machine_check=machine_problem)
def build_vllm_engine(cfg: Any, model: nn.Module, tokenizer: Any, *, seed: int, owns_weights: bool) -> VLLMEngine:
    """A vLLM engine for `cfg`; with a dummy load format, `model`'s weights are sent in at once. In a run
    of several worker processes with rollout.tensor_model_parallel_size above 1, consecutive processes
    share one engine (`shared_engine`); the rollout role then gives each group one share of the prompts."""
    tp = cfg.rollout.tensor_model_parallel_size
    world, rank = (dist.get_world_size(), dist.get_rank()) if dist.is_available() and dist.is_initialized() else (1, 0)
    apart = explores_apart(cfg)  # an explorer process: a whole engine of its own over its tp GPUs
    shared = None if apart else shared_engine(tp, world, rank)
    own = engine_devices(cfg, rank) if apart else None
    if shared is not None:
        os.environ.update(shared)
    elif tp == 1:
        # the engine core in this process: weight tensors are handed over, not pickled
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    elif own is not None:
        # vLLM's rank processes take the first tp GPUs they see: show them this engine's
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices(own, os.environ.get("CUDA_VISIBLE_DEVICES"))
    import vllm

    note = version_note(vllm.__version__)
    if note is not None:
        print(note, flush=True)
    dtype = next(model.parameters()).dtype
    kwargs = llm_kwargs(cfg, dtype, seed)
    if shared is not None:
        kwargs.setdefault("distributed_executor_backend", "external_launcher")
    llm = vllm.LLM(**kwargs)
    engine = VLLMEngine(llm, vllm, pad_token_id=tokenizer.pad_token_id, device=next(model.parameters()).device,
                        bucket_bytes=cfg.rollout.update_weights_bucket_megabytes << 20,
                        ranks_per_engine=tp if shared is not None else 1)
    if cfg.rollout.load_format.startswith("dummy"):
        engine.update_weights(model, version=0)
    return engine
