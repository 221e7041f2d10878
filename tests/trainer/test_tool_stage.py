"""Tool calling in the RL stage: the tools reach the prompts, each response is a conversation,
the stage's reward function scores it, and misconfigurations are named before a model loads."""

from __future__ import annotations

import pytest
import torch

from posttrain.buffer.experience import Experience
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.records import RolloutBatch
from posttrain.tasks import write_task_data
from posttrain.tasks.tool_calc import call_text
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.rl import RLTrainer
from posttrain.trainer.stage import StageContext
from posttrain.trainer.tools import check_tools


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("tools")
    write_task_data("tool_calc", root / "data", train=8, test=4, options={"digits": 2})
    (root / "tools.yaml").write_text("tools:\n  - class_name: calculator\n    config: {type: native}\n")
    return make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0), root


def trainer(assets, tmp_path, *overrides: str, halves: str = "both") -> RLTrainer:
    model, root = assets
    cfg = load_config(None, [f"model.path={model}", f"data.train_files={root}/data/train.parquet", "data.train_batch_size=2",
                             "data.max_prompt_length=80", "data.max_response_length=160", "rollout.n=2",
                             "actor.ppo_mini_batch_size=2", "trainer.total_training_steps=1", "trainer.logger=[]", *overrides])
    return RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(model)), halves=halves)


def solve(t: RLTrainer):
    """Replace the engine by one that calls the calculator on the prompt's product, then repeats the
    tool's answer: the conversation an expert would have."""
    tok, real = t.tokenizer, t.roles.rollout.generate

    def generate(prompts, params, **kwargs):
        out: RolloutBatch = real(prompts, params, **kwargs)
        texts = []
        for ids, mask in zip(out.prompt_ids, out.prompt_mask):  # one row per response (n per prompt)
            seen = tok.decode(ids[mask > 0].tolist())
            answer = seen.rpartition("<tool_response>\n")[2].partition("\n")[0]
            texts.append(answer if "<tool_response>" in seen else call_text(seen.rpartition("user\n")[2].partition("=")[0]))
        rows = [tok(x, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for x in texts]
        width = max(map(len, rows))
        out.response_ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        out.response_mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
        out.rollout_logprobs = torch.zeros(len(rows), width)
        return out

    t.roles.rollout.generate = generate


def explore(t: RLTrainer):
    t.roles.sync.push(t.roles.actor.version)
    return t.explore(t._next_prompts(1), PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version)


def test_enable_plays_conversations_with_the_tools_and_scores_them_with_the_reward_function(assets, tmp_path):
    tools = ["rollout.multi_turn.enable=true", f"rollout.multi_turn.tool_config_path={assets[1]}/tools.yaml"]
    t = trainer(assets, tmp_path, *tools)
    solve(t)
    exp = explore(t)
    prompt = t.tokenizer.decode(exp.batch.prompt_ids[0][exp.batch.prompt_mask[0] > 0].tolist())
    assert prompt.startswith("<|im_start|>system\n<tools>calculator(expression)</tools>")
    assert exp.scores.tolist() == [1.0] * 4 and exp.reward_metrics["reward/correct_call"] == 1.0
    assert exp.reward_metrics["tool/calls_per_traj"] == 1.0 and exp.reward_metrics["tool/call_success_rate"] == 1.0
    # the tool's answer is context: fewer trained tokens than response tokens
    assert exp.batch.loss_mask.sum() < exp.batch.response_mask.sum()
    # without tool calling the same engine answers once: no tool turn, no tool metrics
    plain = trainer(assets, tmp_path / "plain")
    solve(plain)
    exp = explore(plain)
    assert exp.batch.loss_mask is None and "tool/calls_per_traj" not in exp.reward_metrics
    assert exp.scores.tolist() == [0.0] * 4  # a call alone is no answer


def test_a_decoupled_explorer_stores_the_conversations_with_their_masks(assets, tmp_path):
    tools = ["rollout.multi_turn.enable=true", f"rollout.multi_turn.tool_config_path={assets[1]}/tools.yaml"]
    sync = trainer(assets, tmp_path / "sync", *tools)
    solve(sync)
    want = explore(sync)
    half = trainer(assets, tmp_path / "explorer", *tools, halves="explorer")  # the explorer process of a split run
    solve(half)
    got = half.explore(half._next_prompts(1), PhaseTimer(), expected_version=half.roles.engine.weights_version)
    stored = Experience.from_bytes(got.to_bytes())  # through the experience buffer's byte form
    for name in ("prompt_ids", "response_ids", "response_mask", "loss_mask"):
        assert torch.equal(getattr(stored.batch, name), getattr(want.batch, name)), name
    assert stored.batch.loss_mask.sum() < stored.batch.response_mask.sum()  # the tool's answers stay context
    assert stored.scores.tolist() == want.scores.tolist() == [1.0] * 4
    assert stored.reward_metrics["tool/calls_per_traj"] == want.reward_metrics["tool/calls_per_traj"] == 1.0


def test_tool_calling_mistakes_are_named_before_a_model_loads(tmp_path):
    def problems(*overrides):
        with pytest.raises(ConfigError) as err:
            check_tools(load_config(None, list(overrides)))
        return str(err.value)

    assert "needs rollout.multi_turn.tool_config_path" in problems("rollout.multi_turn.enable=true")
    assert "rollout.multi_turn.enable is false" in problems("rollout.multi_turn.tool_config_path=t.yaml")
    assert "data.return_raw_chat: true" in problems("rollout.multi_turn.enable=true", "rollout.multi_turn.tool_config_path=t.yaml",
                                                   "rollout.multi_turn.use_inference_chat_template=true")
    assert "use one or the other" in problems("rollout.multi_turn.enable=true", "rollout.multi_turn.tool_config_path=t.yaml",
                                              "env.custom_envs={W: {env_type: walk}}", "env.train_env_manager.tags=[W]")
    with pytest.raises(ConfigError, match="cannot read t.yaml"):
        check_tools(load_config(None, ["rollout.multi_turn.enable=true", "rollout.multi_turn.tool_config_path=t.yaml"]))
    with pytest.raises(ConfigError, match="rollout.multi_turn.format.*hermes"):
        load_config(None, ["rollout.multi_turn.format=llama3_json"])


def test_verl_multi_turn_keys_translate():
    from posttrain.config.dialects import translate

    mt = {"enable": True, "max_assistant_turns": 5, "max_user_turns": 4, "tool_config_path": "t.yaml", "max_parallel_calls": 2,
          "max_tool_response_length": 100, "tool_response_truncate_side": "left", "interaction_config_path": "i.yaml",
          "use_inference_chat_template": True, "tokenization_sanity_check_mode": "ignore_strippable", "format": "hermes",
          "num_repeat_rollouts": None}
    native, report = translate({"actor_rollout_ref": {"rollout": {"multi_turn": mt}}}, "verl")
    assert native["rollout"]["multi_turn"] == {k: v for k, v in mt.items() if k != "num_repeat_rollouts"}
    old, _ = translate({"actor_rollout_ref": {"rollout": {"multi_turn": {"enable_tokenization_sanity_check": False}}}}, "verl")
    assert old["rollout"]["multi_turn"]["tokenization_sanity_check_mode"] == "disable"  # verl's older boolean
    _, report = translate({"actor_rollout_ref": {"rollout": {"multi_turn": {"num_repeat_rollouts": 3}}}}, "verl")
    assert "read by none of its rollouts" in str(report.entries)
