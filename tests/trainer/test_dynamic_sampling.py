"""DAPO dynamic sampling (algorithm.filter_groups): the group selection on hand-made rewards, the
rounds of a real step on the tiny sort task, the bound on rounds, the load-time refusals, and an
exact resume."""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.algorithms import informative_groups, rows_of_groups
from posttrain.buffer.sqlite import ExperienceBuffer
from posttrain.cli import main as cli_main
from posttrain.config.load import load_config
from posttrain.config.sections.algorithm import FilterGroupsConfig
from posttrain.errors import ConfigError, DataError
from posttrain.records import RolloutBatch
from posttrain.trainer.dynamic_sampling import Round, gather_groups, merge_round_metrics, metric_values
from posttrain.trainer.metrics import PhaseTimer
from rl_helpers import tiny_rl_files, tiny_rl_trainer


def _round(groups: list[str], values: list[float]) -> Round:
    """A scored round whose responses belong to `groups`, with metric values and scores `values`."""
    B = len(groups)
    batch = RolloutBatch(
        prompt_ids=torch.ones(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2),
        response_ids=torch.arange(B).unsqueeze(1), response_mask=torch.ones(B, 1), rollout_logprobs=torch.zeros(B, 1),
        weights_version=torch.zeros(B, dtype=torch.long), group_index=list(groups), data_source=["t"] * B,
        ground_truth=[None] * B, extra_info=[{} for _ in range(B)], raw_prompt=[""] * B,
    )
    v = torch.tensor(values)
    return Round(batch, v.clone(), [f"r{i}" for i in range(B)], {"reward/acc": float(v.mean()), "reward/failures": 0.0}, v)


def test_informative_groups_keep_a_spread_or_a_single_response():
    values = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.1, 0.1, 0.1, 0.0])
    groups = ["a", "a", "b", "b", "c", "c", "d", "d", "d", "e"]
    # a: all 1, c: all 0.5, d: three equal 0.1 (np.std reads float round-off there), e: one response
    assert informative_groups(groups, values) == ["b", "e"]
    assert rows_of_groups(groups, ["e", "b"]) == [2, 3, 9]


def test_a_std_threshold_keeps_groups_of_two_or_more_spread_beyond_it():
    # Trinity-RFT's grpo std_threshold: a: std 0.7071 kept; b: std of [0.5, 0.50001] = 7.07e-6 <= 1e-4
    # dropped; c: all equal, dropped; e: one response, dropped (Trinity skips groups of one)
    values = torch.tensor([1.0, 0.0, 0.5, 0.50001, 0.2, 0.2, 0.0])
    groups = ["a", "a", "b", "b", "c", "c", "e"]
    assert informative_groups(groups, values, 1e-4) == ["a"]
    assert informative_groups(groups, values, 1e-6) == ["a", "b"]  # 7.07e-6 > 1e-6
    assert informative_groups(groups, values) == ["a", "b", "e"]  # DAPO's rule: any spread, a single one kept
    rounds = {1: _round(groups, values.tolist()), 2: _round(["f", "f"], [0.0, 1.0])}
    out, metrics = gather_groups(lambda r: rounds[r], FilterGroupsConfig(enable=True, std_threshold=1e-4), need=2)
    assert out.batch.group_index == ["a", "a", "f", "f"] and metrics["filter_groups/num_gen_batches"] == 2.0
    assert metrics["filter_groups/filtered_count"] == 5.0  # Trinity's filtered_count: the responses of b, c and e


def test_rounds_go_on_until_enough_groups_and_the_extra_ones_are_discarded():
    rounds = {
        1: _round(["a", "a", "b", "b"], [1.0, 1.0, 1.0, 0.0]),  # b only
        2: _round(["c", "c", "d", "d", "e", "e"], [0.0, 0.0, 0.0, 1.0, 1.0, 0.0]),  # d and e; e is one too many
    }
    asked = []

    def explore_round(r):
        asked.append(r)
        return rounds[r]

    out, metrics = gather_groups(explore_round, FilterGroupsConfig(enable=True), need=2)
    assert asked == [1, 2]
    assert out.batch.group_index == ["b", "b", "d", "d"] and out.texts == ["r2", "r3", "r2", "r3"]
    assert out.scores.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert metrics == {"filter_groups/num_gen_batches": 2.0, "filter_groups/groups": 5.0,
                       "filter_groups/kept_groups": 3.0, "filter_groups/trained_groups": 2.0,
                       "filter_groups/filtered_count": 4.0}  # the responses of a and c (e is kept, then discarded)
    # the reward metrics cover every generated response: acc 0.75 over 4 rows and 1/3 over 6
    assert out.metrics["reward/acc"] == pytest.approx((0.75 * 4 + 2.0) / 10)
    with pytest.raises(DataError, match=r"kept 1 of data.train_batch_size=2 prompt groups after 1 generation rounds \(max_num_gen_batches=1\)"):
        gather_groups(explore_round, FilterGroupsConfig(enable=True, max_num_gen_batches=1), need=2)


def test_metric_values_read_acc_score_or_the_final_reward():
    final, fn = torch.tensor([0.5, -1.0, 0.0]), torch.tensor([1.0, 0.0, 0.0])
    extra = {"acc": [1.0, float("nan"), 0.0]}  # the second sample returned a number: its acc is its score
    assert metric_values("acc", final, fn, extra).tolist() == [1.0, 0.0, 0.0]
    assert metric_values("acc", final, fn, {}).tolist() == [1.0, 0.0, 0.0]
    assert metric_values("score", final, fn, extra).tolist() == [1.0, 0.0, 0.0]
    assert metric_values("seq_reward", final, fn, extra).tolist() == [0.5, -1.0, 0.0]
    assert metric_values("seq_final_reward", final, fn, extra).tolist() == [0.5, -1.0, 0.0]
    assert merge_round_metrics([({"query_filter/dropped_groups": 1.0}, 4), ({"query_filter/dropped_groups": 2.0}, 4)]) == {"query_filter/dropped_groups": 3.0}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("dapo"), train=16)


def _explore(trainer, step=1):
    prompts = trainer._next_prompts(step)
    return trainer.explore(prompts, PhaseTimer(), expected_version=trainer.roles.actor.version,
                           refill=lambda r: trainer._next_prompts(step, r))


def test_a_step_samples_more_prompts_until_its_groups_are_informative(files):
    """The random tiny model's sort answers are never right (acc all 0) but their partial-credit
    scores spread in a few groups: filtering on score takes extra rounds and trains only groups
    with a spread; enable=false trains the first batch as it is; acc finds nothing."""
    n = ("rollout.n=4",)
    plain = tiny_rl_trainer(files, *n, run="plain")
    exp = _explore(plain)
    plain.rewards.close()
    assert len(set(exp.batch.group_index)) == 4 and plain.sampler.position == 1
    assert not any(k.startswith("filter_groups/") for k in exp.reward_metrics)
    by_group = {}
    for uid, s in zip(exp.batch.group_index, exp.scores.tolist()):
        by_group.setdefault(uid, []).append(s)
    assert any(len(set(v)) == 1 for v in by_group.values())  # some group has no spread: it would be dropped

    dyn = tiny_rl_trainer(files, *n, "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=score", run="dyn")
    exp = _explore(dyn)
    m = exp.reward_metrics
    assert m["filter_groups/num_gen_batches"] > 1 and dyn.sampler.position == m["filter_groups/num_gen_batches"]
    assert m["filter_groups/trained_groups"] == 4 and m["filter_groups/groups"] == 4 * m["filter_groups/num_gen_batches"]
    groups = {}
    for uid, s in zip(exp.batch.group_index, exp.scores.tolist()):
        groups.setdefault(uid, []).append(s)
    assert len(groups) == 4 and all(len(set(v)) > 1 for v in groups.values())
    assert any("g" in uid for uid in groups)  # a group from a later round (uid s1g<round>-<row>)
    metrics, _ = dyn.learn(exp, 1, PhaseTimer(dyn.observer.watch()))
    assert "actor/pg_loss" in metrics
    dyn.rewards.close()

    # data.gen_batch_size: rounds of 8 prompts for 4 trained groups
    wide = tiny_rl_trainer(files, *n, "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=score", "data.gen_batch_size=8", run="wide")
    m = _explore(wide).reward_metrics
    assert wide.sampler.batch_size == 8 and m["filter_groups/groups"] == 8 * m["filter_groups/num_gen_batches"]
    assert m["filter_groups/trained_groups"] == 4 and wide.derived.steps_per_epoch == 2  # 16 rows / 8
    wide.rewards.close()

    acc = tiny_rl_trainer(files, *n, "algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=2", run="acc")
    with pytest.raises(DataError, match="after 2 generation rounds"):
        _explore(acc)
    assert acc.sampler.position == 2
    acc.rewards.close()


def test_filter_groups_is_refused_where_it_cannot_draw_more_prompts(files):
    root, model = files
    base = [f"model.path={model}", f"data.train_files={root}/data/train.parquet", "algorithm.filter_groups.enable=true"]
    load_config(None, [*base, "synchronizer.sync_interval=2"])  # a decoupled explorer refills its batches
    with pytest.raises(ConfigError, match="trainer.mode serve explores no batches"):
        load_config(None, [*base, "trainer.mode=serve"])
    with pytest.raises(ConfigError, match="metric=seq_final_reward with algorithm.use_kl_in_reward"):
        load_config(None, [*base, "algorithm.filter_groups.metric=seq_final_reward", "algorithm.use_kl_in_reward=true"])
    load_config(None, [*base, "algorithm.filter_groups.metric=seq_final_reward"])  # no KL in reward: the final reward is the score
    with pytest.raises(ConfigError, match=r"data.gen_batch_size \(8\) differs from data.train_batch_size \(4\), but it is read only by dynamic sampling"):
        load_config(None, [*base[:2], "data.train_batch_size=4", "data.gen_batch_size=8"])


def _metrics(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("timing/", "perf/"))} for r in rows if r["step"] > 0]


def test_a_resumed_run_continues_with_the_prompts_of_the_uninterrupted_run(files, tmp_path, capsys):
    """Step 2 after resuming from step 1's checkpoint equals step 2 of the run that went on: the
    sampler's position moved by every round's prompts."""
    root, model = files
    config = tmp_path / "dapo.yaml"
    config.write_text("{}\n")
    args = [f"model.path={model}", f"data.train_files={root}/data/train.parquet", "data.max_prompt_length=32",
            "data.max_response_length=6", "data.train_batch_size=2", "rollout.n=4", "actor.ppo_mini_batch_size=2",
            "actor.ppo_micro_batch_size_per_gpu=8", "trainer.logger=[jsonl]", "trainer.save_freq=1", "actor.optim.lr=1e-3",
            "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=score"]
    assert cli_main(["train", str(config), *args, "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path}/ref"]) == 0
    assert cli_main(["train", str(config), *args, "trainer.total_training_steps=1", f"trainer.default_local_dir={tmp_path}/cut"]) == 0
    (tmp_path / "cut" / "stage_complete.json").unlink()  # let the finished stage go on to step 2
    assert cli_main(["train", str(config), *args, "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path}/cut"]) == 0
    assert "resuming from" in capsys.readouterr().out
    ref, cut = _metrics(tmp_path / "ref" / "metrics.jsonl"), _metrics(tmp_path / "cut" / "metrics.jsonl")
    assert [r["step"] for r in ref] == [1, 2] and ref[1]["filter_groups/num_gen_batches"] >= 1
    assert sum(r["filter_groups/num_gen_batches"] for r in ref) > 2  # some step took an extra round
    assert cut == ref


def _stored(path) -> list:
    buffer = ExperienceBuffer(path)
    try:
        return [buffer.read(b) for b in range(1, buffer.explored() + 1)]
    finally:
        buffer.close()


def test_a_decoupled_explorer_refills_each_batch_and_resumes_after_the_prompts_it_drew(files, tmp_path, capsys):
    """trainer.mode explore with Trinity-RFT's std_threshold: every stored batch holds
    data.train_batch_size groups whose score spread exceeds the bound, drawn in as many rounds as
    that took (Experience.drawn counts them); an explorer resumed after batch 1 writes the batch 2
    of the run that went on (same prompts, responses and scores: explore samples the starting weights)."""
    root, model = files
    config = tmp_path / "explore.yaml"
    config.write_text("{}\n")
    args = [f"model.path={model}", f"data.train_files={root}/data/train.parquet", "data.max_prompt_length=32",
            "data.max_response_length=6", "data.train_batch_size=2", "rollout.n=4", "actor.ppo_mini_batch_size=2",
            "trainer.logger=[jsonl]", "trainer.mode=explore", "algorithm.filter_groups.enable=true",
            "algorithm.filter_groups.metric=score", "algorithm.filter_groups.std_threshold=0.01"]
    assert cli_main(["train", str(config), *args, "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path}/ref"]) == 0
    assert cli_main(["train", str(config), *args, "trainer.total_training_steps=1", f"trainer.default_local_dir={tmp_path}/cut"]) == 0
    (tmp_path / "cut" / "stage_complete.json").unlink()  # let the finished stage go on to batch 2
    assert cli_main(["train", str(config), *args, "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path}/cut"]) == 0
    capsys.readouterr()
    ref, cut = _stored(tmp_path / "ref" / "experience_buffer.sqlite"), _stored(tmp_path / "cut" / "experience_buffer.sqlite")
    rounds = [int(e.reward_metrics["filter_groups/num_gen_batches"]) for e in ref]
    assert [e.drawn for e in ref] == [rounds[0], rounds[0] + rounds[1]] and sum(rounds) > 2  # some batch took a refill
    for e in ref:
        groups: dict[str, list[float]] = {}
        for uid, s in zip(e.batch.group_index, e.scores.tolist()):
            groups.setdefault(uid, []).append(s)
        assert len(groups) == 2 and all(len(v) == 4 and torch.tensor(v).std() > 0.01 for v in groups.values())
        dropped = e.reward_metrics["filter_groups/groups"] - e.reward_metrics["filter_groups/kept_groups"]
        assert e.reward_metrics["filter_groups/filtered_count"] == 4 * dropped
    assert [e.drawn for e in cut] == [e.drawn for e in ref]
    assert cut[1].batch.group_index == ref[1].batch.group_index
    assert torch.equal(cut[1].batch.response_ids, ref[1].batch.response_ids) and torch.equal(cut[1].scores, ref[1].scores)
    # the trainer of the same config trains on them as stored, and logs the explorer's counts
    train = [a for a in args if a != "trainer.mode=explore"]
    assert cli_main(["train", str(config), *train, "trainer.mode=train", "trainer.total_training_steps=2",
                     "actor.ppo_micro_batch_size_per_gpu=8", f"trainer.default_local_dir={tmp_path}/train",
                     f"buffer.trainer_input.experience_buffer.path={tmp_path}/ref/experience_buffer.sqlite"]) == 0
    logged = [r for r in _metrics(tmp_path / "train" / "metrics.jsonl") if "async/staleness" in r]
    assert [r["filter_groups/num_gen_batches"] for r in logged] == rounds and "actor/pg_loss" in logged[0]
