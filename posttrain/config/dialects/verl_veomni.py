"""verl 0.10's VeOmni engine (``model_engine=veomni``) on posttrain's FSDP2.

VeOmni trains the Hugging Face model with torch's FSDP2 and Ulysses sequence parallelism, as
posttrain does; verl builds it from each role's ``veomni`` section (verl/workers/config/engine.py,
VeOmniEngineConfig) and its optimizer from the role's ``optim`` (VeOmniOptimizerConfig, built by
VeOmni's build_optimizer and build_lr_scheduler in verl/workers/engine/veomni/transformer_impl.py):

- **Sharding and placement.** ``param_offload`` / ``optimizer_offload`` -> the role's ``fsdp_config``
  offload keys, ``enable_fsdp_offload`` (FSDP2's CPU offload policy) -> ``fsdp_config.offload_policy``,
  ``fsdp_size`` -> ``fsdp_config.fsdp_size``, ``ulysses_parallel_size`` -> the role's
  ``ulysses_sequence_parallel_size``. Expert parallelism, full or gradient-only sharding, prefetch,
  the wrapped modules, meta-device init, the checkpoint manager and the packed micro-batches' padded
  length say where and how fast the same numbers are computed: dropped.
- **Kernels.** ``attn_implementation`` and the ``*_implementation`` backends compute the same
  operations to float rounding (VeOmni's kernel selection): dropped, except a sparse attention.
- **Precision.** ``mixed_precision: true`` is bf16 compute over fp32 weights, what posttrain's
  mixed precision does on a GPU; false (bf16 weights, no fp32 copy) is refused.
- **Optimizer.** VeOmni's AdamW decays every parameter (no exempt biases or norms, as posttrain's
  default) with eps 1e-8. Its schedule reads ``lr_scheduler_type`` (constant or cosine; the tree's
  default is cosine), ``lr_warmup_steps_ratio`` (floored), ``lr_start`` (the warm-up's first LR:
  posttrain's ``lr_warmup_init``), ``lr_min`` (the cosine's floor: ``min_lr_ratio`` = lr_min / lr)
  and ``lr_decay_ratio`` (the decay ends at int(total steps x ratio): ``lr_decay_steps`` when the
  line gives ``trainer.total_training_steps``). It reads neither ``lr_warmup_steps`` nor
  ``override_optimizer_config``: dropped with that reason. Its linear schedule decays towards 0
  and floors at an absolute 1e-7, which posttrain's linear does not: refused.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.source import leaves
from posttrain.config.dialects.verl_megatron import ROLES, _router_replay
from posttrain.config.dialects.verl_release import value_of
from posttrain.config.tables import Rule

_TREE = ("ppo_veomni_trainer",)  # verl's VeOmni trainer tree, whose defaults a key the line leaves out takes
_SAME = "where or how fast the work runs, not the numbers: posttrain's FSDP2 shards the role over the same devices"
_KERNEL = "a kernel backend of VeOmni's: the same operation to float rounding"
# keys that change where or how fast the role's numbers are computed, not what they are
LAYOUT = {
    "expert_parallel_size": f"expert parallelism: experts split over devices, dispatched without a capacity (dropless); {_SAME}",
    "enable_full_shard": f"whether parameters are sharded too or only gradients and optimizer state; {_SAME}",
    "forward_prefetch": f"gathers the next layer's parameters during the current one's forward; {_SAME}",
    "basic_modules": f"more module classes wrapped as FSDP units beside the decoder layers; {_SAME}",
    "init_device": "where the model is first built before its weights load (meta: no memory until sharded); the loaded weights are the same",
    "ckpt_manager": "the format of VeOmni's checkpoint files; posttrain writes its own (DCP for sharded roles) and resumes from them",
    "enable_reentrant": "which implementation of activation recomputation runs (reentrant or not): the same gradients",
    "pad_to_length": "pads each packed micro-batch up to a length bucket; the padding is stripped before the loss: the same numbers",
    "pad_to_length_bucket": "the length bucket of pad_to_length; the padding is stripped before the loss: the same numbers",
    "force_use_huggingface": "builds the Hugging Face model class instead of VeOmni's patched one: posttrain always trains the Hugging Face model",
    "activation_gpu_limit": "how many GB of activations stay on the device with activation offload on (model.enable_activation_offload): placement only",
    "use_torch_compile": "compiles verl's entropy function of the engine: the same numbers",
    "strategy": "veomni: the engine's name (the role's strategy)",
}
_SPARSE = "native-sparse"


def is_veomni(ctx: Any, prefix: str) -> bool:
    """Whether verl runs the role at ``prefix`` with its VeOmni engine (``strategy: veomni``)."""
    return ctx.get(f"{prefix}.strategy") == "veomni"


def veomni(ctx: Any) -> None:
    """Each role's ``veomni`` section (module docstring)."""
    for prefix, role in ROLES.items():
        section = ctx.get(f"{prefix}.veomni")
        if not isinstance(section, dict):
            continue
        for name, value in leaves(section).items():
            key = f"{prefix}.veomni.{name}"
            if ctx.has(key) and key not in ctx.handled:
                ctx.consume(key)
                _one(ctx, prefix, role, key, name, value)
        if ctx.has(f"{prefix}.pad_to_length") and is_veomni(ctx, prefix):  # the role-level spelling verl forwards to veomni's
            ctx.consume(f"{prefix}.pad_to_length")
            ctx.drop(f"{prefix}.pad_to_length", LAYOUT["pad_to_length"])


def _one(ctx: Any, prefix: str, role: str, key: str, name: str, value: Any) -> None:
    head, _, rest = name.partition(".")
    if head in LAYOUT:
        ctx.drop(key, LAYOUT[head])
    elif head in ("param_offload", "optimizer_offload", "enable_fsdp_offload"):
        _offload(ctx, role, key, head, value)
    elif head == "fsdp_size":
        ctx.set(f"{role}.fsdp_config.fsdp_size", value, key, "processes per sharding group (-1: all of the role's), the rest replicate (HSDP)")
    elif head == "ulysses_parallel_size":
        _ulysses(ctx, role, key, value)
    elif head in ("entropy_checkpointing", "entropy_from_logits_with_chunking"):
        if role == "critic":
            ctx.drop(key, "the critic computes no entropy")
        else:
            ctx.set(f"{role}.{head}", value, key, "verl's VeOmni engine reads the role's entropy options here")
    elif head == "mixed_precision":
        if value:
            ctx.drop(key, "bf16 compute over fp32 weights: what posttrain's fsdp_config.mixed_precision.param_dtype auto does on a GPU")
        else:
            ctx.refuse(key, "false trains bf16 weights without an fp32 copy; posttrain keeps its weights in model.dtype and computes in "
                            "the role's fsdp_config.mixed_precision.param_dtype: use true", None, value)
    elif head == "attn_implementation":
        if value == _SPARSE:
            ctx.refuse(key, "native sparse attention attends to a selection of the tokens: another model's computation than the "
                            "Hugging Face model's dense attention", None, value)
        else:
            ctx.drop(key, f"{value}: an attention kernel (dense, exact): the same attention to float rounding")
    elif head.endswith("_implementation"):
        ctx.drop(key, _KERNEL)
    elif head in ("seed", "full_determinism"):
        _determinism(ctx, prefix, key, head, value)
    elif head == "forward_only":
        if role == "ref" or not value:
            ctx.drop(key, "verl marks the reference as forward-only; posttrain's reference never trains" if role == "ref" else "false: the role trains")
        else:
            ctx.refuse(key, f"true: the {role} would run forward passes only and never train; remove it", None, value)
    elif head == "load_checkpoint_path":
        ctx.refuse_unless_default(key, "a checkpoint VeOmni loads into the engine; posttrain starts from the model's weights and resumes from "
                                       "its own checkpoints (trainer.resume_mode)", None, value)
    elif head == "router_replay" and role == "actor":
        _router_replay(ctx, key, rest, value)
    elif head == "router_replay":
        ctx.refuse_unless_default(key, "routing replay of a role other than the actor; posttrain replays the actor's routing only "
                                       "(actor.router_replay.mode R2)", None, value)
    else:
        ctx.refuse(key, f"not a key of verl's VeOmni engine config ({prefix}.veomni)", None, value)


def _offload(ctx: Any, role: str, key: str, name: str, value: Any) -> None:
    if role == "ref" and name == "optimizer_offload":
        ctx.drop(key, "the reference has no optimizer")
    elif name == "enable_fsdp_offload":
        ctx.set(f"{role}.fsdp_config.offload_policy", bool(value), key, "FSDP2's CPU offload policy: parameters, gradients and optimizer state in CPU memory")
    else:
        what = "parameters" if name == "param_offload" else "optimizer state"
        ctx.set(f"{role}.fsdp_config.{name}", bool(value), key, f"CPU offload of the role's {what} (FSDP2)")


def _ulysses(ctx: Any, role: str, key: str, value: Any) -> None:
    actor = value_of(ctx, "actor_rollout_ref.actor.veomni.ulysses_parallel_size", _TREE)
    if role == "ref" and value == actor:
        ctx.drop(key, "the actor's: posttrain's reference splits its sequences as the actor does (ref.ulysses_sequence_parallel_size null)")
    else:
        ctx.set(f"{role}.ulysses_sequence_parallel_size", value, key, "Ulysses sequence parallelism of that size (VeOmni's and posttrain's alike)")


def _determinism(ctx: Any, prefix: str, key: str, name: str, value: Any) -> None:
    """VeOmni reads ``seed`` only with ``full_determinism`` (which also forces deterministic kernels)."""
    exact = bool(value_of(ctx, f"{prefix}.veomni.full_determinism", _TREE))
    if name == "full_determinism" and value:
        ctx.refuse(key, "deterministic kernels everywhere (torch.use_deterministic_algorithms); posttrain seeds every role with "
                        "trainer.seed but does not force deterministic kernels: set it false", None, value)
    elif name == "full_determinism":
        ctx.drop(key, "false: no forced deterministic kernels, as posttrain")
    elif not exact:
        ctx.drop(key, "read by verl's VeOmni engine only with full_determinism: posttrain seeds every role with trainer.seed")
    else:
        ctx.drop(key, "read with full_determinism, which is refused")


def optimizers(ctx: Any) -> None:
    """The actor's and critic's ``optim`` under verl's VeOmni engine (module docstring)."""
    for prefix, role in (("actor_rollout_ref.actor", "actor"), ("critic", "critic")):
        o = f"{prefix}.optim"
        if not is_veomni(ctx, prefix):
            for name in ("lr_min", "lr_start", "lr_decay_ratio"):  # VeOmni's own schedule keys (its tree's), which no other engine reads
                if ctx.has(f"{o}.{name}") and f"{o}.{name}" not in ctx.handled:
                    ctx.consume(f"{o}.{name}")
                    ctx.drop(f"{o}.{name}", f"read only by verl's VeOmni engine ({prefix}.strategy veomni)")
            continue
        for name in ("optimizer", "lr_scheduler_type", "lr_min", "lr_start", "lr_decay_ratio", "lr_warmup_steps", "override_optimizer_config"):
            if ctx.has(f"{o}.{name}"):
                ctx.consume(f"{o}.{name}")
                _optim(ctx, o, role, name, ctx.get(f"{o}.{name}"))


def _optim(ctx: Any, o: str, role: str, name: str, value: Any) -> None:
    key, style = f"{o}.{name}", value_of(ctx, f"{o}.lr_scheduler_type", _TREE)
    decays = style == "cosine"
    if name == "optimizer":
        if value == "adamw":
            ctx.set(f"{role}.optim.optimizer", "adamw", key, "VeOmni's AdamW: weight decay on every parameter, eps 1e-8")
        else:
            ctx.refuse(key, f"{value!r}: VeOmni's {value} optimizer; posttrain's twin of VeOmni's optimizers is adamw", None, value)
    elif name == "lr_scheduler_type":
        if value in ("constant", "cosine"):
            ctx.set(f"{role}.optim.lr_scheduler_type", value, key, "VeOmni's schedule after the warm-up" + (" (the tree's default)" if value == "cosine" else ""))
        else:
            ctx.refuse(key, f"{value!r}: VeOmni's linear schedule falls towards 0 and floors at an absolute 1e-7; posttrain's linear ends "
                            "at min_lr_ratio x lr: use constant or cosine", f"{role}.optim.lr_scheduler_type", value)
    elif name == "lr_min":
        lr = value_of(ctx, f"{o}.lr", _TREE)
        if not decays or not value:
            ctx.drop(key, f"{value!r}: the cosine's floor, " + ("not read by the constant schedule" if not decays else "0, as min_lr_ratio's default"))
        elif not isinstance(lr, (int, float)) or lr <= 0 or value > lr:
            ctx.refuse(key, f"the cosine's floor {value!r} must lie in [0, lr] (lr {lr!r})", f"{role}.optim.min_lr_ratio", value)
        else:
            ctx.set(f"{role}.optim.min_lr_ratio", value / lr, key, f"the cosine's floor as a fraction of lr ({value} / {lr})")
    elif name == "lr_start":
        if not value:
            ctx.drop(key, "0: the warm-up starts from 0, as lr_warmup_init's default")
        else:
            ctx.set(f"{role}.optim.lr_warmup_init", value, key, "the warm-up's first LR")
    elif name == "lr_decay_ratio":
        _decay_ratio(ctx, key, role, value, decays)
    elif name == "lr_warmup_steps":
        ctx.drop(key, "not read by verl's VeOmni engine, whose schedule warms up for lr_warmup_steps_ratio of the steps"
                 + ("" if value in (-1, None) else f" ({value} is ignored there as here)"))
    else:  # override_optimizer_config
        ctx.drop(key, "empty: nothing overridden" if not value else
                 "not passed to VeOmni's build_optimizer by verl (it reads optimizer, lr, betas and weight_decay): ignored there as here")


def _decay_ratio(ctx: Any, key: str, role: str, value: Any, decays: bool) -> None:
    total = ctx.get("trainer.total_training_steps")
    if value == 1.0 or not decays:
        ctx.drop(key, f"{value!r}: " + ("the decay ends at the last step, as posttrain's lr_decay_steps null" if decays else "not read by the constant schedule"))
    elif not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1:
        ctx.refuse(key, f"expected a fraction in (0, 1], got {value!r}", f"{role}.optim.lr_decay_steps", value)
    elif isinstance(total, int) and total > 0 and int(total * value) >= 1:
        ctx.set(f"{role}.optim.lr_decay_steps", int(total * value), key,
                f"the cosine ends at int(trainer.total_training_steps x {value}) and holds its floor after")
    else:
        ctx.refuse(key, f"{value!r}: a fraction of the run's steps, which posttrain counts only once the data loads; give "
                        "trainer.total_training_steps on the line (the decay then ends at int(steps x ratio)), or leave it at 1.0",
                   f"{role}.optim.lr_decay_steps", value)


HANDLERS = [veomni, optimizers]


def _rules() -> dict[str, Rule]:
    out: dict[str, Rule] = {}
    for prefix, role in ROLES.items():
        v = f"{prefix}.veomni."
        for name, how in LAYOUT.items():
            if name != "strategy":
                out[v + name] = Rule(None, how, 2 if name.endswith("size") else True)
        out[v + "param_offload"] = Rule(f"{role}.fsdp_config.param_offload", "CPU offload of the role's parameters (FSDP2)", True)
        out[v + "enable_fsdp_offload"] = Rule(f"{role}.fsdp_config.offload_policy", "FSDP2's CPU offload policy", True)
        out[v + "fsdp_size"] = Rule(f"{role}.fsdp_config.fsdp_size", "processes per sharding group (-1: all)", 2)
        out[v + "ulysses_parallel_size"] = Rule(f"{role}.ulysses_sequence_parallel_size", "Ulysses sequence parallelism of that size; the reference's follows the actor's", 2)
        out[v + "mixed_precision"] = Rule(None, "true: bf16 compute over fp32 weights, as posttrain's mixed precision on a GPU; false (pure bf16 weights) refused", True)
        out[v + "attn_implementation"] = Rule(None, "a dense attention kernel: the same attention to rounding; native-sparse refused", "sdpa")
        out[v + "seed"] = Rule(None, "read by VeOmni only with full_determinism (refused when true)", 7)
        if role == "ref":
            out[v + "optimizer_offload"] = Rule(None, "the reference has no optimizer", True)
        else:
            out[v + "optimizer_offload"] = Rule(f"{role}.fsdp_config.optimizer_offload", "CPU offload of the role's optimizer state (FSDP2)", True)
        if role != "critic":
            out[v + "entropy_checkpointing"] = Rule(f"{role}.entropy_checkpointing", "verl's VeOmni engine reads the role's entropy options here", True)
    out["actor_rollout_ref.actor.veomni.router_replay.mode"] = Rule("actor.router_replay.mode", "the VeOmni engine's routing replay: R2 -> R2, R3 refused", "R2", (("actor_rollout_ref.actor.strategy", "veomni"),))
    for prefix, role in (("actor_rollout_ref.actor", "actor"), ("critic", "critic")):
        o = f"{prefix}.optim."
        when = ((f"{prefix}.strategy", "veomni"), (o + "lr_scheduler_type", "cosine"), (o + "lr", 1e-6), ("trainer.total_training_steps", 20))
        out[o + "lr_min"] = Rule(f"{role}.optim.min_lr_ratio", "VeOmni's cosine floor: min_lr_ratio = lr_min / lr", 1e-7, when)
        out[o + "lr_start"] = Rule(f"{role}.optim.lr_warmup_init", "VeOmni's warm-up start", 1e-8, when)
        out[o + "lr_decay_ratio"] = Rule(f"{role}.optim.lr_decay_steps", "VeOmni's decay end as a fraction of the steps: lr_decay_steps with trainer.total_training_steps given, else refused", 0.5, when)
    return out


RULES: dict[str, Rule] = _rules()
