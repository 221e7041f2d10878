"""The run driver: the stages of a config in order, each from the previous stage's final policy.

Rerunning a command continues its run (`trainer.resume_mode: auto`, the default): a stage whose
`stage_complete.json` exists is skipped (its final model feeds the next stage) if its saved config
computes the same run as the new one (else the rerun is refused, naming the changed keys), and the first
unfinished stage continues from its newest complete checkpoint that verifies against its manifest
(an older intact one when the newest is damaged; see posttrain.checkpoint.resume), or starts over
when it has none.
`disable` refuses a run directory that already holds a run rather than mixing two runs' metrics;
`resume_path` continues the stage that wrote `trainer.resume_from_path` from that checkpoint.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from posttrain.checkpoint import STAGE_COMPLETE, CheckpointError, checkpoint_root, latest_checkpoint
from posttrain.checkpoint.layout import TRAINER_STATE, is_checkpoint
from posttrain.checkpoint.resume import resumable_checkpoint, verified
from posttrain.checkpoint.state import read_json
from posttrain.cluster.world import RANK_ENV, World
from posttrain.files import atomic_write_text
from posttrain.config import stage_configs
from posttrain.config.schema import Config
from posttrain.data import as_file_list
from posttrain.errors import ConfigError, UserError
from posttrain.trainer.preflight import StageInputs, check_reward, check_stage_names, engine_notes, stage_inputs
from posttrain.trainer.prepare import refuse_stage_prepare
from posttrain.trainer.stage import StageContext, StageResult, changed_keys, changes_the_work, with_model_path

# algorithm.kind -> "module:function" running one stage (imported on use: SFT needs no rollout code).
RUNNERS = {
    "rl": "posttrain.trainer.rl:run_rl",
    "sft": "posttrain.trainer.sft:run_sft",
    "dpo": "posttrain.trainer.dpo:run_dpo",
    "distill": "posttrain.trainer.distill:run_distill",
}


def run_directory(cfg: Config) -> Path:
    """`trainer.default_local_dir`, or `<root_dir>/<project_name>/<experiment_name>`."""
    t = cfg.trainer
    if t.default_local_dir:
        return Path(t.default_local_dir).expanduser()
    return Path(t.root_dir).expanduser() / t.project_name / t.experiment_name


def _runner(cfg: Config) -> Callable[[StageContext], StageResult]:
    """The stage's runner: by algorithm.kind, and for an RL stage of a decoupled run, the half this
    process runs (`posttrain.trainer.decoupled`)."""
    from posttrain.trainer.decoupled import half_of

    if cfg.algorithm.kind == "rl" and cfg.trainer.mode == "bench":  # evaluates the stage's checkpoints
        from posttrain.trainer.bench import run_bench

        return run_bench
    half = half_of(cfg)
    target = {"explorer": "posttrain.trainer.decoupled:run_explorer", "trainer": "posttrain.trainer.decoupled:run_learner"}.get(
        half or "", RUNNERS[cfg.algorithm.kind])
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _benches(cfg: Config) -> bool:
    """An RL stage in trainer.mode bench: it evaluates the checkpoints a training run of it saved."""
    return cfg.algorithm.kind == "rl" and cfg.trainer.mode == "bench"


def _completed(stage_dir: Path) -> StageResult | None:
    path = stage_dir / STAGE_COMPLETE
    if not path.is_file():
        return None
    data = read_json(path)
    metrics = {k: (math.nan if v is None else v) for k, v in data.get("last_metrics", {}).items()}
    return StageResult(Path(data["final_model"]), metrics, int(data["steps"]))


def _mark_complete(stage_dir: Path, result: StageResult) -> None:
    """Written last (atomically): a stage is complete only once its final model is saved."""
    metrics = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in result.last_metrics.items()}
    data = {"final_model": str(result.final_model), "steps": result.steps, "last_metrics": metrics}
    atomic_write_text(stage_dir / STAGE_COMPLETE, json.dumps(data, indent=1, sort_keys=True) + "\n")


class RunConflict(UserError):
    """The run directory holds results that this command's config would contradict."""


def _holds_run(stage_dir: Path) -> bool:
    return any((stage_dir / name).exists() for name in ("metrics.jsonl", STAGE_COMPLETE, "checkpoints"))


def _launched() -> bool:
    """Whether a launcher started this process (a worker rank, a decoupled half, a reference crew
    process): the launcher checked the run directory before starting any, and the processes it
    started write to it, so a later look from one of them would take its peers' files for an old run."""
    from posttrain.trainer.decoupled import ROLE_ENV
    from posttrain.trainer.reference_crew import CREW_ENV

    return any(name in os.environ for name in (RANK_ENV, ROLE_ENV, CREW_ENV))


def _refuse_existing(stage_dirs: list[Path]) -> None:
    used = [d for d in stage_dirs if _holds_run(d)]
    if used:
        raise ConfigError(
            f"trainer.resume_mode=disable: {used[0]} already holds a run; delete it, choose a new "
            "trainer.experiment_name / trainer.default_local_dir, or set trainer.resume_mode=auto to continue it"
        )


def _resume_target(cfg: Config) -> tuple[Path, str] | None:
    """(checkpoint, stage name) for resume_mode=resume_path."""
    t = cfg.trainer
    if t.resume_mode != "resume_path":
        return None
    if not t.resume_from_path:
        raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_N checkpoint directory)")
    path = Path(t.resume_from_path).expanduser()
    if not is_checkpoint(path):
        raise CheckpointError(
            f"trainer.resume_from_path={path}: not a complete checkpoint (a global_step_N directory with {TRAINER_STATE})"
        )
    return path, str(read_json(path / TRAINER_STATE).get("stage", "main"))


def _pick_resume(stage: str, explicit: Path | None, root: Path, mode: str) -> Path | None:
    """The verified checkpoint the stage continues from (see posttrain.checkpoint.resume); what was
    decided on the way (a damaged checkpoint skipped, an old one without checksums) is printed."""
    if explicit is None and mode != "auto":
        return None
    pick = verified(explicit) if explicit is not None else resumable_checkpoint(root)
    for note in pick.notes:
        print(f"[{stage}] {note}", flush=True)
    return pick.path


def _refuse_changed_work(name: str, stage_dir: Path, cfg: Config, root: Path) -> None:
    """A finished stage is skipped only when its saved config.yaml computes the same run as `cfg`
    (keys that only change logging or output are ignored: `OUTPUT_ONLY_KEYS`); otherwise the
    rerun would print the old result as if it were the new one."""
    changed = [c for c in changed_keys(stage_dir / "config.yaml", cfg) if changes_the_work(c[0])]
    if not changed:
        return
    lines = [f"  {k}: {old!r} -> {new!r}" for k, old, new in changed[:12]]
    lines += [f"  ... and {len(changed) - 12} more (compare {stage_dir / 'config.yaml'})"] if len(changed) > 12 else []
    last = latest_checkpoint(root)
    way = (f"continue it from its last checkpoint with the new values (add trainer.resume_mode=resume_path "
           f"trainer.resume_from_path={last})" if last is not None else
           "it kept no checkpoint to continue from (trainer.save_freq <= 0)")
    raise RunConflict("\n".join([
        f"stage {name!r} in {stage_dir} already finished with another config; these keys change what it computes:",
        *lines,
        f"Either {way}, or run the new config in a new run directory (trainer.default_local_dir, or another trainer.experiment_name).",
    ]))


def _refuse_stale_later(name: str, later: list[Path]) -> None:
    """A stage about to train must not have later stages with results: they were trained from its
    earlier final model, and would otherwise be skipped as complete."""
    used = [d for d in later if _holds_run(d)]
    if used:
        raise RunConflict(
            f"stage {name!r} is about to train, but {used[0]} holds the results of a later stage trained from its earlier "
            f"final model; move {used[0]} away so that it runs again from the new one, or use a new run directory"
        )



@dataclass(frozen=True)
class StageCheck:
    """What `check_run` found for one stage."""

    name: str
    config: Config  # the stage's config, model.path set to the policy the run starts from
    inputs: StageInputs | None  # None when its model and data were not checked: see `skipped`
    skipped: str | None = None


def check_run(cfg: Config, pending: Collection[Path] = ()) -> list[StageCheck]:
    """Every check `run` makes before the first step, for every stage (`posttrain config plan`
    calls it too): the run directory against trainer.resume_mode, then `stage_inputs` of each stage
    that is not complete yet. ``pending``: directories the config's `prepare` has not built yet
    (plan builds nothing); a stage whose model or data lies there gets only the checks that need
    no files."""
    refuse_stage_prepare(cfg.stages)
    stages = stage_configs(cfg)
    dirs = stage_dirs(cfg, stages)
    if cfg.trainer.resume_mode == "disable" and not _launched():
        _refuse_existing(dirs)
    target = _resume_target(cfg)
    if target is not None and target[1] not in [s.name for s in stages]:
        raise CheckpointError(f"trainer.resume_from_path={target[0]} belongs to stage {target[1]!r}, which this config does not have")
    checks = []
    for stage, stage_dir in zip(stages, dirs):
        config = with_model_path(stage.config, cfg.model.path)
        explicit = target is not None and target[1] == stage.name
        if not explicit and cfg.trainer.resume_mode != "disable" and _completed(stage_dir) is not None and not _benches(config):
            checks.append(StageCheck(stage.name, config, None, "already complete"))
        elif config.algorithm.kind == "rl" and config.trainer.mode == "serve":  # posttrain.trainer.serving
            _check_serve(config)
            checks.append(StageCheck(stage.name, config, None, "trainer.mode serve reads no data (model.path was checked)"))
        elif (waiting := _waiting_on(config, pending)) is not None:
            check_stage_names(config)
            check_reward(config)
            checks.append(StageCheck(stage.name, config, None, f"{waiting} is built by `prepare` when the run starts"))
        else:
            checks.append(StageCheck(stage.name, config, stage_inputs(config)))
    return checks


def _check_serve(cfg: Config) -> None:
    from posttrain.trainer.serving import check_serve  # imports the engines: only for a serve config

    check_serve(cfg)


def stage_dirs(cfg: Config, stages: list) -> list[Path]:
    """Each stage's directory: the run directory itself for a single stage."""
    base = run_directory(cfg)
    return [base / s.name for s in stages] if len(stages) > 1 else [base]


def _waiting_on(cfg: Config, pending: Collection[Path]) -> str | None:
    """'model.path DIR' or 'data file FILE' when the stage reads from a directory still to be built."""
    roots = [os.path.abspath(os.path.expanduser(p)) for p in pending]

    def inside(path: str) -> bool:
        full = os.path.abspath(os.path.expanduser(path))
        return any(full == root or full.startswith(root + os.sep) for root in roots)

    if cfg.model.path and inside(cfg.model.path):
        return f"model.path {cfg.model.path}"
    d = cfg.data
    files = as_file_list(list(d.train_files) + list(d.val_files or []), d.dataset_dir)
    return next((f"data file {f}" for f in files if inside(f)), None)


def _decide(name: str, stage_dir: Path, later: list[Path], cfg: Config, explicit: Path | None, root: Path,
            run_cfg: Config) -> tuple[StageResult | None, Path | None]:
    """(the stage's result when it is complete and may be skipped, else None; the checkpoint it
    continues from, or None to start fresh). A stage about to train loses its completion marker."""
    done = _completed(stage_dir) if explicit is None and run_cfg.trainer.resume_mode != "disable" else None
    if done is not None:
        _refuse_changed_work(name, stage_dir, cfg, root)
        return done, None
    _refuse_stale_later(name, later)
    (stage_dir / STAGE_COMPLETE).unlink(missing_ok=True)
    return None, _pick_resume(name, explicit, root, run_cfg.trainer.resume_mode)


def run(cfg: Config, world: World = World()) -> list[StageResult]:
    """Run (or continue) every stage; returns their results in order. With several worker
    processes every rank runs this loop; rank 0 decides what to resume and writes the markers.
    The explorer process of a decoupled run follows the trainer process instead (`_explore_stages`)."""
    from posttrain.trainer.decoupled import ROLE_ENV

    checks = check_run(cfg)  # everything before the first step, for every stage
    if world.is_main:
        for note in engine_notes([c.config for c in checks]):
            print(note, flush=True)
    if os.environ.get(ROLE_ENV) == "explorer":
        return _explore_stages(cfg, checks, world)
    stages = stage_configs(cfg)
    dirs = stage_dirs(cfg, stages)
    multi = len(stages) > 1
    target = _resume_target(cfg)
    results: list[StageResult] = []
    model_path, offset = cfg.model.path, 0
    for i, (stage, stage_dir, check) in enumerate(zip(stages, dirs, checks)):
        explicit = target[0] if target is not None and target[1] == stage.name else None
        root = checkpoint_root(stage.config, stage_dir, stage.name, multi)
        decision = None
        if _benches(stage.config):  # reads the stage's checkpoints: nothing to resume or skip
            decision = (None, None)
        elif world.is_main:  # rank 0 reads the run directory and decides; every rank continues the same way
            try:
                decision = _decide(stage.name, stage_dir, dirs[i + 1:], with_model_path(stage.config, model_path), explicit, root, cfg)
            except UserError as err:
                decision = err
        decision = world.from_main(decision)
        if isinstance(decision, UserError):
            raise decision
        done, resume = decision
        if done is not None:
            print(f"[{stage.name}] stage already complete ({done.steps} steps); final model: {done.final_model}", flush=True)
        else:
            ctx = StageContext(
                stage.name, with_model_path(stage.config, model_path), stage_dir, model_path, offset,
                resume=resume, checkpoint_dir=root, world=world,
                inputs=check.inputs if model_path == cfg.model.path else None,  # later stages start from another model
            )
            if resume is not None and world.is_main:
                print(f"[{stage.name}] resuming from {resume} (after step {ctx.resume_step()})", flush=True)
            done = _runner(stage.config)(ctx)
            if world.is_main and not _benches(stage.config):
                _mark_complete(stage_dir, done)
            world.barrier()
        results.append(done)
        model_path, offset = str(done.final_model), offset + done.steps
    return results


def _explore_stages(cfg: Config, checks: list[StageCheck], world: World, poll_s: float = 0.2) -> list[StageResult]:
    """The explorer of a decoupled run (each of its processes, `world`): explore each decoupled RL
    stage beside the trainer process, and take every stage's result from the trainer's completion
    marker (it trains the other stages alone and writes every stage's files)."""
    from posttrain.config.access import is_decoupled
    from posttrain.trainer.decoupled import run_explorer

    stages = stage_configs(cfg)
    dirs = stage_dirs(cfg, stages)
    multi = len(stages) > 1
    results: list[StageResult] = []
    model_path, offset = cfg.model.path, 0
    for stage, stage_dir, check in zip(stages, dirs, checks):
        if is_decoupled(stage.config) and _completed(stage_dir) is None:
            run_explorer(StageContext(
                stage.name, with_model_path(stage.config, model_path), stage_dir, model_path, offset,
                checkpoint_dir=checkpoint_root(stage.config, stage_dir, stage.name, multi),
                inputs=check.inputs if model_path == cfg.model.path else None, world=world,
            ))
        while (done := _completed(stage_dir)) is None:  # the trainer process marks it (or the launcher stops us)
            time.sleep(poll_s)
        results.append(done)
        model_path, offset = str(done.final_model), offset + done.steps
    return results
