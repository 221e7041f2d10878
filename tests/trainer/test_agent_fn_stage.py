"""An RL stage whose rollout is a user's agent function (rollout.agent.function): two GRPO steps on the
tiny model, each task row's episodes making two calls, every call trained on; and what it refuses."""

from __future__ import annotations

import pytest
import torch

from posttrain.config.load import load_config
from posttrain.errors import ConfigError, ModelError, UserError
from posttrain.trainer.agent_fn import check_agent_fn
from rl_helpers import BASE, tiny_rl_files, tiny_rl_trainer

AGENT = '''
import json, urllib.request

def post(base_url, messages, max_tokens):
    body = json.dumps({"model": "policy", "messages": messages, "max_tokens": max_tokens}).encode()
    request = urllib.request.Request(base_url + "/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"]

def run(base_url, row):
    """Two calls: answer, then answer again after a nudge; the reward is a digest of both answers
    (two episodes of a group tie with chance ~1/97, so GRPO has a signal every step)."""
    messages = [{"role": "user", "content": row["prompt"][0]["content"]}]
    first = post(base_url, messages, 4)
    messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "sorted?"}]
    second = post(base_url, messages, 5)
    return {"reward": sum(map(ord, first + second)) % 97 / 97, "first_length": float(len(first))}
'''


def test_two_grpo_steps_train_on_every_call_of_the_agents_episodes(tmp_path):
    files = tiny_rl_files(tmp_path)
    (tmp_path / "agent.py").write_text(AGENT)
    trainer = tiny_rl_trainer(files, f"rollout.agent.function={tmp_path}/agent.py:run", "trainer.total_training_steps=2",
                              "rollout.agent.max_concurrency=3", "data.max_prompt_length=96", f"data.val_files={tmp_path}/data/test.parquet", "rollout.val_kwargs.n=1")
    before = [p.detach().clone() for p in trainer.roles.actor.model.parameters()]
    seen = []
    learn = trainer.learn

    def spy(experience, step, timer):
        seen.append((len(experience.batch), experience.scores.clone(), list(experience.batch.group_index)))
        return learn(experience, step, timer)

    trainer.learn = spy
    result = trainer.fit()
    m = result.last_metrics
    assert [rows for rows, _, _ in seen] == [16, 16]  # 4 rows x n 2 episodes x 2 calls, both steps
    for _, scores, groups in seen:
        assert len(set(groups)) == 4 and scores.view(8, 2)[:, 0].equal(scores.view(8, 2)[:, 1])  # an episode's calls share its reward
    assert m["agent/episodes"] == 8 and m["agent/calls"] == 2 and m["agent/failed"] == 0 and "agent/first_length" in m
    assert m["val/agent/episodes"] == 4 and m["val/agent/calls"] == 2  # validation runs the agent over data.val_files
    assert 0 <= m["agent/reward"] <= 1 and m["actor/grad_norm"] > 0
    # mini-batches are counted so a step takes as many optimizer steps as an episode step: one here
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.roles.actor.model.parameters()))
    assert trainer.agent_fn.endpoint is None  # the endpoint closes with the stage


JUDGED = '''
import os
from posttrain.rewards.auxiliary import chat

def run(base_url, row):
    """One call of the policy, then the stage's judge (reward.auxiliary_models.judge) reads the answer."""
    answer = chat("policy", [{"role": "user", "content": row["prompt"][0]["content"]}], max_tokens=4, base_url=base_url)
    verdict = chat("judge", [{"role": "user", "content": "Is this sorted? " + answer}], max_tokens=3, temperature=0.0)
    return {"reward": float(len(verdict) % 2), "judge_url": float(bool(os.environ.get("POSTTRAIN_AUX_JUDGE_URL")))}
'''


def test_an_agent_function_can_ask_the_stage_s_auxiliary_models(tmp_path):
    """reward.auxiliary_models are served while an agent-function stage runs (their URLs in
    POSTTRAIN_AUX_<NAME>_URL), so an episode's reward can come from a judge model; they stop with it."""
    files = tiny_rl_files(tmp_path)
    (tmp_path / "judged.py").write_text(JUDGED)
    trainer = tiny_rl_trainer(files, f"rollout.agent.function={tmp_path}/judged.py:run", "trainer.total_training_steps=1",
                              f"reward.auxiliary_models={{judge: {{model_path: {files[1]}}}}}")
    m = trainer.fit().last_metrics
    assert m["agent/episodes"] == 8 and m["agent/failed"] == 0 and m["agent/judge_url"] == 1.0
    assert trainer.agent_fn.auxiliary is None and "POSTTRAIN_AUX_JUDGE_URL" not in __import__("os").environ  # stopped with the stage
    with pytest.raises(ModelError, match="reward.auxiliary_models.judge.model_path"):
        check_agent_fn(load_config(None, [f"data.train_files={tmp_path}/t.parquet", *BASE, f"rollout.agent.function={tmp_path}/judged.py:run",
                                          f"reward.auxiliary_models={{judge: {{model_path: {tmp_path}/no_model}}}}"]))


@pytest.mark.parametrize("extra, says", [
    (["rollout.multi_turn.enable=true"], "rollout.multi_turn.enable: the agent function makes its own calls"),
    (["reward.custom_reward_function.path=r.py"], "the agent function's return value is the episode's reward"),
    (["algorithm.adv_estimator=remax"], "remax needs a greedy baseline"),
    (["algorithm.filter_groups.enable=true"], "algorithm.filter_groups: dynamic sampling"),
])
def test_what_an_agent_function_stage_refuses(tmp_path, extra, says):
    (tmp_path / "agent.py").write_text("def run(base_url, row):\n    return 0.0\n")
    cfg = load_config(None, [f"data.train_files={tmp_path}/t.parquet", *BASE, f"rollout.agent.function={tmp_path}/agent.py:run", *extra])
    with pytest.raises(ConfigError, match=says):
        check_agent_fn(cfg)


def test_a_missing_agent_function_is_named(tmp_path):
    cfg = load_config(None, [f"data.train_files={tmp_path}/t.parquet", *BASE, f"rollout.agent.function={tmp_path}/none.py:run"])
    with pytest.raises(ConfigError, match="rollout.agent.function: file not found"):
        check_agent_fn(cfg)


def test_a_step_whose_every_episode_was_dropped_stops_with_the_first_failure(tmp_path):
    files = tiny_rl_files(tmp_path)
    (tmp_path / "agent.py").write_text("def run(base_url, row):\n    raise RuntimeError('tool server down')\n")
    trainer = tiny_rl_trainer(files, f"rollout.agent.function={tmp_path}/agent.py:run", "rollout.agent.max_failure_rate=1.0")
    with pytest.raises(UserError, match=r"agent.py:run \(row \d+, sample 0\): raised RuntimeError: tool server down.*every episode of this step was dropped"):
        trainer.fit()


def test_a_decoupled_run_explores_with_the_agent_and_trains_its_calls_from_the_buffer(tmp_path):
    """trainer.mode explore runs the agent's episodes in the explorer process (its engine answers the calls)
    and stores the calls; trainer.mode train learns them from the buffer."""
    import json

    from posttrain.buffer.sqlite import ExperienceBuffer
    from posttrain.cli import main

    root, model = tiny_rl_files(tmp_path)
    (tmp_path / "agent.py").write_text(AGENT)
    common = [f"model.path={model}", f"data.train_files={root}/data/train.parquet", *BASE, "trainer.total_training_steps=2",
              f"rollout.agent.function={tmp_path}/agent.py:run", "data.max_prompt_length=96", "trainer.logger=[jsonl]",
              f"buffer.trainer_input.experience_buffer.path={tmp_path / 'buffer.sqlite'}"]
    for mode in ("explore", "train"):
        (tmp_path / f"{mode}.yaml").write_text(f"trainer: {{mode: {mode}}}\n")
        assert main(["train", str(tmp_path / f"{mode}.yaml"), *common, f"trainer.default_local_dir={tmp_path / mode}"]) == 0
        if mode == "explore":
            buffer = ExperienceBuffer(tmp_path / "buffer.sqlite")
            stored = buffer.claim(1, 1.0)
            assert buffer.explored() == 2 and len(stored.batch) == 16  # 4 rows x 2 episodes x 2 calls, as in the loop
            assert stored.scores.view(8, 2)[:, 0].equal(stored.scores.view(8, 2)[:, 1])  # an episode's calls share its reward
            buffer.close()
    rows = [json.loads(line) for line in (tmp_path / "train" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "actor/pg_loss" in r]
    assert len(trained) == 2 and all(r["agent/episodes"] == 8 and r["agent/calls"] == 2 for r in trained)


def test_val_kwargs_replace_kwargs_for_validation_episodes(tmp_path):
    files = tiny_rl_files(tmp_path)
    (tmp_path / "agent.py").write_text(AGENT.split("def run")[0] + (
        "def run(base_url, row, bonus=0.0, calls=1):\n"
        "    for _ in range(calls):\n"
        "        post(base_url, [{'role': 'user', 'content': 'hi'}], 2)\n"
        "    return bonus\n"))
    trainer = tiny_rl_trainer(files, f"rollout.agent.function={tmp_path}/agent.py:run", "rollout.agent.kwargs={bonus: 0.25, calls: 1}",
                              "rollout.agent.val_kwargs={bonus: 0.75}", "data.max_prompt_length=96",
                              f"data.val_files={tmp_path}/data/test.parquet", "rollout.val_kwargs.n=1")
    m = trainer.fit().last_metrics
    assert m["agent/reward"] == 0.25 and m["val/agent/reward"] == 0.75  # validation's bonus is val_kwargs'
    assert m["agent/calls"] == 1 and m["val/agent/calls"] == 1  # the kwargs val_kwargs leave alone stay
    with pytest.raises(ConfigError, match="rollout.agent.val_kwargs: .*must take"):
        check_agent_fn(load_config(None, [f"data.train_files={tmp_path}/t.parquet", *BASE, f"rollout.agent.function={tmp_path}/agent.py:run",
                                          "rollout.agent.val_kwargs={nope: 1}"]))
