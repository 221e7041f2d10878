"""A JSON file of a role's model, read at translation time when the model is on this machine: a
local directory, or a hub name whose file the local Hugging Face cache holds (read offline). The
dialects use it where a foreign key's meaning depends on the model (its router coefficient, its
image patch size); on a machine without the model they read nothing and say so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def model_json(path: Any, filename: str) -> dict[str, Any] | None:
    """The parsed ``filename`` of model ``path``, or None where it is not on this machine or not a
    JSON object (an unreadable file is the model loader's to report)."""
    if not isinstance(path, str) or not path:
        return None
    file = Path(path).expanduser() / filename
    if not file.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, filename)
        except Exception:  # noqa: BLE001 - not a hub name: nothing cached under it
            return None
        if not isinstance(cached, str):
            return None
        file = Path(cached)
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def image_patch_size(path: Any) -> int | None:
    """The patch size of model ``path``'s image processor (its preprocessor_config.json's
    patch_size), or None where the model or the value is not on this machine."""
    value = (model_json(path, "preprocessor_config.json") or {}).get("patch_size")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
