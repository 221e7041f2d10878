"""Models by Hugging Face name (`model.path: org/name`) resolve to their snapshot in the local hub
cache, offline; a name the cache lacks is refused with a download command that exists."""

from __future__ import annotations

import huggingface_hub.constants as hub
import pytest
import torch
from hub_cache_helpers import REVISION, hub_repo

from posttrain.errors import ModelError
from posttrain.models.loading import load_causal_lm, load_tokenizer, resolve_model_dir
from posttrain.models.tiny import make_tiny_model


def test_a_cached_hub_name_loads_its_snapshot(tmp_path, monkeypatch):
    model_dir = make_tiny_model(tmp_path / "model", layers=1, hidden=16, heads=2, seed=3)
    snapshot = hub_repo(tmp_path / "hub", "model", "acme/tiny", {p.name: p for p in model_dir.iterdir() if p.is_file()})
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_model_dir("acme/tiny") == snapshot and snapshot.name == REVISION
    by_name, by_dir = load_causal_lm("acme/tiny"), load_causal_lm(model_dir)
    for (name, a), (_, b) in zip(by_name.state_dict().items(), by_dir.state_dict().items()):
        assert torch.equal(a, b), name
    assert load_tokenizer("acme/tiny")("ab")["input_ids"] == load_tokenizer(model_dir)("ab")["input_ids"]
    with pytest.raises(ModelError, match=r"'acme/other' is not an existing local directory, nor a model the local Hugging Face cache holds.*`hf download acme/other`"):
        resolve_model_dir("acme/other")
    with pytest.raises(ModelError, match=r"'\./acme/tiny' is not an existing local directory \(posttrain never downloads models at run time\); point it at a directory"):
        resolve_model_dir("./acme/tiny")  # a path, not a name: the cache is not consulted
