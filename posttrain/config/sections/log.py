"""`log`: text logs of the run's processes (metrics go to trainer.logger)."""

from __future__ import annotations

from posttrain.config.fields import param, section

_TODO = "process log files; logging issue"


@section
class LogConfig:
    """Log level and log files."""

    level: str = param("INFO", doc="Lowest level written: DEBUG, INFO, WARNING or ERROR.", choices=["DEBUG", "INFO", "WARNING", "ERROR"], todo=_TODO, refs=["trinity:log.level"])
    dir: str | None = param(None, doc="Directory of per-process log files; null means <run dir>/log.", todo=_TODO, refs=["roll:logging_dir"])
    group_by_node: bool = param(False, doc="Put each node's log files in a sub-directory named by its IP.", todo=_TODO, refs=["trinity:log.group_by_node"])


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {}
