"""Training a vision-language policy: actor.freeze_vision_tower, the actor's old log-probs on image
rows against the engine's, and what the vision path refuses."""

import pytest
import torch
from transformers import AutoImageProcessor, LlavaConfig

from posttrain.config.derive import derive
from posttrain.config.load import load_config
from posttrain.errors import ConfigError, ModelError
from posttrain.models.loading import load_causal_lm, load_tokenizer, tokenizer_from_config
from posttrain.models.tiny import make_tiny_model
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.hf_engine import HFEngine
from posttrain.trainer.rl_build import build_roles

from tests.vision.conftest import colour_image, prompt_batch


def _roles(path, *overrides):
    c = load_config(None, [f"model.path={path}", "data.train_batch_size=2", "rollout.n=2", "actor.ppo_mini_batch_size=2",
                           "actor.ppo_micro_batch_size_per_gpu=4", "actor.optim.lr=0.01", *overrides])
    return build_roles(c, derive(c, 4), tokenizer_from_config(c.model))


def _update(roles, tok, proc):
    """One actor update on sampled image rows; returns the parameters before it."""
    model = roles.actor.model
    prompts = prompt_batch(tok, proc, [colour_image((255, 0, 0)), colour_image((0, 0, 255))])
    batch = HFEngine(model, tokenizer=tok).generate(prompts, SamplingParams(n=2, max_new_tokens=3), expected_version=0)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    batch.old_logprobs = roles.actor.compute_logprobs(batch).detach()
    assert float((batch.old_logprobs - batch.rollout_logprobs).abs().max()) < 1e-4  # the actor scores what the engine sampled
    batch.advantages = torch.tensor([[1.0], [-1.0], [1.0], [-1.0]]) * batch.response_mask  # (B, T)
    roles.actor.update(batch)
    return before, dict(model.named_parameters())


@pytest.mark.parametrize("freeze", [True, False])
def test_freeze_vision_tower_keeps_the_tower_and_trains_the_rest(tiny_vl_dir, freeze):
    roles = _roles(tiny_vl_dir, f"actor.freeze_vision_tower={str(freeze).lower()}")
    before, after = _update(roles, load_tokenizer(tiny_vl_dir), AutoImageProcessor.from_pretrained(tiny_vl_dir))
    tower = [n for n in before if n.startswith("model.visual.")]
    assert tower and all(torch.equal(after[n], before[n]) for n in tower) == freeze  # the tower gets gradients from the images
    assert not torch.equal(after["model.language_model.layers.0.mlp.up_proj.weight"],
                           before["model.language_model.layers.0.mlp.up_proj.weight"])


def test_what_the_vision_path_cannot_honour_is_refused(tmp_path):
    text = make_tiny_model(tmp_path / "text", layers=1, hidden=32, heads=4)
    with pytest.raises(ModelError, match="text-only model with no vision tower"):
        _roles(text, "actor.freeze_vision_tower=true")
    LlavaConfig().save_pretrained(tmp_path / "llava")  # a vision-language family the vision path does not implement
    with pytest.raises(ModelError, match="llava is a vision-language family posttrain does not train"):
        load_causal_lm(tmp_path / "llava")
    for overrides, words in ((["model.lora_rank=4"], "LoRA freezes the whole base"), (["algorithm.kind=sft"], "RL stages only")):
        with pytest.raises(ConfigError, match=words):
            load_config(None, ["actor.freeze_vision_tower=true", *overrides])
