"""`explorer`: the generating half of a decoupled run (Trinity-RFT's explorer).

In a decoupled run the explorer turns tasks into experiences with workflow runners (rollout + reward,
possibly multi-turn) and hands them to the trainer through `buffer.trainer_input.experience_buffer`;
`synchronizer` moves weights back. posttrain's explorer (posttrain.trainer.decoupled) rolls out whole
batches with one engine, so the workflow-runner keys (timeouts, retries, over-rollout) are refused
with the reason; `bench_on_latest_checkpoint` is read by `trainer.mode: bench`. The rollout engine
itself (Trinity's explorer.rollout_model) is configured in the `rollout` section; evaluation cadence
is trainer.test_freq / val_before_train (Trinity's eval_interval / eval_on_startup).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section

_TODO = "decoupled explorer/trainer issue"
# Why the workflow-runner keys are refused: there are no per-task workflows to time out or retry.
_RUNNERS = ("Trinity-RFT runs one workflow per task on a pool of runners; posttrain's explorer rolls out a whole batch "
            "in one generate call and scores it with reward.* (a reward function's own limit is reward.timeout_s)")
_OVER = ("leaving a batch's slowest tasks for later needs per-task workflow runners and a dynamic sync_style, "
         "neither of which posttrain has: every batch is generated whole")


@section
class OverRolloutConfig:
    """Start the next step before the slowest tasks of this one finish (needs a dynamic sync_style)."""

    ratio: float = param(0.0, doc="Fraction of a batch's tasks the explorer may leave unfinished; 0 waits for all.", ge=0, lt=1, todo=_OVER, refs=["trinity:explorer.over_rollout.ratio"])
    wait_after_min: float = param(30.0, doc="Seconds to keep waiting after the minimum number of tasks is done.", ge=0, todo=_OVER, refs=["trinity:explorer.over_rollout.wait_after_min"])


@section
class DynamicTimeoutConfig:
    """Per-task timeout derived from how long successful tasks take."""

    enable: bool = param(False, doc="Replace max_timeout by ratio x mean duration of successful tasks.", todo=_RUNNERS, refs=["trinity:explorer.dynamic_timeout.enable"])
    ratio: float = param(3.0, doc="Multiple of the mean successful-task duration allowed per task.", gt=0, todo=_RUNNERS, refs=["trinity:explorer.dynamic_timeout.ratio"])


@section
class ExplorerConfig:
    """Workflow runners that generate and score experiences."""

    runner_per_model: int = param(8, doc="Workflow runners served by each inference-engine instance.", ge=1, todo=_RUNNERS, refs=["trinity:explorer.runner_per_model"])
    max_timeout: float = param(900.0, doc="Seconds one workflow (rollout + reward) may run before it is retried.", gt=0, todo=_RUNNERS, refs=["trinity:explorer.max_timeout"])
    max_retry_times: int = param(2, doc="Retries of a workflow that failed or timed out.", ge=0, todo=_RUNNERS, refs=["trinity:explorer.max_retry_times"])
    env_vars: dict[str, Any] = param(factory=dict, doc="Environment variables set in every workflow runner.", todo=_RUNNERS, refs=["trinity:explorer.env_vars"])
    auxiliary_models: list[dict[str, Any]] = param(factory=list, doc="Extra inference models that workflows may call (model_path, tensor_parallel_size, ...).", todo="auxiliary models for workflows: Trinity's rubric and RULER judges are workflows that call these models over an OpenAI-compatible server (RULER ranks a whole group in one call), which posttrain does not run; a per-response judge on a local model is reward.workers.<name>.worker_cls: llm_judge", refs=["trinity:explorer.auxiliary_models"])
    over_rollout: OverRolloutConfig = param(factory=OverRolloutConfig, doc="Proceed without the slowest tasks.")
    dynamic_timeout: DynamicTimeoutConfig = param(factory=DynamicTimeoutConfig, doc="Adaptive per-task timeout.")
    bench_on_latest_checkpoint: bool = param(False, doc="trainer.mode bench: evaluate only the newest checkpoint instead of every one.", refs=["trinity:explorer.bench_on_latest_checkpoint"])
    runner_state_report_interval: float = param(0.0, doc="Seconds between workflow-runner status reports on the console; 0 disables.", ge=0, todo=_RUNNERS, refs=["trinity:explorer.runner_state_report_interval"])


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {
    "trinity:explorer.name": "Ray actor names are chosen by posttrain",
    "trinity:explorer.max_repeat_times_per_runner": "not implemented yet: splitting a task's repeats over workflow runners (decoupled explorer/trainer issue 16)",
}
