"""Every check a stage makes before its first step, in one function that `posttrain train` and
`posttrain config plan` both call.

`stage_inputs` checks one stage without loading weights or training: registry names (advantage
estimator, policy loss, KL kinds), the trackers (their packages are installed, their options are
read by a named tracker), the model directory (config.json, overrides, every weight file's
header, max_model_len), the tokenizer and chat template, the train and validation data (files
exist and parse, columns, templating, prompt lengths), and for RL the critic's directory and
tokenizer, the reward function (imported, its signature checked), the reward manager's options and
the reward model's directory. What it builds on the way (tokenizer, datasets, reward function) is
what the stage runner starts from, so a run does this work once.

`posttrain.trainer.run.check_run` calls it for every stage of a run, before the first stage
starts; so a mistake in the last stage's data fails at once, not after the first stage trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from posttrain.cluster.placement import plan_world
from posttrain.config.checks import role_needs
from posttrain.config.schema import Config
from posttrain.data import build_dpo_dataset, build_rl_dataset, build_sft_dataset
from posttrain.data.dataset import NO_IMAGES_TEXT_MODEL
from posttrain.data.domains import tag_locations, worker_tag_map
from posttrain.data.train_sampler import make_train_sampler, needs_early_build
from posttrain.models.integrity import check_weight_files
from posttrain.models.loading import (
    check_max_model_len,
    import_external_lib,
    load_config,
    load_tokenizer,
    resolve_model_dir,
    tokenizer_from_config,
)
from posttrain.rewards import check_reward_manager
from posttrain.rewards.auxiliary import check_models as check_auxiliary_models
from posttrain.tracking import check_trackers
from posttrain.tracking.rollout_traces import check_rollout_tracer
from posttrain.buffer.operators import check_pipeline
from posttrain.errors import ConfigError
from posttrain.trainer.images import check_distill_images, check_expert_images, check_image_rows, image_inputs
from posttrain.trainer.mixing import expert_dataset
from posttrain.trainer.rl_settings import mixes_expert_rows
from posttrain.trainer.agent_fn import check_agent_fn, has_agent_fn
from posttrain.trainer.agentic import check_agentic, check_idle_env_keys, is_agentic
from posttrain.trainer.profiling import check_profiler_machine
from posttrain.trainer.rewarding import Scorers, input_tokenizer, manager_options, reward_function, worker_manager
from posttrain.trainer.tools import data_with_tools

# algorithm.kind -> the dataset builder of its train and validation files
DATASETS: dict[str, Callable[..., Any]] = {"rl": build_rl_dataset, "sft": build_sft_dataset, "dpo": build_dpo_dataset,
                                           "distill": partial(build_sft_dataset, images_refused=NO_IMAGES_TEXT_MODEL)}


@dataclass(frozen=True)
class StageInputs:
    """What a stage's checks built and its runner starts from."""

    tokenizer: Any
    train_set: Any  # the kind's dataset (RLDataset, SFTDataset, DPODataset or the user's custom_cls)
    val_set: Any | None
    reward_fn: Scorers | None = None  # RL only: the reward function, or each reward worker's
    expert_set: Any | None = None  # RL with algorithm.mix: the expert SFT rows (posttrain.trainer.mixing)


def stage_inputs(cfg: Config) -> StageInputs:
    """Check one stage (``cfg`` with model.path set to the policy it starts from) and build its inputs."""
    kind = cfg.algorithm.kind
    if is_agentic(cfg):  # the environments' settings need no model: refused before what the machine lacks
        check_agentic(cfg)
    check_stage_names(cfg)
    check_trackers(list(cfg.trainer.logger), dict(cfg.trainer.tracker_kwargs))
    check_rollout_tracer(cfg.rollout.trace.backend)
    check_model_dir(cfg)
    tokenizer = tokenizer_from_config(cfg.model)
    if is_agentic(cfg):  # environments instead of files: no datasets, no reward function
        check_agent_fn(cfg)  # an agent function beside env managers is refused
        check_profiler_machine(cfg, plan_world(cfg).device)
        check_rl_roles(cfg, tokenizer)
        return StageInputs(tokenizer, None, None, None)
    check_idle_env_keys(cfg)
    build = DATASETS[kind]
    data = data_with_tools(cfg)  # tool calling: the tool schemas go into every prompt (posttrain.trainer.tools)
    images = {"images": image_inputs(cfg, tokenizer)} if kind in ("rl", "distill") else {}  # a vision-language policy's
    # trainer.mode bench evaluates data.val_files: a bench file with no training rows (Trinity-RFT's, whose
    # bench configs have eval_tasksets only) builds none
    bench = kind == "rl" and cfg.trainer.mode == "bench"
    if bench and not cfg.data.val_files:
        raise ConfigError("trainer.mode=bench evaluates an RL stage's checkpoints on data.val_files; set data.val_files (Trinity: eval_tasksets)")
    bench_only = bench and not cfg.data.train_files
    train_set = None if bench_only else build(data, cfg.data.train_files, tokenizer, split="train", **images)
    val_set = build(data, cfg.data.val_files, tokenizer, split="val", **images) if cfg.data.val_files else None
    reward_fn = None
    if kind == "distill":
        check_distill_teacher(cfg, tokenizer)
        check_distill_images(cfg, [train_set, val_set])
    if kind == "rl":
        check_image_rows(cfg, [train_set, val_set])
        check_profiler_machine(cfg, plan_world(cfg).device)
        check_rl_roles(cfg, tokenizer)
        check_agent_fn(cfg)  # rollout.agent.function: its episodes' rewards replace the reward function
        reward_fn = None if has_agent_fn(cfg) else check_reward(cfg)
        if cfg.reward.workers:  # every tag of the data has a worker, before any model is loaded
            check_worker_tags(cfg, [(k, rows) for k, rows in (("data.train_files", train_set), ("data.val_files", val_set)) if rows is not None])
        if needs_early_build(cfg.data) and train_set is not None:  # every row in a domain or file, the user's sampler class loads
            make_train_sampler(cfg.data, train_set, worker_tag_map(cfg.reward.workers))
    expert_set = None
    if kind == "rl" and mixes_expert_rows(cfg):
        expert_set = expert_dataset(cfg, tokenizer, images["images"])
        if len(expert_set) < cfg.algorithm.mix.expert_batch_size:
            raise ConfigError(
                f"algorithm.mix.expert_batch_size {cfg.algorithm.mix.expert_batch_size} exceeds the "
                f"{len(expert_set)} rows of algorithm.mix.expert_files; lower it or add expert data"
            )
        check_expert_images(cfg, expert_set)
    return StageInputs(tokenizer, train_set, val_set, reward_fn, expert_set)


def check_stage_names(cfg: Config) -> None:
    """The checks that need no files: registry names of an RL stage and its experience operators, and
    that this machine can run its rollout engine (`rollout.name=vllm` without vLLM or a GPU is one
    line naming what is missing)."""
    if cfg.algorithm.kind == "rl":
        from posttrain.rollout.engines import check_engine_machine
        from posttrain.trainer.rl_settings import check_rl_names

        check_rl_names(cfg)
        check_engine_machine(cfg)
    operators = cfg.data_processor.experience_pipeline.operators
    if operators:
        problems = check_pipeline(operators, "data_processor.experience_pipeline.operators")
        if cfg.algorithm.kind != "rl":
            problems.append(f"data_processor.experience_pipeline runs on explored batches; a {cfg.algorithm.kind} stage has none")
        if problems:
            raise ConfigError("; ".join(problems))


def engine_notes(configs: list[Config]) -> list[str]:
    """One line per distinct set of settings made for rollout engines that the stages do not run
    (`rollout.gpu_memory_utilization` with `rollout.name=hf`, ...): accepted, reported unused."""
    from posttrain.config.sections.rollout import RolloutConfig
    from posttrain.rollout.engines import unused_engine_settings

    from posttrain.rewards.judge_engine import unused_engine_note

    notes = [unused_engine_settings(c, RolloutConfig()) for c in configs if c.algorithm.kind == "rl"]
    notes += [unused_engine_note(w.engine, f"reward.workers.{name}") for c in configs if c.algorithm.kind == "rl"
              for name, w in c.reward.workers.items()]  # an hf judge with a GPU engine's options
    return list(dict.fromkeys(n for n in notes if n is not None))


def check_reward(cfg: Config) -> Scorers | None:
    """An RL stage's reward function (imported and checked), or each reward worker's, and the
    names and options of their managers."""
    if cfg.algorithm.kind != "rl":
        return None
    fn = reward_function(cfg)
    check_auxiliary_models(cfg.reward.auxiliary_models, cfg.cluster)  # a missing model is refused now, not at the first scoring
    check_reward_manager(cfg.reward.reward_manager, manager_options(cfg))
    for name in cfg.reward.workers:
        check_reward_manager(*worker_manager(cfg, name))
    return fn


def check_worker_tags(cfg: Config, datasets: list[tuple[str, Any]]) -> None:
    """Every tag in the datasets is claimed by a reward worker (a DataError naming the tag, the
    file and row where it first occurs, and the workers' tags, otherwise)."""
    from posttrain.rewards.routing import RewardRouter, RoutedWorker

    # tag routing needs only the tags: managers are not built (a parallel one starts processes)
    router = RewardRouter([RoutedWorker(n, None, tuple(w.tag_included)) for n, w in cfg.reward.workers.items()])  # type: ignore[arg-type]
    for setting, dataset in datasets:
        if dataset is not None:
            router.check_tags(tag_locations(dataset, setting))


def check_model_dir(cfg: Config) -> None:
    """The policy's directory: config.json with the overrides applied, weight file headers, and
    max_model_len against the position table — the weights themselves are not read."""
    m = cfg.model
    import_external_lib(m.external_lib)
    config = load_config(m.path, trust_remote_code=m.trust_remote_code, override_config=m.override_config,
                         rope_theta=m.rope_theta, rope_scaling=m.rope_scaling)
    check_weight_files(resolve_model_dir(m.path))
    check_max_model_len(m, config)


def check_distill_teacher(cfg: Config, tokenizer: Any) -> None:
    """A distillation stage's teacher: its directory, weight file headers and vocabulary (it reads
    the policy's token ids, so it needs the policy's tokenizer)."""
    path, what = cfg.algorithm.distill.teacher_path, "teacher (algorithm.distill.teacher_path)"
    load_config(path, trust_remote_code=cfg.model.trust_remote_code, what=what)
    check_weight_files(resolve_model_dir(path, what=what))
    theirs = load_tokenizer(path)
    if theirs.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(f"algorithm.distill.teacher_path {path!r}: its vocabulary differs from the policy's tokenizer ({len(theirs)} vs "
                          f"{len(tokenizer)} tokens); the teacher reads the policy's token ids, so it needs the same tokenizer")


def check_rl_roles(cfg: Config, tokenizer: Any) -> None:
    """The critic's directory and tokenizer when a critic is trained; a teacher's (ref.model_path)
    directory and vocabulary, and each of ref.teachers'; the reward model's directory."""
    from posttrain.trainer.rl_build import check_critic_tokenizer, check_teacher_tokenizer

    if role_needs(cfg).critic:
        c = cfg.critic.model
        check_critic_tokenizer(cfg, tokenizer)
        import_external_lib(c.external_lib)
        path = c.path or cfg.model.path  # as critic_model_from_config loads it
        load_config(path, trust_remote_code=c.trust_remote_code or (c.path is None and cfg.model.trust_remote_code),
                    override_config=dict(c.override_config), what="critic")
        check_weight_files(resolve_model_dir(path, what="critic"))
    teacher = cfg.ref.model_path
    if teacher is not None and role_needs(cfg).reference:
        load_config(teacher, trust_remote_code=cfg.model.trust_remote_code, what="teacher (ref.model_path)")
        check_weight_files(resolve_model_dir(teacher, what="teacher (ref.model_path)"))
        check_teacher_tokenizer(cfg, tokenizer)
    for name, t in cfg.ref.teachers.items():  # on_policy_distill's several teachers (checks: each has a model_path)
        key = f"ref.teachers.{name}.model_path"
        load_config(t.model_path, trust_remote_code=cfg.model.trust_remote_code, what=f"teacher ({key})")
        check_weight_files(resolve_model_dir(t.model_path, what=f"teacher ({key})"))
        check_teacher_tokenizer(cfg, tokenizer, t.model_path, key)
    rm = cfg.reward.reward_model
    if rm.enable:
        import_external_lib(rm.external_lib, key="reward.reward_model.external_lib")
        load_config(rm.path, trust_remote_code=rm.trust_remote_code, what="reward model")
        load_tokenizer(rm.path, trust_remote_code=rm.trust_remote_code)
        check_weight_files(resolve_model_dir(rm.path, what="reward model"))
        input_tokenizer(cfg)  # decodes the policy's responses for the re-rendering
