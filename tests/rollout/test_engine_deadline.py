"""SamplingParams.deadline in the hf engine: rows still decoding at the deadline end there, flagged in
RolloutBatch.timed_out apart from rows a stop or the length budget ended (explorer.max_timeout)."""

import itertools

import torch

from posttrain.rollout import HFEngine, SamplingParams
from tests.rollout.test_hf_engine import PAD, prompt_batch


class StepClock:
    """A fake time.time: every reading advances it by one second."""

    def __init__(self) -> None:
        self.ticks = itertools.count()

    def __call__(self) -> float:
        return float(next(self.ticks))


def test_rows_still_decoding_at_the_deadline_are_cut_and_flagged(tiny_lm):
    free = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD)
    params = SamplingParams(do_sample=False, max_new_tokens=10)
    full = free.generate(prompt_batch(), params, expected_version=0)
    assert full.timed_out is None  # no deadline: nothing flagged, the field stays empty
    eos = full.response_ids[0, 1].item()  # row 0 stops at its 2nd token
    assert eos not in full.response_ids[1:, :4].flatten().tolist()  # rows 1 and 2 keep going past step 4
    engine = HFEngine(tiny_lm, eos_token_ids=[eos], pad_token_id=PAD)
    engine.clock = StepClock()  # read once after each decode step: 0, 1, 2, ...
    cut = engine.generate(prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=10, deadline=3.0), expected_version=0)
    # the clock reads 3 after the 4th token: rows 1 and 2 stop there, row 0 had ended at its EOS
    assert cut.response_mask.sum(1).tolist() == [2.0, 4.0, 4.0]
    assert cut.timed_out.tolist() == [False, True, True]
    assert cut.response_ids[1:, :4].tolist() == full.response_ids[1:, :4].tolist()  # same tokens up to the cut
    # a deadline that is not reached flags nothing; the length budget is not a timeout
    late = HFEngine(tiny_lm, eos_token_ids=[eos], pad_token_id=PAD)
    late.clock = StepClock()
    out = late.generate(prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=6, deadline=100.0), expected_version=0)
    assert out.timed_out.tolist() == [False, False, False] and out.response_mask.sum(1).tolist() == [2.0, 6.0, 6.0]


def test_a_deadline_already_passed_leaves_one_token_per_row_and_shards_and_chunks_agree(tiny_lm):
    """With the real clock and a deadline in the past every row gets its first token and is cut
    (unless that token ended it), whether the rows decode in one batch, in chunks or in threads."""
    passed = SamplingParams(do_sample=True, n=2, max_new_tokens=8, deadline=0.0)
    outs = [HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD, seed=3, **kw).generate(prompt_batch(), passed, expected_version=0)
            for kw in ({}, {"max_num_seqs": 2}, {"decode_workers": 2})]
    for out in outs:
        assert out.response_mask.sum(1).tolist() == [1.0] * 6
        assert out.timed_out.dtype == torch.bool and out.timed_out.all()
        assert out.response_ids.tolist() == outs[0].response_ids.tolist()
