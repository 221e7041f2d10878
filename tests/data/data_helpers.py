"""Helpers for the data tests: expected ids under the tiny tokenizer and writers for every file format."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def ids(text: str) -> list[int]:
    """Expected ids of plain text under the tiny tokenizer (no special tokens in `text`)."""
    return [4 if c == "\n" else ord(c) - 27 for c in text]


def chatml_ids(*turns: tuple[str, str], generation_prompt: bool = False) -> list[int]:
    """Expected ids of ChatML turns ((role, content), ...), optionally with the assistant header."""
    out: list[int] = []
    for role, content in turns:
        out += [1] + ids(f"{role}\n{content}") + [2] + ids("\n")
    if generation_prompt:
        out += [1] + ids("assistant\n")
    return out


def write_rows(path: Path, rows: list[dict[str, Any]]) -> str:
    """Write rows in the format named by the file's extension; return the path as a string."""
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["prompt"])
            writer.writeheader()
            writer.writerows(rows)
    else:
        raise ValueError(path)
    return str(path)


def verl_row(question: str, answer: str, source: str = "sort") -> dict[str, Any]:
    """A row in verl's RL layout."""
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": "train", "index": 0},
    }
