"""`env`: environments of agentic (multi-turn) RL, after ROLL's agentic pipeline.

An env manager runs `num_env_groups` groups of `group_size` environments; the environments of one group
share config and seed, so their trajectories form one comparison group (like rollout.n for a prompt).
Setting `train_env_manager.tags` makes an RL stage agentic (posttrain.trainer.agentic, docs/agentic.md).
The env managers' sampling settings (`generating_args`) are rollout.* and rollout.val_kwargs.*
(posttrain.config.dialects.roll_agentic). `EnvManagerConfig` serves
both managers, so its refs are relative (``"roll:.group_size"``) to the holding field's (``roll:train_env_manager``). The agentic
reward normalisation lives in algorithm.agentic_reward_norm.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section


@section
class EnvManagerConfig:
    """Environments run by one env manager (training or validation)."""

    num_env_groups: int = param(1, doc="Environment groups run per step (validation: per validation); 0 runs one group per row of its tags' custom_envs episode_files (each tag's rows in turn: validation over every row once).", ge=0, refs=["roll:.num_env_groups", "roll:.env_groups"])
    group_size: int = param(1, doc="Environments per group; they share env config and seed.", ge=1, refs=["roll:.group_size"])
    tags: list[str] = param(factory=list, doc="Names of the environments (keys of env.custom_envs) to run.", refs=["roll:.tags"])
    num_groups_partition: list[int] = param(factory=list, doc="Groups given to each tag, in order; empty splits num_env_groups evenly.", refs=["roll:.num_groups_partition", "roll:.n_groups"])
    max_traj_per_env: int = param(-1, doc="Most episodes one environment may play per step (validation: per validation); -1 means as many as the step needs. Training environments play data.train_batch_size x rollout.n / (num_env_groups x group_size) episodes each, with their own seeds, validation ones one: a smaller value is refused, a larger one changes nothing.", ge=-1, refs=["roll:.max_traj_per_env"])
    format_penalty: float = param(0.0, doc="Reward added (a negative number) per action the action_pattern or the env rejects; a custom_envs entry's own format_penalty wins.", le=0)
    max_env_num_per_worker: int = param(0, doc="Most environments whose turns go to the engine in one generate call; 0 means all live ones.", ge=0, refs=["roll:.max_env_num_per_worker"])
    max_new_tokens: int | None = param(None, doc="Most new tokens of one action of any environment this manager runs: each action gets the smaller of it and the entry's max_tokens_per_step (which alone fills an agent_template's {max_response_length}); null: the entries' caps alone. ROLL's generating_args.max_new_tokens (actor_infer's reaches both managers).", ge=1)


@section
class EnvConfig:
    """Agentic environments and their managers."""

    custom_envs: dict[str, Any] = param(factory=dict, doc="Environment entries by tag: env_type, env_config, max_steps/max_actions_per_traj, max_tokens_per_step, format_penalty, action_pattern, env_instruction, and the prompt mode: prompt_mode (conversation, or window / observation_window: each action prompted afresh from agent_template with a window of history_window earlier steps, as ROLL's StepEnvManager / StepConcatEnvManager; or messages: the conversation the environment writes itself, as ROLL's AgentNativeStepEnvManager), history_steps, agent_system_template (docs/agentic.md).", refs=["roll:custom_envs"])
    train_env_manager: EnvManagerConfig = param(factory=EnvManagerConfig, doc="Environments that produce training trajectories.", refs=["roll:train_env_manager"])
    val_env_manager: EnvManagerConfig = param(factory=EnvManagerConfig, doc="Environments that produce validation trajectories.", refs=["roll:val_env_manager"])
    step_timeout: float | None = param(60.0, doc="Seconds one reset, step or state call of an environment may take; a slower call ends its trajectory as failed. Null waits forever.", gt=0)
    failure_penalty: float = param(0.0, doc="Reward of the turn whose environment call raised, hung or returned something malformed (that trajectory ends there).", le=0)
    max_failure_rate: float = param(0.1, doc="Share of a step's (or a validation's) episodes whose environment may fail before the run stops with the first failure's error.", ge=0, le=1)
    train_rows: str = param("episode", doc="What one training row of an agentic stage holds: episode (a whole episode, the model's turns masked in) or turn (one row per model turn: the context the engine was shown before it as the prompt, the turn's tokens as the response, the episode row's advantages and log-probs sliced onto it, as Trinity-RFT's multi_step_grpo and ROLL's StepEnvManager train; an entry in a window prompt mode needs it, its rows taking each action's own prompt). Rollout, rewards and advantages are the same; the loss then counts turn rows as sequences and mini-batches count turn rows (turn_mini_batch_size). With an agent function (rollout.agent.function), whose every call is a row either way, turn makes the calls turns of their episode: GRPO counts each episode once and gives every call its episode's advantage.", choices=("episode", "turn"))
    turn_mini_batch_size: int | None = param(None, doc="With train_rows turn: turn rows per optimizer step of the actor and the critic, so a step takes as many optimizer steps as its turns need (the last takes the rest); null shares a step's turn rows over the data.train_batch_size / ppo_mini_batch_size mini-batches an episode step takes (rounded up).", ge=1)
    render_save_dir: str | None = param(None, doc="Directory for the rendered frames of every validation episode: <dir>/global_step_<N>/<index>_<tag>_<reward>.txt per episode, its observations (posttrain's environments render as text) with the action between each two; null saves none.", refs=["roll:render_save_dir"])


_WORKER = ("a custom environment-worker class: posttrain's agent loop steps the environments itself (ROLL's own "
           "EnvironmentWorker is accepted); a custom environment is an env class (custom_envs.<tag>.env_type: module:Class)")
_HELPER = "template variable of ROLL's traj_envs.yaml: it does nothing by itself; where custom_envs interpolates it, its value was substituted there"

#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {
    # Keys met in the published examples (tests/config/corpus, benchmarks/foreign_corpus.py).
    **{f"roll:{m}.worker_cls": _WORKER for m in ("train_env_manager", "val_env_manager")},
    "roll:skip_mock_system_prompt": ("false strips the system block a chat template adds to a conversation that has none; posttrain renders "
                                     "turns with the template as it is (ROLL's true, accepted): an environment's env_instruction is its system "
                                     "message, or use a template without a default system prompt (data.chat_template)"),
}
# Reference keys any value of which changes nothing in posttrain (the loaders drop them with the reason).
NO_EFFECT: dict[str, str] = {
    "roll:parse_tool_call_parameter_to_dict": ("ROLL turns tool-call arguments into dicts before it renders the model's turns again "
                                               "with the chat template; posttrain never renders the model's turns again (it keeps the sampled tokens)"),
    **{f"roll:{m}.format_penalty": ("declared by ROLL's env manager config and read by none of its code: since its env managers "
                                    "stopped adding it (August 2025) only an environment's own env_config.format_penalty penalises "
                                    "an action, which posttrain reads from the custom_envs entry") for m in ("train_env_manager", "val_env_manager")},
    "roll:custom_env": "template library of ROLL's traj_envs.yaml: its entries reach posttrain through custom_envs' interpolations",
    "roll:default_history_length": ("template variable of ROLL's step_envs.yaml (the history_length its entries interpolate): "
                                    "not a field of ROLL's config, it does nothing by itself; where custom_envs interpolates it, "
                                    "its value was substituted there"),
    **{f"roll:{name}": _HELPER for name in (
        "env_manager_cls", "agent_runner_cls", "all_response_pattern", "action_pattern", "think_action_pattern", "max_tokens_per_step",
        "max_actions_per_traj", "sokoban_format_penalty", "frozen_format_penalty", "agent_system_template", "agent_template",
        "single_prompt_agent_system_template", "single_prompt_agent_template")},
}
