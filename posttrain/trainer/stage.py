"""What every stage runner (RL, SFT, DPO) receives and returns, and the set-up they share.

A run is a list of stages (one when the config has no `stages`). Each stage gets its own run
subdirectory, starts from the previous stage's final policy, and ends by saving its final policy as
a Hugging Face directory that the next stage (or the user) loads with `from_pretrained`.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from posttrain.config import derive, save_resolved
from posttrain.config.derive import Derived
from posttrain.config.schema import Config
from posttrain.tracking import Trackers, build_trackers


@dataclass(frozen=True)
class StageContext:
    """Inputs of one stage."""

    name: str  # the stage's name ("main" for a single-stage run)
    cfg: Config  # this stage's validated config
    run_dir: Path  # this stage's directory: config.yaml, metrics.jsonl, tensorboard/, final_model/
    model_path: str  # the policy this stage starts from (model.path for the first stage)
    step_offset: int = 0  # global step of the stage's first step, so metrics of stages line up


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


def open_stage(ctx: StageContext, train_size: int) -> tuple[Derived, Trackers]:
    """Derive the step counts from the real (post-filtering) dataset size, save the resolved
    config into the stage directory, and build the trackers. Called once by every runner."""
    derived = derive(ctx.cfg, train_size)
    save_resolved(ctx.cfg, ctx.run_dir, derived)
    trackers = build_trackers(
        list(ctx.cfg.trainer.logger),
        ctx.run_dir,
        derived.total_training_steps,
        step_offset=ctx.step_offset,
        label=None if ctx.name == "main" else ctx.name,
    )
    return derived, trackers


def final_model_dir(ctx: StageContext) -> Path:
    return ctx.run_dir / "final_model"


def with_model_path(cfg: Config, path: str) -> Config:
    """The stage's config with `model.path` pointing at the policy it starts from."""
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=path))
