"""What is wrong with a model directory's files, in one line, where transformers would give a
traceback, a message that does not name the file, or nothing at all.

- Text files (config.json, the tokenizer's files, chat_template.jinja) that are not UTF-8: looked
  for only once a load has failed, so a healthy directory costs nothing.
- Weight files, before the weights are read: a safetensors file must hold its whole header and
  every byte its header points at (a cut-short download or copy is caught here, from the header
  alone); a sharded index must name shards that exist.
- After loading: a tensor whose shape differs from what config.json describes, or a tensor the
  model needs that the files lack, would be silently initialised at random by transformers; here
  it is an error naming the tensor and both shapes (a critic's or reward model's new head is the
  one expected exception).

Pickle-only directories (``pytorch_model.bin``, no safetensors) are loaded: transformers reads them
with ``torch.load(weights_only=True)``, which unpickles tensors and plain containers only and
refuses any other object, so loading one cannot run code. A file that holds other objects, or is
not a readable PyTorch file, is refused in one line naming it and how to convert it.
"""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path
from typing import Any

from posttrain.errors import ModelError
from posttrain.files import read_utf8

logger = logging.getLogger(__name__)

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE = "pytorch_model.bin"
PICKLE_INDEX = "pytorch_model.bin.index.json"
CONVERT_HINT = (
    "re-save it as safetensors where it was made (model.save_pretrained(DIR), whose default is "
    "safetensors) or copy it again"
)

# The text files transformers reads from a model or tokenizer directory.
TEXT_FILES = (
    "config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
    "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json",
    "vocab.json", "merges.txt",
)


def check_text_files(local: Path) -> None:
    """Raise a ModelError naming the first text file of `local` that is not UTF-8 (with its byte
    offset and the fix); return when all are UTF-8."""
    for name in TEXT_FILES:
        path = local / name
        if path.is_file():
            read_utf8(path, ModelError)


def weight_files(local: Path) -> list[Path]:
    """The weight files transformers will read from `local` (safetensors first, as it does);
    a ModelError when there are none or an index names a missing shard."""
    for index, single in ((SAFETENSORS_INDEX, SAFETENSORS), (PICKLE_INDEX, PICKLE)):
        if (local / index).is_file():
            try:
                shards = sorted(set(json.loads(read_utf8(local / index, ModelError))["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                raise ModelError(f"{local / index}: not a valid weight index ({err}); {CONVERT_HINT}") from None
            missing = [name for name in shards if not (local / name).is_file()]
            if missing:
                raise ModelError(f"{local / index} names shard {missing[0]}, which is missing from {local}; copy it again")
            return [local / name for name in shards]
        if (local / single).is_file():
            return [local / single]
    raise ModelError(
        f"{local} has no weights ({SAFETENSORS} or {PICKLE}); point the path at a directory written by "
        "save_pretrained (or `posttrain make-model tiny`)"
    )


def check_weight_files(local: Path) -> None:
    """Check every safetensors file's header against its size, before any weight is read."""
    for path in weight_files(local):
        if path.suffix == ".safetensors":
            check_safetensors(path)


def check_safetensors(path: Path) -> None:
    """A safetensors file is an 8-byte little-endian header length, a JSON header giving each
    tensor's byte range, then the data: a file shorter than the header's last range was cut short."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if length < 0 or length > size - 8:
            raise ModelError(
                f"{path}: truncated or not a safetensors file ({size} bytes, too short for its own header); "
                f"{CONVERT_HINT}"
            )
        try:
            header = json.loads(f.read(length))
            ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
            raise ModelError(f"{path}: corrupt safetensors header ({err}); {CONVERT_HINT}") from None
    needed = 8 + length + max(ends, default=0)
    if size < needed:
        raise ModelError(
            f"{path}: truncated: {size} bytes, but its header describes {needed} bytes of tensors (the download or "
            f"copy was cut short); {CONVERT_HINT}"
        )


def explain_load_error(local: Path, err: BaseException) -> ModelError | None:
    """A one-line ModelError for a weight file that transformers/torch could not read, or None."""
    files = weight_files(local)
    names = ", ".join(str(p) for p in files)
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if isinstance(err, pickle.UnpicklingError) or "weights_only" in str(err):
        return ModelError(
            f"{names}: holds Python objects besides tensors; posttrain loads pickle weight files only with "
            f"torch.load(weights_only=True), because unpickling anything else can run code. Load it yourself "
            f"where you trust it and {CONVERT_HINT}"
        )
    if files and files[0].suffix == ".bin":
        return ModelError(f"{names}: not a readable PyTorch weight file ({first}); {CONVERT_HINT}")
    if type(err).__name__ == "SafetensorError":
        return ModelError(f"{names}: unreadable safetensors file ({first}); {CONVERT_HINT}")
    return None


def check_load_info(info: dict[str, Any], local: Path, what: str, *, new_head_ok: bool, base_prefix: str) -> None:
    """Refuse weights that do not fit config.json, or that leave part of the model at random."""
    weights = ", ".join(p.name for p in weight_files(local))
    mismatched = sorted(info.get("mismatched_keys") or [], key=lambda m: m[0])
    if mismatched:
        key, stored, wanted = mismatched[0]
        more = f" (and {len(mismatched) - 1} more tensors)" if len(mismatched) > 1 else ""
        raise ModelError(
            f"{local}: {key} has shape {tuple(stored)} in {weights} but config.json (with any override_config) "
            f"describes {tuple(wanted)}{more}; the config does not belong to these weights: restore the "
            f"config.json saved with them, or drop the {what}'s override_config keys that change shapes"
        )
    missing = sorted(info.get("missing_keys") or [])
    if new_head_ok:  # a critic/reward head on a causal LM: only the base model must be complete
        missing = [k for k in missing if k.startswith(base_prefix + ".")]
    if missing:
        raise ModelError(
            f"{local}: {weights} lacks {len(missing)} tensors that config.json asks for (e.g. {missing[0]}); they "
            f"would start at random. Restore the config.json saved with these weights (e.g. num_hidden_layers)"
        )
    unexpected = sorted(info.get("unexpected_keys") or [])
    if unexpected and not new_head_ok:
        logger.warning("%s: %d tensors of %s are not used by the %s (e.g. %s)", local, len(unexpected), weights, what, unexpected[0])
