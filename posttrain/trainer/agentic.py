"""Agentic (multi-turn) RL inside the RL trainer: env groups from the config, the agent loop, scores.

An RL stage is agentic when `env.train_env_manager.tags` names `env.custom_envs` entries. Its step
is the ordinary one (`RLTrainer.step`): only the source of the batch changes. Instead of prompts
from files, every step plays `num_env_groups` groups of `group_size` environments through the agent
loop (`posttrain.rollout.agent_loop`); a trajectory's reward (the sum of its turns' rewards and
format penalties) is its sequence score, and the environments of one group share tag and seed, so
their trajectories form one GRPO group, as the responses to one prompt do. `learn` then trains on
the batch unchanged, only the model's tokens counting (`train_mask`).

Seeds: a training group's seed is drawn from (trainer.seed, step, group), so a resumed run replays
exactly the episodes it would have played, with no sampler state to save; validation's groups use
(trainer.seed, "val", group), the same held-fixed episodes at every validation. Validation reports
the success rate, reward and turns per tag (`val/<tag>/success`, ...), and with env.render_save_dir
writes each validation episode's frames as text (posttrain.rollout.episode_render).
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posttrain.algorithms.registry import ADVANTAGE_ESTIMATORS, estimator_needs
from posttrain.buffer.experience import Experience
from posttrain.config.checks import role_needs
from posttrain.config.schema import Config
from posttrain.config.sections.env import EnvManagerConfig
from posttrain.data.dataset import make_formatter
from posttrain.data.templates import named_template
from posttrain.envs.base import EnvError
from posttrain.envs.spec import EnvSpec, parse_custom_envs, tag_groups
from posttrain.errors import ConfigError, DataError
from posttrain.models.vision import vision_path_problems
from posttrain.records import RolloutBatch
from posttrain.rollout.agent_loop import EnvSlot, LoopLimits, run_episodes
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.env_guard import FaultPolicy
from posttrain.rollout.episode_images import EpisodeImages
from posttrain.rollout.episode_render import write_episode_renders
from posttrain.rollout.trajectory import Trajectory, anchor_ids, to_rollout_batch
from posttrain.rollout.turn_rows import turn_mini_batch_rows, turn_rows
from posttrain.rollout.turns import TurnRenderer
from posttrain.trainer.images import image_inputs
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.rl_settings import response_length


def is_agentic(cfg: Config) -> bool:
    """Whether this RL stage plays environments instead of answering prompts from files."""
    return cfg.algorithm.kind == "rl" and bool(cfg.env.train_env_manager.tags)


def check_idle_env_keys(cfg: Config) -> None:
    """An RL stage that is not agentic must not set environments it would never play."""
    e = cfg.env
    idle = [k for k, on in (("env.val_env_manager.tags", e.val_env_manager.tags), ("env.custom_envs", e.custom_envs)) if on]
    if cfg.algorithm.kind == "rl" and idle and not is_agentic(cfg):
        raise ConfigError(f"{' and '.join(idle)}: set, but env.train_env_manager.tags is empty, so this RL stage answers "
                          "prompts from data.train_files and would play no environment; set env.train_env_manager.tags or remove them")
    if cfg.algorithm.kind == "rl" and not is_agentic(cfg) and e.train_rows == "turn" and cfg.rollout.multi_turn.enable:
        raise ConfigError("env.train_rows: turn cuts the episodes of an agentic stage (env.train_env_manager.tags) into turn rows; a "
                          "tool-calling conversation (rollout.multi_turn) trains as one row: remove env.train_rows or the tools")
    if cfg.algorithm.kind == "rl" and not is_agentic(cfg) and _turn_row_problems(cfg):
        raise ConfigError(_turn_row_problems(cfg))
    name = cfg.algorithm.adv_estimator
    if cfg.algorithm.kind == "rl" and not is_agentic(cfg) and name in ADVANTAGE_ESTIMATORS and estimator_needs(name).turns:
        raise ConfigError(f"algorithm.adv_estimator: {name} gives step-level credit over the turns of multi-turn episodes; this RL "
                          "stage answers single prompts (env.train_env_manager.tags is empty): use grpo, or make the stage agentic")


@dataclass(frozen=True)
class AgenticPlan:
    """The checked environment configuration of an agentic stage."""

    specs: dict[str, EnvSpec]
    train_groups: list[str]  # tag of every training group, in order (an env group playing k episodes per step counts k times)
    val_groups: list[str]  # tag of every validation group; empty: no validation
    epoch_steps: int | None = None  # steps per pass over episode_files rows, when total_training_steps is unset

    def train_size(self, cfg: Config) -> int | None:
        """The "dataset size" that gives `derive` epoch_steps steps per epoch (None: no epochs to count)."""
        return None if self.epoch_steps is None else self.epoch_steps * cfg.data.train_batch_size


def check_agentic(cfg: Config) -> AgenticPlan:
    """Every check of an agentic stage's configuration, before any model is loaded."""
    specs = parse_custom_envs(dict(cfg.env.custom_envs))
    train_m, val_m = cfg.env.train_env_manager, cfg.env.val_env_manager
    train = tag_groups(train_m, specs, "env.train_env_manager")
    val = tag_groups(val_m, specs, "env.val_env_manager") if val_m.tags else []
    problems = []
    if cfg.data.train_files or cfg.data.val_files:
        problems.append("data.train_files / data.val_files: an agentic stage (env.train_env_manager.tags set) plays "
                        "environments instead of prompts from files; remove them")
    if train_m.num_env_groups == 0:
        raise ConfigError("env.train_env_manager.num_env_groups: 0 (one group per episode_files row) is for validation, which plays "
                          "every row once; a training step plays num_env_groups groups, taking the next rows: set it to the rows per step")
    if cfg.data.system_prompt is not None:
        problems.append("data.system_prompt: an agentic stage's system message is each environment's instruction "
                        "(env.custom_envs.<tag>.env_instruction); move the text there")
    named = named_template(cfg.data.chat_template_name)
    if named.system_prompt is not None or named.user_prefix or cfg.data.chat_template_name in ("empty", "base"):
        problems.append(f"data.chat_template_name: {cfg.data.chat_template_name} rewrites a prompt of one question (its own system "
                        "prompt, user prefix or single-message text); an agentic stage renders instruction and observations as "
                        "conversation turns of a chat template: use native, qwen2_5, qwen3, chatml or longcot_V3")
    envs = train_m.num_env_groups * train_m.group_size
    batch = cfg.data.train_batch_size * cfg.rollout.n
    if batch % envs:
        problems.append(
            f"data.train_batch_size ({cfg.data.train_batch_size}) x rollout.n ({cfg.rollout.n}) = {batch} trajectories per step must be "
            f"a multiple of the environments, env.train_env_manager.num_env_groups x group_size = {envs} (each plays the same number "
            f"of episodes; mini-batches are counted in trajectories); e.g. set data.train_batch_size: {train_m.num_env_groups} and "
            f"rollout.n: {train_m.group_size}"
        )
    problems += _turn_row_problems(cfg) + _window_problems(cfg, specs, train) + _played_problems(specs, [*train, *val])
    problems += _picture_problems(cfg, specs, [*train, *val])
    per_env = max(batch // envs, 1)  # episodes each environment plays per step (ROLL: traj_per_env)
    for key, manager, need in (("env.train_env_manager", train_m, per_env), ("env.val_env_manager", val_m, 1)):
        if manager.max_traj_per_env != -1 and manager.max_traj_per_env < need:
            problems.append(f"{key}.max_traj_per_env: {manager.max_traj_per_env} is below the {need} episode(s) each environment "
                            f"plays per {'step' if key == 'env.train_env_manager' else 'validation'}; raise it or set -1")
    # each env group plays per_env episodes with their own seeds: per_env groups of group_size trajectories
    groups = [tag for tag in train for _ in range(per_env)]
    epoch = epoch_steps(specs, groups) if cfg.trainer.total_training_steps is None else None
    if cfg.trainer.total_training_steps is None and epoch is None:
        problems.append("trainer.total_training_steps: required by an agentic stage (there is no dataset to count epochs of) "
                        "unless every training tag plays the rows of its custom_envs episode_files")
    if epoch == 0:
        problems.append(f"env.custom_envs: the training tags' episode_files hold fewer rows than the groups a step plays "
                        f"({dict(Counter(groups))}): not one step an epoch; add rows or set trainer.total_training_steps")
    if problems:
        raise ConfigError(problems)
    return AgenticPlan(specs, groups, val, epoch)


def _played_problems(specs: dict[str, EnvSpec], tags: list[str]) -> list[str]:
    """What only the entries a manager plays must have: tools posttrain provides, and the data of an
    environment over a dataset (its class's `check_data`, e.g. posttrain.envs.dataset_envs), read now."""
    problems = []
    for tag in dict.fromkeys(tags):
        spec, key = specs[tag], f"env.custom_envs.{tag}"
        if spec.tools is not None:
            problems += spec.tools.refused(f"{key}.tool_wrapper")
        check = getattr(spec.cls, "check_data", None)
        if callable(check) and not spec.episodes:
            try:
                check(dict(spec.env_config))
            except (DataError, TypeError, ValueError) as e:
                problems.append(f"{key}.env_config: {e}")
    return problems


def epoch_steps(specs: dict[str, EnvSpec], groups: list[str]) -> int | None:
    """Steps in one pass over the training tags' episode_files (the tag that runs out first), or
    None when a training tag draws its episodes from seeds."""
    if not all(specs[tag].episodes for tag in groups):
        return None
    return min(len(specs[tag].episodes) // n for tag, n in Counter(groups).items())


def _turn_row_problems(cfg: Config) -> list[str]:
    """env.train_rows / turn_mini_batch_size against the rest of the config."""
    e, problems = cfg.env, []
    if e.train_rows == "episode" and e.turn_mini_batch_size is not None:
        problems.append("env.turn_mini_batch_size: counts turn rows, but env.train_rows is episode (one row per episode or response, "
                        "mini-batches of actor.ppo_mini_batch_size x rollout.n rows); set env.train_rows: turn or remove it")
    if e.train_rows == "turn":
        for role in ("actor", "critic"):
            optim = getattr(cfg, role).optim
            if optim.lr_schedule_unit == "update" and optim.lr_schedule_updates is None:
                problems.append(f"{role}.optim.lr_schedule_unit: update sizes the LR schedule by a fixed number of optimizer updates per "
                                "step, but with env.train_rows turn a step's updates depend on the turns its episodes took (or, "
                                f"with turn_mini_batch_size, on the rows the filters keep); use step, or give the schedule's length "
                                f"in updates in {role}.optim.lr_schedule_updates")
    return problems


def _picture_problems(cfg: Config, specs: dict[str, EnvSpec], tags: list[str]) -> list[str]:
    """What a run cannot do for the played entries whose env_config says `render_mode: rgb_array` (they
    show pictures: posttrain.rollout.episode_images), refused before any model loads; an environment
    that shows pictures without saying so is refused the same way at its first picture."""
    drawn = [t for t in dict.fromkeys(tags) if specs[t].env_config.get("render_mode") == "rgb_array"]
    if not drawn:
        return []
    problems = [f"env.custom_envs.{t}.env_config.render_mode: rgb_array shows pictures, which posttrain plays in prompt_mode "
                "conversation only; a window mode or prompt_mode messages writes each prompt afresh from text" for t in drawn
                if specs[t].window is not None]
    if cfg.env.train_rows == "turn":
        problems.append(f"env.train_rows: turn would part the pictures of {drawn} (render_mode: rgb_array) from the turns that show "
                        "them; set env.train_rows: episode")
    problems += [f"env.custom_envs.{drawn[0]}.env_config.render_mode: rgb_array shows pictures: {p}" for p in vision_path_problems(
        sequence_parallel=cfg.actor.ulysses_sequence_parallel_size, rollout_name=cfg.rollout.name, critic=role_needs(cfg).critic)]
    return problems


def _window_problems(cfg: Config, specs: dict[str, EnvSpec], train: list[str]) -> list[str]:
    """A window prompt mode (posttrain.envs.window) trains turn rows only, and not beside conversations."""
    windowed = sorted({t for t in train if specs[t].window is not None})
    if not windowed:
        return []
    problems = []
    if cfg.env.train_rows != "turn":
        problems.append(f"env.train_rows: episode, but {windowed} prompt each action afresh (a window prompt mode), so an episode "
                        "is no one sequence the model saw; set env.train_rows: turn (one row per action, after its own prompt)")
    whole = sorted({t for t in train if specs[t].window is None})
    if whole:
        problems.append(f"env.train_env_manager.tags: {windowed} prompt each action afresh (a window prompt mode) and {whole} show "
                        "the whole episode (prompt_mode conversation); a step's rows are forwarded one way: train one mode per run")
    return problems


@dataclass(frozen=True)
class TrainRows:
    """The rows a step's updates train on and their mini-batch sizes (None: the role's own)."""

    batch: RolloutBatch
    actor_mini: int | None = None
    critic_mini: int | None = None


def training_rows(cfg: Config, batch: RolloutBatch, pad_id: int) -> TrainRows:
    """The batch as the updates take it: unchanged, or with env.train_rows turn cut into turn rows
    (posttrain.rollout.turn_rows), mini-batches counted in turn rows. A single-turn stage's rows are
    one turn each (Trinity-RFT's multi_step_grpo over a single-turn workflow): only the mini-batches change.
    An agent function's rows (one per recorded call, rollout.agent) are shared over the mini-batches
    an episode step would take, so a step takes as many optimizer steps whatever the calls per episode;
    with env.train_rows turn its calls are turns, in mini-batches of env.turn_mini_batch_size calls when set.
    reward.self_judge's judge rows are shared the same way with the responses they follow."""
    if cfg.algorithm.kind != "rl":
        return TrainRows(batch)
    # an episode step's mini-batches per epoch: data.train_batch_size / ppo_mini_batch_size (prompts)
    updates = {role: -(-cfg.data.train_batch_size // getattr(cfg, role).ppo_mini_batch_size) for role in ("actor", "critic")}
    if cfg.reward.self_judge.enable:  # the responses and a varying number of judge rows
        return TrainRows(batch, *(turn_mini_batch_rows(len(batch), None, n) for n in updates.values()))
    calls = cfg.rollout.agent.function is not None  # an agent function's rows: one per call
    if cfg.env.train_rows == "episode" and not calls:
        return TrainRows(batch)
    rows = turn_rows(batch, pad_id) if is_agentic(cfg) else batch  # a single-turn response (or a call) is one turn already
    fixed = cfg.env.turn_mini_batch_size if not calls or cfg.env.train_rows == "turn" else None
    return TrainRows(rows, *(turn_mini_batch_rows(len(rows), fixed, n) for n in updates.values()))


def validation_first_observations(cfg: Config) -> frozenset[str]:
    """The first observation of every validation episode of an agentic config (what `make-env-data
    --holdout` keeps out of the expert data)."""
    plan = check_agentic(cfg)
    firsts = set()
    for tag, seed, env_config in episodes(plan.specs, plan.val_groups, cfg.trainer.seed, "val", 0):
        env = plan.specs[tag].make(env_config)
        firsts.add(env.reset(seed=seed))
    return frozenset(firsts)


def episodes(specs: dict[str, EnvSpec], groups: list[str], base: int, kind: str, step: int) -> list[tuple[str, int, dict[str, Any]]]:
    """(tag, reset seed, env_config) of each group of one step (kind "s") or of validation ("val", step 0).
    A tag with episode_files plays its rows in order: its k groups of training step s (from 1) take rows
    (s - 1) k ... s k - 1, validation's the first k; other tags draw their seed (`group_seed`). With
    seed_per_group, env_config's seed is group g's own, the same at every step."""
    count, nth, out = Counter(groups), Counter(), []
    for g, tag in enumerate(groups):
        spec = specs[tag]
        if spec.episodes:
            seed, env_config = spec.episode((max(step, 1) - 1) * count[tag] * (kind != "val") + nth[tag])
            nth[tag] += 1
        else:
            seed, env_config = group_seed(base, kind, step, g), spec.env_config
        if spec.seed_per_group:  # as ROLL's env managers: the env is built with its group's seed, the same every step
            env_config = {**env_config, "seed": group_seed(base, f"{kind}-env", 0, g)}
        out.append((tag, seed, env_config))
    return out


def group_seed(base: int, kind: str, step: int, group: int) -> int:
    """A reproducible 31-bit seed for one env group (see the module docstring)."""
    digest = hashlib.blake2b(f"{base}\x1f{kind}\x1f{step}\x1f{group}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**31


class AgenticRollout:
    """Builds each step's env groups and plays them with the trainer's rollout role."""

    def __init__(self, cfg: Config, tokenizer: Any, plan: AgenticPlan):
        self.cfg, self.plan = cfg, plan
        # the data section's template settings, as prompts from files get them (make_formatter):
        # data.chat_template(_name), data.enable_thinking, data.apply_chat_template_kwargs
        formatter = make_formatter(cfg.data, tokenizer) if (
            cfg.data.chat_template or named_template(cfg.data.chat_template_name).jinja or getattr(tokenizer, "chat_template", None)) else None
        self.renderer = TurnRenderer(tokenizer, formatter.chat_template, template_kwargs=formatter.template_kwargs) if formatter else TurnRenderer(tokenizer, None)
        self.tokenizer = tokenizer
        # pictures an environment shows (render_mode rgb_array) go to a vision-language policy through its image processor
        self.images = EpisodeImages(image_inputs(cfg, tokenizer), tuple(vision_path_problems(
            sequence_parallel=cfg.actor.ulysses_sequence_parallel_size, rollout_name=cfg.rollout.name, critic=role_needs(cfg).critic)))
        self.clock = time.monotonic  # the episodes' deadline clock (explorer.max_timeout); tests pass a fake one

    def _slots(self, manager: EnvManagerConfig, key: str, groups: list[str], kind: str, step: int,
               only: list[int] | None = None) -> list[EnvSlot]:
        """Fresh environments for every group (or the groups `only` names), group_size each, in order."""
        slots = []
        for g, (tag, seed, env_config) in enumerate(episodes(self.plan.specs, groups, self.cfg.trainer.seed, kind, step)):
            if only is not None and g not in only:
                continue
            spec = self.plan.specs[tag]
            penalty = manager.format_penalty if spec.format_penalty is None else spec.format_penalty
            for _ in range(manager.group_size):  # same tag and seed: one comparison group
                env = spec.make(env_config)
                slots.append(EnvSlot(env, spec, seed, f"{kind}{step}/{tag}/g{g}", penalty))
        return slots

    def _play(self, rollout: Any, manager: EnvManagerConfig, slots: list[EnvSlot], params: SamplingParams,
              version: int, prefix: str, deadline: float | None = None) -> list[Trajectory]:
        e = self.cfg.env
        faults = FaultPolicy(e.step_timeout, e.failure_penalty, e.max_failure_rate)
        limits = LoopLimits(self.cfg.data.max_prompt_length, response_length(self.cfg), manager.max_env_num_per_worker, faults,
                            deadline, self.clock, self.cfg.model.max_model_len, manager.max_new_tokens)

        def generate(prompts, p):  # the rollout role: data-parallel ranks share the rows
            return rollout.generate(prompts, p, expected_version=version)

        return run_episodes(slots, generate, params, self.renderer, limits, prefix, self.images)

    def explore(self, rollout: Any, params: SamplingParams, step: int, version: int, timer: PhaseTimer,
                policy_step: int = 0) -> Experience:
        """Play one step's training groups; the scored batch as `Experience`."""
        with timer("gen"):
            trajs, timeouts = self._training_episodes(rollout, params, version, step)
        batch = to_rollout_batch(trajs, self.renderer.pad_id, version, self._prompts(trajs))
        scores = torch.tensor([t.reward for t in trajs], dtype=torch.float32)  # (B,) the trajectory's reward
        texts = self.tokenizer.batch_decode([t.response_ids for t in trajs], skip_special_tokens=False)
        return Experience(batch, scores, texts, {**episode_metrics(trajs, "env"), **timeouts}, policy_step=policy_step)

    def _training_episodes(self, rollout: Any, params: SamplingParams, version: int, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """The step's training episodes, and with explorer.max_timeout the env/timed_out_groups and
        env/retried_groups counts. Trinity-RFT runs a task (one env group's episodes) under
        max_timeout, runs a task that timed out again up to max_retry_times times, and leaves a task
        that never finished out of the step: an env group with an episode past the deadline is played
        again on fresh environments of the same seeds, then left out (its group, as one GRPO group)."""
        manager, groups, size = self.cfg.env.train_env_manager, self.plan.train_groups, self.cfg.env.train_env_manager.group_size
        deadline, retries = self.cfg.explorer.max_timeout, self.cfg.explorer.max_retry_times
        slots = self._slots(manager, "env.train_env_manager", groups, "s", step)
        trajs = self._play(rollout, manager, slots, params, version, f"s{step}", deadline)
        if deadline is None:
            return trajs, {}

        def late() -> list[int]:  # the groups with an episode still running at the deadline
            return [g for g in range(len(groups)) if any(t.timed_out for t in trajs[g * size : (g + 1) * size])]

        retried = 0
        for attempt in range(1, retries + 1):
            again = late()
            if not again:
                break
            retried += len(again)
            slots = self._slots(manager, "env.train_env_manager", groups, "s", step, only=again)
            played = self._play(rollout, manager, slots, params, version, f"s{step}r{attempt}", deadline)  # fresh sampling noise
            for k, g in enumerate(again):
                trajs[g * size : (g + 1) * size] = played[k * size : (k + 1) * size]
        dropped = late()
        if len(dropped) == len(groups):
            raise EnvError(f"step {step}: every env group had an episode still running after explorer.max_timeout "
                           f"({deadline:g} s) in each of its {retries + 1} attempt(s), so the step has nothing to train on; "
                           "raise explorer.max_timeout or explorer.max_retry_times, or lower the entries' max_steps")
        kept = [t for g in range(len(groups)) if g not in dropped for t in trajs[g * size : (g + 1) * size]]
        return kept, {"env/timed_out_groups": float(len(dropped)), "env/retried_groups": float(retried)}

    def validate(self, rollout: Any, params: SamplingParams, version: int, render_dir: Path | None = None) -> dict[str, float]:
        """Success rate, reward and turns per tag over the fixed validation groups; with `render_dir`
        (env.render_save_dir/global_step_N on the main process), every episode's frames as text there."""
        if not self.plan.val_groups:
            return {}
        manager = self.cfg.env.val_env_manager
        slots = self._slots(manager, "env.val_env_manager", self.plan.val_groups, "val", 0)
        trajs = self._play(rollout, manager, slots, params, version, "val")
        if render_dir is not None:
            write_episode_renders(render_dir, trajs, lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True))
        return episode_metrics(trajs, "val")

    def _prompts(self, trajs: list[Trajectory]) -> list[str]:
        return self.tokenizer.batch_decode([t.prompt_ids for t in trajs], skip_special_tokens=False)


def episode_metrics(trajs: list[Trajectory], prefix: str) -> dict[str, float]:
    """Episode count, mean success, reward, turns, invalid-action and truncation rates, overall and per tag."""
    by_tag: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_tag[t.tag].append(t)
    out: dict[str, float] = {}
    for name, group in [("", trajs), *((f"{tag}/", g) for tag, g in sorted(by_tag.items()))]:
        n = len(group)
        actions = sum(len(t.turns) for t in group)
        out[f"{prefix}/{name}episodes"] = float(n)
        out[f"{prefix}/{name}success"] = sum(t.success for t in group) / n
        out[f"{prefix}/{name}reward"] = sum(t.reward for t in group) / n
        out[f"{prefix}/{name}turns"] = actions / n
        out[f"{prefix}/{name}invalid_action_rate"] = sum(not x.valid for t in group for x in t.turns) / max(actions, 1)
        out[f"{prefix}/{name}truncated"] = sum(t.truncated for t in group) / n
        out[f"{prefix}/{name}failed"] = sum(t.failed is not None for t in group) / n  # env calls that raised, hung or were malformed
    sizes = Counter(a for row in anchor_ids(trajs) for a in row).values()
    # GiGPO's step groups: turns per distinct (group, state); 1.0 means no state was met twice
    out[f"{prefix}/step_group_size"] = sum(sizes) / max(len(sizes), 1)
    return out
