import doctest
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import posttrain.tasks as tasks
from posttrain.errors import DataError
from posttrain.tasks import arithmetic, countdown, sort
from posttrain.tasks.answers import extract_answer
from posttrain.tasks.countdown import evaluate

ANY_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["<|im_end|>", "1<|im_end|>2", "\n\n", "((((", "1/0", "9" * 80, "2**99999", "-1", "[1]", "0x10"]
)


@pytest.mark.parametrize("module", [tasks, tasks.answers, arithmetic, countdown, sort, tasks.tool_calc])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


# --- what is extracted -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response, answer",
    [
        ("13359", "13359"),
        ("13359<|im_end|>", "13359"),
        ("13359<|im_end|>\n<|endoftext|><|endoftext|>", "13359"),
        ("  13359 \n", "13359"),
        ("\n13359\nextra", "13359\nextra"),
        ("13359<|endoftext|>99", "13359"),
        ("<|im_end|>13359", ""),
        ("", ""),
        ("   \n ", ""),
    ],
)
def test_extract_answer(response, answer):
    assert extract_answer(response) == answer


# --- sort --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response, expected",
    [
        ("13359", 1.0),
        ("13359<|im_end|>", 1.0),
        ("13395", 0.8 * 3 / 5),
        ("95331", 0.8 * 1 / 5),  # only the middle 3 is in place
        ("1335", 0.8 * 4 / 5 - 0.1),
        ("133599", 0.8 * 5 / 5 - 0.1),
        ("", -0.1),
        ("abc", 0.8 * 0 - 0.1),
    ],
)
def test_sort_partial_credit(response, expected):
    result = sort.score(response, "13359")
    assert result["score"] == pytest.approx(expected)
    assert result["acc"] == (1.0 if expected == 1.0 else 0.0)


@settings(max_examples=200, deadline=None)
@given(ANY_TEXT)
def test_sort_score_is_bounded_for_any_text(response):
    assert -0.1 <= sort.score(response, "13359")["score"] <= 1.0


# --- arithmetic --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response, ground_truth, expected",
    [
        ("19", "19", 1.0),
        (" 19<|im_end|>", "19", 1.0),
        ("-12", "-12", 1.0),
        ("019", "19", 1.0),  # the same integer
        ("18", "19", 0.0),
        ("19.0", "19", 0.0),  # not an integer literal
        ("1 9", "19", 0.0),
        ("+19", "19", 0.0),
        ("", "19", 0.0),
        ("nineteen", "19", 0.0),
    ],
)
def test_arithmetic_right_wrong_empty_malformed(response, ground_truth, expected):
    assert arithmetic.score(response, ground_truth) == {"score": expected, "acc": expected}


# --- countdown ---------------------------------------------------------------------------------

GT = json.dumps({"numbers": [3, 5, 7], "target": 22})


@pytest.mark.parametrize(
    "response, expected",
    [
        ("3*5+7", 1.0),
        ("7+5*3<|im_end|>", 1.0),
        ("(7+5)*3-14", 0.0),  # 14 is not given
        ("3+5+7", countdown.FORMAT_SCORE),  # valid, wrong value
        ("3*5+7+3", 0.0),  # 3 used twice
        ("3*5+7.0", 0.0),  # floats are not allowed
        ("-3+5*5", 0.0),  # unary minus is not allowed (and 5 twice)
        ("3**5", 0.0),
        ("7/(5-5)", 0.0),  # division by zero
        ("__import__('os').system('true')", 0.0),
        ("3*5+", 0.0),
        ("", 0.0),
    ],
)
def test_countdown_scores(response, expected):
    assert countdown.score(response, GT)["score"] == expected


def test_countdown_division_is_exact():
    gt = json.dumps({"numbers": [7, 2, 3], "target": 7})
    assert countdown.score("7/2*2", json.dumps({"numbers": [7, 2, 2], "target": 7}))["score"] == 1.0
    assert countdown.score("(7+7)/2", gt)["score"] == 0.0  # 7 twice


def test_countdown_refuses_non_decimal_literals():
    assert evaluate("0x10") is None
    assert evaluate("1_0") is None
    assert evaluate("True+1") is None


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT)
def test_countdown_never_raises_on_any_text(response):
    assert countdown.score(response, GT)["score"] in (0.0, countdown.FORMAT_SCORE, 1.0)


# --- dispatch ----------------------------------------------------------------------------------


def test_compute_score_dispatches_by_data_source():
    assert tasks.compute_score("posttrain/sort", "13359", "13359") == {"score": 1.0, "acc": 1.0}
    assert tasks.compute_score("posttrain/arithmetic", "19", "19", {"index": 0}) == {"score": 1.0, "acc": 1.0}
    assert tasks.compute_score("posttrain/countdown", "3*5+7", GT)["acc"] == 1.0


@pytest.mark.parametrize("data_source", ["openai/gsm8k", "posttrain/nope", "sort"])
def test_compute_score_unknown_data_source_lists_known_ones(data_source):
    with pytest.raises(DataError, match="posttrain/arithmetic, posttrain/colour, posttrain/countdown, posttrain/sort"):
        tasks.compute_score(data_source, "1", "1")
