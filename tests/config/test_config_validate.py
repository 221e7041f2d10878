"""The validator on a toy schema: types, unknown keys, bounds, choices, todo fields, all problems."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from posttrain.config.fields import param, section
from posttrain.config.validate import suggest, validate
from posttrain.errors import ConfigError


@section
class Optim:
    """Toy optimizer."""

    lr: float = param(1e-3, doc="Learning rate.", gt=0)
    betas: list[float] = param(factory=lambda: [0.9, 0.99], doc="Adam betas.")


@section
class Train:
    """Toy training section."""

    epochs: int = param(1, doc="Epochs.", ge=1)
    ratio: float = param(0.5, doc="A ratio.", ge=0, le=1)
    enabled: bool = param(True, doc="On or off.")
    files: list[str] = param(factory=list, doc="Files.")
    limit: int | None = param(None, doc="Optional limit.", ge=1)
    mode: str = param("fast", doc="Mode.", choices=["fast", "slow"])
    kind: Literal["a", "b"] = param("a", doc="Literal kind.")
    either: int | str = param(0, doc="Int or string.")
    extra: dict[str, Any] = param(factory=dict, doc="Free-form kwargs.")
    fancy: str = param("none", doc="Not there yet.", todo="fancy mode (issue 9)")
    optim: Optim = param(factory=Optim, doc="Optimizer.")


@section
class Eval:
    """Toy eval section."""

    every: int = param(10, doc="Eval interval.", ge=1)
    epochs_eval: int = param(1, doc="Eval epochs.")


@section
class Toy:
    """Toy root."""

    train: Train = param(factory=Train, doc="Training.")
    eval: Eval = param(factory=Eval, doc="Evaluation.")
    name: str = param("run", doc="Run name.")


def problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate(raw, Toy)
    return info.value.problems


def test_defaults_fill_missing_keys_and_result_is_frozen():
    cfg = validate({}, Toy)
    assert cfg.train.epochs == 1 and cfg.train.optim.betas == [0.9, 0.99] and cfg.name == "run"
    with pytest.raises(AttributeError):
        cfg.train.epochs = 2  # type: ignore[misc]


def test_values_are_coerced_to_canonical_types():
    cfg = validate({"train": {"ratio": 1, "epochs": 3.0, "files": "a.parquet", "limit": 5, "either": "x"}}, Toy)
    assert cfg.train.ratio == 1.0 and isinstance(cfg.train.ratio, float)
    assert cfg.train.epochs == 3 and isinstance(cfg.train.epochs, int)
    assert cfg.train.files == ["a.parquet"]  # one path for a list[str] becomes a one-element list
    assert cfg.train.limit == 5 and cfg.train.either == "x"


def test_bool_is_not_an_int_and_quoted_number_is_not_a_number():
    assert problems({"train": {"epochs": True}}) == ["train.epochs: expected an integer, got true"]
    assert problems({"train": {"epochs": "1"}}) == [
        "train.epochs: expected an integer, got '1' (a quoted string; write the number without quotes)"
    ]
    assert problems({"train": {"enabled": 1}}) == ["train.enabled: expected true or false, got 1"]
    assert problems({"train": {"epochs": 1.5}}) == ["train.epochs: expected an integer, got 1.5"]


def test_type_errors_in_lists_name_the_index():
    assert problems({"train": {"optim": {"betas": [0.9, "x"]}}}) == [
        "train.optim.betas[1]: expected a number, got 'x'"
    ]
    assert problems({"train": {"files": 3}}) == ["train.files: expected a list of strings, got 3"]


def test_null_only_where_optional():
    assert validate({"train": {"limit": None}}, Toy).train.limit is None
    assert problems({"train": {"epochs": None}}) == ["train.epochs: expected an integer, got null"]


def test_string_field_given_a_number_suggests_quoting():
    assert problems({"name": 2024}) == ["name: expected a string, got 2024 (quote it if you mean the text: '2024')"]


def test_section_given_a_scalar():
    assert problems({"train": 5}) == ["train: expected a mapping of Train keys, got 5"]


def test_bounds_and_choices_name_the_key_the_value_and_what_is_allowed():
    assert problems({"train": {"epochs": 0}}) == ["train.epochs: must be >= 1, got 0"]
    assert problems({"train": {"ratio": 1.5}}) == ["train.ratio: must be <= 1, got 1.5"]
    assert problems({"train": {"optim": {"lr": 0}}}) == ["train.optim.lr: must be > 0, got 0.0"]
    assert problems({"train": {"mode": "slwo"}}) == ["train.mode: 'slwo' is not one of fast, slow; did you mean slow?"]
    assert problems({"train": {"kind": "c"}}) == ["train.kind: expected one of a, b, got 'c'"]


def test_unknown_key_suggests_a_sibling():
    assert problems({"train": {"epoch": 2}}) == ["train.epoch: unknown key; did you mean train.epochs?"]


def test_unknown_key_suggests_the_same_name_in_another_section():
    assert problems({"eval": {"lr": 2}}) == ["eval.lr: unknown key; did you mean train.optim.lr?"]


def test_unknown_key_without_any_suggestion_points_to_explain():
    assert problems({"train": {"zzzz": 1}}) == [
        "train.zzzz: unknown key; `posttrain config explain train` lists the valid keys"
    ]
    assert problems({"zzzz": 1}) == ["zzzz: unknown key; `posttrain config explain` lists the valid keys"]


def test_todo_field_is_refused_when_set_to_a_non_default_value():
    assert problems({"train": {"fancy": "on"}}) == [
        "train.fancy: not implemented yet (fancy mode (issue 9)); remove it or leave it at 'none'"
    ]
    assert validate({"train": {"fancy": "none"}}, Toy).train.fancy == "none"


def test_every_problem_is_reported_at_once():
    errs = problems({"train": {"epochs": 0, "mode": "x", "epoch": 1}, "eval": {"every": "often"}})
    assert len(errs) == 4
    assert str(ConfigError(errs)).startswith("invalid configuration:\n  - train.epoch: unknown key")


def test_dict_fields_accept_free_form_values():
    assert validate({"train": {"extra": {"a": [1, {"b": None}]}}}, Toy).train.extra == {"a": [1, {"b": None}]}


def test_required_field_without_default():
    @section
    class Needs:
        """Needs a path."""

        path: str = param(doc="Required path.")

    with pytest.raises(ConfigError, match="path: is required; set it in the YAML or with an override"):
        validate({}, Needs)


def test_suggest_for_explain():
    assert suggest("train.optim.lrr", Toy) == ["train.optim.lr"]
    assert suggest("epochs_evl", Toy) == ["eval.epochs_eval"]
