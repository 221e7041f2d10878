"""Validation entries with column names of their own (data.val_file_keys).

Benchmarks name their columns differently (``problem``/``answer``, ``question``/``solution``), and a
stage validates on several of them at once. Rather than teach every reader of a row about per-file
columns, the rows of such an entry are given the stage's column names when they are read: the cell
of the entry's own prompt column is stored under data.prompt_key (and the same for the response),
so templating, truncation and the reward's ground truth read them as any other row.
"""

from __future__ import annotations

import os
from typing import Any

from posttrain.config.sections.data import DataConfig
from posttrain.data.files import RowTable
from posttrain.errors import ConfigError, DataError

KEYS = ("prompt_key", "response_key")


def own_columns(cfg: DataConfig, entries: list[str]) -> dict[int, dict[str, str]]:
    """{index of the entry in `entries`: {stage column: the entry's own column}}; a data.val_file_keys
    key that is no entry, or an unknown inner key, is a ConfigError naming it."""
    where = {os.path.expanduser(e): k for k, e in enumerate(entries)}
    out: dict[int, dict[str, str]] = {}
    for entry, keys in cfg.val_file_keys.items():
        k = where.get(os.path.expanduser(entry))
        if k is None:
            raise ConfigError(f"data.val_file_keys: {entry!r} is not an entry of data.val_files {list(cfg.val_files)}; "
                              "write the entry as data.val_files lists it")
        unknown = sorted(set(keys) - set(KEYS))
        if unknown:
            raise ConfigError(f"data.val_file_keys.{entry}: {unknown} are not column settings; use {list(KEYS)}")
        out[k] = {getattr(cfg, name): column for name, column in keys.items()}
    return out


def rename_entry_columns(table: RowTable, renames: dict[int, dict[str, str]], entries: list[str]) -> None:
    """Store each entry's own columns (`own_columns`) under the stage's names (module docstring),
    in place; a row without its entry's column is a DataError naming file, row and setting."""
    for f, start in enumerate(table.starts):
        columns = renames.get(table.entries[f])
        if not columns:
            continue
        end = table.starts[f + 1] if f + 1 < len(table.starts) else len(table.rows)
        for i in range(start, end):
            table.rows[i] = _renamed(table, i, columns, entries[table.entries[f]])


def _renamed(table: RowTable, i: int, columns: dict[str, str], entry: str) -> dict[str, Any]:
    row = dict(table.rows[i])
    for stage, own in columns.items():
        if own not in row:
            raise DataError(f"{table.locate(i)} has no column '{own}' (data.val_file_keys of {entry}); its columns are {sorted(row)}")
        row[stage] = row[own]
    return row
