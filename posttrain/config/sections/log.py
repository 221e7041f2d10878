"""`log`: text logs of the run's processes (metrics go to trainer.logger)."""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class LogConfig:
    """Log level and the log files of a run's processes (posttrain.cluster.process_logs)."""

    level: str = param("INFO", doc="Lowest level posttrain's loggers write to each process's error output (a worker's log file): DEBUG, INFO, WARNING or ERROR.", choices=["DEBUG", "INFO", "WARNING", "ERROR"], refs=["trinity:log.level"])
    dir: str | None = param(None, doc="Directory of the per-process log files of a run of several processes (rank<r>.log, trainer.log, explorer.log); null means <run dir>/workers. A one-process run logs to the console.", refs=["roll:logging_dir"])
    group_by_node: bool = param(False, doc="Put each node's process log files in a sub-directory named by the node's IP address.", refs=["trinity:log.group_by_node"])


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {}
