"""The shared-prompt forward (actor.share_prompt_forward): layout, log-probs, entropy and gradients
equal to the ordinary forward, for both mask kernels; unsupported kernels fall back."""

from __future__ import annotations

import pytest
import torch

from posttrain.models.logprobs import response_logprobs
from posttrain.models.shared_prompt import pack_shared_prompts, shared_prompt_supported

# Two groups of two responses (prompts 11 12 and 21 22 23) and a prompt of its own.
PROMPT_IDS = torch.tensor([[0, 11, 12], [0, 11, 12], [21, 22, 23], [21, 22, 23], [0, 0, 31]])
RESPONSE_IDS = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0], [9, 10, 11, 12], [13, 14, 0, 0], [15, 16, 0, 0]])
INPUTS = (PROMPT_IDS, (PROMPT_IDS > 0).float(), RESPONSE_IDS, (RESPONSE_IDS > 0).float())


def test_layout_one_row_per_prompt_group():
    packed = pack_shared_prompts(*INPUTS)
    rows = {tuple(r[r > 0].tolist()) for r in packed.input_ids}
    assert rows == {(31, 15, 16), (11, 12, 5, 6, 7, 8), (21, 22, 23, 9, 10, 11, 12, 13, 14)}
    row = next(i for i, r in enumerate(packed.input_ids.tolist()) if r[0] == 11)
    assert packed.position_ids[row, :6].tolist() == [0, 1, 2, 3, 4, 2]  # responses continue the prompt
    mask = packed.attention_mask[row, 0]
    assert mask[5, :6].tolist() == [True, True, False, False, False, True]  # response 2 skips response 1
    # First response tokens are predicted by the prompt's last position, later ones by their predecessor.
    flat = packed.input_ids.flatten()
    assert int(flat[packed.gather[0, 0]]) == 12 and int(flat[packed.gather[0, 2]]) == 6
    assert int(flat[packed.gather[1, 0]]) == 12


def test_nothing_to_share_gives_none():
    assert pack_shared_prompts(*(x[[0, 2, 4]] for x in INPUTS)) is None


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_logprobs_entropy_and_gradients_equal_the_ordinary_forward(tiny_lm, kernel):
    tiny_lm.set_attn_implementation(kernel)
    assert shared_prompt_supported(tiny_lm)
    results = {}
    for share in (False, True):
        tiny_lm.zero_grad()
        out = response_logprobs(tiny_lm, *INPUTS, temperature=0.7, with_entropy=True, share_prompt=share)
        (out.logprobs.sum() + out.entropy.sum()).backward()
        results[share] = (out, [p.grad.clone() for p in tiny_lm.parameters()])
    (plain, g_plain), (shared, g_shared) = results[False], results[True]
    torch.testing.assert_close(shared.logprobs, plain.logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(shared.entropy, plain.entropy, atol=1e-5, rtol=0)
    for a, b in zip(g_shared, g_plain):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_kernel_without_a_known_mask_form_falls_back(tiny_lm, monkeypatch):
    monkeypatch.setattr(tiny_lm.config, "_attn_implementation", "unknown_kernel", raising=False)
    assert not shared_prompt_supported(tiny_lm)


@pytest.mark.parametrize("value", [True, False])
def test_actor_share_prompt_forward_reaches_the_actor(tmp_path, value):
    from posttrain.config import derive, load_config
    from posttrain.models.loading import tokenizer_from_config
    from posttrain.models.tiny import make_tiny_model
    from posttrain.trainer.rl_build import build_roles

    model_dir = make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=2)
    cfg = load_config(None, [f"model.path={model_dir}", f"actor.share_prompt_forward={str(value).lower()}"])
    assert build_roles(cfg, derive(cfg, 64), tokenizer_from_config(cfg.model)).actor.s.share_prompt is value
