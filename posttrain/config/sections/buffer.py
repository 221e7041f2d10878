"""`buffer`: tasks in, experiences out (Trinity-RFT's buffer of a decoupled run).

For the synchronous loop a taskset is what the `data` section describes: `taskset.path` plays
data.train_files, `eval_tasksets` data.val_files, `repeat_times` rollout.n, Trinity's buffer.batch_size
data.train_batch_size, and the column keys under `format` the data.* fields of the same names; the
Trinity dialect translates them there (posttrain.config.dialects.trinity), as it translates the
experience buffer of an SFT/DPO run (files and format keys: posttrain.config.dialects.trinity_experience).
The experience buffer here is the decoupled RL run's: storage, capacity, timeouts and replay.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section

_EB = "trinity:buffer.trainer_input.experience_buffer"


#: priority_fn -> its arguments and their defaults (Trinity-RFT's default_config of each).
PRIORITY_FNS: dict[str, dict[str, float]] = {
    "linear_decay": {"decay": 2.0},
    "decay_limit_randomization": {"decay": 2.0, "use_count_limit": 3, "sigma": 0.0},
}
#: Trinity-RFT's older name of decay_limit_randomization.
PRIORITY_FN_ALIASES = {"linear_decay_use_count_control_randomization": "decay_limit_randomization"}


def priority_args(fn: str, given: dict[str, Any]) -> dict[str, float]:
    """The priority function's arguments: its defaults, overridden by `given` (unknown names raise)."""
    fn = PRIORITY_FN_ALIASES.get(fn, fn)
    if fn not in PRIORITY_FNS:
        raise ValueError(f"unknown priority_fn {fn!r}; known: {', '.join(PRIORITY_FNS)}")
    unknown = sorted(set(given) - set(PRIORITY_FNS[fn]))
    if unknown:
        raise ValueError(f"priority_fn {fn} has no argument {', '.join(unknown)} (its arguments: {', '.join(PRIORITY_FNS[fn])})")
    return {**PRIORITY_FNS[fn], **given}


@section
class ReplayBufferConfig:
    """Reading the buffer as a priority queue with reuse (posttrain.buffer.replay; Trinity-RFT's replay buffer)."""

    enable: bool = param(False, doc="Read the highest-priority stored batch each step instead of batch s at step s, and (with reuse_cooldown_time) read batches again.", refs=[f"{_EB}.replay_buffer.enable", f"{_EB}.use_priority_queue"])
    reuse_cooldown_time: float | None = param(None, doc="Seconds after its last read before a batch may be read again; null never reuses (a priority queue of fresh batches).", ge=0, refs=[f"{_EB}.replay_buffer.reuse_cooldown_time", f"{_EB}.reuse_cooldown_time"])
    priority_fn: str = param("linear_decay", doc="Priority of a stored batch: linear_decay (policy step - decay x use count) or decay_limit_randomization (the same plus Gaussian noise of std sigma, retired after use_count_limit reads); linear_decay_use_count_control_randomization is the older name of the second.", choices=["linear_decay", "decay_limit_randomization", "linear_decay_use_count_control_randomization"], refs=[f"{_EB}.replay_buffer.priority_fn", f"{_EB}.priority_fn"])
    priority_fn_args: dict[str, Any] = param(factory=dict, doc="Arguments of the priority function: decay (2.0); decay_limit_randomization also use_count_limit (3; 0: no limit) and sigma (0.0).", refs=[f"{_EB}.replay_buffer.priority_fn_args", f"{_EB}.priority_fn_args"])


@section
class ExperienceBufferConfig:
    """Where the explorer writes experiences and the trainer reads them."""

    name: str = param("experience_buffer", doc="Name of the buffer: its file is <stage dir>/<name>.sqlite unless path is set.", refs=[f"{_EB}.name"])
    storage_type: str = param("queue", doc="queue and sql: an SQLite database shared by the explorer and trainer processes (posttrain keeps a queue durable, so an experience survives a crash of either side); file: a directory of JSON-lines files with the same guarantees (posttrain.buffer.jsonl).", choices=["queue", "sql", "file"], refs=[f"{_EB}.storage_type"])
    capacity: int = param(10000, doc="Most unread prompt groups the buffer holds (Trinity-RFT's queue items: one task's responses): the explorer waits for the trainer to read before it writes a batch that would exceed it (up to synchronizer.sync_timeout); with replay, the lowest-priority batches past it are dropped.", ge=1, refs=[f"{_EB}.capacity"])
    path: str | None = param(None, doc="The buffer's SQLite file (a path or a sqlite:/// URL), or its directory for storage_type file; null: <stage dir>/<name>.sqlite (file: <stage dir>/<name>).", refs=[f"{_EB}.path"])
    max_read_timeout: float = param(1800.0, doc="Seconds the trainer waits for the explorer's next batch before the run fails, naming what the explorer last did (posttrain never trains on a partial batch).", gt=0, refs=[f"{_EB}.max_read_timeout"])
    replay_buffer: ReplayBufferConfig = param(factory=ReplayBufferConfig, doc="Experience reuse.")


@section
class TrainerInputConfig:
    """What the trainer reads (Trinity-RFT's auxiliary buffers: posttrain.config.dialects.trinity_explorer)."""

    experience_buffer: ExperienceBufferConfig = param(factory=ExperienceBufferConfig, doc="Experiences from the explorer (a Trinity-RFT SFT/DPO run's buffer of files is translated to data.*).")


@section
class BufferConfig:
    """Tasks for the explorer and experiences for the trainer."""

    trainer_input: TrainerInputConfig = param(factory=TrainerInputConfig, doc="The experience buffer.")


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {}

# Trinity-RFT's config validator (trinity/common/config_validator.py) overwrites these whatever the file says, or
# nothing reads them: dropped at any value, with the reason.
_OVERWRITTEN = "Trinity-RFT's config validator sets it itself, overwriting the file's value"
_TASKSET = "trinity:buffer.explorer_input.taskset"
NO_EFFECT: dict[str, str] = {
    "trinity:buffer.explorer_output": ("declared by Trinity-RFT's buffer config (\"do not set\") and read nowhere: the explorer's "
                                       "experiences go to trainer_input.experience_buffer"),
    "trinity:buffer.tokenizer_path": "declared by Trinity-RFT's buffer config (\"automatically set\") and read nowhere",
    "trinity:buffer.cache_dir": _OVERWRITTEN + " (<checkpoint_job_dir>/buffer); posttrain's buffer lives in the stage's directory",
    "trinity:checkpoint_job_dir": _OVERWRITTEN + " (<checkpoint_root_dir>/<project>/<group>/<name>); posttrain's is trainer.default_local_dir",
    **{f"{_TASKSET}.{k}": _OVERWRITTEN + " (from buffer.batch_size, total_epochs and total_steps, and the taskset's role)"
       for k in ("is_eval", "batch_size", "total_epochs", "total_steps")},
    **{f"{_EB}.{k}": _OVERWRITTEN + " (the algorithm's schema, buffer.train_batch_size, model.model_path)"
       for k in ("schema_type", "batch_size", "tokenizer_path")},
    "trinity:synchronizer.explorer_world_size": _OVERWRITTEN + " (cluster.rollout_gpu_num)",
    **{f"trinity:{k}.ray_namespace": "the Ray namespace of Trinity-RFT's actors: where they are registered, not the numbers"
       for k in ("synchronizer", _TASKSET[len("trinity:"):], _EB[len("trinity:"):])},
    **{f"trinity:{k}.{r}": "retries of a failed read or write of Trinity-RFT's buffer storage: not the numbers"
       for k in (_TASKSET[len("trinity:"):], _EB[len("trinity:"):]) for r in ("max_retry_times", "max_retry_interval")},
    "trinity:ignore_validator_suggestions": "switches off Trinity-RFT's memory-use advice when it starts: not the numbers",
}
