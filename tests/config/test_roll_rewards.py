"""ROLL's `rewards:` section becomes reward.workers: class paths become posttrain's scorers, a rule
worker's model keys are dropped with the reason, a worker posttrain cannot build is refused whole;
an LLM judge's data_args.template names the chat template of its prompt."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from posttrain.config.dialects import read_foreign, translate
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.cli import main

REFERENCE = Path(__file__).parent / "reference_configs" / "roll_qwen2.5-7B-rlvr_megatron_rlvr_config.yaml"
RLVR = "roll.pipeline.rlvr.rewards."


def _entry(report, key):
    entry = report.entry(key)
    assert entry is not None, key
    return entry


def test_the_rlvr_reference_rewards_translate_worker_by_worker():
    foreign = read_foreign(REFERENCE)
    report, workers = foreign.report, foreign.native["reward"]["workers"]
    assert workers["math_rule"] == {"worker_cls": "math", "tag_included": ["deepmath_103k", "aime"], "world_size": 8}
    assert workers["crossthinkqa"]["worker_cls"] == "multiple_choice" and workers["crossthinkqa"]["reward_type"] == "soft"
    assert workers["code_sandbox"]["worker_cls"] == "code" and set(workers) == {"math_rule", "crossthinkqa", "code_sandbox", "llm_judge", "ifeval"}
    assert _entry(report, "rewards.math_rule.model_args").status == "dropped"
    assert _entry(report, "rewards.math_rule.infer_batch_size").reason == "a rule worker scores one sample per call"
    judge = workers["llm_judge"]
    assert judge["worker_cls"] == "llm_judge" and judge["judge_prompt"] == "Qwen2.5-7B-Instruct-RLVR-prompt"
    assert judge["model_args"]["model_name_or_path"] == "virtuoussy/Qwen2.5-7B-Instruct-RLVR" and judge["infer_batch_size"] == 4
    assert _entry(report, "rewards.llm_judge.device_mapping").status == "dropped"
    # vllm: the judge's engine, its sizes as the engine's options, block_size handed to vLLM
    assert judge["engine"] == {"name": "vllm", "gpu_memory_utilization": 0.8, "max_model_len": 8000, "kwargs": {"block_size": 16}}
    assert _entry(report, "rewards.llm_judge.strategy_args.strategy_config.load_format").status == "dropped"  # auto
    # ROLL's sampling defaults fill the file's generating_args; on vLLM the temperature decides that it samples
    assert judge["generating_args"] == {"do_sample": True, "temperature": 0.8, "top_p": 0.8, "top_k": 50, "max_new_tokens": 100,
                                        "num_beams": 1, "num_return_sequences": 1}
    template = _entry(report, "rewards.llm_judge.data_args.template")  # the chat template of the judge's prompt
    assert (template.status, template.native, judge["chat_template_name"]) == ("translated", "reward.workers.llm_judge.chat_template_name", "qwen2_5")
    assert workers["ifeval"] == {"worker_cls": "ifeval", "tag_included": ["ifeval"], "world_size": 8}
    assert _entry(report, "rewards.ifeval.reward_type").reason == "ROLL's GeneralRuleRewardWorker does not read it"
    tag = _entry(report, "actor_train.data_args.tag")
    assert (tag.native, tag.value) == ("data.reward_fn_key", "tag")  # ROLL's default column
    probs = _entry(report, "actor_train.data_args.domain_interleave_probs")
    assert probs.status == "translated" and probs.value["math_rule"] == 0.4


def test_the_converted_rlvr_file_loads_with_its_workers(tmp_path):
    out = tmp_path / "rlvr.yaml"
    assert main(["config", "convert", str(REFERENCE), str(out)]) == 0
    cfg = load_config(out)
    assert cfg.reward.workers["llm_judge"].engine.name == "vllm" and cfg.reward.workers["llm_judge"].engine.kwargs == {"block_size": 16}
    assert sorted(cfg.reward.workers) == ["code_sandbox", "crossthinkqa", "ifeval", "llm_judge", "math_rule"]
    assert cfg.reward.workers["llm_judge"].generating_args["max_new_tokens"] == 100
    assert cfg.reward.workers["math_rule"].worker_cls == "math" and cfg.data.reward_fn_key == "tag"


def test_filters_keys_roll_ignores_and_user_classes(tmp_path):
    path = tmp_path / "roll.yaml"
    path.write_text(textwrap.dedent(f"""\
        pretrain: Qwen/Qwen2.5-0.5B
        rollout_batch_size: 4
        actor_train:
          data_args: {{file_name: [a.jsonl], tag: domain_tag}}
        rewards:
          math:
            worker_cls: {RLVR}math_rule_reward_worker.MathRuleRewardWorker
            tag_included: [gsm8k]
            reward_type: soft
            query_filter_config: {{type: no_filter}}
          mc:
            worker_cls: {RLVR}multiple_choice_boxed_rule_reward_worker.MultipleChoiceBoxedRuleRewardWorker
            tag_included: [quiz]
            query_filter_config: {{type: std_filter, filter_args: {{std_threshold: 0}}}}
          mine:
            worker_cls: my_project.rewards.MyRewardWorker
            tag_included: [custom]
        """))
    foreign = read_foreign(path)
    report = foreign.report
    assert _entry(report, "rewards.math.reward_type").reason == "ROLL's MathRuleRewardWorker does not read it"
    assert _entry(report, "rewards.math.query_filter_config").status == "dropped"
    std = _entry(report, "rewards.mc.query_filter_config")
    assert std.status == "translated"
    assert foreign.native["reward"]["workers"]["mc"]["query_filter_config"] == {"type": "std_filter", "filter_args": {"std_threshold": 0}}
    mine = _entry(report, "rewards.mine.worker_cls")
    assert mine.status == "refused" and "path/file.py:function" in mine.reason
    assert foreign.native["data"]["reward_fn_key"] == "domain_tag"  # the file's own tag column
    assert set(foreign.native["reward"]["workers"]) == {"math", "mc"}


JUDGE = f"{RLVR}llm_judge_reward_worker.LLMJudgeRewardWorker"


@pytest.mark.parametrize("data_args, expected", [
    ({"template": "qwen3"}, {"template": ("translated", "qwen3")}),
    ({"template": "longCOT_qwen2.5", "file_name": "unused.jsonl", "prompt": "q"},
     {"template": ("translated", "longCOT_qwen2.5"), "file_name": ("dropped", None), "prompt": ("dropped", None)}),
    ({"template": None}, {"template": ("dropped", None)}),
])
def test_a_judge_s_data_args_template_names_its_chat_template(data_args, expected):
    raw = {"rewards": {"judge": {"worker_cls": JUDGE, "tag_included": ["qa"], "data_args": data_args}}}
    native, report = translate(raw, "roll")[:2]
    for sub, (status, _) in expected.items():
        entry = _entry(report, f"rewards.judge.data_args.{sub}")
        assert entry.status == status, sub
        if status == "dropped":  # a null template names none; the judge reads no other data_args key
            assert ("null names no template" if sub == "template" else "reads only data_args.template") in entry.reason
    assert native["reward"]["workers"]["judge"].get("chat_template_name") == expected["template"][1]


def test_a_judge_s_data_args_must_be_a_mapping_and_a_rule_worker_s_are_dropped():
    raw = {"rewards": {"judge": {"worker_cls": JUDGE, "tag_included": ["qa"], "data_args": "qwen2_5"}}}
    assert _entry(translate(raw, "roll")[1], "rewards.judge.data_args").status == "refused"
    raw = {"rewards": {"math": {"worker_cls": f"{RLVR}math_rule_reward_worker.MathRuleRewardWorker", "tag_included": ["m"],
                                "data_args": {"template": "qwen3"}}}}
    native, report = translate(raw, "roll")[:2]
    assert _entry(report, "rewards.math.data_args").status == "dropped" and "chat_template_name" not in native["reward"]["workers"]["math"]


def test_a_judge_s_unknown_template_is_refused_at_load_with_the_names(tmp_path):
    path = tmp_path / "roll.yaml"
    path.write_text(textwrap.dedent(f"""\
        rewards:
          judge:
            worker_cls: {JUDGE}
            tag_included: [qa]
            data_args: {{template: qwen9}}
        """))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "rewards.judge.data_args.template (posttrain: reward.workers.judge.chat_template_name: 'qwen9' is not one of" in str(info.value)


def _judge(**keys):
    return {"rewards": {"judge": {"worker_cls": JUDGE, "tag_included": ["qa"], "model_args": {"model_name_or_path": "/m"}, **keys}}}


def test_a_judge_s_vllm_and_sglang_strategies_become_its_engine():
    vllm = {"strategy_name": "vllm", "strategy_config": {"gpu_memory_utilization": 0.7, "tensor_parallel_size": 2, "enforce_eager": False,
                                                          "load_format": "auto", "sleep_level": 2, "swap_space": 4}}
    native, report = translate(_judge(strategy_args=vllm), "roll")
    assert native["reward"]["workers"]["judge"]["engine"] == {"name": "vllm", "gpu_memory_utilization": 0.7, "tensor_model_parallel_size": 2,
                                                              "enforce_eager": False, "kwargs": {"swap_space": 4}}
    assert "level 1 whatever the file says" in _entry(report, "rewards.judge.strategy_args.strategy_config.sleep_level").reason
    sglang = {"strategy_name": "sglang", "strategy_config": {"mem_fraction_static": 0.6, "context_length": 4096, "attention_backend": "fa3"}}
    native, _ = translate(_judge(strategy_args=sglang), "roll")
    assert native["reward"]["workers"]["judge"]["engine"] == {"name": "sglang", "gpu_memory_utilization": 0.6, "max_model_len": 4096,
                                                              "kwargs": {"attention_backend": "fa3"}}
    # ROLL's vllm strategy starts from random weights unless load_format is auto; nothing replaces a judge's
    for config in ({"gpu_memory_utilization": 0.7}, {"load_format": "dummy"}):
        _, report = translate(_judge(strategy_args={"strategy_name": "vllm", "strategy_config": config}), "roll")
        entry = _entry(report, "rewards.judge.strategy_args.strategy_config.load_format")
        assert entry.status == "refused" and "write load_format: auto" in entry.reason
    _, report = translate(_judge(strategy_args={"strategy_name": "megatron_infer"}), "roll")
    assert _entry(report, "rewards.judge.strategy_args").status == "refused"


@pytest.mark.parametrize("strategy, given, expected", [
    ("hf_infer", None, {"do_sample": True, "temperature": 0.95, "top_p": 0.7, "top_k": 50, "max_new_tokens": 8192}),
    ("hf_infer", {"do_sample": False, "max_new_tokens": 16}, {"do_sample": False, "temperature": 0.95, "top_p": 0.7, "top_k": 50, "max_new_tokens": 16}),
    # ROLL's vLLM sampling has no do_sample: temperature 0 is greedy, any other samples
    ("vllm", {"do_sample": False, "temperature": 0.3}, {"do_sample": True, "temperature": 0.3, "top_p": 0.7, "top_k": 50, "max_new_tokens": 8192}),
    ("sglang", {"temperature": 0}, {"do_sample": False, "temperature": 0, "top_p": 0.7, "top_k": 50, "max_new_tokens": 8192}),
])
def test_a_judge_s_generating_args_take_roll_s_defaults_and_its_engine_s_sampling(strategy, given, expected):
    args = {"strategy_name": strategy, "strategy_config": {"load_format": "auto"} if strategy == "vllm" else None}
    keys = {"strategy_args": args} if given is None else {"strategy_args": args, "generating_args": given}
    native, report = translate(_judge(**keys), "roll")
    assert native["reward"]["workers"]["judge"]["generating_args"] == expected
    assert _entry(report, "rewards.judge.generating_args").status == "translated"


def test_a_cluster_judge_is_a_judge_worker_with_the_reward_model_role_s_model_template_and_engine():
    raw = _judge(judge_model_type="cluster", world_size=32, judge_prompt="Qwen2.5-7B-Instruct-RLVR-prompt",
                 generating_args={"max_new_tokens": 512, "temperature": 0.3, "num_return_sequences": 1}, data_args={"template": "native"})
    raw["reward_model"] = {
        "name": "reward_llm", "worker_cls": "roll.pipeline.base_worker.InferWorker",
        "model_args": {"model_name_or_path": "/judge", "attn_implementation": "fa2", "dtype": "bf16"},
        "generating_args": {"max_new_tokens": 64, "temperature": 0.0}, "data_args": {"template": "qwen2_5"},
        "strategy_args": {"strategy_name": "vllm", "strategy_config": {"gpu_memory_utilization": 0.85, "max_model_len": 8192, "load_format": "auto"}},
        "device_mapping": "[6, 7]",
    }
    native, report = translate(raw, "roll")
    judge = native["reward"]["workers"]["judge"]
    assert judge["model_args"] == {"model_name_or_path": "/judge", "attn_implementation": "fa2", "dtype": "bf16"}
    assert judge["chat_template_name"] == "qwen2_5" and judge["engine"] == {"name": "vllm", "gpu_memory_utilization": 0.85, "max_model_len": 8192}
    # the worker's own sampling, not the role's (each request carries it)
    assert judge["generating_args"] == {"do_sample": True, "temperature": 0.3, "top_p": 0.7, "top_k": 50, "max_new_tokens": 512, "num_return_sequences": 1}
    assert "judge_model_type" not in judge and "world_size" not in judge
    for key in ("rewards.judge.data_args", "rewards.judge.model_args", "rewards.judge.world_size", "reward_model.generating_args", "reward_model.device_mapping"):
        assert _entry(report, key).status == "dropped", key
    assert not report.refused
    del raw["reward_model"]["device_mapping"]  # ROLL serves the role only on devices of its own
    _, report = translate(raw, "roll")
    assert "only when it has a device_mapping" in _entry(report, "rewards.judge.judge_model_type").reason
    del raw["reward_model"]
    _, report = translate(raw, "roll")
    assert "has none" in _entry(report, "rewards.judge.judge_model_type").reason
