"""What every stage runner (RL, SFT, DPO) receives and returns, and the set-up they share.

A run is a list of stages (one when the config has no `stages`). Each stage gets its own run
subdirectory, starts from the previous stage's final policy, and ends by saving its final policy as
a Hugging Face directory that the next stage (or the user) loads with `from_pretrained`.

Resuming (decided by `posttrain.trainer.run`): a stage that continues from a checkpoint gets it as
`ctx.resume`; `open_stage` then trims the stage's metric files back to that step, so no step is
logged twice (see `posttrain.checkpoint`).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from posttrain.checkpoint.layout import TRAINER_STATE
from posttrain.checkpoint.logs import truncate_jsonl
from posttrain.checkpoint.state import read_json
from posttrain.cluster.world import World
from posttrain.config import derive, save_resolved
from posttrain.config.load import to_dict, to_yaml
from posttrain.config.validate import deep_merge
from posttrain.config.derive import Derived
from posttrain.config.schema import Config, defaults_dict
from posttrain.files import SafeLoader
from posttrain.tracking import Trackers, build_trackers
from posttrain.tracking.base import flatten


@dataclass(frozen=True)
class StageContext:
    """Inputs of one stage."""

    name: str  # the stage's name ("main" for a single-stage run)
    cfg: Config  # this stage's validated config
    run_dir: Path  # this stage's directory: config.yaml, metrics.jsonl, tensorboard/, final_model/
    model_path: str  # the policy this stage starts from (model.path for the first stage)
    step_offset: int = 0  # global step of the stage's first step, so metrics of stages line up
    resume: Path | None = None  # checkpoint (global_step_N) to continue from; None starts fresh
    checkpoint_dir: Path | None = None  # where checkpoints go; None means <run_dir>/checkpoints
    world: World = World()  # this process among the run's workers (one process by default)
    inputs: Any = None  # preflight.StageInputs already built for this cfg; None: the runner builds them

    @property
    def checkpoint_root(self) -> Path:
        return self.checkpoint_dir or self.run_dir / "checkpoints"

    def resume_step(self) -> int:
        """The stage-local step `resume` was saved after (0 when starting fresh)."""
        return int(read_json(self.resume / TRAINER_STATE)["step"]) if self.resume is not None else 0


@dataclass(frozen=True)
class StageResult:
    """Outputs of one stage."""

    final_model: Path  # HF directory of the policy at the end of the stage
    last_metrics: dict[str, float]  # metrics of the last logged step (and final validation)
    steps: int  # training steps this stage ran


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) so a run is reproducible on one machine."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def open_stage(ctx: StageContext, train_size: int, writes: bool = True) -> tuple[Derived, Trackers]:
    """Derive the step counts from the real (post-filtering) dataset size, save the resolved
    config into the stage directory, and build the trackers. Called once by every runner.

    Metrics already in the stage directory after the resumed step (all of them when starting
    fresh) belong to an interrupted attempt: they are dropped, and TensorBoard purges them.
    `writes=False` (a decoupled run's explorer, which shares the stage with its trainer) derives
    only: no files, no trackers."""
    derived = derive(ctx.cfg, train_size)
    if not ctx.world.is_main or not writes:  # rank 0 writes the stage's files and logs its metrics
        return derived, build_trackers([], ctx.run_dir, derived.total_training_steps)
    if ctx.resume is not None:
        for line in config_changes(ctx.run_dir / "config.yaml", ctx.cfg):
            print(f"[{ctx.name}] {line}", flush=True)
    save_resolved(ctx.cfg, ctx.run_dir, derived)
    resumed = ctx.resume_step()
    keep_through = ctx.step_offset + resumed if ctx.resume is not None else ctx.step_offset - 1
    truncate_jsonl(ctx.run_dir / "metrics.jsonl", keep_through)
    truncate_jsonl(ctx.run_dir / "val_generations.jsonl", keep_through - ctx.step_offset)  # stage-local steps
    trainer = ctx.cfg.trainer
    trackers = build_trackers(
        list(trainer.logger),
        ctx.run_dir,
        derived.total_training_steps,
        step_offset=ctx.step_offset,
        label=None if ctx.name == "main" else ctx.name,
        purge_step=keep_through + 1,  # TensorBoard purges only a directory it wrote before
        log_freq=trainer.log_freq,
        project=trainer.project_name,
        experiment=trainer.experiment_name,
        config={**to_dict(ctx.cfg), "derived": dataclasses.asdict(derived)},  # what config.yaml holds
        options=dict(trainer.tracker_kwargs),
        resumed=resumed if ctx.resume is not None else 0,
    )
    return derived, trackers


# Keys that only say where results are written, how they are logged, how checkpoints are kept and
# loaded, or on how many worker processes the run executes (`cluster.*`, `trainer.balance_batch`: a
# run computes the same on any number of workers, to float rounding; docs/scaling.md): two configs
# that differ only here compute the same run (same weights, same metrics). Every other key "changes
# the work", so a finished stage rerun with it changed is refused (run.py).
OUTPUT_ONLY_KEYS = (
    "trainer.project_name", "trainer.experiment_name", "trainer.root_dir", "trainer.default_local_dir",
    "trainer.logger", "trainer.log_freq", "trainer.tracker_kwargs", "trainer.log_val_generations",
    "trainer.write_report", "trainer.rollout_data_dir", "trainer.validation_data_dir",
    "trainer.save_freq", "trainer.resume_mode", "trainer.resume_from_path", "trainer.checkpoint_dir",
    "trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep", "trainer.del_local_ckpt_after_load",
    "trainer.save_hf_checkpoint", "trainer.save_strategy", "actor.checkpoint.", "critic.checkpoint.",
    "profiler.", "actor.profiler.", "ref.profiler.", "critic.profiler.", "reward.reward_model.profiler.", "rollout.trace.",
    "trainer.controller_nsight_options", "trainer.worker_nsight_options", "log.",
    "cluster.", "trainer.balance_batch",
)


def changed_keys(saved: Path, cfg: Config) -> list[tuple[str, object, object]]:
    """(key, value in `saved`, value in `cfg`) for every key that differs between the config a
    stage was last run with (its config.yaml) and `cfg`, sorted; [] when nothing was saved.

    A file written by an older posttrain may lack keys added since: they read as their defaults
    (what that run did), and keys the schema no longer has are not compared."""
    if not saved.is_file():
        return []
    old = flatten(deep_merge(defaults_dict(), yaml.load(saved.read_text(encoding="utf-8"), Loader=SafeLoader) or {}))
    new = flatten(yaml.safe_load(to_yaml(cfg)))  # the same YAML round trip as the saved file
    keys = sorted(k for k in new if old.get(k, "<unset>") != new[k])
    return [(k, old.get(k, "<unset>"), new[k]) for k in keys]


def changes_the_work(key: str) -> bool:
    return not any(key == k or (k.endswith(".") and key.startswith(k)) for k in OUTPUT_ONLY_KEYS)


def config_changes(saved: Path, cfg: Config, limit: int = 12) -> list[str]:
    """Lines saying which keys differ between the config a stage was started with (`saved`, its
    config.yaml) and the one it resumes with. A resumed run uses the new values; exact resume
    holds only when nothing that shapes training changed, so the user is told, key by key."""
    changed = changed_keys(saved, cfg)
    if not changed:
        return []
    lines = [f"config changed since this stage started ({len(changed)} keys); the resumed run uses the new values:"]
    lines += [f"  {k}: {old!r} -> {new!r}" for k, old, new in changed[:limit]]
    if len(changed) > limit:
        lines.append(f"  ... and {len(changed) - limit} more (compare {saved} with the new config)")
    return lines



def final_model_dir(ctx: StageContext) -> Path:
    return ctx.run_dir / "final_model"


def with_model_path(cfg: Config, path: str) -> Config:
    """The stage's config with `model.path` pointing at the policy it starts from."""
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=path))
