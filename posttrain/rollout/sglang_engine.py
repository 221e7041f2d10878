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
- Devices: the engine's first GPU is this process's (`base_gpu_id`), so the worker processes of the
  local launcher, which all see every GPU of the node, each run their engine on their own GPU.
- Tensor parallelism over worker processes (`rollout.tensor_model_parallel_size` t > 1 in a run of
  several): every t consecutive processes are one group (`EngineGroup`), and the group's first
  process runs one engine with `tp_size` t over the group's GPUs (SGLang starts a scheduler process
  on each of them), as the engine SGLang provided for verl did. The others hold no engine: the
  rollout role asks the first only (`samples`). At a weight update every process of the group
  serializes its own whole copy of each tensor (on its own GPU: CUDA IPC handles), the first gathers
  them, and the engine's scheduler on each GPU opens the copy of the process on that GPU
  (`LocalSerializedTensor`: one value per tensor-parallel rank), so no weight crosses GPUs.
- In an explorer process (a decoupled run's, or trainer.mode explore's) the engine is the process's
  own, over its t devices of `cluster.device_mapping.rollout`.

Not run here: no GPU or SGLang on the machine this was written on. tests/rollout/test_sglang_adapter.py
checks the translation against a stand-in `sglang` module, and tests/cluster/test_sglang_groups.py
the groups over gloo processes.
"""

from __future__ import annotations

import importlib
import socket
from dataclasses import dataclass
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
    FIRST, Request, check_version, dtype_name, group_size_problem, max_model_len, requests_for, rollout_batch, tensor_parallel_note,
    tensor_parallel_problem,
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
        return "; ".join(missing) + f". Use rollout.name=hf on this machine (its SGLang settings are then reported unused){tensor_parallel_note(cfg, FIRST)}"
    return tensor_parallel_problem(cfg, FIRST)


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


@dataclass(frozen=True)
class EngineGroup:
    """The t consecutive worker processes whose GPUs one engine spans, as this process sees them."""

    size: int  # t
    position: int  # this process's place in the group; the first (0) runs the engine
    first: int  # the first process's rank
    group: Any  # the group's gloo process group: tensor handles travel as objects


def engine_group(tp: int, world: int, rank: int) -> EngineGroup | None:
    """This process's group of `tp` consecutive processes in a `world`-process run, or None for an
    engine of its own. Collective: every process creates every group's process group, in order."""
    if tp <= 1 or world <= 1:
        return None
    problem = group_size_problem(tp, world)
    if problem is not None:
        raise ConfigError(problem)
    groups = [dist.new_group(list(range(start, start + tp)), backend="gloo") for start in range(0, world, tp)]
    return EngineGroup(tp, rank % tp, rank - rank % tp, groups[rank // tp])


def gpu_index(device: torch.device) -> int | None:
    """This process's GPU among those its node shows it, or None off CUDA."""
    return device.index if device.type == "cuda" else None


def group_gpus(group: EngineGroup, device: torch.device) -> tuple[int, int] | None:
    """(base_gpu_id, gpu_id_step) of the group's GPUs, from each process's own; None off CUDA.
    SGLang places tensor-parallel rank i on base + i × step, so the GPUs must be evenly spaced, on
    one node."""
    seen: list[Any] = [None] * group.size
    dist.all_gather_object(seen, (socket.gethostname(), gpu_index(device)), group=group.group)
    hosts, gpus = [h for h, _ in seen], [g for _, g in seen]
    if None in gpus:
        return None
    if len(set(hosts)) > 1:  # a Ray run whose nodes were not given whole groups
        raise ConfigError(f"rollout.tensor_model_parallel_size={group.size}: the worker processes {group.first}.."
                          f"{group.first + group.size - 1} are on nodes {hosts}, and one sglang engine runs on one node; "
                          "give every node a multiple of that many GPUs (cluster.n_gpus_per_node)")
    step = gpus[1] - gpus[0]
    if step <= 0 or any(b - a != step for a, b in zip(gpus, gpus[1:])):
        raise ConfigError(f"rollout.tensor_model_parallel_size={group.size}: the worker processes {group.first}.."
                          f"{group.first + group.size - 1} are on GPUs {gpus}, which one sglang engine cannot span (it "
                          "takes evenly spaced GPUs in rank order); give consecutive ranks consecutive GPUs")
    return gpus[0], step


def serializer() -> tuple[Any, Any]:
    """SGLang's (MultiprocessingSerializer, LocalSerializedTensor), with its patch of torch's CUDA
    tensor pickling applied when it has one (a device named by its UUID, which every process reads
    alike whatever GPUs it is shown)."""
    from sglang.srt.utils import MultiprocessingSerializer

    try:
        from sglang.srt.model_executor.model_runner import LocalSerializedTensor
    except ImportError:  # moved in later SGLang releases
        from sglang.srt.model_executor.model_runner_components.weight_updater import LocalSerializedTensor
    for where in ("sglang.srt.utils.patch_torch", "sglang.srt.patch_torch"):  # its later and earlier homes
        try:
            importlib.import_module(where).monkey_patch_torch_reductions()  # idempotent in SGLang
            break
        except (ImportError, AttributeError):
            continue
    return MultiprocessingSerializer, LocalSerializedTensor


class SGLangEngine:
    """A `RolloutEngine` over `sglang.Engine` (see the module docstring). In a group (`EngineGroup`)
    only the first process holds the engine (`engine` None elsewhere)."""

    name = "sglang"

    def __init__(self, engine: Any, *, pad_token_id: int, bucket_bytes: int, device: torch.device, version: int = 0,
                 group: EngineGroup | None = None):
        self.engine = engine
        self.group = group
        self.ranks_per_engine = group.size if group is not None else 1
        self.pad_token_id = pad_token_id
        self.bucket_bytes = bucket_bytes
        self.device = device
        self._version = version
        self.asleep = 0
        self.weights_awake = False

    @property
    def weights_version(self) -> int:
        return self._version

    @property
    def samples(self) -> bool:
        """Whether this process generates: the rollout role asks only a group's first process."""
        return self.engine is not None

    def generate(self, prompts: PromptBatch, params: SamplingParams, *, expected_version: int, seed: int | None = None) -> RolloutBatch:
        check_version(self._version, expected_version, "sglang")
        if self.engine is None:
            raise RuntimeError(f"this process holds no sglang engine: the first process of its group (rank {self.group.first}) samples")
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
            if self.engine is not None:
                self.engine.resume_memory_occupation(tags=["weights"])
            self.weights_awake = True
        send = self._send if self.group is None else self._send_from_group
        pending = None
        for bucket in buckets(named_tensors(weights), self.bucket_bytes):
            if pending is not None:
                send(pending, flush=False)
            pending = bucket
        if pending is not None:  # the last bucket flushes the cache, computed with the old weights
            send(pending, flush=True)
        self._version = int(version)

    def _send(self, bucket: list[tuple[str, torch.Tensor]], flush: bool) -> None:
        self.engine.update_weights_from_tensor(named_tensors=bucket, flush_cache=flush)

    def _send_from_group(self, bucket: list[tuple[str, torch.Tensor]], flush: bool) -> None:
        """Every process of the group hands its own copy of the bucket's tensors; the engine's
        tensor-parallel rank i reads the copy of the group's process i, on its own GPU."""
        to_bytes, per_rank = serializer()
        mine = [(name, to_bytes.serialize(tensor.detach())) for name, tensor in bucket]
        parts: list[Any] | None = [None] * self.group.size if self.engine is not None else None
        dist.gather_object(mine, parts, dst=self.group.first, group=self.group.group)
        if self.engine is not None:
            named = [(copies[0][0], per_rank(values=[value for _, value in copies])) for copies in zip(*parts)]
            self.engine.update_weights_from_tensor(named_tensors=named, flush_cache=flush)
        # the handles point into each process's own tensors: they stay alive until the engine has read them
        dist.barrier(group=self.group.group)

    def sleep(self, level: int = 1) -> None:
        """SGLang has one release: the KV cache and the weights both (level is not distinguished)."""
        if not self.asleep:
            if self.engine is not None:
                self.engine.release_memory_occupation()
            self.asleep, self.weights_awake = level, False

    def wake_up(self) -> None:
        if self.asleep:
            if self.engine is not None:
                self.engine.resume_memory_occupation(tags=["kv_cache"] if self.weights_awake else None)
            self.asleep, self.weights_awake = 0, False


@register_engine("sglang", machine_check=machine_problem)
def build_sglang_engine(cfg: Any, model: nn.Module, tokenizer: Any, *, seed: int, owns_weights: bool) -> SGLangEngine:
    """An SGLang engine for `cfg`; with a dummy load format, `model`'s weights are sent in at once. In
    a run of several worker processes with rollout.tensor_model_parallel_size above 1, the first of
    every group of that many consecutive processes runs the group's engine (`EngineGroup`)."""
    import sglang

    first = next(model.parameters())
    kwargs = engine_kwargs(cfg, first.dtype, seed)
    world, rank = (dist.get_world_size(), dist.get_rank()) if dist.is_available() and dist.is_initialized() else (1, 0)
    apart = explores_apart(cfg)  # an explorer process: a whole engine of its own over its GPUs
    group = None if apart else engine_group(cfg.rollout.tensor_model_parallel_size, world, rank)
    own = gpu_index(first.device)
    gpus = group_gpus(group, first.device) if group is not None else (None if own is None else (own, 1))
    listed = engine_devices(cfg, rank) if apart and own is not None else None
    if listed is not None and len(listed) > 1:  # its devices of cluster.device_mapping.rollout (evenly spaced: checked)
        gpus = (listed[0], listed[1] - listed[0])
    if gpus is not None:  # the engine's GPUs: this process's (and its group's), not the node's first
        kwargs.setdefault("base_gpu_id", gpus[0])
        kwargs.setdefault("gpu_id_step", gpus[1])
    handle = sglang.Engine(**kwargs) if group is None or group.position == 0 else None
    if group is not None:
        dist.barrier(group=group.group)  # the group's engine is up before any of its processes goes on
    engine = SGLangEngine(handle, pad_token_id=tokenizer.pad_token_id, device=first.device, group=group,
                          bucket_bytes=cfg.rollout.update_weights_bucket_megabytes << 20)
    if cfg.rollout.load_format.startswith("dummy"):
        engine.update_weights(model, version=0)
    return engine
