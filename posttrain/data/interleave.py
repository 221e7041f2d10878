"""File mixing: training rows drawn from the listed training files with fixed probabilities
(`data.interleave_probs`, comma-separated as in the LLaMA-Factory-style data arguments).

`data.train_files` lists entries (files, dataset folders, dataset names); entry k gets probability
p_k (normalised to sum to 1). Each prompt of a batch picks an entry with those probabilities, then
takes the next row of that entry's own shuffled stream, as Hugging Face datasets'
``interleave_datasets(probabilities=..., stopping_strategy="all_exhausted")`` does (the
"interleave_over" mix; "interleave_under" is "first_exhausted"): a small file repeats while a large
one is still in its first pass, and no file is cut short. Why not "first_exhausted": it ends the
data when the smallest file runs out, while an RL run's length is set by its steps. ROLL documents
an `interleave_probs` key in its examples but reads none (posttrain.config.sections.data.NO_EFFECT),
so this is posttrain's own key.

The draws are `posttrain.data.domains.DomainSampler`'s with one "domain" per entry: a pure
function of (seed, batch number, entry epoch), so a resumed run continues exactly.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.sections.data import DataConfig, parse_interleave_probs
from posttrain.data.domains import DomainSampler
from posttrain.errors import ConfigError


def entry_positions(dataset: Any, entries: int) -> list[list[int]]:
    """The dataset positions of each listed entry's rows (rows dropped as overlong are not there)."""
    table = getattr(dataset, "table", None)
    if table is None or not hasattr(dataset, "indices"):
        raise ConfigError("data.interleave_probs draws rows by the file they came from; a data.custom_cls dataset does not "
                          "say which file an example came from, so leave one of the two unset")
    out: list[list[int]] = [[] for _ in range(entries)]
    for k, i in enumerate(dataset.indices):
        out[table.entry_of(i)].append(k)
    return out


def make_file_sampler(cfg: DataConfig, dataset: Any) -> DomainSampler:
    """Batches drawn by listed entry with data.interleave_probs; an entry at probability 0 is never
    drawn, and a drawn entry whose rows were all dropped (data.filter_overlong_prompts) is refused."""
    entries = list(cfg.train_files)
    probs = parse_interleave_probs(cfg.interleave_probs, len(entries))
    positions = entry_positions(dataset, len(entries))
    names = [f"{k}:{entry}" for k, entry in enumerate(entries)]  # the index keeps a file listed twice apart
    empty = [entries[k] for k, p in enumerate(probs) if p > 0 and not positions[k]]
    if empty:
        raise ConfigError(f"data.interleave_probs: no row of {', '.join(empty)} is left (data.filter_overlong_prompts "
                          "dropped them all); give it probability 0 or raise data.max_prompt_length")
    drawn = {names[k]: p for k, p in enumerate(probs) if p > 0}
    domains = {names[k]: positions[k] for k, p in enumerate(probs) if p > 0}
    return DomainSampler(domains, drawn, cfg.train_batch_size, seed=cfg.seed, shuffle=cfg.shuffle, setting="data.interleave_probs")
