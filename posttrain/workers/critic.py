"""The critic: a value model for GAE (a causal LM body with a scalar head per token).

Values sit on the positions that predict each response token, i.e. V(s_t) is read from the hidden
state just before token t, the same positions the actor's log-probs come from. Its update is the
clipped value loss (PPO / OpenAI baselines), with the same mini/micro-batch arithmetic as the actor,
plus for a mixture-of-experts value model the router's load-balancing loss x moe_aux_loss_coef and
z-loss x moe_z_loss_coef, as Megatron adds them to any MoE model it trains (`posttrain.workers.router_loss`).
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posttrain.algorithms import value_loss
from posttrain.checkpoint.save import Role
from posttrain.checkpoint.state import Extra
from posttrain.models.lean_forward import lean_mode
from posttrain.models.logprobs import response_hidden_states
from posttrain.models.kernels import activation_offload
from posttrain.models.moe import RouterCapture, RouterWeights, capture_router_logits
from posttrain.models.precision import autocast
from posttrain.records import RolloutBatch
from posttrain.cluster.fsdp import forward_runner
from posttrain.cluster.parallel import DataParallel
from posttrain.workers.microbatch import SINGLE, accumulate_gradients, clip_and_step, forward_in_order, mini_batches
from posttrain.workers.router_loss import mini_totals, router_term


@dataclass(frozen=True)
class CriticSettings:
    """The critic update's batching and loss options, resolved from the config once."""

    ppo_epochs: int
    mini_batch_size: int  # responses per optimizer step
    micro_batch_size: int  # responses per forward/backward
    cliprange_value: float | None
    grad_clip: float | None
    loss_agg_mode: str = "token-mean"
    loss_scale_factor: float | None = None  # seq-mean-token-sum-norm's constant (the max response length)
    shuffle: bool = False
    seed: int = 0
    compute_dtype: str = "fp32"  # critic.fsdp_config.mixed_precision.param_dtype
    max_tokens_per_micro_batch: int | None = None  # critic.ppo_max_token_len_per_gpu when use_dynamic_bsz
    # (responses per forward, token budget or None) of value passes without backward (compute_values)
    forward_batching: tuple[int, int | None] | None = None
    pack: bool = True  # critic.model.use_remove_padding (posttrain.models.packing)
    lean_forward: str = "off"  # "compiled" with actor.use_torch_compile (posttrain.models.lean_forward)
    activation_offload: bool = False  # critic.model.enable_activation_offload (posttrain.models.kernels)
    schedule_per_update: bool = False  # critic.optim.lr_schedule_unit == "update": the LR moves after each optimizer step
    moe_aux_loss_coef: float = 0.0  # critic.moe_aux_loss_coef, resolved against the model (posttrain.models.moe.router_loss_settings)
    moe_top_k: int = 0  # experts per token of the value model's routers, when moe_aux_loss_coef > 0
    moe_z_loss_coef: float = 0.0  # critic.moe_z_loss_coef (posttrain.models.moe.router_z_setting)
    by_rows: bool = False  # critic.micro_batch_weight rows (posttrain.workers.microbatch.micro_share)
    balanced: bool = False  # critic.dynamic_bsz_partition balanced: verl's cut (posttrain.workers.balanced_split)

    @property
    def router_weights(self) -> RouterWeights:
        return RouterWeights(self.moe_aux_loss_coef, self.moe_z_loss_coef, self.moe_top_k)


class Critic:
    """Owns the value model, its optimizer and LR scheduler."""

    def __init__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, settings: CriticSettings,
        dp: DataParallel = SINGLE,
    ):
        """`model` is the value model, or its FSDP root (`posttrain.cluster.fsdp.shard_model`);
        `dp`: this process's data-parallel rank of the role."""
        self.run, self.model = forward_runner(model)
        self.dp = dp
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.s = settings
        self.generator = torch.Generator().manual_seed(settings.seed)
        self.router_totals = (0.0, 0.0)  # the running mini-batch's (real tokens, loss normaliser): the router term

    def extra_state(self) -> dict[str, Any]:
        """What a checkpoint needs besides weights and optimizer: the LR schedule and shuffle generator."""
        return {"scheduler": self.scheduler.state_dict(), "generator": self.generator.get_state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])

    def checkpoint_role(self) -> Role:
        """What a checkpoint of the critic holds: value model, optimizer, LR schedule and shuffle generator."""
        return Role(self.model, self.optimizer, Extra(self.extra_state, self.load_extra_state))

    def _values(self, batch: RolloutBatch) -> Tensor:
        device = next(self.model.parameters()).device
        with autocast(self.model, self.s.compute_dtype), lean_mode(self.s.lean_forward), \
                activation_offload(self.s.activation_offload, device):
            return self.run(token_values, self.model, batch, self.s.pack)  # (b, T)

    @torch.inference_mode()
    def compute_values(self, batch: RolloutBatch) -> Tensor:
        """V(s_t) for every response position, (B, T); 0 on padding."""
        self.model.eval()
        size, max_tokens = self.s.forward_batching or (self.s.micro_batch_size, self.s.max_tokens_per_micro_batch)
        return forward_in_order(batch, self._values, size=size, max_tokens=max_tokens, dp=self.dp)  # (B, T)

    def update(self, batch: RolloutBatch, mini_size: int | None = None) -> dict[str, float]:
        """Clipped value-loss regression of V onto `returns`, around the rollout-time `values`, in
        mini-batches of `mini_size` rows (None: the role's mini_batch_size)."""
        if batch.values is None or batch.returns is None:
            raise ValueError("critic.update needs values and returns on the batch")
        self.model.train()
        sums: dict[str, float] = defaultdict(float)
        steps = 0
        for _ in range(self.s.ppo_epochs):
            for mini in mini_batches(batch, mini_size or self.s.mini_batch_size, shuffle=self.s.shuffle, generator=self.generator):
                for k, v in self._optimizer_step(mini).items():
                    sums[k] += v
                steps += 1
                if self.s.schedule_per_update:
                    self.scheduler.step()
        if not self.s.schedule_per_update:
            self.scheduler.step()  # once per training step, like the actor's
        return {k: v / max(steps, 1) for k, v in sums.items()}

    def _micro_loss(self, micro: RolloutBatch) -> tuple[Tensor, dict[str, float]]:
        routed = self.s.router_weights.on
        with capture_router_logits(self.model) if routed else nullcontext(RouterCapture()) as routers:
            values = self._values(micro)
        out = value_loss(
            values, micro.values, micro.returns, micro.train_mask, self.s.cliprange_value,
            self.s.loss_agg_mode, loss_scale_factor=self.s.loss_scale_factor,
        )
        parts = {"critic/vf_loss": float(out.loss.detach()), "critic/vf_clipfrac": float(out.clipfrac)}
        if not routed:
            return out.loss, parts
        term, router_parts = router_term(routers, micro, self.router_totals, self.s.loss_agg_mode, self.s.router_weights, self.dp,
                                         self.s.by_rows)
        return out.loss + term, parts | {f"critic/{name}": value for name, value in router_parts.items()}

    def _optimizer_step(self, mini: RolloutBatch) -> dict[str, float]:
        self.optimizer.zero_grad(set_to_none=True)
        self.router_totals = mini_totals(mini, self.s.loss_agg_mode)
        metrics = accumulate_gradients(
            mini, self._micro_loss, loss_agg_mode=self.s.loss_agg_mode, size=self.s.micro_batch_size,
            max_tokens=self.s.max_tokens_per_micro_batch, dp=self.dp, loss_values=frozenset({"critic/vf_loss", "critic/moe_aux_loss", "critic/moe_z_loss"}),
            by_rows=self.s.by_rows,
            balanced=self.s.balanced,
        )
        metrics["critic/grad_norm"] = clip_and_step(self.optimizer, self.s.grad_clip)
        metrics["critic/lr"] = self.optimizer.param_groups[0]["lr"]
        return dict(metrics)


def token_values(model: nn.Module, batch: RolloutBatch, pack: bool) -> Tensor:
    """V(s_t) of a value model at every response position, (b, T) fp32, 0 on padding: its head on
    the hidden states that predict each response token."""
    hidden = response_hidden_states(
        model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask, pack=pack
    )  # (b, T, H)
    head = model.score if hasattr(model, "score") else model.get_output_embeddings()
    return head(hidden).squeeze(-1).float() * batch.response_mask  # (b, T)
