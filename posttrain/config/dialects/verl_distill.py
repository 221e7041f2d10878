"""verl 0.10's on-policy distillation (``distillation.*``) on posttrain's on_policy_distill estimator.

What verl does (verl/trainer/ppo/losses.py, distillation_ppo_loss / distillation_loss; its
distillation config in verl/workers/config/distillation.py): a teacher served by its own engine
scores every sampled token at temperature 1, and with ``distillation_loss.use_policy_gradient`` the
per-token ``D_t = s_t - t_t`` (``loss_mode`` k1/kl: the student's log-prob minus the teacher's,
clamped to ``±loss_max_clamp``) becomes the advantage ``A_t = -D_t`` of a vanilla PPO-clip loss with
the distillation section's own clip ratios and a dual-clip bound of 3. With
``use_task_rewards: false`` the task's PPO term, its entropy bonus and KL loss are not in the loss.

posttrain's ``on_policy_distill`` estimator computes ``A_t = kl_coef (t_t - s_t)`` from the old
log-probs, then the actor's vanilla PPO loss trains on it (posttrain.algorithms.advantages_distill).
The two are the same loss when:

- ``loss_mode`` is k1 (or kl), ``use_policy_gradient`` true and ``use_task_rewards`` false;
- one optimizer step per batch (``ppo_epochs`` 1, ``ppo_mini_batch_size`` = ``data.train_batch_size``):
  verl takes ``s_t`` from the policy being updated, posttrain from the policy before the step; they
  agree before the first step only;
- the rollout samples at temperature 1 (verl's teacher scores at 1, posttrain's at the rollout's);
- no KL term of verl's own (``actor.use_kl_loss``, ``algorithm.use_kl_in_reward``): posttrain's
  reference is the teacher here.

Then: ``adv_estimator on_policy_distill`` (``kl_coef`` 1), the teacher's ``model_path`` as
``ref.model_path`` (several named teachers: ``ref.teachers``, each taking the rows whose
``teacher_key`` column holds its ``key``, which is posttrain's routing by ``data.reward_fn_key``),
``loss_max_clamp`` as ``algorithm.advantage_clip``, the distillation clip ratios as the actor's, a
dual-clip bound of 3, no entropy bonus. Any other combination is refused, naming what differs.
The teacher's engine and its devices (``inference.*``, ``num_replicas``, ``n_gpus_per_node``,
``nnodes``) are where it runs, not what it computes: dropped (``cluster.device_mapping.ref`` places
posttrain's teacher on devices of its own).

``loss_mode: forward_kl_topk`` (verl/trainer/distillation/losses.py and fsdp/losses.py, the Megatron
loss the same per token): the teacher's engine returns its top-``topk`` log-probs at temperature 1
(vLLM prompt log-probs), the student's log-softmax of its logits / the rollout temperature is
gathered at those tokens, both are floored at ``log_prob_min_clamp``, the top-k forward KL is floored
at 0 and capped at ``loss_max_clamp``. Without ``use_policy_gradient`` it is a supervised term
aggregated with the actor's ``loss_agg_mode``: the actor's whole loss (``use_task_rewards`` false),
or added to the task's PPO loss with ``distillation_loss_coef``. That is posttrain's
``actor.topk_kl`` (posttrain.algorithms.distill_topk) with the teacher as ``ref.model_path``, on one
teacher. With ``use_policy_gradient`` verl trains minus the top-k KL as a PPO advantage: refused.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.source import leaves
from posttrain.config.dialects.verl_release import value_of
from posttrain.config.tables import Rule

_D = "distillation"
_LOSS = f"{_D}.distillation_loss"
_ACTOR = "actor_rollout_ref.actor"
_PLACEMENT = ("where verl serves its teachers (a pool of devices of their own, engine replicas); posttrain computes the teacher's "
              "log-probs beside the actor, or on devices of their own with cluster.device_mapping.ref")
_ENGINE = "the teacher's inference engine settings (where and how fast it runs, not its log-probs); posttrain's teacher runs as a reference model"
# the actor's keys that feed only verl's task PPO term, which use_task_rewards false leaves out of the loss
_TASK_TERM = ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "entropy_coeff", "policy_loss.loss_mode")


def _keys(ctx: Any, prefix: str) -> list[str]:
    """The dotted leaves the line has under ``prefix``."""
    section = ctx.get(prefix)
    return [prefix + "." + k for k in leaves(section)] if isinstance(section, dict) else ([prefix] if ctx.has(prefix) else [])


def distillation(ctx: Any) -> None:
    """``distillation.*`` (module docstring)."""
    keys = _keys(ctx, _D)
    if not keys:
        return
    ctx.consume(*keys)
    if not value_of(ctx, f"{_D}.enabled"):
        for key in keys:
            ctx.drop(key, "distillation.enabled is false: verl reads none of the section")
        return
    why = _not_exact(ctx)
    if why is not None:
        for key in keys:
            ctx.refuse(key, f"verl 0.10's on-policy distillation as this line sets it: {why}", None, ctx.get(key))
        return
    teachers = _teachers(ctx)
    if isinstance(teachers, str):
        for key in keys:
            ctx.refuse(key, teachers, None, ctx.get(key))
        return
    _translate(ctx, keys, teachers)


def _topk(ctx: Any) -> bool:
    return value_of(ctx, f"{_LOSS}.loss_mode") == "forward_kl_topk"


def _not_exact(ctx: Any) -> str | None:
    """Why the line's distillation is not posttrain's on_policy_distill (or actor.topk_kl), or None."""
    mode, pg, task = (value_of(ctx, f"{_LOSS}.{k}") for k in ("loss_mode", "use_policy_gradient", "use_task_rewards"))
    if mode == "forward_kl_topk":
        if pg:
            return ("forward_kl_topk with use_policy_gradient true: verl trains minus each token's top-k KL as a PPO advantage; "
                    "posttrain's top-k term (actor.topk_kl) is the supervised loss verl computes with use_policy_gradient false")
        return _kl_terms(ctx)
    if mode not in ("k1", "kl"):
        return (f"loss_mode {mode}: posttrain's teacher advantage is k1 (student minus teacher log-prob of the sampled token); "
                "top-k and other per-token divergences are not translated")
    if not pg:
        return "use_policy_gradient false with k1: verl refuses that combination itself (k1 is a policy-gradient loss)"
    if task:
        return ("use_task_rewards true: verl adds the distillation PPO term to the task's PPO term, and posttrain's estimators give "
                "one advantage stream (set use_task_rewards=False)")
    if value_of(ctx, f"{_LOSS}.policy_loss_mode") != "vanilla":
        return "policy_loss_mode: verl's distillation runs vanilla PPO only"
    temperature = value_of(ctx, "actor_rollout_ref.rollout.temperature")
    if temperature != 1:
        return (f"actor_rollout_ref.rollout.temperature {temperature}: verl's teacher scores at temperature 1 and the student at the "
                "rollout's; posttrain scores both at rollout.temperature, so only 1 gives the same numbers")
    epochs, mini, batch = (value_of(ctx, k) for k in (f"{_ACTOR}.ppo_epochs", f"{_ACTOR}.ppo_mini_batch_size", "data.train_batch_size"))
    if epochs != 1 or mini != batch:
        return (f"ppo_epochs {epochs}, ppo_mini_batch_size {mini} of data.train_batch_size {batch}: verl takes the student's log-prob "
                "in the advantage from the policy being updated, posttrain's on_policy_distill from the policy before the step, the "
                "same only with one optimizer step per batch (ppo_epochs 1, ppo_mini_batch_size = train_batch_size)")
    return _kl_terms(ctx)


def _kl_terms(ctx: Any) -> str | None:
    for key in (f"{_ACTOR}.use_kl_loss", "algorithm.use_kl_in_reward"):
        if value_of(ctx, key):
            return f"{key} true: its KL is to verl's initial policy, and posttrain's reference is the teacher in on-policy distillation"
    return None


def _teachers(ctx: Any) -> dict[str, dict[str, Any]] | str:
    """``{name: {model_path, key}}`` of the teachers verl serves, or why they are refused."""
    section = ctx.get(f"{_D}.teacher_models") or {}
    named = {n: t for n, t in section.items() if n != "teacher_model" and isinstance(t, dict)}
    chosen = named or ({"teacher_model": section["teacher_model"]} if isinstance(section.get("teacher_model"), dict) else {})
    if not chosen or any(not t.get("model_path") for t in chosen.values()):
        return "distillation.teacher_models: each teacher needs its model_path"
    for name, teacher in chosen.items():
        if (teacher.get("inference") or {}).get("quantization"):
            return f"distillation.teacher_models.{name}.inference.quantization: a quantized teacher gives other log-probs than its model_path"
    if len(chosen) > 1 and _topk(ctx):
        return "forward_kl_topk with several teachers: posttrain's top-k term (actor.topk_kl) takes one teacher, the reference model"
    if len(chosen) > 1:
        key = value_of(ctx, f"{_D}.teacher_key")
        routing = value_of(ctx, "data.reward_fn_key")
        if key != routing:
            return (f"distillation.teacher_key {key!r}: posttrain routes rows to teachers by the data.reward_fn_key column "
                    f"({routing!r}), which also picks the reward function; set the two to the same column")
        if any(not t.get("key") for t in chosen.values()):
            return "distillation.teacher_models: each of several teachers needs the key of the rows it takes"
    return chosen


def _translate(ctx: Any, keys: list[str], teachers: dict[str, dict[str, Any]]) -> None:
    if _topk(ctx):
        _translate_topk(ctx, keys, teachers)
        return
    enabled = f"{_D}.enabled"
    ctx.set("algorithm.adv_estimator", "on_policy_distill", enabled,
            "the teacher's advantage kl_coef (t - s) of every sampled token, trained with vanilla PPO (use_task_rewards false)")
    if len(teachers) == 1:
        ((name, teacher),) = teachers.items()
        model = f"{_D}.teacher_models.{name}.model_path"
        ctx.set("ref.model_path", teacher["model_path"], model, "the teacher: posttrain's reference model scores the tokens")
        ctx.set("algorithm.adv_estimator_args", {"kl_coef": 1.0}, enabled, "verl's distillation advantage has weight 1")
    else:
        ctx.set("ref.teachers", {name: {"model_path": t["model_path"], "tag_included": [t["key"]], "kl_coef": 1.0} for name, t in teachers.items()},
                f"{_D}.teacher_models", "each teacher takes the rows whose data.reward_fn_key column holds its key")
    clamp = value_of(ctx, f"{_LOSS}.loss_max_clamp")
    if clamp is not None:
        ctx.set("algorithm.advantage_clip", clamp, f"{_LOSS}.loss_max_clamp", "the same symmetric clamp of the per-token teacher term")
    for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
        ctx.set(f"actor.{name}", value_of(ctx, f"{_LOSS}.{name}"), f"{_LOSS}.{name}" if ctx.has(f"{_LOSS}.{name}") else enabled,
                "the distillation PPO term's clip range (verl's own for it, not the actor's)")
    ctx.set("actor.dual_clip", True, enabled, "verl's distillation PPO term clips negative advantages at 3")
    ctx.set("actor.clip_ratio_c", 3.0, enabled, "verl's distillation PPO term's dual-clip bound, fixed at 3")
    ctx.set("actor.policy_loss.loss_mode", "vanilla", enabled, "verl's distillation runs vanilla PPO")
    ctx.set("actor.entropy_coeff", 0.0, enabled, "use_task_rewards false leaves the entropy bonus out of verl's loss")
    set_here = {f"{_LOSS}.{n}" for n in ("clip_ratio", "clip_ratio_low", "clip_ratio_high")}
    if clamp is not None:
        set_here.add(f"{_LOSS}.loss_max_clamp")
    _drop_rest(ctx, keys, teachers, set_here)
    _drop_task_term(ctx)


def _translate_topk(ctx: Any, keys: list[str], teachers: dict[str, dict[str, Any]]) -> None:
    """forward_kl_topk without the policy gradient: actor.topk_kl with the one teacher as ref.model_path."""
    enabled = f"{_D}.enabled"
    ((name, teacher),) = teachers.items()
    ctx.set("ref.model_path", teacher["model_path"], f"{_D}.teacher_models.{name}.model_path",
            "the teacher: posttrain's reference model computes its top-k")
    task = value_of(ctx, f"{_LOSS}.use_task_rewards")
    fields = {"topk": "k", "log_prob_min_clamp": "log_prob_min_clamp", "loss_max_clamp": "loss_max_clamp"}
    if task:
        fields["distillation_loss_coef"] = "coef"
    set_here = set()
    for verl_name, field in fields.items():
        key = f"{_LOSS}.{verl_name}"
        value = value_of(ctx, key)
        if value is not None:
            ctx.set(f"actor.topk_kl.{field}", value, key if ctx.has(key) else enabled, "the same setting of the top-k forward KL term")
            set_here.add(key)
    task_key = f"{_LOSS}.use_task_rewards"
    ctx.set("actor.topk_kl.policy_loss", bool(task), task_key if ctx.has(task_key) else enabled,
            "the task's PPO loss beside the term" if task else "the term is the actor's whole loss (no task PPO term)")
    set_here.add(task_key)
    if not task:
        ctx.set("actor.entropy_coeff", 0.0, enabled, "use_task_rewards false leaves the entropy bonus out of verl's loss")
    _drop_rest(ctx, keys, teachers, set_here)
    if not task:
        _drop_task_term(ctx)


def _drop_rest(ctx: Any, keys: list[str], teachers: dict[str, dict[str, Any]], set_here: set[str]) -> None:
    """Drop the section's keys that were not set above, each with its reason."""
    enabled = f"{_D}.enabled"
    for key in keys:
        if key == enabled or key in set_here or (len(teachers) == 1 and key == f"{_D}.teacher_models.{next(iter(teachers))}.model_path"):
            continue  # reported where they were set above
        if len(teachers) > 1 and key.split(".")[-1] in ("model_path", "key"):
            ctx.drop(key, "read into ref.teachers")
        elif key.startswith(f"{_D}.teacher_models.") and key.split(".")[2] not in teachers:
            ctx.drop(key, "verl drops its default teacher_model when named teachers are given")
        else:
            ctx.drop(key, _why_dropped(key, _topk(ctx)))


def _drop_task_term(ctx: Any) -> None:
    """use_task_rewards false: the actor's task PPO settings and the task estimator train nothing."""
    for name in _TASK_TERM:
        key = f"{_ACTOR}.{name}"
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, "feeds verl's task PPO term only, which use_task_rewards false leaves out of the loss")
    if ctx.has("algorithm.adv_estimator"):
        ctx.consume("algorithm.adv_estimator")
        ctx.drop("algorithm.adv_estimator", "verl computes the task's advantages and, with use_task_rewards false, trains on none of them")


def _why_dropped(key: str, topk: bool = False) -> str:
    name = key.split(".")[-1]
    if ".inference." in key or name == "num_replicas":
        return _ENGINE
    if name in ("n_gpus_per_node", "nnodes"):
        return _PLACEMENT
    if topk and name in ("use_chunked_topk", "chunked_topk_chunk_size"):
        return "how verl's student log-softmax is computed (in chunks of tokens or whole): the same numbers; posttrain's head runs in chunks"
    if topk and name in ("policy_loss_mode", "clip_ratio", "clip_ratio_low", "clip_ratio_high", "use_policy_gradient"):
        return "read by the policy-gradient form of the distillation loss only (use_policy_gradient false)"
    if topk and name == "loss_mode":
        return "forward_kl_topk: posttrain's actor.topk_kl"
    if topk and name == "distillation_loss_coef":
        return "verl weighs the distillation term 1 when use_task_rewards is false"
    if name in ("topk", "log_prob_min_clamp", "use_chunked_topk", "chunked_topk_chunk_size"):
        return "read by verl's top-k loss (forward_kl_topk) only"
    if name == "teacher_key":
        return "one teacher takes every row"
    if name == "key":
        return "one teacher takes every row (verl names it default)"
    if name in ("loss_mode", "use_policy_gradient", "use_task_rewards", "policy_loss_mode"):
        return "k1 with the policy gradient and no task term: posttrain's on_policy_distill estimator with vanilla PPO"
    if name == "distillation_loss_coef":
        return "verl weighs the distillation term 1 when use_task_rewards is false"
    return "the distillation section's own setting, the same in posttrain's on_policy_distill"


HANDLERS = [distillation]
RULES: dict[str, Rule] = {
    f"{_D}.enabled": Rule("algorithm.adv_estimator", "with distillation_loss k1, use_policy_gradient true and use_task_rewards false (one optimizer step per batch, rollout temperature 1): on_policy_distill with the teacher as ref.model_path (several: ref.teachers), loss_max_clamp as algorithm.advantage_clip, the section's clip ratios as the actor's, dual clip 3, no entropy bonus; forward_kl_topk without use_policy_gradient: actor.topk_kl (topk as k, the clamps, use_task_rewards as policy_loss, distillation_loss_coef as coef with task rewards) with the one teacher as ref.model_path; other combinations refused", True,
                          ((f"{_D}.teacher_models.teacher_model.model_path", "/models/teacher"), (f"{_LOSS}.loss_mode", "k1"),
                           (f"{_LOSS}.use_policy_gradient", True), (f"{_LOSS}.use_task_rewards", False),
                           ("data.train_batch_size", 256), (f"{_ACTOR}.ppo_mini_batch_size", 256))),
}
