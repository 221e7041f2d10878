import pytest
import torch

from posttrain.records import MicroBatches, PromptBatch, RolloutBatch, pack_greedy


def make_rollout(prompt_lens, response_lens, P=4, T=5, version=3) -> RolloutBatch:
    """Rows whose token ids encode (row, column) so reordering or padding mistakes show up."""
    B = len(prompt_lens)
    prompt_ids = torch.zeros(B, P, dtype=torch.long)
    prompt_mask = torch.zeros(B, P)
    response_ids = torch.zeros(B, T, dtype=torch.long)
    response_mask = torch.zeros(B, T)
    for i, (p, t) in enumerate(zip(prompt_lens, response_lens)):
        prompt_ids[i, P - p :] = 100 * (i + 1) + torch.arange(p)
        prompt_mask[i, P - p :] = 1.0
        response_ids[i, :t] = 100 * (i + 1) + 50 + torch.arange(t)
        response_mask[i, :t] = 1.0
    return RolloutBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        rollout_logprobs=-response_ids.float() * response_mask,
        weights_version=torch.full((B,), version),
        group_index=[f"g{i // 2}" for i in range(B)],
        data_source=["sort"] * B,
        ground_truth=[f"gt{i}" for i in range(B)],
        extra_info=[{"row": i} for i in range(B)],
        raw_prompt=[f"p{i}" for i in range(B)],
    )


def assert_same(a: RolloutBatch, b: RolloutBatch) -> None:
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "rollout_logprobs", "weights_version"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.ground_truth == b.ground_truth and a.extra_info == b.extra_info and a.group_index == b.group_index


def test_prompt_batch_fills_missing_per_sample_fields_and_checks_rows():
    batch = PromptBatch(torch.ones(3, 2, dtype=torch.long), torch.ones(3, 2))
    assert batch.uid == ["0", "1", "2"] and batch.ground_truth == [None] * 3 and batch.extra_info == [{}, {}, {}]
    with pytest.raises(ValueError, match="ground_truth has 2 rows, expected 3"):
        PromptBatch(torch.ones(3, 2, dtype=torch.long), torch.ones(3, 2), ground_truth=["a", "b"])


def test_indexing_by_slice_int_list_tensor_and_mask():
    batch = make_rollout([1, 2, 3, 4], [5, 4, 3, 2])
    assert batch[1:3].ground_truth == ["gt1", "gt2"]
    assert len(batch[2]) == 1 and batch[-1].extra_info == [{"row": 3}]
    picked = batch[torch.tensor([3, 0])]
    assert picked.ground_truth == ["gt3", "gt0"]
    assert picked.prompt_ids[0].tolist() == [400, 401, 402, 403]
    assert picked.response_ids[1].tolist() == [150, 151, 152, 153, 154]
    assert batch[[1, 1]].group_index == ["g0", "g0"]
    assert batch[torch.tensor([True, False, False, True])].raw_prompt == ["p0", "p3"]


def test_split_then_cat_round_trips():
    batch = make_rollout([1, 2, 3, 4, 2], [5, 4, 3, 2, 1])
    parts = batch.split(2)
    assert [len(p) for p in parts] == [2, 2, 1]
    assert_same(RolloutBatch.cat(parts), batch)


def test_cat_pads_prompts_left_and_responses_right():
    a = make_rollout([2], [2], P=2, T=2)
    b = make_rollout([3], [4], P=3, T=4)
    both = RolloutBatch.cat([a, b])
    assert both.prompt_ids.tolist() == [[0, 100, 101], [100, 101, 102]]
    assert both.prompt_mask.tolist() == [[0, 1, 1], [1, 1, 1]]
    assert both.response_ids.tolist() == [[150, 151, 0, 0], [150, 151, 152, 153]]
    assert both.response_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]


def test_cat_rejects_field_set_in_only_some_batches():
    a, b = make_rollout([1], [1]), make_rollout([1], [1])
    a.advantages = torch.zeros(1, 5)
    with pytest.raises(ValueError, match="advantages"):
        RolloutBatch.cat([a, b])


def test_repeat_interleave_keeps_copies_adjacent():
    prompts = PromptBatch(torch.tensor([[0, 7], [8, 9]]), torch.tensor([[0.0, 1.0], [1.0, 1.0]]), uid=["a", "b"])
    rep = prompts.repeat_interleave(3)
    assert rep.uid == ["a", "a", "a", "b", "b", "b"]
    assert rep.input_ids[:, 1].tolist() == [7, 7, 7, 9, 9, 9]
    assert rep.attention_mask.sum().item() == 9.0


def test_token_counts_and_attention_mask():
    batch = make_rollout([1, 4], [5, 2])
    assert batch.seq_lengths().tolist() == [6, 6]
    assert batch.num_tokens() == 12 and batch.num_response_tokens() == 7
    assert batch.attention_mask.shape == (2, 9)
    assert batch.to("cpu").num_tokens() == 12


def test_trim_drops_all_padding_columns_only():
    batch = make_rollout([1, 2], [3, 1], P=4, T=5)
    batch.advantages = torch.ones(2, 5)
    trimmed = batch.trim()
    assert trimmed.prompt_ids.tolist() == [[0, 100], [200, 201]]
    assert trimmed.response_ids.tolist() == [[150, 151, 152], [250, 0, 0]]
    assert trimmed.advantages.shape == (2, 3) and trimmed.num_tokens() == batch.num_tokens()


def test_split_by_tokens_respects_budget_and_restores_order():
    lens = [(1, 5), (4, 1), (2, 2), (3, 4), (1, 1), (4, 5), (2, 3)]
    batch = make_rollout([p for p, _ in lens], [t for _, t in lens], P=4, T=5)
    micro = batch.split_by_tokens(max_tokens=12)
    assert isinstance(micro, MicroBatches)
    for mb in micro.batches:
        # A trimmed micro-batch computes rows x width tokens; the budget bounds that, hence real tokens.
        assert len(mb) * (mb.prompt_ids.shape[1] + mb.response_ids.shape[1]) <= 12
    assert sorted(micro.index.tolist()) == list(range(len(lens)))
    # Per-row results computed on micro-batches come back in the original order at the original width.
    restored = micro.restore([mb.rollout_logprobs for mb in micro.batches], width=5)
    assert torch.equal(restored, batch.rollout_logprobs)
    gts = [gt for mb in micro.batches for gt in mb.ground_truth]
    assert [gts[k] for k in micro.index.argsort().tolist()] == batch.ground_truth
    # The longest row (4 + 5 = 9 tokens) goes first and alone.
    assert micro.batches[0].ground_truth == ["gt5"]


def test_split_by_tokens_rejects_a_row_longer_than_the_budget():
    with pytest.raises(ValueError, match="does not fit max_tokens=5"):
        make_rollout([3], [4]).split_by_tokens(max_tokens=5)


def test_pack_greedy_starts_a_group_when_the_next_item_would_exceed_the_budget():
    lengths = [3, 2, 4, 1]

    def tokens(group):
        return sum(lengths[i] for i in group)

    assert pack_greedy([0, 1, 2, 3], 5, tokens) == [[0, 1], [2, 3]]
    assert pack_greedy([3, 1, 0, 2], 5, tokens) == [[3, 1], [0], [2]]  # the order given is kept
    assert pack_greedy([2, 0], 3, tokens) == [[2], [0]]  # an item over the budget alone gets its own group
    assert pack_greedy([], 5, tokens) == []
