"""The actor: the policy being trained. Computes log-probs and runs the PPO update.

The update follows the reference guides' batching: each rollout batch is split into mini-batches
(one optimizer step each), each mini-batch into micro-batches (one forward/backward each, or packed
by a token budget), repeated for `ppo_epochs`. Micro-batch losses are weighted by their share of the
mini-batch normaliser (see `posttrain.workers.microbatch`), so the gradient does not depend on the
split. The loss is the registered policy loss plus an optional entropy bonus and KL loss, and
ROLL's weights of the RL part and of an SFT term on positive responses, and for a mixture-of-experts
policy the router's load-balancing loss and z-loss, as Megatron adds them:

    loss = rl_loss_coef * (pg_loss + kl_loss_coef * kl(logprob, ref_logprob)) - entropy_coeff * entropy
           + sft_loss_coef * positive_sft_loss + moe_aux_loss_coef * load_balancing_loss + moe_z_loss_coef * router_z_loss
           + topr_loss(scores, topr_positive_loss_coef, topr_negative_loss_coef)
           + topk_kl.coef * topk_kl_loss

each token term aggregated with the same `loss_agg_mode` (as verl does; assembled per micro-batch by
`posttrain.workers.actor_loss`); the SFT term averages over
the mini-batch's positive responses (`posttrain.algorithms.positive_sft_loss`); the router terms are
each micro-batch's own (its routed-token counts are the micro-batch's), weighted by the micro-batch's
share of the mini-batch's real tokens (`posttrain.workers.router_loss`); the top-k distillation
term (`actor.topk_kl`, `posttrain.workers.topk_kl`) compares the policy with the teacher's top-k
tokens, and with `topk_kl.policy_loss` false it is the whole loss (with the router terms).

With routing replay (actor.router_replay.mode R2) the old-log-prob forward also records every
token's experts (`old_logprobs_and_routes`) and every forward of the update routes to them
(`posttrain.models.router_replay`).
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from contextlib import nullcontext
from typing import Any, Callable

import torch
from torch import Tensor, nn

from posttrain.algorithms import get_policy_loss, positive_sft_loss, sum_pi_squared_from_logits
from posttrain.checkpoint.save import Role, save_hf
from posttrain.checkpoint.state import Extra
from posttrain.models.lean_forward import lean_mode
from posttrain.models.token_signal import response_token_signal
from posttrain.models.kernels import activation_offload
from posttrain.models.moe import RouterCapture, capture_router_logits, router_top_k
from posttrain.models.router_replay import check_replayed, record_routes, recorded, replay_routes, route_dtype, set_routes
from posttrain.models.logprobs import response_logprobs
from posttrain.models.precision import autocast
from posttrain.records import RolloutBatch
from posttrain.cluster.fsdp import forward_runner
from posttrain.cluster.parallel import DataParallel
from posttrain.workers.microbatch import (
    SINGLE, accumulate_gradients, clip_and_step, forward_in_order, forward_in_order_many, micro_share, mini_batches,
    normaliser,
)
from posttrain.workers.reference import batched_logprobs
from posttrain.workers.router_loss import mini_totals, router_term
from posttrain.workers.actor_loss import micro_objective
from posttrain.workers.actor_settings import ActorSettings
from posttrain.workers.topk_kl import check_teacher_ids

# Metrics that are aggregates of the loss mode (weighted like the loss across micro-batches); the
# others (clip fractions, ppo_kl, coefficients) are averages over the mini-batch.
ACTOR_LOSS_VALUES = frozenset({"actor/pg_loss", "actor/entropy", "actor/kl_loss", "actor/sft_loss", "actor/moe_aux_loss", "actor/moe_z_loss",
                               "actor/topk_kl_loss"})


# Largest |rollout - recomputed| log-prob gap (over real tokens) at which the rollout's log-probs
# pass for the actor's own: float rounding of fp32 gives ~1e-6, another dtype or a logit
# post-processing engine gives > 1e-3. exp(1e-4) moves the PPO ratio by 0.01 %.
REUSE_ATOL = 1e-4


class Actor:
    """Owns the policy model, its optimizer and LR scheduler. The trainer calls only the methods."""

    def __init__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, settings: ActorSettings,
        dp: DataParallel = SINGLE,
    ):
        """`model` is the policy, or its FSDP root (`posttrain.cluster.fsdp.shard_model`) when the
        role is sharded; `dp`: this process's data-parallel rank of the role."""
        self.run, self.model = forward_runner(model)
        self.dp = dp
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.s = settings
        self.loss_fn = get_policy_loss(settings.loss_mode)
        self.version = 0  # bumped after every optimizer step; the rollout engine must match it
        self.generator = torch.Generator().manual_seed(settings.seed)
        self.reuse_checked: bool | None = None  # rollout log-probs checked equal to a recomputation
        self.reused_last = False  # whether the last `old_logprobs` call reused the rollout's
        self.recomputed_last = False  # whether it ran a forward (also when it checked, then reused)
        self.step = 0  # the trainer step of the running update (for losses that declare global_step)
        self.mini_totals = (0.0, 0.0, 0)  # the running mini-batch's (loss normaliser, positive responses, rows): the SFT term
        self.router_totals = (0.0, 0.0)  # the running mini-batch's (real tokens, loss normaliser): the router term
        self.replay = None  # the open router-replay block of a running update (actor.router_replay.mode R2)

    def old_logprobs(self, batch: RolloutBatch) -> Tensor:
        """log pi_old of the PPO ratio, (B, T): the rollout's own log-probs when they are the actor's,
        else a recomputation (`compute_logprobs`).

        When the rollout sampled from these very weights (every row's `weights_version` is the
        actor's) in the same dtype, its recorded log softmax(logits / T) is what a recomputation
        returns, up to float rounding, and recomputing costs one more forward over the batch. ROLL
        (`enable_old_logprobs_recompute`) makes the recomputation optional likewise, and TRL's
        GRPOTrainer skips it whenever generation and optimizer steps are aligned.
        The first batch is checked against a recomputation; a gap above `REUSE_ATOL` (another
        dtype, an engine that post-processes logits) switches reuse off for the rest of the run.
        With `force_reuse` ("always") on-policy rows reuse the rollout's log-probs unchecked, whatever
        dtype the engine computed in.
        """
        self.reused_last, self.recomputed_last = False, True
        if not self.s.reuse_rollout_logprobs or self.reuse_checked is False:
            return self.compute_logprobs(batch)
        if not bool((batch.weights_version == self.version).all()):
            return self.compute_logprobs(batch)  # off-policy rows: their sampler's weights are gone
        self.recomputed_last = self.reuse_checked is None  # only the first batch is checked
        if self.s.force_reuse:  # "always": the engine's numerics stand in for the actor's, unchecked
            self.reused_last, self.recomputed_last = True, False
            return batch.rollout_logprobs.clone()
        if self.reuse_checked is None:
            recomputed = self.compute_logprobs(batch)
            gap = float(((recomputed - batch.rollout_logprobs).abs() * batch.train_mask).max())  # sampled tokens only if recomputed.numel() else 0.0
            self.reuse_checked = gap <= REUSE_ATOL
            if not self.reuse_checked:
                warnings.warn(
                    f"actor.reuse_rollout_logprobs=auto: rollout log-probs differ from the actor's by up to {gap:.3g} "
                    f"(> {REUSE_ATOL}); recomputing old log-probs for the rest of the run",
                    stacklevel=2,
                )
                return recomputed
        self.reused_last = True
        return batch.rollout_logprobs.clone()

    @torch.inference_mode()
    def compute_logprobs(self, batch: RolloutBatch) -> Tensor:
        """log pi_theta of each response token under the current weights, (B, T); 0 on padding."""
        was_training = self.model.training
        self.model.eval()
        try:
            size, max_tokens = self.s.logprob_batching or (self.s.micro_batch_size, self.s.max_tokens_per_micro_batch)
            with autocast(self.model, self.s.compute_dtype), lean_mode(self.s.lean_forward):
                return batched_logprobs(
                    self.model, batch, self.s.temperature, size, max_tokens, self.s.pack, self.dp, self.run, self.s.head
                )
        finally:
            self.model.train(was_training)

    @torch.inference_mode()
    def old_logprobs_and_routes(self, batch: RolloutBatch) -> tuple[Tensor, Tensor]:
        """Routing replay (R2): log pi_old (B, T) recomputed as `compute_logprobs` does, and in the
        same forward every MoE layer's top-k experts of every real token, (B, S, L, K) in the row
        layout of `posttrain.models.router_replay`, for `update` to replay. The rollout's log-probs
        are never reused here: they come with no routing (verl records in its old-log-prob forward)."""
        was_training = self.model.training
        self.model.eval()
        size, max_tokens = self.s.logprob_batching or (self.s.micro_batch_size, self.s.max_tokens_per_micro_batch)
        dtype = route_dtype(self.model)
        self.reused_last, self.recomputed_last = False, True
        try:
            with autocast(self.model, self.s.compute_dtype), lean_mode(self.s.lean_forward), record_routes(self.model) as session:
                layers, k = len(session.routers), router_top_k(self.model)

                def one(micro: RolloutBatch) -> tuple[Tensor, Tensor]:
                    lp = self.run(
                        response_logprobs, self.model, micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask,
                        temperature=self.s.temperature, pack=self.s.pack, kernel=self.s.head, vision=micro.vision,
                    ).logprobs  # (b, T')
                    return lp, recorded(session, len(micro), dtype)  # (b, S', L, K)

                width = int(batch.seq_lengths().max()) if len(batch) else 1
                empty = (batch.response_mask.new_zeros(0, batch.response_ids.shape[1]),
                         torch.zeros((0, width, layers, k), dtype=dtype, device=batch.response_ids.device))
                logprobs, routes = forward_in_order_many(batch, one, empty, size=size, max_tokens=max_tokens, dp=self.dp)
                # kept in host memory, as verl keeps them (L x K bytes a token); each micro-batch's go back for its forward
                return logprobs, routes.cpu()
        finally:
            self.model.train(was_training)

    def sum_pi_squared(self, batch: RolloutBatch) -> Tensor:
        """sum_v pi(v)^2 of the current policy at each response token, (B, T); 0 on padding
        (actor.calculate_sum_pi_squared: the variance-proxy metrics)."""
        return self.token_signal(batch, lambda logits, _tokens: sum_pi_squared_from_logits(logits))

    @torch.inference_mode()
    def token_signal(self, batch: RolloutBatch, signal: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
        """`signal` (of (n, V) temperature-scaled logits and their (n,) sampled tokens) of the current
        policy at each response token, (B, T); 0 on padding. Batched as `compute_logprobs`."""
        was_training = self.model.training
        self.model.eval()
        size, max_tokens = self.s.logprob_batching or (self.s.micro_batch_size, self.s.max_tokens_per_micro_batch)

        def one(micro: RolloutBatch) -> Tensor:
            return self.run(
                response_token_signal, self.model, micro.prompt_ids, micro.prompt_mask, micro.response_ids,
                micro.response_mask, signal=signal, temperature=self.s.temperature, pack=self.s.pack, vision=micro.vision,
            )  # (b, T')

        try:
            with autocast(self.model, self.s.compute_dtype), lean_mode(self.s.lean_forward):
                return forward_in_order(batch, one, size=size, max_tokens=max_tokens, dp=self.dp)
        finally:
            self.model.train(was_training)

    def update(self, batch: RolloutBatch, step: int = 0, mini_size: int | None = None) -> dict[str, float]:
        """PPO update on a batch with `old_logprobs` and `advantages` (and `ref_logprobs` when the KL
        loss is on) at trainer step `step`, in mini-batches of `mini_size` rows (None: the role's
        mini_batch_size; an agentic stage's turn rows set their own). Returns metrics averaged over
        micro-batches (losses) and optimizer steps."""
        self.step = step
        if "expert_mask" in self.s.loss_inputs and batch.expert_mask is None:
            raise ValueError(f"policy loss {self.s.loss_mode} needs expert rows on the batch (algorithm.mix)")
        if batch.old_logprobs is None or batch.advantages is None:
            raise ValueError("actor.update needs old_logprobs and advantages on the batch")
        if (self.s.sft_loss_coef or any(self.s.topr_coefs)) and batch.token_level_scores is None:
            raise ValueError("actor.sft_loss_coef and the TOPR terms need the responses' scores (token_level_scores) on the batch")
        if self.s.use_kl_loss and batch.ref_logprobs is None:
            raise ValueError("actor.use_kl_loss needs ref_logprobs on the batch")
        if self.s.router_replay and batch.routes is None:
            raise ValueError("actor.router_replay.mode R2: the batch carries no recorded routes (old_logprobs_and_routes)")
        if self.s.topk_kl is not None:
            if batch.teacher_topk_ids is None or batch.teacher_topk_logprobs is None:
                raise ValueError("actor.topk_kl needs the teacher's top-k on the batch (the reference's compute_topk)")
            check_teacher_ids(batch.teacher_topk_ids, batch.response_mask, self.model.get_output_embeddings().weight.shape[0])
        self.model.train()
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, float] = defaultdict(float)
        # R2: open for the whole update, backward passes included (a checkpointed layer's recomputation routes alike)
        with (replay_routes(self.model) if self.s.router_replay else nullcontext()) as self.replay:
            for _ in range(self.s.ppo_epochs):
                for mini in mini_batches(batch, mini_size or self.s.mini_batch_size, shuffle=self.s.shuffle, generator=self.generator):
                    step_metrics = self._optimizer_step(mini)
                    for k, v in step_metrics.items():
                        sums[k] += v
                        counts[k] += 1
                    if self.s.schedule_per_update:  # ROLL's count: the schedule's steps are optimizer updates
                        self.scheduler.step()
        self.replay = None
        # Otherwise one LR-schedule step per training step (not per optimizer step), as verl counts
        # trainer.total_training_steps: warm-up and decay are in RL steps.
        if not self.s.schedule_per_update:
            self.scheduler.step()
        return {k: sums[k] / counts[k] for k in sums}

    def _optimizer_step(self, mini: RolloutBatch) -> dict[str, float]:
        self.optimizer.zero_grad(set_to_none=True)
        if self.s.sft_loss_coef:  # the whole mini-batch's counts, the same on every rank
            positive = (mini.token_level_scores.sum(-1) > 0) & (mini.train_mask.sum(-1) > 0)  # as positive_sft_loss counts
            self.mini_totals = (normaliser(mini.train_mask, self.s.loss_agg_mode), float(positive.sum()), len(mini))
        self.router_totals = mini_totals(mini, self.s.loss_agg_mode)
        metrics = accumulate_gradients(
            mini, self._micro_loss, loss_agg_mode=self.s.loss_agg_mode, size=self.s.micro_batch_size,
            max_tokens=self.s.max_tokens_per_micro_batch, dp=self.dp, loss_values=ACTOR_LOSS_VALUES, by_rows=self.s.by_rows,
            balanced=self.s.balanced,
        )
        grad_norm = clip_and_step(self.optimizer, self.s.grad_clip)
        metrics["actor/grad_norm"] = grad_norm
        metrics["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        self.version += 1
        return dict(metrics)

    def _micro_loss(self, micro: RolloutBatch) -> tuple[Tensor, dict[str, float]]:
        need_entropy = True  # entropy is always logged; its gradient only flows with entropy_coeff
        device = next(self.model.parameters()).device
        routed = self.s.router_weights.on
        if self.replay is not None:  # R2: this micro-batch's recorded experts, replayed by its forward and backward
            set_routes(self.replay, micro.routes)
        with autocast(self.model, self.s.compute_dtype), lean_mode(self.s.lean_forward), \
                activation_offload(self.s.activation_offload, device), \
                (capture_router_logits(self.model) if routed else nullcontext(RouterCapture())) as routers:
            out = self.run(
                response_logprobs,
                self.model,
                micro.prompt_ids,
                micro.prompt_mask,
                micro.response_ids,
                micro.response_mask,
                temperature=self.s.temperature,
                with_entropy=need_entropy,
                # a shared prompt is routed once per group; Megatron routes each row's prompt
                share_prompt=self.s.share_prompt and not routed and self.replay is None,
                pack=self.s.pack,
                kernel=self.s.head,
                vision=micro.vision,  # a vision-language policy's images (posttrain.models.vision)
                gather_ids=micro.teacher_topk_ids if self.s.topk_kl is not None else None,  # the teacher's top-k tokens
            )
        if self.replay is not None:
            check_replayed(self.replay)
        loss, parts = micro_objective(self.s, self.loss_fn, out, micro, self.step, self._sft_term)
        return self._with_router_term(loss, parts, routers, micro)

    def _with_router_term(self, loss: Tensor, parts: dict[str, float], routers: RouterCapture, micro: RolloutBatch) -> tuple[Tensor, dict[str, float]]:
        """`loss` plus a mixture-of-experts policy's router terms, when on."""
        if self.s.router_weights.on:  # weighted as accumulate_gradients weighs the loss values: the metrics sum to the tokens' mean
            term, router_parts = router_term(routers, micro, self.router_totals, self.s.loss_agg_mode, self.s.router_weights, self.dp,
                                             self.s.by_rows)
            loss = loss + term
            parts.update({f"actor/{name}": value for name, value in router_parts.items()})
        return loss, parts

    def _sft_term(self, micro: RolloutBatch, logprobs: Tensor, mask: Tensor) -> Tensor:
        """This micro-batch's share of the mini-batch's SFT term, divided by the weight
        `accumulate_gradients` will multiply the micro-batch's loss by: the weighted shares add up to
        the mean over the mini-batch's positive responses whatever the split."""
        total, positives, rows = self.mini_totals
        weight = micro_share(mask, total, rows, self.s.loss_agg_mode, self.s.by_rows)[1]
        sft = positive_sft_loss(logprobs, micro.old_logprobs, micro.token_level_scores.sum(-1), mask, num_positive=positives)
        # weight 0: no trained token here, so no positive row of this micro-batch adds anything
        return sft / weight if weight > 0 else sft * 0.0

    def extra_state(self) -> dict[str, Any]:
        """What a checkpoint needs besides weights and optimizer (posttrain.checkpoint): the LR
        schedule, the mini-batch shuffle generator and the weights version."""
        return {"scheduler": self.scheduler.state_dict(), "generator": self.generator.get_state(), "version": self.version}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])
        self.version = int(state["version"])

    def weights(self) -> nn.Module:
        """The policy module, for the in-process weight sync to the rollout engine."""
        return self.model

    def save_pretrained(self, out_dir, tokenizer=None) -> None:
        """Write the policy (and tokenizer) as a Hugging Face directory (safetensors)."""
        save_hf(self.model, out_dir, tokenizer)

    def checkpoint_role(self, tokenizer=None) -> Role:
        """What a checkpoint of this role holds (posttrain.checkpoint): weights, optimizer, and the
        LR schedule / shuffle generator / weights version as `extra`. The trainer passes it to the
        checkpointer without reaching into the model or optimizer itself."""
        return Role(self.model, self.optimizer, Extra(self.extra_state, self.load_extra_state), tokenizer)
