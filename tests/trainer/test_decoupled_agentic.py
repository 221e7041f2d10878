"""A decoupled agentic run: the explorer plays the env groups (the agent loop) into the experience
buffer, whose rows keep the multi-turn masks and turn records, and the trainer learns from them
exactly what the synchronous loop learns from the same trajectories."""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.buffer.sqlite import ExperienceBuffer
from posttrain.cli import main
from posttrain.config.load import load_config
from posttrain.models.tiny import make_tiny_model
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.rl import RLTrainer
from posttrain.trainer.stage import StageContext

ENVS = "env.custom_envs={A: {env_type: walk, env_config: {size: 5}, max_steps: 3, max_tokens_per_step: 2}}"
BASE = ["data.max_prompt_length=64", "data.max_response_length=96", "data.train_batch_size=2", "rollout.n=2",
        "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=16", "actor.optim.lr=1e-3",
        "env.train_env_manager.tags=[A]", "env.train_env_manager.num_env_groups=2", "env.train_env_manager.group_size=2",
        "env.val_env_manager.tags=[A]", "env.val_env_manager.num_env_groups=2", "trainer.total_training_steps=2",
        "trainer.val_before_train=true", "trainer.test_freq=-1", "trainer.logger=[jsonl]", ENVS]


def overrides(model, tmp_path, run: str, *more: str) -> list[str]:
    return [f"model.path={model}", *BASE, f"trainer.default_local_dir={tmp_path / run}",
            f"buffer.trainer_input.experience_buffer.path={tmp_path / 'buffer.sqlite'}", *more]


def in_step(model, tmp_path, halves: str = "both") -> RLTrainer:
    """The synchronous loop's trainer (or one half of a decoupled one) on the same config."""
    cfg = load_config(None, overrides(model, tmp_path, "sync"))
    return RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "sync", model_path=str(model)), halves=halves)


def test_the_explorer_stores_multi_turn_episodes_that_train_as_in_step(tmp_path):
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, seed=0)
    (tmp_path / "run.yaml").write_text("trainer: {mode: explore}\n")
    assert main(["train", str(tmp_path / "run.yaml"), *overrides(model, tmp_path, "explore")]) == 0
    buffer = ExperienceBuffer(tmp_path / "buffer.sqlite")
    evaluations = buffer.evaluations_through(2)
    assert buffer.explored() == 2 and list(evaluations) == [0] and "val/A/success" in evaluations[0]  # the val env groups
    stored = buffer.claim(1, 1.0)
    buffer.close()

    batch = stored.batch
    turns = [row["turns"] for row in batch.extra_info]
    assert max(turns) > 1, turns  # a random model rarely reaches the goal at once: episodes of several turns
    for b, row in enumerate(batch.extra_info):  # the loss covers the model's actions only, the maps are context
        actions = torch.zeros_like(batch.response_mask[b])
        for start, end in row["turn_spans"]:
            actions[start:end] = 1.0
        assert torch.equal(batch.loss_mask[b], actions), b
        assert batch.response_mask[b].sum() > actions.sum()  # maps between the actions

    # the synchronous loop plays the same episodes with the same starting weights ...
    sync = in_step(model, tmp_path)
    sync.roles.sync.push(sync.roles.actor.version)
    fresh = sync.explore(1, PhaseTimer(), expected_version=sync.roles.actor.version)
    for name in ("prompt_ids", "response_ids", "response_mask", "loss_mask", "weights_version"):
        assert torch.equal(getattr(batch, name), getattr(fresh.batch, name)), name
    assert torch.allclose(batch.rollout_logprobs, fresh.batch.rollout_logprobs)
    assert batch.extra_info == fresh.batch.extra_info and batch.group_index == fresh.batch.group_index
    assert stored.scores.tolist() == fresh.scores.tolist()

    # ... and the trainer half learns from the stored batch what the synchronous step learns
    learner = in_step(model, tmp_path, halves="learner")
    got, got_train = learner.learn(stored, 1, PhaseTimer(learner.observer.watch()))
    want, want_train = sync.learn(fresh, 1, PhaseTimer(sync.observer.watch()))
    assert torch.equal(got_train.train_mask, want_train.train_mask)
    assert torch.allclose(got_train.advantages, want_train.advantages)
    assert (got_train.advantages * (1 - got_train.train_mask)).abs().sum() == 0  # no credit on environment tokens
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key

    # the trainer process of the split trains both stored batches
    (tmp_path / "run.yaml").write_text("trainer: {mode: train}\n")
    assert main(["train", str(tmp_path / "run.yaml"), *overrides(model, tmp_path, "train")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "train" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "async/staleness" in r]
    assert [r["async/staleness"] for r in trained] == [0.0, 1.0]  # both sampled by the starting weights
    assert trained[0]["actor/pg_loss"] == pytest.approx(want["actor/pg_loss"], rel=1e-5, abs=1e-7)
    assert all("env/turns" in r for r in trained)  # the explorer's episode metrics reach the trainer's log
