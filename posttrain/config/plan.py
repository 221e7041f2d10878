"""`posttrain config plan`: the batch arithmetic of one training step, spelled out.

Batch sizes are the most reported source of confusion in verl/ROLL/Trinity: some are counted in
prompts, some in responses (prompts × rollout.n), some per device, some across all devices. This
module computes every number of one step once, as a `BatchPlan`, and prints each with the
arithmetic that produced it and the keys involved. Semantics follow verl: ``ppo_mini_batch_size``
counts prompts across all devices; ``ppo_micro_batch_size_per_gpu`` counts responses on one device.
The config is validated first, so every division here is exact.

SFT and DPO (``algorithm.kind``) have no rollout and no mini-batches: a step is
``data.train_batch_size`` sequences (DPO: pairs), one optimizer step, accumulated over micro-batches of
``actor.ppo_micro_batch_size_per_gpu`` per device; `format_plan` prints that arithmetic instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from posttrain.config.access import (
    device_lists, device_span, explorer_processes, get_path, is_rl, reference_crew_devices, rollout_placement, sampler_batch,
    training_devices, training_kind, world_size,
)
from posttrain.config.checks import role_needs
from posttrain.config.derive import Derived, updates_per_step

Row = tuple[str, str, str]  # label, value, how it was computed


@dataclasses.dataclass(frozen=True)
class RolePlan:
    """The update schedule of one trained model (actor or critic) for one training step."""

    role: str
    mini_batch_prompts: int  # role.ppo_mini_batch_size
    mini_batch_responses: int  # × rollout.n, across all devices
    mini_batches_per_epoch: int
    per_device_mini_batch: int  # responses of one mini-batch on the busiest device
    micro_batch: int | None  # responses per forward/backward on one device; None when packed by tokens
    micro_batches_per_mini_batch: int | None
    token_budget: int | None  # tokens per micro-batch on one device when packed by tokens
    ppo_epochs: int
    optimizer_steps_per_rollout: int


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """All batch numbers of one training step."""

    prompts_per_step: int
    n: int
    responses_per_step: int
    world_size: int
    roles: tuple[RolePlan, ...]
    derived: Derived


def batch_plan(cfg: Any, derived: Derived) -> BatchPlan:
    """Compute the plan of a validated config (the critic is included only when it is trained)."""
    prompts = get_path(cfg, "data.train_batch_size")
    n = get_path(cfg, "rollout.n", 1)
    roles = ["actor"] + (["critic"] if role_needs(cfg).critic else [])
    return BatchPlan(
        prompts_per_step=prompts,
        n=n,
        responses_per_step=prompts * n,
        world_size=derived.world_size,
        roles=tuple(_role_plan(cfg, role, prompts, n, derived.world_size) for role in roles),
        derived=derived,
    )


def share_text(total: int, parts: int) -> str:
    """A device's share of `total` rows over `parts` devices: "k", or "k or k+1" when they do not
    divide (posttrain splits unevenly; the loss weighting keeps the step exact)."""
    low, extra = divmod(total, parts)
    return str(low) if not extra else f"{low} or {low + 1}"


def _role_plan(cfg: Any, role: str, prompts: int, n: int, world: int) -> RolePlan:
    mini = get_path(cfg, f"{role}.ppo_mini_batch_size")
    per_device = -(-mini * n // world)  # the busiest device's share
    dynamic = bool(get_path(cfg, f"{role}.use_dynamic_bsz", False))
    micro = None if dynamic else get_path(cfg, f"{role}.ppo_micro_batch_size_per_gpu")
    epochs = get_path(cfg, f"{role}.ppo_epochs", get_path(cfg, "actor.ppo_epochs", 1))
    return RolePlan(
        role=role,
        mini_batch_prompts=mini,
        mini_batch_responses=mini * n,
        mini_batches_per_epoch=prompts // mini,
        per_device_mini_batch=per_device,
        micro_batch=micro,
        micro_batches_per_mini_batch=None if micro is None else -(-per_device // micro),  # a larger micro-batch: one
        token_budget=get_path(cfg, f"{role}.ppo_max_token_len_per_gpu", None) if dynamic else None,
        ppo_epochs=epochs,
        optimizer_steps_per_rollout=(prompts // mini) * epochs,
    )


def format_plan(cfg: Any, derived: Derived, size_note: str = "") -> str:
    """The plan as aligned text: one line per number, each with its arithmetic.

    ``size_note`` says why the dataset size is unknown, when it is (e.g. "no data files")."""
    if training_kind(cfg) != "rl":
        return _table(_supervised_rows(cfg, derived) + _length_rows(cfg, derived, size_note))
    plan = batch_plan(cfg, derived)
    rows: list[Row] = [
        ("prompts per step", str(plan.prompts_per_step), "data.train_batch_size"),
        ("responses per step", str(plan.responses_per_step), f"× rollout.n = {plan.n}"),
    ]
    turns = get_path(cfg, "env.train_rows", "episode") == "turn"
    agentic = bool(get_path(cfg, "env.train_env_manager.tags", None))
    for role in plan.roles:
        rows += _turn_role_rows(cfg, role, plan, agentic) if turns else _role_rows(role, plan)
    rows += _length_rows(cfg, derived, size_note) + _lag_rows(cfg) + _placement_rows(cfg)
    text = _table(rows)
    if plan.world_size > 1:
        text += "\n" + _device_block(cfg, plan)
    return text


def _supervised_rows(cfg: Any, d: Derived) -> list[Row]:
    """SFT/DPO: one batch, split over devices, accumulated over micro-batches, one optimizer step."""
    kind = training_kind(cfg)
    unit = "pairs" if kind == "dpo" else "sequences"
    batch, w = get_path(cfg, "data.train_batch_size"), d.world_size
    per_device = -(-batch // w)  # the busiest device's share
    rows: list[Row] = [(f"{unit} per step", str(batch), f"data.train_batch_size; algorithm.kind {kind}: no rollout")]
    if w > 1:
        rows.append((f"  {unit} per device", share_text(batch, w), f"{batch} / {w} devices"))
    if get_path(cfg, "actor.use_dynamic_bsz", False):
        budget = get_path(cfg, "actor.ppo_max_token_len_per_gpu")
        rows.append(("  micro-batches/step", "varies", f"{per_device} {unit} per device packed into micro-batches of <= "
                     f"actor.ppo_max_token_len_per_gpu {budget} tokens"))
    else:
        micro = get_path(cfg, "actor.ppo_micro_batch_size_per_gpu")
        rows.append(("  micro-batches/step", str(-(-per_device // micro)), f"{per_device} {unit} / "
                     f"actor.ppo_micro_batch_size_per_gpu {micro}; gradients accumulate over them"))
    scope = get_path(cfg, "actor.sft_loss_scope", "batch") if kind == "sft" else "batch"
    rows.append(("  optimizer steps per step", "1", "the loss is normalised over the whole batch" if scope == "batch" else
                 f"actor.sft_loss_scope {scope}: each micro-batch's token mean, averaged over the micro-batches"))
    return rows


def _role_rows(r: RolePlan, plan: BatchPlan) -> list[Row]:
    w = plan.world_size
    split = f"{r.mini_batch_responses} / {w} devices = {share_text(r.mini_batch_responses, w)} per device" if w > 1 else f"{r.mini_batch_responses} responses"
    rows: list[Row] = [
        (
            f"{r.role} mini-batches/epoch",
            str(r.mini_batches_per_epoch),
            f"{plan.responses_per_step} responses / ({r.role}.ppo_mini_batch_size {r.mini_batch_prompts} × n "
            f"{plan.n}) = {r.mini_batch_responses} responses each",
        )
    ]
    if r.micro_batch is not None:
        rows.append((
            "  micro-batches/mini-batch",
            str(r.micro_batches_per_mini_batch),
            f"{split} / {r.role}.ppo_micro_batch_size_per_gpu {r.micro_batch}; gradients accumulate over them",
        ))
    else:
        longest = plan.derived.max_model_len
        rows.append((
            "  micro-batches/mini-batch",
            "varies",
            f"{r.per_device_mini_batch} responses per device packed into micro-batches of <= "
            f"{r.role}.ppo_max_token_len_per_gpu {r.token_budget} tokens (>= {r.token_budget // longest} "
            f"full-length sequences of {longest} tokens each)",
        ))
    rows.append((
        "  optimizer steps per rollout",
        str(r.optimizer_steps_per_rollout),
        f"{r.mini_batches_per_epoch} mini-batches × {r.role}.ppo_epochs {r.ppo_epochs}",
    ))
    return rows


def _turn_role_rows(cfg: Any, r: RolePlan, plan: BatchPlan, agentic: bool) -> list[Row]:
    """env.train_rows turn: the updates train on one row per model turn of the step's episodes, so
    mini-batches are counted in turn rows and their number depends on the turns played (a single-turn
    stage's responses are one turn each)."""
    fixed = get_path(cfg, "env.turn_mini_batch_size", None)
    rows: list[Row] = []
    if not agentic:
        minis = -(-plan.responses_per_step // fixed) if fixed is not None else r.mini_batches_per_epoch
        size = f"env.turn_mini_batch_size {fixed}" if fixed is not None else f"{r.mini_batch_responses} ({r.role}.ppo_mini_batch_size × n)"
        return [(f"{r.role} mini-batches/epoch", str(minis), f"{plan.responses_per_step} responses (one turn each) / {size}, rounded up"),
                ("  optimizer steps per rollout", str(minis * r.ppo_epochs), f"{minis} mini-batches × {r.role}.ppo_epochs {r.ppo_epochs}")]
    if r.role == "actor":
        rows.append(("turn rows per step", "varies", f"env.train_rows turn: one per model turn of the {plan.responses_per_step} "
                     "episodes (each at most its environment's max_steps), the episode's advantages on each"))
    if fixed is not None:
        rows.append((f"{r.role} mini-batches/epoch", "varies", f"turn rows / env.turn_mini_batch_size {fixed}, rounded up (the last takes the rest)"))
        steps = f"varies: mini-batches × {r.role}.ppo_epochs {r.ppo_epochs}"
    else:
        rows.append((f"{r.role} mini-batches/epoch", f"<= {r.mini_batches_per_epoch}", f"the turn rows shared over data.train_batch_size "
                     f"{plan.prompts_per_step} / {r.role}.ppo_mini_batch_size {r.mini_batch_prompts} mini-batches, "
                     f"⌈turn rows / {r.mini_batches_per_epoch}⌉ each"))
        steps = f"<= {r.mini_batches_per_epoch} mini-batches × {r.role}.ppo_epochs {r.ppo_epochs}"
    micro = f"{r.role}.ppo_micro_batch_size_per_gpu {r.micro_batch}" if r.micro_batch is not None else f"{r.role}.ppo_max_token_len_per_gpu {r.token_budget} tokens"
    rows.append(("  micro-batches/mini-batch", "varies", f"a mini-batch's turn rows per device / {micro}; gradients accumulate over them"))
    rows.append(("  optimizer steps per rollout", "varies" if fixed is not None else f"<= {r.optimizer_steps_per_rollout}", steps))
    return rows


def _length_rows(cfg: Any, d: Derived, size_note: str) -> list[Row]:
    batch, key = sampler_batch(cfg)
    if d.steps_per_epoch is None:
        rows: list[Row] = [("steps per epoch", "?", f"unknown: {size_note or 'dataset size unknown'}")]
    else:
        rows = [(
            "steps per epoch",
            str(d.steps_per_epoch),
            f"{d.train_dataset_size} rows / {key} {batch}, last partial batch dropped",
        )]
    set_total = get_path(cfg, "trainer.total_training_steps", None)
    if set_total is not None:
        rows.append(("total training steps", str(set_total), "trainer.total_training_steps"))
    elif d.total_training_steps is None:
        rows.append(("total training steps", "?", f"trainer.total_epochs {get_path(cfg, 'trainer.total_epochs', 1)} × steps per epoch"))
    else:
        epochs = get_path(cfg, "trainer.total_epochs", 1)
        rows.append(("total training steps", str(d.total_training_steps), f"× trainer.total_epochs {epochs}"))
    for role, warm in (("actor", d.actor_warmup_steps), ("critic", d.critic_warmup_steps)):
        if role == "critic" and not role_needs(cfg).critic:
            continue
        rows.append(_warmup_row(cfg, role, warm))
    if training_kind(cfg) != "rl":
        side = " per side of a pair" if training_kind(cfg) == "dpo" else ""
        rows.append(("max sequence length", str(get_path(cfg, "data.max_length")), f"data.max_length tokens{side}"))
        return rows
    both = (f"data.max_prompt_length {get_path(cfg, 'data.max_prompt_length')} + data.max_response_length "
            f"{get_path(cfg, 'data.max_response_length')}")
    cap = get_path(cfg, "model.max_model_len", None)
    capped = cap is not None and cap < get_path(cfg, "data.max_prompt_length", 0) + get_path(cfg, "data.max_response_length", 0)
    rows.append(("max model length", str(d.max_model_len), f"model.max_model_len (less than {both})" if capped else f"{both} tokens"))
    return rows


def _lag_rows(cfg: Any) -> list[Row]:
    """How far the explorer of a decoupled run (trainer.mode both with a lagging synchronizer) may run
    ahead of the trained weights: docs/async.md's max_staleness, in steps."""
    interval, offset = get_path(cfg, "synchronizer.sync_interval", 1), get_path(cfg, "synchronizer.sync_offset", 0)
    style = get_path(cfg, "synchronizer.sync_style", "fixed")
    if get_path(cfg, "trainer.mode", "both") != "both" or (interval == 1 and offset == 0 and style == "fixed"):
        return []
    if style != "fixed":
        return [("max staleness (steps)", "?", f"synchronizer.sync_style {style}: bounded only by the buffer's capacity; explorer and trainer processes")]
    return [("max staleness (steps)", str(interval - 1 + offset),
             f"synchronizer.sync_interval {interval} - 1 + sync_offset {offset}: explorer and trainer processes, "
             "the explorer up to that many batches ahead of the trained weights")]


def _placement_rows(cfg: Any) -> list[Row]:
    """Which devices train, generate and hold the reference, when cluster.device_mapping places the
    roles: the trainer's workers, the engines (on them, on the first m, or an explorer of its own)
    and the reference (on the trainer's workers, or a reference crew of its own)."""
    if not device_lists(cfg):
        return []
    w = world_size(cfg)
    train = training_devices(cfg) or list(range(w))
    crew = reference_crew_devices(cfg)
    hosted = "actor" + (", critic" if role_needs(cfg).critic else "") + (", reference" if role_needs(cfg).reference and crew is None else "")
    rows = [("training devices", device_span(train), f"{w} trainer process(es), each hosting the {hosted}")]
    place = rollout_placement(cfg)
    engines = device_lists(cfg).get("rollout") or train
    how = {"colocated": "the engines on the trainer's workers", "subset": f"the engines on the first {len(engines)} trainer workers",
           "split": f"split: an explorer of {explorer_processes(cfg)} engine process(es) beside the trainer"}[place]
    rows.append(("rollout devices", device_span(engines), how))
    if crew is not None:
        teachers = list(get_path(cfg, "ref.teachers", None) or {})
        rows.append(("reference devices", device_span(crew), (
            f"a reference crew of {len(crew)} process(es) of its own" + (" on devices it shares with trainer workers" if set(crew) <= set(train) else "")
            + ": each step's sequences go to it, its log-probs come back"
            + (f" (and for ref.teachers {', '.join(teachers)})" if teachers else "")
            if role_needs(cfg).reference or teachers else "no reference is needed (no KL term): these devices stay idle")))
    return rows


def _warmup_row(cfg: Any, role: str, warm: int | None) -> Row:
    steps = get_path(cfg, f"{role}.optim.lr_warmup_steps", None)
    ratio = get_path(cfg, f"{role}.optim.lr_warmup_steps_ratio", 0.0)
    updates = is_rl(cfg) and get_path(cfg, f"{role}.optim.lr_schedule_unit", "step") == "update"
    label = f"{role} LR warm-up {'updates' if updates else 'steps'}"
    if steps is not None and steps >= 0:
        return (label, str(steps), f"{role}.optim.lr_warmup_steps")
    if ratio == 0:
        return (label, "0", f"{role}.optim.lr_warmup_steps_ratio 0: no warm-up")
    rounding = "ceil" if get_path(cfg, f"{role}.optim.lr_warmup_rounding", "floor") == "ceil" else "int"
    fixed = get_path(cfg, f"{role}.optim.lr_schedule_updates", None)
    over = (f"{role}.optim.lr_schedule_updates {fixed}" if updates and fixed is not None else
            f"total training steps × {updates_per_step(cfg, role)} optimizer updates per step (lr_schedule_unit update)"
            if updates else "total training steps")
    return (label, "?" if warm is None else str(warm), f"{rounding}({role}.optim.lr_warmup_steps_ratio {ratio} × {over})")


def _device_block(cfg: Any, plan: BatchPlan) -> str:
    w = plan.world_size
    nodes = get_path(cfg, "cluster.nnodes", 1)
    gpus = get_path(cfg, "cluster.n_gpus_per_node", 0)
    rows: list[Row] = [
        ("responses per step", share_text(plan.responses_per_step, w), f"{plan.responses_per_step} / {w}"),
    ]
    for r in plan.roles:
        rows.append((f"{r.role} mini-batch", share_text(r.mini_batch_responses, w), f"{r.mini_batch_responses} responses / {w}"))
        if r.micro_batch is not None:
            rows.append((f"{r.role} micro-batch", str(r.micro_batch), f"{r.role}.ppo_micro_batch_size_per_gpu"))
    head = f"per device ({nodes} nodes × {gpus} devices = {w} processes):\n"
    return head + _table(rows, indent="  ")


def _table(rows: list[Row], indent: str = "") -> str:
    label_w = max(len(r[0]) for r in rows)
    value_w = max(len(r[1]) for r in rows)
    return "".join(f"{indent}{label:<{label_w}}  {value:>{value_w}}   ({how})\n" for label, value, how in rows)
