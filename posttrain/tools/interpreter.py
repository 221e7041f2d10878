"""`code_interpreter`: runs the model's Python in the local sandbox (`posttrain.sandbox`).

Each call is a fresh ``python -I`` in an empty temporary directory, with a CPU-time and wall-time
limit, a memory limit, no network and the run directory (and `hidden_paths`) hidden; what it
printed is the tool's answer (stderr and a non-zero exit status are appended, so the model sees
its traceback).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Sequence

from posttrain.tools.base import function_schema, register_tool
from posttrain.errors import ConfigError
from posttrain.sandbox import Limits, run_python


@register_tool("code_interpreter")
class CodeInterpreter:
    """``{"code": "print(2**10)"}`` -> ``"1024\\n"``."""

    schema = function_schema("code_interpreter", "Run Python code and return what it prints.",
                             {"code": {"type": "string", "description": "a Python program; print the result"}}, ["code"])

    def __init__(self, timeout_s: float = 5.0, memory_mb: int = 256, hidden_paths: Sequence[str] = ()):
        if timeout_s <= 0 or memory_mb < 16:
            raise ValueError(f"timeout_s must be > 0 and memory_mb >= 16, got {timeout_s} and {memory_mb}")
        self.limits = Limits(cpu_s=timeout_s, wall_s=timeout_s + 2.0, memory_mb=int(memory_mb))
        self.hidden: list[str] = []
        self.hide(hidden_paths)

    def hide(self, paths: Sequence[str]) -> None:
        """Hide these directories from every run too (the trainer adds the run directory)."""
        for path in paths:
            real = os.path.realpath(path)
            if os.path.commonpath([real, os.path.realpath(sys.prefix)]) == real:
                raise ConfigError(f"code_interpreter: cannot hide {path}: the Python interpreter ({sys.prefix}) is inside it")
            self.hidden.append(real)

    def execute(self, arguments: dict[str, Any]) -> str:
        code = arguments.get("code")
        if not isinstance(code, str):
            raise ValueError("code must be a string")
        result = run_python(code, "", self.limits, hidden=self.hidden)
        text = result.stdout
        if result.limit == "wall":
            return text + f"\n(timed out after {self.limits.cpu_s:g} s)"
        if result.limit == "output":
            return text + "\n(output limit reached)"
        if result.returncode != 0:
            text += (f"\n{result.stderr}" if result.stderr else "") + f"\n(exit status {result.returncode})"
        return text
