"""The training sampler a `data` section asks for: a user's class (`data.sampler`), a task selector
(`data.selector`), rows drawn by file (`data.interleave_probs`), by domain
(`data.domain_interleave_probs`), or uniformly. The config checks refuse more than one of them,
since each decides which row every prompt draws."""

from __future__ import annotations

from typing import Any

from posttrain.config.sections.data import DataConfig, sampler_set
from posttrain.data import domains
from posttrain.data.interleave import make_file_sampler
from posttrain.data.selectors import make_selector_sampler
from posttrain.data.user_sampler import make_user_sampler


def make_train_sampler(cfg: DataConfig, dataset: Any, worker_tags: dict[str, list[str]]) -> Any:
    """The RL training sampler: next_batch(), epoch, len(), state_dict()/load_state_dict()."""
    if sampler_set(cfg):
        return make_user_sampler(cfg, dataset)
    if cfg.selector.type is not None:
        return make_selector_sampler(cfg, dataset)
    if cfg.interleave_probs is not None:
        return make_file_sampler(cfg, dataset)
    return domains.make_train_sampler(cfg, dataset, worker_tags)


def needs_early_build(cfg: DataConfig) -> bool:
    """Whether building the sampler checks the data against the settings (preflight does it then)."""
    return bool(sampler_set(cfg) or cfg.selector.type is not None or cfg.interleave_probs is not None or cfg.domain_interleave_probs)
