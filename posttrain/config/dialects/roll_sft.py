"""ROLL's SFT pipeline (roll/pipeline/sft, started by start_sft_pipeline.py) as a posttrain SFT stage.

A ROLL file with an ``sft_train`` role (and no ``actor_train``) is an SFT config. Its role takes the
same WorkerConfig keys as ``actor_train`` (model_args, training_args, data_args, strategy_args,
device_mapping), so the file is translated with the role renamed to ``actor_train`` (every
actor_train rule applies) and the report names the keys as the file wrote them. What the pipeline
does, read from sft_pipeline.py, sft_worker.py and the strategies' ``op_compute_language_loss``:

- Rows: ``system_key`` (default null), ``prompt_key`` (default ``instruction``), ``query_key``
  (default null) and ``response_key`` (default ``output``). The user turn is
  ``prompt + "\\n" + query`` when the query is non-empty (posttrain: data.query_key); an empty system
  cell adds no system message. The loss covers the response tokens only, up to the end-of-turn
  token: a newline the template writes after it is cut (data.sft_trim_final_newline).
- Loss: the summed token cross-entropy of a micro-batch divided by the trained tokens of the whole
  global batch (all data-parallel ranks), so one optimizer step is the token mean over the batch:
  posttrain's SFT objective (posttrain.trainer.sft).
- Batch: one step takes per_device_train_batch_size x gradient_accumulation_steps x data-parallel
  ranks rows (data.train_batch_size), micro-batches of per_device_train_batch_size; the rows are read
  in file order (DataLoader shuffle false, data.shuffle false), the last incomplete batch dropped (as
  posttrain's sampler does), for int(num_train_epochs) passes (trainer.total_epochs).
- Optimizer: ROLL's TrainingArguments defaults where posttrain's differ (weight_decay 0, the
  ``linear`` schedule). Its scheduler's horizon is floor(floor(epochs x rows / (per_device x GA)) /
  data-parallel ranks) steps, which is posttrain's total epochs x floor(rows / batch) for one epoch;
  with E epochs and rows not a multiple of the batch ROLL's horizon is longer by fewer than E steps.
- Lengths: every row is padded to ``sequence_length`` and a longer one fails the batch (the collator
  pads without truncating): data.max_length with posttrain's default data.truncation error.
- Validation (only with ``validation.data_args``): before the first step and every ``eval_steps``
  steps, on micro-batches of ``sft_train.infer_batch_size`` rows (data.val_batch_size).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects import roll, roll_defaults, roll_strategy
from posttrain.config.dialects.report import Report
from posttrain.config.dialects.roll_defaults import ROLL_DEFAULT
from posttrain.config.dialects.translate import Context, translate_dict

ROLE, ACTOR = "sft_train", "actor_train"
# SFTConfig's defaults for the row columns (roll/pipeline/sft/sft_config.py).
COLUMNS = {"prompt_key": ("data.prompt_key", "instruction"), "response_key": ("data.response_key", "output"),
           "query_key": ("data.query_key", None), "system_key": ("data.system_prompt_key", None)}
# ROLL's TrainingArguments defaults (roll/configs/training_args.py) where posttrain's differ.
TRAINING_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "num_train_epochs": 1.0}
_TRAINING = f"{ACTOR}.training_args"
EVAL_STEPS, SAVE_STEPS = 10, 50  # BaseConfig's defaults (roll/configs/base_config.py)
_PACKING = ("packing regroups a step's rows into micro-batches by tokens (megatron_train; fsdp2_train does not read it), and ROLL's SFT "
            "loss divides every micro-batch's summed cross-entropy by the whole batch's trained tokens, so the step is the same "
            "whatever the grouping (speed and memory only; posttrain packs real tokens with model.use_remove_padding)")


def is_sft(raw: Any) -> bool:
    """Whether a ROLL file is an SFT pipeline config: it has the sft_train role, no actor_train."""
    return isinstance(raw, Mapping) and ROLE in raw and ACTOR not in raw


def _to_actor(key: str) -> str:
    return ACTOR + key[len(ROLE):] if key == ROLE or key.startswith(ROLE + ".") else key


def _to_role(text: str) -> str:
    return text.replace(ACTOR, ROLE)


def translate(raw: Mapping[str, Any], *, interpolated: set[str] = frozenset(), unresolved: Mapping[str, str] | None = None) -> tuple[dict[str, Any], Report]:
    """The native dict and the report of a ROLL SFT file (module docstring)."""
    renamed = {_to_actor(k): v for k, v in raw.items()}
    # ROLL's RL defaults (dual clip, sampling) belong to pipelines that generate; its TrainingArguments
    # defaults (linear schedule, no weight decay) are every trained role's
    rl_only = [h for h in roll_defaults.HANDLERS if h is not roll_defaults.training_args]
    handlers = [pipeline, *(h for h in roll.HANDLERS if h not in rl_only)]
    native, report = translate_dict(renamed, "roll", handlers, roll.value_hook, roll.ignorable,
                                    interpolated={_to_actor(k) for k in interpolated},
                                    unresolved={_to_actor(k): v for k, v in (unresolved or {}).items()})
    entries = [dataclasses.replace(e, key=_to_role(e.key), reason=_to_role(e.reason)) for e in report.entries]
    return native, Report(report.dialect, entries)


def pipeline(ctx: Context) -> None:
    """The SFT pipeline's rules (module docstring), run before the actor_train rules."""
    ctx.set("algorithm.kind", "sft", ROLE, "ROLL's SFT pipeline (start_sft_pipeline.py)")
    for key, (native, default) in COLUMNS.items():
        if ctx.has(key):
            ctx.consume(key)
            value = ctx.get(key)
            if value is None and default is not None:
                ctx.refuse(key, f"ROLL reads the column it names; null names none (ROLL's default is {default!r})", native, value)
            elif value is not None:
                ctx.set(native, value, key)
            else:
                ctx.drop(key, "null: no such column read, as ROLL")
        elif default is not None:
            ctx.set(native, default, key, f"{ROLL_DEFAULT}: {default!r}")
    ctx.set("data.shuffle", False, f"{ACTOR}.data_args", "ROLL's SFT pipeline reads the rows in file order (its DataLoader does not shuffle)")
    ctx.set("data.sft_trim_final_newline", True, f"{ACTOR}.data_args", "ROLL's SFT pipeline cuts the newline a template writes after the response (its rows end at the end-of-turn token)")
    for key in (f"{ACTOR}.use_sequence_packing", f"{ACTOR}.sequence_packing_args"):
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, _PACKING)
    if not ctx.has("save_steps"):
        ctx.set("trainer.save_freq", SAVE_STEPS, "save_steps", f"{ROLL_DEFAULT}: {SAVE_STEPS}")
    _batch(ctx)
    _epochs(ctx)
    _lengths(ctx)
    _validation(ctx)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _training(ctx: Context, name: str) -> Any:
    return ctx.get(f"{_TRAINING}.{name}", TRAINING_DEFAULTS[name])


def _batch(ctx: Context) -> None:
    """per_device_train_batch_size x gradient_accumulation_steps x data-parallel ranks rows a step."""
    key = f"{_TRAINING}.gradient_accumulation_steps"
    ctx.consume(key)
    per_device, steps = _training(ctx, "per_device_train_batch_size"), _training(ctx, "gradient_accumulation_steps")
    devices = roll_strategy.device_count(ctx, ACTOR)
    split, split_text = roll.model_parallel(ctx, ACTOR)
    if not all(_int(v) for v in (per_device, steps, devices, split)) or devices % split:
        ctx.refuse(key, f"the global batch is per_device_train_batch_size ({per_device!r}) x gradient_accumulation_steps ({steps!r}) x data-parallel ranks "
                        f"({devices!r} devices / {split_text}): expected whole numbers with the devices a multiple of the model-parallel split; ROLL refuses this layout too",
                   "data.train_batch_size", steps)
        return
    ranks = devices // split
    dp = f"{ranks} data-parallel ranks ({devices} devices / {split_text})" if split > 1 else f"{devices} devices"
    ctx.set("data.train_batch_size", per_device * steps * ranks, key, f"per_device_train_batch_size {per_device} x gradient_accumulation_steps {steps} x {dp}")
    if not ctx.has(f"{_TRAINING}.per_device_train_batch_size"):
        ctx.set("actor.ppo_micro_batch_size_per_gpu", per_device, f"{_TRAINING}.per_device_train_batch_size", f"{ROLL_DEFAULT}: {per_device}")


def _epochs(ctx: Context) -> None:
    """``range(num_train_epochs)`` passes over the rows (a float that is not whole fails there)."""
    key = f"{_TRAINING}.num_train_epochs"
    ctx.consume(key)
    value = _training(ctx, "num_train_epochs")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1 and float(value).is_integer():
        ctx.set("trainer.total_epochs", int(value), key, "" if ctx.has(key) else f"{ROLL_DEFAULT}: 1")
    else:
        ctx.refuse(key, f"ROLL's SFT pipeline runs range(num_train_epochs) passes: expected a whole number >= 1, got {value!r}", "trainer.total_epochs", value)
    steps = f"{_TRAINING}.max_steps"
    if ctx.has(steps):
        ctx.consume(steps)
        ctx.drop(steps, "ROLL's SFT pipeline overwrites it with num_train_epochs x rows / (per_device_train_batch_size x gradient_accumulation_steps)")


def _lengths(ctx: Context) -> None:
    key = "sequence_length"
    if not ctx.has(key):
        return
    ctx.consume(key)
    value = ctx.get(key)
    ctx.set("data.max_length", value, key, "ROLL pads every row to it, and a longer row fails its batch (posttrain: data.truncation error)")


def validates(ctx: Context, pipeline: str, before_first: bool, when: str) -> bool:
    """Whether a ROLL SFT-style pipeline (SFT, distillation) validates: only with validation.data_args,
    every eval_steps steps, and before the first step if `before_first` (`when` says which). Without
    it, eval_steps and the actor's infer_batch_size are dropped; with it, the caller reads infer_batch_size."""
    val = ctx.get("validation.data_args")
    if not isinstance(val, Mapping) or not val.get("file_name"):
        for key in (k for k in (f"{ACTOR}.infer_batch_size", "eval_steps") if ctx.has(k)):
            ctx.consume(key)
            ctx.drop(key, f"no validation.data_args: ROLL's {pipeline} pipeline does not validate")
        return False
    ctx.set("trainer.val_before_train", before_first, "eval_steps", when)
    if not ctx.has("eval_steps"):
        ctx.set("trainer.test_freq", EVAL_STEPS, "eval_steps", f"{ROLL_DEFAULT}: {EVAL_STEPS}")
    return True


def _validation(ctx: Context) -> None:
    """ROLL's SFT pipeline validates before step 0, then every eval_steps steps."""
    infer = f"{ACTOR}.infer_batch_size"
    if validates(ctx, "SFT", True, "ROLL's SFT pipeline validates at step 0 (global_step % eval_steps == 0)") and ctx.has(infer):
        ctx.consume(infer)
        ctx.set("data.val_batch_size", ctx.get(infer), infer, "rows per validation forward")
