"""Every rollout engine, by `rollout.name`: building one, checking the machine can run it, and
naming the settings of the engines that are not running.

Importing this module registers all engines (`posttrain.rollout.registry`): the built-in `hf` one
here, `vllm` and `sglang` from their adapter modules, which import their libraries only when an
engine is built or checked. So a config written for vLLM loads, plans and names what is missing on
a machine without vLLM or a GPU.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from posttrain.errors import UserError
from posttrain.rollout import sglang_engine, vllm_engine  # noqa: F401 (registers the vllm and sglang engines)
from posttrain.rollout.base import RolloutEngine
from posttrain.rollout.external_engine import build_external_engine, missing_environment
from posttrain.rollout.hf_engine import HFEngine
from posttrain.rollout.registry import ENGINES, MACHINE_CHECKS, engine_builder, register_engine

# an OpenAI-compatible endpoint served elsewhere (trainer.mode bench only); the machine check names
# an unset environment variable of its URL or key
register_engine("external", missing_environment)(build_external_engine)


@register_engine("hf")
def build_hf_engine(cfg: Any, model: nn.Module, tokenizer: Any, *, seed: int, owns_weights: bool) -> RolloutEngine:
    """The built-in engine over the policy module itself (EOS ids from the model's generation_config:
    Qwen-style <|im_end|> and <|endoftext|>)."""
    r = cfg.rollout
    return HFEngine(
        model, eos_token_ids=None, pad_token_id=tokenizer.pad_token_id, copy_weights=False, seed=seed,
        share_prompt_prefill=r.enable_prefix_caching, decode_workers=r.engine_kwargs.hf.decode_workers,
        max_num_seqs=r.max_num_seqs, tokenizer=tokenizer, owns_weights=owns_weights,
    )


def build_engine(cfg: Any, model: nn.Module, tokenizer: Any, *, seed: int, owns_weights: bool = False) -> RolloutEngine:
    """The engine `rollout.name` names, over `model`'s weights (see `registry.EngineBuilder`)."""
    check_engine_machine(cfg)
    return engine_builder(cfg.rollout.name)(cfg, model, tokenizer, seed=seed, owns_weights=owns_weights)


def check_engine_machine(cfg: Any) -> None:
    """A UserError of one line when this machine cannot run `rollout.name` (a package, a GPU or a
    supported version missing), saying what to install or choose instead. `config plan` runs it."""
    engine_builder(cfg.rollout.name)  # an unknown name lists the valid ones
    check = MACHINE_CHECKS.get(cfg.rollout.name)
    problem = check(cfg) if check is not None else None
    if problem is not None:
        raise UserError(f"rollout.name={cfg.rollout.name}: {problem}")


# The engines whose `generate` honours SamplingParams.deadline (stops decoding at it and flags the rows
# it cut). vLLM's and SGLang's adapters hand a batch to their library's blocking generate call, which
# has no deadline and cannot be aborted from the caller's thread.
DEADLINE_ENGINES = ("hf",)


def check_engine_deadline(cfg: Any) -> None:
    """Refuse explorer.max_timeout (and over_rollout) where the rollout engine cannot stop at a deadline: a single-turn or
    tool-calling stage hands the deadline to the engine (an agentic stage checks it between turns and
    runs on any engine). Checked where the rollout engine is built, not at `config plan`, so a
    config for vLLM plans on a CPU machine where posttrain smoke substitutes the hf engine."""
    explorer = getattr(cfg, "explorer", None)
    timeout = getattr(explorer, "max_timeout", None)
    name = cfg.rollout.name
    ratio = explorer.over_rollout.ratio if explorer is not None else 0.0
    if ratio and name not in DEADLINE_ENGINES:  # agentic stages and the rest are refused by the explorer section's checks
        raise UserError(f"explorer.over_rollout.ratio ({ratio:g}): the {name} engine (rollout.name={name}) cannot end a generation "
                        f"at a time set by how many prompt groups have finished (its library's generate call runs every request to "
                        f"its end); engines that can: {', '.join(DEADLINE_ENGINES)}. Use rollout.name=hf, or remove explorer.over_rollout")
    if timeout is None or name in DEADLINE_ENGINES or cfg.env.train_env_manager.tags:
        return
    raise UserError(f"explorer.max_timeout ({timeout:g} s): the {name} engine (rollout.name={name}) cannot stop a generation at a "
                    f"deadline (its library's generate call runs every request to its end); engines that can: "
                    f"{', '.join(DEADLINE_ENGINES)}. Use rollout.name=hf, or remove explorer.max_timeout (and max_retry_times)")


# Settings that only some engines read (the rest are read by every engine: sampling, lengths,
# free_cache_engine, max_num_seqs, enable_prefix_caching, dtype). Anything under
# rollout.engine_kwargs.<engine> belongs to that engine.
ENGINE_SETTINGS: dict[str, tuple[str, ...]] = {
    "tensor_model_parallel_size": ("vllm", "sglang"),
    "gpu_memory_utilization": ("vllm", "sglang"),
    "enforce_eager": ("vllm",),
    "load_format": ("vllm", "sglang"),
    "max_model_len": ("vllm", "sglang"),
    "max_num_batched_tokens": ("vllm", "sglang"),
    "enable_chunked_prefill": ("vllm", "sglang"),
    "disable_log_stats": ("vllm", "sglang"),
    "external": ("external",),
}


def unused_engine_settings(cfg: Any, defaults: Any) -> str | None:
    """One line naming the settings made (different from `defaults`, a default RolloutConfig) for
    engines other than `rollout.name`: accepted as those engines' settings, unused by this run."""
    r, name = cfg.rollout, cfg.rollout.name
    unused = [f"rollout.{key}" for key, engines in ENGINE_SETTINGS.items()
              if name not in engines and getattr(r, key) != getattr(defaults, key)]
    for engine in ENGINES:
        if engine != name and hasattr(r.engine_kwargs, engine):  # the external engine has no group there
            ours, default = getattr(r.engine_kwargs, engine), getattr(defaults.engine_kwargs, engine)
            unused += [f"rollout.engine_kwargs.{engine}.{k}" for k in sorted(_changed(ours, default))]
    if not unused:
        return None
    return (f"note: {', '.join(unused)}: settings of another rollout engine, unused by the {name} engine this run "
            f"uses (rollout.name={name})")


def _changed(ours: Any, default: Any) -> list[str]:
    """Keys of an engine_kwargs group that differ from the default (a section or a dict)."""
    if isinstance(ours, dict):
        return [k for k, v in ours.items() if default.get(k, object()) != v]
    return [k for k in vars(ours) if getattr(ours, k) != getattr(default, k)]

