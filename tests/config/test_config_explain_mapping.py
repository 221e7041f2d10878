"""`config explain` text and the docs/config-mapping.md generator, on a toy schema and the real one."""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.config.explain import explain
from posttrain.config.fields import iter_fields, param, section
from posttrain.config.mapping import collect_unsupported, mapping_rows, render
from posttrain.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@section
class Optim:
    """Shared optimizer section."""

    lr: float = param(1e-6, doc="Peak learning rate.", gt=0, refs=["verl:.lr", "roll:.learning_rate"])


@section
class Actor:
    """The policy update."""

    epochs: int = param(1, doc="Passes over each batch.", ge=1, refs=["verl:actor.ppo_epochs"])
    mode: str = param("a", doc="A mode.", choices=["a", "b"])
    fancy: bool = param(False, doc="Something later.", todo="needs GPU kernels", refs=["trinity:trainer.fancy"])
    optim: Optim = param(factory=Optim, doc="Actor optimizer.", refs=["verl:actor.optim"])


@section
class Critic:
    """The value model."""

    optim: Optim = param(factory=Optim, doc="Critic optimizer.", refs=["verl:critic.optim"])


@section
class Toy:
    """A toy experiment."""

    actor: Actor = param(factory=Actor, doc="Policy training.")
    critic: Critic = param(factory=Critic, doc="Value model.")
    tags: list[str] = param(factory=list, doc="Free tags.")


def test_relative_refs_resolve_per_use_of_a_shared_section():
    refs = {path: info.refs for path, info in iter_fields(Toy)}
    assert refs["actor.optim.lr"] == ("verl:actor.optim.lr",)  # roll has no prefix here: dropped
    assert refs["critic.optim.lr"] == ("verl:critic.optim.lr",)


def test_explain_a_key():
    assert explain("actor.optim.lr", Toy) == (
        "actor.optim.lr\n"
        "  Peak learning rate.\n"
        "\n"
        "  type:     float\n"
        "  default:  1.0e-06\n"
        "  allowed:  > 0\n"
        "  status:   implemented\n"
        "  same as:  verl:actor.optim.lr\n"
    )
    text = explain("actor.fancy", Toy)
    assert "  status:   not implemented yet: needs GPU kernels\n" in text
    assert "  default:  false\n" in explain("actor.fancy", Toy)
    assert "  allowed:  one of a, b\n" in explain("actor.mode", Toy)


def test_explain_a_section_lists_its_fields():
    assert explain("actor", Toy) == (
        "actor: The policy update.\n"
        "\n"
        "  epochs  int = 1       Passes over each batch.\n"
        "  mode    str = a       A mode.\n"
        "  fancy   bool = false  Something later.  [not implemented yet]\n"
        "  optim   [section]     Actor optimizer.\n"
        "\n"
        "`posttrain config explain actor.epochs` shows one entry in full.\n"
    )


def test_explain_without_a_key_lists_the_sections():
    text = explain(None, Toy)
    assert text.startswith("posttrain config: A toy experiment.\n\n  actor   [section]")
    assert "  tags    list[str] = []  Free tags." in text


def test_explain_unknown_key_suggests():
    with pytest.raises(ConfigError) as info:
        explain("actor.epoch", Toy)
    assert str(info.value) == "invalid configuration: actor.epoch: no such config key or section; did you mean actor.epochs?"
    with pytest.raises(ConfigError, match="did you mean actor.optim.lr or critic.optim.lr"):
        explain("lr", Toy)


def test_mapping_rows_cover_refs_todo_and_unsupported():
    rows = mapping_rows(Toy, {"roll:strategy.megatron": "Megatron is out of scope"})
    assert [(r.framework, r.key, r.native, r.status) for r in rows] == [
        ("verl", "actor.optim.lr", "actor.optim.lr", "supported"),
        ("verl", "actor.ppo_epochs", "actor.epochs", "supported"),
        ("verl", "critic.optim.lr", "critic.optim.lr", "supported"),
        ("roll", "strategy.megatron", None, "not supported: Megatron is out of scope"),
        ("trinity", "trainer.fancy", "actor.fancy", "not implemented yet: needs GPU kernels"),
    ]


def test_mapping_refuses_a_key_that_is_both_mapped_and_unsupported():
    with pytest.raises(ValueError, match="both mapped by a field and listed as UNSUPPORTED"):
        mapping_rows(Toy, {"verl:actor.ppo_epochs": "no"})


def test_render_groups_by_framework():
    text = render(Toy, {"roll:strategy.megatron": "Megatron | DeepSpeed are out of scope"})
    assert "| verl | 3 | 3 | 0 | 0 | 0 |" in text
    assert "| `strategy.megatron` | — | not supported: Megatron \\| DeepSpeed are out of scope |  |" in text
    assert text.index("## verl") < text.index("## ROLL") < text.index("## Trinity-RFT")


def test_unsupported_entries_of_the_real_sections_are_well_formed():
    for ref, reason in collect_unsupported().items():
        assert ref.partition(":")[0] in ("verl", "roll", "trinity") and reason


def test_docs_config_mapping_is_up_to_date():
    doc = REPO / "docs" / "config-mapping.md"
    regenerate = "regenerate it: python -m posttrain.config.mapping > docs/config-mapping.md"
    assert doc.exists(), f"docs/config-mapping.md is missing; {regenerate}"
    assert doc.read_text(encoding="utf-8") == render(), f"docs/config-mapping.md is out of date; {regenerate}"
