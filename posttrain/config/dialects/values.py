"""Value conversions where a framework spells a value differently from posttrain.

Keyed by the *native* field a value lands in, so every framework's key for that field gets the same
treatment: dtype spellings (``bfloat16``/``torch.bfloat16`` -> ``bf16``), a tracker name given as a
string (ROLL's ``track_with: tensorboard``), resume booleans and paths, and ROLL's device mappings
(``"list(range(0,8))"``; a mapping that covers every device is posttrain's default, colocation).
"""

from __future__ import annotations

import ast
from typing import Any

from posttrain.config.access import devices_apart, placement_problem
from posttrain.config.dialects import machine
from posttrain.config.dialects.index import native_paths
from posttrain.config.dialects.translate import Context, refusal
from posttrain.config.sections.optim import OPTIMIZERS
from posttrain.config.sections.trainer import LOGGER_ALIASES, REFUSED_LOGGERS

DTYPE_SPELLINGS = {
    "bfloat16": "bf16", "torch.bfloat16": "bf16", "bf16": "bf16",
    "float16": "fp16", "half": "fp16", "torch.float16": "fp16", "fp16": "fp16",
    "float32": "fp32", "float": "fp32", "torch.float32": "fp32", "fp32": "fp32",
}


def value_hook(ctx: Context, key: str, value: Any, native: str) -> Any:
    """The native value for ``value`` of foreign ``key`` landing at ``native`` (raises a refusal)."""
    info = native_paths().get(native)
    if info is not None and info.choices and "bf16" in info.choices and isinstance(value, str):
        return DTYPE_SPELLINGS.get(value.lower(), value)
    if native == "trainer.logger":
        return _loggers(value)
    if native == "trainer.resume_mode":
        return _resume(ctx, key, value)
    if native.startswith("cluster.device_mapping."):
        return _device_mapping(ctx, value)
    if native == "profiler.steps" and value is None:  # verl's "no profiling"
        return []
    if native == "model.fused_kernel_impl_backend" and value == "None":
        return None  # Trinity-RFT's verl template writes None (a string in YAML) for "no backend chosen"
    if native.endswith("optim.optimizer") and isinstance(value, str) and value.lower() in OPTIMIZERS:
        return value.lower()  # verl's torch.optim class names (AdamW, Adam, SGD): posttrain's names
    if native == "rollout.multi_turn.tokenization_sanity_check_mode" and isinstance(value, bool):
        return "strict" if value else "disable"  # verl's older enable_tokenization_sanity_check
    if native == "reward.reward_manager" and value == "prime":
        return "parallel"  # verl's prime manager: a process pool of scorers with a per-call timeout, posttrain's parallel
    if native == "reward.reward_manager" and value == "gdpo":
        # verl 0.10's gdpo manager calls the function once per response as its naive one and hands every
        # key of the returned dict on, which GDPO's components (algorithm.gdpo_reward_keys) are read from
        return "naive"
    if native == "rollout.multi_turn.format" and value == "qwen":
        # verl's older SGLang rollout: Hermes <tool_call> JSON, tool answers framed as Qwen2.5's chat template
        # frames them (one user turn of <tool_response> blocks); posttrain renders them with the model's template
        return "hermes"
    if native == "rollout.name" and value == "vllm_async":  # Trinity: "the same as vllm" (its guide)
        return "vllm"
    if native == "trainer.mode" and value in MODES_REFUSED:
        raise refusal(MODES_REFUSED[value])
    return value


#: Trinity-RFT run modes posttrain does not run, with the reason.
MODES_REFUSED = {
    "colocate": "not translated: Trinity-RFT's explorer and trainer sharing devices in one process is what posttrain's mode both does with sync_interval 1 (the default); set mode both",
}


def _loggers(value: Any) -> Any:
    """posttrain's tracker names for a framework's (verl's ``file`` is posttrain's metrics.jsonl, ROLL's
    ``stdout`` its console line); a tracker posttrain does not have refuses the key with the reason."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return value  # validation names the type
    refused = [n for n in names if n in REFUSED_LOGGERS]
    if refused:
        raise refusal("; ".join(f"the {n} tracker: {REFUSED_LOGGERS[n]}" for n in refused))
    names = [LOGGER_ALIASES.get(n, n) for n in names]
    if isinstance(value, str):  # one tracker named: posttrain also keeps its console and metrics.jsonl
        names = ["console", "jsonl", *names]
    return list(dict.fromkeys(names))


def _resume(ctx: Context, key: str, value: Any) -> Any:
    if value is True:
        return "auto"
    if value is False:
        return "disable"
    if isinstance(value, str) and value not in ("auto", "disable", "resume_path"):
        ctx.set("trainer.resume_from_path", value, key, "a checkpoint path: resume_mode resume_path")
        return "resume_path"
    return value


def parse_device_list(text: Any) -> list[int]:
    """ROLL's device_mapping: a list of ints, or a Python expression of ``list``/``range`` only.

    >>> parse_device_list("list(range(0,8))")
    [0, 1, 2, 3, 4, 5, 6, 7]
    >>> parse_device_list("[0, 2]")
    [0, 2]
    """
    if isinstance(text, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in text):
        return list(text)
    if not isinstance(text, str):
        raise refusal(f"expected a device list such as 'list(range(0,8))', got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        return [int(i) for i in _eval_devices(tree)]
    except (SyntaxError, ValueError, TypeError) as err:
        raise refusal(f"cannot read device list {text!r}: only integer lists, list(...) and range(...) are understood ({err})") from None


def _eval_devices(node: ast.AST) -> list[int]:
    """A tiny evaluator: integer literals, lists, ``range(a[, b[, c]])`` and ``list(x)``; nothing else runs."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [i for elt in node.elts for i in _eval_devices(elt)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id == "range":
            args = [_eval_devices(a) for a in node.args]
            if all(len(a) == 1 for a in args) and 1 <= len(args) <= 3:
                return list(range(*(a[0] for a in args)))
        if node.func.id == "list" and len(node.args) == 1:
            return _eval_devices(node.args[0])
    raise ValueError(f"unsupported expression {ast.unparse(node)!r}")


# ROLL's workers that cluster.device_mapping places (the reward workers have their own section).
_MAPPED_WORKERS = ("actor_train", "actor_infer", "reference", "critic")


def roll_per_node(ctx: Context) -> Any:
    """ROLL's devices per node: the file's num_gpus_per_node, else this machine's GPUs (ROLL's pipeline
    config reads the platform's device count at start); on a machine without any, ROLL's default 8
    still reads the device mappings (which devices make "the whole cluster"), and the run has one process."""
    if machine.given(ctx, "num_gpus_per_node"):
        return ctx.get("num_gpus_per_node")
    return machine.visible_gpus() or 8


def roll_nodes(ctx: Context) -> Any:
    """ROLL's node count: it sets num_nodes itself from the highest device any worker's device_mapping
    names (its pipeline config: every worker, reward workers too), as many nodes of `roll_per_node`
    as that needs; the file's num_nodes (default 1) only without mappings."""
    per_node = roll_per_node(ctx)
    highest = -1
    rewards = ctx.get("rewards")
    for key in [f"{w}.device_mapping" for w in _MAPPED_WORKERS] + [f"rewards.{n}.device_mapping" for n in (rewards if isinstance(rewards, dict) else {})]:
        try:
            highest = max([highest, *parse_device_list(ctx.get(key))]) if ctx.get(key) is not None else highest
        except Exception:  # noqa: BLE001 - that key reports its own problem
            continue
    if highest < 0 or not isinstance(per_node, int) or per_node <= 0:
        return ctx.get("num_nodes", 1) or 1
    return max(1, -(-(highest + 1) // per_node))


def _device_mapping(ctx: Context, value: Any) -> list[int]:
    devices = parse_device_list(value)
    nodes = roll_nodes(ctx)
    per_node = roll_per_node(ctx)
    # ROLL's workers by posttrain's roles: the trainer's (actor, reference, critic) and the engines'
    lists: dict[str, list[int]] = {}
    for worker in _MAPPED_WORKERS:
        mapping = ctx.get(f"{worker}.device_mapping")
        if mapping is not None:
            try:
                lists[worker] = parse_device_list(mapping)
            except Exception:  # noqa: BLE001 - that key reports its own problem
                continue
    total = nodes * per_node if isinstance(per_node, int) and isinstance(nodes, int) else None
    every = list(range(total or -1))  # the whole cluster: posttrain's default for a list
    rollout = lists.get("actor_infer")
    # the reference on devices apart from actor_train's, or on some of them, runs as processes of its own (posttrain's reference crew)
    trainer = lists.get("actor_train") or lists.get("critic")
    crew = lists.get("reference") if devices_apart(lists.get("reference"), trainer) else None
    if sorted(devices) == every and not (crew and devices == trainer):
        return []  # every device of the cluster: posttrain's default placement (all roles colocated)
    training = [ids for w, ids in lists.items() if w != "actor_infer" and not (crew and w == "reference")]
    problem = ("training roles on different devices: every trainer worker hosts the actor and the critic, and the reference "
               "runs on those devices, on some of them or on devices of its own (a reference crew), not on some of them and others"
               if len({tuple(ids) for ids in training}) > 1 else
               placement_problem(training[0] if training and training[0] != every else None,
                                 None if rollout == every else rollout, total))
    if problem is None and crew and rollout and set(crew) & set(rollout):
        problem = "the reference on devices of its own shares devices with actor_infer: posttrain's reference crew needs devices of its own"
    if problem:
        shown = "; ".join(f"{w} {ids[0]}..{ids[-1]}" if ids else f"{w} []" for w, ids in lists.items())
        raise refusal(f"{shown}: {problem}")
    return devices
