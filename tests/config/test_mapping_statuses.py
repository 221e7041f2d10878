"""docs/config-mapping.md and the dialect loaders agree: every documented key, loaded on its own
through its dialect, gets the status the document gives it.

A supported key is translated, a no-effect key dropped, a not-implemented key refused as not
implemented yet when set to another value than its default, an unsupported key refused. The value
each key is loaded with: a rule's own sample, else the field's default, else `SAMPLES`.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from posttrain.config.dialects import translate, verl
from posttrain.config.dialects.index import native_paths
from posttrain.config.mapping import dialect_rules, mapping_rows
from posttrain.config.sections.reward import JUDGE_KEYS

# Values for keys whose field default is not a value the loader takes on its own.
SAMPLES: dict[str, Any] = {
    **{f"roll:{role}.device_mapping": "list(range(0,2))" for role in ("actor_train", "actor_infer", "reference", "critic")},
    "trinity:model.lora_configs": [{"lora_rank": 8, "lora_alpha": 16}],
    "roll:rewards.*.query_filter_config.type": "std_filter",
    "roll:rewards.*.generating_args": {"max_new_tokens": 8},
    "roll:rewards.*.strategy_args.strategy_name": "vllm",
    "trinity:algorithm.policy_loss_fn": "ppo",  # Trinity-RFT's names (posttrain's vanilla is its ppo)
    "trinity:algorithm.advantage_fn_args": {"gae_whiten": False},  # an option of its default type's (ppo) estimator, gae
}
_JUDGE = "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker"
_MATH = "roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker"
_CROSSTHINK = "roll.pipeline.rlvr.rewards.crossthinkqa_rule_reward_worker.CrossThinkQARuleRewardWorker"


def _context(row) -> dict[str, Any]:
    """The other keys of the file a key needs to act (where it would be dropped without them)."""
    tool = re.search(r"tool_config\.(npu|nsys|torch_memory)\.", row.key)
    rule = dialect_rules().get(f"{row.framework}:{row.key}")
    if tool:  # a profiler's own options act only when that profiler is the one chosen
        return {"global_profiler.tool": tool.group(1), **(dict(rule.context) if rule is not None else {})}
    if row.framework == "roll" and row.key.endswith((".lora_rank", ".lora_alpha", ".autocast_adapter_dtype")):
        return {row.key.rpartition(".")[0] + ".lora_target": "q_proj"}  # LoRA is off in ROLL without a target
    if row.framework == "roll" and row.key.startswith("rewards.*.strategy_args."):  # a judge's engine (roll_judge)
        engine = "sglang" if row.key.endswith((".mem_fraction_static", ".context_length")) else "vllm"
        return {"rewards.w.worker_cls": _JUDGE, "rewards.w.strategy_args.strategy_name": engine,
                "rewards.w.strategy_args.strategy_config.load_format": "auto"}
    if row.framework == "roll" and row.key.startswith("rewards.*.") and row.key != "rewards.*.worker_cls":
        name = row.key.split(".")[2]
        judge = name in JUDGE_KEYS or row.key == "rewards.*.data_args.template"  # a judge's data_args.template acts on it
        worker = _JUDGE if judge else _CROSSTHINK if name in ("reward_type", "response_length_penalty_coef") else _MATH
        extra = {"rewards.w.query_filter_config.type": "std_filter"} if name == "query_filter_config" and row.key.endswith("filter_args") else {}
        return {"rewards.w.worker_cls": worker, **extra}
    if row.framework == "roll" and row.key == "reward_system_config":  # refused only beside the remote worker that reads it
        return {"rewards.r.worker_cls": "roll.pipeline.rlvr.rewards.remote_reward_system_worker.RemoteRewardSystemWorker"}
    if row.framework == "trinity" and row.key == "algorithm.advantage_fn_args.std_threshold":
        return {"algorithm.algorithm_type": "grpo"}  # an option of the group estimators, not of ppo's gae
    if row.framework == "trinity" and row.key in ("algorithm.advantage_fn_args.mu", "algorithm.advantage_fn_args.max_frac"):
        return {"algorithm.algorithm_type": "grpo", "algorithm.advantage_fn": "clipv"}  # options of the Clip_V token filter
    if row.framework == "trinity" and row.key == "explorer.rollout_model.engine_num":
        return {"cluster.gpu_per_node": 4}  # engines need devices to be placed on
    rule = dialect_rules().get(f"{row.framework}:{row.key}")
    return dict(rule.context) if rule is not None else {}


def _tree(key: str, value: Any, context: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for dotted, v in {**context, key: value}.items():
        node = tree
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = v
    return tree


def _other_than(default: Any) -> Any:
    """A value of the default's type that differs from it (what a not-implemented field refuses)."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1
    if isinstance(default, list):
        return ["x"]
    if isinstance(default, dict):
        return {"x": 1}
    return "xyz"


def _sample(row) -> Any:
    ref = f"{row.framework}:{row.key}"
    if ref in SAMPLES:
        return SAMPLES[ref]
    if ref == "roll:rewards.*.worker_cls":
        return _MATH
    rules = dialect_rules()
    if ref in rules:
        return rules[ref].sample
    info = native_paths().get(row.native) if row.native else None
    if row.status.startswith("not supported"):
        return 12345
    if row.status.startswith("no effect"):
        return "anything"
    default = info.default() if info is not None and info.has_default() else None
    if row.status.startswith("not implemented"):
        value = _other_than(default)
        while row.framework == "verl" and verl.is_default(row.key, value):  # verl's own default is left out
            value = _other_than(value)
        if value == default:  # a flag whose two values are posttrain's default and verl's: none is refused
            pytest.skip(f"{ref}: both values are accepted (posttrain's default {default!r}, verl's own the other)")
        return value
    if row.status.startswith("supported") and default in (None, [], {}, ""):
        return 2
    return default


EXPECTED = {"supported": "translated", "no effect": "dropped", "not implemented yet": "refused", "not supported": "refused"}
ROWS = [r for r in mapping_rows()]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.framework}:{r.key}")
def test_each_documented_key_loads_with_its_documented_status(row):
    key = row.key.replace("*", "w")
    ref = f"{row.framework}:{row.key}"
    value = _sample(row)
    _, report = translate(_tree(key, value, _context(row)), row.framework)
    entries = [e for e in report.entries if e.key == key] or [
        e for e in report.entries if e.key.startswith((key + ".", key + "[")) or key.startswith(e.key + ".")]
    assert entries, f"{ref}: the loader said nothing of {key}={value!r}"
    status = row.status.split(":")[0]
    got = {e.status for e in entries}
    assert got == {EXPECTED[status]}, f"{ref}={value!r}: documented {row.status!r}, the loader: {[e.line() + ' [' + e.status + ']' for e in entries]}"
    if status == "not implemented yet":
        assert all("not implemented yet" in e.reason for e in entries), [e.line() for e in entries]
