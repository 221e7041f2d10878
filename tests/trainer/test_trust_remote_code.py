"""model.trust_remote_code and critic.model.trust_remote_code on a model directory that ships its own
modelling code (config.json's `auto_map` names classes in a .py file beside the weights).

transformers copies that file into its module cache (HF_MODULES_CACHE, read once when transformers is
imported) and imports it from there, so the run that trusts the code is a fresh `posttrain` process
with the cache under tmp_path: nothing is written outside it. The refusals stop at the preflight,
before any code is copied, and run in this process.
"""

from __future__ import annotations

import json

import transformers.dynamic_module_utils as dynamic

from cli_run_helpers import assert_user_error, posttrain, tiny_run, write_config

# Qwen2 under its own model_type (so transformers cannot fall back to its built-in class) whose causal
# LM and token classifier append their class name to the file named by POSTTRAIN_TEST_REMOTE_MARK
# when built: the file shows which classes the run used.
MODELLING_CODE = '''
import os

from transformers import AutoModel, Qwen2Config, Qwen2ForCausalLM, Qwen2ForTokenClassification, Qwen2Model


class RemoteQwen2Config(Qwen2Config):
    model_type = "posttrain_test_remote_qwen2"


def _mark(model):
    with open(os.environ["POSTTRAIN_TEST_REMOTE_MARK"], "a", encoding="utf-8") as f:
        f.write(type(model).__name__ + "\\n")


class RemoteCausalLM(Qwen2ForCausalLM):
    config_class = RemoteQwen2Config

    def __init__(self, config):
        super().__init__(config)
        _mark(self)


class RemoteQwen2Model(Qwen2Model):
    config_class = RemoteQwen2Config


# the token classifier builds its body with AutoModel.from_config
AutoModel.register(RemoteQwen2Config, RemoteQwen2Model)


class RemoteTokenClassifier(Qwen2ForTokenClassification):
    config_class = RemoteQwen2Config

    def __init__(self, config):
        super().__init__(config)
        _mark(self)
'''

AUTO_MAP = {
    "AutoConfig": "modeling_custom.RemoteQwen2Config",
    "AutoModelForCausalLM": "modeling_custom.RemoteCausalLM",
    "AutoModelForTokenClassification": "modeling_custom.RemoteTokenClassifier",
}


def make_remote_dir(stock):
    """A copy of the tiny model directory `stock` whose config.json points at MODELLING_CODE."""
    remote = stock.parent / "remote_model"
    remote.mkdir()
    for item in stock.iterdir():
        (remote / item.name).write_bytes(item.read_bytes())
    config = json.loads((remote / "config.json").read_text(encoding="utf-8"))
    config.update(model_type="posttrain_test_remote_qwen2", architectures=["RemoteCausalLM"], auto_map=AUTO_MAP)
    (remote / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (remote / "modeling_custom.py").write_text(MODELLING_CODE, encoding="utf-8")
    return remote


def test_trust_remote_code_runs_the_policy_s_and_the_critic_s_shipped_code(tmp_path, monkeypatch):
    run = tiny_run(tmp_path)
    stock = tmp_path / "model"
    remote = make_remote_dir(stock)
    ppo = [str(write_config(tmp_path)), *run, "algorithm.adv_estimator=gae",
           "critic.ppo_mini_batch_size=4", "critic.ppo_micro_batch_size_per_gpu=8"]

    # not trusted: a one-line refusal naming the key, for the policy and for the critic alone, and
    # nothing copied into this process's module cache
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "refused_cache"))
    out = posttrain("train", *ppo, f"model.path={remote}", cwd=tmp_path)
    assert_user_error(out, "trust_remote_code")
    out = posttrain("train", *ppo, f"critic.model.path={remote}", cwd=tmp_path)
    assert_user_error(out, "critic", "trust_remote_code")
    assert not (tmp_path / "refused_cache").exists()

    # trusted: the run builds the shipped classes, copied into the module cache under tmp_path
    mark, cache = tmp_path / "built.txt", tmp_path / "hf_modules"
    monkeypatch.setenv("POSTTRAIN_TEST_REMOTE_MARK", str(mark))
    monkeypatch.setenv("HF_MODULES_CACHE", str(cache))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    out = posttrain("train", *ppo, f"model.path={remote}", "model.trust_remote_code=true",
                    f"critic.model.path={remote}", "critic.model.trust_remote_code=true", cwd=tmp_path, subprocess=True)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    built = set(mark.read_text(encoding="utf-8").split())
    assert {"RemoteCausalLM", "RemoteTokenClassifier"} <= built, built
    assert list(cache.rglob("modeling_custom.py")), sorted(cache.rglob("*"))
