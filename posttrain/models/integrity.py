"""What is wrong with a model directory's files, in one line, where transformers would give a
traceback or a message that does not name the file.

Called only once a load has failed (or, for the weights, before it starts), so a healthy directory
costs nothing extra.
"""

from __future__ import annotations

from pathlib import Path

from posttrain.errors import ModelError
from posttrain.files import read_utf8

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
