"""`trainer.mode: bench`: evaluate every saved checkpoint of a run on its validation data (Trinity-RFT's
bench mode) and write one table.

The stage is read, not trained: the rollout engine starts from `model.path` (the architecture), and
for each complete `global_step_N` checkpoint under the stage's checkpoint directory (oldest first;
only the newest with `explorer.bench_on_latest_checkpoint`) it loads that checkpoint's actor weights
and runs the stage's validation (`data.val_files`, `rollout.val_kwargs`, the reward function),
exactly as a training run validates. One row per checkpoint, one column per validation metric:

    <stage dir>/bench/bench.csv     the table as CSV
    <stage dir>/bench/bench.md      the same as a markdown table, also printed on the console

With `rollout.name: external` (posttrain.rollout.external_engine) the one model evaluated is the
OpenAI-compatible endpoint of `rollout.external`, Trinity-RFT's `model.external_model`: no checkpoint
is read and the table has one row, step 0.

The stage's own files (config.yaml, metrics.jsonl, checkpoints) are left as they are; validation
dumps and generations of the bench go to `<stage dir>/bench/`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

from posttrain.checkpoint.layout import step_dirs
from posttrain.checkpoint.load import load_weights
from posttrain.checkpoint.manifest import verify_checkpoint
from posttrain.checkpoint.sharded import is_dcp_role
from posttrain.errors import UserError
from posttrain.models.lora import is_adapter_dir
from posttrain.trainer.stage import StageContext, StageResult


class BenchError(UserError):
    """Nothing to evaluate, or a checkpoint bench cannot read."""


def bench_checkpoints(root: Path, latest_only: bool) -> list[tuple[int, Path]]:
    """(step, actor directory) of every intact checkpoint under `root`, oldest first; damaged or
    unfinished ones are skipped with a line saying why."""
    found = []
    for step, path in step_dirs(root):
        verdict = verify_checkpoint(path)
        if not verdict.intact:
            print(f"[bench] skipping {path.name}: {verdict.damage[0]}: {verdict.damage[1]}", flush=True)
            continue
        actor = path / "actor"
        if is_dcp_role(actor) or is_adapter_dir(actor):
            raise BenchError(
                f"{actor}: a sharded or LoRA checkpoint; bench reads whole-model checkpoints: export each with "
                f"`posttrain export {path} OUT --merge` and bench the exported models instead"
            )
        found.append((step, actor))
    if not found:
        raise BenchError(f"trainer.mode=bench: no complete checkpoint under {root}; train with trainer.save_freq > 0 first (same run directory)")
    return found[-1:] if latest_only else found


def run_bench(ctx: StageContext) -> StageResult:
    """Validate every checkpoint of the stage and write the table; returns the last row's metrics."""
    from posttrain.trainer.rl import RLTrainer

    cfg = ctx.cfg  # an RL stage with data.val_files (posttrain.trainer.preflight checked it)
    external = cfg.rollout.name == "external"  # the endpoint is the one model to evaluate, as step 0
    checkpoints = [(0, None)] if external else bench_checkpoints(ctx.checkpoint_root, cfg.explorer.bench_on_latest_checkpoint)
    out = ctx.run_dir / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "val_generations.jsonl").unlink(missing_ok=True)  # a bench's own output: a rerun replaces it
    bench_ctx = dataclasses.replace(ctx, run_dir=out, resume=None, checkpoint_dir=ctx.checkpoint_root)
    evaluator = RLTrainer(bench_ctx, halves="explorer")  # the engine and the reward; writes no stage files
    engine = evaluator.roles.engine
    rows: list[dict[str, float]] = []
    try:
        for step, actor in checkpoints:
            if actor is not None:
                load_weights(engine.model, actor)
                engine.update_weights(engine.model, step)  # the weights are in place: mark their version
            metrics = evaluator.validate(step)
            rows.append({"step": float(step), **metrics})
            label = f"external model {cfg.rollout.external.model_name}" if external else f"global_step_{step}"
            print(f"[bench] {label}: " + ", ".join(f"{k}={v:.4f}" for k, v in metrics.items() if k.endswith("mean@1") or "/score/" in k), flush=True)
    finally:
        if evaluator.rewards is not None:
            evaluator.rewards.close()
        evaluator.trackers.close()
    table = write_table(rows, out)
    print(table, flush=True)
    return StageResult(final_model=Path(ctx.model_path), last_metrics=rows[-1], steps=0)


def write_table(rows: list[dict[str, float]], out: Path) -> str:
    """Write bench.csv and bench.md (a column per metric any row has); returns the markdown."""
    columns = ["step"] + sorted({k for r in rows for k in r} - {"step"})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([int(r["step"])] + [_cell(r.get(c)) for c in columns[1:]])
    (out / "bench.csv").write_text(buffer.getvalue(), encoding="utf-8")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join([str(int(r["step"]))] + [_cell(r.get(c)) for c in columns[1:]]) + " |" for r in rows]
    markdown = "\n".join(lines) + "\n"
    (out / "bench.md").write_text(markdown, encoding="utf-8")
    return markdown


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"
