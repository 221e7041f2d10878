"""The run report and the end-of-run summary, from a synthetic run directory (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_run_helpers import posttrain

from posttrain.report import RunDirError, load_run, summary_lines, write_report
from posttrain.report.page import curves, time_breakdown
from posttrain.report.svg import line_chart

ACC = "val/posttrain/arithmetic/acc/mean@1"
ACC4 = "val/posttrain/arithmetic/acc/mean@4"


def _stage(root: Path, name: str, config: dict, rows: list[dict], generations: list[dict] = ()) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if generations:
        (d / "val_generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in generations))


def _sampled(val_only: bool = True) -> dict:
    return {"algorithm": {"kind": "rl"}, "trainer": {"val_only": val_only},
            "rollout": {"val_kwargs": {"do_sample": True, "temperature": 1.0, "n": 4}}}


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """sft (steps 1-3) -> sampled eval -> rl (val at 3, 5, 7; trains steps 4-7) -> sampled eval."""
    root = tmp_path / "run"
    _stage(root, "sft", {"algorithm": {"kind": "sft"}},
           [{"step": s, "sft/loss": 2.0 / s, "actor/grad_norm": 1.0, "timing/step_s": 0.1} for s in (1, 2, 3)])
    _stage(root, "before", _sampled(), [{"step": 3, ACC4: 0.10, "val/score/mean": 0.3}])
    rl_rows = [{"step": 3, ACC: 0.275, "val/score/mean": 0.4}]
    for s in (4, 5, 6, 7):
        row = {"step": s, "critic/score/mean": 0.1 * s, "actor/entropy": 1.0 / s, "actor/ppo_kl": 0.01,
               "response_length/mean": 3.0, "actor/grad_norm": float("nan") if s == 6 else 0.5,
               "perf/tokens_per_s": 7000.0, "timing/step_s": 0.5}
        if s in (5, 7):
            row.update({ACC: 0.4 if s == 5 else 0.63, "val/score/mean": 0.7})
        rl_rows.append(row)
    gens = [{"step": 0, "prompt": "<|im_start|>user\n12+7=<|im_end|>\n<|im_start|>assistant\n", "response": "18<|im_end|>", "score": 0.25},
            {"step": 4, "prompt": "<|im_start|>user\n12+7=<|im_end|>\n<|im_start|>assistant\n", "response": "19<|im_end|>", "score": 1.0}]
    _stage(root, "rl", {"algorithm": {"kind": "rl"}, "trainer": {"val_only": False}}, rl_rows, gens)
    _stage(root, "after", _sampled(), [{"step": 7, ACC4: 0.21, "val/score/mean": 0.5}])
    # an evaluation stage logs at the same step as the stage after it: its config.yaml is older
    import os
    for i, name in enumerate(("sft", "before", "rl", "after")):
        os.utime(root / name / "config.yaml", (1000 + i, 1000 + i))
    return root


def test_stages_are_read_in_run_order(run_dir):
    assert [s.name for s in load_run(run_dir)] == ["sft", "before", "rl", "after"]


def test_summary_lines_greedy_then_sampled(run_dir):
    assert summary_lines(load_run(run_dir)) == [
        "accuracy before RL: 27.5%",
        "accuracy after RL: 63.0%",
        "sampled accuracy before RL (temperature 1, 4 per prompt): 10.0%",
        "sampled accuracy after RL (temperature 1, 4 per prompt): 21.0%",
    ]


def test_summary_without_acc_reports_the_score(tmp_path):
    _stage(tmp_path, "main", {"algorithm": {"kind": "rl"}},
           [{"step": 0, "val/score/mean": 0.25}, {"step": 1, "val/score/mean": 0.5, "timing/step_s": 1.0}])
    assert summary_lines(load_run(tmp_path / "main")) == [
        "validation score before RL: 0.250", "validation score after RL: 0.500"]


def test_dpo_stage_summary_first_and_last_validation(tmp_path):
    rows = [{"step": 0, "val/dpo/accuracy": 0.0, "val/dpo/margin": 0.0},
            {"step": 1, "dpo/loss": 0.6, "timing/step_s": 0.1},
            {"step": 2, "dpo/loss": 0.5, "timing/step_s": 0.1, "val/dpo/accuracy": 0.875, "val/dpo/margin": 0.4321}]
    _stage(tmp_path, "main", {"algorithm": {"kind": "dpo"}}, rows)
    assert summary_lines(load_run(tmp_path / "main")) == [
        "preference accuracy before DPO: 0.0% (mean reward margin 0.000)",
        "preference accuracy after DPO: 87.5% (mean reward margin 0.432)",
    ]


def test_no_rl_stage_no_summary(run_dir):
    assert summary_lines([s for s in load_run(run_dir) if s.name == "sft"]) == []


def test_report_has_a_chart_per_metric_and_the_samples(run_dir):
    titles = [title for title, _ in curves(load_run(run_dir))]
    assert titles[:2] == ["training reward (mean score)", f"validation accuracy: {ACC}"]
    for title in ("entropy", "grad norm", "tokens per second", "SFT loss", "KL, current vs rollout policy",
                  "response length (mean tokens)"):
        assert title in titles
    grad = dict(curves(load_run(run_dir)))["grad norm"]
    assert [name for name, _ in grad] == ["sft", "rl"]  # one line per stage that logged it
    assert [x for x, _ in grad[1][1]] == [4.0, 5.0, 7.0]  # the NaN at step 6 is left out

    path = write_report(run_dir)
    assert path == run_dir / "report.html"
    html = path.read_text()
    assert html.count("<svg") == len(titles)
    assert "accuracy before RL: 27.5%" in html and "accuracy after RL: 63.0%" in html
    assert "<td>12+7=</td>" in html  # the user turn of the chat prompt
    assert ">18</td>" in html and ">19</td>" in html  # first and last validation side by side
    assert "<script" not in html and "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_chart_scales_points_into_the_box():
    svg = line_chart("t", [("main", [(0.0, 0.0), (10.0, 1.0)])])
    assert 'points="56.0,180.0 370.0,24.0"' in svg  # (x0, y0) bottom left, (x1, y1) top right
    assert line_chart("t", [("main", [(0.0, float("nan"))])]) == ""


def test_torn_last_line_is_skipped_and_a_bad_middle_line_is_named(tmp_path):
    _stage(tmp_path, "main", {}, [{"step": 1, "val/score/mean": 0.5}])
    metrics = tmp_path / "main" / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 2, "val/sc')
    assert [r["step"] for r in load_run(tmp_path / "main")[0].metrics] == [1]
    metrics.write_text('{"step": 1\n{"step": 2}\n')
    with pytest.raises(RunDirError, match="metrics.jsonl: line 1 is not JSON"):
        load_run(tmp_path / "main")


def test_cli_report_and_wrong_run_dirs(run_dir, tmp_path):
    def cli(*args):  # the command line, run in this process (cli_run_helpers.posttrain)
        return posttrain("report", *args, cwd=tmp_path)

    out = cli(str(run_dir), "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    assert "accuracy after RL: 63.0%" in out.stdout and (tmp_path / "r.html").is_file()
    missing = cli(str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no such directory" in missing.stderr and "Traceback" not in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = cli(str(tmp_path / "empty"))
    assert empty.returncode == 2 and "no metrics.jsonl" in empty.stderr


def test_each_data_source_gets_its_validation_score_curve_and_idle_time_is_not_a_phase(tmp_path):
    """A multi-domain run shows each domain's validation score; a decoupled run's waits are left
    out of the time breakdown (they overlap the other process's phases)."""
    rows = [{"step": s, "val/sort/score/mean@1": 0.1 * s, "val/arith/score/mean@1": 0.2 * s, "timing/step_s": 1.0,
             "timing/gen_s": 0.25, "timing/update_actor_s": 0.5, "timing/idle_trainer_s": 0.75} for s in (1, 2)]
    _stage(tmp_path, "rl", {"algorithm": {"kind": "rl"}, "trainer": {"val_only": False}}, rows)
    stages = load_run(tmp_path)
    charts = dict(curves(stages))
    by_source = {t: series for t, series in charts.items() if t.startswith("validation score by data source: ")}
    assert sorted(by_source) == ["validation score by data source: val/arith/score/mean@1",
                                 "validation score by data source: val/sort/score/mean@1"]
    assert by_source["validation score by data source: val/sort/score/mean@1"] == [("rl", [(1.0, 0.1), (2.0, 0.2)])]
    bars = time_breakdown(stages[0])
    assert "update_actor" in bars and "gen" in bars and "idle" not in bars
