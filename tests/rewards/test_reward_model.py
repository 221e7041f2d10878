import logging

import pytest
import torch
from transformers import Qwen2ForSequenceClassification

from posttrain.errors import DataError, ModelError
from posttrain.models.tiny import build_tiny_tokenizer, make_tiny_config, make_tiny_model
from posttrain.rewards import RewardModelScorer, combine_scores

TEXTS = ["<|im_start|>user\n1+2<|im_end|>\n<|im_start|>assistant\n3", "ab", "a longer response text!"]


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    """A tiny random Qwen2 reward model with the character tokenizer, saved like a real checkpoint."""
    # make_tiny_model writes the tokenizer files the way AutoTokenizer reads them back; the causal
    # LM it writes is then replaced by a sequence classifier of the same shape.
    path = make_tiny_model(tmp_path_factory.mktemp("rm"), layers=2, hidden=32, heads=4, max_position=128)
    vocab_size = len(build_tiny_tokenizer())
    config = make_tiny_config(layers=2, hidden=32, heads=4, kv_heads=2, vocab_size=vocab_size, max_position=128)
    config.num_labels = 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForSequenceClassification(config)
    with torch.no_grad():
        model.score.weight.mul_(100.0)  # spread the scores so comparisons below are not trivially close
    model.save_pretrained(path)
    return str(path)


def by_hand(model_dir, text):
    """The head's logit at the last token of the unpadded text (tokenized as the scorer does)."""
    model = Qwen2ForSequenceClassification.from_pretrained(model_dir).eval()
    tokenizer = RewardModelScorer(model_dir).tokenizer
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]  # (1, S)
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state  # (1, S, H)
        return model.score(hidden[0, -1]).item()


def test_score_is_the_logit_at_the_last_token(rm_dir):
    scorer = RewardModelScorer(rm_dir, micro_batch_size=1)
    scores = scorer.score_texts(TEXTS)
    assert scores.shape == (3,) and scores.dtype == torch.float32
    expected = torch.tensor([by_hand(rm_dir, t) for t in TEXTS])
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)
    assert scores.std() > 0.1  # the model really distinguishes the texts


def test_padded_batches_score_like_one_by_one(rm_dir):
    one_by_one = RewardModelScorer(rm_dir, micro_batch_size=1).score_texts(TEXTS)
    batched = RewardModelScorer(rm_dir, micro_batch_size=2).score_texts(TEXTS)  # a padded pair, then one
    torch.testing.assert_close(batched, one_by_one, atol=1e-5, rtol=1e-5)


def test_conversations_are_rescored_with_the_reward_models_chat_template(rm_dir):
    scorer = RewardModelScorer(rm_dir)
    prompts = [
        [{"role": "user", "content": "1+2"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    ]
    got = scorer.score_conversations(prompts, ["3", "hello"])
    texts = [
        "<|im_start|>user\n1+2<|im_end|>\n<|im_start|>assistant\n3<|im_end|>\n",
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\nhello<|im_end|>\n",
    ]
    torch.testing.assert_close(got, scorer.score_texts(texts))


def test_long_inputs_keep_their_end(rm_dir, caplog):
    assert RewardModelScorer(rm_dir).max_length is None  # the default never truncates
    scorer = RewardModelScorer(rm_dir, max_length=8)
    with caplog.at_level(logging.WARNING, logger="posttrain.rewards"):
        got = scorer.score_texts(["0123456789abcdef"])
    torch.testing.assert_close(got, torch.tensor([by_hand(rm_dir, "89abcdef")]), atol=1e-5, rtol=1e-5)
    assert "cut to its last 8" in caplog.text



def test_truncation_right_keeps_the_beginning_and_error_stops(rm_dir, caplog):
    """reward_model.truncation: right is verl's legacy worker (postprocess_data truncation='right');
    error names the input's length and the key."""
    scorer = RewardModelScorer(rm_dir, max_length=8, truncation="right")
    with caplog.at_level(logging.WARNING, logger="posttrain.rewards"):
        got = scorer.score_texts(["0123456789abcdef", "01"])
    torch.testing.assert_close(got, torch.tensor([by_hand(rm_dir, "01234567"), by_hand(rm_dir, "01")]), atol=1e-5, rtol=1e-5)
    assert "cut to its first 8" in caplog.text
    strict = RewardModelScorer(rm_dir, max_length=8, truncation="error")
    torch.testing.assert_close(strict.score_texts(["01234567"]), torch.tensor([by_hand(rm_dir, "01234567")]), atol=1e-5, rtol=1e-5)
    with pytest.raises(DataError, match="input of 16 tokens is longer than reward.reward_model.max_length \\(8\\)"):
        strict.score_texts(["0123456789abcdef"])


def test_missing_model_directory_says_nothing_is_downloaded(tmp_path):
    with pytest.raises(ModelError) as err:
        RewardModelScorer(str(tmp_path / "no-such-rm"))
    assert "not an existing local directory" in str(err.value)
    assert "never downloads" in str(err.value)


def test_combined_reward_is_the_weighted_sum_of_function_and_rm_scores():
    rule = torch.tensor([1.0, 0.0, 1.0])
    rm = torch.tensor([2.0, -1.0, 0.0])
    torch.testing.assert_close(combine_scores(rule, rm, rm_weight=0.25), torch.tensor([1.5, -0.25, 1.0]))
    torch.testing.assert_close(combine_scores(rule, rm, rm_weight=0.0), rule)
    torch.testing.assert_close(combine_scores(rule, rm, rm_weight=2.0, function_weight=0.0), 2.0 * rm)


def test_a_token_budget_groups_texts_and_scores_like_one_by_one(rm_dir):
    one_by_one = RewardModelScorer(rm_dir, micro_batch_size=1).score_texts(TEXTS)
    scorer = RewardModelScorer(rm_dir, micro_batch_size=1, max_tokens=30)
    lengths = [len(ids) for ids in scorer.tokenizer(TEXTS, add_special_tokens=False)["input_ids"]]
    assert lengths == [23, 2, 23]
    # 23 + 2 fit the budget of 30, the third does not: two passes, not micro_batch_size's three.
    assert scorer._chunks(TEXTS) == [TEXTS[:2], TEXTS[2:]]
    torch.testing.assert_close(scorer.score_texts(TEXTS), one_by_one, atol=1e-5, rtol=1e-5)


def test_reward_model_config_reaches_the_scorer(rm_dir, tmp_path):
    from posttrain.config import load_config
    from posttrain.models.loading import load_tokenizer
    from posttrain.trainer.rewarding import RewardStage

    cfg = load_config(None, [
        "reward.reward_model.enable=true", f"reward.reward_model.path={rm_dir}", "reward.reward_model.max_length=16",
        "reward.reward_model.use_dynamic_bsz=true", "reward.reward_model.forward_max_token_len_per_gpu=64",
        "reward.reward_model.param_offload=true",
    ])
    scorer = RewardStage(cfg, load_tokenizer(rm_dir), device="cpu").reward_model
    assert (scorer.max_length, scorer.max_tokens, scorer.offload, scorer.device.type) == (16, 64, True, "cpu")


# A user module that registers its own reward-model architecture with transformers' Auto classes.
CUSTOM_LIB = """
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, Qwen2Config, Qwen2ForSequenceClassification, Qwen2Model

class TinyRMConfig(Qwen2Config):
    model_type = "posttrain_test_tiny_rm"

class TinyRMBody(Qwen2Model):
    config_class = TinyRMConfig

class TinyRM(Qwen2ForSequenceClassification):
    config_class = TinyRMConfig

AutoConfig.register(TinyRMConfig.model_type, TinyRMConfig)
AutoModel.register(TinyRMConfig, TinyRMBody)  # the body the classifier builds
AutoModelForSequenceClassification.register(TinyRMConfig, TinyRM)
"""


def test_external_lib_registers_the_reward_model_s_class_before_it_loads(rm_dir, tmp_path, monkeypatch):
    import json
    import shutil

    from posttrain.config import load_config
    from posttrain.trainer.rewarding import RewardStage

    custom = shutil.copytree(rm_dir, tmp_path / "custom_rm")
    config = json.loads((custom / "config.json").read_text())
    (custom / "config.json").write_text(json.dumps({**config, "model_type": "posttrain_test_tiny_rm", "architectures": ["TinyRM"]}))
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "tiny_rm_registry.py").write_text(CUSTOM_LIB)
    (tmp_path / "lib" / "broken_rm_registry.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    with pytest.raises(ModelError, match="posttrain_test_tiny_rm"):  # transformers does not know the type
        RewardModelScorer(str(custom))
    keys = ["reward.reward_model.enable=true", f"reward.reward_model.path={custom}"]
    stage = RewardStage(load_config(None, [*keys, "reward.reward_model.external_lib=tiny_rm_registry"]), RewardModelScorer(rm_dir).tokenizer)
    assert type(stage.reward_model.model).__name__ == "TinyRM"
    torch.testing.assert_close(stage.reward_model.score_texts(TEXTS), RewardModelScorer(rm_dir).score_texts(TEXTS))
    stage.close()
    with pytest.raises(ModelError, match="reward.reward_model.external_lib 'no_such_rm_lib' could not be imported"):
        RewardStage(load_config(None, [*keys, "reward.reward_model.external_lib=no_such_rm_lib"]), None)
    with pytest.raises(ModelError, match="reward.reward_model.external_lib 'broken_rm_registry' failed while being imported .*no GPU here"):
        RewardStage(load_config(None, [*keys, "reward.reward_model.external_lib=broken_rm_registry"]), None)


def test_trust_remote_code_runs_the_code_shipped_in_the_reward_model_s_directory(rm_dir, tmp_path, monkeypatch):
    import json
    import shutil
    import sys

    import transformers.dynamic_module_utils as dynamic

    from posttrain.config import load_config
    from posttrain.trainer.rewarding import RewardStage

    # transformers copies the directory's code into its module cache and imports it from there:
    # a cache under tmp_path, and sys.path restored afterwards
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    remote = shutil.copytree(rm_dir, tmp_path / "remote_rm")
    config = json.loads((remote / "config.json").read_text())
    auto_map = {"AutoConfig": "remote_rm_code.TinyRMConfig", "AutoModelForSequenceClassification": "remote_rm_code.TinyRM"}
    (remote / "config.json").write_text(json.dumps({**config, "model_type": "posttrain_test_remote_rm", "auto_map": auto_map}))
    (remote / "remote_rm_code.py").write_text(CUSTOM_LIB.replace("posttrain_test_tiny_rm", "posttrain_test_remote_rm").split("AutoConfig.register")[0]
                                              + "AutoModel.register(TinyRMConfig, TinyRMBody)\n")
    keys = ["reward.reward_model.enable=true", f"reward.reward_model.path={remote}"]
    with pytest.raises(ModelError, match="trust_remote_code"):
        RewardStage(load_config(None, keys), None)
    stage = RewardStage(load_config(None, [*keys, "reward.reward_model.trust_remote_code=true"]), None)
    assert type(stage.reward_model.model).__module__.endswith("remote_rm_code")
    torch.testing.assert_close(stage.reward_model.score_texts(TEXTS), RewardModelScorer(rm_dir).score_texts(TEXTS))
    stage.close()


def test_param_offload_moves_the_weights_to_the_device_for_each_pass_only(rm_dir, monkeypatch):
    """reward_model.param_offload: the weights wait in host memory and visit the scoring device for
    each pass (recorded here on a CPU machine through the moves the scorer asks for); scores unchanged."""
    resident = RewardModelScorer(rm_dir, micro_batch_size=2)
    offloaded = RewardModelScorer(rm_dir, micro_batch_size=2, offload=True)
    moves, forward_on = [], []
    real_to = offloaded.model.to
    monkeypatch.setattr(offloaded.model, "to", lambda device: (moves.append(str(device)), real_to(device))[1])
    offloaded.model.register_forward_pre_hook(lambda module, args: forward_on.append(list(moves)))
    torch.testing.assert_close(offloaded.score_texts(TEXTS), resident.score_texts(TEXTS), atol=1e-6, rtol=1e-6)
    assert moves == ["cpu", "cpu"]  # to the scoring device (the CPU here) before the pass, home after it
    assert forward_on and all(seen == ["cpu"] for seen in forward_on)  # every forward ran between the two moves
    assert next(offloaded.model.parameters()).device.type == "cpu"
    resident_moves = []
    monkeypatch.setattr(resident.model, "to", lambda device: resident_moves.append(device))
    resident.score_texts(TEXTS)
    assert resident_moves == []  # without offload the weights never move
