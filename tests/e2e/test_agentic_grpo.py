"""examples/agentic_grpo.yaml through the real CLI on a 1-layer model: GRPO over groups of walk
environments raises the training reward and the greedy validation success rate; a user environment
that raises stops the run with exit status 2 and one message naming the env, the seed and the turn."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from cli_run_helpers import assert_user_error, posttrain, write_config
from posttrain.cli import main
from posttrain.models.tiny import make_tiny_model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agentic_grpo.yaml"


def train_example(tmp_path, monkeypatch, change=lambda config: None) -> tuple[list[dict], list[dict]]:
    """The example for 30 steps (validating at 0 and 30), `change` applied to its config; the metrics
    rows of the training steps and all rows."""
    config = yaml.safe_load(EXAMPLE.read_text())
    config["trainer"].update(total_training_steps=30, test_freq=30, logger=["jsonl"])
    change(config)
    (tmp_path / "agentic.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    make_tiny_model(tmp_path / "outputs" / "tiny-model", layers=1, hidden=32, heads=4, seed=0)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "agentic.yaml"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "outputs/runs/agentic_grpo/metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "env/reward" in r], rows


def mean_reward(steps: list[dict]) -> float:
    return sum(r["env/reward"] for r in steps) / len(steps)


def test_agentic_grpo_example_learns_to_walk(tmp_path, monkeypatch):
    steps, rows = train_example(tmp_path, monkeypatch)
    assert len(steps) == 30 and all(r["env/episodes"] == 32 for r in steps)
    first, last = mean_reward(steps[:5]), mean_reward(steps[-5:])
    assert last > first + 0.3, (first, last)  # measured: about -0.3 -> 0.4
    assert steps[-1]["env/invalid_action_rate"] < steps[0]["env/invalid_action_rate"]
    vals = [r for r in rows if "val/W4/success" in r]
    assert [r["step"] for r in vals] == [0, 30]
    assert vals[0]["val/W4/success"] == 0.0 and vals[1]["val/W4/success"] >= 0.2


def test_raft_on_the_walk_example_fine_tunes_on_its_successes_and_learns(tmp_path, monkeypatch):
    """RAFT (Trinity-RFT's raft type with its ALFWorld workflow's filters): the SFT loss on the episodes
    that reached the goal with every action well formed, nothing else in the losses. The kept share and
    the reward rise together as the policy imitates its own successes."""
    def raft(config):
        config["actor"]["policy_loss"] = {"loss_mode": "sft"}
        config["algorithm"].update(min_score_mask=1.0, valid_actions_mask=True)

    steps, rows = train_example(tmp_path, monkeypatch, raft)
    kept = [r["actor/final_mask_ratio"] for r in steps]
    assert kept[0] == 0.0 and max(kept[-5:]) >= 0.09  # measured: none at first, 3 or 4 of 32 at the end
    first, last = mean_reward(steps[:5]), mean_reward(steps[-5:])
    assert last > first + 0.15, (first, last)  # measured: -0.37 -> -0.09
    vals = [r["val/W4/success"] for r in rows if "val/W4/success" in r]
    assert vals[0] == 0.0 and vals[-1] >= 0.2  # measured: 0 -> 0.47


BROKEN = '''
class Broken:
    def reset(self, seed):
        return "start"

    def step(self, action_text):
        raise KeyError("no such move")
'''


def test_a_raising_user_env_exits_2_naming_env_seed_and_turn(tmp_path):
    make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, seed=0)
    (tmp_path / "broken_env.py").write_text(BROKEN)
    out = posttrain(
        "train", str(write_config(tmp_path)), f"model.path={tmp_path / 'model'}", f"trainer.default_local_dir={tmp_path / 'run'}",
        "data.max_prompt_length=32", "data.max_response_length=16", "data.train_batch_size=2",
        "actor.ppo_mini_batch_size=2", "trainer.total_training_steps=1", "trainer.logger=[]",
        f"env.custom_envs={{X: {{env_type: '{tmp_path / 'broken_env.py'}:Broken', max_tokens_per_step: 2}}}}",
        "env.train_env_manager.tags=[X]", "env.train_env_manager.num_env_groups=2", cwd=tmp_path,
    )
    message = assert_user_error(out, "environment X (", "broken_env.py:Broken) (seed ", ", turn 1): step raised KeyError: 'no such move'")
    assert "Traceback" not in out.stderr and message
