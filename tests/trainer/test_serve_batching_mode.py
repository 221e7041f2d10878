"""trainer.mode serve (posttrain.trainer.serving) batches concurrent completions as `posttrain serve`
does (tests/rollout/test_serve_batching.py), and records each with its own prompt ids and rows."""

from __future__ import annotations

import json
import sqlite3

from posttrain.config.load import load_config
from posttrain.trainer.serving import start_serving
from rl_helpers import BASE, tiny_rl_files
from http_helpers import ask, call, rows, together


def test_trainer_mode_serve_batches_and_records_each_completion_as_alone(tmp_path):
    """trainer.mode serve (posttrain.trainer.serving) over the same batching: concurrent seeded
    calls in fewer engine calls, each recorded with its own prompt ids and the rows it gets alone."""
    root, model = tiny_rl_files(tmp_path)
    cfg = load_config(None, [f"model.path={model}", f"data.train_files={root}/data/train.parquet", *BASE,
                             f"trainer.default_local_dir={root}/run", "trainer.mode=serve", "explorer.service_status_check_interval=3600"])
    serving = start_serving(cfg, root / "run", root / "run" / "checkpoints", port=0)
    try:
        serving.service.batcher.window = 0.3  # every request of the burst in the first batch
        bodies = [ask(f"question {i} " * (i + 1), seed=5) for i in range(4)]
        got = together(serving.port, bodies)
        assert serving.service.batcher.generate_calls == 1
        want = [call(serving.port, "/v1/chat/completions", b) for b in bodies]  # each alone, one after another
        assert serving.service.batcher.generate_calls == 1 + len(bodies)
    finally:
        serving.stop()
    assert [rows(g) for g in got] == [rows(w) for w in want]
    db = sqlite3.connect(str(root / "run" / "serve" / "proxy_history.sqlite"))
    try:
        stored = {cid: (json.loads(p), [c["ids"] for c in json.loads(ch)]) for cid, p, ch in db.execute("SELECT id, prompt, choices FROM calls")}
    finally:
        db.close()
    for _, body in got:
        assert stored[body["id"]] == (body["prompt_token_ids"], [c["token_ids"] for c in body["choices"]])
