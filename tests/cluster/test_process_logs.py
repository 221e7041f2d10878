"""log.dir, log.group_by_node and log.level: where a run's processes log, and how much."""

from __future__ import annotations

import logging

from posttrain.cluster.launch import launch
from posttrain.cluster.process_logs import configure_logging, local_ip, log_paths
from posttrain.config import load_config


def test_log_dir_and_group_by_node_place_each_process_s_file(tmp_path):
    default = load_config(None, []).log
    assert log_paths(default, tmp_path / "run", ["rank0"]) == [tmp_path / "run" / "workers" / "rank0.log"]
    moved = load_config(None, [f"log.dir={tmp_path / 'logs'}", "log.group_by_node=true"]).log
    paths = log_paths(moved, tmp_path / "run", ["rank0", "rank1"], ["10.0.0.1", "10.0.0.2"])
    assert paths == [tmp_path / "logs" / "10.0.0.1" / "rank0.log", tmp_path / "logs" / "10.0.0.2" / "rank1.log"]
    assert all(p.parent.is_dir() for p in paths)


def test_the_local_launcher_writes_the_workers_logs_where_log_says(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_FORK_SERVER", "0")  # plain `posttrain --version` processes: no server to start for them
    log = load_config(None, [f"log.dir={tmp_path / 'logs'}", "log.group_by_node=true"]).log
    assert launch(["--version"], 2, tmp_path / "run", "cpu", {}, log) == 0
    assert (tmp_path / "logs" / local_ip() / "rank1.log").read_text().startswith("posttrain ")  # rank 1 only logs
    assert (tmp_path / "logs" / local_ip() / "rank0.log").is_file() and not (tmp_path / "run" / "workers").exists()


def test_log_level_decides_which_records_posttrain_s_loggers_write(capsys):
    logger = logging.getLogger("posttrain.rewards.reward_model")
    try:
        configure_logging("DEBUG")
        logger.debug("a detail")
        configure_logging("ERROR")
        logger.warning("a warning")
        logger.error("a failure")
        err = capsys.readouterr().err
        assert "a detail" in err
        assert "a warning" not in err and "a failure" in err
    finally:
        configure_logging("INFO")
