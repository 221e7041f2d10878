"""Optimizers and learning-rate schedules for the training roles."""

from posttrain.optim.build import build_optimization
from posttrain.optim.optimizers import OPTIMIZERS, build_optimizer
from posttrain.optim.schedules import SCHEDULES, build_scheduler, lr_multiplier

__all__ = ["OPTIMIZERS", "SCHEDULES", "build_optimization", "build_optimizer", "build_scheduler", "lr_multiplier"]
