"""`posttrain studio` over plain HTTP: the form comes from the schema, checks are the CLI's own
validator and plan, imports translate foreign files, exports load back to the same config."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from studio_helpers import Client, serve, tiny_files

from posttrain.cli import main
from posttrain.cli.studio.form import compose, default_texts, field_of, flatten, render_yaml
from posttrain.config.dialects.source import read_yaml
from posttrain.config.fields import find_field
from posttrain.config.load import load_config
from posttrain.config.schema import Config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def studio():
    yield from serve()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("studio")
    return root, tiny_files(root)


def _fields(items):
    for item in items:
        if "section" in item:
            yield from _fields(item["items"])
        else:
            yield item


def test_the_page_and_the_schema_are_served(studio):
    _, client = studio
    page = client.get("/")
    assert page.status == 200 and page.kind.startswith("text/html") and b'<script src="/studio.js">' in page.body
    assert client.get("/studio.js").status == 200 and client.get("/studio.css").status == 200
    assert client.get("/nothing").status == 404
    schema = client.get("/api/schema").json()
    assert [s["section"] for s in schema["sections"][:4]] == ["data", "model", "rollout", "actor"]
    fields = {f["path"]: f for f in _fields(schema["sections"])}
    assert set(fields) == set(default_texts())  # every leaf field of the schema, nothing else
    lr = fields["actor.optim.lr"]
    _, info = find_field(Config, "actor.optim.lr")
    assert (lr["doc"], lr["type"], lr["default"], lr["widget"]) == (info.doc, "float", "1.0e-06", "text")
    assert lr["allowed"] == "> 0" and "verl:actor_rollout_ref.actor.optim.lr" in lr["refs"]
    assert (fields["algorithm.kind"]["widget"], fields["algorithm.kind"]["options"]) == ("select", ["rl", "sft", "dpo", "distill"])
    assert fields["data.enable_thinking"]["options"] == ["true", "false", "null"]  # bool | None
    assert fields["rollout.n"]["allowed"] == ">= 1"
    assert fields["trainer.val_before_train"]["options"] == ["true", "false"]
    assert fields["stages"]["widget"] == "yaml" and fields["trainer.logger"]["widget"] == "yaml"
    # each field carries its not-implemented marker (none is left in the schema today)
    assert {f["path"]: f["todo"] for f in fields.values()} == {p: find_field(Config, p)[1].todo for p in fields}


def test_a_bad_value_is_a_problem_on_its_field_and_the_rest_still_checks(studio):
    _, client = studio
    reply = client.post("/api/check", {"values": {"actor.optim.lr": "-1", "rollout.n": "abc", "data.max_prompt_length": "[1"}})
    result = reply.json()
    assert reply.status == 200 and result["plan"] is None
    assert [p["fields"] for p in result["problems"]] == [["data.max_prompt_length"]]
    assert "not valid YAML" in result["problems"][0]["message"]  # a text that is not YAML first, alone
    result = client.post("/api/check", {"values": {"actor.optim.lr": "-1", "rollout.n": "abc"}}).json()
    assert {p["field"]: p["message"] for p in result["problems"]} == {
        "rollout.n": "rollout.n: expected an integer, got 'abc'",
        "actor.optim.lr": "actor.optim.lr: must be > 0, got -1.0",
    }
    assert yaml.safe_load(result["yaml"]) == {"rollout": {"n": "abc"}, "actor": {"optim": {"lr": -1}}}


def test_a_valid_config_shows_the_plan_config_plan_prints(studio, tiny, tmp_path, capsys):
    _, client = studio
    root, values = tiny
    result = client.post("/api/check", {"values": values, "name": "mine.yaml"}).json()
    assert result["problems"] == [] and result["plan_error"] is None
    assert result["commands"] == ["posttrain train mine.yaml"]
    saved = tmp_path / "mine.yaml"
    saved.write_text(result["yaml"])
    assert main(["config", "plan", str(saved)]) == 0
    assert result["plan"] == capsys.readouterr().out  # the same text, from the same function
    assert re.search(r"^prompts per step +4 ", result["plan"], re.M) and re.search(r"^responses per step +8 ", result["plan"], re.M)
    # valid, but `train` would stop before its first step: the plan says why, naming the saved file
    broken = client.post("/api/check", {"values": {**values, "model.path": str(root / "absent")}}).json()
    assert broken["problems"] == [] and broken["plan"] is None and str(root / "absent") in broken["plan_error"]


def test_a_cross_field_problem_lands_on_its_leading_key(studio, tiny):
    _, client = studio
    _, values = tiny
    result = client.post("/api/check", {"values": {**values, "actor.ppo_mini_batch_size": "3"}}).json()
    assert [p["fields"] for p in result["problems"]] == [["data.train_batch_size", "actor.ppo_mini_batch_size"]]
    # a name checked by the plan (registries), as `posttrain config plan` checks it
    result = client.post("/api/check", {"values": {**values, "algorithm.adv_estimator": "grpoo"}}).json()
    assert [p["field"] for p in result["problems"]] == ["algorithm.adv_estimator"] and result["plan"] is None
    assert "did you mean 'grpo'" in result["problems"][0]["message"]


def test_yaml_posted_as_is_goes_through_the_same_validator(studio, tiny):
    _, client = studio
    _, values = tiny
    bad = client.post("/api/check", "actor:\n  ppo_epochs: 0\n", kind="application/yaml").json()
    assert bad["problems"] == [{"field": "actor.ppo_epochs", "fields": ["actor.ppo_epochs"],
                                "message": "actor.ppo_epochs: must be >= 1, got 0"}]
    tree, _ = compose(values)
    good = client.post("/api/check", render_yaml(tree), kind="application/yaml").json()
    assert good["problems"] == [] and "prompts per step" in good["plan"]
    garbled = client.post("/api/check", "actor: [1\n", kind="application/yaml").json()
    assert garbled["problems"][0]["field"] is None and "invalid YAML" in garbled["problems"][0]["message"]
    assert garbled["problems"][0]["message"].startswith("line 2, column 1: invalid YAML")  # no temporary path


VERL = """\
data:
  train_files: {d}/data/train.parquet
  train_batch_size: 4
  max_prompt_length: 32
  max_response_length: 6
actor_rollout_ref:
  model:
    path: {d}/model
  actor:
    ppo_mini_batch_size: 4
    ppo_micro_batch_size_per_gpu: 8
    optim:
      lr: 1e-4
  rollout:
    n: 2
    temperature: 0.9
algorithm:
  adv_estimator: grpo
trainer:
  total_training_steps: 1
  logger: ['console']
  default_local_dir: {d}/run
  n_gpus_per_node: 0
"""


def test_a_verl_file_imports_translated_and_exports_to_the_same_config(studio, tiny, tmp_path):
    _, client = studio
    root, _ = tiny
    verl = tmp_path / "verl.yaml"
    verl.write_text(VERL.format(d=root))
    by_path = client.post("/api/import", {"path": str(verl)}).json()
    assert by_path["dialect"] == "verl" and by_path["base"] == str(verl) and by_path["report"]["refused"] == []
    assert (by_path["values"]["actor.optim.lr"], by_path["values"]["rollout.temperature"]) == ("0.0001", "0.9")
    assert "actor_rollout_ref.rollout.n -> rollout.n" in by_path["report"]["translated"]
    uploaded = client.post("/api/import", {"name": "verl.yaml", "text": verl.read_text()}).json()
    assert uploaded["values"] == by_path["values"] and uploaded["base"] is None
    checked = client.post("/api/check", {"values": by_path["values"]}).json()
    assert checked["problems"] == [] and "prompts per step" in checked["plan"]
    exported = tmp_path / "exported.yaml"
    exported.write_text(checked["yaml"])
    assert load_config(exported) == load_config(verl)


def test_refused_foreign_keys_are_reported_and_leave_no_base(studio, tmp_path):
    _, client = studio
    verl = tmp_path / "verl.yaml"
    verl.write_text(VERL.format(d=tmp_path).replace("    temperature: 0.9", "    temperature: 0.9\n    agent:\n      custom_async_server:\n        name: my_server"))
    result = client.post("/api/import", {"path": str(verl)}).json()
    assert any(line.startswith("actor_rollout_ref.rollout.agent.custom_async_server.name") for line in result["report"]["refused"])
    assert result["base"] is None  # `posttrain train verl.yaml` would refuse it: no override command from it


def test_changes_to_an_opened_file_export_as_overrides_of_it(studio, tiny, tmp_path):
    _, client = studio
    root, values = tiny
    native = tmp_path / "native.yaml"
    tree, _ = compose(values)
    native.write_text(render_yaml(tree))
    opened = client.post("/api/import", {"path": str(native)}).json()
    assert opened["dialect"] == "posttrain" and opened["values"] == values
    changed = {k: v for k, v in opened["values"].items() if k != "rollout.n"}  # reset to its default
    changed["actor.optim.lr"] = "2e-5"
    result = client.post("/api/check", {"values": changed, "base": {"path": str(native), "values": opened["values"]}}).json()
    first, second = result["commands"]
    assert first == "posttrain train studio.yaml"
    assert second == f"posttrain train {native} rollout.n=1 actor.optim.lr=2.0e-05"
    exported = tmp_path / "studio.yaml"
    exported.write_text(result["yaml"])
    # the command line and the exported file are the same config (rollout.n=1 keeps 4 / 1 divisible)
    changed_cfg = load_config(exported, ["actor.ppo_micro_batch_size_per_gpu=8"])
    assert load_config(native, second.split()[3:]) == changed_cfg and changed_cfg.actor.optim.lr == 2e-5


def test_save_writes_the_file_and_asks_before_overwriting(studio, tmp_path):
    _, client = studio
    target = tmp_path / "out" / "saved.yaml"
    values = {"rollout.n": "4"}
    assert client.post("/api/save", {"values": values, "path": str(target)}).json() == {"saved": str(target), "exists": None}
    assert load_config(target).rollout.n == 4
    again = client.post("/api/save", {"values": {"rollout.n": "2"}, "path": str(target)}).json()
    assert again == {"saved": None, "exists": str(target)} and load_config(target).rollout.n == 4
    client.post("/api/save", {"values": {"rollout.n": "2"}, "path": str(target), "overwrite": True})
    assert load_config(target).rollout.n == 2
    bad = client.post("/api/save", {"values": {"rollout.n": "[2"}, "path": str(target)})
    assert bad.status == 400 and "rollout.n: not valid YAML" in bad.json()["error"]


def test_requests_from_other_sites_are_refused(studio):
    server, client = studio
    port = server.server_address[1]
    assert client.get("/api/schema", headers={"Host": f"evil.example:{port}"}).status == 403
    assert client.post("/api/save", {"values": {}, "path": "x.yaml"}, headers={"Origin": "http://evil.example"}).status == 403
    assert client.post("/api/check", {"values": {}}, headers={"Origin": f"http://localhost:{port}"}).status == 200
    assert client.post("/api/check", "{}", kind="text/plain").status == 415  # a form post needs no preflight
    assert client.post("/api/check", "[1]").status == 400


def test_every_native_example_round_trips_through_the_form():
    for path in sorted(EXAMPLES.glob("*.yaml")):
        tree, problems = compose(flatten(read_yaml(path)))
        assert problems == [], path
        rebuilt = path.parent / f".studio-{path.name}"
        try:
            rebuilt.write_text(render_yaml(tree))
            assert load_config(rebuilt) == load_config(path), path
        finally:
            rebuilt.unlink()


def test_problem_keys_map_to_the_nearest_field():
    assert field_of("actor.optim.lr") == "actor.optim.lr"
    assert field_of("stages[1].actor.ppo_epochs") == "stages"
    assert field_of("reward.workers.math.tag_included") == "reward.workers"
    assert field_of("actor.nonsense") is None
    assert flatten({"actor": {"optim": {"lr": 1e-5}}, "nope": {"a": 1}})["nope.a"] == "1"


def test_the_command_prints_its_url_serves_the_page_and_stops_on_ctrl_c(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "posttrain", "studio", "--port", "0"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("posttrain studio: http://127.0.0.1:"), line + proc.stderr.read()
        client = Client(line.split()[2])
        assert client.get("/").status == 200 and client.get("/api/schema").json()["cwd"] == str(tmp_path)
        busy = subprocess.run([sys.executable, "-m", "posttrain", "studio", "--port", client.url.rsplit(":", 1)[1].strip("/")],
                              env=env, capture_output=True, text=True, timeout=120)
        assert busy.returncode == 2 and "choose another --port" in busy.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stopped" in out
    missing = subprocess.run([sys.executable, "-m", "posttrain", "studio", "absent.yaml"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "absent.yaml: config file not found" in missing.stderr
