"""ROLL (alibaba/ROLL) rules that are more than one key to one key.

Source of the semantics: ROLL's configuration guide and its published example configs (a copy of
some lives in tests/config/reference_configs).

- Reward normalisation: three generations of keys become ``algorithm.reward_norm_mean/std``
  through `posttrain.config.sections.algorithm.roll_reward_norm`.
- Optimizer-step size: ROLL gives it as Hugging Face ``per_device_train_batch_size x
  gradient_accumulation_steps`` on each of the role's devices, in responses; posttrain's
  ``ppo_mini_batch_size`` counts prompts over all devices, so it is that product times the number of
  devices, divided by the responses per prompt (refused when that is not a whole number).
- ``hf_infer`` (plain Hugging Face inference) is posttrain's only engine: ``hf``.
- Per-role settings posttrain takes from the policy (reference dtype, attention kernel) are dropped
  when they agree with the policy's, refused when they differ; the other roles' ``data_args.template``
  is read nowhere in ROLL (sections.data.TEMPLATE_UNREAD), and a role's attention kernel not where
  ROLL builds no Hugging Face model (`roll_roles`).
- ``rewards``: each reward worker becomes ``reward.workers.<name>`` with ROLL's class path turned
  into posttrain's scorer (`reward_workers`); its model/template/placement keys are dropped for a
  rule worker (it runs no model), an LLM judge's ``data_args.template`` names the chat template of
  its prompt, and a worker posttrain has no scorer for is refused whole. The
  samples' tag column is ROLL's default ``tag`` unless ``actor_train.data_args.tag`` names another
  (``data_source`` in a file with a vision detection worker: `roll_detection`).
- Named chat templates (``global_template`` over ``actor_train.data_args.template``) are
  ``data.chat_template_name``: posttrain.data.templates writes ROLL's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects import machine, roll_defaults
from posttrain.config.dialects.roll_agentic import RULES as AGENTIC_RULES, agentic_thinking, env_manager_sampling, episode_lengths, group_seeded_envs
from posttrain.config.dialects import roll_async, roll_budgets, roll_correction, roll_download, roll_envs, roll_judge, roll_lengths, roll_outputs
from posttrain.config.dialects import roll_step_envs
from posttrain.config.dialects import roll_detection, roll_packing, roll_pg, roll_profiler, roll_roles, roll_strategy
from posttrain.config.dialects.lora import roll_lora
from posttrain.config.dialects.index import native_paths
from posttrain.config.dialects.source import hydra_ignorable
from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule
from posttrain.config.dialects.values import roll_nodes
from posttrain.config.dialects.values import value_hook as common_value_hook
from posttrain.config.sections.algorithm import roll_reward_norm
from posttrain.config.sections.reward import (
    JUDGE, JUDGE_KEYS, REMOTE_WORKER, REWARD_SYSTEM, ROLL_WORKER_CLASSES, ROLL_WORKER_REFUSED, ROLL_WORKER_TODO,
)

VIDEO_R1 = "video_r1"  # the scorer of ROLL's VideoR1RewardWorker

_NORM_KEYS = ("norm_mean_type", "norm_std_type", "reward_norm", "reward_shift", "reward_scale", "use_reward_scaling", "use_reward_norm")
# Keys that change nothing when they hold one of these values.
_HARMLESS_VALUES = {
    "checkpoint_config.type": ("file_system",),
    "validation.generating_args.num_beams": (1,),
    "actor_infer.strategy_args.strategy_name": ("hf_infer",),
    "ipo": (False,),
    "importance_sampling": ("token",),  # ROLL's default: the per-token ratio, as posttrain's
    **{f"{m}.worker_cls": ("roll.pipeline.agentic.environment_worker.EnvironmentWorker",) for m in ("train_env_manager", "val_env_manager")},
    "skip_mock_system_prompt": (True,),  # the chat template as it is, as posttrain renders turns
    # the micro-batch losses multiplied back by their count: the mini-batch loss's gradient, as posttrain's
    **{f"{role}.apply_loss_scale": (True,) for role in ("actor_train", "critic")},
}
# Per-role keys posttrain takes from another key: dropped when equal to it.
_SAME_AS = {
    "reference.model_args.dtype": "actor_train.model_args.dtype",
    "reference.model_args.attn_implementation": "actor_train.model_args.attn_implementation",
    "reference.model_args.model_type": "actor_train.model_args.model_type",
    "reward_pretrain": "pretrain",
    "validation.generating_args.max_new_tokens": "actor_infer.generating_args.max_new_tokens",
    "actor_infer.model_args.attn_implementation": "actor_train.model_args.attn_implementation",
    "reference.model_args.attn_implementation": "actor_train.model_args.attn_implementation",
    "actor_infer.model_args.model_name_or_path": "pretrain",
    "reference.model_args.model_name_or_path": "pretrain",
    "validation.data_args.dataset_dir": "actor_train.data_args.dataset_dir",
    "validation.data_args.preprocessing_num_workers": "actor_train.data_args.preprocessing_num_workers",
}
def value_hook(ctx: Context, key: str, value: Any, native: str) -> Any:
    if native == "rollout.name" and value == "hf_infer":
        return "hf"
    if key.endswith((".max_tokens_per_microbatch_in_train", ".max_tokens_per_microbatch_in_infer")):
        return roll_budgets.per_device_budget(ctx, key, value)
    return common_value_hook(ctx, key, value, native)


def ignorable(ctx: Context, key: str, value: Any) -> str | None:
    """Why a key with no posttrain field can be dropped without changing the run, else None."""
    hydra = hydra_ignorable(ctx, key, value)
    if hydra is not None:
        return hydra
    if value in _HARMLESS_VALUES.get(key, ()):
        return f"{value!r} is what posttrain does"
    unread = roll_roles.unread_attention(ctx, key)
    if unread is not None:
        return unread
    other = _SAME_AS.get(key)
    if other is not None and ctx.has(other) and ctx.get(other) == value:
        return f"posttrain uses {other}'s value for every role, and they agree"
    if key.endswith(".strategy_args.strategy_config") and value is None:
        return "empty strategy options"
    return _env_template(ctx, key) or roll_strategy.preset_library(ctx, key)


def _env_template(ctx: Context, key: str) -> str | None:
    """An entry of an included environment library (``gem_math.GSM8K`` of traj_envs_gem_math.yaml)
    that custom_envs does not use: a template, as traj_envs.yaml's custom_env is."""
    top = key.split(".")[0]
    library = ctx.get(top)
    if "." in key and top not in ("custom_envs", "train_env_manager", "val_env_manager") and isinstance(library, Mapping) and library \
            and all(isinstance(v, Mapping) and "env_type" in v for v in library.values()):
        return f"environment template library {top!r} of an included env file: entries custom_envs does not interpolate are not used"
    return None


def reward_norm(ctx: Context) -> None:
    present = {k: ctx.get(k) for k in _NORM_KEYS if ctx.has(k)}
    if not present:
        return
    ctx.consume(*present)
    # null and ROLL examples' string "None" both mean off (ROLL's normalisation keys are Optional)
    given = {k: v for k, v in present.items() if v is not None and not (isinstance(v, str) and v.lower() in ("none", "null", ""))}
    mean, std = roll_reward_norm(**given)
    note = "via roll_reward_norm(" + ", ".join(f"{k}={v!r}" for k, v in present.items()) + ")"
    origin = ", ".join(present)
    ctx.set("algorithm.reward_norm_mean", mean, origin, note)
    ctx.set("algorithm.reward_norm_std", std, origin, note)


def node_count(ctx: Context) -> None:
    """``num_nodes``: ROLL derives it from the workers' device_mapping (`values.roll_nodes`), so the
    node count posttrain gets (cluster.nnodes) is the derived one wherever a mapping names a device
    past the file's nodes."""
    nodes = roll_nodes(ctx)
    if nodes == (ctx.get("num_nodes", 1) or 1):
        return
    mapped = [f"{w}.device_mapping" for w in ("actor_train", "actor_infer", "reference", "critic") if ctx.has(f"{w}.device_mapping")]
    origin = "num_nodes" if ctx.has("num_nodes") else (mapped or ["num_gpus_per_node"])[0]
    ctx.consume("num_nodes")
    ctx.set("cluster.nnodes", nodes, origin,
            f"ROLL sets num_nodes from the highest device of its workers' device_mapping: {nodes} node(s) of num_gpus_per_node")


def machine_devices(ctx: Context) -> None:
    """No ``num_gpus_per_node`` (ROLL's default, 8, describes ROLL's machine; ROLL itself reads the
    platform's device count at start): this machine's GPUs per node, one process without any
    (posttrain.config.dialects.machine); the nodes follow from the device mappings (`node_count`)."""
    machine.size_to_machine(ctx, "num_gpus_per_node", "ROLL", 8)


def mini_batch(ctx: Context) -> None:
    """``gradient_accumulation_steps`` of actor_train/critic -> the role's ppo_mini_batch_size.

    ROLL's optimizer step takes per_device_train_batch_size x gradient_accumulation_steps responses on
    each data-parallel rank; the ranks are the role's devices divided by its model-parallel split
    (Megatron: TP x PP x CP; FSDP2: the Ulysses size), as ROLL's own batch arithmetic divides them.
    """
    for role, section in (("actor_train", "actor"), ("critic", "critic")):
        key = f"{role}.training_args.gradient_accumulation_steps"
        if not ctx.has(key) or key in ctx.handled:  # an SFT file's: its global batch (roll_sft)
            continue
        ctx.consume(key)
        steps = ctx.get(key)
        per_device = ctx.get(f"{role}.training_args.per_device_train_batch_size", 1)
        n = ctx.get("num_return_sequences_in_group", ctx.get("actor_infer.generating_args.num_return_sequences", 1))
        devices = roll_strategy.device_count(ctx, role)
        split, split_text = model_parallel(ctx, role)
        ints = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (steps, per_device, n, devices, split))
        if ints and devices % split:
            ctx.refuse(key, f"{devices} devices do not divide into data-parallel ranks of {split_text} = {split} devices each; ROLL refuses this layout too", f"{section}.ppo_mini_batch_size", steps)
            continue
        ranks = devices // split if ints else 0
        if not ints or (per_device * steps * ranks) % n:
            ctx.refuse(key, f"{per_device} x {steps} x {ranks} data-parallel ranks responses per optimizer step is not a whole number of prompts at {n} responses each; set {section}.ppo_mini_batch_size (prompts) yourself", f"{section}.ppo_mini_batch_size", steps)
            continue
        prompts = per_device * steps * ranks // n
        dp = f"{ranks} data-parallel ranks ({devices} devices / {split_text})" if split > 1 else f"{devices} devices"
        why = f"per_device_train_batch_size {per_device} x gradient_accumulation_steps {steps} x {dp} / {n} responses per prompt"
        roll_step_envs.turn_mini_batch(ctx, key, per_device * steps * ranks, why)
        roll_step_envs.schedule_horizon(ctx, role, section, per_device * steps, ranks)
        step = ctx.get("rollout_batch_size")
        if ctx.has("train_env_manager") and isinstance(step, int) and 0 < step < prompts:
            prompts, why = step, roll_budgets.padded_step(step, prompts, why)
        ctx.set(f"{section}.ppo_mini_batch_size", prompts, key, why)


def topr(ctx: Context) -> None:
    """``use_topr_loss: true`` is ROLL's TOPR policy loss, which splits responses by score:
    posttrain's ``topr_roll`` (posttrain.algorithms.policy_losses). ``use_topr_neg_loss_coef`` is a
    float field of ROLL's RLVR config, which its launcher loads with dacite's type checks: text there
    (a placeholder such as ``x_2``) stops ROLL before it starts, and is refused here saying so."""
    coef = "use_topr_neg_loss_coef"
    value = ctx.get(coef)
    if ctx.has(coef) and isinstance(value, str):
        ctx.consume(coef)
        ctx.refuse(coef, f"expected a number, got {value!r}: ROLL stops with a type error on it too (its field is a float, and its "
                         "launcher checks types when it builds the config): write the coefficient, e.g. 1.0", "actor.topr_negative_loss_coef", value)
    key = "use_topr_loss"
    if not ctx.has(key):
        return
    ctx.consume(key)
    value = ctx.get(key)
    if value is True:
        ctx.set("actor.policy_loss.loss_mode", "topr_roll", key, "ROLL's TOPR: negatives are the responses with score <= 0")
    elif value in (False, None):
        ctx.drop(key, "false: no TOPR loss (the policy loss is actor.policy_loss.loss_mode)")
    else:
        ctx.refuse(key, f"expected true or false, got {value!r}", None, value)


def model_parallel(ctx: Context, role: str) -> tuple[Any, str]:
    """How many devices one data-parallel rank of ``role`` spans under ROLL's strategy, and the text."""
    strategy = ctx.get(f"{role}.strategy_args.strategy_name")
    if strategy == "megatron_train":
        cfg = ctx.get(f"{role}.strategy_args.strategy_config") or {}
        parts = [(name, cfg.get(f"{key}_parallel_size", 1) if isinstance(cfg, Mapping) else 1)
                 for name, key in (("TP", "tensor_model"), ("PP", "pipeline_model"), ("CP", "context"))]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for _, v in parts):
            return 0, "its parallel sizes"
        return parts[0][1] * parts[1][1] * parts[2][1], " x ".join(f"{name} {v}" for name, v in parts)
    if strategy == "fsdp2_train":
        ulysses = ctx.get(f"{role}.model_args.ulysses_size") or 1
        return ulysses, f"Ulysses size {ulysses}"
    return 1, "1"


# Keys of a ROLL reward worker that a rule worker has no use for: it runs no model on no device.
_RULE_WORKER_UNUSED = {
    "model_args": "a rule worker reads the text the policy's tokenizer decoded: it loads no model or tokenizer",
    "data_args": "a rule worker has no chat template of its own",
    "strategy_args": "a rule worker runs no model",
    "device_mapping": "a rule worker runs in CPU processes (world_size), on no device",
    "infer_batch_size": "a rule worker scores one sample per call",
}
# The keys ROLL's rule workers read besides tag_included, by the posttrain scorer they become:
# reward_type and response_length_penalty_coef only matter to ROLL's CrossThinkQA worker.
_READS = {f"{k.rpartition('.')[0].rpartition('.')[2]}": () for k in ROLL_WORKER_CLASSES}
_READS["crossthinkqa_rule_reward_worker"] = ("reward_type", "response_length_penalty_coef")


def reward_workers(ctx: Context) -> None:
    """ROLL's ``rewards`` section -> ``reward.workers`` (module docstring)."""
    workers = ctx.get("rewards")
    reward_system(ctx, workers if isinstance(workers, Mapping) else {})
    if not isinstance(workers, Mapping) or not workers:
        return
    ctx.consume("rewards")
    translated = False
    for name, spec in workers.items():
        prefix = f"rewards.{name}"
        if not isinstance(spec, Mapping):
            ctx.refuse(prefix, f"expected a mapping of reward worker keys, got {spec!r}")
            continue
        why_not = _unbuildable(spec.get("worker_cls"))
        if why_not is not None:
            for key, value in spec.items():
                ctx.refuse(f"{prefix}.{key}", why_not, None, value)
            continue
        judge = ROLL_WORKER_CLASSES[spec["worker_cls"]] == JUDGE
        done = roll_judge.cluster(ctx, name, spec) if judge and spec.get("judge_model_type") == "cluster" else set()
        if judge and not done:  # ROLL's sampling defaults fill what the file leaves out
            roll_judge.generating_args(ctx, name, f"{prefix}.generating_args", spec.get("generating_args"), roll_judge.engine_of(spec))
            done = {"generating_args"}
        for key, value in spec.items():
            if key not in done:
                _worker_key(ctx, name, spec["worker_cls"], key, value)
        if ROLL_WORKER_CLASSES[spec["worker_cls"]] == roll_detection.DETECTION:
            roll_detection.worker(ctx, name, spec)
        if ROLL_WORKER_CLASSES[spec["worker_cls"]] == VIDEO_R1:
            _video_r1_worker(ctx, name)
        translated = True
    if translated and roll_detection.vision_pipeline(ctx, workers):
        ctx.set("data.reward_fn_key", "data_source", "rewards", roll_detection.VISION_TAGS)
    elif translated and not ctx.has("actor_train.data_args.tag") and ctx.get(_READER) != VIDEO_R1_READER:
        ctx.set("data.reward_fn_key", "tag", "actor_train.data_args.tag", "ROLL's default tag column (not written in the file)")


VIDEO_R1_READER = "roll.datasets.vlm_dataset_utils.video_r1_get_data_kwargs"
_READER = "actor_train.data_args.custom_data_kwargs_func"


def video_r1_reader(ctx: Context) -> None:
    """ROLL's Video-R1 data reader (custom_data_kwargs_func video_r1_get_data_kwargs) builds each
    prompt from the row's problem, problem_type and modality_type with Video-R1's templates, reads
    the row's ``video`` column, answers from ``solution``, and tags rows by modality_type with the
    problem type as the reward worker's question type: posttrain's video_r1 prompt format and columns.
    Another reader stays refused (its Python builds the rows)."""
    if ctx.get(_READER) != VIDEO_R1_READER:
        return
    ctx.consume(_READER)
    why = "ROLL's Video-R1 reader"
    for native, value, reason in (("data.prompt_format", "video_r1", "problem in Video-R1's template by problem_type, media by modality_type"),
                                  ("data.video_key", "video", "the row's video path"),
                                  ("data.response_key", "solution", "the reference answer (ground truth)"),
                                  ("data.reward_fn_key", "modality_type", "rows are tagged by modality_type")):
        ctx.set(native, value, _READER, f"{why}: {reason}")


def reward_system(ctx: Context, workers: Mapping[str, Any]) -> None:
    """``reward_system_config``: only ROLL's remote reward-system worker reads it (its service's
    settings). With such a worker it is refused with the worker; without one nothing reads it."""
    if not ctx.has("reward_system_config"):
        return
    ctx.consume("reward_system_config")
    if any(isinstance(spec, Mapping) and spec.get("worker_cls") == REMOTE_WORKER for spec in workers.values()):
        ctx.refuse("reward_system_config", REWARD_SYSTEM, None, ctx.get("reward_system_config"))
    else:
        ctx.drop("reward_system_config", "read only by ROLL's remote reward-system worker (RemoteRewardSystemWorker), "
                 "which no reward worker of this file is: unused")


def _video_r1_worker(ctx: Context, name: str) -> None:
    """ROLL's VideoR1RewardWorker takes each row's question type from its reward_model column (which
    ROLL's Video-R1 reader fills from problem_type): the video_r1 scorer reads it from extra_info."""
    column = "problem_type" if ctx.get(_READER) == VIDEO_R1_READER else "reward_model"
    keys = ctx.native.get("data", {}).get("extra_info_keys", [])
    if column not in keys:
        ctx.set("data.extra_info_keys", [*keys, column], f"rewards.{name}.worker_cls",
                f"ROLL's Video-R1 worker reads the row's question type from its {column} column")
    if column != "reward_model":
        ctx.set(f"reward.workers.{name}.reward_kwargs.type_key", column, f"rewards.{name}.worker_cls",
                "ROLL's Video-R1 reader copies problem_type into the reward_model column the worker reads")


def _unbuildable(worker_cls: Any) -> str | None:
    """Why posttrain cannot build this ROLL worker class, or None when it has its scorer."""
    if worker_cls in ROLL_WORKER_CLASSES:
        return None
    if worker_cls in ROLL_WORKER_TODO:
        return f"not implemented yet: {ROLL_WORKER_TODO[worker_cls]}"
    if worker_cls in ROLL_WORKER_REFUSED:
        return ROLL_WORKER_REFUSED[worker_cls]
    return (
        f"no posttrain scorer for ROLL worker class {worker_cls!r}: ROLL's worker classes score DataProto batches; write "
        "a scorer with verl's signature (data_source, solution_str, ground_truth, extra_info) and set "
        "reward.workers.<name>.worker_cls to path/file.py:function"
    )


def _worker_key(ctx: Context, name: str, worker_cls: str, key: str, value: Any) -> None:
    foreign, native = f"rewards.{name}.{key}", f"reward.workers.{name}.{key}"
    module = worker_cls.rpartition(".")[0].rpartition(".")[2]
    if key == "worker_cls":
        ctx.set(native, ROLL_WORKER_CLASSES[worker_cls], foreign, f"ROLL's {worker_cls.rpartition('.')[2]}")
    elif ROLL_WORKER_CLASSES[worker_cls] == JUDGE and key == "data_args":
        _judge_data_args(ctx, name, value)
    elif ROLL_WORKER_CLASSES[worker_cls] == JUDGE and key == "strategy_args":
        roll_judge.strategy(ctx, name, foreign, value)
    elif ROLL_WORKER_CLASSES[worker_cls] == JUDGE and key in _JUDGE_PLACEMENT:
        ctx.drop(foreign, "the LLM judge runs in the training process, on its device: placement only, the scores are the same")
    elif ROLL_WORKER_CLASSES[worker_cls] == JUDGE and key in JUDGE_KEYS and key != "chat_template_name":  # posttrain's key, not ROLL's
        ctx.set(native, value, foreign)
    elif ROLL_WORKER_CLASSES[worker_cls] == roll_detection.DETECTION and key == "model_args":
        roll_detection.model(ctx, name, {"model_args": value})
    elif key in _RULE_WORKER_UNUSED:
        ctx.drop(foreign, _RULE_WORKER_UNUSED[key])
    elif key in ("reward_type", "response_length_penalty_coef") and key not in _READS[module]:
        ctx.drop(foreign, f"ROLL's {worker_cls.rpartition('.')[2]} does not read it")
    elif key == "query_filter_config" and isinstance(value, Mapping) and value.get("type", "no_filter") == "no_filter":
        ctx.drop(foreign, "no_filter: every prompt group is kept, as posttrain does")
    elif key in ("tag_included", "reward_type", "response_length_penalty_coef", "world_size", "use_local", "query_filter_config", "judge_prompt", "judge_model_type", "generating_args"):
        info = native_paths().get(f"reward.workers.*.{key}")
        if info is not None and info.todo and value != info.default():
            ctx.refuse(foreign, f"not implemented yet: {info.todo}", native, value)
        else:
            ctx.set(native, value, foreign)
    else:
        ctx.refuse(foreign, "no posttrain equivalent for this reward worker key", None, value)


# Keys of ROLL's LLM judge that place it; posttrain runs the judge in the training process.
_JUDGE_PLACEMENT = ("device_mapping", "world_size")


def _judge_data_args(ctx: Context, name: str, value: Any) -> None:
    """ROLL's LLM judge reads one key of its data_args: ``template``, the chat template its prompt is
    rendered in (roll/pipeline/rlvr/rewards/llm_judge_reward_worker.py, ``_run_local_inference``):
    posttrain's ``reward.workers.<name>.chat_template_name``. The judge reads no data, so the other
    DataArguments keys (file_name, prompt, ...) change nothing there."""
    foreign = f"rewards.{name}.data_args"
    if not isinstance(value, Mapping):
        ctx.refuse(foreign, f"expected a mapping of ROLL data arguments (template: ...), got {value!r}", None, value)
        return
    for sub, v in value.items():
        if sub == "template" and v is not None:
            ctx.set(f"reward.workers.{name}.chat_template_name", v, f"{foreign}.template", "the chat template of the judge's prompt")
        elif sub == "template":
            ctx.drop(f"{foreign}.template", "null names no template: the judge's prompt is in its tokenizer's own chat template")
        else:
            ctx.drop(f"{foreign}.{sub}", "ROLL's LLM judge reads only data_args.template (it reads no data)")


def infer_engine_kwargs(ctx: Context) -> None:
    """ROLL passes ``actor_infer.strategy_args.strategy_config`` to the vLLM / SGLang constructor.
    The options posttrain has a rollout key for translate by their refs (gpu_memory_utilization,
    mem_fraction_static, load_format, max_model_len); every other one is handed to the same
    constructor through ``rollout.engine_kwargs.<strategy_name>``."""
    name = ctx.get("actor_infer.strategy_args.strategy_name")
    options = ctx.get("actor_infer.strategy_args.strategy_config")
    if name not in ("vllm", "sglang") or not isinstance(options, Mapping):
        return
    for option, value in options.items():
        key = f"actor_infer.strategy_args.strategy_config.{option}"
        if ctx.index.lookup(key) is None:
            ctx.consume(key)
            ctx.set(f"rollout.engine_kwargs.{name}.{option}", value, key, f"passed to the {name} engine's constructor")


_MATH_WORKER = next(cls for cls, scorer in ROLL_WORKER_CLASSES.items() if scorer == "math")
_ACCUMULATION = "the optimizer step: per_device_train_batch_size x gradient_accumulation_steps x data-parallel ranks / responses per prompt (prompts; refused unless whole)"
# Keys the handlers above translate (docs/config-mapping.md reads this table: posttrain.config.tables).
RULES: dict[str, Rule] = {
    "actor_train.training_args.gradient_accumulation_steps": Rule("actor.ppo_mini_batch_size", _ACCUMULATION, 4),
    "critic.training_args.gradient_accumulation_steps": Rule("critic.ppo_mini_batch_size", _ACCUMULATION, 4),
    "sft_train": Rule("algorithm.kind", "ROLL's SFT pipeline (a file with sft_train and no actor_train): an SFT stage whose sft_train keys translate as actor_train's; data.train_batch_size = per_device_train_batch_size x gradient_accumulation_steps x data-parallel ranks, rows in file order, ROLL's training defaults (posttrain.config.dialects.roll_sft)", {"model_args": {"dtype": "bf16"}}),
    "importance_sampling": Rule("actor.policy_loss.loss_mode", "seq: ROLL's sequence-level ratio, the gspo loss (with dual_clip_loss: gspo's dual_clip_c = 1 + 2 x pg_clip); token: nothing (posttrain's ratio)", "seq"),
    "use_topr_loss": Rule("actor.policy_loss.loss_mode", "true: ROLL's TOPR loss, topr_roll (full REINFORCE on responses scoring > 0, importance weight truncated at 1 on the others); false: nothing", True),
    # a reward worker's placement (reward_workers): a rule worker runs no model
    **{f"rewards.*.{key}": Rule(None, f"{why}; for the LLM judge: {judge}", "anything", (("rewards.w.worker_cls", _MATH_WORKER),))
       for key, why, judge in (
           ("data_args", _RULE_WORKER_UNUSED["data_args"], "template is reward.workers.<name>.chat_template_name (the chat template of its prompt), the other keys are dropped (ROLL's judge reads only template)"),
           ("strategy_args", _RULE_WORKER_UNUSED["strategy_args"], "hf_infer and deepspeed_infer are the hf engine; vllm and sglang are reward.workers.<name>.engine (name, the strategy_config sizes as its options, the other keys as engine.kwargs; load_format must be auto) (posttrain.config.dialects.roll_judge)"),
           ("device_mapping", _RULE_WORKER_UNUSED["device_mapping"], "dropped (it runs in the training process, on its device)"))},
    **AGENTIC_RULES,
    **roll_strategy.RULES,
    **roll_async.RULES,
    **roll_roles.RULES,
    **roll_outputs.RULES,
    **roll_envs.RULES,
    **roll_pg.RULES,
    **roll_correction.RULES,
    **roll_packing.RULES,
    **roll_profiler.RULES,
    **roll_download.RULES,
}

_DPO_KEYS = ("ipo", "beta", "label_smoothing", "chosen_key", "rejected_key")


def dpo_pipeline(ctx: Context) -> None:
    """ROLL's DPO pipeline (start_dpo_pipeline.py) has no key naming it: its keys (beta, ipo,
    label_smoothing, chosen_key, rejected_key) make the file a DPO config, posttrain's
    ``algorithm.kind: dpo``. ROLL's loss (roll/pipeline/dpo/actor_worker.py) is the sigmoid loss with
    label smoothing, or IPO's squared loss (h - 1/(2 beta))^2 when ipo is true: posttrain's
    algorithm.dpo.loss_type sigmoid / ipo (posttrain.trainer.dpo.preference_losses)."""
    present = [k for k in _DPO_KEYS if ctx.has(k)]
    if not present:
        return
    ctx.set("algorithm.kind", "dpo", present[0], f"ROLL's DPO pipeline keys ({', '.join(present)})")
    if ctx.get("ipo") is True:
        ctx.consume("ipo")
        ctx.set("algorithm.dpo.loss_type", "ipo", "ipo", "IPO's squared loss")
    epochs = "actor_train.training_args.num_train_epochs"
    if ctx.has(epochs):  # the DPO pipeline passes over the pairs this many times (stopping at max_steps)
        ctx.consume(epochs)
        value = ctx.get(epochs)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1:
            ctx.set("trainer.total_epochs", int(value), epochs, "ROLL's DPO pipeline runs int(num_train_epochs) passes over the pairs")
        else:
            ctx.refuse(epochs, f"expected a number of passes >= 1, got {value!r}", "trainer.total_epochs", value)


HANDLERS = [*roll_strategy.HANDLERS, *roll_async.HANDLERS, *roll_envs.HANDLERS, *roll_pg.HANDLERS, *roll_roles.HANDLERS, *roll_outputs.HANDLERS, *roll_lengths.HANDLERS, *roll_correction.HANDLERS, *roll_packing.HANDLERS, *roll_profiler.HANDLERS, *roll_download.HANDLERS, machine_devices, node_count, roll_roles.template, reward_norm, mini_batch, topr, roll_pg.importance_sampling, roll_lora, video_r1_reader, reward_workers, infer_engine_kwargs, dpo_pipeline, env_manager_sampling, episode_lengths, agentic_thinking, group_seeded_envs, roll_step_envs.step_env_managers, *roll_defaults.HANDLERS]
