"""On 4 gloo processes: the sglang engine with rollout.tensor_model_parallel_size 2, where the first
of every 2 consecutive worker processes runs one engine over both processes' GPUs.

A stand-in `sglang` module (installed in each process) records what the adapter asks of it: which
processes build an engine and with which GPUs, which process is asked to sample, and at a weight
update which process's copy of each tensor every tensor-parallel rank is handed. SGLang itself
needs GPUs and is not run here.
"""

from __future__ import annotations

import pickle
import sys
import types
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from dist_harness import run_ranks
from posttrain.config import load_config
from posttrain.records import PromptBatch
from posttrain.rollout.base import SamplingParams

PARAMS = SamplingParams(n=2, max_new_tokens=2)
PATCHED: list = []


@dataclass
class LocalSerializedTensor:  # SGLang's: one serialized copy per tensor-parallel rank
    values: list


class Serializer:  # SGLang's MultiprocessingSerializer, by value: which copy arrived is what is checked
    @staticmethod
    def serialize(tensor):
        return pickle.dumps(tensor.clone())

    @staticmethod
    def deserialize(data):
        return pickle.loads(data)


class StandInEngine:
    built: list = []

    def __init__(self, **kwargs):
        self.kwargs, self.calls = kwargs, []
        StandInEngine.built.append(self)

    def generate(self, input_ids, sampling_params, return_logprob):
        self.calls.append(("generate", [ids[-1] for ids in input_ids]))
        return [{"output_ids": [ids[-1] + 1, ids[-1] + 2], "meta_info": {"output_token_logprobs": [(-0.5, 0, None), (-0.25, 0, None)]}}
                for ids in input_ids]

    def update_weights_from_tensor(self, named_tensors, flush_cache):
        # tensor-parallel rank i opens values[i]: record each rank's copy by its first element
        self.calls.append(("update", {name: [float(Serializer.deserialize(v).flatten()[0]) for v in t.values]
                                      for name, t in named_tensors}, flush_cache))

    def release_memory_occupation(self, tags=None):
        self.calls.append(("release", tags))

    def resume_memory_occupation(self, tags=None):
        self.calls.append(("resume", tags))


def _install_stand_in() -> None:
    names = ["sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.utils.patch_torch", "sglang.srt.model_executor",
             "sglang.srt.model_executor.model_runner"]
    modules = {name: types.ModuleType(name) for name in names}
    modules["sglang"].Engine = StandInEngine
    modules["sglang.srt.utils"].MultiprocessingSerializer = Serializer
    # SGLang's patch naming CUDA devices by UUID in pickled tensor handles: applied before serializing
    modules["sglang.srt.utils.patch_torch"].monkey_patch_torch_reductions = lambda: PATCHED.append(True)
    modules["sglang.srt.model_executor.model_runner"].LocalSerializedTensor = LocalSerializedTensor
    sys.modules.update(modules)


class Policy(nn.Module):
    def __init__(self, value: float):
        super().__init__()
        self.a = nn.Parameter(torch.full((4,), value))
        self.b = nn.Parameter(torch.full((6,), value))


def _cfg(*extra):
    return load_config(None, ["model.path=/models/qwen", "rollout.name=sglang", "rollout.tensor_model_parallel_size=2",
                              "cluster.n_gpus_per_node=4", "rollout.load_format=dummy", "rollout.update_weights_bucket_megabytes=1",
                              *extra])


def _group_rollout(rank, world, gpus, build_only=False, hosts=None):
    from types import SimpleNamespace

    from posttrain.cluster.world import World
    from posttrain.errors import ConfigError
    from posttrain.rollout import sglang_engine
    from posttrain.workers.rollout import RolloutWorker

    _install_stand_in()
    sglang_engine.gpu_index = lambda device: gpus[rank]  # the GPU each process would run on
    if hosts is not None:  # the node each process would run on (Ray workers of several nodes)
        sglang_engine.socket = SimpleNamespace(gethostname=lambda: hosts[rank])
    try:
        engine = sglang_engine.build_sglang_engine(_cfg(), Policy(float(rank)), SimpleNamespace(pad_token_id=0), seed=3,
                                                   owns_weights=False)
    except ConfigError as e:
        return {"error": str(e)}
    held = engine.engine
    built = {"kwargs": dict(held.kwargs) if held is not None else None, "ranks_per_engine": engine.ranks_per_engine}
    if build_only:
        return built
    engine.sleep()
    engine.update_weights(Policy(10.0 + rank), version=1)  # each process hands its own copy
    engine.wake_up()
    ids = torch.arange(3, 9).reshape(6, 1) * 10
    prompts = PromptBatch(ids, torch.ones_like(ids, dtype=torch.float), uid=[f"p{i}" for i in range(6)])
    batch = RolloutWorker(engine, World(rank, world).data_parallel()).generate(prompts, PARAMS, expected_version=1)
    return {**built, "calls": held.calls if held is not None else None, "ids": batch.response_ids, "uid": list(batch.group_index),
            "patched": bool(PATCHED)}


def test_the_first_process_of_each_group_runs_the_engine_over_the_group_s_gpus():
    ranks = run_ranks(_group_rollout, 4, [0, 1, 2, 3])
    # ranks 0 and 2 hold an engine of 2 tensor-parallel ranks on GPUs 0-1 and 2-3; ranks 1 and 3 none
    assert [r["kwargs"] is not None for r in ranks] == [True, False, True, False]
    assert [(r["kwargs"]["tp_size"], r["kwargs"]["base_gpu_id"], r["kwargs"]["gpu_id_step"]) for r in ranks[::2]] == [(2, 0, 1), (2, 2, 1)]
    assert [r["ranks_per_engine"] for r in ranks] == [2] * 4
    for first in (0, 2):
        calls = ranks[first]["calls"]
        # the dummy load at build (version 0) and the update: rank i of the engine reads process first+i's copy
        updates = [c for c in calls if c[0] == "update"]
        assert [u[1] for u in updates] == [{"a": [first, first + 1], "b": [first, first + 1]},
                                           {"a": [10 + first, 11 + first], "b": [10 + first, 11 + first]}]
        assert [u[2] for u in updates] == [True, True]  # one bucket each, which flushes the cache
        # asleep during the update: the weights are resumed for it, then the KV cache for sampling
        assert [c[:2] for c in calls if c[0] in ("release", "resume")] == [("release", None), ("resume", ["weights"]), ("resume", ["kv_cache"])]
        # the engine samples its group's share of the prompts: 3 prompts, 2 responses each
        assert [c for c in calls if c[0] == "generate"] == [("generate", [30, 30, 40, 40, 50, 50] if first == 0 else [60, 60, 70, 70, 80, 80])]
    expected = (torch.arange(3, 9) * 10).repeat_interleave(2)
    assert all(r["patched"] for r in ranks)  # every process serialized its copy under SGLang's patch
    for r in ranks:  # every process receives the whole batch once, in prompt order
        assert torch.equal(r["ids"][:, 0], expected + 1) and torch.equal(r["ids"][:, 1], expected + 2)
        assert r["uid"] == [f"p{i}" for i in range(6) for _ in range(2)]


def test_a_group_whose_gpus_are_not_evenly_spaced_is_refused_naming_them():
    ranks = run_ranks(_group_rollout, 4, [0, 1, 3, 2], True)
    assert ranks[0]["kwargs"]["base_gpu_id"] == 0  # the first group's GPUs 0-1 are fine
    for r in ranks[2:]:
        assert r["error"] == ("invalid configuration: rollout.tensor_model_parallel_size=2: the worker processes 2..3 are on GPUs [3, 2], which one "
                              "sglang engine cannot span (it takes evenly spaced GPUs in rank order); give consecutive ranks "
                              "consecutive GPUs")


def test_a_group_spread_over_two_nodes_is_refused_naming_them():
    ranks = run_ranks(_group_rollout, 4, [0, 1, 0, 1], True, ["a", "a", "a", "b"])
    assert ranks[0]["kwargs"]["base_gpu_id"] == 0  # ranks 0-1 share node a
    for r in ranks[2:]:
        assert r["error"] == ("invalid configuration: rollout.tensor_model_parallel_size=2: the worker processes 2..3 are on nodes "
                              "['a', 'b'], and one sglang engine runs on one node; give every node a multiple of that many GPUs "
                              "(cluster.n_gpus_per_node)")


def test_a_size_that_does_not_divide_the_processes_is_refused_before_any_group_is_made():
    from posttrain.errors import ConfigError
    from posttrain.rollout.sglang_engine import engine_group

    assert engine_group(1, 4, 0) is None and engine_group(2, 1, 0) is None
    with pytest.raises(ConfigError, match="rollout.tensor_model_parallel_size=3 is not a divisor of the 4 worker processes"):
        engine_group(3, 4, 0)
