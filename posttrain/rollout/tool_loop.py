"""Tool calling (verl's multi-turn rollout) on the agent loop: a batch of prompts in, a batch of
multi-turn responses out, shaped as the engine's `generate` shapes them.

Each of the `n` responses to a prompt is one `ToolEnv` conversation (`posttrain.tools`) played
by the agent loop (`posttrain.rollout.agent_loop`), which batches every live conversation's next
turn into one `generate` call. The prompt is the data's, templated with the tool schemas; a
response is the model's turns interleaved with the tools' answers (rendered by the chat template as
tool turns), and `loss_mask` is 1.0 on the model's tokens only. The batch then goes through the
stage's reward function like any batch; the tool rewards and an interaction's turn scores reach it
in ``extra_info``. `tool_metrics` sums what the tools did into ``tool/*`` metrics.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Sequence

import torch

from posttrain.config.sections.rollout import MultiTurnConfig
from posttrain.envs.spec import EnvSpec
from posttrain.tools import PARSERS, ToolEnv, ToolLimits, build_tools, load_tool_config
from posttrain.tools.config import load_interactions
from posttrain.tools.interpreter import CodeInterpreter
from posttrain.errors import ConfigError, DataError
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.agent_loop import EnvSlot, Generate, LoopLimits, run_episodes
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.trajectory import Trajectory, to_rollout_batch
from posttrain.rollout.turns import TurnRenderer

log = logging.getLogger(__name__)


class ToolRollout:
    """The tools, interactions and limits of `rollout.multi_turn`, and the loop that plays them."""

    def __init__(self, mt: MultiTurnConfig, tokenizer: Any, template: str | None, template_kwargs: dict[str, Any] | None = None,
                 max_prompt_length: int = 1 << 30, hidden_paths: Sequence[str] = ()):
        """`hidden_paths`: directories the code interpreter must not see (the run directory)."""
        specs = load_tool_config(mt.tool_config_path) if mt.tool_config_path else []
        self.schemas = [s.schema for s in specs]
        self.tools = build_tools(specs)
        for tool in self.tools.values():
            if isinstance(tool, CodeInterpreter):
                tool.hide(hidden_paths)
        self.interactions = load_interactions(mt.interaction_config_path) if mt.interaction_config_path else {}
        self.mt, self.parser = mt, PARSERS[mt.format]
        self.limits = ToolLimits(mt.max_assistant_turns, mt.max_user_turns, mt.max_parallel_calls,
                                 mt.max_tool_response_length, mt.tool_response_truncate_side)
        self.renderer = TurnRenderer(tokenizer, template, self.schemas, template_kwargs)
        self.max_prompt_length = max_prompt_length
        self._warned = False

    def generate(self, generate: Generate, prompts: PromptBatch, params: SamplingParams, version: int) -> tuple[RolloutBatch, dict[str, float]]:
        """`params.n` conversations per prompt, rows of a prompt adjacent; the batch and its tool/* metrics."""
        slots, envs, rows = [], [], []
        for i in range(len(prompts)):
            ids = prompts.input_ids[i][prompts.attention_mask[i] > 0].tolist()
            interaction, kwargs = self._interaction(prompts, i)
            for k in range(params.n):
                env = ToolEnv(self.tools, self.parser, self.limits, interaction, kwargs, f"{prompts.uid[i]}/{k}")
                # max_steps never binds: every turn has >= 1 token and the response length ends the loop
                spec = EnvSpec(str(prompts.data_source[i]), "tools", ToolEnv, {}, params.max_new_tokens, None, None, None, "")
                context = self._inference_context(env, prompts, i) if self.mt.use_inference_chat_template else None
                slots.append(EnvSlot(env, spec, 0, str(prompts.uid[i]), 0.0, prompt_ids=ids, context=context))
                envs.append(env)
                rows.append(i)
        limits = LoopLimits(self.max_prompt_length, params.max_new_tokens)
        if params.deadline is not None:  # explorer.max_timeout: checked between turns, and by the engine within one
            limits = replace(limits, deadline=params.deadline - time.time(), clock=time.time)
        trajs = run_episodes(slots, generate, params, self.renderer, limits, f"{prompts.uid[0]}/tool")
        mismatch = [self._mismatch(t, env, prompts.raw_chat[i]) for t, env, i in zip(trajs, envs, rows)]
        batch = to_rollout_batch(trajs, self.renderer.pad_id, version, [prompts.raw_prompt[i] for i in rows])
        batch.group_index = [str(prompts.uid[i]) for i in rows]
        batch.data_source = [prompts.data_source[i] for i in rows]
        batch.ground_truth = [prompts.ground_truth[i] for i in rows]
        batch.extra_info = [{**dict(prompts.extra_info[i] or {}), "tool_rewards": list(env.stats.tool_rewards),
                             "turn_scores": list(env.stats.turn_scores), "num_turns": len(t.turns)}
                            for t, env, i in zip(trajs, envs, rows)]
        batch.raw_chat = [prompts.raw_chat[i] for i in rows]
        if params.deadline is not None:  # the conversations the deadline ended (RolloutBatch.timed_out)
            batch.timed_out = torch.tensor([t.timed_out for t in trajs], dtype=torch.bool)
        return batch, tool_metrics(trajs, envs, mismatch)

    def _interaction(self, prompts: PromptBatch, i: int) -> tuple[Any, dict[str, Any]]:
        """The row's interaction (extra_info.interaction_kwargs.name, as verl) and its kwargs."""
        if not self.interactions:
            return None, {}
        kwargs = dict((prompts.extra_info[i] or {}).get("interaction_kwargs") or {})
        name = kwargs.get("name", next(iter(self.interactions)) if len(self.interactions) == 1 else None)
        if name not in self.interactions:
            raise DataError(f"data row {prompts.index[i]} ({prompts.data_source[i]}): extra_info.interaction_kwargs.name is "
                            f"{name!r}; rollout.multi_turn.interaction_config_path defines {sorted(self.interactions)}")
        kwargs["name"] = name
        return self.interactions[name], kwargs

    def _inference_context(self, env: ToolEnv, prompts: PromptBatch, i: int):
        """use_inference_chat_template: the next prompt is the row's messages and the turns so far,
        re-rendered by the template (which may, e.g., drop earlier reasoning), not the exact tokens."""
        chat = prompts.raw_chat[i]
        if chat is None:
            raise ConfigError("rollout.multi_turn.use_inference_chat_template: needs each prompt's messages; set data.return_raw_chat: true")
        return lambda traj: self.renderer.ids(self.renderer.conversation_text([*chat, *env.messages], True))

    def _mismatch(self, traj: Trajectory, env: ToolEnv, chat: Any) -> bool:
        """tokenization_sanity_check_mode: whether the turn-by-turn response tokens differ from the
        template's rendering of the same turns (after the row's messages, else a one-word user turn)."""
        mode = self.mt.tokenization_sanity_check_mode
        if mode == "disable" or not env.messages:
            return False
        prefix = list(chat) if chat is not None else [{"role": "user", "content": "."}]
        base = self.renderer.conversation_text(prefix, True)
        full = self.renderer.conversation_text([*prefix, *env.messages], False)
        expected = full[len(base):] if full.startswith(base) else full  # a template that rewrites earlier turns differs
        # the response must be the start of the template's rendering (which goes on to close the last turn)
        differ = self.renderer.ids(expected)[: len(traj.response_ids)] != traj.response_ids
        turns = self.renderer.tokenizer.decode(traj.response_ids, skip_special_tokens=False)
        if differ and mode == "ignore_strippable":  # only whitespace differs: not counted
            differ = not "".join(expected.split()).startswith("".join(turns.split()))
        if differ and not self._warned:
            self._warned = True
            log.warning("rollout.multi_turn: a conversation's turn-by-turn tokens differ from the chat template's rendering of "
                        "its messages (tool/tokenization_mismatch counts them); got %r, the template writes %r", turns[:200], expected[:200])
        return differ


def tool_metrics(trajs: Sequence[Trajectory], envs: Sequence[ToolEnv], mismatch: Sequence[bool], prefix: str = "tool") -> dict[str, float]:
    """Per-conversation means and the call success rate of a batch (docs/agentic.md lists them)."""
    n = max(len(envs), 1)
    calls = sum(e.stats.calls for e in envs)
    total = lambda attr: sum(getattr(e.stats, attr) for e in envs)
    return {
        f"{prefix}/calls_per_traj": calls / n,
        f"{prefix}/call_success_rate": total("succeeded") / calls if calls else 0.0,
        f"{prefix}/parse_failures_per_traj": total("parse_failures") / n,
        f"{prefix}/unknown_tool_per_traj": total("unknown_tool") / n,
        f"{prefix}/failed_calls_per_traj": total("failed") / n,
        f"{prefix}/truncated_responses_per_traj": total("truncated") / n,
        f"{prefix}/dropped_calls_per_traj": total("dropped") / n,
        f"{prefix}/trajs_with_call": sum(e.stats.calls > 0 for e in envs) / n,
        f"{prefix}/assistant_turns": sum(e.assistant_turns for e in envs) / n,
        f"{prefix}/tokenization_mismatch": sum(mismatch) / n,
    }
