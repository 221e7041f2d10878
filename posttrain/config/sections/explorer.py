"""`explorer`: the generating half of a decoupled run (Trinity-RFT's explorer).

In a decoupled run the explorer turns tasks into experiences and hands them to the trainer through
`buffer.trainer_input.experience_buffer`; `synchronizer` moves weights back. Trinity-RFT runs one
workflow per task on a pool of workflow runners (with per-task timeouts, retries and partial
batches); posttrain's explorer (posttrain.trainer.decoupled, or the synchronous loop) generates a
whole batch in one engine call and scores it with `reward.*`. Its prompt groups (an agentic stage's
env groups) are the counterpart of Trinity-RFT's tasks: `max_timeout` and `max_retry_times` bound
them and generate again the ones past the deadline, then leave them out (posttrain.trainer.deadlines;
posttrain.trainer.agentic); `over_rollout` trains a step on the groups that finished first and leaves
the rest out (posttrain.rollout.progress). The runner-pool keys are refused or dropped with their reason
(`UNSUPPORTED`, `NO_EFFECT`; posttrain.config.dialects.trinity_explorer translates the timeouts).
`env_vars` is honoured in every process that explores; `bench_on_latest_checkpoint` is read by
`trainer.mode: bench`. The rollout engine itself (Trinity's explorer.rollout_model) is configured in
the `rollout` section; evaluation cadence is trainer.test_freq / val_before_train (Trinity's
eval_interval / eval_on_startup).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.access import get_path, is_rl
from posttrain.config.fields import param, section

_E = "trinity:explorer"
_BATCH = "posttrain's explorer generates a whole batch in one engine call and scores it with reward.*; there is no per-task workflow"
_DYNAMIC = f"a per-task timeout from the mean duration of successful tasks: {_BATCH}; enable false is accepted"
_REPEATS = ("splitting a task's repeat_times over several workflow runners, whose experiences Trinity-RFT joins back into the "
            "task's group before any advantage is computed (scheduling only): posttrain generates a prompt's rollout.n responses "
            "in the same engine call as the rest of the batch")
_NO_RUNNERS = "posttrain has no workflow-runner pool: the explorer generates a batch's prompts together in one engine call"


@section
class OverRolloutConfig:
    """Train a step on the prompt groups that finished first (Trinity-RFT's over-rollout;
    posttrain.rollout.progress): the rest are cut and left out of the step."""

    ratio: float = param(0.0, doc="RL stages on the hf engine: the share of a training batch's prompt groups the step may go without. Once ceil(groups x (1 - ratio)) of an engine call's groups have every response finished, the engine waits wait_after_min seconds more and then ends the responses still being generated; their groups are left out of the step (not generated again, as Trinity-RFT cancels them), counted in rollout/over_rollout_groups. With several rollout ranks each rank counts its own share of the prompts. 0: wait for every group.", ge=0, lt=1, refs=[f"{_E}.over_rollout.ratio"])
    wait_after_min: float = param(30.0, doc="Seconds the engine keeps generating after the required groups (ratio) finished, before it ends the rest (read when ratio > 0).", gt=0, refs=[f"{_E}.over_rollout.wait_after_min"])


@section
class ExplorerConfig:
    """The process(es) that generate and score experiences."""

    env_vars: dict[str, Any] = param(factory=dict, doc="Environment variables set in every process that explores (generates and scores): the explorer process of a decoupled run, every process of a synchronous one; a trainer-only process (trainer.mode train, or the trainer of a decoupled run) does not get them.", refs=[f"{_E}.env_vars"])
    bench_on_latest_checkpoint: bool = param(False, doc="trainer.mode bench: evaluate only the newest checkpoint instead of every one.", refs=[f"{_E}.bench_on_latest_checkpoint"])
    proxy_port: int = param(8010, doc="trainer.mode serve: the TCP port of the endpoint (0: a free one, printed at start).", ge=0, le=65535, refs=[f"{_E}.proxy_port"])
    listen_address: str = param("127.0.0.1", doc="trainer.mode serve: the address the endpoint listens on (it has no authentication: 0.0.0.0 opens it to the network).", refs=[f"{_E}.listen_address"])
    service_status_check_interval: float = param(60.0, doc="trainer.mode serve: seconds between looks for a newer checkpoint of the run, whose weights the endpoint then serves.", gt=0, refs=[f"{_E}.service_status_check_interval"])
    max_timeout: float | None = param(None, doc="RL stages: seconds a training batch's prompt groups may take, all starting together (Trinity-RFT's per-task timeout, its task being one prompt's rollout.n responses): generating and scoring a single-turn or tool-calling group (the hf engine stops decoding at the deadline), playing an agentic stage's env group (checked between turns; one env call: env.step_timeout). A group past it is generated again (max_retry_times) or left out of the step, counted in rollout/timed_out_groups (agentic: env/timed_out_groups). Validation is not bounded. Null: no limit.", gt=0)
    max_retry_times: int = param(0, doc="RL stages with max_timeout: how often a prompt group (env group) past the deadline is generated again, with new sampling noise and a deadline of its own, before it is left out of the step; counted in rollout/retried_groups (agentic: env/retried_groups).", ge=0)
    over_rollout: OverRolloutConfig = param(factory=OverRolloutConfig, doc="Train a step on the prompt groups that finished first (Trinity-RFT's over-rollout).")
    task_rewards_file: str | None = param(None, doc="JSON-lines file that every explored task (a training prompt with its rollout.n responses) appends one line to after it is scored, in every mode that explores: {model_version: the weights' version, rewards: the responses' final scores, question: the prompt cell as the data holds it, truth: the ground truth}; relative to the working directory. BOTS collects a reference model's pass rates so (trainer.mode explore; its ref_eval_collect.py reads the file). Null: no file.", refs=[])
    db_url: str | None = param(None, doc="trainer.mode serve: the SQLite file (a path or sqlite:/// URL) recording every served completion until its feedback and commit; null: <stage dir>/serve/proxy_history.sqlite.", refs=[f"{_E}.db_url"])


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {
    f"{_E}.name": "Ray actor names are chosen by posttrain",
    f"{_E}.dynamic_timeout.enable": _DYNAMIC,
}
# Reference keys any value of which changes nothing in posttrain (the loaders drop them with the reason).
NO_EFFECT: dict[str, str] = {
    f"{_E}.max_repeat_times_per_runner": _REPEATS,
    f"{_E}.runner_per_model": f"{_NO_RUNNERS}, which is what any number of runners per engine converges to",
    f"{_E}.runner_state_report_interval": f"display only (runner status lines on the console); {_NO_RUNNERS}, and a decoupled explorer's state is written to the buffer and named in timeouts",
    f"{_E}.dynamic_timeout.ratio": "read only when dynamic_timeout.enable is true, which is refused",
    f"{_E}.runner_num": "deprecated in Trinity-RFT, which only warns that runner_per_model replaced it, and read by nothing else",
    f"{_E}.concurrent_mode": (f"how a Trinity-RFT runner runs a task's repeats (one by one, as coroutines or in threads): scheduling, "
                              f"not what is sampled; {_NO_RUNNERS}"),
    "trinity:monitor.detailed_stats": "more statistics of each evaluation metric in Trinity-RFT's logs (display only)",
    "trinity:monitor.cache_dir": "Trinity-RFT overwrites it with <checkpoint_job_dir>/monitor whatever the file says; posttrain's tracker files go under trainer.default_local_dir",
    "trinity:log.save_dir": "Trinity-RFT overwrites it with <checkpoint_job_dir>/log whatever the file says; posttrain's worker logs go where log.* puts them",
    "trinity:synchronizer.wait_for_checkpoint": "declared in Trinity-RFT's synchronizer config and read by nothing in Trinity-RFT",
    f"{_E}.min_running_model_num": ("Trinity-RFT's serve mode syncs an engine only while more than this many others keep serving; "
                                    "posttrain serves from one engine and copies a new checkpoint's weights into it between two "
                                    "engine calls (a request arriving meanwhile waits for the copy)"),
}


def check_explorer_timeouts(cfg: Any) -> list[str]:
    """max_timeout bounds an RL stage's prompt groups (env groups); max_retry_times generates the late ones again."""
    timeout, retries = get_path(cfg, "explorer.max_timeout", None), get_path(cfg, "explorer.max_retry_times", 0)
    problems = []
    if timeout is not None:
        where = f"explorer.max_timeout ({timeout:g} s)"
        mode = get_path(cfg, "trainer.mode", "both")
        if not is_rl(cfg):
            problems.append(f"{where}: bounds the prompt groups an RL stage generates; this stage generates none; remove it")
        elif mode in ("bench", "serve"):
            problems.append(f"{where}: bounds the training batches' prompt groups, and trainer.mode {mode} generates none "
                            "(validation is not bounded); remove it")
        elif get_path(cfg, "rollout.agent.function", None) is not None:
            problems.append(f"{where}: rollout.agent.function runs the user's agent, whose episodes posttrain cannot stop and "
                            "replay group by group; bound the agent's own calls instead, and remove max_timeout")
        elif get_path(cfg, "reward.launch_reward_fn_async", False):
            problems.append(f"{where}: the deadline covers a group's scoring, which reward.launch_reward_fn_async runs after the "
                            "batch has left the explorer, too late to generate a group again; turn one of them off")
    problems += _over_rollout_problems(cfg)
    if retries and timeout is None:
        problems.append(f"explorer.max_retry_times ({retries}): generates again the prompt groups that ran past explorer.max_timeout, "
                        "which is not set; set max_timeout or remove max_retry_times")
    return problems


def _over_rollout_problems(cfg: Any) -> list[str]:
    """over_rollout cuts the groups of a single-turn RL stage's training batches inside the engine's
    decode loop; the stages and paths that generate otherwise cannot honour it."""
    ratio = get_path(cfg, "explorer.over_rollout.ratio", 0.0)
    if not ratio:
        return []
    where = f"explorer.over_rollout.ratio ({ratio:g})"
    mode = get_path(cfg, "trainer.mode", "both")
    why = [(not is_rl(cfg), "it leaves out the unfinished prompt groups of an RL stage's training batches; this stage generates none"),
           (mode in ("bench", "serve"), f"trainer.mode {mode} generates no training batches"),
           (bool(get_path(cfg, "env.train_env_manager.tags", None)),
            "an agentic stage plays env groups turn by turn, whose turns posttrain cannot stop at a time set by the other groups' progress"),
           (get_path(cfg, "rollout.agent.function", None) is not None,
            "rollout.agent.function runs the user's agent, whose calls posttrain cannot stop group by group"),
           (bool(get_path(cfg, "rollout.multi_turn.enable", False)),
            "tool calling generates a conversation in several engine calls, each counting only its own turn's groups"),
           (bool(get_path(cfg, "reward.launch_reward_fn_async", False)),
            "reward.launch_reward_fn_async scores the batch as the engine returned it, before the cut groups could be left out")]
    return [f"{where}: {reason}; remove it" for on, reason in why if on][:1]


def explorer_env(cfg: Any, half: str | None) -> dict[str, str]:
    """The variables `explorer.env_vars` sets in a process running `half` ("explorer", "trainer" or
    None: both in step); a trainer-only process gets none."""
    if half == "trainer":
        return {}
    return {str(k): str(v) for k, v in dict(cfg.explorer.env_vars).items()}


def check_task_rewards_file(cfg: Any) -> list[str]:
    """explorer.task_rewards_file is written where the explorer scores prompt rows of posttrain's own
    dataset, in place (not an agentic stage, an agent function, a custom dataset or background scoring)."""
    if get_path(cfg, "explorer.task_rewards_file", None) is None:
        return []
    key = "explorer.task_rewards_file"
    if not is_rl(cfg):
        return [f"{key}: it logs the rewards of explored tasks; a stage of algorithm.kind {get_path(cfg, 'algorithm.kind')} explores none"]
    why = [(get_path(cfg, "env.train_env_manager.tags", None), "an agentic stage plays env groups, not prompt rows"),
           (get_path(cfg, "rollout.agent.function", None), "rollout.agent's function scores its own episodes"),
           (get_path(cfg, "data.custom_cls.path", None), "a data.custom_cls dataset holds no prompt cell to log"),
           (get_path(cfg, "reward.launch_reward_fn_async", None), "reward.launch_reward_fn_async scores after the explorer hands the batch on")]
    return [f"{key}: {reason}; drop {key}" for on, reason in why if on][:1]
