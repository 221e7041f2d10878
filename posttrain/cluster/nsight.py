"""Starting the processes that compute under Nsight Systems (`trainer.worker_nsight_options`).

verl hands its workers' Nsight options to Ray, which starts each worker as `nsys profile <options>
<worker>`. posttrain starts its own processes (posttrain.cluster.launch), so it puts the same
prefix in front of each command itself: every option KEY: VALUE becomes ``--KEY=VALUE`` (``-K VALUE``
for a one-letter key, as Ray writes them), and each process writes its own report,
``<dir>/nsys_rank<r>`` unless the options name an output. verl leaves ``capture-range-end`` null to
mean "repeat-shutdown after every traced window": posttrain opens one cudaProfilerApi range per traced
window (posttrain.trainer.profile_tools.NsysRanges), so null becomes ``repeat-shutdown:<windows>``. In
discrete mode (a range per phase, whose count per step the run decides) null becomes ``repeat``: a
report per range, and the run is never stopped by a count.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

UNDER_NSYS_ENV = "POSTTRAIN_UNDER_NSYS"  # set in a process started under nsys: it must not wrap itself again


def nsys_arguments(options: dict[str, Any], windows: int | None) -> list[str]:
    """The `nsys profile` arguments of `options` (values are written as nsys reads them: true/false lower
    case); ``windows`` None: discrete ranges, of no count known in advance.

    >>> nsys_arguments({"capture-range": "cudaProfilerApi", "capture-range-end": None}, None)
    ['--capture-range=cudaProfilerApi', '--capture-range-end=repeat']
    """
    out = []
    for key, value in options.items():
        if value is None:
            if key != "capture-range-end":
                continue  # null: nsys's own default
            value = "repeat" if windows is None else f"repeat-shutdown:{windows}"
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out += [f"-{key}", text] if len(key) == 1 else [f"--{key}={text}"]
    return out


def nsys_prefix(options: dict[str, Any], windows: int | None, out_dir: Path) -> Callable[[int], list[str]]:
    """rank -> the command prefix that starts that process under `nsys profile`; raises FileNotFoundError
    when the nsys program is not on PATH."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise FileNotFoundError("nsys")
    args = nsys_arguments(options, windows)
    named = any(k in options for k in ("output", "o"))

    def prefix(rank: int) -> list[str]:
        return [nsys, "profile", *args, *([] if named else [f"--output={out_dir / f'nsys_rank{rank}'}"]), "--"]

    return prefix
