import pytest
import torch

from posttrain.models.logprobs import check_head_matches, response_logprobs
from posttrain.models.positions import concat_prompt_response, position_ids_from_mask

PROMPTS = [[5, 6, 7], [1, 2, 3, 4, 9], [8]]
RESPONSES = [[10, 11, 12, 13], [20, 21], [30, 31, 32]]


def padded(prompts=PROMPTS, responses=RESPONSES, P=5, T=4):
    """Left-padded prompts and right-padded responses, as the records hold them."""
    B = len(prompts)
    pid, pm = torch.zeros(B, P, dtype=torch.long), torch.zeros(B, P)
    rid, rm = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        pid[i, P - len(p) :], pm[i, P - len(p) :] = torch.tensor(p), 1.0
        rid[i, : len(r)], rm[i, : len(r)] = torch.tensor(r), 1.0
    return pid, pm, rid, rm


def reference(model, temperature=1.0):
    """Log-probs and entropies from the model's own full forward, one unpadded sequence at a time."""
    out = []
    for p, r in zip(PROMPTS, RESPONSES):
        logits = model(torch.tensor([p + r])).logits[0].float() / temperature  # (S, V)
        logp_all = torch.log_softmax(logits, -1)[len(p) - 1 : len(p) - 1 + len(r)]  # (t, V)
        lp = logp_all.gather(-1, torch.tensor(r)[:, None]).squeeze(-1)
        out.append((lp, -(logp_all.exp() * logp_all).sum(-1)))
    return out


def test_position_ids_ignore_left_padding():
    mask = torch.tensor([[0.0, 0.0, 1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2, 2], [0, 1, 2, 3, 4, 5]]
    ids, attn, pos = concat_prompt_response(*padded())
    assert ids.shape == attn.shape == pos.shape == (3, 9) and attn.dtype == torch.long
    assert pos[2].tolist() == [0, 0, 0, 0, 0, 1, 2, 3, 3]


@pytest.mark.parametrize("chunk_tokens", [1, 3, None])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_matches_full_forward_per_sequence(tiny_lm, chunk_tokens, temperature):
    out = response_logprobs(
        tiny_lm, *padded(), temperature=temperature, with_entropy=True, chunk_tokens=chunk_tokens
    )
    assert out.logprobs.shape == out.entropy.shape == (3, 4) and out.logprobs.dtype == torch.float32
    for i, (lp, ent) in enumerate(reference(tiny_lm, temperature)):
        n = len(RESPONSES[i])
        torch.testing.assert_close(out.logprobs[i, :n], lp, atol=1e-5, rtol=0)
        torch.testing.assert_close(out.entropy[i, :n], ent, atol=1e-5, rtol=0)
        assert out.logprobs[i, n:].abs().sum() == 0 and out.entropy[i, n:].abs().sum() == 0


def test_extra_padding_columns_change_nothing(tiny_lm):
    base = response_logprobs(tiny_lm, *padded()).logprobs
    wide = response_logprobs(tiny_lm, *padded(P=8, T=7)).logprobs
    torch.testing.assert_close(wide[:, :4], base, atol=1e-6, rtol=0)
    assert wide[:, 4:].abs().sum() == 0


def test_gradients_match_full_forward_and_do_not_depend_on_chunking(tiny_lm):
    grads = []
    for chunk in (2, None):
        tiny_lm.zero_grad()
        out = response_logprobs(tiny_lm, *padded(), with_entropy=True, chunk_tokens=chunk)
        (out.logprobs.sum() + 0.5 * out.entropy.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in tiny_lm.named_parameters()})
    tiny_lm.zero_grad()
    sum(lp.sum() + 0.5 * ent.sum() for lp, ent in reference(tiny_lm)).backward()
    for name, p in tiny_lm.named_parameters():
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(grads[0][name], p.grad, atol=1e-5, rtol=1e-4)


def test_works_under_inference_mode(tiny_lm):
    with torch.inference_mode():
        out = response_logprobs(tiny_lm, *padded())
    torch.testing.assert_close(out.logprobs[0], reference(tiny_lm)[0][0].detach(), atol=1e-5, rtol=0)


def test_bf16_model_gives_fp32_logprobs_close_to_fp32(tiny_lm):
    fp32 = response_logprobs(tiny_lm, *padded()).logprobs.detach()
    out = response_logprobs(tiny_lm.to(torch.bfloat16), *padded()).logprobs
    assert out.dtype == torch.float32
    assert (out - fp32).abs().max() < 0.1


def test_check_head_matches_catches_unknown_logit_transform(tiny_lm):
    check_head_matches(tiny_lm)
    # Our head would apply a softcap that Qwen2's own forward does not: the check must notice.
    tiny_lm.config.final_logit_softcapping = 0.5
    with pytest.raises(NotImplementedError, match="logit transform"):
        check_head_matches(tiny_lm)
