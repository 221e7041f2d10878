"""What the engines over other libraries (vLLM, SGLang) share: one request per response, and the
`RolloutBatch` made back from their token lists.

Those libraries take prompts as lists of token ids (no padding) and return each response as lists
of token ids and per-token log-probs. Every response is sent as its own request (n = 1), so that a
seeded request is keyed like the hf engine's rows: by (seed, prompt uid, sample index)
(`posttrain.rollout.sampling.request_seed`), whatever else shares the batch. Rows come back in
the order of `PromptBatch.repeat_interleave(n)`: the n responses of a prompt adjacent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from posttrain.config.access import device_lists, explores_apart, launcher, rollout_placement, world_size
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import SamplingParams, StalePolicyError
from posttrain.rollout.sampling import request_seed


@dataclass(frozen=True)
class Request:
    """One response to generate: its prompt's token ids and its seed (None: unseeded)."""

    prompt_ids: list[int]
    seed: int | None


def requests_for(prompts: PromptBatch, params: SamplingParams, seed: int | None) -> list[Request]:
    """One request per response, prompt-major. Seeded when `params.seed` or `seed` is given (the
    validation's reseed); a training rollout passes neither and lets the engine draw, which is
    faster in vLLM (a seeded request samples with a generator of its own)."""
    base = params.seed if params.seed is not None else seed
    out = []
    for i in range(len(prompts)):
        ids = prompts.input_ids[i][prompts.attention_mask[i] > 0].tolist()  # left padding dropped
        if not ids:
            raise ValueError("every prompt needs at least one real token (a row of attention_mask is all 0)")
        for j in range(params.n):
            out.append(Request(ids, None if base is None else request_seed(base, prompts.uid[i], j)))
    return out


def check_version(engine_version: int, expected: int, name: str) -> None:
    if expected != engine_version:
        raise StalePolicyError(
            f"{name} engine holds weights version {engine_version} but the trainer expects {expected}: call "
            f"update_weights(actor weights, version={expected}) after every optimizer step before generating"
        )


def rollout_batch(
    prompts: PromptBatch, n: int, responses: Sequence[Sequence[int]], logprobs: Sequence[Sequence[float]],
    *, version: int, pad_token_id: int, device: torch.device,
) -> RolloutBatch:
    """The `RolloutBatch` of `responses` (token ids per row, prompt-major, n per prompt) with
    their `logprobs`; rows right-padded with `pad_token_id` (mask 0.0, log-prob 0.0)."""
    rows = prompts.repeat_interleave(n)
    if len(responses) != len(rows) or len(logprobs) != len(rows):
        raise ValueError(f"the engine returned {len(responses)} responses for {len(rows)} requests")
    T = max(1, max(len(r) for r in responses))
    ids = torch.full((len(rows), T), pad_token_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros(len(rows), T)  # (B, T)
    lps = torch.zeros(len(rows), T)  # (B, T)
    for i, (tokens, values) in enumerate(zip(responses, logprobs)):
        if len(values) != len(tokens):
            raise ValueError(f"response {i}: {len(tokens)} tokens but {len(values)} log-probs")
        ids[i, : len(tokens)] = torch.tensor(list(tokens), dtype=torch.long)
        mask[i, : len(tokens)] = 1.0
        lps[i, : len(tokens)] = torch.tensor(list(values), dtype=torch.float32)
    return RolloutBatch.sampled(rows, ids.to(device), mask.to(device), lps.to(device), version)


def max_model_len(cfg) -> int:
    """`rollout.max_model_len`, else the longest prompt plus the longest response (training's or
    validation's, rollout.val_kwargs.response_length)."""
    r = cfg.rollout
    train = r.response_length or cfg.data.max_response_length
    return r.max_model_len or cfg.data.max_prompt_length + max(train, r.val_kwargs.response_length or train)


def dtype_name(dtype: torch.dtype) -> str:
    """The dtype spelling vLLM and SGLang take."""
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dtype, "auto")


# How an engine over several GPUs (rollout.tensor_model_parallel_size t > 1) meets the worker processes
WHOLE = "whole"  # every process holds a whole engine of its own (the LLM judges' engines)
RANKS = "ranks"  # t consecutive processes are one engine's ranks, each over its own GPU (vLLM's external launcher)
FIRST = "first"  # the first of t consecutive processes runs the engine over the group's GPUs (SGLang)


def group_size_problem(tp: int, world: int) -> str | None:
    """Why t consecutive processes of a `world`-process run cannot form the engines, or None."""
    if world > 1 and world % tp:
        return (f"rollout.tensor_model_parallel_size={tp} is not a divisor of the {world} worker processes, which share "
                f"the engines in groups of {tp} consecutive ranks; use a divisor of {world}")
    return None


def tensor_parallel_problem(cfg, layout: str = WHOLE) -> str | None:
    """Why `rollout.tensor_model_parallel_size` cannot be met where the engine runs, or None.

    An engine held whole by every worker process (`WHOLE`) splits over several GPUs only in a run of
    one process. An engine that consecutive worker processes share (`RANKS`, `FIRST`; the rollout
    role gives each group one share of the prompts, `posttrain.workers.rollout`) needs the size to
    divide the worker processes and the ranks that generate. A decoupled or explore-only explorer
    runs one process per engine, which holds the whole engine over its GPUs (`explorer_problem`).
    An engine the group's first process runs over the group's GPUs (`FIRST`) needs them on its node:
    the local launcher's workers are, and under the Ray launcher each node must hold whole groups
    (its actors then see their node's GPUs: posttrain.cluster.ray_launch)."""
    tp = cfg.rollout.tensor_model_parallel_size
    gpus = cfg.cluster.n_gpus_per_node * cfg.cluster.nnodes
    if tp <= 1 or gpus == 1:
        return None
    if layout == WHOLE:
        if gpus > 1:
            return ("rollout.tensor_model_parallel_size > 1 with several worker processes: every worker holds a whole "
                    "engine, so tensor parallelism is only available to a one-process run")
        return None
    if explores_apart(cfg):
        return explorer_problem(cfg, tp, layout)
    world = world_size(cfg)  # 1 when the device count is left to the machine: checked again where the engine is built
    problem = group_size_problem(tp, world)
    if problem is not None:
        return problem
    if rollout_placement(cfg) == "subset":
        engines = len(device_lists(cfg)["rollout"])
        if engines % tp:
            return (f"cluster.device_mapping.rollout names {engines} devices, not a multiple of rollout.tensor_model_parallel_size="
                    f"{tp}: each engine spans {tp} of them; list a multiple of {tp} devices")
    per_node = cfg.cluster.n_gpus_per_node
    if layout == FIRST and world > 1 and launcher(cfg) == "ray" and per_node % tp:
        return (f"rollout.tensor_model_parallel_size={tp} under the Ray launcher with cluster.n_gpus_per_node={per_node}: each "
                f"sglang engine runs on one node, over {tp} GPUs its first worker process sees, so a node's workers must form "
                f"whole groups; use a multiple of {tp} GPUs per node")
    return None


def explorer_problem(cfg, tp: int, layout: str) -> str | None:
    """Why explorer processes (a decoupled run's, or trainer.mode explore's) cannot each hold a whole
    engine over `tp` GPUs, or None: the engines take cluster.device_mapping.rollout in runs of `tp`
    devices (an sglang engine evenly spaced ones: `base_gpu_id`, `gpu_id_step`). Under the Ray
    launcher each explorer actor holds `tp` GPUs of one node (posttrain.cluster.ray_launch)."""
    ids = device_lists(cfg).get("rollout")
    if ids and rollout_placement(cfg) != "colocated":
        if len(ids) % tp:
            return (f"cluster.device_mapping.rollout names {len(ids)} devices, not a multiple of rollout.tensor_model_parallel_size="
                    f"{tp}: each explorer engine spans {tp} of them; list a multiple of {tp} devices")
        runs = [ids[i:i + tp] for i in range(0, len(ids), tp)]
        if layout == FIRST and any(len({b - a for a, b in zip(run, run[1:])}) > 1 or run[1] <= run[0] for run in runs):
            return (f"cluster.device_mapping.rollout: the sglang engines take its devices {tp} at a time, and {runs} are not "
                    "evenly spaced in rising order (SGLang places tensor-parallel rank i on base_gpu_id + i x gpu_id_step)")
    return None


def tensor_parallel_note(cfg, layout: str = WHOLE) -> str:
    """For a machine without the engine: the refusal its tensor parallelism meets where the engine
    runs (`tensor_parallel_problem`), so a laptop plan does not promise a cluster run that stops
    there. For an engine held whole by every worker, a device count left to the machine
    (``cluster.n_gpus_per_node`` 0 here: the GPUs of the node it runs on) counts as several
    processes. Empty when nothing would stop it."""
    tp = cfg.rollout.tensor_model_parallel_size
    if tp <= 1 or cfg.cluster.n_gpus_per_node * cfg.cluster.nnodes == 1:
        return ""
    if layout != WHOLE:
        problem = tensor_parallel_problem(cfg, layout)
        return f". Where it runs, this is refused too: {problem}" if problem else ""
    return (f". Where it runs, rollout.tensor_model_parallel_size={tp} is refused too unless the run is one process: "
            "every worker process holds a whole engine of its own here")
