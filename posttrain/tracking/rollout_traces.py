"""Rollout traces in MLflow (`rollout.trace`, verl's ``actor_rollout_ref.rollout.trace``).

With ``backend: mlflow`` every response of a training or validation rollout becomes one MLflow trace
(``MlflowClient.start_trace`` / ``end_trace``) named ``rollout``, tagged as verl tags its agent-loop
traces: ``step``, ``sample_index`` (the prompt's place in the rollout), ``rollout_n`` (the response's
place in its prompt's group), ``validate`` and ``experiment_name``. The trace's inputs are the
prompt's token ids, its outputs the response's token ids and score; ``token2text`` adds both as
text. ``max_samples_per_step_per_worker`` traces that many prompts of a rollout, drawn at random
(seeded by the step), each with all its responses.

Where: the store and experiment of posttrain's mlflow tracker (``trainer.tracker_kwargs.uri``, else
``MLFLOW_TRACKING_URI``, else ``file:<run dir>/mlruns``; the experiment is the project), and the
traces are attached to that tracker's run when ``trainer.logger`` names mlflow. A multi-turn
response is one trace (the whole conversation's tokens), where verl adds a span per engine call and
tool call inside it. Rank 0 traces; the others hold no tracer. MLflow exports traces through its
process-wide tracking URI and trace destination, which the tracer sets (as verl's does).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any, Sequence

from posttrain.errors import ConfigError
from posttrain.tracking.base import TrackedRun
from posttrain.tracking.options import PACKAGES, installed


def check_rollout_tracer(backend: str | None) -> None:
    """Refuse ``rollout.trace.backend: mlflow`` where mlflow is not installed, before the run starts."""
    if backend == "mlflow" and not installed("mlflow"):
        raise ConfigError(f"rollout.trace.backend=mlflow: the mlflow package is not installed: {PACKAGES['mlflow'][1]}")


@dataclass(frozen=True)
class RolloutTrace:
    """One response as a trace: where it sits in the rollout, its tokens (padding removed) and score."""

    sample_index: int
    rollout_n: int
    prompt_ids: list[int]
    response_ids: list[int]
    score: float


def rollout_traces(groups: Sequence[str], prompt_ids: list[list[int]], response_ids: list[list[int]],
                   scores: Sequence[float], limit: int | None, seed: int) -> list[RolloutTrace]:
    """The responses to trace, rows in batch order: every one, or all of `limit` prompts drawn at random.

    >>> [(t.sample_index, t.rollout_n) for t in rollout_traces(["a", "a", "b"], [[1]] * 3, [[2]] * 3, [1.0, 0.0, 1.0], None, 0)]
    [(0, 0), (0, 1), (1, 0)]
    """
    order = list(dict.fromkeys(groups))  # prompts in order of their first response
    chosen = set(order) if limit is None or limit >= len(order) else set(random.Random(seed).sample(order, limit))
    seen: dict[str, int] = {}
    out = []
    for uid, prompt, response, score in zip(groups, prompt_ids, response_ids, scores):
        n = seen[uid] = seen.get(uid, -1) + 1  # the response's place in its group
        if uid in chosen:
            out.append(RolloutTrace(order.index(uid), n, prompt, response, float(score)))
    return out


class MlflowRolloutTracer:
    """Writes `RolloutTrace` records as MLflow traces (see the module docstring)."""

    def __init__(self, run: TrackedRun, *, token2text: bool, limit: int | None, tokenizer: Any, run_id: str | None = None):
        from mlflow.tracking import MlflowClient

        from posttrain.tracking.mlflow_tracker import tracking_uri

        uri = tracking_uri(run)
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # as the mlflow tracker (its docstring)
        self.client = MlflowClient(tracking_uri=uri)
        project = run.options.get("project", run.project)
        found = self.client.get_experiment_by_name(project)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(project)
        # MLflow exports finished traces through its process-wide tracing destination and tracking URI,
        # not the client's: point both here (verl's tracer sets the same globals)
        import mlflow
        from mlflow.entities.trace_location import MlflowExperimentLocation

        mlflow.set_tracking_uri(uri)
        mlflow.tracing.set_destination(MlflowExperimentLocation(self.experiment_id))
        self._flush = mlflow.flush_trace_async_logging
        self.run_id, self.experiment = run_id, run.experiment
        self.token2text, self.limit, self.tokenizer = token2text, limit, tokenizer

    def trace(self, groups: Sequence[str], prompt_ids: list[list[int]], response_ids: list[list[int]],
              scores: Sequence[float], step: int, validate: bool) -> int:
        """Trace one rollout's responses; returns how many traces were written."""
        traces = rollout_traces(groups, prompt_ids, response_ids, scores, self.limit, seed=step + (1 << 20) * validate)
        for t in traces:
            tags = {"step": str(step), "sample_index": str(t.sample_index), "rollout_n": str(t.rollout_n),
                    "validate": str(validate), "experiment_name": self.experiment}
            inputs: dict[str, Any] = {"prompt_ids": t.prompt_ids}
            outputs: dict[str, Any] = {"response_ids": t.response_ids, "score": t.score}
            if self.token2text:
                inputs["prompt_text"] = self.tokenizer.decode(t.prompt_ids)
                outputs["response_text"] = self.tokenizer.decode(t.response_ids)
            span = self.client.start_trace("rollout", inputs=inputs, tags=tags, experiment_id=self.experiment_id, run_id=self.run_id)
            self.client.end_trace(span.trace_id, outputs=outputs)
        self._flush()  # MLflow exports in the background: the rollout's traces are stored when it returns
        return len(traces)


__all__ = ["MlflowRolloutTracer", "RolloutTrace", "check_rollout_tracer", "rollout_traces"]
