"""`trainer.mode: serve`: chat calls recorded, rewarded by feedback, committed into the experience
buffer, trained on by a `trainer.mode: train` run, whose checkpoint the server then serves."""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.request

import pytest

from posttrain.buffer.experience import Experience
from posttrain.cluster.launch import free_port
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.trainer.run import run
from posttrain.trainer.serving import check_serve, start_serving
from rl_helpers import BASE, tiny_rl_files
from http_helpers import call


def stream(port, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        events = [line.removeprefix("data: ") for line in response.read().decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def stored(path, batch: int) -> Experience:
    db = sqlite3.connect(str(path))
    try:
        (payload,) = db.execute("SELECT payload FROM experiences WHERE batch = ?", (batch,)).fetchone()
    finally:
        db.close()
    return Experience.from_bytes(bytes(payload))


def chat(port, text, n=1):
    status, out = call(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": text}], "n": n, "max_tokens": 5,
                                                      "temperature": 0.3})
    assert status == 200, out
    return out


def test_served_calls_become_the_batches_a_train_run_learns_from_and_its_checkpoint_is_served(tmp_path):
    root, model = tiny_rl_files(tmp_path)
    overrides = [f"model.path={model}", f"data.train_files={root}/data/train.parquet", *BASE, f"trainer.default_local_dir={root}/run",
                 "trainer.total_training_steps=2", "trainer.save_freq=2", "trainer.logger=[jsonl]", "rollout.temperature=1.0"]
    cfg = load_config(None, [*overrides, "trainer.mode=serve", "explorer.service_status_check_interval=3600"])
    serving = start_serving(cfg, root / "run", root / "run" / "checkpoints", port=0)
    # a second server of the run: its own port, address and history file, and a short look interval
    own_port, history = free_port(), tmp_path / "elsewhere" / "history.sqlite"
    watcher = start_serving(load_config(None, [
        *overrides, "trainer.mode=serve", "explorer.service_status_check_interval=0.2", f"explorer.proxy_port={own_port}",
        "explorer.listen_address=0.0.0.0", f"explorer.db_url=sqlite:///{history}"]), root / "run", root / "run" / "checkpoints")
    assert watcher.port == own_port and watcher.server.server_address[0] == "0.0.0.0" and history.is_file()
    assert not (tmp_path / "elsewhere" / "proxy_history.sqlite").exists() and (root / "run" / "serve" / "proxy_history.sqlite").is_file()
    port, buffer = serving.port, root / "run" / "experience_buffer.sqlite"
    with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
        start_serving(cfg, root / "run", root / "run" / "checkpoints", port=port)
    try:
        assert call(port, "/health") == (200, {"status": "ok"})
        # batch 1: two tasks of two completions each, and one completion of two choices (its own group)
        calls = [chat(port, t) for t in ("ab", "ba", "cd", "dc")]
        pair = chat(port, "xy", n=2)
        assert all(len(c["choices"][0]["token_ids"]) == len(c["choices"][0]["logprobs"]["content"]) for c in calls)
        for c, reward, task in zip(calls, (1.0, 0.0, 0.5, 0.0), "aabb"):
            assert call(port, "/feedback", {"reward": reward, "msg_ids": [c["id"]], "task_id": task}) == (
                200, {"status": "success", "rewarded": 1, "already_rewarded": []})
        unread = chat(port, "zz")  # no feedback: it waits, not committed
        # faults: an unknown id (nothing rewarded, even the known one beside it), a malformed body, not JSON
        status, out = call(port, "/feedback", {"reward": 1.0, "msg_ids": [pair["id"], "chatcmpl-nope"]})
        assert status == 404 and "chatcmpl-nope" in out["error"]["message"]
        assert call(port, "/feedback", {"reward": "high", "msg_ids": [pair["id"]]})[0] == 400
        assert call(port, "/feedback", raw=b"{not json")[0] == 400
        assert call(port, "/feedback", {"reward": 1.0, "msg_ids": [pair["id"]]})[1]["rewarded"] == 1
        assert call(port, "/feedback", {"reward": 0.0, "msg_ids": [pair["id"]]})[1]["already_rewarded"] == [pair["id"]]  # first reward stays
        # a buffer that cannot be written: 503, the completions wait
        buffer.unlink()
        buffer.mkdir()
        status, out = call(port, "/commit", {})
        assert status == 503 and "could not be written" in out["error"]["message"]
        buffer.rmdir()
        assert call(port, "/commit", {}) == (200, {"status": "success", "batch": 1, "rows": 6})
        assert call(port, "/commit", {})[1]["batch"] is None  # nothing new
        first = stored(buffer, 1)
        rows = first.batch
        assert rows.group_index == ["a", "a", "b", "b", pair["id"], pair["id"]]
        assert first.scores.tolist() == [1.0, 0.0, 0.5, 0.0, 1.0, 1.0]
        answered = [c["choices"][0] for c in calls] + pair["choices"]
        for i, choice in enumerate(answered):  # the stored rows are exactly what the endpoint returned
            n = int(rows.response_mask[i].sum())
            assert rows.response_ids[i, :n].tolist() == choice["token_ids"]
            assert rows.rollout_logprobs[i, :n].tolist() == pytest.approx([e["logprob"] for e in choice["logprobs"]["content"]])
            prompt = (calls + [pair])[min(i, 4)]["prompt_token_ids"]
            assert rows.prompt_ids[i][rows.prompt_mask[i].bool()].tolist() == prompt
        assert rows.weights_version.tolist() == [0] * 6 and first.policy_step == 0
        # batch 2, then a train run of two steps on the two batches
        more = [chat(port, t) for t in ("pq", "qp")]
        # a streamed call (OpenAI's server-sent events; the whole answer in one chunk) is recorded too
        chunks = stream(port, {"messages": [{"role": "user", "content": "rs"}], "max_tokens": 4, "stream": True,
                               "stream_options": {"include_usage": True}})
        tokens = chunks[0]["choices"][0]["token_ids"]  # up to 4: EOS may come sooner
        assert chunks[0]["object"] == "chat.completion.chunk" and chunks[-1]["usage"]["completion_tokens"] == len(tokens) <= 4
        assert len(chunks[0]["choices"][0]["logprobs"]["content"]) == len(tokens) and chunks[0]["prompt_token_ids"]
        call(port, "/feedback", {"reward": 1.0, "msg_ids": [more[0]["id"]], "task_id": "c"})
        call(port, "/feedback", {"reward": 0.0, "msg_ids": [more[1]["id"], unread["id"], chunks[0]["id"]], "task_id": "c"})
        assert call(port, "/commit", {})[1] == {"status": "success", "batch": 2, "rows": 4}
        assert stored(buffer, 2).batch.response_ids[3, :len(tokens)].tolist() == tokens
        counts = call(port, "/metrics")[1]
        assert {k: counts[k] for k in ("recorded", "ready", "committed", "served_step", "rollout/total_experience_count")} == {
            "recorded": 9, "ready": 0, "committed": 9, "served_step": 0, "rollout/total_experience_count": 10}
        run(load_config(None, [*overrides, "trainer.mode=train"]))
        metrics = [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text().splitlines()]
        trained = [m for m in metrics if "actor/pg_loss" in m]
        assert len(trained) == 2 and [m["critic/score/mean"] for m in trained] == pytest.approx([3.5 / 6, 1 / 4])
        # the watcher looks every 0.2 s and serves the train run's checkpoint; the other looks once an hour
        deadline = time.monotonic() + 60
        while call(own_port, "/metrics")[1]["served_step"] != 2:
            assert time.monotonic() < deadline, "the watcher did not pick up global_step_2"
            time.sleep(0.1)
        assert call(port, "/metrics")[1]["served_step"] == 0
        # the server picks up the train run's checkpoint without stopping, and records the new step
        before = chat(port, "ab")
        assert serving.follow() == 2
        after = chat(port, "ab")
        assert call(port, "/metrics")[1]["served_step"] == 2
        call(port, "/feedback", {"reward": 1.0, "msg_ids": [before["id"], after["id"]]})
        call(port, "/commit", {})
        assert stored(buffer, 3).batch.weights_version.tolist() == [0, 2]
    finally:
        serving.stop()
        watcher.stop()


def test_serve_refuses_what_it_cannot_serve(tmp_path):
    base = ["model.path=m", "data.train_files=x.parquet", "trainer.mode=serve"]
    with pytest.raises(ConfigError, match="one engine in one process"):
        check_serve(load_config(None, [*base, "cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.rollout=[1,2]"]))
    with pytest.raises(ConfigError, match="served history is an SQLite file"):
        check_serve(load_config(None, [*base, "explorer.db_url=postgresql://db/x"]))


def test_the_command_says_what_is_wrong_in_one_line_before_building_a_model(tmp_path):
    from cli_run_helpers import posttrain

    (tmp_path / "serve.yaml").write_text("model: {path: missing-model}\ntrainer: {mode: serve}\n")
    out = posttrain("train", str(tmp_path / "serve.yaml"), f"trainer.default_local_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert out.returncode == 2 and "model path 'missing-model' is not an existing local directory" in out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1
