"""Trinity-RFT's AgentScope ReAct workflows (posttrain.config.dialects.trinity_agentscope): the v1 ones
become posttrain's built-in agent functions with their settings in rollout.agent.kwargs, the v0 one is
refused as Trinity-RFT fails on it too, and a file shaped like Trinity-RFT's agentscope_react/gsm8k.yaml
trains a step of a tiny model on every call its ReAct agent made."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from posttrain.config.dialects import translate

_IN = "buffer.explorer_input"
SERVER = {"rollout_model": {"enable_openai_api": True, "enable_history": True, "enable_auto_tool_choice": True,
                            "tool_call_parser": "hermes", "reasoning_parser": "deepseek_r1"}}


def taskset(workflow, **extra):
    return {"path": "/tmp/tasks.jsonl", "default_workflow_type": workflow, "format": {"prompt_key": "question", "response_key": "answer"},
            **extra}


def entries(raw):
    return {e.key: (e.status, e.reason, e.native, e.value) for e in translate(raw, "trinity")[1].entries}


def test_the_template_workflow_becomes_the_template_agent_with_its_settings():
    item = taskset("agentscope_react_workflow", workflow_args={"type": "gsm8k", "max_concurrency": 3, "extra": 1},
                   rollout_args={"temperature": 0.9, "max_tokens": 512}, default_reward_fn_type="math_reward", reward_fn_args={"a": 1})
    raw = {"buffer": {"explorer_input": {"taskset": item}}, "explorer": {**SERVER, "max_timeout": 120}}
    native, _ = translate(raw, "trinity")
    agent = native["rollout"]["agent"]
    assert agent["function"] == "posttrain.agents.agentscope_react:template_agent"
    assert agent["kwargs"] == {"type": "gsm8k", "prompt_key": "question", "response_key": "answer", "max_tokens": 512}
    assert agent["max_concurrency"] == 3 and agent["timeout"] == 120  # Trinity's per-task timeout bounds each episode
    assert (agent["tool_call_parser"], agent["reasoning_parser"]) == ("hermes", "deepseek_r1")
    assert native["rollout"]["temperature"] == 0.9 and native["rollout"]["response_length"] == 512
    got = entries(raw)
    for key in ("enable_openai_api", "enable_history"):
        assert got[f"explorer.rollout_model.{key}"][0] == "dropped"  # accepted: the agent function's endpoint
    for key in ("default_reward_fn_type", "reward_fn_args"):
        assert got[f"{_IN}.taskset.{key}"][0] == "dropped" and "MathBoxedRewardFn" in got[f"{_IN}.taskset.{key}"][1]
    assert got[f"{_IN}.taskset.workflow_args.extra"][0] == "dropped" and "reads only workflow_args.type" in got[f"{_IN}.taskset.workflow_args.extra"][1]
    assert "reward" not in native or "custom_reward_function" not in native.get("reward", {})


def test_the_math_workflow_uses_trinitys_defaults_and_refuses_retries_it_cannot_do():
    item = {"path": "/tmp/tasks.jsonl", "default_workflow_type": "agentscope_react_math_workflow"}
    raw = {"buffer": {"explorer_input": {"taskset": item}}, "explorer": {**SERVER, "max_retry_times": 3}}
    native, _ = translate(raw, "trinity")
    assert native["rollout"]["agent"]["function"] == "posttrain.agents.agentscope_react:math_agent"
    # Trinity-RFT's FormatConfig columns and its 4096 tokens per call when the taskset names none
    assert native["rollout"]["agent"]["kwargs"] == {"prompt_key": "prompt", "response_key": "response", "max_tokens": 4096}
    got = entries(raw)
    assert got["explorer.max_retry_times"][0] == "refused" and "does not run a timed-out agent episode again" in got["explorer.max_retry_times"][1]
    raw["explorer"]["max_retry_times"] = 2
    assert entries(raw)["explorer.max_retry_times"][0] == "dropped"


def test_an_unknown_template_type_and_a_different_evaluation_taskset_are_refused():
    got = entries({"buffer": {"explorer_input": {"taskset": taskset("agentscope_react_workflow", workflow_args={"type": "countdown"})}}})
    assert got[f"{_IN}.taskset.workflow_args.type"][0] == "refused" and "no template for type 'countdown'" in got[f"{_IN}.taskset.workflow_args.type"][1]
    train = taskset("agentscope_react_math_workflow")
    same, other = taskset("agentscope_react_math_workflow"), {**taskset("agentscope_react_math_workflow"), "format": {"prompt_key": "q"}}
    raw = {"buffer": {"explorer_input": {"taskset": train, "eval_tasksets": [same, other]}}}
    got = entries(raw)
    assert got[f"{_IN}.eval_tasksets[0].default_workflow_type"][0] == "dropped"
    # an evaluation taskset's own columns: validation's episodes run with them (rollout.agent.val_kwargs)
    assert got[f"{_IN}.eval_tasksets[1].default_workflow_type"][:2] == ("translated", got[f"{_IN}.eval_tasksets[1].default_workflow_type"][1])
    assert translate(raw, "trinity")[0]["rollout"]["agent"]["val_kwargs"] == {"prompt_key": "q", "response_key": "response"}
    third = {**taskset("agentscope_react_math_workflow"), "format": {"prompt_key": "z"}}
    raw["buffer"]["explorer_input"]["eval_tasksets"].append(third)
    refused = entries(raw)[f"{_IN}.eval_tasksets[2].default_workflow_type"]
    assert refused[0] == "refused" and "one rollout.agent.val_kwargs" in refused[1]


def test_the_v0_workflow_is_refused_as_trinity_fails_on_it_too():
    raw = {"buffer": {"explorer_input": {"taskset": taskset("agentscopev0_react_math_workflow")}}, "explorer": SERVER}
    got = entries(raw)
    status, reason, _, _ = got[f"{_IN}.taskset.default_workflow_type"]
    assert status == "refused" and "agentscope.service, agentscope.agents.ReActAgentV2" in reason
    assert "Trinity-RFT stops on this line too" in reason and "use agentscope_react_math_workflow" in reason
    # the server keys serve the refused workflow: no refusal of their own, so the file counts as one its framework fails on
    refused = [k for k, v in got.items() if v[0] == "refused" and k != f"{_IN}.taskset.path"]  # (no such file here)
    assert refused == [f"{_IN}.taskset.default_workflow_type"] and got["explorer.rollout_model.enable_history"][0] == "dropped"
    spec = importlib.util.spec_from_file_location("foreign_corpus", Path(__file__).resolve().parents[2] / "benchmarks" / "foreign_corpus.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    assert sweep.SOURCE_FAILS.search(reason)  # the sweep counts the file as refused by its own framework too


@pytest.mark.slow
def test_a_file_shaped_like_trinitys_gsm8k_example_trains_on_every_call_of_the_agent(tmp_path):
    pytest.importorskip("agentscope", reason="the agentscope extra (pip install 'posttrain[agentscope]')")
    from posttrain.config import load_config
    from posttrain.config.dialects import read_foreign
    from posttrain.models.tiny import make_tiny_model
    from posttrain.trainer.rl import RLTrainer
    from posttrain.trainer.stage import StageContext

    rows = [{"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"} for a, b in ((1, 2), (3, 4))]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, max_position=1024, seed=0)
    # examples/agentscope_react/gsm8k.yaml of Trinity-RFT, trimmed to one CPU and a tiny budget
    trinity = {
        "algorithm": {"algorithm_type": "multi_step_grpo", "repeat_times": 2, "optimizer": {"lr": 1e-3}},
        "model": {"model_path": str(model), "max_response_tokens": 8, "max_model_len": 1000},
        "cluster": {"node_num": 1, "gpu_per_node": 1},
        "buffer": {"total_epochs": 1, "batch_size": 1, "train_batch_size": 2, "explorer_input": {"taskset": {
            "name": "gsm8k", "storage_type": "file", "path": str(tmp_path), "split": "train",
            "format": {"prompt_key": "question", "response_key": "answer"}, "rollout_args": {"temperature": 1.0, "max_tokens": 8},
            "default_workflow_type": "agentscope_react_workflow"}}},
        "explorer": {"max_timeout": 120, "rollout_model": {"engine_num": 1, "enable_openai_api": True, "enable_history": True,
                                                           "enable_auto_tool_choice": True, "tool_call_parser": "hermes"}},
        "synchronizer": {"sync_interval": 1},
    }
    (tmp_path / "gsm8k.yaml").write_text(yaml.safe_dump(trinity))
    native = read_foreign(tmp_path / "gsm8k.yaml").native
    # multi_step_grpo: the calls are turns of their episodes, train_batch_size (2) of them per optimizer step
    assert native["env"] == {"train_rows": "turn", "turn_mini_batch_size": 2} and native["algorithm"]["adv_estimator"] == "grpo"
    (tmp_path / "native.yaml").write_text(yaml.safe_dump(native))
    cfg = load_config(tmp_path / "native.yaml", ["trainer.logger=[]", "cluster.device=cpu", "rollout.name=hf",
                                                 "trainer.total_training_steps=1", "rollout.agent.max_concurrency=4"])
    assert cfg.rollout.agent.function == "posttrain.agents.agentscope_react:template_agent"
    trainer = RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(model)))
    seen = []
    learn = trainer.learn

    def spy(experience, step, timer):
        seen.append((len(experience.batch), experience.scores.clone()))
        return learn(experience, step, timer)

    trainer.learn = spy
    m = trainer.fit().last_metrics
    # the random policy never calls generate_response: each of the 2 episodes makes AgentScope's 10
    # reasoning-acting calls and its closing summary, every one a training row scored 0 (equal rewards:
    # GRPO's advantages are 0, so the policy-gradient term is 0; 11 optimizer steps of 2 calls each,
    # where the weights move by weight decay alone and the KL loss to the reference follows them)
    assert m["agent/episodes"] == 2 and m["agent/failed"] == 0 and m["agent/calls"] == 11
    assert seen[0][0] == 22 and seen[0][1].eq(0).all() and m["agent/reward"] == 0
    assert m["agent/react_memory_length"] > 0 and m["actor/pg_loss"] == 0 and m["actor/grad_norm"] < 1e-3


def test_the_dialect_knows_the_templates_the_agent_has():  # the config layer cannot import the agents
    from posttrain.agents.agentscope_react import TEMPLATES
    from posttrain.config.dialects.trinity_agentscope import TEMPLATE_TYPES

    assert set(TEMPLATES) == set(TEMPLATE_TYPES)


def test_the_frozenlake_example_becomes_the_frozenlake_agent_and_trains_a_step(tmp_path):
    """Trinity-RFT's examples/agentscope_frozenlake/frozenlake_agent.yaml, trimmed to one CPU: its
    workflow is posttrain's FrozenLake AgentScope agent over the taskset's lakes, each move a turn."""
    pytest.importorskip("agentscope", reason="the agentscope extra (pip install 'posttrain[agentscope]')")
    pytest.importorskip("gymnasium", reason="the envs extra (pip install 'posttrain[envs]')")
    from posttrain.config import load_config
    from posttrain.config.dialects import read_foreign
    from posttrain.models.tiny import make_tiny_model
    from posttrain.trainer.rl import RLTrainer
    from posttrain.trainer.stage import StageContext

    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"seed": s, "size": 3, "p": 0.8, "index": s, "uid": f"{s}_3_0.8"}) + "\n" for s in range(2)))
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, max_position=2048, seed=0)
    trinity = {
        "algorithm": {"algorithm_type": "multi_step_grpo", "repeat_times": 2, "optimizer": {"lr": 1e-3},
                      "advantage_fn_args": {"epsilon": 1e-6, "std_threshold": 0.0001, "enable_step_norm": True}},
        "model": {"model_path": str(model), "max_response_tokens": 8, "max_model_len": 2000, "temperature": 1.0},
        "cluster": {"node_num": 1, "gpu_per_node": 1},
        "buffer": {"total_epochs": 1, "batch_size": 1, "train_batch_size": 8, "explorer_input": {"taskset": {
            "name": "frozenlake", "storage_type": "file", "path": str(tmp_path), "split": "train",
            "workflow_args": {"env_max_steps": 8, "agent_max_steps": 2, "is_slippery": False}},
            "default_workflow_type": "examples.agentscope_frozenlake.workflow.FrozenLakeWorkflow"}},
        "explorer": {"rollout_model": {"engine_num": 1, "enable_openai_api": True, "enable_log_requests": True, "enable_history": True,
                                       "enable_auto_tool_choice": True, "tool_call_parser": "hermes"}},
        "synchronizer": {"sync_interval": 1},
    }
    (tmp_path / "frozenlake.yaml").write_text(yaml.safe_dump(trinity))
    got = entries(trinity)
    assert got[f"{_IN}.taskset.workflow_args.env_max_steps"][0] == "dropped" and "bound of 8 moves" in got[f"{_IN}.taskset.workflow_args.env_max_steps"][1]
    native = read_foreign(tmp_path / "frozenlake.yaml").native
    agent = native["rollout"]["agent"]
    assert agent["function"] == "posttrain.agents.agentscope_frozenlake:frozenlake_agent" and agent["log_requests"] is True
    assert agent["kwargs"] == {"agent_max_steps": 2, "is_slippery": False, "max_tokens": None}
    assert native["env"] == {"train_rows": "turn", "turn_mini_batch_size": 8}
    (tmp_path / "native.yaml").write_text(yaml.safe_dump(native))
    cfg = load_config(tmp_path / "native.yaml", ["trainer.logger=[]", "cluster.device=cpu", "rollout.name=hf", "trainer.total_training_steps=1"])
    m = RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(model))).fit().last_metrics
    # a random tiny policy writes no move in 8 tokens: each of the 2 walks makes agent_max_steps (2)
    # calls (per-episode means), earns 0, and the group's equal rewards are skipped (std_threshold)
    assert m["agent/episodes"] == 2 and m["agent/failed"] == 0 and m["agent/calls"] == 2 and m["agent/env_steps"] == 2
    assert m["agent/reward"] == 0 and m["agent/skipped_groups"] == 1 and m["actor/pg_loss"] == 0


SEARCH_JUDGE = [{"model_path": "/models/judge", "engine_num": 1, "tensor_parallel_size": 2, "max_response_tokens": 10240}]


def test_the_search_workflow_becomes_the_search_agent_with_its_judge_and_evaluation_settings():
    train = taskset("agentscope_v1_react_search_workflow", workflow_args={"max_turns": 7, "search_client_type": "tavily", "max_model_tokens": 30000},
                    rollout_args={"max_tokens": 2048}, format={"prompt_key": "problem", "response_key": "answer"})
    evaluation = {**taskset("agentscope_v1_react_search_workflow", workflow_args={"max_turns": 7}), "format": train["format"],
                  "rollout_args": {"max_tokens": 2048}}
    raw = {"buffer": {"explorer_input": {"taskset": train, "eval_tasksets": [evaluation]}}, "explorer": {**SERVER, "auxiliary_models": SEARCH_JUDGE},
           "model": {"max_model_len": 20480}}
    native, _ = translate(raw, "trinity")
    agent = native["rollout"]["agent"]
    assert agent["function"] == "posttrain.agents.agentscope_search:search_agent"
    assert agent["kwargs"] == {"prompt_key": "problem", "response_key": "answer", "max_tokens": 2048, "max_turns": 7,
                               "search_client_type": "tavily", "judge_max_tokens": 10240}
    assert agent["val_kwargs"] == {"search_client_type": "searxng"}  # the evaluation taskset's own default client, as in Trinity-RFT
    assert native["reward"]["auxiliary_models"]["judge"]["model_path"] == "/models/judge"
    got = entries(raw)
    assert got[f"{_IN}.taskset.workflow_args.max_model_tokens"][0] == "dropped"  # above the context: no call is dropped
    raw["buffer"]["explorer_input"]["taskset"]["workflow_args"]["max_model_tokens"] = 8000
    status, reason, _, _ = entries(raw)[f"{_IN}.taskset.workflow_args.max_model_tokens"]
    assert status == "refused" and "posttrain trains every call" in reason
    del raw["explorer"]["auxiliary_models"]
    status, reason, _, _ = entries(raw)[f"{_IN}.taskset.default_workflow_type"]
    assert status == "refused" and "calls the first of explorer.auxiliary_models as its judge, and there is none" in reason


def test_the_email_search_workflow_becomes_the_email_agent():
    train = {**taskset("email_search_workflow", workflow_args={"max_turns": 6, "tool_obs_char_limit": 2000},
                       reward_fn_args={"llm_as_a_judge": True}, rollout_args={"temperature": 1.0}),
             "format": {"prompt_key": "question", "response_key": "answer"}}
    judge = [{"model_path": "/models/judge", "engine_num": 1, "max_response_tokens": 128}]
    raw = {"buffer": {"explorer_input": {"taskset": train}}, "explorer": {**SERVER, "auxiliary_models": judge}}
    native, _ = translate(raw, "trinity")
    agent = native["rollout"]["agent"]
    assert agent["function"] == "posttrain.agents.email_search:email_agent"
    assert agent["kwargs"] == {"prompt_key": "question", "response_key": "answer", "max_tokens": 4096, "max_turns": 6,
                               "judge_max_tokens": 128, "llm_as_a_judge": True}
    assert native["reward"]["auxiliary_models"]["judge"]["model_path"] == "/models/judge"
    got = entries(raw)
    assert got[f"{_IN}.taskset.workflow_args.tool_obs_char_limit"][0] == "dropped"
    assert "rollout.agent.kwargs.judge_max_tokens" in got["explorer.auxiliary_models[0].max_response_tokens"][1]
    assert "llm_as_a_judge" in got[f"{_IN}.taskset.reward_fn_args"][1]
    # without the judge the rubric needs no auxiliary model; with it, one is required
    train["reward_fn_args"] = {"llm_as_a_judge": False}
    del raw["explorer"]["auxiliary_models"]
    assert translate(raw, "trinity")[0]["rollout"]["agent"]["kwargs"]["llm_as_a_judge"] is False
    raw["explorer"]["auxiliary_models"] = judge
    assert entries(raw)["explorer.auxiliary_models"][0] == "dropped"
    del raw["explorer"]["auxiliary_models"]
    train["reward_fn_args"] = {"llm_as_a_judge": True}
    assert entries(raw)[f"{_IN}.taskset.default_workflow_type"][0] == "refused"
