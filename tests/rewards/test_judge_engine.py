"""The LLM judge on any registered engine (posttrain.rewards.judge_engine): its engine options reach
the engine's constructor as the rollout's do, the engine is built through the registry and sleeps
between scorings, a machine without the engine is refused naming the judge's key, and a vllm
judge answers as the hf judge where vLLM and a GPU are present."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os

import pytest
import torch

from posttrain.config.sections.reward import JudgeEngineConfig
from posttrain.errors import UserError
from posttrain.models.tiny import make_tiny_model
from posttrain.records import RolloutBatch
from posttrain.rewards.judge_engine import EngineJudge, check_judge_machine, judge_config, unused_engine_note
from posttrain.rollout import registry, sglang_engine, vllm_engine

GPU_OPTIONS = JudgeEngineConfig(name="vllm", tensor_model_parallel_size=2, gpu_memory_utilization=0.3, max_model_len=640,
                                enforce_eager=False, max_num_batched_tokens=2048, free_cache_engine=False,
                                kwargs={"block_size": 32})


@pytest.fixture(scope="module")
def judge_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("judge") / "model", layers=1, hidden=32, heads=4, seed=3)


def test_the_judge_s_engine_options_reach_vllm_as_the_rollout_s_do(judge_model):
    cfg = judge_config(str(judge_model), GPU_OPTIONS, batch_size=4)
    kwargs = vllm_engine.llm_kwargs(cfg, torch.bfloat16, seed=7)
    assert kwargs["model"] == str(judge_model) and kwargs["load_format"] == "auto"  # the judge's own weights, from disk
    assert (kwargs["tensor_parallel_size"], kwargs["gpu_memory_utilization"], kwargs["max_model_len"]) == (2, 0.3, 640)
    assert (kwargs["enforce_eager"], kwargs["max_num_batched_tokens"], kwargs["enable_sleep_mode"]) == (False, 2048, False)
    assert kwargs["block_size"] == 32 and kwargs["max_num_seqs"] == 1024  # vLLM schedules; infer_batch_size is the hf engine's
    # null max_model_len: the judge model's context length, not the policy's prompt + response budget
    default = vllm_engine.llm_kwargs(judge_config(str(judge_model), JudgeEngineConfig(name="vllm"), batch_size=None), torch.bfloat16, seed=7)
    context = json.loads((judge_model / "config.json").read_text())["max_position_embeddings"]
    assert default["max_model_len"] == context != 640 and default["enable_sleep_mode"] is True and "block_size" not in default


def test_the_judge_s_engine_options_reach_sglang(judge_model):
    options = dataclasses.replace(GPU_OPTIONS, name="sglang", kwargs={"attention_backend": "triton"})
    kwargs = sglang_engine.engine_kwargs(judge_config(str(judge_model), options, batch_size=None), torch.bfloat16, seed=7)
    assert (kwargs["tp_size"], kwargs["mem_fraction_static"], kwargs["context_length"]) == (2, 0.3, 640)
    assert (kwargs["disable_cuda_graph"], kwargs["chunked_prefill_size"], kwargs["enable_memory_saver"]) == (False, 2048, False)
    assert kwargs["attention_backend"] == "triton" and kwargs["load_format"] == "auto"


class FakeEngine:
    """A RolloutEngine that answers every prompt with the token ids 5, 6, 7 and records its calls."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, params, *, expected_version, seed=None):
        self.calls.append(("generate", params.do_sample, params.max_new_tokens))
        B = len(prompts)
        ids = torch.tensor([[5, 6, 7]] * B)  # (B, T)
        return RolloutBatch.sampled(prompts, ids, torch.ones(B, 3), torch.zeros(B, 3), 0)

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self):
        self.calls.append(("wake_up",))


def test_a_vllm_judge_is_built_through_the_engine_registry_and_sleeps_between_scorings(judge_model, monkeypatch):
    built = {}
    engine = FakeEngine()

    def builder(cfg, model, tokenizer, *, seed, owns_weights):
        built.update(cfg=cfg, params=list(model.parameters()), seed=seed, mp=os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING"))
        return engine

    monkeypatch.setitem(registry.ENGINES, "vllm", builder)
    monkeypatch.setitem(registry.MACHINE_CHECKS, "vllm", lambda cfg: None)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the rollout engine's core in this process
    cfg = judge_config(str(judge_model), JudgeEngineConfig(name="vllm"), batch_size=None)
    judge = EngineJudge(cfg, dtype="bf16", generating_args={"max_new_tokens": 3}, seed=11)
    # the library reads the weights itself: the builder gets the dtype on a stand-in, no weights loaded here
    assert built["cfg"].rollout.name == "vllm" and built["seed"] == 11
    assert [(p.dtype, p.numel()) for p in built["params"]] == [(torch.bfloat16, 0)]
    # the judge's engine core in a process of its own, the rollout engine's setting back afterwards
    assert built["mp"] == "1" and os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    answers = judge(["Is 1+1=2?", "Is 2+2=5?"])
    assert answers == [judge.tokenizer.decode([5, 6, 7], skip_special_tokens=True)] * 2
    # asleep after building; woken for the scoring, greedy with the judge's max_new_tokens, asleep again
    assert engine.calls == [("sleep", 1), ("wake_up",), ("generate", False, 3), ("sleep", 1)]
    engine.calls.clear()
    awake = EngineJudge(judge_config(str(judge_model), JudgeEngineConfig(name="vllm", free_cache_engine=False), batch_size=None),
                        generating_args={"do_sample": True, "temperature": 0.5}, engine=engine)
    awake(["Is 1+1=2?"])
    assert engine.calls == [("generate", True, 32)]


def test_a_judge_engine_this_machine_lacks_is_refused_naming_the_judge_s_key():
    check_judge_machine(JudgeEngineConfig(), None, "reward.workers.j")  # hf runs anywhere
    for name in ("vllm", "sglang"):
        if importlib.util.find_spec(name) is not None and torch.cuda.is_available():
            continue
        with pytest.raises(UserError, match=rf"^reward.workers.j.engine.name={name}: .*GPU.*Use reward.workers.j.engine.name=hf"):
            check_judge_machine(JudgeEngineConfig(name=name), None, "reward.workers.j")


def test_a_judge_engine_split_over_gpus_needs_a_one_process_run(monkeypatch):
    """Each rank judges its own rows with its own engine, so a judge's tensor parallelism is refused
    over several worker processes even with vllm, whose rollout engine the processes may share."""
    from posttrain.config.sections.cluster import ClusterConfig
    from posttrain.rollout.registry import MACHINE_CHECKS

    split = JudgeEngineConfig(name="vllm", tensor_model_parallel_size=2)
    monkeypatch.setitem(MACHINE_CHECKS, "vllm", lambda cfg: None)  # a machine with vLLM and GPUs
    check_judge_machine(split, ClusterConfig(n_gpus_per_node=1), "reward.workers.j")
    with pytest.raises(UserError, match=r"^reward.workers.j.engine.name=vllm: reward.workers.j.engine.tensor_model_parallel_size > 1 "
                                        r"with several worker processes"):
        check_judge_machine(split, ClusterConfig(n_gpus_per_node=4), "reward.workers.j")
    monkeypatch.setitem(MACHINE_CHECKS, "vllm", lambda cfg: "vLLM is not installed")  # a laptop plan says it too
    with pytest.raises(UserError, match=r"vLLM is not installed. Where it runs, reward.workers.j.engine.tensor_model_parallel_size=2 "
                                        r"is refused too unless the run is one process"):
        check_judge_machine(split, ClusterConfig(n_gpus_per_node=4), "reward.workers.j")


def test_gpu_engine_options_on_an_hf_judge_are_noted_unused():
    assert unused_engine_note(JudgeEngineConfig(), "reward.workers.j") is None
    assert unused_engine_note(GPU_OPTIONS, "reward.workers.j") is None
    note = unused_engine_note(JudgeEngineConfig(gpu_memory_utilization=0.8, kwargs={"block_size": 16}), "reward.workers.j")
    assert note.startswith("note: reward.workers.j.engine.gpu_memory_utilization, reward.workers.j.engine.kwargs: settings of")


def _gpu_skip(name: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return f"{name} is not installed (pip install 'posttrain[{name}]')"
    if not torch.cuda.is_available():
        return f"{name} needs a CUDA GPU"
    return None


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_a_gpu_engine_judge_answers_as_the_hf_judge_greedily(name, judge_model):
    reason = _gpu_skip(name)
    if reason is not None:
        pytest.skip(reason)
    texts = ["Is 45+30=75?", "Rate this answer: 12", "Does 7 equal 7?"]
    args = {"max_new_tokens": 6}
    hf = EngineJudge(judge_config(str(judge_model), JudgeEngineConfig(), batch_size=None), generating_args=args)
    options = JudgeEngineConfig(name=name, gpu_memory_utilization=0.2, max_model_len=128)
    gpu = EngineJudge(judge_config(str(judge_model), options, batch_size=None), generating_args=args)
    assert gpu(texts) == hf(texts)
    assert gpu(texts) == hf(texts)  # woken again after its sleep, with its weights
