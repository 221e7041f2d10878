"""ROLL's knowledge-distillation pipeline (roll/pipeline/distill, start_distill_pipeline.py) as a
posttrain distillation stage (`algorithm.kind: distill`).

A ROLL file with ``student`` and ``teacher`` roles (and no ``actor_train``/``student_train``) is a
distillation config. The ``student`` role takes actor_train's WorkerConfig keys and is translated as
``actor_train`` with the SFT pipeline's batch, epoch and length rules (posttrain.config.dialects.roll_sft);
the report names the keys as the file wrote them. What the pipeline does, read from distill_pipeline.py,
distill_worker.py, various_divergence.py and the strategies' op_compute_topk_probs_and_indices /
op_compute_various_divergence:

- Rows: the user turn is ``prompt + "\\n" + question`` with ``prompt_key`` unset in DistillConfig, so
  ROLL's user message is a newline then the ``question_key`` cell (default ``question``); posttrain's
  is the cell alone (data.prompt_key): one token of the prompt differs. The response is ``answer_key``
  (default ``answer``); the newline a template writes after it is cut (data.sft_trim_final_newline);
  rows are truncated to ``sequence_length`` (data.truncation right).
- Loss: ``(1 - distill_loss_weight) x`` token-mean cross-entropy ``+ distill_loss_weight x`` token-mean
  divergence, both over the batch's trained tokens (the response, or every token with
  ``distill_on_prompt``): algorithm.distill.* (posttrain.algorithms.distill). One difference: ROLL
  masks the divergence with the labels at the logits' own positions (op_compute_various_divergence),
  not shifted as for its cross-entropy, so it compares the positions whose input is a trained token
  (one later than those its cross-entropy trains); posttrain compares at the positions that predict
  the trained tokens, the same positions as its NLL. And ROLL cuts the teacher's logits to the
  tokenizer's ``vocab_size`` (Hugging Face's count without added tokens such as Qwen's
  ``<|im_end|>``), so those ids are never among its teacher's classes; posttrain keeps every id
  both heads have.
- Teacher: ``teacher_pretrain`` (or ``teacher.model_args.model_name_or_path``) runs forward on the
  same tokens without gradients; its top ``logits_topk`` logits at temperature ``kd_temperature x
  teacher_temperature`` give the targets. posttrain runs it on each of the student's workers, in the
  policy's dtype, so the teacher role's placement, parallelism and batch keys change memory and speed only.
- Batch, epochs, optimizer: as ROLL's SFT pipeline (roll_sft), but the rows are shuffled (its
  DataLoader shuffles). Validation (only with ``validation.data_args``): every ``eval_steps`` steps,
  not before training; ROLL reports the student's cross-entropy only, posttrain both parts.

A file whose student template is a vision-language one (``qwen2-vl``) is ROLL's vision-language
distillation: posttrain.config.dialects.roll_distill_vl says what differs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects import roll, roll_defaults, roll_distill_vl, roll_roles, roll_sft
from posttrain.config.dialects.report import Report
from posttrain.config.dialects.roll_defaults import ROLL_DEFAULT
from posttrain.config.dialects.translate import Context, translate_dict

ROLE, ACTOR, TEACHER = "student", "actor_train", "teacher"
# DistillConfig's defaults for the row columns (roll/pipeline/distill/distill_config.py).
COLUMNS = {"question_key": ("data.prompt_key", "question"), "answer_key": ("data.response_key", "answer")}
_SPEED = ("the teacher runs whole on each of the student's workers, on the student's micro-batches (posttrain has no separate "
          "teacher placement); its per-token outputs do not depend on this, only memory and speed do")
# The teacher role's keys (WorkerConfig) and what becomes of them; a prefix covers the keys below it.
_TEACHER_DROPPED = {
    "strategy_args": _SPEED, "device_mapping": _SPEED, "use_sequence_packing": _SPEED, "sequence_packing_args": _SPEED,
    "infer_batch_size": _SPEED, "training_args.per_device_train_batch_size": _SPEED,
    "model_args.disable_gradient_checkpointing": "the teacher runs without gradients, so there is nothing to checkpoint",
    "model_args.model_type": "null: the model's own class, as posttrain loads it",
    "data_args.template": "ROLL tokenises the rows once, with the student's template (the teacher reads the same tokens)",
    "worker_cls": "ROLL's teacher worker class; posttrain's stage runs the teacher itself",
    "name": "ROLL's role name",
}
_WHOLE = ("the student's sequences split over devices (context parallelism) change memory and speed, not the losses; posttrain's "
          "distillation stage runs whole sequences on each worker")
_SAME_AS_STUDENT = ("model_args.dtype", "model_args.attn_implementation")


def is_distill(raw: Any) -> bool:
    """Whether a ROLL file is a (offline) distillation config: student and teacher roles, no actor_train."""
    return (isinstance(raw, Mapping) and isinstance(raw.get(ROLE), Mapping) and isinstance(raw.get(TEACHER), Mapping)
            and ACTOR not in raw and "student_train" not in raw)


def _to_actor(key: str) -> str:
    return ACTOR + key[len(ROLE):] if key == ROLE or key.startswith(ROLE + ".") else key


def translate(raw: Mapping[str, Any], *, interpolated: set[str] = frozenset(), unresolved: Mapping[str, str] | None = None) -> tuple[dict[str, Any], Report]:
    """The native dict and the report of a ROLL distillation file (module docstring)."""
    renamed = {_to_actor(k): v for k, v in raw.items()}
    rl_only = [*(h for h in roll_defaults.HANDLERS if h is not roll_defaults.training_args), roll_roles.offload_switches]
    handlers = [pipeline, *(h for h in roll.HANDLERS if h not in rl_only)]
    native, report = translate_dict(renamed, "roll", handlers, roll.value_hook, roll.ignorable,
                                    interpolated={_to_actor(k) for k in interpolated},
                                    unresolved={_to_actor(k): v for k, v in (unresolved or {}).items()})
    entries = [dataclasses.replace(e, key=_to_role(e.key), reason=_to_role(e.reason)) for e in report.entries]
    if (native.get("actor") or {}).pop("ulysses_sequence_parallel_size", 1) != 1:  # context parallelism: memory, not numbers
        entries = [dataclasses.replace(e, status="dropped", native=None, value=None, reason=_WHOLE)
                   if e.native == "actor.ulysses_sequence_parallel_size" else e for e in entries]
    return native, Report(report.dialect, entries)


def _to_role(text: str) -> str:
    return text.replace(ACTOR, ROLE)


def pipeline(ctx: Context) -> None:
    """The distillation pipeline's rules (module docstring), run before the actor_train rules."""
    vision = roll_distill_vl.is_vl_template(ctx.get(f"{ACTOR}.data_args.template"))
    script = "start_distill_vl_pipeline.py" if vision else "start_distill_pipeline.py"
    ctx.set("algorithm.kind", "distill", TEACHER, f"ROLL's distillation pipeline ({script})")
    if vision:  # ROLL's vision-language distillation: its own rows, lengths and no validation
        roll_distill_vl.pipeline(ctx)
    _models(ctx)
    _teacher(ctx)
    for key, (native, default) in ({} if vision else COLUMNS).items():
        ctx.consume(key)
        value = ctx.get(key, default)
        why = ("ROLL's user turn is a newline then this cell (it joins its unset prompt column and the question with a newline); "
               "posttrain's is the cell alone") if key == "question_key" else ""
        if value is None:
            ctx.refuse(key, f"ROLL reads the column it names; null names none (ROLL's default is {default!r})", native, value)
        else:
            ctx.set(native, value, key, why if ctx.has(key) else f"{ROLL_DEFAULT}: {default!r}; {why}".rstrip("; "))
    roll_roles.offload_switches(ctx, distill=True)
    if ctx.has("logits_transfer_backend"):
        ctx.consume("logits_transfer_backend")
        ctx.drop("logits_transfer_backend", "how ROLL moves the teacher's logits between its GPU workers; posttrain's teacher runs on the student's worker, nothing moves")
    ctx.set("data.shuffle", True, f"{ACTOR}.data_args", "ROLL's distillation pipeline shuffles the rows (its DataLoader shuffle=True)")
    ctx.set("data.sft_trim_final_newline", True, f"{ACTOR}.data_args", "ROLL's distillation pipeline cuts the newline a template writes after the answer")
    if not vision:
        ctx.set("data.truncation", "right", "sequence_length", "ROLL's tokenizer call truncates each row to sequence_length (truncation=True)")
    for key in (f"{ACTOR}.use_sequence_packing", f"{ACTOR}.sequence_packing_args"):
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, roll_sft._PACKING.replace("ROLL's SFT loss", "ROLL's distillation losses"))
    clip = ctx.get("max_grad_norm", 0)  # DistillConfig's own default is 0 (BaseConfig's 1.0)
    if isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip <= 0:
        ctx.consume("max_grad_norm")
        note = "" if ctx.has("max_grad_norm") else f"{ROLL_DEFAULT}: 0 (DistillConfig); "
        ctx.set("actor.grad_clip", float("inf"), "max_grad_norm", f"{note}0 clips nothing in ROLL's strategies: an infinite bound")
    if not ctx.has("save_steps"):
        ctx.set("trainer.save_freq", roll_sft.SAVE_STEPS, "save_steps", f"{ROLL_DEFAULT}: {roll_sft.SAVE_STEPS}")
    roll_sft._batch(ctx)
    roll_sft._epochs(ctx)
    if not vision:
        roll_sft._lengths(ctx)
        _validation(ctx)


def _models(ctx: Context) -> None:
    """ROLL fills both roles' model_name_or_path from student_pretrain / teacher_pretrain when either is null."""
    student_key, teacher_key = f"{ACTOR}.model_args.model_name_or_path", f"{TEACHER}.model_args.model_name_or_path"
    ctx.consume("student_pretrain", "teacher_pretrain", student_key, teacher_key)
    from_pretrain = ctx.get(student_key) is None or ctx.get(teacher_key) is None
    for role_key, top, native in ((student_key, "student_pretrain", "model.path"), (teacher_key, "teacher_pretrain", "algorithm.distill.teacher_path")):
        key = top if from_pretrain else role_key
        if ctx.get(key) is None:
            ctx.refuse(key, f"ROLL's distillation pipeline needs the model path ({top} or {role_key}); none is given", native, None)
            continue
        ctx.set(native, ctx.get(key), key)
        other = role_key if from_pretrain else top
        if ctx.has(other):
            ctx.drop(other, f"ROLL uses {key} ({'a role path is null, so both come from the *_pretrain keys' if from_pretrain else 'both role paths are set'})")


def _leaves(node: Any, prefix: str) -> list[str]:
    if isinstance(node, Mapping) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}.{k}")]
    return [prefix]


def _teacher(ctx: Context) -> None:
    """The teacher role's keys: its path (`_models`), its dtype and attention kernel (the policy's),
    the rest placement and speed (module docstring)."""
    for key in _leaves(ctx.get(TEACHER), TEACHER):
        sub = key[len(TEACHER) + 1:]
        if key in ctx.handled:
            continue
        ctx.consume(key)
        value = ctx.get(key)
        dropped = next((why for prefix, why in _TEACHER_DROPPED.items() if sub == prefix or sub.startswith(prefix + ".")), None)
        if dropped is not None:
            ctx.drop(key, dropped)
        elif sub in _SAME_AS_STUDENT:
            mine = ctx.get(f"{ACTOR}.{sub}")
            if value == mine or value is None:
                ctx.drop(key, f"posttrain loads the teacher with the student's {sub.split('.')[-1]}, and they agree")
            else:
                ctx.refuse(key, f"posttrain loads the teacher with the student's {sub.split('.')[-1]} ({mine!r}); set both alike")
        elif value is None or value == {} or value == []:
            ctx.drop(key, "empty (null), nothing to translate")
        else:
            ctx.refuse(key, "a teacher role setting posttrain's distillation stage does not have (it loads the teacher with the policy's model options)")
    ctx.consume(TEACHER)


def _validation(ctx: Context) -> None:
    """ROLL's distillation pipeline validates every eval_steps steps, not before the first."""
    infer = f"{ACTOR}.infer_batch_size"
    if not roll_sft.validates(ctx, "distillation", False,
                              "ROLL's distillation pipeline validates at steps that are multiples of eval_steps, from step 1"):
        return
    if ctx.has(infer):
        ctx.consume(infer)
        ctx.drop(infer, "ROLL's validation batch (infer_batch_size x gradient_accumulation_steps x data-parallel ranks rows, the last incomplete one "
                        "dropped); posttrain validates on every row, in micro-batches of data.val_batch_size")
