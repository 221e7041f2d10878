"""Silence transformers' progress bars and expected load reports for the duration of a call.

Why: posttrain saves and loads tiny models hundreds of times in tests and examples; transformers
prints a progress bar per save/load and a "LOAD REPORT" table whenever a head is newly initialised
(which is exactly what loading a causal LM as a critic does). That noise hides real warnings. The
previous settings are restored on exit, so user code that wants the bars keeps them.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from transformers.utils import logging as hf_logging


@contextmanager
def quiet_transformers(*, hide_warnings: bool = False) -> Iterator[None]:
    """Disable progress bars (and, with `hide_warnings`, warnings) inside the block."""
    bars_were_on = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    if hide_warnings:
        hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
        hf_logging.set_verbosity(verbosity)
