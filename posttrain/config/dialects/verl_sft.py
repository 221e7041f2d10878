"""verl's SFT trainer as posttrain's SFT stage.

verl users fine-tune with ``torchrun ... -m verl.trainer.fsdp_sft_trainer KEY=VALUE ...``: Hydra
overrides of ``sft_trainer.yaml`` (verl_sft_defaults.yaml here), not of the PPO tree. posttrain reads
the same words after ``posttrain train --dialect verl --config-name sft_trainer`` (verl_launch.BASES).
That tree's ``model.partial_pretrain`` is always part of such a line, so `sft_trainer` knows the tree
and translates the keys whose meaning is the SFT trainer's own:

- the run is an SFT stage (``algorithm.kind: sft``) that trains the actor;
- ``optim.*`` is the actor's optimizer; the schedule is the SFT trainer's: ``lr_scheduler`` cosine (to 0,
  half a wave) after int(``lr_warmup_steps_ratio`` x steps) warm-up steps. The ``optim: fsdp`` group's
  schedule keys (``lr_scheduler_type``, ``lr_warmup_steps``, ``min_lr_ratio``, ...) are not read by it;
- the loss is each micro-batch's token mean averaged over the micro-batches and ranks
  (``actor.sft_loss_scope: micro_batch``; ``data.balance_dp_token`` counts a micro-batch round's tokens
  over every rank), and it is computed in bf16 over the model's weights, as the trainer's FSDP mixed
  precision and autocast do (``actor.fsdp_config.mixed_precision.param_dtype: bf16``);
- ``data.micro_batch_size_per_gpu`` is the micro-batch; ``data.multiturn.*`` is read only when
  ``multiturn.enable`` is true (then ``messages_key`` and ``tools_key`` are the conversation and tool
  columns);
- ``model.*`` is the actor's model and FSDP settings; ``ulysses_sequence_parallel_size`` and
  ``use_remove_padding`` are the actor's.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.tables import Rule

MARK = "model.partial_pretrain"  # a key of sft_trainer.yaml alone: every line of that tree has it

# sft_trainer.yaml keys -> the posttrain keys the PPO tree's actor keys of the same meaning set
_SAME = {
    "data.micro_batch_size_per_gpu": "actor.ppo_micro_batch_size_per_gpu",
    "model.strategy": "actor.strategy",
    "model.fsdp_config.wrap_policy.min_num_params": "actor.fsdp_config.min_num_params",
    "ulysses_sequence_parallel_size": "actor.ulysses_sequence_parallel_size",
    "use_remove_padding": "model.use_remove_padding",
    "trainer.checkpoint.save_contents": "actor.checkpoint.save_contents",
    "trainer.checkpoint.load_contents": "actor.checkpoint.load_contents",
    "optim.lr": "actor.optim.lr",
    "optim.betas": "actor.optim.betas",
    "optim.weight_decay": "actor.optim.weight_decay",
    "optim.optimizer": "actor.optim.optimizer",
    "optim.override_optimizer_config": "actor.optim.override_optimizer_config",
    "optim.clip_grad": "actor.grad_clip",
    "optim.lr_warmup_steps_ratio": "actor.optim.lr_warmup_steps_ratio",
    "optim.warmup_steps_ratio": "actor.optim.lr_warmup_steps_ratio",  # the name older verl releases gave it
}
# the optim group's keys the SFT trainer does not read (it builds its own schedule)
_UNREAD = ("optim.lr_scheduler_type", "optim.warmup_style", "optim.lr_warmup_steps", "optim.min_lr_ratio",
           "optim.num_cycles", "optim.total_training_steps", "data.micro_batch_size", "trainer.seed")
_UNREAD_WHY = ("verl's SFT trainer does not read it (its schedule is optim.lr_scheduler after optim.lr_warmup_steps_ratio "
               "of the steps, its micro-batch data.micro_batch_size_per_gpu, and it seeds nothing from trainer.seed)")
_MULTITURN = {"data.multiturn.messages_key": "data.messages_key", "data.multiturn.tools_key": "data.tools_key"}
_OFFLOAD = ("model.fsdp_config.cpu_offload", "model.fsdp_config.offload_params")


def sft_trainer(ctx: Any) -> None:
    """A line of verl's SFT trainer tree (module comment) -> posttrain's SFT stage."""
    if not ctx.has(MARK):
        return
    ctx.set("algorithm.kind", "sft", MARK, "a line of verl's SFT trainer (sft_trainer.yaml): an SFT stage")
    ctx.set("actor.fsdp_config.mixed_precision.param_dtype", "bf16", MARK,
            "verl's SFT trainer computes in bf16 over the model's weights (FSDP mixed precision and autocast)")
    balance = ctx.get("data.balance_dp_token", False)
    ctx.consume("data.balance_dp_token")
    ctx.set("actor.sft_loss_scope", "micro_batch_all_ranks" if balance else "micro_batch", "data.balance_dp_token",
            "verl's SFT loss: each micro-batch's token mean (its tokens counted over every rank with balance_dp_token), "
            "averaged over the micro-batches")
    for key, native in _SAME.items():
        if ctx.has(key):
            ctx.consume(key)
            ctx.set(native, ctx.get(key), key, "verl's SFT trainer: the actor's setting")
    for key in _UNREAD:
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, _UNREAD_WHY)
    _schedule(ctx)
    _multiturn(ctx)
    for key in _OFFLOAD:
        if ctx.has(key):
            ctx.consume(key)
            if ctx.get(key):
                ctx.refuse(key, "not supported in SFT lines yet: verl's FSDP CPUOffload of the SFT model; posttrain's "
                                "offload is actor.fsdp_config.param_offload / optimizer_offload")
            else:
                ctx.drop(key, "false: nothing offloaded (posttrain's default)")
    if ctx.has("optim.optimizer_impl"):
        ctx.consume("optim.optimizer_impl")
        if ctx.get("optim.optimizer_impl") == "torch.optim":
            ctx.drop("optim.optimizer_impl", "torch.optim: where optim.optimizer is found, as posttrain finds it")
        else:
            ctx.refuse("optim.optimizer_impl", "not supported: posttrain builds its optimizers from torch.optim")


def _schedule(ctx: Any) -> None:
    if not ctx.has("optim.lr_scheduler"):
        return
    ctx.consume("optim.lr_scheduler")
    style = ctx.get("optim.lr_scheduler")
    if style == "cosine":  # verl's get_cosine_schedule_with_warmup at its defaults: to 0, half a wave
        ctx.set("actor.optim.lr_scheduler_type", "cosine", "optim.lr_scheduler", "cosine to 0 after the warm-up")
        ctx.set("actor.optim.min_lr_ratio", 0.0, "optim.lr_scheduler", "")
        ctx.set("actor.optim.num_cycles", 0.5, "optim.lr_scheduler", "")
    else:
        ctx.refuse("optim.lr_scheduler", f"{style!r}: verl's SFT wsd schedule decays along a cosine over the last tenth of "
                                         "the steps after warm-up, posttrain's wsd linearly; use cosine")


def _multiturn(ctx: Any) -> None:
    keys = ["data.multiturn.enable", *_MULTITURN, "data.multiturn.enable_thinking_key"]
    present = [k for k in keys if ctx.has(k)]
    ctx.consume(*present)
    if not ctx.get("data.multiturn.enable", False):
        for key in present:
            ctx.drop(key, "read only with data.multiturn.enable: true (single-turn rows: prompt_key, response_key)")
        return
    ctx.set("data.messages_key", ctx.get("data.multiturn.messages_key", "messages"), "data.multiturn.enable",
            "true: the rows are conversations, under multiturn.messages_key")
    for key, native in _MULTITURN.items():
        if ctx.has(key):
            ctx.set(native, ctx.get(key), key, "")
    thinking = ctx.get("data.multiturn.enable_thinking_key")
    if thinking == "enable_thinking":  # verl's default name: a column few datasets have
        ctx.drop("data.multiturn.enable_thinking_key", "verl's default column name; posttrain reads no per-row thinking switch "
                 "(rows with an enable_thinking column get data.apply_chat_template_kwargs like every other row)")
    elif ctx.has("data.multiturn.enable_thinking_key"):
        ctx.refuse("data.multiturn.enable_thinking_key", "not supported: a per-row enable_thinking column passed to the "
                   "chat template; posttrain passes data.apply_chat_template_kwargs to every row", None, thinking)


_SAMPLES = {"model.strategy": "fsdp", "use_remove_padding": True, "trainer.checkpoint.save_contents": ["model"],
            "trainer.checkpoint.load_contents": ["model"], "optim.lr": 1e-4, "optim.betas": [0.9, 0.99], "optim.weight_decay": 0.1,
            "optim.optimizer": "AdamW", "optim.override_optimizer_config": {"eps": 1e-6}, "optim.clip_grad": 0.5,
            "optim.lr_warmup_steps_ratio": 0.2, "optim.warmup_steps_ratio": 0.2, "model.fsdp_config.wrap_policy.min_num_params": 100}
# Keys the handler translates (docs/config-mapping.md reads this table: posttrain.config.tables).
RULES: dict[str, Rule] = {
    **{key: Rule(native, "verl's SFT trainer: the actor's setting", _SAMPLES.get(key, 2), ((MARK, "/m"),)) for key, native in _SAME.items()},
    "data.balance_dp_token": Rule("actor.sft_loss_scope", "verl's SFT loss is each micro-batch's token mean, averaged: "
                                  "false -> micro_batch, true -> micro_batch_all_ranks", True, ((MARK, "/m"),)),
    "optim.lr_scheduler": Rule("actor.optim.lr_scheduler_type", "cosine (to 0, half a wave); wsd is refused", "cosine", ((MARK, "/m"),)),
    "data.multiturn.enable": Rule("data.messages_key", "true: multiturn.messages_key and tools_key are the columns; "
                                  "false: they are not read", True, ((MARK, "/m"),)),
}


HANDLERS = [sft_trainer]
