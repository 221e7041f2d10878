"""The missing-model message names a download command that the installed huggingface_hub provides."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.errors import ModelError
from posttrain.models.loading import resolve_model_dir


def test_the_download_hint_is_a_command_that_exists():
    with pytest.raises(ModelError) as err:
        resolve_model_dir("Qwen/Qwen2.5-0.5B-Instruct")
    command = re.search(r"`(hf download \S+ --local-dir DIR)`", str(err.value))
    assert command is not None, str(err.value)
    hf = Path(sys.executable).parent / "hf"  # the console script huggingface_hub installs beside python
    out = subprocess.run([str(hf), "download", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--local-dir" in out.stdout
