"""Reading data files into rows, and naming the file and row of every cell for error messages.

Formats: parquet (pyarrow), jsonl (one JSON object a line), json (a list of objects, or an object
of equal-length columns), csv (every cell a string). Rows are plain dicts; several files are read
in order into one `RowTable` that remembers which file and row each global index came from, so a
bad cell found anywhere later is reported as ``<file>: row <i>, column '<key>'``. Rows are
counted from 0 within each file, as pyarrow and pandas count them.

Why python's json/csv and not pyarrow for jsonl/csv: pyarrow infers one type per column and fails
on the whole file when one row disagrees; parsing row by row lets the error name the row.
"""

from __future__ import annotations

import bisect
import csv
import io
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from posttrain.errors import DataError
from posttrain.files import read_utf8

FORMATS = (".parquet", ".jsonl", ".json", ".csv")

_MISSING = object()


def as_file_list(files: str | Iterable[str] | None, base_dir: str | None = None) -> list[str]:
    """One path or a list of paths → a list, relative paths resolved against `base_dir`."""
    if files is None:
        return []
    paths = [files] if isinstance(files, (str, os.PathLike)) else list(files)
    out = []
    for p in paths:
        p = os.path.expanduser(os.fspath(p))
        out.append(os.path.join(base_dir, p) if base_dir and not os.path.isabs(p) else p)
    return out


def _format_of(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise DataError(f"{path}: unsupported data file type '{ext}'; use one of {', '.join(FORMATS)}")
    if not os.path.isfile(path):
        raise DataError(f"{path}: data file not found; check the path (relative paths start at the working directory or data.dataset_dir)")
    return ext


def read_rows(path: str) -> list[dict[str, Any]]:
    """Every row of one data file, as dicts. Raises DataError for a missing/unreadable/bad file."""
    ext = _format_of(path)
    if ext == ".parquet":
        rows = _read_parquet(path)
    elif ext == ".jsonl":
        rows = _read_jsonl(path)
    elif ext == ".json":
        rows = _read_json(path)
    else:
        rows = _read_csv(path)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{path}: row {i} is a {type(row).__name__}, not an object with named columns")
    return rows


def count_rows(path: str) -> int:
    """Rows in one data file, cheaply where the format allows (parquet reads only its footer)."""
    ext = _format_of(path)
    if ext == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(path).metadata.num_rows
        except Exception as e:  # pyarrow raises several types for a corrupt file
            raise DataError(f"{path}: not a readable parquet file ({e})") from e
    if ext == ".jsonl":
        return sum(1 for line in read_utf8(path, DataError).splitlines() if line.strip())
    return len(read_rows(path))


def _read_parquet(path: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from e


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    rows = []
    for lineno, line in enumerate(read_utf8(path, DataError).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {lineno} is not valid JSON ({e.msg} at column {e.colno})") from e
    return rows


def _read_json(path: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(read_utf8(path, DataError))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from e
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
        lengths = {len(v) for v in data.values()}
        if len(lengths) != 1:
            raise DataError(f"{path}: the columns have different lengths {sorted(lengths)}; every column needs one value per row")
        keys = list(data)
        return [{k: data[k][i] for k in keys} for i in range(lengths.pop())]
    raise DataError(f"{path}: expected a JSON list of row objects (or an object of equal-length column lists)")


def _read_csv(path: str) -> list[dict[str, Any]]:
    text = read_utf8(path, DataError)
    try:
        return [dict(r) for r in csv.DictReader(io.StringIO(text, newline=""))]
    except csv.Error as e:
        raise DataError(f"{path}: not a readable csv file ({e})") from e


@dataclass
class RowTable:
    """Rows of one or more files, in order, with the file and in-file row of each global index."""

    rows: list[dict[str, Any]]
    paths: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # global index of each file's first row
    entries: list[int] = field(default_factory=list)  # which listed entry (data.train_files item) each file came from

    def __len__(self) -> int:
        return len(self.rows)

    def append(self, label: str, rows: list[dict[str, Any]], setting: str, entry: int | None = None) -> None:
        """Add the rows of one file (`label` names it in messages) read for listed entry `entry`
        (default: one entry per file); a file without rows is a DataError naming it and the
        setting that listed it."""
        if not rows:
            raise DataError(f"{label}: no rows (from {setting}); a data file needs at least one row")
        self.paths.append(label)
        self.entries.append(len(self.paths) - 1 if entry is None else entry)
        self.starts.append(len(self.rows))
        self.rows.extend(rows)

    def where(self, index: int) -> tuple[str, int]:
        """(file, row within that file) of a global row index."""
        k = bisect.bisect_right(self.starts, index) - 1
        return self.paths[k], index - self.starts[k]

    def entry_of(self, index: int) -> int:
        """The listed entry (0-based position in data.train_files) a global row index came from."""
        return self.entries[bisect.bisect_right(self.starts, index) - 1]

    def locate(self, index: int, column: str | None = None) -> str:
        """``<file>: row <i>[, column '<c>']``: the prefix of every message about a cell."""
        path, row = self.where(index)
        return f"{path}: row {row}" + (f", column '{column}'" if column is not None else "")

    def get(self, index: int, column: str, default: Any = _MISSING, *, setting: str | None = None) -> Any:
        """The cell, or `default`; without a default a missing column is a DataError naming the
        columns the row has and the config key (`setting`) that chose the column."""
        row = self.rows[index]
        if column in row:
            return row[column]
        if default is not _MISSING:
            return default
        fix = f"; set {setting} to one of them" if setting else ""
        raise DataError(f"{self.locate(index)} has no column '{column}'; its columns are {sorted(row)}{fix}")


def load_files(files: str | Iterable[str], *, setting: str = "data.train_files") -> RowTable:
    """Read every file into one RowTable; no files or no rows is a DataError naming `setting`."""
    paths = as_file_list(files)
    if not paths:
        raise DataError(f"{setting} is empty; give at least one parquet, jsonl, json or csv file")
    table = RowTable(rows=[])
    for path in paths:
        table.append(path, read_rows(path), setting)
    return table
