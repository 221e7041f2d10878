"""Trinity-RFT's SFT and DPO data: ``buffer.trainer_input.experience_buffer`` read from files.

An ``algorithm_type: sft`` or ``dpo`` run of Trinity-RFT reads its rows from the experience buffer's
files (storage_type ``file``, the default) and shapes them with the buffer's ``format`` keys
(Trinity-RFT's SFT and DPO formatters). posttrain's SFT/DPO stages read the same rows from
``data.train_files`` with the ``data.*`` column keys, so the buffer translates there:

- ``path`` + ``split`` + ``subset_name`` -> ``data.train_files`` (as a taskset's, trinity_files);
- ``format.prompt_type: messages`` (Trinity's default): ``messages_key`` (default ``message``) holds
  the SFT conversation or the DPO prompt -> ``data.messages_key``; an SFT row trains only its final
  message unless ``enable_concatenated_multi_turn`` -> ``data.sft_loss_turns``;
- ``format.prompt_type: plaintext``: ``prompt_key``, ``response_key`` (SFT), ``system_prompt`` and
  ``system_prompt_key`` -> the ``data`` keys of the same names;
- ``chosen_key`` / ``rejected_key`` (DPO), ``tools_key`` (SFT) and ``chat_template`` -> ``data.*``.

Format keys Trinity-RFT does not read for the row layout given are dropped, naming that. An RL run's
buffer holds the explorer's own experiences, so there the format keys are left to the key-by-key
translation (posttrain.config.sections.buffer refuses them with the reason).
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_algorithms import TYPES
from posttrain.config.dialects.trinity_files import data_files, storage_fields
from posttrain.config.tables import Rule

EB = "buffer.trainer_input.experience_buffer"
_NOT_WRITTEN = "Trinity-RFT's default (not written in the file)"
_RL = ("read only when an SFT or DPO run (algorithm_type sft/dpo) loads its rows from files; posttrain's RL trainer "
       "reads the experiences its own explorer wrote to the buffer, not a dataset shaped by column keys")
_PLAIN_ONLY = ("prompt_key", "response_key", "system_prompt", "system_prompt_key")
_MESSAGES_ONLY = ("messages_key", "enable_concatenated_multi_turn")


def _kind(ctx: Context, default: str | None) -> str | None:
    name = ctx.get("algorithm.algorithm_type", default)
    return TYPES[name].kind if name in TYPES else None


def experience_files(ctx: Context, default_type: str | None = "ppo") -> None:
    """An SFT/DPO run's experience buffer as ``data.train_files`` and ``data.*`` column keys."""
    buf = ctx.get(EB)
    kind = _kind(ctx, default_type)
    if not isinstance(buf, dict) or kind is None:
        return
    storage_fields(ctx, EB, buf)
    if kind == "rl":
        for name in ("format", "split", "subset_name"):
            if name in buf:
                ctx.consume(f"{EB}.{name}")
                ctx.refuse(f"{EB}.{name}", _RL, None, buf[name])
        return
    ctx.consume(*(f"{EB}.{name}" for name in ("path", "split", "subset_name", "storage_type", "name", "format")))
    storage = buf.get("storage_type", "file")  # Trinity's StorageConfig default
    if storage != "file":
        ctx.refuse(f"{EB}.storage_type", f"posttrain's {kind.upper()} stage reads its rows from files (data.train_files); write the {storage} buffer's rows to a jsonl or parquet file and point path there", None, storage)
    elif "storage_type" in buf:
        ctx.drop(f"{EB}.storage_type", f"file: the {kind.upper()} rows are read from files, as posttrain does")
    if "name" in buf:
        ctx.drop(f"{EB}.name", f"names the buffer in Trinity-RFT; posttrain's {kind.upper()} stage reads data.train_files")
    if "path" in buf and f"{EB}.path" not in ctx.unresolved:
        split = buf.get("split", "train")
        try:
            files = data_files(buf["path"], split, buf.get("subset_name"))
        except ValueError as err:
            ctx.refuse(f"{EB}.path", str(err), "data.train_files", getattr(err, "entry", buf["path"]))
        else:
            for name in ("split", "subset_name"):
                if name in buf:
                    ctx.drop(f"{EB}.{name}", f"read with {EB}.path into data.train_files")
            ctx.set("data.train_files", files, f"{EB}.path", f"the {kind.upper()} rows, split {split!r}")
    _format(ctx, kind, buf.get("format") or {})


def stage_experience_files(ctx: Context) -> None:
    """A stage's experience buffer: only when the stage names its own algorithm_type."""
    if ctx.has("algorithm.algorithm_type"):
        experience_files(ctx, None)


def _format(ctx: Context, kind: str, fmt: dict[str, Any]) -> None:
    prefix = f"{EB}.format"
    prompt_type = fmt.get("prompt_type", "messages")  # Trinity's FormatConfig default
    if prompt_type not in ("messages", "plaintext"):
        ctx.refuse(f"{prefix}.prompt_type", f"Trinity-RFT's SFT/DPO rows are messages or plaintext, not {prompt_type!r}", None, prompt_type)
        return
    if "prompt_type" in fmt:
        ctx.drop(f"{prefix}.prompt_type", f"{prompt_type}: the data.* keys below say where posttrain reads the row")
    if prompt_type == "messages":
        messages_key = fmt.get("messages_key", "message")  # Trinity's FormatConfig default
        what = "conversation" if kind == "sft" else "prompt messages"
        ctx.set("data.messages_key", messages_key, f"{prefix}.messages_key", f"the {what}" + ("" if "messages_key" in fmt else f"; {_NOT_WRITTEN}"))
        if kind == "sft":
            every = fmt.get("enable_concatenated_multi_turn", False)
            why = "every assistant turn" if every else "the final message only" + ("" if "enable_concatenated_multi_turn" in fmt else f" ({_NOT_WRITTEN})")
            ctx.set("data.sft_loss_turns", "all" if every else "last", f"{prefix}.enable_concatenated_multi_turn", f"SFT loss on {why}")
    for name, value in fmt.items():
        key = f"{prefix}.{name}"
        if name == "prompt_type" or (prompt_type == "messages" and (name == "messages_key" or (name == "enable_concatenated_multi_turn" and kind == "sft"))):
            continue  # translated above
        if prompt_type == "messages" and name in _PLAIN_ONLY:
            ctx.drop(key, "read for plaintext rows only in Trinity-RFT; a messages row carries its own system message")
        elif prompt_type == "plaintext" and name in _MESSAGES_ONLY:
            ctx.drop(key, "read for messages rows only in Trinity-RFT (prompt_type is plaintext)")
        elif name == "enable_concatenated_multi_turn":
            ctx.drop(key, "an SFT setting; Trinity-RFT's DPO rows ignore it")
        elif name == "response_key" and kind == "dpo":
            ctx.drop(key, "an SFT column; a DPO row's responses are chosen_key and rejected_key")
        elif name in ("chosen_key", "rejected_key") and kind == "sft":
            ctx.drop(key, "a DPO column; an SFT row's response is response_key (or the conversation)")
        elif name == "tools_key" and kind == "dpo":
            ctx.drop(key, "Trinity-RFT's DPO rows are rendered without tools")
        elif name in ("prompt_key", "response_key", "system_prompt", "system_prompt_key", "chosen_key", "rejected_key", "tools_key", "chat_template"):
            ctx.set(f"data.{name}", value, key)
        else:
            ctx.refuse(key, f"not a column key of Trinity-RFT's {kind.upper()} rows that posttrain reads (data.* holds those)", None, value)


_SFT = (("algorithm.algorithm_type", "sft"), (f"{EB}.path", "org/dataset"))
_DPO = (("algorithm.algorithm_type", "dpo"), (f"{EB}.path", "org/dataset"))
_PLAIN_SFT = (*_SFT, (f"{EB}.format.prompt_type", "plaintext"))
_PLAIN_DPO = (*_DPO, (f"{EB}.format.prompt_type", "plaintext"))
# Keys experience_files translates (docs/config-mapping.md reads these through posttrain.config.dialects.trinity.RULES).
RULES: dict[str, Rule] = {
    f"{EB}.path": Rule("data.train_files", "algorithm_type sft/dpo: the rows' files (a local file, the split's files in a local folder, else PATH[:SUBSET]@SPLIT); an RL run's buffer file stays buffer.trainer_input.experience_buffer.path", "org/dataset", (("algorithm.algorithm_type", "sft"),)),
    f"{EB}.subset_name": Rule(None, "algorithm_type sft/dpo: the configuration of the rows' dataset, read with path into data.train_files", "main", _SFT),
    f"{EB}.split": Rule(None, "algorithm_type sft/dpo: the split of the rows' dataset, read with path into data.train_files", "train", _SFT),
    f"{EB}.format.prompt_type": Rule(None, "algorithm_type sft/dpo: messages (Trinity-RFT's default) or plaintext; the data.* keys it selects say where posttrain reads the row", "plaintext", _SFT),
    f"{EB}.format.messages_key": Rule("data.messages_key", "prompt_type messages: the SFT conversation or the DPO prompt messages (Trinity-RFT's default column: message)", "chat", _SFT),
    f"{EB}.format.enable_concatenated_multi_turn": Rule("data.sft_loss_turns", "SFT messages rows: true trains every assistant turn (all), false (Trinity-RFT's default) the final message only (last)", True, _SFT),
    f"{EB}.format.prompt_key": Rule("data.prompt_key", "prompt_type plaintext: the user prompt", "question", _PLAIN_SFT),
    f"{EB}.format.response_key": Rule("data.response_key", "prompt_type plaintext, SFT: the response", "answer", _PLAIN_SFT),
    f"{EB}.format.system_prompt": Rule("data.system_prompt", "prompt_type plaintext: a system prompt for every row", "be brief", _PLAIN_SFT),
    f"{EB}.format.system_prompt_key": Rule("data.system_prompt_key", "prompt_type plaintext: a per-row system prompt, winning over system_prompt", "system", _PLAIN_SFT),
    f"{EB}.format.chosen_key": Rule("data.chosen_key", "DPO: the preferred response (a string, or assistant messages)", "good", _PLAIN_DPO),
    f"{EB}.format.rejected_key": Rule("data.rejected_key", "DPO: the rejected response (a string, or assistant messages)", "bad", _PLAIN_DPO),
    f"{EB}.format.tools_key": Rule("data.tools_key", "SFT: the column of each row's tool schemas, passed to the chat template as tools", "tools", _SFT),
    f"{EB}.format.chat_template": Rule("data.chat_template", "the Jinja chat template of these rows (null: the model's)", "{{ messages[0]['content'] }}", _SFT),
}
