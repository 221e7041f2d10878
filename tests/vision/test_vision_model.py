"""The vision-language forward (posttrain.models.vision) against the model's own forward, the hf
engine's log-probs against the actor's, and weight sync of the vision tower."""

import dataclasses

import torch
from transformers import AutoImageProcessor

from posttrain.models.loading import load_causal_lm, load_tokenizer
from posttrain.models.logprobs import batch_logprobs, response_logprobs
from posttrain.records import RolloutBatch
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.hf_engine import HFEngine

from tests.vision.conftest import colour_image, prompt_batch, vision_inputs


def _load(path):
    return load_causal_lm(path), load_tokenizer(path), AutoImageProcessor.from_pretrained(path)


def test_logprobs_match_the_models_own_forward_and_rows_are_independent(tiny_vl_dir):
    model, tok, proc = _load(tiny_vl_dir)
    prompts = prompt_batch(tok, proc, [colour_image((255, 0, 0)), None])
    response = torch.tensor([[10, 11, 12], [13, 14, 0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    both = response_logprobs(model, prompts.input_ids, prompts.attention_mask, response, mask, vision=prompts.vision).logprobs
    alone = response_logprobs(model, prompts.input_ids[:1], prompts.attention_mask[:1], response[:1], mask[:1],
                              vision=prompts.vision[:1]).logprobs
    assert torch.allclose(both[:1], alone, atol=1e-5)
    ids = torch.cat([prompts.input_ids[:1], response[:1]], 1)  # (1, S)
    v = prompts.vision[0]
    own = model(input_ids=ids, attention_mask=torch.cat([prompts.attention_mask[:1], mask[:1]], 1).long(),
                pixel_values=v.pixel_values, image_grid_thw=v.image_grid_thw,
                mm_token_type_ids=(ids == model.config.image_token_id).int()).logits.float()  # (1, S, V)
    P = prompts.input_ids.shape[1]
    expected = torch.log_softmax(own[0, P - 1 : P + 2], -1).gather(-1, response[0, :, None]).squeeze(-1)
    assert torch.allclose(both[0], expected, atol=1e-5)


def test_engine_logprobs_equal_the_actors_and_depend_on_the_image(tiny_vl_dir):
    model, tok, proc = _load(tiny_vl_dir)
    prompts = prompt_batch(tok, proc, [colour_image((255, 0, 0)), None, colour_image((0, 0, 255), (32, 16))])
    out = HFEngine(model, tokenizer=tok).generate(prompts, SamplingParams(n=2, max_new_tokens=6), expected_version=0)
    assert [v is None for v in out.vision] == [False, False, True, True, False, False]
    actor = batch_logprobs(model, out).logprobs  # (B, T)
    assert float((actor - out.rollout_logprobs).abs().max()) < 1e-4
    green = vision_inputs(proc, colour_image((0, 255, 0)))
    swapped = dataclasses.replace(out[:2], vision=[green, green])
    assert float((batch_logprobs(model, swapped).logprobs - actor[:2]).abs().max()) > 1e-3


def test_text_rows_join_image_rows_and_weight_sync_carries_the_vision_tower(tiny_vl_dir):
    model, tok, proc = _load(tiny_vl_dir)
    image_rows = HFEngine(model, tokenizer=tok).generate(
        prompt_batch(tok, proc, [colour_image((255, 0, 0))]), SamplingParams(max_new_tokens=2), expected_version=0)
    text_rows = dataclasses.replace(image_rows, vision=None)
    joined = RolloutBatch.cat([image_rows, text_rows])
    assert joined.vision[1] is None and joined.vision[0] is image_rows.vision[0]
    engine = HFEngine(model, tokenizer=tok)
    with torch.no_grad():
        model.model.visual.patch_embed.proj.weight.add_(1.0)  # the actor's step changed the tower
    engine.update_weights(model.named_parameters(), version=1)
    synced = dict(engine.model.named_parameters())["model.visual.patch_embed.proj.weight"]
    assert torch.equal(synced, model.model.visual.patch_embed.proj.weight)
