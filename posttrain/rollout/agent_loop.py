"""The agent loop: many environments played at once against one rollout engine, turn by turn.

Every turn, the contexts of all live environments (prompt plus the response so far) go to the
engine together, one `generate` call per group of at most `envs_per_call` environments (all of them
by default), so generation is batched across environments exactly as it is across prompts in the
single-turn path. Each row's new tokens become that environment's action; its answer is appended as
context; environments that finished drop out of the next turn's batch. The episodes become
`Trajectory` records (`posttrain.rollout.trajectory`), whose `to_rollout_batch` the unchanged
learner trains on.

Budgets: an action gets at most the env's `max_tokens_per_step` new tokens, and the whole response
(actions and observations) at most `max_response_length`, so the batch fits the shapes the rest of
the step was sized for. An episode ends when its env says done, after `max_steps` actions, or when
the next observation would leave no room for another action (the last two are `truncated`), or
when an env call raises, hangs past `env.step_timeout` or answers malformed (`failed`, with the
failure penalty; posttrain.rollout.env_guard). Each turn records the env's state for step-level
credit (`anchor_state`). With a `deadline` (explorer.max_timeout: Trinity-RFT's per-task timeout,
all of a call's episodes starting together), an episode still live when it has passed ends before
its next turn as `timed_out`; it is checked between turns, so one env call is bounded by
env.step_timeout, not by the deadline. A `params.deadline` (tool calling: the engine stops decoding at
it) ends an episode whose action the engine cut the same way, before any env call sees the action.

An entry in a window prompt mode (posttrain.envs.window) is shown a prompt written afresh before each
action (its instruction, a window of earlier steps, the current observation) instead of the episode
so far: its response then holds the actions only, each prompt is kept in `turn_prompts`,
`max_response_length` caps each action (not their sum: each trains as a sequence of its own), and
the episode is also truncated when the next prompt would exceed `max_prompt_length`. In prompt_mode
messages that prompt is the conversation the environment returned, through the chat template.

With `max_total` (model.max_model_len) every action also fits the engine's context with what precedes
it, and an episode whose next context would fill it is truncated, in every prompt mode.

An observation may be a picture (prompt_mode conversation, a vision-language policy): its turn holds
the picture's image tokens, and each episode's pictures travel with its prompts to the engine and
with its row to the trainer (posttrain.rollout.episode_images).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np
import torch

from posttrain.envs.base import EnvError, check_observation, check_step, is_image, where
from posttrain.envs.spec import EnvSpec
from posttrain.envs.window import PastStep
from posttrain.errors import ConfigError
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.env_guard import EnvFailure, FailureCount, FaultPolicy, call_env
from posttrain.rollout.episode_images import SPAN, EpisodeImages
from posttrain.rollout.trajectory import Trajectory, Turn
from posttrain.rollout.turns import TurnRenderer

Generate = Callable[[PromptBatch, SamplingParams], RolloutBatch]


@dataclass
class EnvSlot:
    """One environment of a batch and what the loop needs to run it."""

    env: Any  # an `posttrain.envs.Env`
    spec: EnvSpec
    seed: int
    group: str  # the GRPO group (shared by the environments of one env group)
    format_penalty: float  # added per rejected action: the entry's, else its manager's
    prompt_ids: list[int] | None = None  # a prompt templated already (tool calling: the data's); None renders the env's
    context: Callable[[Trajectory], list[int]] | None = None  # the engine's next prompt; None: prompt + response so far


@dataclass(frozen=True)
class LoopLimits:
    max_prompt_length: int
    max_response_length: int
    envs_per_call: int = 0  # environments per generate call; 0: all live ones (max_env_num_per_worker)
    faults: FaultPolicy = FaultPolicy()  # timeouts and failure penalties of env calls (env.step_timeout, ...)
    deadline: float | None = None  # seconds the episodes may run (explorer.max_timeout); None: no limit
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)  # seconds; tests pass a fake one
    max_total: int | None = None  # prompt + response tokens the engine's context holds (model.max_model_len); None: no cap
    turn_cap: int | None = None  # new tokens of any one action (the env manager's max_new_tokens); None: the entries' caps alone


def run_episodes(
    slots: Sequence[EnvSlot], generate: Generate, params: SamplingParams, renderer: TurnRenderer,
    limits: LoopLimits, uid_prefix: str, images: EpisodeImages = EpisodeImages(),
) -> list[Trajectory]:
    """Play one episode in every slot; returns their trajectories in slot order. `images`: the
    policy's image side, for environments that show pictures (posttrain.rollout.episode_images)."""
    failures = FailureCount(len(slots), limits.faults)
    started = limits.clock()
    trajectories = [_start(slot, renderer, limits, failures, images) for slot in slots]
    live = [i for i, t in enumerate(trajectories) if t.failed is None]
    turn = 0
    while live:
        if limits.deadline is not None and limits.clock() - started > limits.deadline:
            for i in live:  # Trinity-RFT cancels a task past max_timeout: these episodes end unfinished
                trajectories[i].timed_out = True
            break
        turn += 1
        size = limits.envs_per_call or len(live)
        for first in range(0, len(live), size):
            chunk = live[first : first + size]
            budgets = [_budget(slots[i].spec, trajectories[i], limits) for i in chunk]
            prompts = _contexts([slots[i] for i in chunk], [trajectories[i] for i in chunk], renderer,
                                [f"{uid_prefix}/{i}/t{turn}" for i in chunk])
            # one response per environment: the group is made of environments, not of samples
            out = generate(prompts, replace(params, n=1, max_new_tokens=max(budgets)))
            for row, i in enumerate(chunk):
                ids = out.response_ids[row][out.response_mask[row] > 0][: budgets[row]].tolist()
                logprobs = out.rollout_logprobs[row][out.response_mask[row] > 0][: budgets[row]].tolist()
                if out.timed_out is not None and bool(out.timed_out[row]):
                    # the engine stopped this action at params.deadline: unfinished, so no env call parses it
                    trajectories[i].add(ids, logprobs)
                    trajectories[i].timed_out = True
                    continue
                _act(slots[i], trajectories[i], ids, logprobs, turn, renderer, limits, failures, images)
        live = [i for i in live if not (trajectories[i].done or trajectories[i].truncated or trajectories[i].failed or trajectories[i].timed_out)]
    return trajectories


def _name(slot: EnvSlot) -> str:
    return f"{slot.spec.tag} ({slot.spec.env_type})"


def _start(slot: EnvSlot, renderer: TurnRenderer, limits: LoopLimits, failures: FailureCount,
           images: EpisodeImages = EpisodeImages()) -> Trajectory:
    renderer = renderer.with_template_kwargs(slot.spec.template_kwargs)  # the entry's enable_thinking
    head = where(_name(slot), slot.seed, None)
    try:
        first = call_env(lambda: slot.env.reset(seed=slot.seed), limits.faults.step_timeout, head, "reset")
        first = check_observation(first, _name(slot), slot.seed, None, _native(slot.spec))
        suffix = env_suffix(slot, None, limits.faults.step_timeout)
        tools = env_tools(slot, limits.faults.step_timeout) if _native(slot.spec) else None
    except (EnvFailure, EnvError) as failure:
        # no first observation, so no action: a row of one environment token that trains nothing
        traj = Trajectory(slot.spec.tag, slot.seed, slot.group, renderer.prompt_ids(slot.spec.instruction, ""), failed=str(failure))
        traj.add([renderer.eos_id if renderer.eos_id is not None else renderer.pad_id], None)
        traj.turns.append(Turn((0, 0), (0, 1), "", limits.faults.failure_penalty, True, None))
        failures.add(failure)
        return traj
    traj = Trajectory(slot.spec.tag, slot.seed, slot.group, [], observation=first, suffix=suffix, tools=tools)
    picture = is_image(first)
    if picture:
        images.check(_name(slot), slot.spec.window is not None or slot.prompt_ids is not None)
        first = SPAN  # the picture's place in the first user turn
    if slot.spec.window is not None:
        traj.prompt_ids = window_prompt_ids(slot.spec, traj, renderer)
        traj.turn_prompts, traj.observations = [traj.prompt_ids], [_shown(first)]
    elif slot.prompt_ids is not None:
        traj.prompt_ids = slot.prompt_ids
    elif slot.spec.turns is not None and isinstance(first, str):
        spec = slot.spec
        traj.prompt_ids = renderer.prompt_ids(*spec.turns.first(spec.instruction, first, spec.max_steps, spec.max_tokens_per_step, traj.suffix))
    else:
        traj.prompt_ids = renderer.prompt_ids(slot.spec.instruction, first)
    if picture:
        traj.prompt_ids, shown, at = images.expand(traj.prompt_ids, [traj.observation], 0, where(_name(slot), slot.seed, None))
        traj.pictures.inputs += shown
        traj.pictures.positions += at
    if len(traj.prompt_ids) > limits.max_prompt_length:
        raise ConfigError(
            f"data.max_prompt_length: the first prompt of {where(_name(slot), slot.seed, None)} has {len(traj.prompt_ids)} "
            f"tokens (instruction and first observation), more than {limits.max_prompt_length}; raise it"
        )
    if _full(limits, len(traj.prompt_ids)):
        raise ConfigError(f"model.max_model_len: the first prompt of {where(_name(slot), slot.seed, None)} has {len(traj.prompt_ids)} "
                          f"tokens, which leaves no room for an action in {limits.max_total}; raise it")
    return traj


def _native(spec: EnvSpec) -> bool:
    """Whether the entry's environment writes the whole conversation itself (prompt_mode messages)."""
    return spec.window is not None and spec.window.mode == "messages"


def _shown(observation: str | list[dict[str, str]]) -> str:
    """The text of an observation as an episode's frames show it: in prompt_mode messages the
    conversation's newest message (what the environment answered)."""
    return observation if isinstance(observation, str) else observation[-1]["content"]


def window_prompt_ids(spec: EnvSpec, traj: Trajectory, renderer: TurnRenderer) -> list[int]:
    """The prompt of the trajectory's next action in the entry's window mode: its earlier steps
    (`traj.observations` pairs with `traj.turns`) and the current observation; in prompt_mode
    messages, the conversation the environment returned."""
    if _native(spec):
        return renderer.messages_ids(traj.observation, traj.tools)
    past = [PastStep(o, spec.parse_action(t.action_text) or "", t.reward, t.valid) for o, t in zip(traj.observations, traj.turns)]
    system, user = spec.window.messages(spec.instruction, past, str(traj.observation), spec.max_tokens_per_step, traj.suffix)
    return renderer.prompt_ids(system, user)


def _budget(spec: EnvSpec, traj: Trajectory, limits: LoopLimits) -> int:
    if spec.window is not None:  # each action is a sequence of its own: max_response_length caps each one
        left = limits.max_response_length
        context = len(traj.turn_prompts[-1])
    else:
        left = limits.max_response_length - len(traj.response_ids)
        context = len(traj.prompt_ids) + len(traj.response_ids)
    if limits.max_total is not None:  # the context and the action share the engine's length
        left = min(left, limits.max_total - context)
    caps = [c for c in (spec.max_tokens_per_step, limits.turn_cap) if c is not None]
    return min([left, *caps])  # >= 1: an episode without room has ended


def _contexts(slots: Sequence[EnvSlot], trajs: Sequence[Trajectory], renderer: TurnRenderer, uids: list[str]) -> PromptBatch:
    """Prompt plus response so far of each trajectory (or its slot's `context`), left-padded: the next turn's prompts."""
    rows = [t.turn_prompts[-1] if t.turn_prompts else s.context(t) if s.context is not None else t.prompt_ids + t.response_ids
            for s, t in zip(slots, trajs)]
    width = max(len(r) for r in rows)
    pad = renderer.pad_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], dtype=torch.long)  # (B, P)
    mask = torch.tensor([[0.0] * (width - len(r)) + [1.0] * len(r) for r in rows])  # (B, P)
    vision = [t.pictures.vision() for t in trajs]  # the pictures shown so far, their tokens counted from each row's first
    return PromptBatch(input_ids=ids, attention_mask=mask, uid=uids, data_source=[t.tag for t in trajs],
                       **({"vision": vision} if any(v is not None for v in vision) else {}))


def _act(slot: EnvSlot, traj: Trajectory, ids: list[int], logprobs: list[float], turn: int,
         renderer: TurnRenderer, limits: LoopLimits, failures: FailureCount, images: EpisodeImages = EpisodeImages()) -> None:
    """Record the model's action, step the env with it, and append the env's answer as context.
    An env call that fails ends the trajectory with the failure penalty (`env_guard`)."""
    renderer = renderer.with_template_kwargs(slot.spec.template_kwargs)  # the entry's enable_thinking
    span = traj.add(ids, logprobs)
    text = renderer.decode(ids)
    action = slot.spec.parse_action(text)
    reward, valid, state = 0.0, action is not None, None
    try:
        state = anchor_state(slot, traj, turn, limits.faults.step_timeout)  # the state the action was taken in (GiGPO)
        if action is not None:  # a text the pattern rejects never reaches the env: the state stays
            raw = call_env(lambda: slot.env.step(action), limits.faults.step_timeout, where(_name(slot), slot.seed, turn), "step")
            result = check_step(raw, _name(slot), slot.seed, turn, _native(slot.spec))
            reward, traj.observation, traj.done = result.reward, result.observation, result.done
            if not traj.done:
                traj.suffix = env_suffix(slot, turn, limits.faults.step_timeout)
            valid = bool(result.info.get("action_is_valid", True))
            traj.success = bool(result.info.get("success", False))
    except (EnvFailure, EnvError) as failure:
        traj.failed = str(failure)
        traj.turns.append(Turn(span, (span[1], span[1]), text, limits.faults.failure_penalty, True, state))
        failures.add(failure)
        return
    if not valid:
        reward += slot.format_penalty
    observation: tuple[int, int] = (span[1], span[1])
    picture = not traj.done and is_image(traj.observation)
    if picture:
        images.check(_name(slot), slot.spec.window is not None)
    if not traj.done:
        if turn >= slot.spec.max_steps:
            traj.truncated = True
        elif slot.spec.window is None:
            shown = SPAN if picture else traj.observation
            answer = renderer.observation_ids(_observation_turn(slot.spec, shown, turn, traj.suffix), ended=bool(ids) and ids[-1] == renderer.eos_id)
            if picture:  # its tokens start where the response so far ends
                answer, inputs, at = images.expand(answer, [traj.observation], len(traj.prompt_ids) + len(traj.response_ids),
                                                   where(_name(slot), slot.seed, turn))
            if len(traj.response_ids) + len(answer) >= limits.max_response_length or _full(limits, len(traj.prompt_ids) + len(traj.response_ids) + len(answer)):
                traj.truncated = True  # no room left for one more action after this observation
            else:
                observation = traj.add(answer, None)
                if picture:
                    traj.pictures.inputs += inputs
                    traj.pictures.positions += at
    traj.turns.append(Turn(span, observation, text, reward, valid, state))
    if slot.spec.window is not None and not (traj.done or traj.truncated):
        _next_window(slot, traj, renderer, limits)


def _observation_turn(spec: EnvSpec, observation: Any, turn: int, suffix: str = "") -> Any:
    """The user turn after action `turn` (from 1): the observation, through the entry's agent_template if it has one."""
    if spec.turns is None or not isinstance(observation, str):
        return observation
    return spec.turns.user(observation, turn + 1, spec.max_steps - turn, spec.max_tokens_per_step, suffix)


def env_suffix(slot: EnvSlot, turn: int | None, timeout: float | None) -> str:
    """The env's optional `suffix()`: text ROLL's managers write after the current observation (GEM's
    task suffix, e.g. "enter your next guess"); "" when it has none."""
    suffix = getattr(slot.env, "suffix", None)
    if not callable(suffix):
        return ""
    value = call_env(suffix, timeout, where(_name(slot), slot.seed, turn), "suffix()")
    if value is not None and not isinstance(value, str):
        raise EnvFailure(f"{where(_name(slot), slot.seed, turn)}: suffix() returned a {type(value).__name__}; it must return a str or None")
    return value or ""


def env_tools(slot: EnvSlot, timeout: float | None) -> list[dict[str, Any]] | None:
    """The env's optional `tools()` after its reset (prompt_mode messages): tool schemas for the chat template."""
    tools = getattr(slot.env, "tools", None)
    if not callable(tools):
        return None
    value = call_env(tools, timeout, where(_name(slot), slot.seed, None), "tools()")
    if value is not None and not (isinstance(value, list) and all(isinstance(t, dict) for t in value)):
        raise EnvFailure(f"{where(_name(slot), slot.seed, None)}: tools() returned {value!r:.80}; it must return a list of tool "
                         "schemas (dicts) or None")
    return value or None


def _full(limits: LoopLimits, context: int) -> bool:
    """Whether a context of this many tokens leaves no room for an action under limits.max_total (ROLL's
    env managers stop an episode once its input reaches sequence_length)."""
    return limits.max_total is not None and context >= limits.max_total


def _next_window(slot: EnvSlot, traj: Trajectory, renderer: TurnRenderer, limits: LoopLimits) -> None:
    """Write the next action's window prompt, or end the episode when it does not fit."""
    ids = window_prompt_ids(slot.spec, traj, renderer)
    if len(ids) > limits.max_prompt_length or _full(limits, len(ids)):
        traj.truncated = True  # as ROLL's step managers stop an episode whose next prompt fills the sequence
        return
    traj.turn_prompts.append(ids)
    traj.observations.append(_shown(traj.observation))


def anchor_state(slot: EnvSlot, traj: Trajectory, turn: int, timeout: float | None) -> Any:
    """The env's `state()` when it has one (any hashable value), else the observation the model
    was shown: equal values are the same environment state."""
    state = getattr(slot.env, "state", None)
    if not callable(state):
        observation = traj.observation  # a tool env's observation is a list of messages: compared as JSON
        if is_image(observation):  # a picture: compared by its pixels
            return hashlib.blake2b(np.asarray(observation).tobytes(), digest_size=16).hexdigest()
        return observation if isinstance(observation, str) else json.dumps(observation, sort_keys=True)
    value = call_env(state, timeout, where(_name(slot), slot.seed, turn), "state()")
    try:
        hash(value)
    except TypeError as e:
        raise EnvFailure(f"{where(_name(slot), slot.seed, turn)}: state() returned an unhashable {type(value).__name__}") from e
    return value
