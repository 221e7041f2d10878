"""Read back what the wandb and swanlab clients wrote offline (a module name no other test folder uses).

Both write a run as a record log in LevelDB's log format (32 KiB blocks; each record a 7-byte header
of CRC, length and type, split across blocks as FIRST/MIDDLE/LAST), after a 7-byte file header; the
records are the client's own protobuf messages, parsed here with the client's own classes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Iterator

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def log_records(path: Path, ident: bytes) -> Iterator[bytes]:
    """The records of a LevelDB-format log file whose header starts with `ident`."""
    data = path.read_bytes()
    assert data[:4] == ident, f"{path} starts with {data[:8]!r}, not {ident!r}"
    pos, chunks = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the rest of a block too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        pos += HEADER
        if kind == 0 and length == 0:  # zero padding up to the end of the block
            pos += left - HEADER
            continue
        chunks += data[pos:pos + length]
        pos += length
        if kind in (FULL, LAST):
            yield chunks
            chunks = b""


def wandb_run(run_dir: Path) -> dict:
    """The offline wandb run under `run_dir`: project, name, group, config, history by step, tables."""
    import wandb
    from wandb.proto import wandb_internal_pb2 as pb

    wandb.teardown()  # a finished run's records reach the file from wandb's service process: wait for it

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    out: dict = {"config": {}, "history": {}, "tables": {}}
    for data in log_records(path, b":W&B"):
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out.update(project=record.run.project, name=record.run.display_name, group=record.run.run_group,
                       tags=list(record.run.tags), notes=record.run.notes)
            out["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            step = items.pop("_step")
            out["history"][step] = {k: v for k, v in items.items() if not k.startswith("_")}
    for step, items in out["history"].items():
        if "val/generations/path" in items:
            out["tables"][step] = json.loads((path.parent / "files" / items["val/generations/path"]).read_text())
    return out


def swanlab_run(log_dir: Path) -> dict:
    """The offline swanlab run under `log_dir`: project, name, config, scalars by step, tables by step."""
    import yaml
    from google.protobuf.json_format import MessageToDict
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record

    (path,) = log_dir.glob("run-*/run-*.swanlab")
    out: dict = {"scalars": {}, "tables": {}}
    config = yaml.safe_load((path.parent / "files" / "config.yaml").read_text())
    out["config"] = {k: v["value"] for k, v in config.items()}  # swanlab stores {value, desc, sort} per key
    for data in log_records(path, b":SWL"):
        record = Record()
        record.ParseFromString(data)
        message = MessageToDict(record)
        if "start" in message:
            out.update(project=message["start"]["project"], name=message["start"]["name"])
        if "scalar" in message:
            scalar = message["scalar"]
            # protobuf's JSON form leaves out zeros: step 0, value 0.0
            out["scalars"].setdefault(int(scalar.get("step", 0)), {})[scalar["key"]] = scalar["value"].get("number", 0.0)
        if "media" in message and message["media"]["type"] == "COLUMN_TYPE_ECHARTS":
            media = message["media"]
            (item,) = media["value"]["items"]
            table = json.loads((path.parent / "media" / "echarts" / item["filename"]).read_text())
            out["tables"][int(media.get("step", 0))] = table
    return out
