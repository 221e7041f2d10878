"""ROLL's ``model_download_type``: the hub its ``download_model`` fetches a model name from.

ROLL (roll/utils/checkpoint_manager.py) returns a model path that is a directory as it is, and
otherwise downloads the name with ModelScope's ``snapshot_download`` (its default, MODELSCOPE) or
Hugging Face's (HUGGINGFACE_HUB). posttrain never downloads: a directory is used as it is, and a
hub name is read from the local Hugging Face cache (posttrain.models.loading.resolve_model_dir).
So HUGGINGFACE_HUB is what posttrain does, and so is any value when every model path of the file is
a directory; MODELSCOPE with a hub name is refused, with where ModelScope keeps its copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule
from posttrain.files import is_hub_name

KEY = "model_download_type"


def _model_paths(node: Any, prefix: str = "") -> list[str]:
    """Every model path of a ROLL file: pretrain, reward_pretrain and each role's model_name_or_path."""
    found = []
    if isinstance(node, Mapping):
        for name, value in node.items():
            key = f"{prefix}{name}"
            if isinstance(value, str) and (key in ("pretrain", "reward_pretrain") or key.endswith(".model_args.model_name_or_path")):
                found.append(value)
            elif isinstance(value, Mapping):
                found.extend(_model_paths(value, f"{key}."))
    return found


def model_download_type(ctx: Context) -> None:
    if not ctx.has(KEY):
        return
    ctx.consume(KEY)
    hub = ctx.get(KEY)
    names = sorted({p for p in _model_paths(ctx.raw) if is_hub_name(p)})
    if hub in (None, "HUGGINGFACE_HUB"):
        ctx.drop(KEY, f"{hub}: posttrain reads a hub name from the local Hugging Face cache (it never downloads)")
    elif hub != "MODELSCOPE":
        ctx.refuse(KEY, f"expected MODELSCOPE or HUGGINGFACE_HUB (ROLL's download functions), got {hub!r}", None, hub)
    elif not names:
        ctx.drop(KEY, "MODELSCOPE: every model path of the file is a directory, which ROLL uses as it is without downloading")
    else:
        ctx.refuse(KEY, f"MODELSCOPE: ROLL fetches {', '.join(names)} from ModelScope; posttrain never downloads and reads hub "
                        "names from the local Hugging Face cache only: point the path at the model's directory (ModelScope's "
                        "copy is under $MODELSCOPE_CACHE, by default ~/.cache/modelscope/hub), or `hf download` it", None, hub)


RULES: dict[str, Rule] = {
    KEY: Rule(None, "HUGGINGFACE_HUB, or any value with model paths that are directories: nothing (posttrain reads those as ROLL does); "
                    "MODELSCOPE with a hub name: refused", "HUGGINGFACE_HUB"),
}
HANDLERS = [model_download_type]
