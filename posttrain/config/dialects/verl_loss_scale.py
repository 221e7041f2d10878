"""How verl weighs a mini-batch's micro-batch losses: by release and worker implementation.

verl 0.8 runs its legacy workers unless ``trainer.use_legacy_worker_impl`` is ``disable`` (its
default ``auto`` chooses them: verl/trainer/main_ppo.py). Their actor (verl/workers/actor/dp_actor.py)
and critic (verl/workers/critic/dp_critic.py) aggregate each micro-batch's loss over that micro-batch
alone (``agg_loss`` without the global batch counts, which only the engine workers fill in) and scale
it by 1 / the accumulation steps, or by its responses over the mini-batch's with ``use_dynamic_bsz``:
posttrain's ``micro_batch_weight: rows``. A token-mean is then the mean of the micro-batches' own token
means. verl's engine workers (0.8 with ``disable``, and 0.10, which has no others) divide by the whole
mini-batch's counts: posttrain's ``normaliser``, its default.

Where rows is exact: micro-batches of a fixed size hold the same rows in the same order as verl's.
With ``use_dynamic_bsz`` the role also cuts its micro-batches as verl does (``dynamic_bsz_partition:
balanced``, posttrain.workers.balanced_split: the same groups in one process; with several, each
process cuts its own share of the rows, which verl deals out otherwise). verl's Megatron actor weighs
its micro-batches equally (Megatron divides by their count), the same as by responses only for a
fixed size.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.verl_release import release, value_of
from posttrain.config.dialects.verl_sft import MARK
from posttrain.config.tables import Rule

KEY = "trainer.use_legacy_worker_impl"
_ROLES = (("actor", "actor_rollout_ref.actor"), ("critic", "critic"))


def legacy_loss_scale(ctx: Any) -> None:
    """``trainer.use_legacy_worker_impl`` and the release (module docstring)."""
    impl = ctx.get(KEY, "auto")
    if ctx.has(KEY):
        ctx.consume(KEY)
    if ctx.has(MARK):  # verl's SFT trainer: its own loss scope (posttrain.config.dialects.verl_sft)
        if ctx.has(KEY):
            ctx.drop(KEY, "verl's SFT trainer has one implementation")
        return
    # a file read on its own (no release) that names the key is verl 0.8's: 0.10 has no such key
    if impl == "disable" or release() not in ("0.8", None) or (release() is None and not ctx.has(KEY)):
        if ctx.has(KEY):
            ctx.drop(KEY, "verl's engine workers divide each micro-batch's loss by the whole mini-batch's counts, as posttrain does"
                     if impl == "disable" else "verl 0.10 has only its engine workers, which divide by the whole mini-batch's counts, as posttrain does")
        return
    critic = value_of(ctx, "algorithm.adv_estimator") == "gae"
    for role, prefix in _ROLES:
        if role == "critic" and not critic:
            continue
        if value_of(ctx, f"{prefix}.use_dynamic_bsz"):
            ctx.set(f"{role}.dynamic_bsz_partition", "balanced", KEY, "verl's legacy workers cut a dynamic batch into "
                    "ceil(tokens / budget) micro-batches of balanced workloads, whose own means the rows weighting averages")
        megatron = ("; verl's Megatron workers weigh their micro-batches equally, the same only for a fixed micro-batch size"
                    if value_of(ctx, f"{prefix}.strategy") == "megatron" else "")
        why = (f"verl 0.8's legacy {role} (use_legacy_worker_impl {impl}" + (", its default" if not ctx.has(KEY) else "") +
               ") scales each micro-batch's own loss mean by 1 / the accumulation steps" + megatron)
        ctx.set(f"{role}.micro_batch_weight", "rows", KEY, why)


HANDLERS = [legacy_loss_scale]
RULES: dict[str, Rule] = {
    KEY: Rule("actor.micro_batch_weight, critic.micro_batch_weight",
              "verl 0.8 with auto (its default) or enable: rows, its legacy workers scaling each micro-batch's own loss mean by 1 / "
              "the accumulation steps, and with use_dynamic_bsz the role's dynamic_bsz_partition balanced (verl's micro-batches); "
              "disable, and verl 0.10: normaliser (the mini-batch's counts), posttrain's default", "auto"),
}
