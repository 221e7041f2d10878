"""The frozen reference policy: log-probs under the initial weights, for KL loss or KL in reward."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Callable

import torch
from torch import Tensor, nn

from posttrain.models.lean_forward import lean_mode
from posttrain.models.logprobs import PLAIN_HEAD, HeadKernel, response_logprobs
from posttrain.models.topk_logprobs import response_topk
from posttrain.models.precision import autocast
from posttrain.records import RolloutBatch
from posttrain.cluster.fsdp import forward_runner, run_directly
from posttrain.cluster.parallel import DataParallel
from posttrain.workers.microbatch import SINGLE, forward_in_order, forward_in_order_many


class ReferencePolicy:
    """A frozen causal LM; `compute_logprobs` is its only verb."""

    def __init__(
        self, model: nn.Module, *, temperature: float, micro_batch_size: int, max_tokens: int | None = None,
        compute_dtype: str = "fp32", pack: bool = True, lean_forward: str = "off", dp: DataParallel = SINGLE,
        adapters_off: Callable[[], AbstractContextManager] | None = None, head: HeadKernel = PLAIN_HEAD,
    ):
        """`compute_dtype`: ref.fsdp_config.mixed_precision.param_dtype (posttrain.models.precision);
        `pack`: model.use_remove_padding; `lean_forward`: posttrain.models.lean_forward's mode;
        `dp`: this process's data-parallel rank of the role. `adapters_off`: the model is the
        actor's LoRA model (posttrain.models.lora), shared, and every forward runs inside this
        context (peft's `disable_adapter`): its frozen base weights are the starting policy.
        `head`: how the LM head runs (model.use_fused_kernels; no backward, so no entropy checkpointing)."""
        self.run, self.model = forward_runner(model)
        self.adapters_off = adapters_off or nullcontext
        if adapters_off is None:  # its own copy: frozen for good (a shared model stays the actor's)
            self.model.eval().requires_grad_(False)
        self.temperature = temperature
        self.micro_batch_size = micro_batch_size
        self.max_tokens = max_tokens
        self.compute_dtype = compute_dtype
        self.pack = pack
        self.lean_forward = lean_forward
        self.dp = dp
        self.head = head

    @torch.inference_mode()
    def compute_logprobs(self, batch: RolloutBatch) -> Tensor:
        """log pi_ref of each response token, (B, T); 0 on padding."""
        was_training = self.model.training
        self.model.eval()  # a model shared with the actor may be in training mode
        try:
            with self.adapters_off(), autocast(self.model, self.compute_dtype), lean_mode(self.lean_forward):
                return batched_logprobs(
                    self.model, batch, self.temperature, self.micro_batch_size, self.max_tokens, self.pack, self.dp, self.run,
                    self.head,
                )
        finally:
            self.model.train(was_training)

    @torch.inference_mode()
    def compute_topk(self, batch: RolloutBatch, k: int, temperature: float) -> tuple[Tensor, Tensor, Tensor]:
        """`compute_logprobs`'s log-probs (B, T) and, from the same forward, the model's k most likely
        tokens at each response position and their log-probs at `temperature`, (B, T, K) each; 0 on
        padding (as a teacher of actor.topk_kl). Batched and shared over the ranks as `compute_logprobs`."""
        was_training = self.model.training
        self.model.eval()

        def one(micro: RolloutBatch) -> tuple[Tensor, Tensor, Tensor]:
            return self.run(response_topk, self.model, micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask,
                            k=k, temperature=temperature, token_temperature=self.temperature, pack=self.pack,
                            vision=micro.vision)  # (b, T'), (b, T', K), (b, T', K)

        width = batch.response_ids.shape[1]
        empty = (torch.zeros((0, width), device=batch.response_ids.device), torch.zeros((0, width, k), device=batch.response_ids.device),
                 batch.response_ids.new_zeros((0, width, k)))
        try:
            with self.adapters_off(), autocast(self.model, self.compute_dtype), lean_mode(self.lean_forward):
                return forward_in_order_many(batch, one, empty, size=self.micro_batch_size, max_tokens=self.max_tokens, dp=self.dp)
        finally:
            self.model.train(was_training)


def batched_logprobs(
    model: nn.Module, batch: RolloutBatch, temperature: float, size: int, max_tokens: int | None, pack: bool = True,
    dp: DataParallel = SINGLE,
    run=run_directly,
    head: HeadKernel = PLAIN_HEAD,
) -> Tensor:
    """Log-probs of a whole batch (B, T), micro-batch by micro-batch, in the original row order
    (with several ranks: this rank's share, gathered on every rank); `run` runs each forward (the
    FSDP root of a sharded model)."""

    def logprobs(micro: RolloutBatch) -> Tensor:
        return run(
            response_logprobs,
            model, micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask, temperature=temperature,
            pack=pack, kernel=head, vision=micro.vision,
        ).logprobs  # (b, T')

    return forward_in_order(batch, logprobs, size=size, max_tokens=max_tokens, dp=dp)
