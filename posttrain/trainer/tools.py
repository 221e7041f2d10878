"""Tool calling in an RL stage (`rollout.multi_turn.enable`): its checks, its prompts, its rollout.

With tool calling on, the stage still answers prompts from data files, but the tool schemas of
`rollout.multi_turn.tool_config_path` go into every prompt through the chat template (as verl
passes `tools=` to it), and each response is a conversation played by `posttrain.rollout.tool_loop`
instead of one `generate` call. Other stages of the same run (an SFT warm-up on tool traces) render
the same tools into their conversations, so they train on the prompts RL will show.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from posttrain.config.schema import Config
from posttrain.config.sections.data import DataConfig
from posttrain.data.dataset import make_formatter
from posttrain.tools import load_tool_config
from posttrain.errors import ConfigError
from posttrain.rollout.tool_loop import ToolRollout
from posttrain.trainer.agentic import is_agentic

KEY = "rollout.multi_turn"


def uses_tools(cfg: Config) -> bool:
    return cfg.rollout.multi_turn.enable


def check_tools(cfg: Config) -> list[dict[str, Any]]:
    """Every check of the multi-turn keys before a model is loaded; the tool schemas."""
    mt = cfg.rollout.multi_turn
    problems = []
    idle = [k for k in ("tool_config_path", "interaction_config_path") if getattr(mt, k)]
    if idle and not mt.enable and cfg.algorithm.kind == "rl":
        problems.append(f"{KEY}.{idle[0]}: set, but {KEY}.enable is false, so no tool would be called; set {KEY}.enable: true or remove it")
    if mt.enable and cfg.algorithm.kind == "rl":
        if is_agentic(cfg):
            problems.append(f"{KEY}.enable: an agentic stage (env.train_env_manager.tags) plays environments; tool calling answers "
                            "prompts from data files: use one or the other")
        if not (mt.tool_config_path or mt.interaction_config_path):
            problems.append(f"{KEY}.enable: needs {KEY}.tool_config_path (the tools) or {KEY}.interaction_config_path")
        if mt.use_inference_chat_template and not cfg.data.return_raw_chat:
            problems.append(f"{KEY}.use_inference_chat_template: re-renders each prompt's messages, which needs data.return_raw_chat: true")
        if "tools" in cfg.data.apply_chat_template_kwargs:
            problems.append(f"data.apply_chat_template_kwargs.tools: the tools come from {KEY}.tool_config_path; remove it")
    if problems:
        raise ConfigError(problems)
    if not (mt.enable and mt.tool_config_path):
        return []
    return [spec.schema for spec in load_tool_config(mt.tool_config_path)]


def data_with_tools(cfg: Config) -> DataConfig:
    """`cfg.data` with the tool schemas as the template's `tools` (unchanged without tool calling)."""
    schemas = check_tools(cfg)
    if not schemas:
        return cfg.data
    return dataclasses.replace(cfg.data, apply_chat_template_kwargs={**cfg.data.apply_chat_template_kwargs, "tools": schemas})


def make_tool_rollout(cfg: Config, tokenizer: Any, run_dir: Path) -> ToolRollout | None:
    """The stage's tool rollout, or None without tool calling; the code interpreter never sees `run_dir`."""
    if not (uses_tools(cfg) and cfg.algorithm.kind == "rl"):
        return None
    data = data_with_tools(cfg)
    formatter = make_formatter(data, tokenizer)
    kwargs = {k: v for k, v in formatter.template_kwargs.items() if k != "tools"}
    return ToolRollout(cfg.rollout.multi_turn, tokenizer, formatter.chat_template, kwargs,
                       cfg.data.max_prompt_length, hidden_paths=[str(run_dir)])
