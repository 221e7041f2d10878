"""ROLL's ProxyEnvManager driving its GEMRunner, read as posttrain's prompt_mode conversation.

In ROLL (roll/pipeline/agentic/env_manager/proxy_env_manager.py, agent_runner/gem_runner.py) the
runner plays a local env and asks an OpenAI-style endpoint for each action; the manager behind that
endpoint renders the messages, generates, and records the tokens for training (message_tracker.py).
What that pair plays is prompt_mode conversation (ROLL's TrajEnvManager) with these differences,
which an entry under the pair gets as posttrain keys unless it sets them itself:

- ``instruction_in: system``: the system message is ``agent_system_template`` followed by a blank
  line and the env instruction (the template alone when the env has none); the first user message is
  the agent_template alone.
- ``env_suffix: false``: the runner writes the template's ``{suffix}`` as "" (it never reads the env's).
- ``enable_thinking``: the manager renders with ``env_config.enable_thinking`` (ROLL reads it as
  ``env_config.config.enable_thinking``, default false), each entry its own.

The manager's other settings sit inside env_config too and are taken out of it here (the env class
never sees them):

- ``trajectory_mode``: ``traj`` (ROLL's default) trains one sample per episode, the whole
  conversation with the episode score on its last token, as posttrain's conversation mode does.
  ``step`` (one sample per model call, the score on the last only) is refused.
- ``reward_granularity``: the manager picks that field of the runner's result, else its ``score``;
  GEMRunner's result has no ``pass_rate`` or ``binary`` field, so those (and ``score``) all mean the
  episode's summed env reward. Another value names no number ROLL can use: refused.
- ``enable_fork``: the tracker trains every branch of a conversation whose history was rewritten,
  else the longest one; GEMRunner only appends to its messages, so there is one branch either way.
- ``tool_call_parser``: GEMRunner sends no tools, so the manager never parses a tool call.

Token accounting agrees with posttrain's: ROLL's tracker tokenizes each new message once (the system
message alone, a user message as the tail of a fixed two-message conversation, the last with the
generation prompt) and keeps each response's generated ids, joining an assistant turn to the next
user turn with one newline token; posttrain renders the first prompt whole and each observation as
the chat template's difference after the action, which for templates that append (the ones posttrain
accepts) are the same tokens, and trains the same ones (the actions). Where they differ: an action cut
at max_tokens_per_step ends without the end-of-turn token, and posttrain writes the template's close
("<|im_end|>\\n") after it where ROLL writes only the newline. And the length limit: both end the
episode once its context reaches sequence_length (posttrain's model.max_model_len), but ROLL's manager
does it by refusing the request, which fails the runner's episode (score 0), where posttrain's loop
ends it truncated, keeping its reward (docs/agentic.md).
"""

from __future__ import annotations

from typing import Any

PROXY = "roll.pipeline.agentic.env_manager.proxy_env_manager.ProxyEnvManager"
GEM_RUNNER = "roll.pipeline.agentic.agent_runner.gem_runner.GEMRunner"
TRAJECTORY_MODES = ("traj",)
GRANULARITIES = ("pass_rate", "binary", "score")
# the manager's settings inside env_config (checked in _problems), taken out before the env class sees it
_MANAGER_SETTINGS = ("enable_thinking", "trajectory_mode", "reward_granularity", "enable_fork", "tool_call_parser")
_RUNNER = ("posttrain plays ROLL's ProxyEnvManager with its GEMRunner (a text env, prompt_mode conversation); "
           "another runner (ToolCallRunner, ROCK's) drives the env in a way posttrain's loop does not")


def proxy_entry(entry: dict[str, Any], key: str) -> tuple[dict[str, Any], list[str]]:
    """``entry`` with ProxyEnvManager's settings as posttrain keys, and the problems; an entry under
    another manager comes back as it is (``agent_runner_cls`` then says nothing: ROLL's other managers
    do not read it)."""
    if entry.get("env_manager_cls") != PROXY:
        return entry, []
    runner = entry.get("agent_runner_cls")
    problems = [] if runner == GEM_RUNNER else [f"{key}.agent_runner_cls: {runner!r}: not supported: {_RUNNER}"]
    raw = entry.get("env_config")
    entry, env_config = dict(entry), dict(raw) if isinstance(raw, dict) else {}  # another type: the entry's own check names it
    settings = {k: env_config.pop(k) for k in _MANAGER_SETTINGS if k in env_config}
    problems += _problems(settings, key)
    if "enable_thinking" in settings and entry.get("enable_thinking", settings["enable_thinking"]) != settings["enable_thinking"]:
        problems.append(f"{key}: enable_thinking is {entry['enable_thinking']!r} and env_config.enable_thinking is "
                        f"{settings['enable_thinking']!r}; keep one")
    entry.setdefault("enable_thinking", settings.get("enable_thinking", False))  # ROLL's default: false
    entry.setdefault("instruction_in", "system")
    entry.setdefault("env_suffix", False)
    entry["agent_runner_cls"] = None  # read: posttrain's loop is the runner
    if isinstance(raw, dict):
        entry["env_config"] = env_config
    return entry, problems


def _problems(settings: dict[str, Any], key: str) -> list[str]:
    out = []
    mode = settings.get("trajectory_mode", "traj")
    if mode == "step":
        out.append(f"{key}.env_config.trajectory_mode: step: not supported: ROLL then trains one sample per model call with the "
                   "episode score on the last one only, and posttrain's per-turn rows (env.train_rows: turn) carry the "
                   "episode's advantage on every turn; use traj (one sample per episode)")
    elif mode not in TRAJECTORY_MODES:
        out.append(f"{key}.env_config.trajectory_mode: {mode!r}; choose traj")
    granularity = settings.get("reward_granularity", "pass_rate")
    if granularity not in GRANULARITIES:
        out.append(f"{key}.env_config.reward_granularity: {granularity!r}: not supported: GEMRunner's result gives the "
                   f"episode's summed reward only, which {list(GRANULARITIES)} all select")
    for name in ("enable_thinking", "enable_fork"):
        if name in settings and not isinstance(settings[name], bool):
            out.append(f"{key}.env_config.{name}: true or false, got {settings[name]!r}")
    if "tool_call_parser" in settings and not isinstance(settings["tool_call_parser"], str):
        out.append(f"{key}.env_config.tool_call_parser: a parser name, got {settings['tool_call_parser']!r}")
    return out
