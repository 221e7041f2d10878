"""Token ids of the text around the model's actions: the first prompt and each observation turn.

With a chat template the instruction is the system message, each observation a user message and
each action an assistant message; an observation that is a list of chat messages (a tool env's
``tool`` messages) is rendered as those messages. Observation turns are rendered as the template's *difference*
between a conversation ending with an assistant message and the same conversation with one more
user message and the generation prompt, so their tokens are exactly what the template would write
there. The model's own tokens are never re-tokenized: what the engine sampled is what is trained.
"""

from __future__ import annotations

import copy
import json
from typing import Any

_ACTION = "\x00ACTION\x00"  # a placeholder the templates pass through unchanged


class TurnRenderer:
    """Renders prompts and observation turns for one tokenizer and chat template (None: plain text)."""

    def __init__(self, tokenizer: Any, chat_template: str | None, tools: list[dict[str, Any]] | None = None,
                 template_kwargs: dict[str, Any] | None = None):
        """`tools` reach the template when a whole conversation is rendered (`conversation_text`);
        observation turns are differences, which the tools do not change. `template_kwargs` (e.g.
        enable_thinking, which changes the generation prompt) reach every render."""
        self.tokenizer, self.template = tokenizer, chat_template
        self.tools, self.template_kwargs = tools or None, dict(template_kwargs or {})
        self.eos_text = tokenizer.eos_token or ""
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (self.eos_id or 0)

    def with_template_kwargs(self, kwargs: dict[str, Any]) -> "TurnRenderer":
        """This renderer with `kwargs` over its template variables (an env entry's own enable_thinking);
        itself when they change nothing."""
        merged = {**self.template_kwargs, **kwargs}
        if merged == self.template_kwargs:
            return self
        other = copy.copy(self)
        other.template_kwargs = merged
        return other

    def decode(self, ids: list[int]) -> str:
        """An action's text, special tokens (the EOS that ended it) removed."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _render(self, messages: list[dict[str, Any]], generation: bool, tools: list[dict[str, Any]] | None = None) -> str:
        return self.tokenizer.apply_chat_template(
            messages, chat_template=self.template, tools=tools, tokenize=False, add_generation_prompt=generation, **self.template_kwargs
        )

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, instruction: str, observation: str) -> list[int]:
        """The first prompt: instruction (system message, when there is one) and first observation."""
        if self.template is None:
            return self._ids(f"{instruction}\n{observation}\n" if instruction else f"{observation}\n")
        messages = [{"role": "system", "content": instruction}] if instruction else []
        return self._ids(self._render([*messages, {"role": "user", "content": observation}], True))

    def messages_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """A conversation an environment wrote itself (prompt_mode messages), with the generation prompt
        and the environment's `tools` (None: none): the prompt of the model's next action."""
        if self.template is None:
            head = f"{json.dumps(tools)}\n" if tools else ""
            return self._ids(head + "".join(f"{m['content']}\n" for m in messages))
        return self._ids(self._render(messages, True, tools))

    def conversation_text(self, messages: list[dict[str, Any]], generation: bool) -> str:
        """A whole conversation in the template, with the tools and the data's template variables."""
        return self._render(messages, generation, self.tools)

    def ids(self, text: str) -> list[int]:
        return self._ids(text)

    def observation_ids(self, observation: str | list[dict[str, Any]], ended: bool) -> list[int]:
        """Tokens after an action: the close of the assistant turn (less the EOS the model already
        wrote when `ended`), the observation as a user turn (or as its messages), and the
        generation prompt."""
        messages = [{"role": "user", "content": observation}] if isinstance(observation, str) else list(observation)
        if self.template is None:
            return self._ids("".join(f"\n{m['content']}" for m in messages) + "\n")
        turn = [{"role": "user", "content": "."}, {"role": "assistant", "content": _ACTION}]
        base = self._render(turn, False)
        full = self._render([*turn, *messages], True)
        if not full.startswith(base) or _ACTION not in base:
            raise ValueError("the chat template rewrites earlier turns when a message follows; multi-turn rollout needs one that appends")
        close = base[base.index(_ACTION) + len(_ACTION):]  # e.g. "<|im_end|>\n" after the assistant's text
        if ended and self.eos_text and close.startswith(self.eos_text):
            close = close[len(self.eos_text):]  # the model wrote it: its sampled token stays, not a second one
        return self._ids(close + full[len(base):])
