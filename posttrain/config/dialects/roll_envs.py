"""ROLL's environment variables (``system_envs``, per role and for the pipeline) onto ``cluster.env_vars``.

What ROLL does (roll/configs/base_config.py, roll/distributed/executor/cluster.py): the pipeline's
``system_envs`` are set in the driver and fill what ``actor_train``, ``actor_infer``, ``reference``
and ``critic`` leave out of their own ``system_envs`` (a role's own value wins); each role's worker
processes start with its resulting variables. The environment managers (``train_env_manager``,
``val_env_manager``) start with their own ``system_envs`` only.

posttrain's roles share their worker processes, which all get ``cluster.env_vars``. The union of
every role's variables is therefore exact wherever no two roles give one variable different values:
each process then sees every value some role of ROLL's sees (a variable only one role set reaches
the others too, as one process hosts them all). A variable with different values in two roles has
no shared-process counterpart and is refused on each role that sets it, naming the values.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.report import Entry
from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule

PIPELINE = "system_envs"
INHERITING = ("actor_train", "actor_infer", "reference", "critic")  # the pipeline's variables fill theirs
OWN_ONLY = ("train_env_manager", "val_env_manager")
NATIVE = "cluster.env_vars"


def system_envs(ctx: Context) -> None:
    keys = [k for k in (PIPELINE, *(f"{role}.{PIPELINE}" for role in (*INHERITING, *OWN_ONLY))) if ctx.has(k)]
    if not keys:
        return
    ctx.consume(*keys)
    given: dict[str, dict[str, Any]] = {}
    for key in keys:
        value = ctx.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            ctx.refuse(key, "expected a mapping of environment variable names to values", NATIVE, value)
            continue
        given[key] = value
    pipeline = given.get(PIPELINE, {})
    effective: dict[str, dict[str, Any]] = {PIPELINE: pipeline}  # the driver's: ROLL sets it in its own process
    for role in INHERITING:  # a role absent from the file still gets the pipeline's variables (critic: when trained)
        if role != "critic" or ctx.has("critic"):
            effective[f"{role}.{PIPELINE}"] = {**pipeline, **given.get(f"{role}.{PIPELINE}", {})}
    for role in OWN_ONLY:
        if f"{role}.{PIPELINE}" in given:
            effective[f"{role}.{PIPELINE}"] = given[f"{role}.{PIPELINE}"]
    merged: dict[str, Any] = {}
    for name in dict.fromkeys(n for env in effective.values() for n in env):
        values = {key: env[name] for key, env in effective.items() if name in env}
        if len({str(v) for v in values.values()}) == 1:  # environment values are strings: 1 and "1" agree
            merged[name] = next(iter(values.values()))
            continue
        seen = ", ".join(f"{key}: {value!r}" for key, value in values.items())
        for key in given:
            if name in given[key]:
                ctx.refuse(f"{key}.{name}", f"roles that share posttrain's worker processes give {name} different values ({seen}); "
                           "cluster.env_vars sets one value in every process: give it one value", NATIVE, given[key][name])
    if not merged:
        return
    why = "every role's variables in every process (posttrain's roles share them)"
    first, *others = given
    ctx.set(NATIVE, merged, first, why)
    for key in others:  # each key is named in the report
        ctx.report.add(Entry(key, "translated", NATIVE, merged, why))


_HOW = ("merged with the other roles' into cluster.env_vars (posttrain's roles share processes: each gets every role's "
        "variables); a variable two roles set to different values is refused")
RULES: dict[str, Rule] = {
    PIPELINE: Rule(NATIVE, "the driver's and (where a role sets none of its own) every role's variables; " + _HOW, {"USE_MODELSCOPE": "1"}),
    **{f"{role}.{PIPELINE}": Rule(NATIVE, _HOW, {"NCCL_DEBUG": "INFO"}) for role in (*INHERITING, *OWN_ONLY)},
}
HANDLERS = [system_envs]
