"""env.train_rows: turn in the RL step, on FrozenLake with a tiny random model: the updates train on
one row per model turn, mini-batches count turn rows, and a resumed run continues exactly."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import load_file

from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.rollout.turn_rows import turn_spans
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.rl import RLTrainer
from posttrain.trainer.stage import StageContext

# a FrozenLake group and a walk group: the random model's lake actions are all invalid (one reward for
# the whole group), while it writes L or R now and then, so the walk group's advantages are not zero
ENVS = ('env.custom_envs={FL: {env_type: frozen_lake, env_config: {size: 3, is_slippery: false}, max_actions_per_traj: 3, '
        'max_tokens_per_step: 3, format_penalty: -0.1, env_instruction: "Go"}, W: {env_type: walk, env_config: {size: 4}, '
        'max_steps: 3, max_tokens_per_step: 2, format_penalty: -0.1}}')
BASE = ["data.max_prompt_length=64", "data.max_response_length=96", "actor.ppo_micro_batch_size_per_gpu=16", "trainer.logger=[]",
        ENVS, "env.train_env_manager.tags=[FL,W]", "env.train_env_manager.num_env_groups=2", "env.train_env_manager.group_size=4",
        "data.train_batch_size=2", "rollout.n=4", "actor.ppo_mini_batch_size=2", "actor.optim.lr=5e-3", "trainer.total_training_steps=2"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("turns") / "model", layers=1, hidden=32, heads=4, seed=0)


def make_trainer(model, tmp_path, *overrides: str) -> RLTrainer:
    cfg = load_config(None, [f"model.path={model}", *BASE, *overrides])
    t = RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(model)))
    t.roles.sync.push(t.roles.actor.version)
    return t


@pytest.fixture(scope="module")
def explorer(model, tmp_path_factory):
    """A trainer of BASE (loss_agg_mode token-mean, one mini-batch of 2 prompts) and its step 1's
    episodes (the actor's mini-batch settings do not change what the engine plays)."""
    t = make_trainer(model, tmp_path_factory.mktemp("explore"))
    return t, t.explore(1, PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version)


@pytest.fixture
def explored(explorer):
    return explorer[1]


class Learner:
    """One trainer that learns step 1 from a copy of the same episodes under several env.* settings,
    from the same initial weights and optimizer state each time."""

    def __init__(self, model, tmp_path, *overrides: str, trainer: RLTrainer | None = None):
        self.t, self.overrides, self.model = trainer or make_trainer(model, tmp_path, *overrides), overrides, model
        actor = self.t.roles.actor
        self.start = copy.deepcopy((actor.model.state_dict(), actor.optimizer.state_dict(), actor.version))
        self.initial = torch.cat([p.detach().flatten().clone() for p in actor.model.parameters()])

    def learn(self, experience, *env: str):
        actor = self.t.roles.actor
        actor.model.load_state_dict(self.start[0])
        actor.optimizer.load_state_dict(self.start[1])
        actor.version = self.start[2]
        self.t.cfg = load_config(None, [f"model.path={self.model}", *BASE, *self.overrides, *env])  # what training_rows reads
        _, train = self.t.learn(copy.deepcopy(experience), 1, PhaseTimer(self.t.observer.watch()))
        return train, actor.version - self.start[2], torch.cat([p.detach().flatten().clone() for p in actor.model.parameters()])


def test_turn_rows_train_each_turn_and_count_mini_batches_in_turn_rows(model, tmp_path, explored):
    learner = Learner(model, tmp_path, "actor.ppo_mini_batch_size=1")
    train, steps, episode_weights = learner.learn(explored)
    assert len(train) == 8 and steps == 2  # episode rows: 2 prompts / mini-batches of 1 prompt (x n 4)
    turns = len(turn_spans(explored.batch))
    assert turns > 8  # a random model takes more than one turn in some episode (max 3 actions)
    train, steps, turn_weights = learner.learn(explored, "env.train_rows=turn")
    assert len(train) == turns and steps == 2  # the turns shared over the 2 mini-batches of an episode step
    assert int(train.response_mask.sum()) == int(explored.batch.loss_mask.sum())  # the model's tokens, each once
    assert not torch.equal(episode_weights, turn_weights)  # other mini-batches: another update
    fixed = learner.learn(explored, "env.train_rows=turn", "env.turn_mini_batch_size=7")[1]
    assert fixed == -(-turns // 7) and fixed > 2  # 7 turn rows per optimizer step, the last takes the rest


def test_one_token_mean_update_over_turn_rows_equals_the_episode_update(model, tmp_path, explorer):
    """Same tokens, same advantages, one mini-batch, loss averaged over tokens: the cut changes nothing."""
    trainer, explored = explorer
    assert trainer.cfg.actor.loss_agg_mode == "token-mean" and trainer.cfg.actor.ppo_mini_batch_size == trainer.cfg.data.train_batch_size
    learner = Learner(model, tmp_path, trainer=trainer)
    _, steps, episode = learner.learn(explored)
    assert steps == 1 and learner.learn(explored, "env.train_rows=turn")[1] == 1
    torch.testing.assert_close(learner.learn(explored, "env.train_rows=turn")[2], episode, atol=2e-6, rtol=1e-4)
    assert not torch.equal(episode, learner.initial)  # the advantages were not all zero: the step moved the weights


def test_turn_row_settings_that_cannot_act_are_refused(model, tmp_path):
    with pytest.raises(ConfigError, match="env.turn_mini_batch_size: counts turn rows, but env.train_rows is episode"):
        make_trainer(model, tmp_path, "env.turn_mini_batch_size=4")
    with pytest.raises(ConfigError, match="actor.optim.lr_schedule_unit: update sizes the LR schedule by a fixed number"):
        make_trainer(model, tmp_path, "env.train_rows=turn", "actor.optim.lr_schedule_unit=update")
    from posttrain.trainer.agentic import check_idle_env_keys, training_rows

    # a schedule in updates acts with turn rows once its length in updates is given (ROLL's horizon)
    update = ["env.train_rows=turn", "actor.optim.lr_schedule_unit=update"]
    with pytest.raises(ConfigError, match="or give the schedule's length in updates in actor.optim.lr_schedule_updates"):
        check_idle_env_keys(load_config(None, update))
    check_idle_env_keys(load_config(None, [*update, "actor.optim.lr_schedule_updates=10"]))

    with pytest.raises(ConfigError, match="env.train_rows: turn cuts the episodes of an agentic stage .* a tool-calling conversation"):
        check_idle_env_keys(load_config(None, ["env.train_rows=turn", "rollout.multi_turn.enable=true"]))
    with pytest.raises(ConfigError, match="env.turn_mini_batch_size: counts turn rows, but env.train_rows is episode"):
        check_idle_env_keys(load_config(None, ["env.turn_mini_batch_size=4"]))
    # a single-turn stage: each response is one turn row, only the mini-batches change
    single = load_config(None, ["env.train_rows=turn", "env.turn_mini_batch_size=3"])
    check_idle_env_keys(single)
    batch = [None] * 7  # stands for a batch of 7 responses
    rows = training_rows(single, batch, 0)
    assert rows.batch is batch and (rows.actor_mini, rows.critic_mini) == (3, 3)
    assert training_rows(load_config(None, []), batch, 0).actor_mini is None  # episode rows: the role's own


def _rows(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keep = ("env/", "actor/pg_loss", "actor/grad_norm", "actor/entropy")
    return [{k: v for k, v in r.items() if k == "step" or k.startswith(keep)} for r in rows if "env/reward" in r]


def test_a_turn_row_run_resumes_exactly_from_a_checkpoint(model, tmp_path):
    """Two steps in turn mode, and the same run stopped after step 1 and resumed: step 2 plays and
    trains the same (the checkpoint holds the weights, the optimizer and the mini-batch shuffle)."""
    from posttrain.cli import main

    config = tmp_path / "exp.yaml"
    config.write_text("{}\n")
    short = ENVS.replace("max_actions_per_traj: 3", "max_actions_per_traj: 2").replace("max_steps: 3", "max_steps: 2")  # 2 actions
    base = [f"model.path={model}", *BASE, short, "env.train_env_manager.group_size=2", "rollout.n=2", "env.train_rows=turn",
            "env.turn_mini_batch_size=3", "actor.shuffle=true", "trainer.logger=[jsonl]"]
    assert main(["train", str(config), *base, f"trainer.default_local_dir={tmp_path / 'whole'}"]) == 0
    part = tmp_path / "part"
    assert main(["train", str(config), *base, "trainer.total_training_steps=1", "trainer.save_freq=1", f"trainer.default_local_dir={part}"]) == 0
    assert main(["train", str(config), *base, f"trainer.default_local_dir={part}", "trainer.resume_mode=resume_path",
                 f"trainer.resume_from_path={part / 'checkpoints' / 'global_step_1'}"]) == 0
    whole = _rows(tmp_path / "whole")
    assert [r["step"] for r in whole] == [1, 2] and "actor/pg_loss" in whole[1]
    assert _rows(part) == whole
    assert whole[0] != {**whole[1], "step": 1}  # the steps differ: a resume replaying step 1 would not match
    final = [load_file(run / "final_model" / "model.safetensors") for run in (tmp_path / "whole", part)]
    assert final[0].keys() == final[1].keys() and all(torch.equal(final[0][k], final[1][k]) for k in final[0])


def test_config_plan_of_an_agentic_stage_counts_mini_batches_in_turn_rows(model, tmp_path, capsys):
    from posttrain.cli import main

    config = tmp_path / "exp.yaml"
    config.write_text("{}\n")
    common = ["config", "plan", str(config), f"model.path={model}", *BASE]
    assert main([*common, "actor.ppo_mini_batch_size=1"]) == 0
    episode = capsys.readouterr().out
    assert "actor mini-batches/epoch         2   (8 responses / (actor.ppo_mini_batch_size 1 × n 4)" in episode
    assert "unknown: an agentic stage plays environments" in episode  # no dataset to count epochs of
    assert main([*common, "actor.ppo_mini_batch_size=1", "env.train_rows=turn"]) == 0
    turn = capsys.readouterr().out
    assert "turn rows per step             varies   (env.train_rows turn: one per model turn of the 8 episodes" in turn
    assert "actor mini-batches/epoch         <= 2   (the turn rows shared over data.train_batch_size 2 / actor.ppo_mini_batch_size 1" in turn
    assert main([*common, "env.train_rows=turn", "env.turn_mini_batch_size=5"]) == 0
    assert "actor mini-batches/epoch       varies   (turn rows / env.turn_mini_batch_size 5, rounded up" in capsys.readouterr().out


# the walk entry in prompt_mode window: each action after a prompt of its own (ROLL's StepEnvManager)
WINDOW = ('env.custom_envs={W: {env_type: walk, env_config: {size: 4}, max_steps: 3, max_tokens_per_step: 2, format_penalty: -0.1, '
          'env_instruction: Go, prompt_mode: window, history_window: 1, agent_template: "{env_instruction} [{history}] now {current_observation}"}, '
          'FL: {env_type: frozen_lake, env_config: {size: 3}}}')
WINDOWED = [WINDOW, "env.train_env_manager.tags=[W]", "env.train_rows=turn", "env.train_env_manager.group_size=2", "rollout.n=2",
            "data.max_prompt_length=256"]  # an invalid step's entry is long


def test_a_window_prompt_run_recomputes_each_action_after_its_own_prompt(model, tmp_path):
    """Two steps: each step's old log-probs, recomputed by the actor on the turn rows, are the
    sampler's (same prompts, same weights), which the episode layout's would not be."""
    t = make_trainer(model, tmp_path, *WINDOWED, "actor.reuse_rollout_logprobs=never")  # the actor recomputes them
    for step in (1, 2):
        version = t.roles.actor.version
        experience = t.explore(step, PhaseTimer(t.observer.watch()), expected_version=version)
        batch = experience.batch
        turns = len(turn_spans(batch))
        assert turns > len(batch) and all(len(i["turn_prompts"]) == i["turns"] for i in batch.extra_info)
        episode_layout = t.roles.actor.old_logprobs(batch)  # (B, T) actions after the first prompt and each other
        metrics, train = t.learn(experience, step, PhaseTimer(t.observer.watch()))
        t.roles.sync.push(t.roles.actor.version)  # the engine gets the updated weights, as fit() does
        mask = batch.train_mask > 0
        torch.testing.assert_close(batch.old_logprobs[mask], batch.rollout_logprobs[mask], atol=1e-4, rtol=0)
        assert (episode_layout[mask] - batch.rollout_logprobs[mask]).abs().max() > 1e-2
        assert len(train) == turns and "actor/pg_loss" in metrics and t.roles.actor.version > version
        prompts = [t.tokenizer.decode(ids[m > 0]) for ids, m in zip(train.prompt_ids, train.prompt_mask)]
        assert all(p.startswith("<|im_start|>user\nGo [") and "] now " in p for p in prompts)


def test_window_prompt_settings_that_cannot_train_are_refused(model, tmp_path):
    with pytest.raises(ConfigError, match=r"env.train_rows: episode, but \['W'\] prompt each action afresh"):
        make_trainer(model, tmp_path, WINDOW, "env.train_env_manager.tags=[W]")
    with pytest.raises(ConfigError, match=r"\['W'\] prompt each action afresh .* and \['FL'\] show the whole episode"):
        make_trainer(model, tmp_path, WINDOW, "env.train_env_manager.tags=[FL,W]", "env.train_rows=turn")


# prompt_mode messages (ROLL's AgentNativeStepEnvManager): the environment writes the conversation
NATIVE = ['env.custom_envs={N: {env_type: sokoban_native_env, prompt_mode: messages, max_steps: 2, max_tokens_per_step: 3, '
          'env_config: {dim_room: [5, 5], search_depth: 20, format_penalty: -0.1, system_template: Play, observation_suffix: Next}}, '
          'FL: {env_type: frozen_lake, env_config: {size: 3}}}', "env.train_env_manager.tags=[N]", "env.train_rows=turn",
          "env.train_env_manager.group_size=2", "rollout.n=2", "data.max_prompt_length=1024"]


def test_a_messages_run_trains_each_action_after_the_conversation_the_environment_wrote(model, tmp_path):
    t = make_trainer(model, tmp_path, *NATIVE, "actor.reuse_rollout_logprobs=never")
    experience = t.explore(1, PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version)
    batch = experience.batch
    assert len(turn_spans(batch)) == 2 * len(batch)  # every episode runs its 2 actions (a random model never wins)
    metrics, train = t.learn(experience, 1, PhaseTimer(t.observer.watch()))
    mask = batch.train_mask > 0
    torch.testing.assert_close(batch.old_logprobs[mask], batch.rollout_logprobs[mask], atol=1e-4, rtol=0)
    prompts = [t.tokenizer.decode(ids[m > 0]) for ids, m in zip(train.prompt_ids, train.prompt_mask)]
    assert all(p.startswith("<|im_start|>system\nPlay\n\nSokoban") and p.endswith("Next<|im_end|>\n<|im_start|>assistant\n") for p in prompts)
    assert sum("<|im_start|>assistant\n" in p[:-len("<|im_start|>assistant\n")] for p in prompts) == len(batch)  # second actions see the first
    assert "actor/pg_loss" in metrics
