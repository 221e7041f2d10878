"""ROLL's on-policy distillation pipeline (start_onpolicy_distill_pipeline.py, "pure OPD") as a
posttrain RL stage with the ``on_policy_distill`` advantage estimator.

A ROLL file with ``student_train`` (and no ``actor_train``) is such a config. ROLL's launcher sets
``is_pure_opd`` and its config maps ``student_train`` to ``actor_train``, ``student_infer`` to
``actor_infer`` and the ``teacher`` to ``reference`` (roll/configs/base_config.py
_handle_opd_mapping / _apply_opd_config); the file is translated with those roles renamed, and the
report names the keys as the file wrote them. What the pipeline does (roll/utils/functionals.py
compute_advantage, is_pure_opd):

- The advantage of each response token is ``-opd_kl_coef x KL_t``, KL_t the ``kl_penalty``
  estimate between the student's and the teacher's log-prob of the sampled token; with ROLL's
  default estimator ``kl`` (k1: log pi_student - log pi_teacher) that is posttrain's
  ``on_policy_distill``: ``kl_coef x (log pi_teacher - log pi_student)`` (``kl_coef`` =
  the teacher's ``opd_kl_coef``, 1.0 by default). Another estimator is refused. Whitening and
  clipping of advantages follow as in ROLL. The reward is computed (and logged) but not used.
- ROLL overrides ``adv_estimator`` (reinforce), ``gamma`` (0), ``use_kl_loss`` and
  ``add_token_level_kl`` (false): posttrain's estimator reads no discount, and the KL loss and
  KL-in-reward are off.
- The student's log-probs: ROLL takes the inference engine's (``infer_logprobs``) unless it
  recomputes them with the training model; posttrain always recomputes them (``old_logprobs``),
  which agree to the engines' numerics.
- Teachers: ROLL normalises ``teacher`` to named teachers (a single worker config is the one
  teacher "default"; roll/configs/base_config.py _handle_opd_mapping), so a ``teacher`` mapping
  that holds one named teacher is read exactly as a single teacher (``ref.model_path``), its keys
  reported under its name. Several named teachers become ``ref.teachers``: each teacher is
  translated as the one teacher would be, its model, ``tag_included`` and ``opd_kl_coef`` going to
  ``ref.teachers.<name>``; the rest of its settings land in the shared ``ref`` section, so teachers
  whose settings translate differently there are refused by name. ROLL's routing, which
  posttrain's follows (roll/utils/functionals.py build_domain_to_teacher_names and
  compute_advantage): a row's domain stands for the tags of the reward worker that holds its tag
  (rlvr_config's domain_2_tag), or for its own tag; a teacher takes the row when its
  ``tag_included`` holds one of those tags, and a teacher whose ``tag_included`` is empty takes
  every row. The row's advantage is minus the sum over the teachers that take it of opd_kl_coef x
  KL_t, each KL against that teacher's log-probs; a row no teacher takes gets 0, which whitening
  (when on) then shifts and scales with the rest of the batch. A single (unnamed) teacher limited
  to some tags is refused with the ``ref.teachers`` config that expresses it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects import roll
from posttrain.config.dialects.report import Entry, Report
from posttrain.config.dialects.translate import Context, translate_dict

RENAMES = {"student_train": "actor_train", "student_infer": "actor_infer", "teacher": "reference"}
_BACK = {v: k for k, v in RENAMES.items()}


def is_onpolicy(raw: Any) -> bool:
    """Whether a ROLL file is an on-policy distillation config: student_train, no actor_train."""
    return isinstance(raw, Mapping) and isinstance(raw.get("student_train"), Mapping) and "actor_train" not in raw


def _rename(key: str, table: Mapping[str, str]) -> str:
    head, dot, rest = key.partition(".")
    return table[head] + dot + rest if head in table else key


def translate(raw: Mapping[str, Any], *, interpolated: set[str] = frozenset(), unresolved: Mapping[str, str] | None = None) -> tuple[dict[str, Any], Report]:
    """The native dict and the report of a ROLL on-policy distillation file (module docstring)."""
    teacher = raw.get("teacher")
    named = isinstance(teacher, Mapping) and teacher and all(isinstance(v, Mapping) and "model_args" in v for v in teacher.values())
    if not named or len(teacher) == 1:  # {name: config}: ROLL's single teacher under a name
        return _translate(raw, next(iter(teacher)) if named else None, False, interpolated, unresolved)
    # several teachers: each read as the one teacher into ref.teachers.<name>; the rest of the file is the same in every run
    runs = {name: _translate(raw, name, True, interpolated, unresolved) for name in teacher}
    first = next(iter(teacher))
    native, report = runs[first]
    entries = [e for e in report.entries if not e.key.startswith("teacher.")]
    shared = _flat({k: v for k, v in native.items()}, skip="ref.teachers")
    for name, (mine, rep) in runs.items():
        entries += [e for e in rep.entries if e.key.startswith(f"teacher.{name}")]
        native.setdefault("ref", {}).setdefault("teachers", {})[name] = mine["ref"]["teachers"][name]
        differs = sorted(k for k in set(shared) | set(_flat(mine, skip="ref.teachers")) if shared.get(k) != _flat(mine, skip="ref.teachers").get(k))
        if differs:
            entries.append(Entry(f"teacher.{name}", "refused", None, None,
                                 f"not supported: its settings give {', '.join(differs)} other values than teacher {first}'s; posttrain's ref "
                                 "section (batching, backend) applies to every teacher of ref.teachers: give the teachers the same values"))
    return native, Report(report.dialect, entries)


def _flat(d: Mapping[str, Any], prefix: str = "", skip: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if key == skip:
            continue
        if isinstance(v, Mapping) and v:
            out.update(_flat(v, key + ".", skip))
        else:
            out[key] = v
    return out


def _translate(raw: Mapping[str, Any], one: str | None, routed: bool, interpolated: set[str], unresolved: Mapping[str, str] | None) -> tuple[dict[str, Any], Report]:
    """One translation with `teacher` the file's single teacher, or its teacher `one` of a mapping;
    `routed`: one of several teachers, read into ref.teachers.<one>."""
    source = dict(raw)
    if one is not None:
        source["teacher"] = raw["teacher"][one]
    renamed = {_rename(k, RENAMES): v for k, v in source.items()}
    handlers = [functools.partial(pipeline, routed=one if routed else None), *roll.HANDLERS]
    native, report = translate_dict(renamed, "roll", handlers, roll.value_hook, roll.ignorable,
                                    interpolated={_rename(_unname(k, one), RENAMES) for k in interpolated},
                                    unresolved={_rename(_unname(k, one), RENAMES): v for k, v in (unresolved or {}).items()})
    entries = [dataclasses.replace(e, key=_name(_rename(e.key, _BACK), one), reason=e.reason.replace("actor_train", "student_train").replace("actor_infer", "student_infer"))
               for e in report.entries]
    return native, Report(report.dialect, entries)


def _unname(key: str, name: str | None) -> str:
    """teacher.<name>.x -> teacher.x for the one named teacher (None: no name to take out)."""
    prefix = f"teacher.{name}"
    return "teacher" + key[len(prefix):] if name is not None and (key == prefix or key.startswith(prefix + ".")) else key


def _name(key: str, name: str | None) -> str:
    """teacher.x -> teacher.<name>.x: the report names the key as the file wrote it."""
    return f"teacher.{name}" + key[len("teacher"):] if name is not None and (key == "teacher" or key.startswith("teacher.")) else key


def pipeline(ctx: Context, *, routed: str | None = None) -> None:
    """The pure OPD rules (module docstring), run before the RL rules; `routed`: the name of the
    teacher read (as `reference`) when the file has several, which goes to ref.teachers.<name>."""
    ctx.set("algorithm.adv_estimator", "on_policy_distill", "student_train", "ROLL's on-policy distillation (is_pure_opd): advantages from the teacher's log-probs")
    for key, why in (("adv_estimator", "ROLL's pure OPD mode sets it to reinforce and takes the advantages from the teacher instead"),
                     ("gamma", "ROLL's pure OPD mode sets it to 0; posttrain's on_policy_distill estimator reads no discount"),
                     ("critic_warmup", "ROLL's pure OPD mode sets it to 0 (no critic)")):
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, why)
    if ctx.has("is_pure_opd"):
        ctx.consume("is_pure_opd")
        ctx.drop("is_pure_opd", "ROLL's on-policy distillation launcher sets it to true whatever the file says")
    kind = ctx.get("pure_opd_pipeline_type", "rlvr")
    if ctx.has("pure_opd_pipeline_type"):
        ctx.consume("pure_opd_pipeline_type")
        if kind == "rlvr":
            ctx.drop("pure_opd_pipeline_type", "rlvr: ROLL's RLVR pipeline answering prompts, as posttrain's RL stage does here")
        else:
            ctx.refuse("pure_opd_pipeline_type", f"{kind!r}: the ROLL dialect reads on-policy distillation files of the rlvr pipeline only; write an "
                                                 "agentic stage with algorithm.adv_estimator on_policy_distill and ref.model_path in posttrain's own config", None, kind)
    for key, native in (("use_kl_loss", "actor.use_kl_loss"), ("add_token_level_kl", "algorithm.use_kl_in_reward")):
        ctx.consume(key)
        ctx.set(native, False, key, "ROLL's pure OPD mode switches it off (the teacher's KL is the advantage)")
    penalty = ctx.get("kl_penalty", "kl")
    if penalty not in ("kl", "k1"):
        ctx.consume("kl_penalty")
        ctx.refuse("kl_penalty", f"ROLL's OPD advantage is minus the {penalty!r} estimate of KL(student, teacher) per token; posttrain's "
                                 "on_policy_distill is the k1 estimate (log pi_teacher - log pi_student): use kl_penalty: kl", None, penalty)
    ref = "reference.model_args.model_name_or_path"
    ctx.consume(ref)
    coef = ctx.get("reference.opd_kl_coef")
    ctx.consume("reference.opd_kl_coef")
    tags = ctx.get("reference.tag_included")
    if routed is not None:  # one of several teachers: ref.teachers.<name>, scoring the rows of its tags
        if ctx.get(ref) is None:
            ctx.refuse(ref, "ROLL's on-policy distillation needs each teacher's model_name_or_path", f"ref.teachers.{routed}.model_path", None)
        else:
            ctx.set(f"ref.teachers.{routed}.model_path", ctx.get(ref), ref, "one of ROLL's teachers, a frozen model on every trainer worker")
        ctx.set(f"ref.teachers.{routed}.kl_coef", 1.0 if coef is None else float(coef), "reference.opd_kl_coef", "" if coef is not None else "ROLL's default: 1.0")
        ctx.consume("reference.tag_included")
        ctx.set(f"ref.teachers.{routed}.tag_included", list(tags or []), "reference.tag_included",
                "the rows this teacher scores (by their domain's tags, as ROLL routes them)" if tags else "empty: the teacher scores every row, as in ROLL")
        return
    if ctx.get(ref) is None:
        ctx.refuse(ref, "ROLL's on-policy distillation needs the teacher's model_name_or_path", "ref.model_path", None)
    else:
        ctx.set("ref.model_path", ctx.get(ref), ref, "the teacher scores the student's samples as posttrain's reference role")
    if tags:  # one teacher limited to some tags: posttrain's ref.teachers with that one teacher
        ctx.consume("reference.tag_included")
        ctx.refuse("reference.tag_included", f"the teacher scores only rows tagged {tags} in ROLL (others get a zero advantage); write it as "
                                             "ref.teachers with this one teacher (model_path, tag_included, kl_coef) in posttrain's config", None, tags)
        return
    ctx.set("algorithm.adv_estimator_args", {"kl_coef": 1.0 if coef is None else float(coef)}, "reference.opd_kl_coef",
            "" if coef is not None else "ROLL's default: 1.0")
    if ctx.has("reference.tag_included"):
        ctx.consume("reference.tag_included")
        ctx.drop("reference.tag_included", "empty: the teacher scores every row, as posttrain's")
