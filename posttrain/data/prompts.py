"""From a row to chat messages, from messages to token ids, and truncation.

A prompt cell is either a string (one user message) or a chat message list ``[{role, content}]``
as in verl's RL parquet files. `PromptFormatter` holds what every row needs (tokenizer, resolved
chat template, system prompt, template variables), is picklable for worker processes, and turns
messages into ids the way verl does: render the template to text, then tokenise the text without
adding special tokens (the template already wrote them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from posttrain.errors import ConfigError, DataError
from posttrain.files import read_utf8

Message = dict[str, str]
TRUNCATIONS = ("error", "left", "right", "middle")


def resolve_chat_template(spec: str | None, tokenizer: Any) -> str:
    """The template text from `data.chat_template`: inline jinja, a .jinja file, or null for the
    tokenizer's own. Text containing ``{{`` or ``{%`` is a template; anything else is a path."""
    if spec is None:
        template = getattr(tokenizer, "chat_template", None)
        if not template:
            raise ConfigError("data.chat_template: the tokenizer has no chat template; set data.chat_template to a jinja template or the path of a .jinja file")
        if isinstance(template, dict):  # several named templates: the default one is used
            template = template.get("default") or next(iter(template.values()))
        return template
    if "{{" in spec or "{%" in spec:
        return spec
    path = os.path.expanduser(spec)
    if not os.path.isfile(path):
        raise ConfigError(f"data.chat_template: file not found: {spec} (inline templates must contain '{{{{' or '{{%')")
    return read_utf8(path, lambda message: ConfigError(f"data.chat_template: {message}"))


def kept_ends(n: int, max_len: int, mode: str) -> tuple[int, int]:
    """(head, tail): how many of `n` tokens truncation keeps from the start and from the end.
    ``left`` keeps the end, ``right`` the start, ``middle`` both halves (the start gets the smaller
    half, as in verl); ``error`` keeps everything here and leaves refusing to the caller.

    >>> kept_ends(10, 5, "middle"), kept_ends(10, 5, "left"), kept_ends(4, 5, "right")
    ((2, 3), (0, 5), (4, 0))
    """
    if mode not in TRUNCATIONS:
        raise ValueError(f"unknown truncation mode {mode!r}; expected one of {TRUNCATIONS}")
    if n <= max_len or mode == "error":
        return n, 0
    if mode == "left":
        return 0, max_len
    if mode == "right":
        return max_len, 0
    return max_len // 2, max_len - max_len // 2


def cut(seq: list[Any], head: int, tail: int) -> list[Any]:
    """The first `head` and last `tail` items of `seq` (ids and their loss mask are cut alike)."""
    return seq[:head] + (seq[len(seq) - tail :] if tail else [])


def too_long(what: str, n: int, max_len: int, limit: str, hint: str = "") -> str:
    """The message of a sequence longer than its limit under data.truncation: error."""
    return (
        f"{what}: {n} tokens after the chat template, longer than {limit}={max_len}; raise {limit} or set "
        f"data.truncation to left, right or middle{hint}"
    )


def truncate(ids: list[int], max_len: int, mode: str, *, what: str, limit: str, hint: str = "") -> list[int]:
    """Cut `ids` to `max_len` (see `kept_ends`); ``error`` raises a DataError starting with `what`
    (file, row, column) that names the `limit` key and the fixes."""
    if len(ids) > max_len and mode == "error":
        raise DataError(too_long(what, len(ids), max_len, limit, hint))
    return cut(ids, *kept_ends(len(ids), max_len, mode))


def check_messages(value: Any, *, what: str) -> list[Message]:
    """A chat message list as plain dicts; anything else is a DataError starting with `what`."""
    if not isinstance(value, (list, tuple)) or not value:
        raise DataError(f"{what}: expected a non-empty list of chat messages {{role, content}}, got {_describe(value)}")
    out = []
    for j, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise DataError(f"{what}: message {j} must be an object with string 'role' and 'content', got {_describe(m)}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def as_messages(value: Any, *, what: str, role: str = "user") -> list[Message]:
    """A string cell becomes one message with `role`; a list must be chat messages."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, (list, tuple)):
        return check_messages(value, what=what)
    raise DataError(f"{what}: expected a string or a list of chat messages, got {_describe(value)}")


def follow_keys(value: Any, keys: Sequence[str], *, what: str, setting: str) -> Any:
    """Walk `keys` into nested dicts (verl's prompt_dict_keys/response_dict_keys)."""
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            raise DataError(f"{what}: no key '{key}' inside the cell ({_describe(value)}); check {setting}")
        value = value[key]
    return value


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


@dataclass
class PromptFormatter:
    """Messages → text → token ids for one tokenizer and one chat template.

    `user_prefix` goes before every user message's content when rendering (a named template's
    instruction), `user_suffix` after it (data.user_suffix); `reply_prefix` is the start of the assistant's reply in every prompt: the prompt is
    rendered with an assistant message holding it, which the template continues instead of opening
    a new turn, so the response the policy generates follows it.
    """

    tokenizer: Any
    chat_template: str
    system_prompt: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    user_prefix: str = ""
    user_suffix: str = ""
    reply_prefix: str | None = None

    def with_system(self, messages: list[Message], system: str | None = None) -> list[Message]:
        """Put `system` (or the configured system prompt) first unless a system message exists."""
        system = system if system is not None else self.system_prompt
        if system is None or (messages and messages[0]["role"] == "system"):
            return messages
        return [{"role": "system", "content": system}, *messages]

    def render(self, messages: list[Message], *, generation_prompt: bool, what: str, continue_final: bool = False) -> str:
        """The chat template applied to `messages`; a template error names the row (`what`).
        `continue_final` leaves the last (assistant) message open instead of closing its turn."""
        import jinja2

        if self.user_prefix or self.user_suffix:
            messages = [{**m, "content": self.user_prefix + m["content"] + self.user_suffix} if m["role"] == "user" else m
                        for m in messages]
        try:
            text = self.tokenizer.apply_chat_template(
                messages,
                chat_template=self.chat_template,
                add_generation_prompt=generation_prompt,
                continue_final_message=continue_final,
                tokenize=False,
                **self.template_kwargs,
            )
        except jinja2.TemplateError as e:
            raise DataError(f"{what}: the chat template failed on this row: {e}") from e
        except ValueError as e:  # transformers: the template dropped or rewrote the message to continue
            if not continue_final:
                raise
            raise DataError(f"{what}: the chat template does not write data.reply_prefix {self.reply_prefix!r} back as an "
                            f"open assistant message ({str(e).splitlines()[0]}); use a template that renders the assistant's content as given") from e
        if not isinstance(text, str):  # some versions return a list for batched input
            text = text[0]
        return text

    def encode(self, text: str) -> list[int]:
        """Token ids of already-templated text (no extra BOS/EOS: the template wrote them)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_prompt(self, messages: list[Message], *, what: str) -> tuple[str, list[int]]:
        """(templated text, ids) of a prompt, ending with the assistant generation header, or with
        the reply prefix inside the open assistant turn when one is set."""
        if self.reply_prefix:
            opened = [*messages, {"role": "assistant", "content": self.reply_prefix}]
            text = self.render(opened, generation_prompt=False, what=what, continue_final=True)
        else:
            text = self.render(messages, generation_prompt=True, what=what)
        return text, self.encode(text)

    def encode_conversation(self, messages: list[Message], *, loss_from: int, what: str, trim_final_newline: bool = False) -> tuple[list[int], list[int]]:
        """(input_ids, loss_mask) of a whole conversation: the mask is 1 on the tokens of every
        assistant message at index >= `loss_from` (its content and end-of-turn tokens), 0 elsewhere.
        `trim_final_newline`: a newline the template writes after the last message is cut off (ROLL's
        SFT rows end at the end-of-turn token: data.sft_trim_final_newline).

        Why spans of text: each assistant turn is located by rendering the conversation up to it
        (with the generation header) and through it; the full text is tokenised once and each token
        is assigned by its character offset, so the ids equal those of tokenising the whole text.
        This needs a template that renders earlier turns unchanged when later turns are added.
        """
        full = self.render(messages, generation_prompt=False, what=what)
        spans = []
        for i in range(loss_from, len(messages)):
            if messages[i]["role"] != "assistant":
                continue
            before = self.render(messages[:i], generation_prompt=True, what=what) if i else ""
            # the last message's rendering is `full` itself: one render fewer per conversation
            through = full if i == len(messages) - 1 else self.render(messages[: i + 1], generation_prompt=False, what=what)
            if not (full.startswith(through) and through.startswith(before)):
                raise DataError(f"{what}: the chat template renders message {i} differently once later messages follow, so the loss cannot be placed on it; use a template that leaves earlier turns unchanged (data.chat_template)")
            spans.append((len(before), len(through)))
        if not spans:
            raise DataError(f"{what}: no assistant message to train on; a conversation needs at least one message with role 'assistant'")
        if trim_final_newline and full.endswith("\n"):
            full = full[:-1]
            spans = [(s, min(e, len(full))) for s, e in spans]
        return self._ids_and_mask(full, spans)

    def _ids_and_mask(self, text: str, spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
        if getattr(self.tokenizer, "is_fast", False):
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            ids = list(enc["input_ids"])
            mask = [int(any(s <= start < e for s, e in spans)) for start, _ in enc["offset_mapping"]]
            return ids, mask
        # Slow tokenizers have no offsets: tokenise the text piece by piece at the span borders.
        ids, mask, pos = [], [], 0
        for s, e in spans:
            for piece, bit in ((text[pos:s], 0), (text[s:e], 1)):
                piece_ids = self.encode(piece) if piece else []
                ids += piece_ids
                mask += [bit] * len(piece_ids)
            pos = e
        tail = self.encode(text[pos:]) if text[pos:] else []
        return ids + tail, mask + [0] * len(tail)
