import pytest
import torch

from posttrain.rewards import place_scores


def test_score_lands_on_the_last_valid_response_token():
    scores = torch.tensor([0.5, -1.0, 2.0, 3.0])
    response_mask = torch.tensor(
        [
            [1, 1, 1, 0],
            [1, 1, 1, 1],
            [1, 0, 1, 0],  # a hole (e.g. tool output) does not move the score off the last real token
            [0, 0, 0, 0],  # empty response: no token to carry the score
        ],
        dtype=torch.float32,
    )
    expected = torch.tensor(
        [
            [0.0, 0.0, 0.5, 0.0],
            [0.0, 0.0, 0.0, -1.0],
            [0.0, 0.0, 2.0, 0.0],
            [0.0, 0.0, 0.0, 0.0],
        ]
    )
    placed = place_scores(scores, response_mask)
    assert torch.equal(placed, expected)
    assert torch.equal(placed.sum(-1), torch.tensor([0.5, -1.0, 2.0, 0.0]))


def test_shapes_are_checked():
    with pytest.raises(ValueError, match=r"expected scores \(B,\) and response_mask \(B, T\)"):
        place_scores(torch.zeros(3), torch.ones(2, 4))
