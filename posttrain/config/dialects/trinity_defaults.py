"""Trinity-RFT's derived values and per-algorithm defaults, where posttrain's differ.

Trinity-RFT fills what a file leaves out when it validates the config, and hands the result to its
verl trainer. The rules here follow that validation, not posttrain's field defaults:

- KL: each ``algorithm_type`` brings default loss functions (the ``kl_loss_fn`` column of
  posttrain.config.dialects.trinity_algorithms.TYPES); most use a KL *loss* ``k2``
  (``(log pi - log pi_ref)^2 / 2``) with coefficient 0.001, while ``sft``, ``asymre``, ``sppo`` and
  the distillation types use none. The KL loss is on exactly when ``kl_loss_fn`` is
  not ``none``, and KL in the reward exactly when ``kl_penalty_fn`` (default ``none``) is not. A
  file without ``algorithm_type`` is Trinity's default type, ``ppo``.
- Lengths: of ``max_model_len``, ``max_prompt_tokens`` and ``max_response_tokens``, a missing one is
  derived from the others: the prompt gets ``max_model_len - max_response_tokens``, the response
  ``max_model_len - max_prompt_tokens``, both unset split ``max_model_len`` in half, and a missing
  ``max_model_len`` is the sum.
- Batching: ``trainer.use_dynamic_bsz`` (default true) and ``trainer.max_token_len_per_gpu``
  (default ``ceil(2 x max_model_len / ulysses_sequence_parallel_size)``, raised to at least
  ``ceil(max_model_len / ulysses_sequence_parallel_size)``; not derived for a config with an SFT or
  DPO stage, whose sequences posttrain bounds by data.max_length) apply to the actor and the critic alike,
  and the critic's optimizer step is the actor's (``buffer.train_batch_size`` experiences). A value
  the inline verl config (``trainer.trainer_config``) sets for a role wins, as in Trinity-RFT.
- Micro-batch loss scale: Trinity-RFT's actor scales each micro-batch's loss by 1 / the accumulation
  steps (with dynamic batch size, by its responses over the mini-batch's): posttrain's
  ``actor.micro_batch_weight: rows``. With ``trainer.fix_actor_microbatch_loss_scale`` true and a
  token-mean loss it scales by the micro-batch's share of the mini-batch's tokens, posttrain's
  ``normaliser`` (one token mean over the mini-batch). Its critic (verl's legacy one) is always by
  rows: ``critic.micro_batch_weight``. SFT alike: ``actor.sft_loss_scope``
  ``micro_batch_rows``, or with the fix ``batch``; DPO's per-pair mean weighted by rows is the batch's
  mean over its pairs, posttrain's DPO loss. With rows the gradient depends on the cut:
  exact for fixed micro-batch sizes (rows in order, as verl cuts them), and with dynamic batch size
  the role cuts its micro-batches as verl does (``dynamic_bsz_partition: balanced``: the same groups
  in one process).

Inside ``stages`` only what a stage writes is derived (a stage's ``algorithm_type`` brings its KL
defaults); the rest comes from the base config.
"""

from __future__ import annotations

import math
from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_algorithms import TYPES

TRINITY_TASKS_DEFAULT = 1  # Trinity-RFT's buffer.batch_size: tasks per explore step

TRINITY_DEFAULT = "Trinity-RFT's default (not written in the file)"
DEFAULT_ALGORITHM_TYPE = "ppo"
KL_COEF_DEFAULT = 0.001


def _kl(ctx: Context, default_type: str | None) -> None:
    kind = ctx.get("algorithm.algorithm_type", default_type)
    loss_key, penalty_key, coef_key = "algorithm.kl_loss_fn", "algorithm.kl_penalty_fn", "algorithm.kl_penalty_fn_args.kl_coef"
    if kind not in TYPES or TYPES[kind].kind != "rl":
        for key in (loss_key, penalty_key):  # "none" is what posttrain's SFT/DPO do anyway
            if ctx.get(key) == "none":
                ctx.consume(key)
                ctx.drop(key, "none: no KL term, as posttrain trains this kind")
        return  # other values reach their fields (or are refused) one to one
    loss = ctx.get(loss_key, TYPES[kind].kl_loss_fn)
    why = "" if ctx.has(loss_key) else f"{TRINITY_DEFAULT}: algorithm_type {kind!r} uses kl_loss_fn {loss!r}"
    ctx.consume(loss_key)
    ctx.set("actor.use_kl_loss", loss != "none", loss_key, why or "on unless kl_loss_fn is none")
    if loss != "none":
        ctx.set("actor.kl_loss_type", loss, loss_key, why)
        if not ctx.has("algorithm.kl_loss_fn_args.kl_coef"):
            ctx.set("actor.kl_loss_coef", KL_COEF_DEFAULT, "algorithm.kl_loss_fn_args.kl_coef", TRINITY_DEFAULT)
    penalty = ctx.get(penalty_key, "none")
    ctx.consume(penalty_key, coef_key)
    ctx.set("algorithm.use_kl_in_reward", penalty != "none", penalty_key, "" if ctx.has(penalty_key) else TRINITY_DEFAULT + ": none")
    if penalty == "none":
        if ctx.has(coef_key):
            ctx.drop(coef_key, "kl_penalty_fn is none: no KL in the reward to weigh")
        return
    ctx.set("algorithm.kl_penalty", penalty, penalty_key)
    ctx.set("algorithm.kl_ctrl.kl_coef", ctx.get(coef_key, KL_COEF_DEFAULT), coef_key, "" if ctx.has(coef_key) else TRINITY_DEFAULT)


def kl_defaults(ctx: Context) -> None:
    """The KL terms of the whole config (no algorithm_type: Trinity's default, ppo)."""
    _kl(ctx, DEFAULT_ALGORITHM_TYPE)


def stage_kl_defaults(ctx: Context) -> None:
    """The KL terms of one stage: only when the stage names its own algorithm_type."""
    if ctx.has("algorithm.algorithm_type"):
        _kl(ctx, None)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def lengths(ctx: Context) -> int | None:
    """Trinity-RFT's model-length rules (module docstring); returns max_model_len when known."""
    keys = ("model.max_model_len", "model.max_prompt_tokens", "model.max_response_tokens")
    total, prompt, response = (ctx.get(k) for k in keys)
    if not all(v is None or _positive_int(v) for v in (total, prompt, response)):
        return None  # validation names the bad value at its key
    if total is None:
        if prompt is None or response is None:
            return None  # nothing to derive: what is given translates one to one
        total, why_total = prompt + response, "max_prompt_tokens + max_response_tokens"
    else:
        why_total = ""
    if prompt is not None and response is not None and prompt + response > total:
        ctx.consume(*keys)
        ctx.refuse(keys[0], f"max_prompt_tokens + max_response_tokens ({prompt} + {response}) exceeds max_model_len ({total}); Trinity-RFT refuses this too", "model.max_model_len", total)
        return None
    why_prompt = why_response = ""
    if prompt is None and response is None:
        prompt, response = total // 2, total - total // 2
        why_prompt = why_response = "neither max_prompt_tokens nor max_response_tokens given: max_model_len split in half"
    elif prompt is None:
        response = min(response, total - 1)
        prompt, why_prompt = total - response, f"max_model_len - max_response_tokens ({total} - {response})"
    elif response is None:
        prompt = min(prompt, total - 1)
        response, why_response = total - prompt, f"max_model_len - max_prompt_tokens ({total} - {prompt})"
    ctx.consume(*keys)
    ctx.set("model.max_model_len", total, keys[0], why_total)
    ctx.set("data.max_prompt_length", prompt, keys[1], why_prompt)
    ctx.set("data.max_response_length", response, keys[2], why_response)
    return total


def _trains_sequences(ctx: Context) -> bool:
    """Whether the config or one of its stages is SFT/DPO: posttrain bounds those sequences by
    data.max_length, not by the model length, so no budget is derived from max_model_len there."""
    stages = ctx.get("stages") if isinstance(ctx.get("stages"), list) else []
    types = [ctx.get("algorithm.algorithm_type")] + [s.get("algorithm", {}).get("algorithm_type") for s in stages if isinstance(s, dict) and isinstance(s.get("algorithm"), dict)]
    return any(t in ("sft", "dpo") for t in types)


def batching(ctx: Context) -> None:
    """Dynamic batching and token budgets of actor and critic, and the critic's optimizer step."""
    total = lengths(ctx)
    dynamic_key, budget_key = "trainer.use_dynamic_bsz", "trainer.max_token_len_per_gpu"
    dynamic = ctx.get(dynamic_key, True)
    sp = ctx.get("trainer.ulysses_sequence_parallel_size", 1)
    budget = ctx.get(budget_key)
    why_budget = ""
    if budget is None and total is not None and _positive_int(sp) and not _trains_sequences(ctx):
        budget = math.ceil(2 * total / sp)
        why_budget = f"{TRINITY_DEFAULT}: ceil(2 x max_model_len {total} / ulysses_sequence_parallel_size {sp})"
    if _positive_int(budget) and total is not None and _positive_int(sp) and budget * sp < total:
        budget, why_budget = math.ceil(total / sp), f"raised to ceil(max_model_len / ulysses_sequence_parallel_size), as Trinity-RFT does (file: {budget})"
    ctx.consume(dynamic_key, budget_key)
    for role in ("actor", "critic"):
        if f"{role}.use_dynamic_bsz" not in ctx.origin:  # the inline verl config's value wins
            ctx.set(f"{role}.use_dynamic_bsz", dynamic, dynamic_key, "" if ctx.has(dynamic_key) else TRINITY_DEFAULT + ": true")
        if budget is not None and f"{role}.ppo_max_token_len_per_gpu" not in ctx.origin:
            ctx.set(f"{role}.ppo_max_token_len_per_gpu", budget, budget_key, why_budget)
    if _positive_int(sp) and sp > 1 and "critic.ulysses_sequence_parallel_size" not in ctx.origin:
        # Trinity-RFT hands trainer.ulysses_sequence_parallel_size to the critic too (the actor's
        # field names the key; the reference follows the actor's size in posttrain)
        ctx.set("critic.ulysses_sequence_parallel_size", sp, "trainer.ulysses_sequence_parallel_size", "Trinity-RFT splits the critic's sequences as the actor's")
    actor_step = ctx.origin.get("actor.ppo_mini_batch_size")
    if actor_step is not None and "critic.ppo_mini_batch_size" not in ctx.origin:
        ctx.set("critic.ppo_mini_batch_size", actor_step[1], actor_step[0], "Trinity-RFT gives the critic the actor's optimizer step")


def micro_batch_weight(ctx: Context, default_type: str | None = DEFAULT_ALGORITHM_TYPE) -> None:
    """How the actor weighs its micro-batch losses (module docstring; Trinity-RFT's verl dp_actor)."""
    key = "trainer.fix_actor_microbatch_loss_scale"
    kind = ctx.get("algorithm.algorithm_type", default_type)
    fix, mode = ctx.get(key, False), ctx.get("algorithm.loss_agg_mode", "token-mean")
    ctx.consume(key)
    exact = bool(fix) and mode == "token-mean"
    family = TYPES[kind].kind if kind in TYPES else None
    if family == "sft":
        if exact:
            ctx.drop(key, "one token mean over the step's trained tokens, as posttrain's SFT step averages (actor.sft_loss_scope batch)")
        elif mode == "token-mean":
            ctx.set("actor.sft_loss_scope", "micro_batch_rows", key, ("" if ctx.has(key) else f"{TRINITY_DEFAULT}: false; ") +
                    "each micro-batch's token mean weighted by its share of the batch's sequences (1 / the accumulation steps)")
            _verl_cut(ctx, "actor")
        elif ctx.has(key):
            ctx.refuse(key, f"Trinity-RFT's micro-batch loss scale of an SFT loss aggregated by {mode}: posttrain's SFT loss is a token mean",
                       None, fix)
        return
    if family == "dpo":
        if exact:
            ctx.refuse(key, "Trinity-RFT's DPO loss with each micro-batch's mean over its pairs weighted by its share of the batch's "
                            "tokens: posttrain's DPO loss is the batch's mean over its pairs; leave it false", None, fix)
        elif ctx.has(key):
            ctx.drop(key, "each micro-batch's mean over its pairs weighted by its share of the batch's sequences: the batch's mean "
                          "over its pairs, posttrain's DPO loss")
        return
    if family != "rl":
        return
    if ctx.get("algorithm.advantage_fn", TYPES[kind].advantage_fn) == "ppo":  # GAE: a critic, verl 0.7's legacy one
        ctx.set("critic.micro_batch_weight", "rows", key, "Trinity-RFT's critic (verl's legacy critic) scales each micro-batch's "
                "own value-loss mean by 1 / the accumulation steps; the key fixes the actor's only")
        _verl_cut(ctx, "critic")
    if exact:
        ctx.set("actor.micro_batch_weight", "normaliser", key, "each micro-batch weighted by its share of the mini-batch's tokens")
        return
    why = (f"{TRINITY_DEFAULT}: false" if not ctx.has(key) else "") + (
        "" if mode == "token-mean" else f" (with loss_agg_mode {mode} Trinity-RFT scales by 1 / the accumulation steps either way)")
    ctx.set("actor.micro_batch_weight", "rows", key, (why.strip() + "; " if why.strip() else "") +
            "each micro-batch's loss weighted by its share of the mini-batch's responses (1 / the accumulation steps)")
    _verl_cut(ctx, "actor")


def _verl_cut(ctx: Context, role: str) -> None:
    """A role whose micro-batch means are weighted by rows under dynamic batch size cuts its
    micro-batches as verl's do (posttrain.workers.balanced_split), so the means are of the same rows."""
    dynamic = ctx.origin.get(f"{role}.use_dynamic_bsz")
    if dynamic is not None and dynamic[1]:  # reported under the key that turned dynamic batch size on
        ctx.set(f"{role}.dynamic_bsz_partition", "balanced", dynamic[0], "verl's dynamic batch size (Trinity-RFT's trainer) cuts "
                "ceil(tokens / budget) micro-batches of balanced workloads, whose own means the rows weighting averages")


def engine_type(ctx: Context, default_type: str | None = DEFAULT_ALGORITHM_TYPE) -> None:
    """Trinity-RFT's explorer samples with vLLM unless the file names another engine_type (its
    InferenceModelConfig's default is vllm): an RL file that names none generates with posttrain's
    vllm engine too, unless its taskset holds images or videos, which posttrain passes to its hf engine
    only. An external model (the external engine) keeps its engine; SFT and DPO sample nothing."""
    key, kind = "explorer.rollout_model.engine_type", ctx.get("algorithm.algorithm_type", default_type)
    rl = kind in TYPES and TYPES[kind].kind == "rl"
    if not rl or ctx.has(key) or ctx.get("mode", "both") == "train" or "rollout.name" in ctx.origin:
        return
    taskset = "buffer.explorer_input.taskset"
    if ctx.get(f"{taskset}.format.image_key") or ctx.get(f"{taskset}.format.video_key"):
        ctx.set("rollout.name", "hf", key, f"{TRINITY_DEFAULT} is vllm, and posttrain passes images and videos to its hf engine only")
        return
    ctx.set("rollout.name", "vllm", key, f"{TRINITY_DEFAULT}: vllm")


def stage_engine_type(ctx: Context) -> None:
    """The engine of one stage: only when the stage names its own algorithm_type (else the run's)."""
    if ctx.has("algorithm.algorithm_type"):
        engine_type(ctx, None)
