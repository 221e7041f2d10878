"""Validation moves no training random stream: a run that validates before training and after every
step trains exactly as one that validates only at the end (the rollout noise is keyed, the actor's
shuffle has its own generator, the validation sampler is its own)."""

from __future__ import annotations

import pytest

from rl_helpers import tiny_rl_files, tiny_rl_trainer

# Sampled validation with two samples per prompt draws as much noise as it can; shuffled mini-batches
# and two epochs make the actor's generator matter.
COMMON = (
    "trainer.total_training_steps=3", "rollout.val_kwargs.do_sample=true", "rollout.val_kwargs.temperature=1.0",
    "rollout.val_kwargs.n=2", "actor.shuffle=true", "actor.ppo_epochs=2", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=4",
    "actor.optim.lr=1e-2",
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("valrng"))


def _training_metrics(files, *overrides: str, run: str) -> dict[int, dict[str, float]]:
    """Per-step metrics of a 3-step run, less timings and validation results."""
    root, _ = files
    t = tiny_rl_trainer(files, f"data.val_files={root}/data/test.parquet", *COMMON, *overrides, run=run)
    logged: dict[int, dict[str, float]] = {}
    t._log = lambda metrics, step: logged.setdefault(step, {}).update(metrics)
    t.fit()
    return {
        step: {k: v for k, v in m.items() if not k.startswith(("timing/", "perf/", "val/"))}
        for step, m in logged.items() if step > 0
    }


def test_validating_every_step_leaves_training_unchanged(files):
    quiet = _training_metrics(files, "trainer.test_freq=0", run="val-at-end")
    busy = _training_metrics(files, "trainer.test_freq=1", "trainer.val_before_train=true", run="val-every-step")
    assert sorted(quiet) == sorted(busy) == [1, 2, 3]
    assert quiet[1]["actor/pg_loss"] != quiet[3]["actor/pg_loss"]  # the steps did train on different data
    assert busy == quiet
