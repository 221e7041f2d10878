"""Agentic stages in the RL trainer: each `env.*` key changes the episodes a step or a validation
plays, checked on a tiny random model (its actions are mostly invalid, which is what the format
penalty tests need)."""

from __future__ import annotations

import pytest

from posttrain.config.load import load_config
from posttrain.envs.base import EnvError
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.rl import RLTrainer
from posttrain.trainer.stage import StageContext

ENVS = "env.custom_envs={A: {env_type: walk, env_config: {size: 4}, max_steps: 3, max_tokens_per_step: 2}, B: {env_type: walk, env_config: {size: 7}, max_steps: 2, max_tokens_per_step: 2}}"
BASE = ["data.max_prompt_length=64", "data.max_response_length=96", "actor.ppo_mini_batch_size=1",
        "actor.ppo_micro_batch_size_per_gpu=16", "trainer.total_training_steps=1", "trainer.logger=[]", ENVS]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("agentic") / "model", layers=1, hidden=32, heads=4, seed=0)


def trainer(model, tmp_path, *overrides: str) -> RLTrainer:
    cfg = load_config(None, [f"model.path={model}", *BASE, *overrides])
    return RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(model)))


def explore(t: RLTrainer, step: int = 1):
    calls = []
    generate = t.roles.rollout.generate
    t.roles.rollout.generate = lambda prompts, *a, **k: (calls.append(len(prompts)), generate(prompts, *a, **k))[1]
    t.roles.sync.push(t.roles.actor.version)
    return t.explore(step, PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version), calls


def test_tags_groups_partition_and_group_size_lay_out_the_step(model, tmp_path):
    t = trainer(model, tmp_path, "env.train_env_manager.tags=[A,B]", "env.train_env_manager.num_env_groups=3",
                "env.train_env_manager.num_groups_partition=[1,2]", "env.train_env_manager.group_size=2",
                "data.train_batch_size=3", "rollout.n=2")
    batch = explore(t)[0].batch
    assert batch.data_source == ["A", "A", "B", "B", "B", "B"]
    assert batch.group_index == ["s1/A/g0", "s1/A/g0", "s1/B/g1", "s1/B/g1", "s1/B/g2", "s1/B/g2"]
    seeds = [e["seed"] for e in batch.extra_info]
    assert seeds[0] == seeds[1] and seeds[2] == seeds[3] and len(set(seeds[::2])) == 3  # a group shares its seed
    boards = [p.split("user\n")[1].split("<|im_end|>")[0] for p in batch.raw_prompt]
    assert [len(b) for b in boards] == [4, 4, 7, 7, 7, 7]  # custom_envs' env_config reached the class
    assert boards[2] == boards[3]
    # evenly split without a partition: the first tag takes the remainder
    t = trainer(model, tmp_path, "env.train_env_manager.tags=[A,B]", "env.train_env_manager.num_env_groups=3",
                "data.train_batch_size=3")
    assert explore(t)[0].batch.data_source == ["A", "A", "B"]


def test_the_score_is_the_trajectory_reward_with_the_format_penalty(model, tmp_path):
    scores = {}
    for penalty in ("0.0", "-0.5"):
        t = trainer(model, tmp_path, "env.train_env_manager.tags=[A]", "env.train_env_manager.num_env_groups=4",
                    f"env.train_env_manager.format_penalty={penalty}", "data.train_batch_size=4")
        exp = explore(t)[0]
        invalid = [e["invalid_actions"] for e in exp.batch.extra_info]
        success = [float(e["success"]) for e in exp.batch.extra_info]
        assert sum(invalid) > 0  # a random model rarely writes L or R
        assert exp.scores.tolist() == pytest.approx([s + float(penalty) * i for s, i in zip(success, invalid)])
        scores[penalty] = exp.scores.tolist()
    assert scores["0.0"] != scores["-0.5"]


def test_max_env_num_per_worker_splits_each_turn_into_generate_calls(model, tmp_path):
    common = ("env.train_env_manager.tags=[A]", "env.train_env_manager.num_env_groups=5", "data.train_batch_size=5")
    _, all_at_once = explore(trainer(model, tmp_path, *common))
    _, split = explore(trainer(model, tmp_path, *common, "env.train_env_manager.max_env_num_per_worker=2"))
    assert all_at_once[0] == 5 and max(all_at_once) == 5 and len(all_at_once) <= 3  # one call per turn (max_steps 3)
    assert split[:3] == [2, 2, 1] and max(split) == 2 and len(split) > len(all_at_once)


def test_max_new_tokens_caps_each_action_of_the_managers_environments(model, tmp_path):
    """A manager's cap (ROLL's generating_args.max_new_tokens) under the entries' own: each generate call
    of its turns asks for the smaller, in training and in validation."""
    asked = []

    def capture(t):
        generate = t.roles.rollout.generate
        t.roles.rollout.generate = lambda prompts, params, **k: (asked.append(params.max_new_tokens), generate(prompts, params, **k))[1]

    common = ("env.train_env_manager.tags=[A]", "data.train_batch_size=1", "env.val_env_manager.tags=[B]")
    for cap, want in (("null", 2), ("1", 1)):  # A and B allow 2 tokens per action
        t = trainer(model, tmp_path, *common, f"env.train_env_manager.max_new_tokens={cap}", f"env.val_env_manager.max_new_tokens={cap}")
        capture(t)
        asked.clear()
        t.roles.sync.push(t.roles.actor.version)
        batch = t.explore(1, PhaseTimer(t.observer.watch()), expected_version=t.roles.actor.version).batch
        assert set(asked) == {want} and max(end - start for start, end in batch.extra_info[0]["turn_spans"]) <= want
        asked.clear()
        t.validate(0)
        assert set(asked) == {want}


def test_validation_reports_success_per_tag_over_the_val_manager_groups(model, tmp_path):
    t = trainer(model, tmp_path, "env.train_env_manager.tags=[A]", "data.train_batch_size=1",
                "env.val_env_manager.tags=[A,B]", "env.val_env_manager.num_env_groups=3",
                "env.val_env_manager.num_groups_partition=[2,1]", "env.val_env_manager.group_size=2",
                "env.val_env_manager.format_penalty=-1.0")
    metrics = t.validate(0)
    assert (metrics["val/A/episodes"], metrics["val/B/episodes"], metrics["val/episodes"]) == (4.0, 2.0, 6.0)
    assert {"val/A/success", "val/B/success", "val/A/reward", "val/B/turns"} <= set(metrics)
    # the val manager's penalty: every invalid action costs 1.0 (greedy actions of a random model)
    assert metrics["val/B/reward"] == pytest.approx(metrics["val/B/success"] - metrics["val/B/invalid_action_rate"] * metrics["val/B/turns"])
    calls = []
    generate = t.roles.rollout.generate
    t.roles.rollout.generate = lambda prompts, *a, **k: (calls.append(len(prompts)), generate(prompts, *a, **k))[1]
    t.validate(0)
    assert calls[0] == 6
    t2 = trainer(model, tmp_path, "env.train_env_manager.tags=[A]", "data.train_batch_size=1",
                 "env.val_env_manager.tags=[A]", "env.val_env_manager.num_env_groups=4", "env.val_env_manager.max_env_num_per_worker=3")
    t2.roles.rollout.generate = lambda prompts, *a, **k: (calls.append(len(prompts)), generate(prompts, *a, **k))[1]
    calls.clear()
    t2.validate(0)
    assert calls[:2] == [3, 1]


def test_agentic_config_mistakes_are_named(model, tmp_path):
    with pytest.raises(ConfigError, match=r"data.train_batch_size \(6\) x rollout.n \(1\) = 6 trajectories per step must be a multiple of the environments, .* = 4"):
        trainer(model, tmp_path, "env.train_env_manager.tags=[A]", "env.train_env_manager.num_env_groups=2",
                "env.train_env_manager.group_size=2", "data.train_batch_size=6")
    with pytest.raises(ConfigError, match=r"env.train_env_manager.tags: \['C'\] not in env.custom_envs"):
        trainer(model, tmp_path, "env.train_env_manager.tags=[C]")
    with pytest.raises(ConfigError, match=r"env.val_env_manager.tags and env.custom_envs: set, but env.train_env_manager.tags is empty"):
        trainer(model, tmp_path, "env.val_env_manager.tags=[A]")


def test_the_data_sections_template_settings_render_the_turns(model, tmp_path):
    t = trainer(model, tmp_path, "env.train_env_manager.tags=[A]", "data.chat_template_name=qwen3", "data.apply_chat_template_kwargs={x: 1}")
    assert t.agent.renderer.template_kwargs == {"enable_thinking": True, "x": 1}  # qwen3's variable
    t = trainer(model, tmp_path, "env.train_env_manager.tags=[A]", "data.chat_template_name=qwen3", "data.enable_thinking=false")
    assert t.agent.renderer.template_kwargs == {"enable_thinking": False}  # the explicit setting wins
    with pytest.raises(ConfigError, match=r"data.chat_template_name: longCOT_qwen2.5 rewrites a prompt of one question"):
        trainer(model, tmp_path, "env.train_env_manager.tags=[A]", "data.chat_template_name=longCOT_qwen2.5")
    with pytest.raises(ConfigError, match=r"data.system_prompt: an agentic stage's system message is each environment's instruction"):
        trainer(model, tmp_path, "env.train_env_manager.tags=[A]", "data.system_prompt=hi")


def _env_rows(run_dir):
    import json

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["env/reward"], r["env/invalid_action_rate"], r["env/turns"]) for r in rows if "env/reward" in r]


def test_an_agentic_run_resumes_exactly_from_a_checkpoint(model, tmp_path):
    """Steps 3-4 continued from a step-2 checkpoint play the episodes of an uninterrupted run: the
    groups' seeds come from (seed, step, group), the weights and optimizer from the checkpoint."""
    from posttrain.cli import main

    config = tmp_path / "exp.yaml"
    config.write_text("{}\n")
    base = [f"model.path={model}", *BASE, "env.train_env_manager.tags=[A]", "env.train_env_manager.num_env_groups=2",
            "env.train_env_manager.group_size=2", "data.train_batch_size=2", "rollout.n=2", "actor.ppo_mini_batch_size=2",
            "trainer.logger=[jsonl]", "trainer.save_freq=1", "actor.optim.lr=5e-3"]
    assert main(["train", str(config), *base, "trainer.total_training_steps=4", f"trainer.default_local_dir={tmp_path / 'whole'}"]) == 0
    part = tmp_path / "part"
    assert main(["train", str(config), *base, "trainer.total_training_steps=2", f"trainer.default_local_dir={part}"]) == 0
    assert main(["train", str(config), *base, "trainer.total_training_steps=4", f"trainer.default_local_dir={part}",
                 "trainer.resume_mode=resume_path", f"trainer.resume_from_path={part / 'checkpoints' / 'global_step_2'}"]) == 0
    whole = _env_rows(tmp_path / "whole")
    assert [s[0] for s in whole] == [1, 2, 3, 4]
    assert _env_rows(part) == whole
    assert len({s[1:] for s in whole}) > 1  # the steps differ: a resume replaying step 1 would not match


SLOW_ENV = '''
import time


class Slow:
    def reset(self, seed):
        return "go"

    def step(self, action_text):
        time.sleep(0.3)
        return "done", 0.5, True, {"success": True}
'''


def test_env_fault_keys_time_out_penalise_and_stop(model, tmp_path):
    (tmp_path / "slow_env.py").write_text(SLOW_ENV)
    slow = (f"env.custom_envs.S={{env_type: '{tmp_path / 'slow_env.py'}:Slow', max_tokens_per_step: 2}}",
            "env.train_env_manager.tags=[S]", "env.train_env_manager.num_env_groups=2", "data.train_batch_size=2")
    waited = explore(trainer(model, tmp_path, *slow, "env.step_timeout=null"))[0]
    assert waited.scores.tolist() == [0.5, 0.5] and waited.reward_metrics["env/failed"] == 0.0
    cut = explore(trainer(model, tmp_path, *slow, "env.step_timeout=0.1", "env.failure_penalty=-2.0", "env.max_failure_rate=1.0"))[0]
    assert cut.scores.tolist() == [-2.0, -2.0] and cut.reward_metrics["env/failed"] == cut.reward_metrics["env/S/failed"] == 1.0
    assert [e["failed"] for e in cut.batch.extra_info] == [True, True]
    with pytest.raises(EnvError, match=r"environment S \(.*slow_env.py:Slow\) \(seed \d+, turn 1\): step took longer than "
                                       r"env.step_timeout \(0.1 s\).* \(1 of 2 episodes of this step failed, more than env.max_failure_rate 0.1"):
        explore(trainer(model, tmp_path, *slow, "env.step_timeout=0.1"))


def test_each_env_plays_the_episodes_the_batch_needs_up_to_max_traj_per_env(model, tmp_path):
    common = ("env.train_env_manager.tags=[A]", "env.train_env_manager.num_env_groups=2", "env.train_env_manager.group_size=2",
              "data.train_batch_size=4", "rollout.n=2")  # 8 trajectories from 4 environments: 2 episodes each
    batch = explore(trainer(model, tmp_path, *common))[0].batch
    assert batch.group_index == ["s1/A/g0"] * 2 + ["s1/A/g1"] * 2 + ["s1/A/g2"] * 2 + ["s1/A/g3"] * 2
    seeds = [e["seed"] for e in batch.extra_info]
    assert len(set(seeds)) == 4 and seeds[0] == seeds[1]  # each episode its own seed, shared by its group
    same = explore(trainer(model, tmp_path, *common, "env.train_env_manager.max_traj_per_env=5"))[0].batch
    assert same.group_index == batch.group_index and [e["seed"] for e in same.extra_info] == seeds
    with pytest.raises(ConfigError, match=r"env.train_env_manager.max_traj_per_env: 1 is below the 2 episode\(s\) each environment plays per step"):
        trainer(model, tmp_path, *common, "env.train_env_manager.max_traj_per_env=1")
    with pytest.raises(ConfigError, match=r"env.val_env_manager.max_traj_per_env: 0 is below the 1 episode\(s\) each environment plays per validation"):
        trainer(model, tmp_path, *common, "env.val_env_manager.max_traj_per_env=0")


def test_render_save_dir_writes_each_validation_episode_as_text_frames(model, tmp_path):
    renders = tmp_path / "render"
    t = trainer(model, tmp_path, "env.train_env_manager.tags=[A]", "data.train_batch_size=1", "env.val_env_manager.tags=[A,B]",
                "env.val_env_manager.num_env_groups=2", f"env.render_save_dir={renders}")
    metrics = t.validate(3)
    files = sorted((renders / "global_step_3").iterdir())
    assert len(files) == metrics["val/episodes"] == 2
    assert [f.name.split("_")[1] for f in files] == ["A", "B"]  # <index>_<tag>_<reward>.txt
    text = files[0].read_text()
    assert text.startswith("# tag A, seed ") and "## frame 0" in text and "## action 1" in text
    assert text.count("## action ") <= 3  # A's max_steps
    assert not (tmp_path / "run" / "render").exists() and len(list(renders.iterdir())) == 1


class TurnClock:
    """A fake clock for explorer.max_timeout: every generate call whose rows carry `prefix` (one
    agent-loop turn of the first attempt) takes 10 s; retries take no time."""

    def __init__(self, t: RLTrainer, prefix: str = "s1/"):
        self.now, generate = 0.0, t.roles.rollout.generate

        def timed(prompts, *a, **k):
            self.now += 10.0 if prompts.uid[0].startswith(prefix) else 0.0
            return generate(prompts, *a, **k)
        t.roles.rollout.generate = timed
        t.agent.clock = lambda: self.now


def test_max_timeout_ends_late_episodes_and_replays_or_leaves_out_their_groups(model, tmp_path):
    # group 0 plays A (3 turns), group 1 plays B (2 turns); 10 s a turn, so only A's episodes are
    # still running when turn 3 would start at 20 s > 15 s
    late = ("env.train_env_manager.tags=[A,B]", "env.train_env_manager.num_env_groups=2", "env.train_env_manager.group_size=2",
            "data.train_batch_size=2", "rollout.n=2", "explorer.max_timeout=15")
    t = trainer(model, tmp_path, *late)
    TurnClock(t)
    dropped = explore(t)[0]
    assert dropped.batch.group_index == ["s1/B/g1", "s1/B/g1"]  # Trinity-RFT leaves a timed-out task out
    assert dropped.reward_metrics["env/timed_out_groups"] == 1.0 and dropped.reward_metrics["env/retried_groups"] == 0.0
    t = trainer(model, tmp_path, *late, "explorer.max_retry_times=2")
    TurnClock(t)
    batch, calls = explore(t)
    assert batch.batch.group_index == ["s1/A/g0", "s1/A/g0", "s1/B/g1", "s1/B/g1"]  # A played again, in time
    assert batch.reward_metrics["env/timed_out_groups"] == 0.0 and batch.reward_metrics["env/retried_groups"] == 1.0
    assert calls[:2] == [4, 4] and calls[2:] == [2, 2, 2]  # two turns of both groups, then A's three again
    assert batch.batch.extra_info[0]["seed"] == dropped_seed(t)  # the same episode: the group's seed
    t = trainer(model, tmp_path, *late[:-1], "explorer.max_timeout=5")  # 10 s > 5 s: both groups late
    TurnClock(t)
    with pytest.raises(EnvError, match=r"step 1: every env group had an episode still running after explorer.max_timeout \(5 s\) in each of its 1 attempt"):
        explore(t)
    with pytest.raises(ConfigError, match="explorer.max_retry_times \\(2\\): generates again the prompt groups"):
        trainer(model, tmp_path, *late[:-1], "explorer.max_retry_times=2")


def dropped_seed(t: RLTrainer) -> int:
    from posttrain.trainer.agentic import group_seed
    return group_seed(t.cfg.trainer.seed, "s", 1, 0)
