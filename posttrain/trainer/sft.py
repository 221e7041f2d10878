"""The SFT stage: cross-entropy on response tokens, plus the loop SFT and DPO share.

One step (ROLL's and Trinity-RFT's SFT):

    batch of data.train_batch_size sequences -> micro-batches of actor.ppo_micro_batch_size_per_gpu
    -> per micro-batch: sum of -log pi(token) over its trained tokens / trained tokens of the WHOLE batch
    -> backward (gradients accumulate) -> clip to actor.grad_clip -> AdamW step -> LR schedule step

Dividing every micro-batch by the whole batch's token count is what makes the loss the batch's
token-mean and its gradient independent of how the batch is cut (a per-micro-batch mean would weight
a token of a short micro-batch more than one of a long micro-batch). verl's SFT trainer takes that
per-micro-batch mean, averaged over the micro-batches: actor.sft_loss_scope micro_batch
(`unit_normalisers`), which its translated launch lines set; Trinity-RFT's actor weighs each
micro-batch's mean by its share of the batch's sequences (micro_batch_rows), unless its
trainer.fix_actor_microbatch_loss_scale asks for the batch's token mean.

The loop (`fit`) is written once for the supervised kinds (SFT, DPO, distillation): a stage describes its loss as an
`Objective` (the batch's normaliser and a micro-batch loss already divided by it), and `fit` does
batching, accumulation, the optimizer, validation every trainer.test_freq steps and the final save.
Metric step numbers are global: step k of the stage is logged at ctx.step_offset + k (k from 1),
validation before training at ctx.step_offset.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn

from posttrain.checkpoint import Checkpointer, Parts, Role
from posttrain.cluster.fsdp import forward_runner
from posttrain.cluster.parallel import DataParallel
from posttrain.cluster.world import role_parallelism
from posttrain.workers.microbatch import SINGLE, accumulate_units, clip_and_step
from posttrain.workers.balanced_split import verl_groups
from posttrain.workers.router_loss import scaled_router_term
from posttrain.checkpoint.save import save_hf
from posttrain.config.derive import Derived
from posttrain.config.schema import Config
from posttrain.data import SFTExample, collate_sft, make_sampler, pad_token_id
from posttrain.data.loader import ExampleReader
from posttrain.models.loading import causal_lm_from_config
from posttrain.models.lora import add_lora, lora_settings
from posttrain.models.moe import RouterCapture, RouterWeights, capture_router_logits, router_loss_settings, router_z_setting
from posttrain.optim import build_optimization
from posttrain.records import pack_greedy
from posttrain.tracking import Trackers
from posttrain.models.precision import autocast
from posttrain.trainer.sequence_logprobs import sequence_logprobs
from posttrain.trainer.preflight import stage_inputs
from posttrain.trainer.stage import StageContext, StageResult, final_model_dir, open_stage, seed_everything, with_model_path

# A micro-batch loss already divided by the batch normaliser, and metric parts that sum to batch values.
MicroLoss = Callable[[Sequence[Any], float], tuple[Tensor, dict[str, float]]]


@dataclass(frozen=True)
class RouterLoss:
    """The MoE router's losses a supervised step adds (actor.moe_aux_loss_coef, actor.moe_z_loss_coef),
    as Megatron adds them to every loss it trains: the weighted losses of each micro-batch's forward,
    the micro-batches weighed by their share of the batch's real tokens (as the RL actor weighs them)."""

    model: nn.Module  # the trained model, whose routers' outputs are captured
    weights: RouterWeights

    @classmethod
    def of(cls, model: nn.Module, coef: float | None, z: float = 0.0) -> RouterLoss | None:
        """The losses for `model`, actor.moe_aux_loss_coef (null: the model's router_aux_loss_coef) and
        actor.moe_z_loss_coef; None when both weights are 0 (a dense model's load-balancing one is)."""
        coef, top_k = router_loss_settings(model, coef)
        weights = RouterWeights(coef, router_z_setting(model, z), top_k)
        return cls(model, weights) if weights.on else None


@dataclass(frozen=True)
class Objective:
    """What a supervised stage trains: how a batch is normalised and what one micro-batch's loss is."""

    prefix: str  # metric namespace: "sft", "dpo" or "distill"
    normaliser: Callable[[Sequence[Any]], float]  # of the whole batch: trained tokens (SFT), pairs (DPO)
    micro_loss: MicroLoss  # its last forward must be the trained model's (the router loss reads that one)
    tokens: Callable[[Sequence[Any]], int]  # tokens a forward pass over the examples processes
    router: RouterLoss | None = None
    scope: str = "batch"  # what `normaliser` is taken over: the batch, or each micro-batch (actor.sft_loss_scope)


def stage_device(ctx: StageContext) -> torch.device:
    """A supervised stage's device: the worker's own device when there are several workers, else
    the first accelerator when there is one, else the CPU."""
    if ctx.world.distributed:
        return ctx.world.torch_device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass(frozen=True)
class MicroBatching:
    """How a batch is cut into forward/backward units: `size` examples, or as many as fit in
    `max_tokens` tokens when set (actor.use_dynamic_bsz with actor.ppo_max_token_len_per_gpu)."""

    size: int
    max_tokens: int | None = None
    balanced: bool = False  # actor.dynamic_bsz_partition balanced: verl's cut (posttrain.workers.balanced_split)

    @classmethod
    def from_config(cls, cfg: Config) -> MicroBatching:
        a = cfg.actor
        return MicroBatching(a.ppo_micro_batch_size_per_gpu, a.ppo_max_token_len_per_gpu if a.use_dynamic_bsz else None,
                             a.use_dynamic_bsz and a.dynamic_bsz_partition == "balanced")

    @classmethod
    def for_validation(cls, cfg: Config) -> MicroBatching:
        """data.val_batch_size examples per validation forward (no gradients, so a validation batch
        needs no further cut); null: the training micro-batches. Either way the metrics are those of
        the whole validation set (`accumulate` normalises by all of it)."""
        size = cfg.data.val_batch_size
        return cls(size) if size is not None else cls.from_config(cfg)

    def split(self, examples: Sequence[Any], tokens: Callable[[Sequence[Any]], int], dp: DataParallel = SINGLE) -> list[Sequence[Any]]:
        """The units of `examples`; with `balanced` every rank calls it (the ranks agree on the count)."""
        if self.max_tokens is None:
            return [examples[i : i + self.size] for i in range(0, len(examples), self.size)]
        lengths = [tokens([example]) for example in examples]
        if self.balanced:
            groups = verl_groups(lengths, self.max_tokens, dp)
            return [[examples[i] for i in group] for group in groups]
        # In order, by real tokens; an example never splits (the config check sees to it)
        groups = pack_greedy(range(len(examples)), self.max_tokens, lambda g: sum(lengths[i] for i in g))
        return [[examples[i] for i in group] for group in groups]


def accumulate(objective: Objective, examples: Sequence[Any], micro: MicroBatching, *, backward: bool,
               dp: DataParallel = SINGLE) -> dict[str, float]:
    """Run the objective over `examples` in micro-batches; with `backward`, accumulate gradients.

    Returns the batch's metrics, ``{"<prefix>/<name>": value}``: each micro-batch's parts are already
    scaled by the whole batch's normaliser, so their sum is the batch value whatever the split.
    With several ranks each runs its share of the examples (balanced by tokens) against the same
    whole-batch normaliser, the ranks' sums add up (gradients by FSDP's reduction, metrics by
    `dp.sum`), and a rank with fewer micro-batches runs zero-weight ones to stay in step with the
    collectives of the sharded forward: the loop is RL's (`posttrain.workers.microbatch.accumulate_units`).
    """
    total = objective.normaliser(examples)  # of the whole batch: the same on every rank
    mine = [examples[i] for i in dp.share([objective.tokens([e]) for e in examples])] if dp.distributed else examples
    router, tokens = objective.router, objective.tokens(examples)

    def weighted(part: Sequence[Any], norm: float) -> tuple[Tensor, dict[str, float]]:  # micro_loss divides by `norm` itself
        with capture_router_logits(router.model) if router else nullcontext(RouterCapture()) as routers:
            loss, parts = objective.micro_loss(part, norm)
        if router:
            term, router_parts = scaled_router_term(routers, objective.tokens(part) / tokens, router.weights, dp)
            loss, parts = loss + term, parts | router_parts
        return loss, {f"{objective.prefix}/{key}": value for key, value in parts.items()}

    units = micro.split(mine, objective.tokens, dp) if mine or micro.balanced else []
    norms = iter(unit_normalisers(objective, units, total, dp, rows=len(examples)))
    return accumulate_units(units, lambda: examples[:1], lambda part: weighted(part, next(norms, total)), dp=dp, backward=backward)


def unit_normalisers(objective: Objective, units: list[Sequence[Any]], total: float, dp: DataParallel = SINGLE,
                     rows: int = 0) -> list[float]:
    """What each of this rank's micro-batches divides its summed loss by (actor.sft_loss_scope).

    batch: the whole batch's normaliser, the same for every unit. micro_batch (verl's SFT trainer):
    the unit's own normaliser x the rank's units x the ranks, so that the ranks' summed gradients are
    the mean over ranks of the mean over units of each unit's token mean (verl divides each micro-batch
    by its tokens and by the micro-batch count, and FSDP averages the ranks). micro_batch_all_ranks
    (verl's balance_dp_token): the normaliser of the k-th units of every rank together x the units,
    which verl gets by summing the k-th micro-batches' token counts over the ranks. micro_batch_rows
    (Trinity-RFT's default): the unit's own normaliser x the batch's `rows` / the unit's, so that each
    unit's token mean counts by its share of the batch's sequences, on every rank alike."""
    if objective.scope == "batch":
        return [total] * len(units)
    own = [objective.normaliser(u) for u in units]
    if objective.scope == "micro_batch_rows":
        return [n * rows / len(u) for n, u in zip(own, units)]
    if objective.scope == "micro_batch":
        return [n * len(units) * dp.size for n in own]
    rounds = dp.max_count(len(units))  # every rank adds its k-th unit's count, zero where it has none
    summed = dp.sum({f"{k:08d}": own[k] if k < len(own) else 0.0 for k in range(rounds)})
    return [max(summed[f"{k:08d}"], 1.0) * len(units) for k in range(len(units))]


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, objective: Objective,
               examples: Sequence[Any], micro: MicroBatching, grad_clip: float, dp: DataParallel = SINGLE) -> dict[str, float]:
    """One optimizer step on one batch; returns its metrics (loss parts, grad norm, LR, speed)."""
    start = time.perf_counter()
    model.train()
    optimizer.zero_grad(set_to_none=True)
    metrics = accumulate(objective, examples, micro, backward=True, dp=dp)
    lr = optimizer.param_groups[0]["lr"]  # the LR this step uses (the schedule moves after it)
    metrics["actor/grad_norm"] = clip_and_step(optimizer, grad_clip)
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    elapsed = time.perf_counter() - start
    metrics.update({
        "actor/lr": lr,
        f"{objective.prefix}/lr": lr,
        "perf/tokens_per_s": objective.tokens(examples) / max(elapsed, 1e-9),
        "timing/step_s": elapsed,
    })
    return metrics


@torch.no_grad()
def evaluate(model: nn.Module, objective: Objective, examples: Sequence[Any], micro: MicroBatching,
             dp: DataParallel = SINGLE) -> dict[str, float]:
    """The objective's metrics over a whole validation set, as ``val/<prefix>/<name>``."""
    model.eval()
    return {f"val/{key}": value for key, value in accumulate(objective, examples, micro, backward=False, dp=dp).items()}


def fit(ctx: StageContext, model: nn.Module, tokenizer: Any, objective: Objective, train_set: Sequence[Any],
        val_set: Sequence[Any] | None, derived: Derived, trackers: Trackers) -> StageResult:
    """The supervised loop shared by SFT and DPO: train, validate on cadence, checkpoint on
    trainer.save_freq (resuming from ctx.resume), save the final policy.
    With trainer.val_only it validates the starting policy and saves it unchanged (0 steps)."""
    cfg = ctx.cfg
    _, inner = forward_runner(model)  # the model itself when `model` is its FSDP root
    dp = role_parallelism(ctx.world, cfg.trainer.balance_batch)(inner, "actor", cfg.actor.ulysses_sequence_parallel_size)
    optimizer, scheduler = build_optimization(
        model.named_parameters(), cfg.actor.optim, warmup_steps=derived.actor_warmup_steps or 0,
        total_steps=derived.total_training_steps or 1,
    )
    sampler = make_sampler(cfg.data, len(train_set))
    reader = ExampleReader(train_set, cfg.data.dataloader_num_workers)  # processes that tokenise each batch
    micro = MicroBatching.from_config(cfg)
    val_micro = MicroBatching.for_validation(cfg)
    total = 0 if cfg.trainer.val_only else derived.total_training_steps or 0
    val_examples = [val_set[k] for k in range(len(val_set))] if val_set is not None else []
    freq = cfg.trainer.test_freq
    last: dict[str, float] = {}
    ckpt = Checkpointer(ctx, total, Parts({"actor": Role(inner, optimizer, scheduler, tokenizer)}, {"sampler": sampler}))
    try:
        start = ckpt.restore()  # 0, or the step the resumed checkpoint was saved after
        if val_examples and (cfg.trainer.val_before_train or cfg.trainer.val_only) and start == 0:
            last = evaluate(model, objective, val_examples, val_micro, dp)
            trackers.log(last, ctx.step_offset)
        for step in range(start + 1, total + 1):
            examples = reader(sampler.next_batch())
            last = train_step(model, optimizer, scheduler, objective, examples, micro, cfg.actor.grad_clip, dp)
            last["training/epoch"] = float(sampler.epoch)
            if val_examples and ((freq > 0 and step % freq == 0) or step == total):
                last.update(evaluate(model, objective, val_examples, val_micro, dp))
            trackers.log(last, ctx.step_offset + step)
            ckpt.after_step(step)
    finally:
        reader.close()
        trackers.close()
    out = ckpt.final_model(lambda path: save_hf(inner, path, tokenizer), final_model_dir(ctx))
    return StageResult(final_model=out, last_metrics=last, steps=total)


def sft_objective(model: nn.Module, pad_id: int, compute_dtype: str = "fp32", moe_aux_loss_coef: float | None = 0.0,
                  scope: str = "batch", moe_z_loss_coef: float = 0.0) -> Objective:
    """Token-mean negative log-likelihood of the trained (response/assistant) tokens, plus the router
    losses of an MoE model (`RouterLoss`, actor.moe_aux_loss_coef and moe_z_loss_coef). `compute_dtype`:
    actor.fsdp_config.mixed_precision.param_dtype (bf16: autocast, fp32 master weights). `model`
    may be a sharded model's FSDP root (`posttrain.cluster.fsdp`)."""
    run, model = forward_runner(model)

    def normaliser(examples: Sequence[SFTExample]) -> float:
        return float(max(sum(sum(e.loss_mask[1:]) for e in examples), 1))  # the first token has no predictor

    def micro_loss(examples: Sequence[SFTExample], total: float) -> tuple[Tensor, dict[str, float]]:
        with autocast(model, compute_dtype):
            out = run(sequence_logprobs, model, collate_sft(examples, pad_id))
        loss = -(out.logprobs * out.mask).sum() / total
        return loss, {"loss": float(loss.detach()), "tokens": float(out.mask.sum())}

    return Objective("sft", normaliser, micro_loss, lambda examples: sum(len(e.input_ids) for e in examples),
                     RouterLoss.of(model, moe_aux_loss_coef, moe_z_loss_coef), scope)


def run_sft(ctx: StageContext) -> StageResult:
    """Supervised fine-tuning stage: start from ctx.model_path, train on data.train_files' responses,
    validate on data.val_files, save the final policy to final_model_dir(ctx)."""
    ctx = dataclasses.replace(ctx, cfg=with_model_path(ctx.cfg, ctx.model_path))  # saved as run
    cfg = ctx.cfg
    seed_everything(cfg.trainer.seed)
    inputs = ctx.inputs or stage_inputs(cfg)  # every check before training (posttrain.trainer.preflight)
    tokenizer, train_set, val_set = inputs.tokenizer, inputs.train_set, inputs.val_set
    policy = causal_lm_from_config(cfg.model, device=stage_device(ctx))
    lora = lora_settings(cfg.model, "model")
    if lora is not None:  # only the adapter trains (posttrain.models.lora)
        add_lora(policy, lora, cfg.model.path)
    model = ctx.world.shard(policy, cfg.actor.fsdp_config)
    derived, trackers = open_stage(ctx, len(train_set))
    objective = sft_objective(model, pad_token_id(tokenizer), cfg.actor.fsdp_config.mixed_precision.param_dtype, cfg.actor.moe_aux_loss_coef,
                              cfg.actor.sft_loss_scope, cfg.actor.moe_z_loss_coef)
    return fit(ctx, model, tokenizer, objective, train_set, val_set, derived, trackers)
