"""verl keys dropped rather than refused, beyond Hydra's own (posttrain.config.dialects.source).

`blank_device_counts`, `null_profile_steps`, `global_micro_batches` and `keep_one_checkpoint` are handlers
(they run before the key-by-key translation; `RULES` lists what they translate); `ignorable`
decides for keys without a field. verl's SFT trainer's keys have handlers of their own
(posttrain.config.dialects.verl_sft).

verl's default config spells out every profiler tool's options (nsys, npu, torch_memory) and each
role's copy of the global tool and save path. Those configure a tool the run does not use, or repeat
a global value: dropping them changes nothing, and refusing them would refuse every whole verl
config. A value that would change something (the chosen tool's own options, a role's other save
path) is still refused with the reason from the schema's UNSUPPORTED tables.
"""

from __future__ import annotations

import re
from typing import Any

from posttrain.algorithms.rollout_correction import is_threshold_spec
from posttrain.config.dialects import machine, verl_code, verl_distill, verl_loss_scale, verl_megatron, verl_nsys, verl_reward, verl_sft, verl_turbo, verl_veomni
from posttrain.config.dialects.checkpoints import set_counts
from posttrain.config.dialects.model_files import image_patch_size
from posttrain.config.dialects.source import hydra_ignorable
from posttrain.config.dialects.verl_release import defaults_of, release, value_of
from posttrain.config.dialects.values import value_hook as common_value_hook
from posttrain.config.tables import Rule

_ROLLOUT, _ACTOR = "actor_rollout_ref.rollout.profiler.", "actor_rollout_ref.actor.profiler."
_TOOL_OPTIONS = re.compile(r"(^global_profiler\.global_tool_config|\.profiler\.tool_config)\.(nsys|npu|torch_memory)\.")


def null_profile_steps(ctx: Any) -> None:
    """verl's `steps: null` (no profiling) in either of its two spellings is left out, so that it
    does not conflict with a list given in the other one."""
    for key in ("global_profiler.steps", "trainer.profile_steps"):
        if ctx.has(key) and ctx.get(key) is None:
            ctx.consume(key)
            ctx.drop(key, "null: no steps profiled (posttrain's default, profiler.steps: [])")


def ray_cluster(ctx: Any) -> None:
    """verl starts a Ray cluster for every run; ``ray_kwargs.ray_init.num_cpus`` sizes it and
    ``ray_kwargs.timeline_json_file`` asks for its timeline. posttrain starts its workers with Ray
    across nodes (``trainer.nnodes`` > 1: cluster.launcher auto), where both are its cluster's keys;
    on one node its workers are local subprocesses, with no Ray cluster to size or trace."""
    across = (ctx.get("trainer.nnodes", 1) or 1) > 1
    for key, native, what in (("ray_kwargs.ray_init.num_cpus", "cluster.ray_num_cpus", "the CPUs of the Ray cluster"),
                              ("ray_kwargs.timeline_json_file", "cluster.ray_timeline_file", "the timeline of the Ray cluster")):
        if not ctx.has(key) or ctx.get(key) is None:
            continue
        ctx.consume(key)
        if across:
            ctx.set(native, ctx.get(key), key, f"{what} posttrain starts its workers with across nodes")
        else:
            ctx.drop(key, f"{what} verl starts; posttrain's workers on one node are local subprocesses, with no Ray cluster "
                          f"(cluster.launcher ray would start one, and {native} is its key)")


def critic_switch(ctx: Any) -> None:
    """verl 0.10's ``critic.enable`` (null: a critic exactly when ``adv_estimator`` is gae). posttrain
    trains a critic when the estimator reads values, so true with gae and false otherwise say what it
    does; true beside another estimator would train a critic whose values nothing reads, and false
    with gae would leave gae without values."""
    key = "critic.enable"
    if not ctx.has(key) or ctx.get(key) is None:
        return
    ctx.consume(key)
    value, gae = ctx.get(key), ctx.get("algorithm.adv_estimator", "gae") == "gae"
    if bool(value) == gae:
        ctx.drop(key, f"{value}: {'gae reads the critic' if gae else 'the estimator reads no values'}, as posttrain decides from algorithm.adv_estimator")
    elif value:
        ctx.refuse(key, "true beside an estimator that reads no values: verl would train a critic nothing uses; posttrain trains a critic "
                        "for gae only: remove it", None, value)
    else:
        ctx.refuse(key, "false with adv_estimator gae, which needs the critic's values: set another estimator or remove it", None, value)


def rollout_seed(ctx: Any) -> None:
    """verl 0.10's ``rollout.seed`` seeds its engine's sampler (42 by default); posttrain's engine
    seed is rollout.seed too, null meaning trainer.seed. verl's default is left to posttrain's."""
    key = "actor_rollout_ref.rollout.seed"
    if not ctx.has(key) or ctx.get(key) is None:
        return
    ctx.consume(key)
    if is_default(key, ctx.get(key)):
        ctx.drop(key, "verl's default (42): posttrain seeds the engine from trainer.seed unless rollout.seed is given")
    else:
        ctx.set("rollout.seed", ctx.get(key), key, "the seed of the engine's sampler")


_ROLLOUT_N = "actor_rollout_ref.rollout.n"
_POOL = "a device pool of its own for verl's standalone rollout (rollout.nnodes > 0); posttrain places engines with cluster.device_mapping.rollout"


def interpolated_copies(ctx: Any) -> None:
    """Keys whose verl default copies another key: each role's ``rollout_n`` (rollout.n, by which
    verl scales the role's batch sizes) and the rollout's own device pool (``rollout.n_gpus_per_node``
    copies trainer.n_gpus_per_node, read only with ``rollout.nnodes`` > 0). At the value they copy
    they say nothing more; another value is refused."""
    n = ctx.get(_ROLLOUT_N, 1)
    for prefix in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic"):
        key = f"{prefix}.rollout_n"
        if not ctx.has(key) or key in ctx.handled:
            continue
        ctx.consume(key)
        if ctx.get(key) in (None, n):
            ctx.drop(key, f"verl's copy of {_ROLLOUT_N} ({n}), by which it scales the role's batch sizes; posttrain reads rollout.n")
        else:
            ctx.refuse(key, f"{ctx.get(key)} where {_ROLLOUT_N} is {n}: verl would scale this role's batch sizes by another count than the "
                            "responses per prompt; leave it to verl's interpolation", None, ctx.get(key))
    pool = ctx.get("actor_rollout_ref.rollout.nnodes", 0) or 0
    for name in ("nnodes", "n_gpus_per_node"):
        key = f"actor_rollout_ref.rollout.{name}"
        if not ctx.has(key) or key in ctx.handled:
            continue
        ctx.consume(key)
        if pool:
            ctx.refuse(key, _POOL, None, ctx.get(key))
        else:
            ctx.drop(key, "rollout.nnodes 0: the rollout shares the trainer's devices (verl's hybrid engine), as posttrain's does"
                          if name == "nnodes" else "read only with rollout.nnodes > 0 (a standalone rollout pool), which is 0 here")


_PATCH = "data.image_patch_size"


def image_patch(ctx: Any) -> None:
    """verl reads ``data.image_patch_size`` only in its overlong-prompt filter, which measures each
    prompt with its images first resized (qwen_vl_utils) to multiples of twice that patch; the
    images the model is given are resized at the processor's own patch size (verl's agent loop).
    posttrain measures and feeds them at the processor's size, so the lengths agree where the key
    is that size (Qwen2-/2.5-VL 14, Qwen3-VL 16), which is checked against the model's
    preprocessor_config.json when the model is on this machine."""
    if not ctx.has(_PATCH):
        return
    value = ctx.get(_PATCH)
    ctx.consume(_PATCH)
    if not ctx.get("data.filter_overlong_prompts", False):
        ctx.drop(_PATCH, "read by verl only in its overlong-prompt filter, which is off (data.filter_overlong_prompts false)")
        return
    path = ctx.get("actor_rollout_ref.model.path")
    own = image_patch_size(path)
    if own is None:
        ctx.drop(_PATCH, f"{value}: verl measures prompts for its overlong filter with images resized at this patch size, posttrain at "
                         "the model's image processor's: the same lengths where this is it (checked once the model is on this machine)")
    elif own == value:
        ctx.drop(_PATCH, f"{value}: the model's own patch size (its preprocessor_config.json), at which posttrain measures and feeds images")
    else:
        ctx.refuse(_PATCH, f"{value}: verl's overlong-prompt filter would measure images resized at patch {value}, while the model "
                           f"({path}) is given them at its processor's patch size {own}, at which posttrain measures them: set it to {own}",
                   None, value)


# verl's deprecated global micro-batch sizes, by the per-device key verl derives from each.
_GLOBAL_MICRO = {
    "actor_rollout_ref.actor.ppo_micro_batch_size": "actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size": "rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size": "ref.log_prob_micro_batch_size_per_gpu",
    "critic.ppo_micro_batch_size": "critic.ppo_micro_batch_size_per_gpu",
    "critic.forward_micro_batch_size": "critic.forward_micro_batch_size_per_gpu",
    "reward_model.micro_batch_size": "reward.reward_model.micro_batch_size_per_gpu",
}


def world_size(ctx: Any) -> int:
    """The worker processes posttrain runs the file with: trainer.nnodes x trainer.n_gpus_per_node
    (posttrain.config.access.world_size), the latter as written or, left out, this machine's GPUs
    (`machine_devices`); one process with none."""
    gpus, nodes = machine.per_node(ctx, "trainer.n_gpus_per_node") or 0, ctx.get("trainer.nnodes", 1) or 1
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (gpus, nodes))
    return nodes * gpus if ints and gpus > 0 else 1


def global_micro_batches(ctx: Any) -> None:
    """A global micro-batch size is split over the worker processes, as verl's workers do at start
    (``micro_batch_size //= world size``, the per-device size; posttrain has no sequence parallelism
    to divide the world by). Zero per process is refused, as verl's own assertion does."""
    world = world_size(ctx)
    for key, native in _GLOBAL_MICRO.items():
        if not ctx.has(key):
            continue
        ctx.consume(key)
        value = ctx.get(key)
        if value is None:
            ctx.drop(key, f"null: the per-device size {native} applies")
        elif not isinstance(value, int) or isinstance(value, bool) or value // world < 1:
            ctx.refuse(key, f"a global micro-batch of {value!r} responses over {world} worker process(es) leaves none per process; give at least {world}", native, value)
        else:
            ctx.set(native, value // world, key, f"{value} // {world} worker process(es)")


def keep_one_checkpoint(ctx: Any) -> None:
    """verl's deprecated ``remove_previous_ckpt_in_save: true`` keeps only the newest checkpoint of
    each role (verl reads it as max_actor_ckpt_to_keep = max_critic_ckpt_to_keep = 1)."""
    key = "trainer.remove_previous_ckpt_in_save"
    if not ctx.has(key):
        return
    ctx.consume(key)
    value = ctx.get(key)
    if value in (None, False):
        ctx.drop(key, "false: the checkpoints kept follow max_actor_ckpt_to_keep / max_critic_ckpt_to_keep")
    elif value is True:
        set_counts(ctx, 1, key, "true: keep only the newest checkpoint")
    else:
        ctx.refuse(key, f"expected true or false, got {value!r}", None, value)


# The reason a device count left empty is refused with: it names what the machine lacks (smoke's
# machine_refusal and the corpus sweep read "a cluster job's device count").
BLANK_DEVICES = ("empty: a cluster job's device count, left empty where a launch script's variable is not set (SLURM "
                 "sets $SLURM_JOB_NUM_NODES and $SLURM_GPUS_PER_NODE only inside a job): export the variable to plan "
                 "here; `posttrain smoke` runs one CPU process instead")


def machine_devices(ctx: Any) -> None:
    """No ``trainer.n_gpus_per_node`` (verl's default, 8, describes verl's machine): this machine's
    GPUs per node, one process without any (posttrain.config.dialects.machine); trainer.nnodes
    (verl's default 1) multiplies it as written."""
    machine.size_to_machine(ctx, "trainer.n_gpus_per_node", "verl", 8)


def blank_device_counts(ctx: Any) -> None:
    """``trainer.nnodes=`` / ``trainer.n_gpus_per_node=`` with nothing after ``=``: a script's ``$VAR``
    that is not set on this machine (verl would fail on the empty value as well)."""
    for key in ("trainer.nnodes", "trainer.n_gpus_per_node"):
        if ctx.get(key) == "":
            ctx.consume(key)
            ctx.refuse(key, BLANK_DEVICES, "cluster." + key.split(".", 1)[1], "")


def compile_default(ctx: Any) -> None:
    """verl's default ``use_torch_compile: true`` (verl compiles its entropy function with it: the
    values are the same either way) is left out where posttrain's meaning, compiled decoder layers,
    cannot run: a model sharded over several worker processes. Another value, or the same one
    on one process, translates as usual (posttrain.config.sections.actor)."""
    key = "actor_rollout_ref.actor.use_torch_compile"
    if ctx.has(key) and world_size(ctx) > 1 and is_default(key, ctx.get(key)):
        ctx.consume(key)
        ctx.drop(key, f"verl's own default (true), left out: posttrain compiles whole decoder layers with it, which a model sharded over {world_size(ctx)} worker processes cannot run")


def engine_config(ctx: Any) -> None:
    """verl 0.10's FSDP engine section (``fsdp_config``) of the actor and the reference holds the
    role's Ulysses size and entropy options; its engine reads them there (verl/workers/config/engine.py).
    The role-level keys are 0.10's deprecated spellings: ``ulysses_sequence_parallel_size`` > 1 is
    copied over the engine's (verl/workers/config/actor.py), and the entropy keys are the defaults
    the engine's interpolate; the critic's engine section is ``critic.fsdp`` (its Ulysses size only:
    a value head computes no entropy). 0.8 lines keep 0.8's reading (the role-level keys): its legacy
    workers do not read the engine section's copies, which are dropped saying so."""
    roles = (("actor_rollout_ref.actor", "fsdp_config", "actor"), ("actor_rollout_ref.ref", "fsdp_config", "ref"), ("critic", "fsdp", "critic"),
             ("critic", "model.fsdp_config", "critic"))
    for prefix, engine, role in roles:
        names = ("ulysses_sequence_parallel_size",) if role == "critic" else ("ulysses_sequence_parallel_size", "entropy_checkpointing", "entropy_from_logits_with_chunking")
        for name in names:
            key, legacy = f"{prefix}.{engine}.{name}", f"{prefix}.{name}"
            if not ctx.has(key) or key in ctx.handled:
                continue
            ctx.consume(key)
            if release() == "0.8":
                ctx.drop(key, f"verl 0.8's legacy workers read {legacy} instead, not the engine section's copy")
                continue
            value = ctx.get(key)
            if name == "ulysses_sequence_parallel_size" and ctx.has(legacy) and (ctx.get(legacy) or 1) > 1:
                ctx.drop(key, f"{legacy} ({ctx.get(legacy)}) is greater than 1, and verl 0.10 copies it over this key")
                continue
            if ctx.has(legacy):
                ctx.consume(legacy)
                ctx.drop(legacy, f"verl 0.10's engine reads {key} (this role-level key is its default there)")
            ctx.set(f"{role}.{name}", value, key, "verl 0.10's engine reads the role's sequence parallel size and entropy options here")


_A = "actor_rollout_ref.actor"
_SMTM = "seq-mean-token-mean"


def sapo(ctx: Any) -> None:
    """verl's SAPO loss (``policy_loss.loss_mode: sapo``, verl/trainer/ppo/core_algos.py) is
    posttrain's sapo (the same gate 4 sigmoid(tau (r - 1)) / tau on the ratio, tau_pos where A > 0,
    else tau_neg), with verl's actor-level ``tau_pos`` / ``tau_neg`` as its loss_args. verl aggregates
    it seq-mean-token-mean whatever ``loss_agg_mode`` says (which then still aggregates the entropy
    and KL terms): posttrain's actor.loss_agg_mode becomes seq-mean-token-mean where that changes no
    other term (no entropy bonus, no KL loss), and otherwise the line is refused. ``policy_loss.tau_pos``
    / ``tau_neg`` (added with ``+``) are read by no verl code: its loss reads the actor's."""
    for name in ("tau_pos", "tau_neg"):
        key = f"{_A}.policy_loss.{name}"
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, f"read by no verl code: its SAPO loss reads {_A}.{name} (the actor's; {defaults_of(f'{_A}.{name}')[0]} by default)")
    sapo_loss = ctx.get(f"{_A}.policy_loss.loss_mode") == "sapo"
    for name in ("tau_pos", "tau_neg"):
        key = f"{_A}.{name}"
        if not ctx.has(key):
            continue
        ctx.consume(key)
        if sapo_loss:
            ctx.set(f"actor.policy_loss.loss_args.{name}", ctx.get(key), key, "the SAPO gate's temperature for positive (tau_pos) or other (tau_neg) advantages")
        else:
            ctx.drop(key, "read by verl's SAPO loss only (policy_loss.loss_mode sapo)")
    if not sapo_loss:
        return
    agg_key = f"{_A}.loss_agg_mode"
    agg = value_of(ctx, agg_key)
    if agg == _SMTM:
        return
    others = [k for k in (f"{_A}.entropy_coeff", f"{_A}.use_kl_loss") if ctx.get(k)]
    if ctx.has(agg_key):
        ctx.consume(agg_key)
    if others:
        ctx.refuse(agg_key, f"{agg}: verl's SAPO loss aggregates {_SMTM} while its {' and '.join(others)} term is aggregated {agg}; "
                            f"posttrain aggregates every actor term one way: set loss_agg_mode={_SMTM}", "actor.loss_agg_mode", agg)
        return
    ctx.set("actor.loss_agg_mode", _SMTM, f"{_A}.policy_loss.loss_mode",
            f"verl's SAPO loss aggregates {_SMTM} whatever loss_agg_mode ({agg}) says, which then aggregates no other term here")


_RC = "algorithm.rollout_correction."


def rollout_correction(ctx: Any) -> None:
    """verl's current spelling of rollout correction (``algorithm.rollout_correction.*``).

    Decoupled mode (``bypass_mode: false``, the actor recomputes the old log-probs) lands on
    posttrain's ``algorithm.rollout_is*`` / ``rollout_rs*``: ``rollout_is: token|sequence`` is
    rollout_is true at that level, truncated at rollout_is_threshold, or, given verl 0.10's
    "L_U", zeroed outside [L, U] (IcePop: rollout_is_mode zero);
    ``rollout_is: null`` gives no weights, and the block still runs (metrics, rejection) when
    rollout_rs is set or the threshold is not verl's default. rollout_rs, rollout_rs_threshold and
    rollout_is_batch_normalize translate key by key.

    Bypass mode (``bypass_mode: true``) takes the rollout's log-probs as the old ones
    (actor.reuse_rollout_logprobs: always) and corrects inside the loss: the policy loss becomes
    posttrain's ``bypass_mode`` with the block's settings as its options (loss_type, rollout_is,
    rollout_is_threshold, rollout_is_batch_normalize, rollout_rs, rollout_rs_threshold), and the
    decoupled keys are left unset, as verl skips that step there.
    """
    names = ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs", "rollout_rs_threshold", "bypass_mode", "loss_type")
    if not any(ctx.has(_RC + k) for k in names):
        return
    value = {k: ctx.get(_RC + k, default) for k, default in zip(names, (None, 2.0, False, None, None, False, "ppo_clip"))}
    valid = {"bypass_mode": (True, False), "loss_type": ("ppo_clip", "reinforce"), "rollout_is": (None, "token", "sequence")}
    for k, allowed in valid.items():
        if value[k] not in allowed:
            ctx.consume(*[_RC + n for n in names if ctx.has(_RC + n)])
            ctx.refuse(_RC + k, f"{value[k]!r} is not one of verl's values: {', '.join(map(str, allowed))}", None, value[k])
            return
    bounds = _is_bounds(ctx, value["rollout_is_threshold"])
    if bounds is None:
        ctx.consume(*[_RC + n for n in names if ctx.has(_RC + n)])
        return
    if value["bypass_mode"]:
        ctx.consume(*[_RC + n for n in names if ctx.has(_RC + n)])
        ctx.set("actor.reuse_rollout_logprobs", "always", _RC + "bypass_mode", "true: the rollout's log-probs are the old ones")
        ctx.set("actor.policy_loss.loss_mode", "bypass_mode", _RC + "bypass_mode", "true: the correction is taken inside the loss (posttrain.algorithms.bypass_mode_loss)")
        for k in names:
            if k != "bypass_mode" and ctx.has(_RC + k):
                ctx.set(f"actor.policy_loss.loss_args.{k}", value[k], _RC + k, "an option of the bypass_mode loss")
        return
    present = [_RC + k for k in ("rollout_is", "rollout_is_threshold", "bypass_mode", "loss_type") if ctx.has(_RC + k)]
    ctx.consume(*present)
    for key in present:
        if key.endswith(("loss_type", "bypass_mode")):
            ctx.drop(key, "only read in bypass mode (bypass_mode: true)")
    if value["rollout_is"] is None and value["rollout_rs"] is None and value["rollout_is_threshold"] == 2.0:
        for key in present:
            if not key.endswith(("loss_type", "bypass_mode")):
                ctx.drop(key, "rollout_is and rollout_rs null (verl's default): no weights and no rejection")
        return
    upper, lower = bounds
    if lower is None:
        ctx.set("algorithm.rollout_is_threshold", upper, _RC + "rollout_is_threshold", "the truncation bound of the weights (verl's default 2.0 when not given)")
    elif value["rollout_is"] is None:
        ctx.set("algorithm.rollout_is_threshold", upper, _RC + "rollout_is_threshold", f"{value['rollout_is_threshold']}: its upper bound; with rollout_is null there are no weights for the lower one to zero")
    else:
        why = f"{value['rollout_is_threshold']}: IcePop, the weights outside [{lower}, {upper}] set to 0"
        ctx.set("algorithm.rollout_is_threshold", upper, _RC + "rollout_is_threshold", why)
        ctx.set("algorithm.rollout_is_threshold_lower", lower, _RC + "rollout_is_threshold", "")
        ctx.set("algorithm.rollout_is_mode", "zero", _RC + "rollout_is_threshold", "")
    if value["rollout_is"] is not None:
        ctx.set("algorithm.rollout_is", True, _RC + "rollout_is", f"{value['rollout_is']}: weights at that level multiply the policy loss")
        ctx.set("algorithm.rollout_is_level", value["rollout_is"], _RC + "rollout_is", "")
    elif _RC + "rollout_is" in present:
        ctx.drop(_RC + "rollout_is", "null: no weights (metrics and any rejection only)")


def _is_bounds(ctx: Any, spec: Any) -> tuple[float, float | None] | None:
    """verl's rollout_is_threshold as (upper, lower): a number U truncates at U; verl 0.10 also takes
    "L_U" (IcePop: weights outside [L, U] set to 0). None once refused."""
    key = _RC + "rollout_is_threshold"
    try:
        upper, lower = is_threshold_spec(spec)
    except ValueError as err:
        ctx.refuse(key, str(err), "algorithm.rollout_is_threshold", spec)
        return None
    if lower is not None and release() == "0.8":
        ctx.refuse(key, f"{spec!r}: verl 0.8 reads a number here and stops on a string (the 'L_U' bounds of IcePop are verl 0.10's): "
                        "give one number, or run the line as verl 0.10", "algorithm.rollout_is_threshold", spec)
        return None
    return upper, lower


_MICRO_HOW = "a global count of responses: divided by the worker processes (trainer.nnodes x trainer.n_gpus_per_node; one process without them), as verl's workers do"
# Keys the handlers translate (docs/config-mapping.md reads this table: posttrain.config.tables).
RULES: dict[str, Rule] = {
    **{key: Rule(native, _MICRO_HOW, 8) for key, native in _GLOBAL_MICRO.items()},
    "ray_kwargs.ray_init.num_cpus": Rule("cluster.ray_num_cpus", "across nodes (trainer.nnodes > 1, where posttrain starts its workers with Ray); dropped on one node, whose workers are local subprocesses", 8, (("trainer.nnodes", 2),)),
    "ray_kwargs.timeline_json_file": Rule("cluster.ray_timeline_file", "across nodes (trainer.nnodes > 1, where posttrain starts its workers with Ray); dropped on one node, whose workers are local subprocesses", "timeline.json", (("trainer.nnodes", 2),)),
    "critic.enable": Rule(None, "true with adv_estimator gae and false with another estimator are dropped (posttrain decides from the estimator); the other two combinations are refused", True, (("algorithm.adv_estimator", "gae"),)),
    **{f"{prefix}.rollout_n": Rule(None, "verl's copy of actor_rollout_ref.rollout.n: dropped at that value, refused at another", 1)
       for prefix in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")},
    "actor_rollout_ref.rollout.nnodes": Rule(None, "0 (the trainer's devices) dropped; a standalone rollout pool is refused: place engines with cluster.device_mapping.rollout", 0),
    "actor_rollout_ref.rollout.n_gpus_per_node": Rule(None, "read only with rollout.nnodes > 0: dropped at 0, refused with a pool", 8),
    "actor_rollout_ref.rollout.seed": Rule("rollout.seed", "the engine's sampler seed; verl's default (42) is dropped, posttrain then seeding the engine from trainer.seed", 7),
    _PATCH: Rule(None, "read by verl only in its overlong-prompt filter: dropped where that is off or the value is the model's image processor's patch size (posttrain's), refused where the model's preprocessor_config.json says another", 16, (("data.filter_overlong_prompts", True),)),
    "trainer.remove_previous_ckpt_in_save": Rule("trainer.max_actor_ckpt_to_keep, trainer.max_critic_ckpt_to_keep", "true keeps only the newest checkpoint of each role (both set to 1); false leaves them", True),
    _RC + "rollout_is": Rule("algorithm.rollout_is, algorithm.rollout_is_level", "token or sequence: rollout_is true at that level (truncated weights); null: no weights", "sequence"),
    _RC + "rollout_is_threshold": Rule("algorithm.rollout_is_threshold", "the truncation bound of the weights; at verl's default (2.0) with rollout_is and rollout_rs null the block is off; verl 0.10's 'L_U' with rollout_is set is IcePop: upper bound U, algorithm.rollout_is_threshold_lower L, rollout_is_mode zero (weights outside [L, U] set to 0)", 3.0),
    _RC + "bypass_mode": Rule("actor.reuse_rollout_logprobs, actor.policy_loss.loss_mode", "true: the rollout's log-probs are the old ones (always) and the policy loss is bypass_mode, with the block's settings as its loss_args", True),
    _RC + "loss_type": Rule("actor.policy_loss.loss_args.loss_type", "the loss of bypass mode (ppo_clip or reinforce); only read with bypass_mode: true", "reinforce", ((_RC + "bypass_mode", True),)),
    **{f"{_A}.{name}": Rule(f"actor.policy_loss.loss_args.{name}", "the SAPO gate's temperature (read with policy_loss.loss_mode sapo only; dropped otherwise)", value,
                            ((f"{_A}.policy_loss.loss_mode", "sapo"),)) for name, value in (("tau_pos", 1.1), ("tau_neg", 1.2))},
    **{f"{prefix}.fsdp_config.{name}": Rule(f"{role}.{name}", "verl 0.10's engine section of the role: the role's own key (a role-level ulysses_sequence_parallel_size > 1 is copied over it)", sample)
       for prefix, role in (("actor_rollout_ref.actor", "actor"), ("actor_rollout_ref.ref", "ref"))
       for name, sample in (("ulysses_sequence_parallel_size", 1), ("entropy_checkpointing", True), ("entropy_from_logits_with_chunking", True))},
}

RULES.update(verl_megatron.RULES)  # verl's Megatron trainer: its strategy and megatron sections
RULES.update(verl_veomni.RULES)  # verl 0.10's VeOmni engine: its veomni sections and optimizer
RULES.update(verl_turbo.RULES)  # verl 0.10's FSDP-Turbo engine: its turbo_config sections
RULES.update(verl_reward.RULES)  # verl's reward model, on its legacy worker or its reward loop
RULES.update(verl_nsys.RULES)  # nsys discrete: a capture range per phase
RULES.update(verl_sft.RULES)  # verl's SFT trainer: its optimizer, loss and columns
RULES.update(verl_distill.RULES)  # verl 0.10's on-policy distillation
RULES.update(verl_loss_scale.RULES)  # the legacy workers' micro-batch loss scale

HANDLERS = [*verl_distill.HANDLERS, *verl_loss_scale.HANDLERS, *verl_megatron.HANDLERS, *verl_veomni.HANDLERS, *verl_turbo.HANDLERS, machine_devices, blank_device_counts, null_profile_steps, image_patch, ray_cluster, critic_switch, rollout_seed, interpolated_copies, global_micro_batches, keep_one_checkpoint, *verl_sft.HANDLERS, compile_default, rollout_correction, engine_config, sapo, *verl_reward.HANDLERS, *verl_code.HANDLERS, *verl_nsys.HANDLERS]


def is_default(key: str, value: Any) -> bool:
    """Whether ``value`` is verl's own default for ``key`` (a leaf or a whole mapping): a file that
    spells out verl's defaults (its complete ppo_trainer.yaml) loads as the launch line without them does."""
    return any(node == value and type(node) is type(value) for node in defaults_of(key))


def value_hook(ctx: Any, key: str, value: Any, native: str) -> Any:
    """An empty value (``use_kl_loss=${use_kl_loss}`` with the variable unset) of a key whose verl
    default is true or false is false: verl builds its role configs with Hydra's instantiate, which
    checks no types, and tests them for truth, so ``''`` reads as false there."""
    if value == "" and any(isinstance(node, bool) for node in defaults_of(key)):
        return False
    return common_value_hook(ctx, key, value, native)


_ANY_VALUE = {
    "actor_rollout_ref.actor.fsdp_config.use_orig_params": "an FSDP1 option; FSDP2 (posttrain's) always keeps the original parameters",
    "actor_rollout_ref.actor.checkpoint.strict": "how strictly verl's Megatron-to-Hugging-Face weight export checks the names it writes; "
                                                 "posttrain saves the Hugging Face model's own state dict",
    # verl 0.10's launch scripts start Ray's workers through `uv run` on verl's own package extras
    "ray_kwargs.ray_init.runtime_env.py_executable": "the command verl's Ray workers start Python with (verl's uv environment); "
                                                     "posttrain's worker processes run the Python that runs posttrain",
    # verl 0.10's Hydra group choosing the training engine: posttrain.config.dialects.verl_launch reads the
    # line with that engine's tree, whose sections translate onto posttrain's FSDP2
    "model_engine": "verl 0.10's choice of training engine: the line is read with that engine's trainer config "
                    "(dp: FSDP; megatron and veomni: their sections translate onto posttrain's FSDP2)",
}


# Fields of verl's config dataclasses that its YAML tree leaves out (a launch line adds them with '+'),
# at the values that change nothing: their dataclass default.
_FIELD_DEFAULTS = {"actor_rollout_ref.rollout.moe_tensor_parallel_size": 1}


def ignorable(ctx: Any, key: str, value: Any) -> str | None:
    if key in _ANY_VALUE:
        return _ANY_VALUE[key]
    if key in _FIELD_DEFAULTS and value == _FIELD_DEFAULTS[key] and not isinstance(value, bool):
        return f"{value!r}, the default of verl's config dataclass: nothing to do"
    if key == "actor_rollout_ref.ref.use_torch_compile" and value == ctx.get("actor_rollout_ref.actor.use_torch_compile", True):
        return "the same as the actor's use_torch_compile (posttrain's reference runs the actor's forward)"
    return hydra_ignorable(ctx, key, value) or _profiler_ignorable(ctx, key, value)


def _profiler_ignorable(ctx: Any, key: str, value: Any) -> str | None:
    tool = ctx.get("global_profiler.tool")
    match = _TOOL_OPTIONS.search(key + ".")
    if match and match.group(2) != tool:
        return f"options of the {match.group(2)} profiler, and global_profiler.tool is {tool or 'null'}: not used"
    if key.startswith(_ROLLOUT) and value == ctx.get(_ACTOR + key[len(_ROLLOUT):]):
        return "the same as the actor's (posttrain's rollout is profiled with actor.profiler)"
    if key.endswith(".profiler.tool") and value in (None, tool):
        return "the same as global_profiler.tool (posttrain uses one tool for every role)"
    if key.endswith(".profiler.save_path") and value in (None, ctx.get("global_profiler.save_path")):
        return "the same as global_profiler.save_path (posttrain writes every role's traces under it)"
    return None
