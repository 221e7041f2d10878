"""Reward workers in a training run: each domain scored by its worker, per-worker metrics in the
step's metrics, and a tag no worker claims refused before the first step, naming tag and file."""

from __future__ import annotations

import pytest
import torch
from rl_helpers import tiny_rl_trainer

from posttrain.cli import main
from posttrain.trainer.metrics import PhaseTimer
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

SORT, ARITH = "posttrain/sort", "posttrain/arithmetic"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("workers")
    model = make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "sort", train=8, test=4, sft=0, dpo=0)
    write_task_data("arithmetic", root / "arith", train=8, test=4, sft=0, dpo=0)
    return root, model


def _workers(root):
    return [
        f"data.train_files=[{root}/sort/train.parquet, {root}/arith/train.parquet]",
        "reward.workers.sorting.worker_cls=tasks", f"reward.workers.sorting.tag_included=[{SORT}]",
        "reward.workers.sums.worker_cls=tasks", f"reward.workers.sums.tag_included=[{ARITH}]",
        "reward.workers.sums.weight=0.5",
    ]


def test_a_step_scores_each_domain_with_its_worker_and_logs_per_worker_metrics(files):
    root, model = files
    trainer = tiny_rl_trainer((root, model), *_workers(root), "data.train_batch_size=8", "actor.ppo_mini_batch_size=8",
                              "actor.ppo_micro_batch_size_per_gpu=16", run="two")
    prompts = trainer.train_set
    tags = [prompts[k].data_source for k in range(len(prompts))]
    assert tags.count(SORT) == 8 and tags.count(ARITH) == 8
    rows = trainer.sampler.next_batch()
    from posttrain.data import collate_prompts
    batch = collate_prompts([prompts[i] for i in rows], trainer.pad_id, uid_prefix="s1")
    metrics = trainer.step(batch, 1)
    n_sort = sum(prompts[i].data_source == SORT for i in rows) * 2  # rollout.n = 2
    assert metrics["reward/sorting/count"] == n_sort and metrics["reward/sums/count"] == 16 - n_sort
    for name in ("sorting", "sums"):
        assert metrics[f"reward/{name}/failures"] == 0 and metrics[f"reward/{name}/time_s"] >= 0
    # the step's score is each worker's score times its weight, in the batch's mean
    total = metrics["reward/sorting/mean"] * n_sort + 0.5 * metrics["reward/sums/mean"] * (16 - n_sort)
    assert metrics["critic/score/mean"] == pytest.approx(total / 16)
    trainer.rewards.close()


def test_a_tag_no_worker_claims_is_refused_before_training(files, tmp_path, capsys):
    root, model = files
    config = tmp_path / "exp.yaml"
    config.write_text("{}\n")
    args = [f"model.path={model}", *_workers(root), "reward.workers.sums.tag_included=[other]", "trainer.logger=[]",
            "data.max_prompt_length=32", "data.max_response_length=6", "data.train_batch_size=4", "rollout.n=2",
            "actor.ppo_mini_batch_size=4", f"trainer.default_local_dir={tmp_path / 'run'}"]
    assert main(["train", str(config), *args]) == 2
    err = capsys.readouterr().err
    assert f"arith/train.parquet: row 0, column 'data_source': tag '{ARITH}'" in err and "claimed by no reward worker" in err
    assert "sums: ['other']" in err and not (tmp_path / "run").exists()


def _run(config, *overrides):
    return main(["train", str(config), *overrides])


def _per_step(run_dir):
    import json

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = ("reward/sorting/count", "reward/sums/count", "critic/score/mean")
    return [(r["step"], *(r[k] for k in keys)) for r in rows if "reward/sorting/count" in r]


def test_domain_mixing_resumes_exactly_from_a_checkpoint(files, tmp_path):
    """Steps 3-4 of a run continued from its step-2 checkpoint draw the prompts (and so the domain
    counts and scores) of an uninterrupted 4-step run."""
    root, model = files
    config = tmp_path / "exp.yaml"
    config.write_text("{}\n")
    base = [f"model.path={model}", *_workers(root), "data.domain_interleave_probs={sorting: 0.3, sums: 0.7}",
            "data.max_prompt_length=32", "data.max_response_length=6", "data.train_batch_size=4", "rollout.n=2",
            "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=8", "trainer.logger=[jsonl]",
            "trainer.save_freq=1", "actor.optim.lr=1e-3"]
    assert _run(config, *base, "trainer.total_training_steps=4", f"trainer.default_local_dir={tmp_path / 'whole'}") == 0
    part = tmp_path / "part"
    assert _run(config, *base, "trainer.total_training_steps=2", f"trainer.default_local_dir={part}") == 0
    last = part / "checkpoints" / "global_step_2"
    assert _run(config, *base, "trainer.total_training_steps=4", f"trainer.default_local_dir={part}",
                "trainer.resume_mode=resume_path", f"trainer.resume_from_path={last}") == 0
    whole = _per_step(tmp_path / "whole")
    assert [s[0] for s in whole] == [1, 2, 3, 4]
    assert _per_step(part) == whole
    assert len({s[1] for s in whole}) > 1 or len({s[2] for s in whole}) > 1  # the domain counts vary by step


def _explore(trainer):
    """The first step's experience (rollout, reward, query filters) of a fresh trainer."""
    from posttrain.data import collate_prompts

    rows = trainer.sampler.next_batch()
    prompts = collate_prompts([trainer.train_set[i] for i in rows], trainer.pad_id, uid_prefix="s1")
    return trainer.explore(prompts, PhaseTimer(trainer.observer.watch()), expected_version=trainer.roles.actor.version)


def _group_means(experience):
    groups: dict[str, list[float]] = {}
    for uid, score in zip(experience.batch.group_index, experience.scores.tolist()):
        groups.setdefault(uid, []).append(score)
    return {uid: sum(v) / len(v) for uid, v in groups.items()}, groups


def test_query_filter_thresholds_choose_which_groups_train(files):
    """mean_filter keeps the groups whose mean reward is strictly inside (threshold_down, threshold_up),
    std_filter those whose reward std is above std_threshold; another threshold trains other groups,
    the dropped groups are counted, and the update trains on the kept rows only."""
    root, model = files
    base = (f"data.train_files=[{root}/sort/train.parquet]", "reward.workers.sorting.worker_cls=tasks",
            f"reward.workers.sorting.tag_included=[{SORT}]", "rollout.n=4", "data.train_batch_size=8",
            "actor.ppo_mini_batch_size=8", "actor.ppo_micro_batch_size_per_gpu=32")
    plain = tiny_rl_trainer((root, model), *base, run="qf0")
    means, groups = _group_means(_explore(plain))
    plain.rewards.close()
    assert len(means) == 8 and len(set(means.values())) > 2  # the sort scorer's partial credit spreads the means
    ordered = sorted(set(means.values()))
    kept_sets = []
    for down in (ordered[0], ordered[len(ordered) // 2]):
        qf = ("reward.workers.sorting.query_filter_config.type=mean_filter",
              f"reward.workers.sorting.query_filter_config.filter_args={{threshold_down: {down}, threshold_up: 1.0}}")
        trainer = tiny_rl_trainer((root, model), *base, *qf, run=f"qf{down}")
        exp = _explore(trainer)
        expected = {uid for uid, m in means.items() if down < m < 1.0}
        kept = set(exp.batch.group_index)
        assert kept == expected and len(exp.batch) == 4 * len(expected)
        assert exp.reward_metrics["query_filter/dropped_groups"] == 8 - len(expected)
        assert exp.reward_metrics["query_filter/sorting/dropped"] == 8 - len(expected)
        metrics, train = trainer.learn(exp, 1, PhaseTimer(trainer.observer.watch()))
        assert len(train) == len(exp.batch) and "actor/pg_loss" in metrics
        trainer.rewards.close()
        kept_sets.append(kept)
    assert kept_sets[0] != kept_sets[1]
    # std_filter: a threshold above every group's spread drops them all, and the step learns nothing
    spreads = [torch.tensor(v).std().item() for v in groups.values()]
    qf = ("reward.workers.sorting.query_filter_config.type=std_filter",
          f"reward.workers.sorting.query_filter_config.filter_args={{std_threshold: {max(spreads)}}}")
    trainer = tiny_rl_trainer((root, model), *base, *qf, run="qf_std")
    exp = _explore(trainer)
    assert len(exp.batch) == 0 and exp.reward_metrics["query_filter/dropped_groups"] == 8
    metrics, _ = trainer.learn(exp, 1, PhaseTimer(trainer.observer.watch()))
    assert metrics == {"query_filter/skipped_update": 1.0}
    trainer.rewards.close()


def test_query_filter_arguments_are_checked(files, tmp_path, capsys):
    root, model = files
    config = tmp_path / "exp.yaml"
    config.write_text("{}\n")
    args = [f"model.path={model}", *_workers(root), "reward.workers.sums.query_filter_config.type=std_filter",
            "reward.workers.sums.query_filter_config.filter_args={threshold_up: 1.0}", "trainer.logger=[]"]
    assert main(["train", str(config), *args]) == 2
    assert "reward.workers.sums.query_filter_config.filter_args: std_filter does not read threshold_up; it takes: std_threshold" in capsys.readouterr().err


def test_an_llm_judge_worker_scores_its_tag_in_a_training_step(files):
    """The judge (here the tiny policy model itself) reads each arithmetic sample's question and
    response; its answers have no YES/NO, so under on_error=fixed every one is a counted failure
    scored failure_reward, while the sort worker scores the other rows as usual."""
    root, model = files
    judge = ("reward.workers.sums.worker_cls=llm_judge", f"reward.workers.sums.model_args={{model_name_or_path: {model}}}",
             "reward.workers.sums.generating_args={max_new_tokens: 3}", "reward.workers.sums.infer_batch_size=4",
             "reward.on_error=fixed", "reward.failure_reward=0.25")
    trainer = tiny_rl_trainer((root, model), *_workers(root), *judge, "data.train_batch_size=8", "actor.ppo_mini_batch_size=8",
                              "actor.ppo_micro_batch_size_per_gpu=16", run="judge")
    exp = _explore(trainer)
    batch = exp.batch
    arith = [i for i, tag in enumerate(batch.data_source) if tag == ARITH]
    questions = trainer.rewards.questions(batch, arith)
    assert arith and all(q.endswith("=") and "+" in q for q in questions.values())  # "45+30=": the question, no template
    m = exp.reward_metrics
    assert m["reward/sums/count"] == len(arith) and m["reward/sums/failures"] == len(arith)
    assert m["reward/sums/mean"] == pytest.approx(0.25) and m["reward/judge_parsed"] == 0.0
    assert m["reward/sorting/failures"] == 0
    trainer.rewards.close()


def test_roll_s_remote_code_sandbox_is_refused_by_name(files, tmp_path, capsys):
    root, model = files
    config = tmp_path / "exp.yaml"
    config.write_text("{}\n")
    args = [f"model.path={model}", *_workers(root), "reward.workers.sums.use_local=false", "trainer.logger=[]"]
    assert main(["train", str(config), *args]) == 2
    assert "reward.workers.sums.use_local: false sends programs to ROLL's own HTTP sandbox service" in capsys.readouterr().err


def test_a_ruler_judge_over_a_served_auxiliary_model_scores_its_tag_in_a_training_step(files):
    """The run serves the tiny model as auxiliary model "judge" while it scores; the ruler judge asks
    it about each arithmetic group; its greedy 4-character replies hold no list of scores, so each
    group's responses get the fallback score, counted, and the run goes on. Closing the reward stage
    stops the server and clears POSTTRAIN_AUX_JUDGE_URL."""
    import os

    root, model = files
    judge = ("reward.workers.sums.worker_cls=ruler_judge", f"reward.auxiliary_models.judge.model_path={model}",
             "reward.workers.sums.reward_kwargs={model: judge, max_tokens: 4, fallback_score: 0.25}")
    trainer = tiny_rl_trainer((root, model), *_workers(root), *judge, "data.train_batch_size=8", "actor.ppo_mini_batch_size=8",
                              "actor.ppo_micro_batch_size_per_gpu=16", run="ruler")
    assert os.environ["POSTTRAIN_AUX_JUDGE_URL"].startswith("http://127.0.0.1:")
    m = _explore(trainer).reward_metrics
    count = m["reward/sums/count"]
    assert count > 0 and m["reward/sums/failures"] == count and m["reward/sums/mean"] == pytest.approx(0.25)
    assert m["reward/sorting/failures"] == 0
    trainer.rewards.close()
    assert "POSTTRAIN_AUX_JUDGE_URL" not in os.environ


def test_a_missing_auxiliary_model_is_refused_before_training(files, tmp_path, capsys):
    root, model = files
    config = tmp_path / "exp.yaml"
    config.write_text("{}\n")
    args = [f"model.path={model}", *_workers(root), "reward.workers.sums.worker_cls=ruler_judge",
            "reward.workers.sums.reward_kwargs={model: judge}", f"reward.auxiliary_models.judge.model_path={tmp_path}/absent",
            "trainer.logger=[]"]
    assert main(["train", str(config), *args]) == 2
    assert "reward.auxiliary_models.judge.model_path" in capsys.readouterr().err
