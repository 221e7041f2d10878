"""`posttrain config plan` runs the checks `posttrain train` runs before its first step (one
function, `posttrain.trainer.run.check_run`): a config that train refuses, plan refuses with the
same message; train refuses it before any stage starts."""

from __future__ import annotations

import json
import textwrap

import pytest
from cli_run_helpers import assert_user_error, posttrain, tiny_run, write_config

from posttrain.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("preflight")
    overrides = tiny_run(root)
    (root / "reward.py").write_text("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    (root / "no_prompt.jsonl").write_text(json.dumps({"question": "q", "ground_truth": "a"}) + "\n")
    return root, overrides


CASES = {
    "estimator": (["algorithm.adv_estimator=grop"], "unknown advantage estimator 'grop' (did you mean 'grpo'?)"),
    "policy loss": (["actor.policy_loss.loss_mode=vanila"], "unknown policy loss 'vanila'"),
    "kl in reward": (["algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=k4"], "algorithm.kl_penalty: unknown KL kind 'k4'"),
    "kl loss full": (["actor.use_kl_loss=true", "actor.kl_loss_type=full"], "actor.kl_loss_type: KL kind 'full' needs"),
    "data file": (["data.train_files=[{root}/data/nope.parquet]"], "nope.parquet: data file not found"),
    "val file": (["data.val_files=[{root}/data/nope.jsonl]"], "nope.jsonl: data file not found"),
    "column": (["data.train_files=[{root}/no_prompt.jsonl]"], "no_prompt.jsonl: row 0 has no column 'prompt'"),
    "model dir": (["model.path={root}/nope"], "is not an existing local directory"),
    "reward file": (["reward.custom_reward_function.path={root}/nope.py"], "reward function file not found"),
    "reward name": (["reward.custom_reward_function.path={root}/reward.py"], "has no function named 'compute_score'"),
    "critic dir": (["algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=4", "critic.ppo_micro_batch_size_per_gpu=8", "critic.model.path={root}/nope"], "critic path"),
    "reward model": (["reward.reward_model.enable=true", "reward.reward_model.path={root}/nope"], "reward model path"),
    "max_model_len": (["model.max_model_len=100000"], "model.max_model_len 100000 exceeds"),
    "later stage": (["stages=[{{name: a}}, {{name: b, data: {{train_files: [{root}/data/nope.parquet]}}}}]"], "nope.parquet: data file not found"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plan_refuses_what_train_refuses_with_the_same_message(files, case, capsys):
    root, base = files
    extra, expected = CASES[case]
    args = [*base, *(o.format(root=root) for o in extra), f"trainer.default_local_dir={root / case.replace(' ', '_')}"]
    config = str(write_config(root))
    assert main(["config", "plan", config, *args]) == 2
    plan_err = capsys.readouterr().err
    assert main(["train", config, *args]) == 2
    train_out = capsys.readouterr()
    assert expected in plan_err and plan_err == train_out.err
    assert not (root / case.replace(" ", "_")).exists()  # refused before any stage started


def test_the_same_config_passes_plan_and_trains(files, capsys):
    root, base = files
    config = str(write_config(root))
    assert main(["config", "plan", config, *base]) == 0
    plan = capsys.readouterr().out
    assert "steps per epoch" in plan and "8 rows / data.train_batch_size 4" in " ".join(plan.split())


def test_plan_through_the_command_line_names_the_bad_estimator(tmp_path):
    out = posttrain("config", "plan", str(write_config(tmp_path)), *tiny_run(tmp_path), "algorithm.adv_estimator=grop",
                    cwd=tmp_path)
    assert_user_error(out, "algorithm.adv_estimator: unknown advantage estimator 'grop'")


def test_plan_builds_nothing_and_says_what_prepare_will_build(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(textwrap.dedent(
        f"""
        prepare:
          model: {{path: {tmp_path}/model, tiny: {{layers: 1, hidden: 32, heads: 4}}}}
          data: {{dir: {tmp_path}/data, task: sort, train: 8, test: 4}}
        model: {{path: {tmp_path}/model}}
        data: {{train_files: [{tmp_path}/data/train.parquet], train_batch_size: 4, max_prompt_length: 32, max_response_length: 6}}
        rollout: {{n: 2}}
        actor: {{ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8}}
        """
    ))
    out = posttrain("config", "plan", str(config), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"(model and data not checked: model.path {tmp_path}/model is built by `prepare` when the run starts)" in out.stdout
    assert not (tmp_path / "model").exists() and not (tmp_path / "data").exists()
    out = posttrain("config", "plan", str(config), "algorithm.adv_estimator=grop", cwd=tmp_path)
    assert_user_error(out, "unknown advantage estimator 'grop'")  # name checks still run


def test_plan_names_an_environment_entry_it_refuses_before_what_the_machine_lacks(tmp_path, capsys):
    """An agentic config's custom_envs entries need no files: a key posttrain refuses there is named
    even when the model is not on this machine (which would otherwise be the only message)."""
    rc = main(["config", "plan", f"model.path={tmp_path / 'no_model'}", "env.train_env_manager.tags=[W]",
               "env.custom_envs={W: {env_type: walk, step_template: x}}"])
    err = capsys.readouterr().err
    assert rc == 2 and "env.custom_envs.W.step_template: unknown key" in err and "no_model" not in err
