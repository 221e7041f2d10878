"""The ifeval scorer: a table of every check passing and failing, the ground-truth layouts, and
unknown checks or missing arguments as reward failures (never a silent 0)."""

from __future__ import annotations

import json

import pytest

from posttrain.rewards import build_reward_manager
from posttrain.rewards.instructions import CHECKS, ifeval_score
from posttrain.rewards.scorers import load_scorer
from posttrain.rewards.types import RewardInput

# (check, its arguments, response, passes)
TABLE = [
    ("verify_keywords", {"keyword_list": ["Paris", "river"]}, "The Seine is a RIVER in paris.", True),
    ("verify_keywords", {"keyword_list": ["Paris", "river"]}, "Paris has a lake.", False),
    ("verify_keyword_frequency", {"word": "cat", "N": 2}, "Cat and cat, not cats.", True),
    ("verify_keyword_frequency", {"word": "cat", "N": 2}, "cat cat cat", False),
    ("validate_forbidden_words", {"forbidden_words": ["bad", "awful"]}, "A badge is fine.", True),
    ("validate_forbidden_words", {"forbidden_words": ["bad", "awful"]}, "That was Awful.", False),
    ("verify_letter_frequency", {"letter": "z", "N": 3}, "Zoo zebra fizz", False),
    ("verify_letter_frequency", {"letter": "z", "N": 4}, "Zoo zebra fizz", True),
    ("verify_paragraph_count", {"N": 2}, "First part.\n* * *\nSecond part.", True),
    ("verify_paragraph_count", {"N": 2}, "First part.\n* * *\n\n* * *\nThird.", False),
    ("validate_word_constraint", {"N": 5, "quantifier": "at least"}, "one two three four five", True),
    ("validate_word_constraint", {"N": 5, "quantifier": "at most"}, "one two three four five six", False),
    ("validate_word_constraint", {"N": 20, "quantifier": "around"}, " ".join(["w"] * 22), True),
    ("validate_word_constraint", {"N": 20, "quantifier": "around"}, " ".join(["w"] * 23), False),
    ("verify_sentence_constraint", {"N": 2, "quantifier": "at least"}, "It rains. Does it? Yes!", True),
    ("verify_sentence_constraint", {"N": 2, "quantifier": "at most"}, "It rains. Does it? Yes!", False),
    ("validate_paragraphs", {"N": 2, "first_word": "however", "i": 2}, "Intro here.\n\nHowever, more.", True),
    ("validate_paragraphs", {"N": 2, "first_word": "however", "i": 2}, "Intro here.\n\nBut more.", False),
    ("verify_postscript", {"postscript_marker": "P.S."}, "Body.\nP.S. see you", True),
    ("verify_postscript", {"postscript_marker": "P.S."}, "Body.\nP.S.", False),
    ("validate_placeholders", {"N": 2}, "Send it to [name] at [address].", True),
    ("validate_placeholders", {"N": 2}, "Send it to [name].", False),
    ("verify_bullet_points", {"N": 2}, "List:\n* one\n- two", True),
    ("verify_bullet_points", {"N": 2}, "List:\n* one\n* two\n* three", False),
    ("validate_title", {}, "<<A Poem>>\nRoses...", True),
    ("validate_title", {}, "<< >> Roses", False),
    ("validate_choice", {"options": ["My answer is yes.", "My answer is no."]}, "My answer is no.", True),
    ("validate_choice", {"options": ["My answer is yes.", "My answer is no."]}, "Maybe.", False),
    ("validate_highlighted_sections", {"N": 2}, "Some *key* and **bold** words.", True),
    ("validate_highlighted_sections", {"N": 2}, "Only *one* here.", False),
    ("validate_sections", {"N": 2, "section_splitter": "SECTION"}, "SECTION 1\nabc\nSECTION 2\ndef", True),
    ("validate_sections", {"N": 2, "section_splitter": "SECTION"}, "SECTION 1\nabc", False),
    ("validate_json_format", {}, '```json\n{"a": [1, 2]}\n```', True),
    ("validate_json_format", {}, "{a: 1}", False),
    ("validate_repeat_prompt", {"original_prompt": "Write a haiku."}, "Write a haiku. Leaves fall...", True),
    ("validate_repeat_prompt", {"original_prompt": "Write a haiku."}, "Leaves fall...", False),
    ("validate_two_responses", {}, "Answer one.\n******\nAnswer two.", True),
    ("validate_two_responses", {}, "Same.\n******\nSame.", False),
    ("validate_uppercase", {}, "ALL CAPS 42!", True),
    ("validate_uppercase", {}, "Not All Caps", False),
    ("validate_lowercase", {}, "all lower, 7 times.", True),
    ("validate_lowercase", {}, "almost all Lower", False),
    ("validate_frequency_capital_words", {"N": 3, "quantifier": "at most"}, "NOTE: THIS is fine", True),
    ("validate_frequency_capital_words", {"N": 3, "quantifier": "at least"}, "NOTE: this is fine", False),
    ("validate_end", {"end_phrase": "Any other questions?"}, "Done. Any other questions?  ", True),
    ("validate_end", {"end_phrase": "Any other questions?"}, "Any other questions? Bye.", False),
    ("validate_quotation", {}, '"Quoted whole."', True),
    ("validate_quotation", {}, '"Half quoted', False),
    ("validate_no_commas", {}, "No commas here.", True),
    ("validate_no_commas", {}, "One, two.", False),
]


def test_every_check_has_a_passing_and_a_failing_row():
    seen = {(name, passes) for name, _, _, passes in TABLE}
    assert seen == {(name, p) for name in CHECKS for p in (True, False)}


@pytest.mark.parametrize("name, args, response, passes", TABLE)
def test_instruction_check_table(name, args, response, passes):
    truth = json.dumps({"func_name": name, **args})  # ROLL's layout: the ground truth as JSON text
    out = ifeval_score("ifeval", f"<think>plan</think>{response}<|im_end|>", truth)
    assert out == {"score": float(passes), "pass_rate": float(passes)}


def test_several_checks_in_one_row_and_failures_are_counted():
    fn = load_scorer("ifeval", {}, "reward.workers.if.worker_cls")
    manager = build_reward_manager("naive", fn, on_error="fixed", failure_reward=-1.0)
    both = [{"func_name": "validate_lowercase"}, {"func_name": "validate_no_commas"}]
    samples = [
        RewardInput("ifeval", "all lower no commas", both, index=0),
        RewardInput("ifeval", "all lower, with a comma", both, index=1),
        RewardInput("ifeval", "text", {"func_name": "validate_response_language", "language": "en"}, index=2),
        RewardInput("ifeval", "text", {"func_name": "validate_word_constraint", "N": 3}, index=3),  # no quantifier
        RewardInput("ifeval", "text", "not json", index=4),
    ]
    out = manager.score(samples)
    assert out.scores == [1.0, 0.0, -1.0, -1.0, -1.0] and out.num_failures == 3
    assert out.extra["pass_rate"][:2] == [1.0, 0.5]
    strict = build_reward_manager("naive", fn)
    with pytest.raises(Exception, match="needs a language detector"):
        strict.score(samples[2:3])
