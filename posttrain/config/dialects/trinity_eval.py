"""Trinity-RFT evaluation tasksets that prompt or score otherwise than the training taskset.

In Trinity-RFT every evaluation taskset carries its own ``workflow_args`` and ``reward_fn_args``
(they are not inherited from the training taskset), so a DAPO run may train on a base model's
plain-text prompts with the overlong penalty and evaluate a benchmark in the chat template without
it (examples/dapo_math). posttrain's home for such differences is ``data.val_file_settings``: one
record per ``data.val_files`` entry (posttrain.config.sections.data.ValFileConfig). `own_setting`
writes one field of it for every file of one evaluation taskset.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.report import Entry
from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_files import data_files

NATIVE = "data.val_file_settings"


def eval_files(ctx: Context, prefix: str, item: dict[str, Any]) -> list[str] | None:
    """The data.val_files entries of the evaluation taskset ``item`` at ``prefix`` (as the taskset
    translation appends them), None when its path is refused or unresolved."""
    if f"{prefix}.path" in ctx.unresolved or ".eval_tasksets[" not in prefix:
        return None
    try:
        return data_files(item.get("path"), item.get("split", "test"), item.get("subset_name"))
    except ValueError:
        return None


def own_setting(ctx: Context, prefix: str, item: dict[str, Any], field: str, value: Any, key: str, reason: str) -> bool:
    """Set data.val_file_settings.<file>.<field> = value for each file of the evaluation taskset;
    False (nothing set) when its files are not known, and the caller refuses the key."""
    files = eval_files(ctx, prefix, item)
    if not files:
        return False
    settings = ctx.native.setdefault("data", {}).setdefault("val_file_settings", {})
    for entry in files:
        settings.setdefault(entry, {})[field] = value
    shown = value if not isinstance(value, str) or len(value) < 40 else value[:37] + "..."
    ctx.report.add(Entry(key, "translated", f"{NATIVE}.<entry>.{field}", shown, f"{reason}, for {', '.join(files)}"))
    return True
