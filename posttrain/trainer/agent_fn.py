"""A user's agent function inside the RL step (`rollout.agent.function`; docs/agentic.md, "Agent functions").

The step is the ordinary one (`RLTrainer.step`); only the source of the batch changes. The step's
task rows come from `data.train_files` through the usual sampler; each row is given to the agent
function `rollout.n` times (posttrain.rollout.agent_fn) with a base URL on the stage's loopback
endpoint served by the rollout role at this step's weights (posttrain.rollout.agent_endpoint).
Every call the function makes is recorded and becomes a training row with its episode's reward
(posttrain.rollout.agent_rows); the reward function is not called. `learn` trains on the rows
unchanged. Validation runs the function over `data.val_files` with `rollout.val_kwargs`' sampling
and reports the mean reward, calls and failures.
"""

from __future__ import annotations

from typing import Any

from posttrain.algorithms.registry import ADVANTAGE_ESTIMATORS, estimator_needs
from posttrain.buffer.experience import Experience
from posttrain.config.schema import Config
from posttrain.buffer.operators import run_pipeline
from posttrain.errors import ConfigError, UserError
from posttrain.records import PromptBatch
from posttrain.rewards.auxiliary import check_models as check_auxiliary_models, start_auxiliary
from posttrain.rollout.agent_endpoint import AgentEndpoint, PolicySampling
from posttrain.rollout.agent_fn import AgentEpisode, AgentError, AgentLimits, AgentTask, load_agent_function, run_agent_episodes
from posttrain.rollout.agent_rows import episode_rows
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.chat_parsing import ChatParsing
from posttrain.data.dataset import thinking_kwargs
from posttrain.trainer.metrics import PhaseTimer
from posttrain.trainer.rl_settings import response_length

KEY = "rollout.agent.function"


def has_agent_fn(cfg: Config) -> bool:
    return cfg.algorithm.kind == "rl" and cfg.rollout.agent.function is not None


def check_agent_fn(cfg: Config) -> None:
    """What an agent-function stage cannot combine with, refused before any model is loaded; the
    function is imported (a missing file or name is named here)."""
    if not has_agent_fn(cfg):
        if cfg.rollout.agent.log_requests:
            raise ConfigError("rollout.agent.log_requests: it logs the requests of an agent function's episodes, and this stage "
                              "runs none (rollout.agent.function); remove it")
        return
    problems = []
    if cfg.rollout.multi_turn.enable:
        problems.append("rollout.multi_turn.enable: the agent function makes its own calls and runs its own tools; remove rollout.multi_turn")
    if cfg.env.train_env_manager.tags:
        problems.append("env.train_env_manager.tags: an agentic stage plays posttrain's environments; the agent function is the "
                        "environment of its own episodes: keep one of the two")
    problems += _turn_problems(cfg)
    if cfg.algorithm.filter_groups.enable and not (cfg.env.train_rows == "turn" and cfg.algorithm.filter_groups.std_threshold is not None):
        problems.append("algorithm.filter_groups: dynamic sampling re-samples prompts through the reward function; an agent "
                        "function returns its own rewards: remove algorithm.filter_groups")
    if cfg.reward.launch_reward_fn_async:
        problems.append("reward.launch_reward_fn_async: the agent function returns the reward with its episode, so there is no "
                        "scoring to overlap; remove it")
    if cfg.reward.custom_reward_function.path is not None or cfg.reward.reward_model.enable or cfg.reward.workers:
        problems.append("reward.custom_reward_function / reward_model / workers: the agent function's return value is the episode's "
                        "reward; score inside the function (it gets the row, ground truth included)")
    name = cfg.algorithm.adv_estimator
    needs = estimator_needs(name) if name in ADVANTAGE_ESTIMATORS else None
    if needs is not None and (needs.turns or needs.greedy_baseline):
        problems.append(f"algorithm.adv_estimator: {name} needs {needs.describe()}, which agent-function episodes do not have; use grpo, "
                        "rloo or another outcome estimator")
    if problems:
        raise ConfigError(problems)
    a = cfg.rollout.agent
    fn = load_agent_function(a.function, KEY, a.kwargs)
    if a.val_kwargs:
        load_agent_function(a.function, "rollout.agent.val_kwargs", {**a.kwargs, **a.val_kwargs})
    # a built-in agent may say what its settings need on this machine (an API key, say): `check_kwargs`
    check = getattr(getattr(fn, "func", fn), "check_kwargs", None)
    problems = list(check(dict(a.kwargs), "rollout.agent.kwargs")) if callable(check) else []
    if callable(check) and a.val_kwargs:
        problems += [p for p in check({**a.kwargs, **a.val_kwargs}, "rollout.agent.val_kwargs") if p not in problems]
    try:
        check_auxiliary_models(cfg.reward.auxiliary_models, cfg.cluster)  # served to the function: a missing model is refused now
    except ConfigError as e:
        problems = e.problems + problems
    if problems:
        raise ConfigError(problems)


# the estimator whose advantage is one number per row, so that an episode's can be given to each of its calls
EPISODE_ESTIMATOR = "grpo"


def _turn_problems(cfg: Config) -> list[str]:
    """env.train_rows turn with an agent function: its calls are the turns of their episode, which
    counts once in the advantages (Trinity-RFT's multi_step_grpo; trainer.advantages.episode_advantages)."""
    alg = cfg.algorithm
    if cfg.env.train_rows != "turn":  # turn_mini_batch_size without it: posttrain.trainer.agentic's check says so
        return []
    problems = []
    name = alg.adv_estimator
    if name not in ADVANTAGE_ESTIMATORS or ADVANTAGE_ESTIMATORS[name] is not ADVANTAGE_ESTIMATORS[EPISODE_ESTIMATOR]:
        problems.append(f"algorithm.adv_estimator: {name} with env.train_rows turn: an agent function's episode is given one advantage "
                        "for all its calls, which posttrain computes with grpo (Trinity-RFT's multi_step_grpo); use grpo, or "
                        "env.train_rows episode")
    per_token = [k for k, on in (("algorithm.use_kl_in_reward", alg.use_kl_in_reward), ("algorithm.whiten_rewards", alg.whiten_rewards)) if on]
    if per_token:
        problems.append(f"{', '.join(per_token)}: with env.train_rows turn an agent function's episode is scored by its last call's row "
                        "alone, so a per-token reward term would read that call only; remove it or use env.train_rows episode")
    return problems


def make_agent_fn(cfg: Config, tokenizer: Any, inputs: Any, pad_id: int, world_size: int, halves: str) -> AgentFnRollout:
    """The stage's agent-function rollout; its calls are served by this process's engine between two updates."""
    if halves != "learner" and world_size > 1:
        raise UserError(f"{KEY}: the agent's calls arrive at one process's endpoint and are served by its engine; this run has "
                        f"{world_size} processes generating ({halves}): generate in one process (one device, or a decoupled run "
                        "whose explorer has one)")
    context = cfg.data.max_prompt_length + response_length(cfg)  # what a call's prompt and answer may hold
    return AgentFnRollout(cfg, tokenizer, inputs.train_set, inputs.val_set, pad_id, context)


class AgentFnRollout:
    """Runs each step's episodes against the rollout role and turns their calls into the batch."""

    def __init__(self, cfg: Config, tokenizer: Any, train_set: Any, val_set: Any, pad_id: int, max_context: int):
        a = cfg.rollout.agent
        self.cfg, self.tokenizer, self.train_set, self.val_set, self.pad_id = cfg, tokenizer, train_set, val_set, pad_id
        self.fn, self.name = load_agent_function(a.function, KEY, a.kwargs), a.function
        # validation's episodes: the same function with rollout.agent.val_kwargs over kwargs
        self.val_fn = load_agent_function(a.function, "rollout.agent.val_kwargs", {**a.kwargs, **a.val_kwargs}) if a.val_kwargs else self.fn
        self.limits = AgentLimits(a.max_concurrency, a.timeout, a.failure_penalty, a.max_failure_rate)
        self.max_context = max_context
        self.endpoint: AgentEndpoint | None = None  # started at the first episode
        # reward.auxiliary_models: served, from the first episode, by the process that runs the episodes,
        # so that the function can ask a judge (posttrain.rewards.auxiliary.chat, or any OpenAI client at
        # POSTTRAIN_AUX_<NAME>_URL); a decoupled run's learner runs none and serves none
        self.auxiliary = None

    def close(self) -> None:
        if self.endpoint is not None:
            self.endpoint.shutdown()
            self.endpoint = None
        if self.auxiliary is not None:
            self.auxiliary.stop()
            self.auxiliary = None

    def explore(self, rollout: Any, prompts: PromptBatch, params: SamplingParams, version: int, timer: PhaseTimer,
                policy_step: int = 0, operators: list | None = None) -> Experience:
        """Run rollout.n episodes per task row of `prompts`; the recorded calls as `Experience`, through
        the experience pipeline's `operators` (data_processor.experience_pipeline) as every batch."""
        tasks = [AgentTask(uid, s, plain_row(self.train_set.table.rows[i]), i) for uid, i in zip(prompts.uid, prompts.index) for s in range(params.n)]
        with timer("gen"):
            episodes = self._run(rollout, tasks, params, version, prompts.uid[0] if prompts.uid else "s")
        batch, scores = episode_rows(episodes, self.pad_id)
        if len(batch) == 0:  # only with max_failure_rate 1: every episode failed and was dropped
            raise AgentError(f"{episodes[0].failed} (every episode of this step was dropped: nothing to train on; fix the agent "
                             "function or set rollout.agent.failure_penalty to train on failed episodes' calls)")
        texts = self.tokenizer.batch_decode([r[m > 0].tolist() for r, m in zip(batch.response_ids, batch.response_mask)], skip_special_tokens=False)
        metrics = episode_metrics(episodes, "agent")
        if operators:
            batch, scores, texts, piped = run_pipeline(operators, batch, scores, texts)
            metrics.update(piped)
        return Experience(batch, scores, texts, metrics, policy_step=policy_step)

    def validate(self, rollout: Any, params: SamplingParams, version: int) -> dict[str, float]:
        """The function over every validation row (rollout.val_kwargs.n episodes each): mean reward, calls, failures."""
        if self.val_set is None:
            return {}
        rows = [self.val_set[k].index for k in range(len(self.val_set))]
        tasks = [AgentTask(f"val-{i}", s, plain_row(self.val_set.table.rows[i]), i) for i in rows for s in range(params.n)]
        return episode_metrics(self._run(rollout, tasks, params, version, "val", self.val_fn), "val/agent")

    def _run(self, rollout: Any, tasks: list[AgentTask], params: SamplingParams, version: int, prefix: str,
             fn: Any = None) -> list[AgentEpisode]:
        if self.auxiliary is None and self.cfg.reward.auxiliary_models:
            self.auxiliary = start_auxiliary(self.cfg.reward.auxiliary_models, seed=self.cfg.trainer.seed, cluster=self.cfg.cluster)
        if self.endpoint is None:
            self.endpoint = AgentEndpoint(self.tokenizer, "policy", parsing=agent_parsing(self.cfg),
                                          template_kwargs={**thinking_kwargs(self.cfg.data), **self.cfg.data.apply_chat_template_kwargs},
                                          log_requests=self.cfg.rollout.agent.log_requests)

        def generate(prompts, p):  # one call of one episode: the rollout role, at this step's weights
            return rollout.generate(prompts, p, expected_version=version)

        self.endpoint.set_policy(PolicySampling(generate, version, params, self.max_context))
        return run_agent_episodes(fn or self.fn, self.name, tasks, self.endpoint, self.limits, prefix.split("-")[0])


def agent_parsing(cfg: Config) -> ChatParsing:
    """How the endpoint reads the policy's tool calls and reasoning (rollout.agent.*)."""
    a = cfg.rollout.agent
    return ChatParsing(a.tool_call_parser, a.enable_auto_tool_choice, a.reasoning_parser,
                       setting="rollout.agent.enable_auto_tool_choice true and rollout.agent.tool_call_parser")


def episode_metrics(episodes: list[AgentEpisode], prefix: str) -> dict[str, float]:
    """Episodes, mean reward (kept episodes), calls per episode, failed and dropped shares, the function's own metrics."""
    kept = [e for e in episodes if e.reward is not None]
    n = max(len(episodes), 1)
    out = {f"{prefix}/episodes": float(len(episodes)),
           f"{prefix}/reward": sum(e.reward for e in kept) / max(len(kept), 1),
           f"{prefix}/calls": sum(len(e.record.calls) for e in episodes) / n,
           f"{prefix}/failed": sum(e.failed is not None for e in episodes) / n,
           f"{prefix}/dropped": (len(episodes) - len(kept)) / n}
    names = sorted({k for e in kept for k in e.metrics})
    for name in names:
        values = [e.metrics[name] for e in kept if name in e.metrics]
        out[f"{prefix}/{name}"] = sum(values) / len(values)
    return out


def plain_row(row: Any) -> Any:
    """A data row as plain Python (a parquet file's arrays become lists, numpy scalars numbers), a
    fresh copy for every episode, so an agent may change its row freely.

    >>> import numpy as np
    >>> plain_row({"prompt": np.array([{"role": "user", "content": "hi"}]), "n": np.int64(3)})
    {'prompt': [{'role': 'user', 'content': 'hi'}], 'n': 3}
    """
    if isinstance(row, dict):
        return {k: plain_row(v) for k, v in row.items()}
    if isinstance(row, (list, tuple)):
        return [plain_row(v) for v in row]
    if hasattr(row, "tolist"):  # numpy arrays and scalars
        return plain_row(row.tolist())
    return row
