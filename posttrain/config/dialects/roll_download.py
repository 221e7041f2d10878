"""ROLL's ``model_download_type``: the hub its ``download_model`` fetches a model name from.

ROLL (roll/utils/checkpoint_manager.py) returns a model path that is a directory as it is, and
otherwise downloads the name with ModelScope's ``snapshot_download`` (its default, MODELSCOPE) or
Hugging Face's (HUGGINGFACE_HUB). posttrain never downloads: a directory is used as it is, and a
hub name is read from a local cache. HUGGINGFACE_HUB: the Hugging Face cache, as posttrain always
reads names (posttrain.models.loading.resolve_model_dir). MODELSCOPE: each hub name is replaced by
its directory in the local ModelScope cache (posttrain.files.modelscope_model_dir) in the file,
so the keys translated after this handler (the key walk) read the directory; a name that cache does not hold is refused as a model this machine lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from posttrain.config.dialects.translate import Context
from posttrain.config.tables import Rule
from posttrain.files import is_hub_name, modelscope_cache, modelscope_model_dir

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
    names = sorted({p for p in _model_paths(ctx.raw) if is_hub_name(p) and not Path(p).expanduser().is_dir()})
    if hub in (None, "HUGGINGFACE_HUB"):
        ctx.drop(KEY, f"{hub}: posttrain reads a hub name from the local Hugging Face cache (it never downloads)")
    elif hub != "MODELSCOPE":
        ctx.refuse(KEY, f"expected MODELSCOPE or HUGGINGFACE_HUB (ROLL's download functions), got {hub!r}", None, hub)
    elif not names:
        ctx.drop(KEY, "MODELSCOPE: every model path of the file is a directory, which ROLL uses as it is without downloading")
    else:
        _from_modelscope(ctx, names)


def _from_modelscope(ctx: Context, names: list[str]) -> None:
    """Each ModelScope name becomes its directory in the local ModelScope cache (what ROLL's
    snapshot_download returns there), in the file itself, so every key that names it reads the
    directory; a name the cache does not hold is refused, as a model this machine lacks."""
    found = {name: modelscope_model_dir(name) for name in names}
    missing = [name for name, folder in found.items() if folder is None]
    if missing:
        ctx.refuse(KEY, f"MODELSCOPE: model path {', '.join(map(repr, missing))} is not an existing local directory, nor a model the "
                        f"local ModelScope cache ({modelscope_cache()}, $MODELSCOPE_CACHE) holds. posttrain never downloads models at run "
                        f"time: on a connected machine run `modelscope download --model {missing[0]}` (it fills that cache), or point the "
                        "path at the model's directory", None, "MODELSCOPE")
        return
    _replace_names(ctx.raw, {name: str(folder) for name, folder in found.items()})
    ctx.drop(KEY, "MODELSCOPE: " + ", ".join(f"{name} read from {folder}" for name, folder in found.items())
             + " (the local ModelScope cache; posttrain never downloads)")


def _replace_names(node: Any, dirs: dict[str, str], prefix: str = "") -> None:
    """Put each model path's directory in place of its hub name, wherever _model_paths finds it."""
    if not isinstance(node, dict):
        return
    for name, value in node.items():
        key = f"{prefix}{name}"
        if isinstance(value, str) and value in dirs and (key in ("pretrain", "reward_pretrain") or key.endswith(".model_args.model_name_or_path")):
            node[name] = dirs[value]
        else:
            _replace_names(value, dirs, f"{key}.")


RULES: dict[str, Rule] = {
    KEY: Rule(None, "HUGGINGFACE_HUB, or any value with model paths that are directories: nothing (posttrain reads those as ROLL does); "
                    "MODELSCOPE with a hub name: the name is read from the local ModelScope cache ($MODELSCOPE_CACHE, by default "
                    "~/.cache/modelscope/hub), and refused as a model this machine lacks when that cache does not hold it", "HUGGINGFACE_HUB"),
}
HANDLERS = [model_download_type]
