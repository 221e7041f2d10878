"""Reading a run directory back: the end-of-run summary and the HTML run report.

`load_run` reads the stages of a run directory, `summary_lines` gives the before/after-RL accuracy
lines that `posttrain train` prints at the end, and `write_report` writes `report.html` (the
`posttrain report RUN_DIR` command, and `trainer.write_report` at the end of a run).
"""

from __future__ import annotations

from posttrain.report.page import write_report
from posttrain.report.rundir import RunDirError, StageRun, load_run
from posttrain.report.summary import summary_lines

__all__ = ["RunDirError", "StageRun", "load_run", "summary_lines", "write_report"]
