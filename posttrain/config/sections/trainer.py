"""`trainer`: run length, logging, validation and checkpoint cadence.

The run directory is `default_local_dir`, or `<root_dir>/<project_name>/<experiment_name>` when that is
null (Trinity-RFT's layout under checkpoint_root_dir; verl's default value spelled out). Checkpoints,
logs and the resolved config of the run go there. Checkpoint layout and resume rules:
`posttrain.checkpoint` and `posttrain.trainer.run`.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section

#: Values of `logger` posttrain implements (posttrain.tracking); wandb, mlflow and swanlab need their
#: optional package (`pip install 'posttrain[wandb]'`, ...).
LOGGERS = ("console", "tensorboard", "jsonl", "wandb", "mlflow", "swanlab")
#: Other frameworks' names for posttrain's trackers (verl's `file`, ROLL's `stdout`, verl's old `tracking`).
LOGGER_ALIASES = {"file": "jsonl", "stdout": "console", "tracking": "wandb"}
#: Trackers other frameworks accept that posttrain does not, with the reason.
REFUSED_LOGGERS = {
    "clearml": "not implemented: posttrain has adapters for wandb, mlflow and swanlab (each with an offline mode), not for ClearML; use one of them or tensorboard",
    "vemlp_wandb": "not implemented: Volcano Engine ML Platform's tracker needs that platform's SDK and credentials, which posttrain does not integrate; use wandb, mlflow or swanlab",
    "trackio": "not implemented: posttrain has adapters for wandb, mlflow and swanlab, not for trackio; use one of them or tensorboard",
    "ml_tracker": "not a tracker of ROLL's public source either (its track_with registers tensorboard, wandb, stdout, swanlab and trackio; ROLL stops with 'Unknown tracker name' on this one): an in-house tracker its examples name; use wandb, mlflow, swanlab or tensorboard",
}


@section
class TrainerConfig:
    """The training loop around the RL step."""

    project_name: str = param("posttrain", doc="Project name used by trackers and the run directory.", refs=["verl:trainer.project_name", "trinity:project"])
    experiment_name: str = param("run", doc="Experiment name used by trackers and the run directory.", refs=["verl:trainer.experiment_name", "trinity:name", "roll:exp_name"])
    total_epochs: int = param(1, doc="Passes over the training data.", ge=1, refs=["verl:trainer.total_epochs", "trinity:buffer.total_epochs"])
    total_training_steps: int | None = param(None, doc="Training steps; null derives it from total_epochs x steps per epoch.", ge=1, refs=["verl:trainer.total_training_steps", "roll:max_steps", "trinity:buffer.total_steps", "trinity:trainer.total_steps"])
    seed: int = param(42, doc="Seed of every random generator of the run (data order, sampling, initialisation).", ge=0, refs=["roll:seed"])

    logger: list[str] = param(factory=lambda: ["console", "jsonl", "tensorboard"], doc="Where metrics go: any of console, tensorboard (<run dir>/tensorboard), jsonl (<run dir>/metrics.jsonl), wandb, mlflow, swanlab (each needs its package: pip install 'posttrain[wandb]').", choices=LOGGERS, refs=["verl:trainer.logger", "roll:track_with", "trinity:monitor.monitor_type"])
    log_val_generations: int = param(0, doc="Validation (prompt, response, score) examples appended to <run dir>/val_generations.jsonl each validation, and shown as a table by wandb, mlflow and swanlab.", ge=0, refs=["verl:trainer.log_val_generations"])
    write_report: bool = param(False, doc="Write <run dir>/report.html (curves, before/after-RL accuracy, validation samples) when posttrain train ends; `posttrain report RUN_DIR` writes it any time.")
    rollout_data_dir: str | None = param(None, doc="Directory for one JSONL file of training rollouts per step; null writes none.", refs=["verl:trainer.rollout_data_dir"])
    rollout_mock: str | None = param(None, doc="dump writes each training step's explored batch (rollouts, rewards) to rollout_mock_dir/train/step_NNNNNN.experience; replay reads them back in place of generating and scoring, so another run trains on the same rollouts (a missing step fails; validation still generates); null does neither. RL stages of the synchronous loop.", choices=[None, "dump", "replay"])
    rollout_mock_dir: str | None = param(None, doc="Directory of rollout_mock's dumped steps (relative paths from the working directory).")
    validation_data_dir: str | None = param(None, doc="Directory for one JSONL file of validation generations per validation; null writes none.", refs=["verl:trainer.validation_data_dir"])
    test_freq: int = param(-1, doc="Validate every this many steps and after the last; 0 or -1 never validates during training.", ge=-1, refs=["verl:trainer.test_freq", "roll:eval_steps", "trinity:explorer.eval_interval"])
    val_before_train: bool = param(True, doc="Validate once before the first training step (needs data.val_files).", refs=["verl:trainer.val_before_train", "trinity:explorer.eval_on_startup"])
    val_only: bool = param(False, doc="Validate the initial model and stop without training.", refs=["verl:trainer.val_only"])
    critic_warmup: int = param(0, doc="Steps that train only the critic before the actor starts updating.", ge=0, refs=["verl:trainer.critic_warmup", "roll:critic_warmup"])
    root_dir: str = param("checkpoints", doc="Parent of run directories when default_local_dir is null.", refs=["trinity:checkpoint_root_dir"])
    default_local_dir: str | None = param(None, doc="Run directory (checkpoints, logs, resolved config); null means <root_dir>/<project_name>/<experiment_name>.", refs=["verl:trainer.default_local_dir", "roll:output_dir"])

    tracker_kwargs: dict[str, Any] = param(factory=dict, doc="Options of the trackers, each read by the trackers it applies to: project, name, tags, notes, group, entity (wandb), workspace (swanlab), mode (online/offline), log_dir, uri (mlflow); credentials come from the environment (WANDB_API_KEY, ...).", refs=["roll:tracker_kwargs", "trinity:monitor.monitor_args", "trinity:monitor.monitor_args.base_url", "trinity:monitor.monitor_args.api_key", "trinity:monitor.monitor_args.uri", "trinity:monitor.monitor_args.username", "trinity:monitor.monitor_args.password"])
    log_freq: int = param(1, doc="Send training metrics to the loggers (console, metrics.jsonl, TensorBoard) every this many steps of a stage; steps with validation and the stage's last step are always sent.", ge=1, refs=["roll:logging_steps"])
    mode: str = param("both", doc="Which halves of an RL stage run: both (explore and train: in step, or as explorer and trainer processes when the synchronizer lags), explore (generate and score into the experience buffer with the starting weights), train (learn from a buffer an explore run filled), bench (validate every saved checkpoint of the run on data.val_files and write <stage dir>/bench/bench.csv and bench.md; trains nothing), serve (an OpenAI-compatible endpoint over the run's newest checkpoint that records every completion, and writes the rewarded ones into the experience buffer for a train run: docs/async.md).", choices=["both", "train", "explore", "bench", "serve"], refs=["trinity:mode"])
    balance_batch: bool = param(True, doc="With several worker processes, give each its share of a batch's rows by token count (near-equal tokens per worker) instead of consecutive runs of rows; results are the same either way, only the work per worker differs.", refs=["verl:trainer.balance_batch"])

    save_freq: int = param(-1, doc="Save a checkpoint every this many steps and always after the last; 0 or -1 saves none (a killed stage then restarts).", ge=-1, refs=["verl:trainer.save_freq", "roll:save_steps", "trinity:trainer.save_interval"])
    resume_mode: str = param("auto", doc="auto continues the run directory (complete stages skipped, the current one from its newest complete checkpoint), disable refuses a directory that holds a run, resume_path continues from resume_from_path (ROLL/Trinity booleans: true is auto, false is disable).", choices=["auto", "disable", "resume_path"], refs=["verl:trainer.resume_mode", "trinity:continue_from_checkpoint", "roll:resume_from_checkpoint"])
    resume_from_path: str | None = param(None, doc="Checkpoint directory (global_step_N) to continue from when resume_mode is resume_path.", refs=["verl:trainer.resume_from_path"])
    checkpoint_dir: str | None = param(None, doc="Where checkpoints are written (one subdirectory per stage of a multi-stage run); null means <stage run dir>/checkpoints.", refs=["roll:checkpoint_config.output_dir"])
    max_actor_ckpt_to_keep: int | None = param(None, doc="Newest actor checkpoints kept on disk (older ones deleted after a new one is complete); null keeps all.", ge=1, refs=["verl:trainer.max_actor_ckpt_to_keep"])
    max_critic_ckpt_to_keep: int | None = param(None, doc="Newest critic checkpoints kept on disk (older ones deleted after a new one is complete); null keeps all.", ge=1, refs=["verl:trainer.max_critic_ckpt_to_keep"])
    del_local_ckpt_after_load: bool = param(False, doc="Delete the checkpoint directory a stage resumed from once it is loaded.", refs=["verl:trainer.del_local_ckpt_after_load"])
    save_hf_checkpoint: str = param("last", doc="Standalone Hugging Face model copies: last writes <stage dir>/final_model, always also copies every checkpoint's actor to <stage dir>/hf_checkpoints/global_step_N, never leaves the final model in the last checkpoint's actor/ (needs save_freq > 0).", choices=["last", "always", "never"], refs=["trinity:trainer.save_hf_checkpoint"])
    save_strategy: str = param("unrestricted", doc="Which checkpoint writers may write at once (Trinity-RFT): unrestricted, single_node (the processes of one node together), single_process or single_thread (one writer at a time). posttrain writes one checkpoint at a time, synchronously, and each worker process writes only its own shard, all at once: every value means that on one process, unrestricted and single_node on one node; a strategy that would make several processes or nodes take turns is refused.", choices=["single_thread", "single_process", "single_node", "unrestricted"], refs=["trinity:trainer.save_strategy"])

    worker_nsight_options: dict[str, Any] = param(factory=dict, doc="profiler.tool nsys with profiler.steps: the processes that compute (the workers posttrain starts, or this process when it runs alone) are started under `nsys profile` with these options, each KEY: VALUE passed as --KEY=VALUE (trace, cuda-memory-usage, cuda-graph-trace, capture-range, capture-range-end, kill; capture-range-end null is repeat-shutdown:<traced windows>), writing <stage run dir>/profile/nsys_rank<r> unless output is given; empty: start the run under nsys yourself. Needs the nsys program on PATH.", refs=[*(f"verl:{p}.worker_nsight_options{k}" for p in ("trainer", "global_profiler.global_tool_config.nsys") for k in ("", ".trace", ".cuda-memory-usage", ".cuda-graph-trace", ".capture-range", ".capture-range-end", ".kill"))])


_CONTROLLER = ("Nsight options of verl's controller process: posttrain has no controller apart from its workers (each worker "
               "process runs the RL loop itself), so the processes that compute are started under nsys with worker_nsight_options")
#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {
    "verl:trainer.esi_redundant_time": ("extra seconds verl saves a checkpoint ahead of an expiring elastic server instance (ESI); "
                                        "posttrain saves at trainer.save_freq and resumes from the last checkpoint after any stop"),
    "verl:trainer.default_hdfs_dir": "HDFS upload is not supported; copy the run directory with your own tooling",
    "roll:checkpoint_config.type": "posttrain writes checkpoints to a file system path only; set trainer.checkpoint_dir",
    "trinity:trainer.name": "Ray actor names are chosen by posttrain",
    "trinity:trainer.trainer_type": "posttrain trains with its own backend, not verl",
    **{f"verl:{p}.controller_nsight_options{k}": _CONTROLLER for p in ("trainer", "global_profiler.global_tool_config.nsys")
       for k in ("", ".trace", ".cuda-memory-usage", ".cuda-graph-trace")},
}


# Reference keys any value of which changes nothing in posttrain (the loaders drop them with the reason).
NO_EFFECT: dict[str, str] = {
    "roll:report_length_and_rewards": "ROLL then logs each prompt's lengths and rewards per epoch (a diagnostic): not the numbers",
    "roll:length_profiler_dir": "where ROLL's length profiler writes its diagnostics: not the numbers",
    "roll:save_logging_board_dir": "where ROLL's RLVR pipeline writes its logging-board files (a diagnostic): not the numbers; posttrain's rollouts go to trainer.rollout_data_dir",
    "roll:otlp_output_dir": "where ROLL's OpenTelemetry traces of the run are written: not the numbers",
}


def check_save_strategy(cfg: Any) -> list[str]:
    """posttrain's sharded checkpoint is one collective write by every worker process at once, so a
    strategy asking the writers to take turns is refused where there are several of them."""
    from posttrain.config.access import get_path, world_size

    strategy, world = get_path(cfg, "trainer.save_strategy", "unrestricted"), world_size(cfg)
    if strategy in ("single_thread", "single_process") and world > 1:
        return [f"trainer.save_strategy={strategy} asks checkpoint writers to take turns, but the {world} worker processes write their shards of a checkpoint at once (one collective write); use single_node (one node) or unrestricted"]
    if strategy == "single_node" and get_path(cfg, "cluster.nnodes", 1) > 1 and world > 1:
        return [f"trainer.save_strategy=single_node asks the nodes to take turns writing checkpoints, but the processes of all {get_path(cfg, 'cluster.nnodes', 1)} nodes write their shards at once; use unrestricted"]
    return []


def check_rollout_mock(cfg: Any) -> list[str]:
    """rollout_mock dumps and replays the synchronous loop's explored batches, named by step."""
    from posttrain.config.access import get_path, is_rl

    mock, folder = get_path(cfg, "trainer.rollout_mock", None), get_path(cfg, "trainer.rollout_mock_dir", None)
    if mock is None:
        return ["trainer.rollout_mock_dir is only read with trainer.rollout_mock (dump or replay); set both or neither"] if folder else []
    problems = []
    if not folder:
        problems.append(f"trainer.rollout_mock={mock} needs trainer.rollout_mock_dir, the directory of the dumped steps")
    if not is_rl(cfg):
        problems.append(f"trainer.rollout_mock={mock} acts on an RL stage's rollouts; algorithm.kind {get_path(cfg, 'algorithm.kind', 'rl')} has none")
    if get_path(cfg, "trainer.mode", "both") != "both":
        problems.append(f"trainer.rollout_mock={mock} dumps or replays the steps of the synchronous loop (trainer.mode both); "
                        f"trainer.mode {get_path(cfg, 'trainer.mode', 'both')} stores experiences in the experience buffer instead")
    return problems
