"""ROLL's per-env-manager sampling settings (``train_env_manager.generating_args`` and
``val_env_manager.generating_args``) onto posttrain's rollout.* and rollout.val_kwargs.*.

ROLL's agentic config (roll/pipeline/agentic/agentic_config.py) decides who samples with what:
``actor_infer.generating_args``, when set, replaces both managers' own (so theirs change nothing);
otherwise the training manager's becomes the engine's, and the validation manager keeps its own.
``num_return_sequences`` is forced to 1 for both (a group is group_size environments, not n
samples). A manager's ``max_new_tokens`` caps each turn together with the environment's
``max_tokens_per_step`` (the smaller wins), so it changes nothing where every environment the manager
runs has a per-step cap at most that large, and is the manager's own per-turn cap (env.<manager>.max_new_tokens)
where one has a looser cap or none.
ROLL's environment managers apply the chat template with ``enable_thinking=False`` whatever the
file's template name says (roll/pipeline/agentic/env_manager/token_mask_utils.py), so an agentic
pipeline file gets ``data.enable_thinking: false`` (a Qwen3 template then writes its empty thinking
block after each generation prompt, as ROLL's prompts have it).
Lengths: ROLL's environment managers bound an episode by ``sequence_length`` alone (the prompt and
everything after it: a turn generates at most ``sequence_length`` minus its input, and the episode
stops once its input reaches it), and read neither ``prompt_length`` nor ``response_length``. So
``sequence_length`` is posttrain's model.max_model_len, which bounds every agent-loop context the same
way, and the first prompt and the response may each take up to ``sequence_length - 1`` tokens
(data.max_prompt_length, data.max_response_length): only the sum binds. ``actor_infer.generating_args``
reaches both managers, so its ``max_new_tokens`` is a per-turn cap of every environment they run, as a
manager's own is.
Validation generates with the validation manager's settings, sampling unless it says
``do_sample: false`` (ROLL's GeneratingArguments default, temperature 0.95, top_p 0.7, top_k 50, is
what the file leaves out).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.roll_defaults import GENERATING_DEFAULTS, ROLL_DEFAULT, is_pipeline
from posttrain.config.dialects.roll_lengths import PROMPT_DEFAULT, whole
from posttrain.config.dialects.roll_roles import agentic
from posttrain.config.dialects.report import Entry
from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

_SAMPLING = ("temperature", "top_p", "top_k", "do_sample")
_TRAIN_ONLY = {"repetition_penalty": "rollout.repetition_penalty"}


def env_manager_sampling(ctx: Context) -> None:
    for manager, native in (("train_env_manager", "rollout"), ("val_env_manager", "rollout.val_kwargs")):
        key = f"{manager}.generating_args"
        args = ctx.get(key)
        if args is None:
            continue
        ctx.consume(key)
        if not isinstance(args, dict):
            ctx.refuse(key, "expected a mapping of sampling settings", None, args)
        elif ctx.get("actor_infer.generating_args"):
            ctx.drop(key, "ROLL replaces it with actor_infer.generating_args when that is set (its agentic config), as posttrain samples with rollout.*")
        else:
            _manager(ctx, manager, native, args)


def agentic_thinking(ctx: Context) -> None:
    if is_pipeline(ctx) and ctx.has("train_env_manager"):
        ctx.set("data.enable_thinking", False, "train_env_manager", "ROLL's environment managers render every turn with enable_thinking=False")


def _manager(ctx: Context, manager: str, native: str, args: dict[str, Any]) -> None:
    prefix = f"{manager}.generating_args"
    for name, value in args.items():
        key = f"{prefix}.{name}"
        if name in _SAMPLING:
            ctx.set(f"{native}.{name}", value, key)
        elif name in _TRAIN_ONLY and manager == "train_env_manager":
            ctx.set(_TRAIN_ONLY[name], value, key)
        elif name == "num_return_sequences":
            ctx.drop(key, "ROLL sets it to 1 for an env manager: a group is group_size environments (env.*_env_manager.group_size)")
        elif name == "max_new_tokens":
            _turn_cap(ctx, [manager], key, value)
        else:
            ctx.refuse(key, f"no posttrain equivalent for an env manager's {name}: its sampling settings are temperature, top_p, top_k, do_sample" + (", repetition_penalty" if manager == "train_env_manager" else ""), None, value)
    if not is_pipeline(ctx):
        return
    for name, value in GENERATING_DEFAULTS.items():  # what ROLL samples with where the file says nothing
        if name not in args and f"{native}.{name}" not in ctx.origin:
            ctx.set(f"{native}.{name}", value, f"{prefix}.{name}", ROLL_DEFAULT)
    if "do_sample" not in args and manager == "val_env_manager":
        ctx.set(f"{native}.do_sample", True, f"{prefix}.do_sample", ROLL_DEFAULT + ": ROLL's validation samples with its generating_args")


def episode_lengths(ctx: Context) -> None:
    """An agentic file's lengths (see the module docstring)."""
    if not is_pipeline(ctx) or not agentic(ctx):
        return
    seq, prompt, resp = ctx.get("sequence_length"), ctx.get("prompt_length", PROMPT_DEFAULT), ctx.get("response_length")
    if seq is None and whole(resp) and whole(prompt):
        seq, why = resp + prompt, f"response_length {resp} + prompt_length {prompt} (ROLL's sequence_length when unset)"
    else:
        why = "ROLL's environment managers stop an episode once its input reaches sequence_length"
    if not whole(seq) or seq < 2:
        return  # the keys translate one by one and are checked there (a prompt and an action need 2 tokens)
    for name, reason in (("prompt_length", "ROLL's agentic pipeline never reads it: the first prompt and the episode share sequence_length"),
                         ("response_length", "ROLL's agentic pipeline never reads it (its config resets it once sequence_length is known)")):
        if ctx.has(name):
            ctx.consume(name)
            ctx.drop(name, reason)
    ctx.consume("sequence_length")
    source = "sequence_length" if ctx.has("sequence_length") else "response_length" if ctx.has("response_length") else "prompt_length"
    ctx.set("model.max_model_len", seq, source, why)
    ctx.set("data.max_prompt_length", seq - 1, source, f"the first prompt may take all of sequence_length {seq} but one token, as ROLL's managers allow")
    ctx.set("data.max_response_length", seq - 1, source, f"the episode after its prompt is bounded with it by model.max_model_len {seq}, as ROLL bounds it")
    key = "actor_infer.generating_args.max_new_tokens"
    if ctx.has(key):
        ctx.consume(key)
        _turn_cap(ctx, ["train_env_manager", "val_env_manager"], key, ctx.get(key))


def _turn_cap(ctx: Context, managers: list[str], key: str, value: Any) -> None:
    """ROLL's per-turn cap is min(max_new_tokens, the env's max_tokens_per_step): nothing to do where
    every environment the managers run has a cap of at most max_new_tokens, else the managers' own
    cap (env.<manager>.max_new_tokens: the entries' max_tokens_per_step keep filling their templates)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        ctx.refuse(key, f"expected a number of tokens, got {value!r}", None, value)
        return
    envs = ctx.get("custom_envs") or {}
    tags = list(dict.fromkeys(t for m in managers for t in (ctx.get(f"{m}.tags") or [])))
    entries = {tag: envs.get(tag) if isinstance(envs, dict) else None for tag in tags}
    caps = {tag: entry.get("max_tokens_per_step") if isinstance(entry, dict) else None for tag, entry in entries.items()}
    looser = sorted(str(tag) for tag, cap in caps.items() if not isinstance(cap, int) or cap > value)
    if tags and not looser:
        ctx.drop(key, f"each turn is capped by the environment's max_tokens_per_step ({', '.join(f'{t}: {caps[t]}' for t in tags)}), at most {value}: ROLL takes the smaller, so this changes nothing")
        return
    for manager in managers:
        ctx.set(f"env.{manager}.max_new_tokens", value, key, "ROLL caps each turn at the smaller of it and the environment's max_tokens_per_step"
                + (f" (looser here: {', '.join(looser)})" if looser else ""))


def group_seeded_envs(ctx: Context) -> None:
    """ROLL's env managers build each group's environment with the group's own seed in place of an
    env_config ``seed`` (TrajEnvManager: "seed" in the config is replaced by the group seed), so a seeded
    dataset environment (GEM's rg:NAME) differs from group to group: posttrain's seed_per_group."""
    envs = ctx.get("custom_envs") or {}
    if not isinstance(envs, dict):
        return
    for tag, entry in envs.items():
        config = entry.get("env_config") if isinstance(entry, dict) else None
        if isinstance(config, dict) and "seed" in config and "seed_per_group" not in entry:
            # the entries reach env.custom_envs as they are (the section's rule copies the mapping): marked in place
            entry["seed_per_group"] = True
            ctx.report.add(Entry(f"custom_envs.{tag}.env_config.seed", "translated", f"env.custom_envs.{tag}.seed_per_group", True,
                                 "ROLL's env managers build each group's environment with the group's seed in place of this one"))


_AGENTIC = (("train_env_manager.tags", ["E"]), ("custom_envs", {"E": {"env_type": "frozen_lake", "max_tokens_per_step": 16}}))
RULES: dict[str, Rule] = {
    "train_env_manager.generating_args": Rule("rollout.temperature, rollout.top_p, rollout.top_k, rollout.do_sample, rollout.repetition_penalty", "the training environments' sampling (when actor_infer.generating_args is not set: ROLL then samples with these); max_new_tokens is a per-turn cap with each environment's max_tokens_per_step (env.train_env_manager.max_new_tokens where one is looser), num_return_sequences is 1 in ROLL", {"temperature": 0.9, "top_p": 0.99}, _AGENTIC),
    "val_env_manager.generating_args": Rule("rollout.val_kwargs.temperature, rollout.val_kwargs.top_p, rollout.val_kwargs.top_k, rollout.val_kwargs.do_sample", "the validation environments' sampling (when actor_infer.generating_args is not set), sampling unless do_sample is false; max_new_tokens and num_return_sequences as for train_env_manager", {"temperature": 0.2}, _AGENTIC),
}
