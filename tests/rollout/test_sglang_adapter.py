"""The sglang adapter's own code, against a stand-in `sglang` module put in sys.modules.

As test_vllm_adapter.py: posttrain's translation and call sequences are checked; SGLang itself is
not run here (the contract suite runs it where it and CUDA are present).
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch

from posttrain.config import load_config
from posttrain.records import PromptBatch
from posttrain.rollout import SamplingParams
from posttrain.rollout.requests import requests_for
from posttrain.rollout.sglang_engine import SGLangEngine, build_sglang_engine, engine_kwargs, machine_problem, sampling_dict


class FakeEngine:
    def __init__(self, **kwargs):
        self.kwargs, self.calls = kwargs, []

    def generate(self, input_ids, sampling_params, return_logprob):
        self.calls.append(("generate", sampling_params))
        return [{"output_ids": [ids[-1] + 1, ids[-1] + 2], "meta_info": {"output_token_logprobs": [(-0.5, ids[-1] + 1, None), (-0.25, ids[-1] + 2, None)]}}
                for ids in input_ids]

    def update_weights_from_tensor(self, named_tensors, flush_cache):
        self.calls.append(("update", [n for n, _ in named_tensors], flush_cache))

    def release_memory_occupation(self, tags=None):
        self.calls.append(("release", tags))

    def resume_memory_occupation(self, tags=None):
        self.calls.append(("resume", tags))


@pytest.fixture
def fake_sglang(monkeypatch):
    module = types.ModuleType("sglang")
    module.Engine = FakeEngine
    monkeypatch.setitem(sys.modules, "sglang", module)
    return module


def cfg(*overrides):
    return load_config(None, ["model.path=/models/qwen", "rollout.name=sglang", "data.max_prompt_length=100",
                              "data.max_response_length=28", *overrides])


def test_rollout_keys_become_engine_arguments():
    kwargs = engine_kwargs(cfg(
        "rollout.tensor_model_parallel_size=2", "rollout.gpu_memory_utilization=0.6", "rollout.max_num_seqs=32",
        "rollout.max_num_batched_tokens=2048", "rollout.enable_prefix_caching=true", "rollout.enforce_eager=false",
        "rollout.load_format=auto", "rollout.engine_kwargs.sglang={attention_backend: triton, quantization: null}",
    ), torch.bfloat16, seed=3)
    assert kwargs == dict(
        model_path="/models/qwen", tokenizer_path="/models/qwen", trust_remote_code=False, dtype="bfloat16", random_seed=3,
        tp_size=2, mem_fraction_static=0.6, context_length=128, max_running_requests=32, chunked_prefill_size=2048,
        disable_radix_cache=False, disable_cuda_graph=False, load_format="auto", enable_memory_saver=True,
        enable_weights_cpu_backup=True, log_level="error", attention_backend="triton",
    )
    assert engine_kwargs(cfg("rollout.enable_chunked_prefill=false"), torch.float32, 0)["chunked_prefill_size"] == -1


def test_sampling_and_outputs(fake_sglang):
    ids = torch.tensor([[0, 5, 6], [7, 8, 9]])
    prompts = PromptBatch(ids, (ids > 0).float(), uid=["a", "b"])
    params = SamplingParams(temperature=0.5, top_k=3, min_p=0.1, n=2, max_new_tokens=4, stop=("END",), seed=1)
    first = requests_for(prompts, params, None)[0]
    assert sampling_dict(params, first) == dict(
        n=1, temperature=0.5, top_p=1.0, top_k=3, min_p=0.1, repetition_penalty=1.0, max_new_tokens=4, ignore_eos=False,
        stop=["END"], sampling_seed=first.seed,
    )
    engine = SGLangEngine(FakeEngine(), pad_token_id=0, bucket_bytes=1 << 20, device=torch.device("cpu"))
    out = engine.generate(prompts, params, expected_version=0)
    assert out.response_ids.tolist() == [[7, 8]] * 2 + [[10, 11]] * 2 and out.group_index == ["a", "a", "b", "b"]
    torch.testing.assert_close(out.rollout_logprobs[0], torch.tensor([-0.5, -0.25]))


def test_buckets_flush_the_cache_once_and_sleep_releases(fake_sglang, tiny_lm):
    engine = SGLangEngine(FakeEngine(), pad_token_id=0, bucket_bytes=64, device=torch.device("cpu"))
    engine.sleep()
    engine.update_weights({"a": torch.zeros(8), "b": torch.zeros(8), "c": torch.zeros(20)}, version=2)
    engine.wake_up()
    assert engine.engine.calls == [("release", None), ("resume", ["weights"]), ("update", ["a", "b"], False),
                                   ("update", ["c"], True), ("resume", ["kv_cache"])]
    built = build_sglang_engine(cfg(), tiny_lm, SimpleNamespace(pad_token_id=0), seed=0, owns_weights=False)
    assert [c[0] for c in built.engine.calls] == ["update"] and built.engine.calls[-1][2] is True  # dummy: weights sent


def test_a_training_step_resumes_the_weights_for_the_sync_and_the_kv_cache_for_the_rollout(fake_sglang):
    # verl's multi_stage_wake_up (a NO_EFFECT key): posttrain always wakes in stages, weights first
    from posttrain.cluster.weight_sync import LocalCopy
    from posttrain.workers.rollout import RolloutWorker

    engine = SGLangEngine(FakeEngine(), pad_token_id=0, bucket_bytes=1 << 20, device=torch.device("cpu"))
    worker, sync = RolloutWorker(engine, free_cache=True), LocalCopy(engine, torch.nn.Linear(2, 2))
    ids = torch.tensor([[0, 5, 6]])
    prompts = PromptBatch(ids, (ids > 0).float(), uid=["a"])
    worker.generate(prompts, SamplingParams(max_new_tokens=2), expected_version=0)
    sync.push(1)
    worker.generate(prompts, SamplingParams(max_new_tokens=2), expected_version=1)
    assert [c[:2] if c[0] in ("release", "resume") else c[:1] for c in engine.engine.calls] == [
        ("generate",), ("release", None), ("resume", ["weights"]), ("update",), ("resume", ["kv_cache"]), ("generate",), ("release", None)]


def test_the_machine_check_names_what_is_missing(fake_sglang, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert machine_problem(cfg()).startswith("this machine has no CUDA GPU, which SGLang needs")
    monkeypatch.setitem(sys.modules, "sglang", None)
    assert machine_problem(cfg()).startswith("SGLang is not installed (pip install 'posttrain[sglang]')")
    # consecutive worker processes share an engine on one node: a laptop plan says only what would stop it there
    assert "refused too" not in machine_problem(cfg("rollout.tensor_model_parallel_size=4", "cluster.n_gpus_per_node=8"))
    assert ("Where it runs, this is refused too: rollout.tensor_model_parallel_size=4 is not a divisor of the 6 worker "
            "processes") in machine_problem(cfg("rollout.tensor_model_parallel_size=4", "cluster.n_gpus_per_node=6"))
    # under Ray (several nodes) a node's workers see its GPUs and form whole groups: refused only where a node cannot
    assert "refused too" not in machine_problem(cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=4", "cluster.nnodes=2"))
    on_ray = machine_problem(cfg("rollout.tensor_model_parallel_size=4", "cluster.n_gpus_per_node=6", "cluster.nnodes=2"))
    assert ("Where it runs, this is refused too: rollout.tensor_model_parallel_size=4 under the Ray launcher with "
            "cluster.n_gpus_per_node=6: each sglang engine runs on one node") in on_ray
    assert "refused too" not in machine_problem(cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=4",
                                                    "cluster.launcher=local"))
    split = ["cluster.n_gpus_per_node=8", "cluster.device_mapping.actor=[0,1,2,3]"]
    assert "refused too" not in machine_problem(cfg("rollout.tensor_model_parallel_size=2", *split, "cluster.device_mapping.rollout=[4,5,6,7]"))
    assert "[[4, 6], [5, 7]] are not evenly spaced in rising order" not in machine_problem(
        cfg("rollout.tensor_model_parallel_size=2", *split, "cluster.device_mapping.rollout=[4,6,5,7]"))
    assert "[[4, 7], [6, 5]] are not evenly spaced in rising order" in machine_problem(
        cfg("rollout.tensor_model_parallel_size=2", *split, "cluster.device_mapping.rollout=[4,7,6,5]"))
    monkeypatch.setitem(sys.modules, "sglang", fake_sglang)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert machine_problem(cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=4")) is None
    assert machine_problem(cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=4", "cluster.launcher=ray")) is None
    assert machine_problem(cfg("rollout.tensor_model_parallel_size=4", "cluster.n_gpus_per_node=12", "cluster.nnodes=2")) is None
    assert machine_problem(cfg("rollout.tensor_model_parallel_size=4", "cluster.n_gpus_per_node=6", "cluster.nnodes=2")).startswith(
        "rollout.tensor_model_parallel_size=4 under the Ray launcher with cluster.n_gpus_per_node=6")


def test_each_worker_s_engine_starts_on_its_own_gpu(fake_sglang, tiny_lm, monkeypatch):
    """The local launcher's workers all see every GPU of the node: without base_gpu_id each one's
    engine would start on GPU 0. Off CUDA there is no GPU to name."""
    from posttrain.rollout import sglang_engine

    tokenizer = SimpleNamespace(pad_token_id=0)
    on_cpu = build_sglang_engine(cfg(), tiny_lm, tokenizer, seed=0, owns_weights=False)
    assert "base_gpu_id" not in on_cpu.engine.kwargs and on_cpu.ranks_per_engine == 1 and on_cpu.samples
    monkeypatch.setattr(sglang_engine, "gpu_index", lambda device: 3)
    on_gpu = build_sglang_engine(cfg(), tiny_lm, tokenizer, seed=0, owns_weights=False)
    assert (on_gpu.engine.kwargs["base_gpu_id"], on_gpu.engine.kwargs["gpu_id_step"]) == (3, 1)
    # engine_kwargs.sglang names the GPUs itself when it says so
    mine = build_sglang_engine(cfg("rollout.engine_kwargs.sglang={base_gpu_id: 5}"), tiny_lm, tokenizer, seed=0, owns_weights=False)
    assert mine.engine.kwargs["base_gpu_id"] == 5


def test_an_explorer_process_runs_its_engine_over_its_devices(fake_sglang, tiny_lm, monkeypatch):
    """A decoupled explorer's second process (rank 1) holds a whole engine over devices 6 and 7."""
    from posttrain.rollout import sglang_engine

    monkeypatch.setattr(sglang_engine.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(sglang_engine.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(sglang_engine.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(sglang_engine, "gpu_index", lambda device: 6)
    split = cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=8", "cluster.device_mapping.actor=[0,1,2,3]",
                "cluster.device_mapping.rollout=[4,5,6,7]")
    engine = build_sglang_engine(split, tiny_lm, SimpleNamespace(pad_token_id=0), seed=0, owns_weights=False)
    assert engine.group is None and engine.samples and engine.ranks_per_engine == 1  # no group: the engine is this process's
    assert (engine.engine.kwargs["tp_size"], engine.engine.kwargs["base_gpu_id"], engine.engine.kwargs["gpu_id_step"]) == (2, 6, 1)
