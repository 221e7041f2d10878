"""SamplingParams.over_rollout in the hf engine (explorer.over_rollout): once ceil(groups x (1 - ratio))
of a call's prompt groups have finished, the rows still decoding end `wait_s` later, flagged in
RolloutBatch.timed_out and RolloutBatch.over_rolled (posttrain.rollout.progress)."""

import pytest

from posttrain.rollout import HFEngine, SamplingParams
from posttrain.rollout.progress import GroupProgress, OverRollout
from tests.rollout.test_engine_deadline import StepClock
from tests.rollout.test_hf_engine import PAD, prompt_batch


def engine(tiny_lm, eos, **kw):
    e = HFEngine(tiny_lm, eos_token_ids=[eos], pad_token_id=PAD, **kw)
    e.clock = StepClock()  # 0, 1, 2, ... one second per reading
    return e


@pytest.fixture
def eos(tiny_lm):
    full = HFEngine(tiny_lm, eos_token_ids=[], pad_token_id=PAD).generate(
        prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=10), expected_version=0)
    eos = full.response_ids[0, 1].item()  # row 0 stops at its 2nd token, row 1 runs to 10, row 2 to its 7th
    assert eos not in full.response_ids[1:, :6].flatten().tolist()
    return eos


def test_the_rows_still_decoding_end_wait_seconds_after_the_required_groups_finished(tiny_lm, eos):
    params = SamplingParams(do_sample=False, max_new_tokens=10, over_rollout=OverRollout(0.7, 2.0))  # 3 groups: ceil(0.9) = 1 must finish
    out = engine(tiny_lm, eos).generate(prompt_batch(), params, expected_version=0)
    # row 0 ends at its 2nd token, the clock reading 0 then: cutoff 2; it reads 1 after the 2nd token, 2 after the 3rd
    assert out.response_mask.sum(1).tolist() == [2.0, 3.0, 3.0]
    assert out.timed_out.tolist() == [False, True, True] and out.over_rolled.tolist() == [False, True, True]
    # a longer wait (explorer.over_rollout.wait_after_min): cutoff 4, read after the 5th token
    longer = SamplingParams(do_sample=False, max_new_tokens=10, over_rollout=OverRollout(0.7, 4.0))
    out = engine(tiny_lm, eos).generate(prompt_batch(), longer, expected_version=0)
    assert out.response_mask.sum(1).tolist() == [2.0, 5.0, 5.0] and out.over_rolled.tolist() == [False, True, True]


def test_a_fixed_deadline_before_the_cutoff_is_a_timeout_not_over_rollout(tiny_lm, eos):
    params = SamplingParams(do_sample=False, max_new_tokens=10, deadline=1.5, over_rollout=OverRollout(0.7, 2.0))
    out = engine(tiny_lm, eos).generate(prompt_batch(), params, expected_version=0)
    # readings: 0 after token 1; 1 when row 0 ends (cutoff 3); 2 >= 1.5 after token 2: the fixed deadline cuts first
    assert out.response_mask.sum(1).tolist() == [2.0, 2.0, 2.0]
    assert out.timed_out.tolist() == [False, True, True] and out.over_rolled.tolist() == [False, False, False]


def test_ratio_zero_waits_for_every_group(tiny_lm, eos):
    free = engine(tiny_lm, eos).generate(prompt_batch(), SamplingParams(do_sample=False, max_new_tokens=10), expected_version=0)
    params = SamplingParams(do_sample=False, max_new_tokens=10, over_rollout=OverRollout(0.0, 2.0))
    out = engine(tiny_lm, eos).generate(prompt_batch(), params, expected_version=0)
    assert out.response_ids.tolist() == free.response_ids.tolist() and out.response_mask.sum(1).tolist() == [2.0, 10.0, 7.0]
    assert not out.timed_out.any() and not out.over_rolled.any()


def test_sequential_chunks_share_the_count(tiny_lm, eos):
    """max_num_seqs 1: the rows decode one after another; the group finished in the first chunk sets
    the cutoff that ends the second chunk at its 2nd token and the third at its first."""
    params = SamplingParams(do_sample=False, max_new_tokens=10, over_rollout=OverRollout(0.7, 2.0))
    out = engine(tiny_lm, eos, max_num_seqs=1).generate(prompt_batch(), params, expected_version=0)
    # readings: 0 when row 0 ends (cutoff 2); row 1: 1 after token 1, 2 after token 2 (cut); row 2: 3 after token 1 (cut)
    assert out.response_mask.sum(1).tolist() == [2.0, 2.0, 1.0]
    assert out.over_rolled.tolist() == [False, True, True]


def test_a_group_finishes_when_all_its_rows_have():
    times = iter([5.0])
    p = GroupProgress(["a", "a", "b", "b", "c", "c"], OverRollout(0.5, 1.0), lambda: next(times))  # ceil(1.5) = 2 groups
    p.rows_done(["a", "b"])
    p.rows_done(["a"])
    assert p.cutoff is None  # only a is whole
    p.rows_done(["b"])
    assert p.cutoff == 6.0 and p.limit(None) == 6.0 and p.limit(5.5) == 5.5
    assert p.cut_by_it(None) and p.cut_by_it(7.0) and not p.cut_by_it(6.0)
    with pytest.raises(ValueError, match="0 <= ratio < 1"):
        OverRollout(1.0, 30)
    with pytest.raises(ValueError, match="wait_s > 0"):
        OverRollout(0.5, 0)


def test_decode_threads_share_the_count(tiny_lm, eos):
    """decode_workers 2: rows 0 and 1 decode in one thread, row 2 in another. Row 0 ending (its 2nd
    token) starts the 1 ms wait for both threads; each clock reading takes 20 ms, so the other thread
    reads past the cutoff long before row 2 reaches the EOS it draws at its 7th token."""
    import time

    def slow_clock() -> float:
        time.sleep(0.02)
        return time.time()

    params = SamplingParams(do_sample=False, max_new_tokens=10, deadline=time.time() + 600, over_rollout=OverRollout(0.7, 0.001))
    e = HFEngine(tiny_lm, eos_token_ids=[eos], pad_token_id=PAD, decode_workers=2)
    e.clock = slow_clock
    out = e.generate(prompt_batch(), params, expected_version=0)
    lengths = out.response_mask.sum(1).tolist()
    assert lengths[0] == 2.0 and lengths[1] < 10 and lengths[2] < 7
    assert out.over_rolled.tolist() == [False, True, True] and out.timed_out.tolist() == [False, True, True]
