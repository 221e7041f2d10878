"""Cross-field rules of the config: one small function per rule, each naming every key involved.

These run after every field on its own is valid (types, bounds). Batch-size divisibility is the
rule users of verl/ROLL/Trinity trip over most, so each message shows the arithmetic and lists
values that would work. A rule whose fields are not in the schema is skipped, so the rules work on
any schema that has the fields they read (and on toy schemas in tests).

The rules depend on ``algorithm.kind``. RL (the default) batches prompts × rollout.n responses into
mini-batches and micro-batches and may train a critic. SFT and DPO have no rollout, no mini-batch and
no critic: one step is ``data.train_batch_size`` sequences (DPO: pairs) split over the devices, and
each device's share into micro-batches of ``actor.ppo_micro_batch_size_per_gpu``; so only those rules
run for them, and the rollout/critic/PPO rules stay silent whatever those sections hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from posttrain.algorithms.registry import ADVANTAGE_ESTIMATORS, EstimatorNeeds, estimator_needs
from posttrain.config.access import (
    TRAINING_ROLES, device_lists, get_path, is_rl, placement_problem, reference_crew_devices, role_processes, training_kind,
    world_size,
)
from posttrain.config.checks_losses import (
    check_dpo_label_smoothing, check_dual_clip, check_gdpo, check_gmpo_agg, check_pf_ppo, check_rollout_correction, check_supervised_compile,
    check_supervised_loss_agg, check_supervised_loss_coefs, check_val_sampling,
)
from posttrain.config.checks_profiler import check_profiler
from posttrain.config.derive import longest_sequence
from posttrain.config.sections.buffer import priority_args
from posttrain.config.sections.actor import check_freeze_prefix, check_router_replay, check_save_contents
from posttrain.config.sections.algorithm import check_agentic_reward_norm, check_filter_groups, check_step_reward, check_token_filter
from posttrain.config.sections.data import check_domain_probs, check_query_key, check_row_choosers, check_val_file_keys, check_val_file_settings, check_row_templates
from posttrain.config.sections.model import check_kernel_flags
from posttrain.config.sections.auxiliary import check_auxiliary_models
from posttrain.config.sections.distill import check_distill
from posttrain.config.sections.explorer import check_explorer_timeouts, check_task_rewards_file
from posttrain.config.sections.reward import check_async_reward, check_overlong_buffer, check_reward_model, check_reward_workers, check_self_judge
from posttrain.config.sections.trainer import check_rollout_mock, check_save_strategy
from posttrain.config.sections.optim import check_optimizer_args
from posttrain.config.sections.ref import check_teachers
from posttrain.config.sections.topk_kl import check_topk_kl
from posttrain.config.sections.rollout import check_agent_kwargs, check_external, check_min_response_length, check_num_beams, check_prompt_length, check_trace


def check_device_mapping(cfg: Any) -> list[str]:
    """ROLL's device_mapping: the actor and critic on the same k devices (every trainer worker hosts
    them), the reference on those too or on devices of its own (a reference crew:
    `access.reference_crew_devices`), and the rollout engines on the same workers, on the first m of
    them, or on m devices of their own (a split placement: `access.rollout_placement`)."""
    lists = device_lists(cfg)
    if not lists:
        return []
    crew = reference_crew_devices(cfg)
    training = {role: ids for role, ids in lists.items() if role in TRAINING_ROLES and not (crew and role == "ref")}
    if len({tuple(ids) for ids in training.values()}) > 1:
        shown = "; ".join(f"{role} {ids}" for role, ids in training.items())
        ref_only = len({tuple(ids) for role, ids in training.items() if role != "ref"}) == 1
        return [
            f"cluster.device_mapping puts training roles on different devices ({shown}): " + (
                "the reference runs either on every trainer worker (give it the actor's list, or none) or as processes "
                "of its own (a reference crew) on devices apart from the actor's or on some of the actor's; a list that "
                "names some of the actor's devices and others is neither" if ref_only else
                "every trainer worker hosts the actor and the critic (the critic trains beside the actor), so give them "
                "the same device list (or leave the critic's empty)")
        ]
    nodes, gpus = get_path(cfg, "cluster.nnodes", 1), get_path(cfg, "cluster.n_gpus_per_node", 0)
    problem = placement_problem(next(iter(training.values()), None), lists.get("rollout"), nodes * gpus or None)
    if problem is None and crew is not None:
        problem = _reference_crew_problem(cfg, crew, lists.get("rollout"), nodes * gpus or None)
    return [f"cluster.device_mapping: {problem}"] if problem else []


def _reference_crew_problem(cfg: Any, crew: list[int], rollout: list[int] | None, devices: int | None) -> str | None:
    """Why a reference crew on `crew` cannot run, or None: its devices must be its own (one process
    each, none the engines'), within the cluster, for a config of one stage. It serves the reference
    and ref.teachers alike (ROLL's several teachers' device_mapping lands on the ref list)."""
    if len(set(crew)) < len(crew):
        return f"the reference's devices {crew} name a device twice (one reference process per device)"
    if rollout and set(rollout) & set(crew):
        return (f"the reference's devices {crew} share devices with the rollout's {rollout}: a reference crew needs devices "
                "apart from the engines'")
    if devices and max(crew) >= devices:
        return f"the reference's device {max(crew)} is past the {devices} of cluster.nnodes × cluster.n_gpus_per_node"
    if get_path(cfg, "stages", None):
        return ("the reference on devices of its own (a reference crew) serves one RL stage; a config with stages runs the "
                "reference on the trainer workers: give cluster.device_mapping.ref the actor's list (or none)")
    return None


@dataclass(frozen=True)
class RoleNeeds:
    """The roles an RL stage runs besides the actor and the rollout engine."""

    critic: bool = False  # a value model trained alongside the actor
    reference: bool = False  # a frozen copy of the initial policy
    greedy_baseline: bool = False  # one greedy rollout per prompt, scored, each step


def role_needs(cfg: Any) -> RoleNeeds:
    """Which roles the config asks for: what its advantage estimator declares in the registry
    (`posttrain.algorithms.estimator_needs`, so an alias such as `ppo` builds what `gae` builds),
    plus a reference policy for the KL terms (`actor.use_kl_loss`, `algorithm.use_kl_in_reward`,
    `actor.topk_kl`).
    SFT and DPO stages have none of these. An unknown estimator name needs nothing here; the RL
    stage refuses it, with the list of valid names, before it loads a model."""
    if not is_rl(cfg):
        return RoleNeeds()
    name = get_path(cfg, "algorithm.adv_estimator", None)
    est = estimator_needs(name) if name in ADVANTAGE_ESTIMATORS else EstimatorNeeds()
    kl_terms = bool(get_path(cfg, "actor.use_kl_loss", False) or get_path(cfg, "algorithm.use_kl_in_reward", False)
                    or get_path(cfg, "actor.topk_kl.k", 0))  # the top-k term's teacher is the reference
    # ref.teachers score the distillation estimator's rows themselves: the reference then serves only KL terms
    est_ref = est.reference and not get_path(cfg, "ref.teachers", None)
    return RoleNeeds(critic=est.values, reference=est_ref or kl_terms, greedy_baseline=est.greedy_baseline)


def _divisors(n: int) -> str:
    found = [d for d in range(1, n + 1) if n % d == 0]
    shown = found if len(found) <= 10 else found[:5] + ["..."] + found[-3:]
    return ", ".join(str(d) for d in shown)


def _data_parallel(cfg: Any, role: str) -> int:
    """Ranks that share a role's batch: every device, or with Ulysses sequence parallelism the
    devices / the role's sp size (each sp group takes the same rows), as verl divides."""
    world = world_size(cfg)
    sp = get_path(cfg, f"{role}.ulysses_sequence_parallel_size", 1) or 1
    if sp == 1 or world % sp:  # a size that does not divide is check_sequence_parallel's to report
        return world
    return world // sp


def _mini_batch_rules(cfg: Any, role: str) -> list[str]:
    """The batch rules of one trained role (``actor`` or ``critic``), verl semantics: the step's
    prompts split into mini-batches of ``ppo_mini_batch_size`` prompts (× rollout.n responses); a
    device's share of a mini-batch splits into micro-batches of ``ppo_micro_batch_size_per_gpu``
    responses (unless packing by tokens).

    verl also requires each mini-batch to split evenly over its data-parallel ranks (it cuts the batch
    into equal chunks). posttrain does not: ranks take shares that differ by at most one response (or
    balance tokens, trainer.balance_batch), and each micro-batch's loss is weighted by its share of the
    whole mini-batch's normaliser (posttrain.workers.microbatch), so the gradient is the mini-batch's
    whatever the split. That matters for Megatron files, whose data-parallel size is devices / (TP x
    PP x CP) while posttrain's FSDP2 ranks are all the devices."""
    prompts = get_path(cfg, "data.train_batch_size", None)
    mini = get_path(cfg, f"{role}.ppo_mini_batch_size", None)
    n = get_path(cfg, "rollout.n", 1)
    if prompts is None or mini is None:
        return []
    if mini > prompts:
        return [
            f"{role}.ppo_mini_batch_size ({mini}) is larger than data.train_batch_size ({prompts}): a "
            f"mini-batch is a share of one step's prompts; use at most {prompts}"
        ]
    if prompts % mini:
        return [
            f"data.train_batch_size ({prompts}) is not divisible by {role}.ppo_mini_batch_size ({mini}): "
            f"each step's prompts are split into equal mini-batches; use one of {_divisors(prompts)}"
        ]
    world = _data_parallel(cfg, role)
    responses = mini * n
    micro = get_path(cfg, f"{role}.ppo_micro_batch_size_per_gpu", None)
    if micro is None or get_path(cfg, f"{role}.use_dynamic_bsz", False) or responses % world:
        return []  # uneven shares: a rank's last micro-batch is smaller, which the weighting allows
    per_device = responses // world
    if micro < per_device and per_device % micro:  # a larger micro-batch is the whole share in one pass
        device_word = "data-parallel groups" if world != world_size(cfg) else "device" if world == 1 else "devices"
        return [
            f"{role}.ppo_micro_batch_size_per_gpu ({micro}) does not divide the per-device mini-batch of "
            f"{per_device} responses ({role}.ppo_mini_batch_size {mini} × rollout.n {n} / {world} "
            f"{device_word}); use one of {_divisors(per_device)}"
        ]
    return []


def _sequence_batch_rules(cfg: Any) -> list[str]:
    """SFT/DPO: each device's share of the step's data.train_batch_size sequences (pairs) splits into
    micro-batches of ``actor.ppo_micro_batch_size_per_gpu`` (unless packing by tokens), as verl's SFT
    trainer asserts. verl also asserts that the batch splits evenly over the devices; posttrain
    weights each micro-batch by its share of the whole batch, so uneven shares give the same step."""
    batch = get_path(cfg, "data.train_batch_size", None)
    micro = get_path(cfg, "actor.ppo_micro_batch_size_per_gpu", None)
    if batch is None:
        return []
    unit = "pairs" if training_kind(cfg) == "dpo" else "sequences"
    world = _data_parallel(cfg, "actor")
    if micro is None or get_path(cfg, "actor.use_dynamic_bsz", False) or batch % world:
        return []
    per_device = batch // world
    if micro < per_device and per_device % micro:  # a larger micro-batch is the whole share in one pass
        device_word = "data-parallel groups" if world != world_size(cfg) else "device" if world == 1 else "devices"
        return [
            f"actor.ppo_micro_batch_size_per_gpu ({micro}) does not divide the per-device batch of "
            f"{per_device} {unit} (data.train_batch_size {batch} / {world} {device_word}, algorithm.kind "
            f"{training_kind(cfg)}); use one of {_divisors(per_device)}"
        ]
    return []


def check_actor_batches(cfg: Any) -> list[str]:
    return _mini_batch_rules(cfg, "actor") if is_rl(cfg) else _sequence_batch_rules(cfg)


def check_critic_batches(cfg: Any) -> list[str]:
    return _mini_batch_rules(cfg, "critic") if role_needs(cfg).critic else []


def check_dynamic_bsz_partition(cfg: Any) -> list[str]:
    """A cut of the dynamic batch size acts on a token-budget update only."""
    problems = []
    for role in ("actor", "critic"):
        if get_path(cfg, f"{role}.dynamic_bsz_partition", "pack") == "pack":
            continue
        if not get_path(cfg, f"{role}.use_dynamic_bsz", False):
            problems.append(f"{role}.dynamic_bsz_partition balanced: cuts the {role}'s micro-batches by a token budget, which "
                            f"{role}.use_dynamic_bsz false does not use (fixed micro-batch sizes); set use_dynamic_bsz true or leave it at pack")
    return problems


def check_token_budget(cfg: Any) -> list[str]:
    """Packing by tokens cannot split one sequence, so the budget must hold the longest one: prompt +
    response for RL, data.max_length for SFT, both sides of a pair (2 × data.max_length) for DPO.
    An RL budget counts one device's tokens: under Ulysses a sequence is split over the role's sp
    ranks, so it fits when budget × sp holds it (verl's dynamic batching asserts the same)."""
    if not is_rl(cfg):
        return _sequence_token_budget(cfg)
    longest = longest_sequence(cfg)
    actor_dynamic = get_path(cfg, "actor.use_dynamic_bsz", False)
    critic_dynamic = role_needs(cfg).critic and get_path(cfg, "critic.use_dynamic_bsz", False)
    actor_sp, critic_sp = get_path(cfg, "actor.ulysses_sequence_parallel_size", 1), get_path(cfg, "critic.ulysses_sequence_parallel_size", 1)
    budgets = [  # (key, whether that pass packs by tokens, the role's Ulysses size)
        ("actor.ppo_max_token_len_per_gpu", actor_dynamic, actor_sp),
        ("critic.ppo_max_token_len_per_gpu", critic_dynamic, critic_sp),
        ("critic.forward_max_token_len_per_gpu", critic_dynamic, critic_sp),
    ]
    for section in ("rollout", "ref"):  # the no-grad log-prob passes: null follows the actor
        dynamic = get_path(cfg, f"{section}.log_prob_use_dynamic_bsz", None)
        sp = (get_path(cfg, "ref.ulysses_sequence_parallel_size", None) if section == "ref" else None) or actor_sp
        budgets.append((f"{section}.log_prob_max_token_len_per_gpu", actor_dynamic if dynamic is None else dynamic, sp))
    problems = []
    for key, dynamic, sp in budgets:
        budget = get_path(cfg, key, None)
        if dynamic and budget is not None and budget * sp < longest:
            split = f" × its role's ulysses_sequence_parallel_size {sp}" if sp > 1 else ""
            both = get_path(cfg, "data.max_prompt_length", 0) + get_path(cfg, "data.max_response_length", 0)
            what = (f"data.max_prompt_length {get_path(cfg, 'data.max_prompt_length')} + "
                    f"data.max_response_length {get_path(cfg, 'data.max_response_length')} = {longest}") if longest == both else (
                    f"model.max_model_len {longest}")
            problems.append(f"{key} ({budget}){split} is smaller than one full sequence ({what}); raise it to at least {-(-longest // sp)}")
    return problems


def _sequence_token_budget(cfg: Any) -> list[str]:
    budget = get_path(cfg, "actor.ppo_max_token_len_per_gpu", None)
    length = get_path(cfg, "data.max_length", 0)
    dpo = training_kind(cfg) == "dpo"
    longest = 2 * length if dpo else length
    if not get_path(cfg, "actor.use_dynamic_bsz", False) or budget is None or budget >= longest:
        return []
    what = f"one pair (chosen + rejected, 2 × data.max_length {length} = {longest})" if dpo else f"one sequence (data.max_length {length})"
    return [f"actor.ppo_max_token_len_per_gpu ({budget}) is smaller than {what}; raise it to at least {longest}"]


def check_sharded_checkpoints(cfg: Any) -> list[str]:
    """With several worker processes a checkpoint is sharded (DCP), not a Hugging Face directory,
    so it cannot stand in for the final model as save_hf_checkpoint=never asks."""
    if world_size(cfg) > 1 and get_path(cfg, "trainer.save_hf_checkpoint", "last") == "never":
        return [
            f"trainer.save_hf_checkpoint=never keeps the final policy only in the last checkpoint, but with "
            f"{world_size(cfg)} worker processes checkpoints are sharded (one file per worker), not a Hugging Face "
            "directory; use save_hf_checkpoint: last (or always)"
        ]
    return []


# LoRA options with their defaults: read only when the section's LoRA is on.
_LORA_DEFAULTS = {"lora_alpha": 16, "target_modules": "all-linear", "exclude_modules": None, "autocast_adapter_dtype": True}


def check_lora(cfg: Any) -> list[str]:
    """LoRA options need LoRA on (lora_rank > 0 or lora_adapter_path); and a LoRA run's checkpoints
    hold only the adapter, which cannot stand in for the final model as save_hf_checkpoint=never asks."""
    problems = []
    for section in ("model", "critic.model"):
        on = get_path(cfg, f"{section}.lora_rank", 0) > 0 or get_path(cfg, f"{section}.lora_adapter_path", None) is not None
        changed = [f"{section}.{k}" for k, d in _LORA_DEFAULTS.items() if get_path(cfg, f"{section}.{k}", d) != d]
        if changed and not on:
            problems.append(f"{', '.join(changed)}: read only with LoRA on, and {section}.lora_rank is 0; set it > 0 or remove them")
        if on and section == "model" and get_path(cfg, "trainer.save_hf_checkpoint", "last") == "never":
            problems.append(
                "trainer.save_hf_checkpoint=never keeps the final policy only in the last checkpoint, but a LoRA run's "
                "checkpoints hold only the adapter, not a model; use save_hf_checkpoint: last (final_model/ is then the "
                "merged model, with the adapter in final_model/adapter/)"
            )
    return problems


# Sharding keys of a role's fsdp_config with their defaults: they only act on a sharded model.
SHARDING_DEFAULTS = {
    "reshard_after_forward": True, "forward_prefetch": False, "min_num_params": 0, "transformer_layer_cls_to_wrap": [],
    "mixed_precision.reduce_dtype": "fp32",
}


def check_sharding(cfg: Any) -> list[str]:
    """Sharding keys need several worker processes to act on (refused at other values with one), and
    fsdp_size must divide the worker processes."""
    problems = []
    world = max(role_processes(cfg, role) for role in ("actor", "ref"))  # the reference may run in a crew of its own
    if world > 1 and get_path(cfg, "actor.use_torch_compile", False):
        problems.append(
            f"actor.use_torch_compile with {world} worker processes: the compiled lean forward reads each layer's "
            "parameters directly, and a sharded model keeps them in shards; set it to false (or run one process)"
        )
    for role in ("actor", "ref", "critic"):
        fsdp = get_path(cfg, f"{role}.fsdp_config", None)
        if fsdp is None:
            continue
        world = role_processes(cfg, role)
        size = get_path(fsdp, "fsdp_size", -1)
        if world > 1 and size not in (-1, world) and (size < 1 or world % size):
            problems.append(f"{role}.fsdp_config.fsdp_size={size} does not divide the {world} worker processes; use -1 (shard over all) or a divisor of {world}")
        if world > 1:
            continue
        changed = [k for k, default in SHARDING_DEFAULTS.items() if get_path(fsdp, k, default) != default]
        changed += ["fsdp_size"] if size not in (-1, 1) else []
        if changed:
            problems.append(
                f"{', '.join(f'{role}.fsdp_config.{k}' for k in changed)}: only act on a model sharded over several worker "
                "processes, and this run has one (cluster.n_gpus_per_node 0 or 1); remove them or set cluster.n_gpus_per_node >= 2"
            )
    return problems


def check_decoupled(cfg: Any) -> list[str]:
    """What the explorer/trainer split (trainer.mode, synchronizer, experience buffer) cannot do."""
    mode = get_path(cfg, "trainer.mode", "both")
    problems = []
    style = get_path(cfg, "synchronizer.sync_style", "fixed")
    dynamic = style != "fixed"
    if dynamic and get_path(cfg, "synchronizer.sync_offset", 0) > 0:
        problems.append(
            f"synchronizer.sync_offset={get_path(cfg, 'synchronizer.sync_offset', 0)} lets the explorer start that many batches ahead on the "
            f"fixed schedule; with sync_style={style} the explorer syncs when a side asks, and sync_offset is not read (as in "
            "Trinity-RFT); remove it, or use sync_style fixed"
        )
    eb = "buffer.trainer_input.experience_buffer"
    capacity, prompts = get_path(cfg, f"{eb}.capacity", 10000), get_path(cfg, "data.train_batch_size", 1)
    if capacity < prompts and not get_path(cfg, f"{eb}.replay_buffer.enable", False):
        problems.append(f"{eb}.capacity ({capacity} prompt groups) cannot hold one batch of data.train_batch_size ({prompts}) prompts; raise it to at least {prompts}")
    try:
        priority_args(get_path(cfg, f"{eb}.replay_buffer.priority_fn", "linear_decay"), dict(get_path(cfg, f"{eb}.replay_buffer.priority_fn_args", {})))
    except ValueError as err:
        problems.append(f"{eb}.replay_buffer: {err}")
    if mode == "explore" and is_rl(cfg) and world_size(cfg) > 1 and "rollout" not in device_lists(cfg):
        problems.append(
            f"trainer.mode=explore runs the explorer alone, one process per engine on cluster.device_mapping.rollout's devices; "
            f"the {world_size(cfg)} worker processes of cluster.* are trainer ranks (trainer.mode both and train). Give the "
            "explorer's devices (cluster.device_mapping.rollout: [0, 1] for two engines), or set cluster.n_gpus_per_node to 0 or 1"
        )
    return problems


def check_sequence_parallel(cfg: Any) -> list[str]:
    """Ulysses sizes divide the worker processes (they form a dp x sp grid), and a DPO stage's
    reference runs in the policy's loop, so it splits its sequences as the policy does."""
    world, needs, crew = world_size(cfg), role_needs(cfg), reference_crew_devices(cfg)
    actor = get_path(cfg, "actor.ulysses_sequence_parallel_size", 1)
    ref = get_path(cfg, "ref.ulysses_sequence_parallel_size", None)
    sizes = {"actor": actor}
    if needs.reference:
        sizes["ref"] = ref or actor
    if needs.critic:
        sizes["critic"] = get_path(cfg, "critic.ulysses_sequence_parallel_size", 1)
    problems = [
        f"{role}.ulysses_sequence_parallel_size={sp} does not divide the {world} worker process(es) (cluster.nnodes "
        f"{get_path(cfg, 'cluster.nnodes', 1)} × cluster.n_gpus_per_node {get_path(cfg, 'cluster.n_gpus_per_node', 0)}): "
        f"each sequence is split over {sp} processes; use a divisor of {world}, or a multiple of {sp} worker processes"
        for role, sp in sizes.items() if sp > 1 and not (role == "ref" and crew) and world % sp
    ]
    sp = sizes.get("ref", 1)
    if crew and sp > 1 and len(crew) % sp:  # the reference on devices of its own splits over its crew
        problems.append(f"ref.ulysses_sequence_parallel_size={sp} does not divide the reference crew's {len(crew)} process(es) "
                        f"(cluster.device_mapping.ref): each sequence is split over {sp} processes; use a divisor of "
                        f"{len(crew)}, or give the reference a multiple of {sp} devices")
    if training_kind(cfg) == "dpo" and ref not in (None, actor):
        problems.append(
            f"ref.ulysses_sequence_parallel_size={ref} differs from actor.ulysses_sequence_parallel_size={actor} in a DPO "
            "stage: the reference's forwards run in the policy's micro-batch loop, split as the policy's; set it to null"
        )
    return problems


CHECKS: list[Callable[[Any], list[str]]] = [
    check_decoupled,
    check_sequence_parallel,
    check_device_mapping,
    check_sharded_checkpoints,
    check_sharding,
    check_lora,
    check_freeze_prefix,
    check_router_replay,
    check_actor_batches,
    check_critic_batches,
    check_token_budget,
    check_dual_clip,
    check_val_sampling,
    check_dpo_label_smoothing,
    check_supervised_loss_agg,
    check_gmpo_agg,
    check_supervised_compile,
    check_supervised_loss_coefs,
    check_kernel_flags,
    check_rollout_correction,
    check_pf_ppo,
    check_gdpo,
    check_profiler,
    check_reward_workers,
    check_domain_probs,
    check_teachers,
    check_dynamic_bsz_partition,
    check_topk_kl,
    check_row_choosers,
    check_row_templates,
    check_query_key,
    check_val_file_keys,
    check_val_file_settings,
    check_prompt_length,
    check_min_response_length,
    check_num_beams,
    check_external,
    check_trace,
    check_agent_kwargs,
    check_save_contents,
    check_save_strategy,
    check_rollout_mock,
    check_optimizer_args,
    check_agentic_reward_norm,
    check_step_reward,
    check_filter_groups,
    check_token_filter,
    check_distill,
    check_overlong_buffer,
    check_self_judge,
    check_reward_model,
    check_async_reward,
    check_auxiliary_models,
    check_explorer_timeouts,
    check_task_rewards_file,
]


def run_checks(cfg: Any) -> list[str]:
    """Every cross-field problem of a structurally valid config (empty when it is consistent)."""
    return [problem for check in CHECKS for problem in check(cfg)]
