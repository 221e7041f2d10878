"""The RL stage's rollout tracer (`rollout.trace`): built once per stage on the rank that logs, fed
every training and validation rollout (posttrain.tracking.rollout_traces says what a trace holds)."""

from __future__ import annotations

from typing import Any

import torch

from posttrain.records import RolloutBatch
from posttrain.tracking import TrackedRun, Trackers
from posttrain.tracking.rollout_traces import MlflowRolloutTracer


def open_rollout_tracer(ctx: Any, trackers: Trackers, tokenizer: Any, writes: bool = True) -> MlflowRolloutTracer | None:
    """rank 0's tracer when rollout.trace.backend names one (the checks refuse any but mlflow), else None;
    attached to the mlflow tracker's run when trainer.logger names mlflow."""
    cfg = ctx.cfg
    trace = cfg.rollout.trace
    if trace.backend is None or not writes or not ctx.world.is_main:
        return None
    run = TrackedRun(ctx.run_dir, project=cfg.trainer.project_name, experiment=cfg.trainer.experiment_name,
                     options=dict(cfg.trainer.tracker_kwargs))
    run_id = next((t.run_id for t in trackers.trackers if type(t).__name__ == "MlflowTracker"), None)
    return MlflowRolloutTracer(run, token2text=trace.token2text, limit=trace.max_samples_per_step_per_worker,
                               tokenizer=tokenizer, run_id=run_id)


def trace_rollout(tracer: MlflowRolloutTracer | None, batch: RolloutBatch, scores: torch.Tensor, step: int, validate: bool) -> None:
    """Trace `batch` (its responses in order, `scores` (B,)) at global `step`; nothing without a tracer."""
    if tracer is None:
        return
    # padding out: left of each prompt, right of each response (the masks are 1.0 on real tokens)
    prompts = [ids[mask > 0].tolist() for ids, mask in zip(batch.prompt_ids, batch.prompt_mask)]
    responses = [ids[mask > 0].tolist() for ids, mask in zip(batch.response_ids, batch.response_mask)]
    tracer.trace(list(batch.group_index), prompts, responses, scores.tolist(), step, validate)


__all__ = ["open_rollout_tracer", "trace_rollout"]
