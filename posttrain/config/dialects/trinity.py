"""Trinity-RFT (modelscope/Trinity-RFT) rules that are more than one key to one key.

Source of the semantics: Trinity-RFT's configuration guide and its published example configs (a copy of
some lives in tests/config/reference_configs).

- ``algorithm.algorithm_type`` names a bundle of parts (kind, advantage function, policy loss, KL,
  entropy, sample strategy): posttrain.config.dialects.trinity_types writes the fields they select;
  an explicit ``advantage_fn`` / ``policy_loss_fn`` wins over the type's.
- A synchronous run's tasksets are posttrain's ``data`` section (see posttrain.config.sections.buffer):
  the training taskset's ``path`` + ``subset_name`` + ``split`` become ``data.train_files`` (a local
  file, the split's files in a local folder, else ``PATH[:SUBSET]@SPLIT``: a save_to_disk folder or a
  Hugging Face dataset name, read from the local cache; posttrain never downloads), its ``format`` keys the ``data``
  column keys, its ``rollout_args`` the rollout sampling; evaluation tasksets become
  ``data.val_files`` and ``rollout.val_kwargs``.
- ``trainer.trainer_config`` is an inline verl config: it is translated with the verl dialect.
- ``stages``: each stage's keys are Trinity keys too; ``stage_name`` is posttrain's ``name``.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.lora import trinity_lora
from posttrain.config.dialects.trinity_defaults import batching, kl_defaults, stage_kl_defaults
from posttrain.config.dialects.translate import Context, translate_dict
from posttrain.config.dialects.values import value_hook
from posttrain.config.dialects.trinity_types import algorithm_type, stage_algorithm_type
from posttrain.config.dialects.trinity_files import data_files

_TS = "buffer.explorer_input.taskset"
_EVAL = "buffer.explorer_input.eval_tasksets"
_FORMAT_TO_DATA = {name: f"data.{name}" for name in ("prompt_key", "response_key", "system_prompt", "system_prompt_key", "reply_prefix", "enable_thinking")}


def _taskset(ctx: Context, prefix: str, item: dict[str, Any], training: bool) -> None:
    """Translate one taskset (training: ``prefix`` is the taskset key; eval: ``...eval_tasksets[i]``)."""
    for name in ("path", "split", "subset_name", "storage_type", "name", "repeat_times", "rollout_args", "format"):
        ctx.consume(f"{prefix}.{name}")
    if item.get("storage_type", "file") != "file":
        ctx.refuse(f"{prefix}.storage_type", "not implemented yet: queue/sql tasksets (decoupled explorer/trainer issue); a synchronous run reads files", None, item.get("storage_type"))
    if f"{prefix}.path" not in ctx.unresolved:  # an unresolved path is already refused by name
        split = item.get("split", "train" if training else "test")
        native = "data.train_files" if training else "data.val_files"
        try:
            files = data_files(item.get("path"), split, item.get("subset_name"))
        except ValueError as err:
            ctx.refuse(f"{prefix}.path", str(err), native, item.get("path"))
        else:
            if training:
                ctx.set(native, files, f"{prefix}.path", f"split {split!r}" + (f", subset {item['subset_name']!r}" if item.get("subset_name") else ""))
            else:
                ctx.native.setdefault("data", {}).setdefault("val_files", [])
                ctx.native["data"]["val_files"] += files
                ctx.report.add(_entry(f"{prefix}.path", native, files, f"split {split!r}, appended"))
    if "name" in item:
        ctx.drop(f"{prefix}.name", "names the taskset's metrics in Trinity-RFT; posttrain's metrics are named by stage")
    fmt = item.get("format") or {}
    for name, value in fmt.items():
        key = f"{prefix}.format.{name}"
        if name in _FORMAT_TO_DATA:
            ctx.set(_FORMAT_TO_DATA[name], value, key)
        elif name == "prompt_type" and value in ("plaintext", "messages"):
            ctx.drop(key, "posttrain reads a string or a chat message list from data.prompt_key alike")
        else:
            ctx.refuse(key, "no posttrain equivalent for a taskset format key (data.* holds the column keys)", None, value)
    repeat = item.get("repeat_times")
    if repeat is not None:
        ctx.set("rollout.n" if training else "rollout.val_kwargs.n", repeat, f"{prefix}.repeat_times")
    args = item.get("rollout_args") or {}
    if not training and args and "temperature" not in args:  # Trinity samples evaluation at the model's temperature
        ctx.set("rollout.val_kwargs.temperature", ctx.get("model.temperature", 1.0), f"{prefix}.rollout_args", "temperature not given: model.temperature (Trinity's default 1.0)")
    for name, value in args.items():
        key = f"{prefix}.rollout_args.{name}"
        if name not in ("temperature", "top_p", "top_k"):
            ctx.refuse(key, "no posttrain equivalent: only temperature, top_p and top_k are sampling settings posttrain has", None, value)
        elif training:
            ctx.set(f"rollout.{name}", value, key)
        else:
            ctx.set(f"rollout.val_kwargs.{name}", value, key)
            ctx.set("rollout.val_kwargs.do_sample", True, key, "evaluation sampling settings given: sample")


def _entry(key: str, native: str, value: Any, reason: str):
    from posttrain.config.dialects.report import Entry

    return Entry(key, "translated", native, value, reason)


def tasksets(ctx: Context) -> None:
    taskset = ctx.get(_TS)
    if isinstance(taskset, dict):
        _taskset(ctx, _TS, taskset, training=True)
    evals = ctx.get(_EVAL)
    if isinstance(evals, list):
        ctx.consume(_EVAL)
        for i, item in enumerate(evals):
            prefix = f"{_EVAL}[{i}]"
            if not isinstance(item, dict):
                ctx.refuse(prefix, "expected a taskset mapping", None, item)
                continue
            _taskset(ctx, prefix, item, training=False)
            for name, value in item.items():  # what _taskset did not take: workflows and the like
                if f"{prefix}.{name}" not in ctx.handled:
                    ctx.refuse(f"{prefix}.{name}", "not implemented yet: decoupled explorer/trainer issue (workflows, per-taskset reward functions)", None, value)


def trainer_config(ctx: Context) -> None:
    """The inline verl config under ``trainer.trainer_config``, translated with the verl dialect."""
    key = "trainer.trainer_config"
    inline = ctx.get(key)
    if not isinstance(inline, dict):
        return
    ctx.consume(key)
    from posttrain.config.dialects import translate

    native, report = translate(inline, "verl")
    for e in report.entries:
        moved = type(e)(f"{key}.{e.key}", e.status, e.native, e.value, e.reason)
        if e.status == "translated" and e.native:
            ctx.set(e.native, e.value, moved.key, e.reason)
        else:
            ctx.report.add(moved)


def stages(ctx: Context) -> None:
    items = ctx.get("stages")
    if not isinstance(items, list):
        return
    ctx.consume("stages")
    out = []
    for i, stage in enumerate(items):
        prefix = f"stages[{i}]"
        if not isinstance(stage, dict):
            ctx.refuse(prefix, "expected a mapping of stage settings", None, stage)
            continue
        body = {k: v for k, v in stage.items() if k != "stage_name"}
        native, report = translate_dict(body, "trinity", STAGE_HANDLERS, value_hook, ignorable)
        native = {"name": stage.get("stage_name", f"stage{i}"), **native}
        for e in report.entries:
            ctx.report.add(type(e)(f"{prefix}.{e.key}", e.status, e.native and f"{prefix}.{e.native}", e.value, e.reason))
        out.append(native)
    ctx.set("stages", out, "stages", "stage_name -> name; each stage's keys translated")


def batch_sizes(ctx: Context) -> None:
    """Trinity's optimizer step takes ``buffer.train_batch_size`` experiences (default ``batch_size x
    repeat_times``: one step per explored batch); posttrain's ``actor.ppo_mini_batch_size`` counts
    prompts, so it is that divided by ``repeat_times`` (Trinity-RFT's "Align with veRL" guide maps
    buffer.batch_size/train_batch_size to verl's train_batch_size/ppo_mini_batch_size)."""
    if "actor.ppo_mini_batch_size" in ctx.origin:  # set by trainer_config: that wins
        return
    repeat = ctx.get("algorithm.repeat_times", 1)
    key = "buffer.train_batch_size"
    if ctx.has(key):
        ctx.consume(key)
        experiences = ctx.get(key)
        expert = ctx.origin.get("algorithm.mix.expert_batch_size")  # the mix types' expert rows ride along
        if expert is not None and isinstance(experiences, int):
            experiences -= expert[1]
        if not isinstance(experiences, int) or not isinstance(repeat, int) or repeat < 1 or experiences % repeat:
            ctx.refuse(key, f"{experiences!r} experiences is not a whole number of prompts at repeat_times {repeat!r}; set actor.ppo_mini_batch_size (prompts) yourself", "actor.ppo_mini_batch_size", experiences)
            return
        ctx.set("actor.ppo_mini_batch_size", experiences // repeat, key, f"{experiences} experiences / repeat_times {repeat}")
    elif isinstance(ctx.get("buffer.batch_size"), int):
        ctx.set("actor.ppo_mini_batch_size", ctx.get("buffer.batch_size"), "buffer.batch_size", "train_batch_size not given: Trinity-RFT takes one optimizer step per explored batch")


def ignorable(ctx: Context, key: str, value: Any) -> str | None:
    if key == "trainer.trainer_type" and value == "verl":
        return "Trinity-RFT's verl trainer: posttrain trains with its own backend and reads trainer_config with the verl dialect"
    return None


HANDLERS = [algorithm_type, kl_defaults, tasksets, trainer_config, batch_sizes, batching, stages, trinity_lora]
# A stage derives only what it writes itself (posttrain.config.dialects.trinity_defaults).
STAGE_HANDLERS = [stage_algorithm_type, stage_kl_defaults, tasksets, trainer_config, batch_sizes, stages, trinity_lora]
