"""`trainer.mode: bench`: every saved checkpoint of a run validated, one table row each."""

from __future__ import annotations

import csv
import json

import pytest

from posttrain.config.load import load_config
from posttrain.trainer.bench import BenchError, write_table
from posttrain.trainer.run import run
from rl_helpers import BASE, tiny_rl_files


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 3-step run that saved a checkpoint and validated after every step."""
    root, model = tiny_rl_files(tmp_path_factory.mktemp("bench"))
    overrides = [
        f"model.path={model}", f"data.train_files={root}/data/train.parquet", f"data.val_files={root}/data/test.parquet",
        *BASE, "trainer.total_training_steps=3", "trainer.save_freq=1", "trainer.test_freq=1", "actor.optim.lr=0.02",
        f"trainer.default_local_dir={root}/run", "trainer.logger=[jsonl]", "trainer.log_val_generations=4",
    ]
    run(load_config(None, overrides))
    return root, overrides


def test_bench_writes_a_table_for_three_checkpoints(trained):
    root, overrides = trained
    before = (root / "run" / "metrics.jsonl").read_text()
    [result] = run(load_config(None, [*overrides, "trainer.mode=bench"]))
    rows = list(csv.DictReader((root / "run" / "bench" / "bench.csv").open()))
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    score = next(k for k in rows[0] if k.startswith("val/") and "score/mean@" in k)
    # each checkpoint scores what the training run's own validation of that step scored
    logged = {int(m["step"]): m[score] for m in map(json.loads, before.splitlines()) if score in m}
    assert sorted(logged) == [0, 1, 2, 3]  # val_before_train too
    assert [float(r[score]) for r in rows] == pytest.approx([logged[s] for s in (1, 2, 3)], abs=1e-4)
    assert result.last_metrics["step"] == 3.0 and result.last_metrics[score] == pytest.approx(float(rows[-1][score]), abs=1e-4)
    # and generates what it generated then: the responses differ between checkpoints (the weights moved)
    def responses(path):
        out = {}
        for line in path.read_text().splitlines():
            row = json.loads(line)
            out.setdefault(row["step"], []).append(row["response"])
        return out
    theirs, ours = responses(root / "run" / "val_generations.jsonl"), responses(root / "run" / "bench" / "val_generations.jsonl")
    assert ours == {s: theirs[s] for s in (1, 2, 3)} and ours[1] != ours[3]
    md = (root / "run" / "bench" / "bench.md").read_text()
    assert md.startswith("| step | ") and md.count("\n") == 2 + 3
    assert (root / "run" / "metrics.jsonl").read_text() == before  # the run's own files are untouched
    latest = run(load_config(None, [*overrides, "trainer.mode=bench", "explorer.bench_on_latest_checkpoint=true"]))
    rows = list(csv.DictReader((root / "run" / "bench" / "bench.csv").open()))
    assert [r["step"] for r in rows] == ["3"] and latest[0].last_metrics["step"] == 3.0


def test_bench_of_a_run_without_checkpoints_says_so(trained, tmp_path):
    _, overrides = trained
    with pytest.raises(BenchError, match="no complete checkpoint under .*save_freq > 0"):
        run(load_config(None, [*overrides, "trainer.mode=bench", f"trainer.default_local_dir={tmp_path}/empty"]))


def test_table_lists_every_metric_any_row_has(tmp_path):
    md = write_table([{"step": 1.0, "val/a": 0.5}, {"step": 2.0, "val/a": 0.75, "val/b": 1.0}], tmp_path)
    assert md.splitlines() == ["| step | val/a | val/b |", "|---|---|---|", "| 1 | 0.5000 |  |", "| 2 | 0.7500 | 1.0000 |"]
    assert (tmp_path / "bench.csv").read_text().splitlines() == ["step,val/a,val/b", "1,0.5000,", "2,0.7500,1.0000"]
