"""The vllm adapter's own code, against a stand-in `vllm` module put in sys.modules.

These tests check posttrain's translation both ways (rollout keys -> `vllm.LLM` keywords, our
SamplingParams -> vLLM's, vLLM's outputs -> RolloutBatch) and the call sequences of weight updates
and sleep. They do NOT run vLLM: the stand-in records calls and answers with made-up tokens. The
real library runs the contract suite in test_engine_contract.py where it and CUDA are present.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch

from posttrain.config import load_config
from posttrain.errors import ConfigError
from posttrain.records import PromptBatch
from posttrain.rollout import SamplingParams, StalePolicyError
from posttrain.rollout import vllm_engine
from posttrain.rollout.vllm_engine import VLLMEngine, build_vllm_engine, llm_kwargs, machine_problem, sampling_kwargs


class FakeLLM:
    """Records its constructor and calls; each response is the prompt's last token + 1, 2, ... with
    log-prob -0.1 x position."""

    def __init__(self, **kwargs):
        self.kwargs, self.calls, self.loaded = kwargs, [], []

    def generate(self, inputs, sampling_params, use_tqdm):
        self.calls.append(("generate", inputs, sampling_params))
        outputs = []
        for prompt, sp in zip(inputs, sampling_params):
            last = prompt["prompt_token_ids"][-1]
            tokens = [last + k + 1 for k in range(sp.kwargs["max_tokens"] - len(prompt["prompt_token_ids"]) % 2)]
            logprobs = [{t: SimpleNamespace(logprob=-0.1 * (i + 1)), 99: SimpleNamespace(logprob=-9.0)} for i, t in enumerate(tokens)]
            outputs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=tokens, logprobs=logprobs)]))
        return outputs

    def collective_rpc(self, method, args=()):
        worker = SimpleNamespace(model_runner=SimpleNamespace(model=SimpleNamespace(load_weights=lambda weights: self.loaded.append(list(weights)))))
        self.calls.append(("rpc",))
        return [method(worker, *args)]

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.__version__ = "0.20.0"
    module.LLM, module.SamplingParams = FakeLLM, FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def cfg(*overrides):
    return load_config(None, ["model.path=/models/qwen", "rollout.name=vllm", "data.max_prompt_length=100",
                              "data.max_response_length=28", *overrides])


def batch():
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    return PromptBatch(ids, (ids > 0).float(), uid=["a", "b"])


def test_rollout_keys_become_llm_arguments():
    kwargs = llm_kwargs(cfg(
        "rollout.tensor_model_parallel_size=2", "rollout.gpu_memory_utilization=0.7", "rollout.max_num_batched_tokens=4096",
        "rollout.max_num_seqs=64", "rollout.enable_chunked_prefill=false", "rollout.enable_prefix_caching=true",
        "rollout.enforce_eager=false", "rollout.disable_log_stats=false", "rollout.load_format=dummy_dtensor",
        "rollout.free_cache_engine=false", "rollout.max_model_len=256",
        "rollout.engine_kwargs.vllm={swap_space: 8, block_size: 32, quantization: null}",
    ), torch.bfloat16, seed=11)
    assert kwargs == dict(
        model="/models/qwen", tokenizer="/models/qwen", trust_remote_code=False, dtype="bfloat16", seed=11,
        tensor_parallel_size=2, gpu_memory_utilization=0.7, max_model_len=256, max_num_batched_tokens=4096,
        max_num_seqs=64, enable_chunked_prefill=False, enable_prefix_caching=True, enforce_eager=False,
        disable_log_stats=False, load_format="dummy", enable_sleep_mode=False, logprobs_mode="processed_logprobs",
        swap_space=8, block_size=32,  # engine_kwargs.vllm passed as they are, nulls left out
    )
    defaults = llm_kwargs(cfg("rollout.load_format=safetensors"), torch.float32, seed=0)
    assert defaults["max_model_len"] == 128 and defaults["load_format"] == "safetensors" and defaults["dtype"] == "float32"


def test_sampling_params_translate_and_seed_each_request():
    from posttrain.rollout.requests import requests_for

    params = SamplingParams(temperature=0.7, top_k=5, top_p=0.9, min_p=0.05, n=2, max_new_tokens=9, ignore_eos=True,
                            repetition_penalty=1.2, stop=("\n\n",), stop_token_ids=(2,), seed=4)
    requests = requests_for(batch(), params, seed=None)
    assert [r.prompt_ids for r in requests] == [[5, 6], [5, 6], [7, 8, 9, 10], [7, 8, 9, 10]]  # padding dropped
    seeds = [r.seed for r in requests]
    assert len(set(seeds)) == 4 and seeds == [r.seed for r in requests_for(batch(), params, seed=99)]  # params.seed wins
    assert sampling_kwargs(params, requests[0]) == dict(
        n=1, temperature=0.7, top_p=0.9, top_k=5, min_p=0.05, repetition_penalty=1.2, max_tokens=9, ignore_eos=True,
        stop=["\n\n"], stop_token_ids=[2], seed=seeds[0], logprobs=0, detokenize=True,
    )
    greedy = sampling_kwargs(SamplingParams(do_sample=False, max_new_tokens=3), requests_for(batch(), SamplingParams(), None)[0])
    assert (greedy["temperature"], greedy["top_k"], greedy["seed"], greedy["stop"], greedy["detokenize"]) == (0.0, -1, None, None, False)


def test_outputs_become_a_rollout_batch(fake_vllm):
    engine = VLLMEngine(FakeLLM(), fake_vllm, pad_token_id=0, bucket_bytes=1 << 20, device=torch.device("cpu"))
    out = engine.generate(batch(), SamplingParams(n=2, max_new_tokens=4), expected_version=0)
    # prompt [5, 6] (even length) gets 4 tokens, [7..10] too; the stand-in shortens odd prompts
    assert out.response_ids.tolist() == [[7, 8, 9, 10]] * 2 + [[11, 12, 13, 14]] * 2
    assert out.group_index == ["a", "a", "b", "b"] and out.prompt_ids.tolist()[0] == [0, 0, 5, 6]
    torch.testing.assert_close(out.rollout_logprobs[0], torch.tensor([-0.1, -0.2, -0.3, -0.4]))
    odd = engine.generate(PromptBatch(torch.tensor([[3, 4, 5], [0, 1, 2]]), torch.tensor([[1.0] * 3, [0, 1, 1]]), uid=["x", "y"]),
                          SamplingParams(max_new_tokens=4), expected_version=0)
    assert odd.response_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]] and odd.response_ids[0, 3] == 0  # right-padded
    with pytest.raises(StalePolicyError):
        engine.generate(batch(), SamplingParams(), expected_version=1)


def test_weights_travel_in_buckets_and_wake_only_the_weights_while_asleep(fake_vllm):
    llm = FakeLLM()
    engine = VLLMEngine(llm, fake_vllm, pad_token_id=0, bucket_bytes=64, device=torch.device("cpu"))
    weights = {"a": torch.zeros(8), "b": torch.zeros(8), "c": torch.zeros(20)}  # 32, 32, 80 bytes
    engine.sleep(level=1)
    engine.update_weights(iter(weights.items()), version=3)
    assert [[n for n, _ in b] for b in llm.loaded] == [["a", "b"], ["c"]] and engine.weights_version == 3
    assert llm.calls == [("reset_prefix_cache",), ("sleep", 1), ("wake_up", ["weights"]), ("rpc",), ("rpc",), ("reset_prefix_cache",)]
    with pytest.raises(RuntimeError, match="asleep"):
        engine.generate(batch(), SamplingParams(), expected_version=3)
    engine.wake_up()
    assert llm.calls[-1] == ("wake_up", ["kv_cache"])
    engine.sleep(level=2)
    engine.wake_up()
    assert llm.calls[-2:] == [("sleep", 2), ("wake_up", None)]


def test_a_training_step_wakes_the_weights_for_the_sync_and_the_kv_cache_for_the_rollout(fake_vllm):
    # verl's multi_stage_wake_up (a NO_EFFECT key): posttrain always wakes in stages, weights first
    from posttrain.cluster.weight_sync import LocalCopy
    from posttrain.workers.rollout import RolloutWorker

    llm = FakeLLM()
    engine = VLLMEngine(llm, fake_vllm, pad_token_id=0, bucket_bytes=1 << 20, device=torch.device("cpu"))
    worker, sync = RolloutWorker(engine, free_cache=True), LocalCopy(engine, torch.nn.Linear(2, 2))
    worker.generate(batch(), SamplingParams(max_new_tokens=2), expected_version=0)  # step 1's rollout
    sync.push(1)  # after step 1's update, the engine asleep
    worker.generate(batch(), SamplingParams(max_new_tokens=2), expected_version=1)  # step 2's rollout
    memory = [c for c in llm.calls if c[0] in ("generate", "sleep", "wake_up", "rpc")]
    assert [c[:2] if c[0] != "generate" else ("generate",) for c in memory] == [
        ("generate",), ("sleep", 1), ("wake_up", ["weights"]), ("rpc",), ("wake_up", ["kv_cache"]), ("generate",), ("sleep", 1)]


def test_build_sends_the_policy_weights_only_with_a_dummy_load_format(fake_vllm, tiny_lm, monkeypatch):
    environ = {}
    monkeypatch.setattr(vllm_engine.os, "environ", environ)
    tokenizer = SimpleNamespace(pad_token_id=0)
    dummy = build_vllm_engine(cfg(), tiny_lm, tokenizer, seed=5, owns_weights=False)
    assert dummy.llm.kwargs["load_format"] == "dummy" and dummy.llm.kwargs["seed"] == 5
    sent = [n for b in dummy.llm.loaded for n, _ in b]
    assert sent == list(tiny_lm.state_dict()) and dummy.weights_version == 0
    assert environ == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # one TP rank: the engine core in-process
    from_disk = build_vllm_engine(cfg("rollout.load_format=auto", "rollout.update_weights_bucket_megabytes=3"), tiny_lm,
                                  tokenizer, seed=5, owns_weights=False)
    assert from_disk.llm.loaded == [] and (dummy.bucket_bytes, from_disk.bucket_bytes) == (512 << 20, 3 << 20)


def test_the_machine_check_names_what_is_missing(fake_vllm, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert machine_problem(cfg()).startswith("this machine has no CUDA GPU, which vLLM needs. Use rollout.name=hf")
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    assert machine_problem(cfg()).startswith("vLLM is not installed (pip install 'posttrain[vllm]'); this machine has no CUDA GPU")
    # a laptop plan says what the engine's tensor parallelism meets where it runs: consecutive worker
    # processes share one engine, so only a size that does not divide them, a rollout device list that
    # is no multiple of it, or a decoupled explorer (one process per engine) is refused
    for shared in (["cluster.n_gpus_per_node=8"], ["cluster.n_gpus_per_node=0"], ["cluster.n_gpus_per_node=1"],
                   ["cluster.n_gpus_per_node=4", "cluster.device_mapping.rollout=[0,1]"]):
        assert "refused too" not in machine_problem(cfg("rollout.tensor_model_parallel_size=2", *shared))
    odd = machine_problem(cfg("rollout.tensor_model_parallel_size=4", "cluster.n_gpus_per_node=6"))
    assert odd.startswith("vLLM is not installed") and ("Where it runs, this is refused too: rollout.tensor_model_parallel_size=4 "
                                                        "is not a divisor of the 6 worker processes") in odd
    assert "cluster.device_mapping.rollout names 3 devices, not a multiple of rollout.tensor_model_parallel_size=2" in machine_problem(
        cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=4", "cluster.device_mapping.rollout=[0,1,2]"))
    # an explorer process holds a whole engine over its tp devices: the rollout list must come in runs of tp
    assert "refused too" not in machine_problem(
        cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=8", "synchronizer.sync_interval=2"))
    split = ["cluster.n_gpus_per_node=8", "cluster.device_mapping.actor=[0,1,2,3]"]
    assert "refused too" not in machine_problem(cfg("rollout.tensor_model_parallel_size=2", *split, "cluster.device_mapping.rollout=[4,5,6,7]"))
    assert ("cluster.device_mapping.rollout names 3 devices, not a multiple of rollout.tensor_model_parallel_size=2: each explorer "
            "engine spans 2 of them") in machine_problem(cfg("rollout.tensor_model_parallel_size=2", *split, "cluster.device_mapping.rollout=[4,5,6]"))
    # under the Ray launcher each explorer actor holds its engine's GPUs (posttrain.cluster.ray_launch.bundle_of)
    assert "refused too" not in machine_problem(
        cfg("rollout.tensor_model_parallel_size=2", *split, "cluster.device_mapping.rollout=[4,5,6,7]", "cluster.launcher=ray"))
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert machine_problem(cfg()) is None
    fake_vllm.__version__ = "0.9.2"
    assert "vLLM 0.9.2 is older than 0.10.2" in machine_problem(cfg())
    assert vllm_engine.version_note("0.34.1").startswith("note: vLLM 0.34.1 is newer than") and vllm_engine.version_note("0.33.0") is None
    fake_vllm.__version__ = "0.20.0"
    assert machine_problem(cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=2")) is None
    assert machine_problem(cfg("rollout.tensor_model_parallel_size=4", "cluster.n_gpus_per_node=6")).startswith(
        "rollout.tensor_model_parallel_size=4 is not a divisor of the 6 worker processes")


def test_worker_processes_share_an_engine_through_the_external_launcher(fake_vllm, tiny_lm, monkeypatch):
    """With 4 worker processes and tensor parallelism 2, rank 2 is the first tensor-parallel rank of
    the second engine: vLLM's external launcher, told its rank; the rollout role learns the group size."""
    environ = {"LOCAL_RANK": "2"}
    monkeypatch.setattr(vllm_engine.os, "environ", environ)
    monkeypatch.setattr(vllm_engine.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(vllm_engine.dist, "get_world_size", lambda: 4)
    monkeypatch.setattr(vllm_engine.dist, "get_rank", lambda: 2)
    engine = build_vllm_engine(cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=4"), tiny_lm,
                               SimpleNamespace(pad_token_id=0), seed=5, owns_weights=False)
    assert engine.llm.kwargs["distributed_executor_backend"] == "external_launcher"
    assert engine.llm.kwargs["tensor_parallel_size"] == 2 and engine.llm.kwargs["seed"] == 5  # every rank of a group alike
    assert environ == {"LOCAL_RANK": "2", "RANK": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert engine.ranks_per_engine == 2
    # one process, or an engine of one rank per process: no launcher, an engine per process
    assert vllm_engine.shared_engine(2, 1, 0) is None and vllm_engine.shared_engine(1, 4, 3) is None
    with pytest.raises(ConfigError, match="tensor_model_parallel_size=4 is not a divisor of the 6 worker processes"):
        vllm_engine.shared_engine(4, 6, 0)
    monkeypatch.setattr(vllm_engine.dist, "get_world_size", lambda: 1)
    alone = build_vllm_engine(cfg("rollout.tensor_model_parallel_size=2"), tiny_lm, SimpleNamespace(pad_token_id=0), seed=5,
                              owns_weights=False)
    assert "distributed_executor_backend" not in alone.llm.kwargs and alone.ranks_per_engine == 1


def test_an_explorer_process_holds_a_whole_engine_shown_its_devices(fake_vllm, tiny_lm, monkeypatch):
    """A decoupled explorer's second process (rank 1) runs the engine over devices 6 and 7 of
    cluster.device_mapping.rollout: no external launcher; vLLM's rank processes are shown those two."""
    environ = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,9,8"}  # this machine's own order: indices 6 and 7 are GPUs 9 and 8
    monkeypatch.setattr(vllm_engine.os, "environ", environ)
    monkeypatch.setattr(vllm_engine.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(vllm_engine.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(vllm_engine.dist, "get_rank", lambda: 1)
    split = cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=8", "cluster.device_mapping.actor=[0,1,2,3]",
                "cluster.device_mapping.rollout=[4,5,6,7]")
    engine = build_vllm_engine(split, tiny_lm, SimpleNamespace(pad_token_id=0), seed=5, owns_weights=False)
    assert "distributed_executor_backend" not in engine.llm.kwargs and engine.llm.kwargs["tensor_parallel_size"] == 2
    assert environ == {"CUDA_VISIBLE_DEVICES": "9,8"} and engine.ranks_per_engine == 1
    # Ray shows each explorer actor its engine's two GPUs alone: nothing to narrow
    environ.clear()
    on_ray = cfg("rollout.tensor_model_parallel_size=2", "cluster.n_gpus_per_node=8", "cluster.device_mapping.actor=[0,1,2,3]",
                 "cluster.device_mapping.rollout=[4,5,6,7]", "cluster.launcher=ray")
    build_vllm_engine(on_ray, tiny_lm, SimpleNamespace(pad_token_id=0), seed=5, owns_weights=False)
    assert "CUDA_VISIBLE_DEVICES" not in environ
    from posttrain.cluster.ray_launch import bundle_of

    assert bundle_of("cuda", 2) == {"CPU": 1, "GPU": 2} and bundle_of("cpu", 2) == {"CPU": 1}
    assert vllm_engine.visible_devices([4, 5], None) == "4,5"
