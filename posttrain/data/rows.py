"""Reading the cells of one row as the `data` config says: prompt, response, pair, RL fields.

Every function takes the `RowTable` and a global row index so that any bad cell is reported as
``<file>: row <i>, column '<key>'`` with the config key that chose the column.
"""

from __future__ import annotations

import json
from typing import Any

from posttrain.config.sections.data import DataConfig
from posttrain.data.files import RowTable
from posttrain.data.prompts import Message, as_messages, check_messages, follow_keys
from posttrain.data.tool_n1 import tool_n1_messages
from posttrain.data.video_r1 import video_r1_messages
from posttrain.errors import DataError


def prompt_cell(table: RowTable, i: int, cfg: DataConfig) -> tuple[Any, list[Message], str]:
    """(raw cell, prompt messages without system prompt, column) of row i: `messages_key` when
    set, else `prompt_key` (a string becomes one user message); Tool-N1 rows (data.prompt_format)
    are built from their columns."""
    if cfg.prompt_format == "tool_n1":
        messages = tool_n1_messages(table, i)
        return messages, messages, "conversations"
    if cfg.prompt_format == "video_r1":
        messages = video_r1_messages(table, i)
        return table.get(i, "problem"), messages, "problem"
    if cfg.messages_key is not None:
        col = cfg.messages_key
        raw = table.get(i, col, setting="data.messages_key")
        return raw, check_messages(raw, what=table.locate(i, col)), col
    col = cfg.prompt_key
    raw = table.get(i, col, setting="data.prompt_key")
    value = follow_keys(raw, cfg.prompt_dict_keys, what=table.locate(i, col), setting="data.prompt_dict_keys")
    if cfg.query_key is not None:
        value = with_query(table, i, cfg, value)
    return value, as_messages(value, what=table.locate(i, col)), col


def with_query(table: RowTable, i: int, cfg: DataConfig, prompt: Any) -> str:
    """The prompt text, then a newline and the row's `query_key` cell when that is non-empty (ROLL's
    SFT pipeline writes the user turn as ``prompt + "\n" + query``; an empty or null query adds
    nothing, not even the newline)."""
    if not isinstance(prompt, str):
        raise DataError(f"{table.locate(i, cfg.prompt_key)}: data.query_key joins a query to a string prompt, got {type(prompt).__name__}")
    query = table.get(i, cfg.query_key, setting="data.query_key")
    if query is not None and not isinstance(query, str):
        raise DataError(f"{table.locate(i, cfg.query_key)}: expected a string query (or null), got {type(query).__name__}")
    return prompt + ("\n" + query if query else "")


def row_system_prompt(table: RowTable, i: int, cfg: DataConfig) -> str | None:
    """The row's own system prompt (`system_prompt_key`), else None (the formatter's default)."""
    if cfg.system_prompt_key is None:
        return None
    value = table.get(i, cfg.system_prompt_key, setting="data.system_prompt_key")
    if value is None:
        return None
    if not isinstance(value, str):
        raise DataError(f"{table.locate(i, cfg.system_prompt_key)}: expected a string system prompt, got {type(value).__name__}")
    return value


def response_text(table: RowTable, i: int, cfg: DataConfig) -> str:
    """The SFT response string of row i (`response_key`, through `response_dict_keys`)."""
    col = cfg.response_key
    where = table.locate(i, col)
    value = follow_keys(table.get(i, col, setting="data.response_key"), cfg.response_dict_keys, what=where, setting="data.response_dict_keys")
    if not isinstance(value, str):
        raise DataError(f"{where}: expected a string response, got {type(value).__name__}")
    return value


def sft_conversation(table: RowTable, i: int, cfg: DataConfig) -> tuple[list[Message], int, str]:
    """(messages, first message the loss may cover, column) of an SFT row: a whole conversation
    under `messages_key` (loss on every assistant turn, or with `sft_loss_turns: last` on the final
    message only), or prompt + response (loss on the response)."""
    raw, messages, col = prompt_cell(table, i, cfg)
    if cfg.messages_key is not None:
        # last: earlier assistant turns are context, as when Trinity-RFT renders messages[:-1] as the prompt
        return messages, (len(messages) - 1 if cfg.sft_loss_turns == "last" else 0), col
    return [*messages, {"role": "assistant", "content": response_text(table, i, cfg)}], len(messages), cfg.response_key


def completion(table: RowTable, i: int, column: str, setting: str) -> list[Message]:
    """A DPO side: a string becomes one assistant message; a list must be chat messages."""
    return as_messages(table.get(i, column, setting=setting), what=table.locate(i, column), role="assistant")


def ground_truth(table: RowTable, i: int, cfg: DataConfig) -> Any:
    """verl's ``reward_model.ground_truth``; rows without a reward_model column fall back to the
    `response_key` column (Trinity's taskset answer), else None (e.g. model-based rewards)."""
    reward_model = table.get(i, "reward_model", None)
    if reward_model is None:
        return table.get(i, cfg.response_key, None)
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise DataError(f"{table.locate(i, 'reward_model')}: expected an object with a 'ground_truth' key (verl's layout: {{style, ground_truth}}), got {type(reward_model).__name__}")
    return reward_model["ground_truth"]


def data_source(table: RowTable, i: int, cfg: DataConfig) -> str:
    """The row's data source (`reward_fn_key`). Files without the default 'data_source' column
    give ""; a column named explicitly must exist."""
    col = cfg.reward_fn_key
    if col == "data_source":
        value = table.get(i, col, "")
    else:
        value = table.get(i, col, setting="data.reward_fn_key")
    return "" if value is None else str(value)


def extra_info(table: RowTable, i: int, keys: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """verl's free-form ``extra_info`` object ({} when absent), with the row's ``keys`` columns
    (data.extra_info_keys) added under their own names."""
    value = table.get(i, "extra_info", None)
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise DataError(f"{table.locate(i, 'extra_info')}: expected an object, got {type(value).__name__}")
    added = {key: table.get(i, key) for key in keys if table.get(i, key, None) is not None}
    clash = sorted(set(added) & set(value))
    if clash:
        raise DataError(f"{table.locate(i, clash[0])}: extra_info already has '{clash[0]}', and data.extra_info_keys copies the "
                        "column of that name into it; rename one of them")
    return {**value, **added} if added else value


def row_tools(table: RowTable, i: int, cfg: DataConfig) -> list[dict[str, Any]] | None:
    """The row's tool schemas (`tools_key`: a list of objects, or its JSON text), for the chat
    template's `tools`; None when the key is unset or the row has no such cell (or null)."""
    if cfg.tools_key is None:
        return None
    value = table.get(i, cfg.tools_key, None)
    if isinstance(value, str):  # csv cells and some exports hold the list as JSON text
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise DataError(f"{table.locate(i, cfg.tools_key)}: not valid JSON ({e.msg}); give a list of tool schemas") from e
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise DataError(f"{table.locate(i, cfg.tools_key)}: expected a list of tool schemas (objects), got {type(value).__name__}")
    return value
