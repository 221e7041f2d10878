"""Where each process of a run writes its log, and how verbose posttrain's own loggers are (`log.*`).

A run started as several processes (worker ranks, the explorer and trainer of a decoupled run, Ray
actors) writes each process's output to a file of its own: `<log dir>/<name>.log`, the log directory
being `log.dir` (ROLL's `logging_dir`) or `<run dir>/workers`. With `log.group_by_node` (Trinity-RFT)
each node's files go into a sub-directory named by its IP address, `<log dir>/<node ip>/<name>.log`,
so the processes of one machine are found together. A one-process run's output is the console.

`log.level` (Trinity-RFT's `log.level`) is the lowest level the `posttrain` loggers write to the
process's error output (which is the log file of a worker process): DEBUG shows the details those
modules log, ERROR hides their warnings.
"""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from typing import Any, Sequence

DEFAULT_SUBDIR = "workers"
_HANDLER_NAME = "posttrain-log-level"


def log_dir(log: Any, run_dir: Path) -> Path:
    """`log.dir` (expanded, relative to the working directory), else `<run dir>/workers`."""
    return Path(log.dir).expanduser() if getattr(log, "dir", None) else run_dir / DEFAULT_SUBDIR


def local_ip() -> str:
    """This machine's address as other nodes see it (the hostname's), else the loopback address."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def log_paths(log: Any, run_dir: Path, names: Sequence[str], node_ips: Sequence[str] | None = None) -> list[Path]:
    """One log file per process `names[i]`, on node `node_ips[i]` (default: this machine); the
    directories are created."""
    base = log_dir(log, run_dir)
    ips = list(node_ips) if node_ips is not None else [local_ip()] * len(names)
    by_node = bool(getattr(log, "group_by_node", False))
    paths = [(base / ip if by_node else base) / f"{name}.log" for name, ip in zip(names, ips)]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    return paths


def configure_logging(level: str) -> logging.Logger:
    """Make the `posttrain` loggers write records at `level` and above to standard error, once
    per process (a later call only changes the level)."""
    logger = logging.getLogger("posttrain")
    logger.setLevel(getattr(logging, level))
    if not any(h.get_name() == _HANDLER_NAME for h in logger.handlers):
        handler = _StderrHandler()
        handler.set_name(_HANDLER_NAME)
        handler.setFormatter(logging.Formatter("%(message)s"))  # as bare as Python's last-resort handler printed them
        logger.addHandler(handler)
    return logger


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record comes (a redirected or captured stream
    included), not to the stream of the moment the handler was made."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)
