"""rollout.stop_strings / include_stop_str_in_output: which tokens of a stopped response are kept
when the stop string is left out (hand-made multi-character tokens), and that the config reaches
the sampling parameters of training and validation."""

from __future__ import annotations

import torch

from posttrain.config import load_config
from posttrain.rollout.stops import drop_stop_strings, kept_length
from posttrain.trainer.rl_settings import sampling_params


class _Pieces:
    """A tokenizer whose tokens are fixed text pieces, several characters each."""

    VOCAB = ["<pad>", "The", " answer", " is", " 4</", "ans>", " 4", "</ans>", "\n"]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.VOCAB[i] for i in ids)


def test_the_token_where_the_stop_string_starts_goes_with_it():
    tok = _Pieces()
    # "The answer is 4</ans>": the string starts inside " 4</", so " 4" goes too (3 tokens kept)
    assert kept_length([1, 2, 3, 4, 5], tok, ["</ans>"]) == 3
    # "The answer is 4</ans>" with the string as its own token: everything before it stays
    assert kept_length([1, 2, 3, 6, 7], tok, ["</ans>"]) == 4
    # no stop string in the text (ended at EOS or its length): all kept; the first of two strings counts
    assert kept_length([1, 2, 3], tok, ["</ans>"]) == 3
    assert kept_length([1, 2, 8, 3, 6, 7], tok, ["</ans>", "\n"]) == 2


def test_dropped_tokens_become_padding_with_mask_and_logprob_zero():
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 0, 0]])  # (B, T): row 1 ended at its length
    mask = torch.tensor([[1.0] * 5, [1.0, 1.0, 1.0, 0.0, 0.0]])  # (B, T)
    lps = torch.tensor([[-0.1, -0.2, -0.3, -0.4, -0.5], [-1.0, -2.0, -3.0, 0.0, 0.0]])  # (B, T)
    out_ids, out_mask, out_lps = drop_stop_strings(ids, mask, lps, _Pieces(), ["</ans>"], pad_token_id=0)
    assert out_ids.tolist() == [[1, 2, 3, 0, 0], [1, 2, 3, 0, 0]]
    assert out_mask.tolist() == [[1.0, 1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0]]
    assert torch.equal(out_lps, torch.tensor([[-0.1, -0.2, -0.3, 0.0, 0.0], [-1.0, -2.0, -3.0, 0.0, 0.0]]))
    assert ids[0, 3] == 4  # the input is not changed


def test_the_config_reaches_training_and_validation_sampling():
    cfg = load_config(None, ["rollout.stop_strings=[</ans>, STOP]", "rollout.include_stop_str_in_output=false"])
    train, val = sampling_params(cfg, None)
    assert train.stop == val.stop == ("</ans>", "STOP") and not train.include_stop and not val.include_stop
    plain, _ = sampling_params(load_config(None, []), None)
    assert plain.stop == () and plain.include_stop


def test_configured_stop_strings_end_responses_and_false_leaves_them_out():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from posttrain.models.tiny import build_tiny_tokenizer
    from posttrain.records import PromptBatch
    from posttrain.rollout.hf_engine import HFEngine
    from posttrain.workers.rollout import RolloutWorker

    tok = build_tiny_tokenizer()
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                         num_key_value_heads=2, intermediate_size=64)).eval()
    worker = RolloutWorker(HFEngine(model, pad_token_id=tok.pad_token_id, tokenizer=tok, seed=0), tokenizer=tok)
    prompt = PromptBatch(torch.tensor([tok("12+34=", add_special_tokens=False)["input_ids"]]), torch.ones(1, 6), uid=["p0"])

    def responses(*overrides):
        base = ["rollout.ignore_eos=true", "data.max_response_length=12"]  # sampled with the engine's seed: the same each call
        params, _ = sampling_params(load_config(None, base + list(overrides)), tok)
        out = worker.generate(prompt, params, expected_version=0)
        n = int(out.response_mask[0].sum())
        return tok.decode(out.response_ids[0, :n].tolist()), n

    full, length = responses()
    # a letter or digit of the sampled text (one token: a character-level vocabulary), not at its start
    stop = next(c for c in full[2:] if c.isalnum())
    start = full.index(stop)
    kept_text, kept_n = responses(f"rollout.stop_strings=['{stop}']")
    assert kept_text == full[: start + 1] and kept_n < length == 12
    assert responses(f"rollout.stop_strings=['{stop}']", "rollout.include_stop_str_in_output=false") == (full[:start], kept_n - 1)
