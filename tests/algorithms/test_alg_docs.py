from pathlib import Path

from posttrain.algorithms import docgen

DOC = Path(__file__).resolve().parents[2] / "docs" / "algorithms.md"


def test_docs_algorithms_md_is_in_sync_with_docstrings():
    assert DOC.read_text() == docgen.render(), (
        "docs/algorithms.md is stale: run `python -m posttrain.algorithms.docgen > docs/algorithms.md`"
    )


def test_every_documented_algorithm_has_formula_names_and_paper():
    for title, obj, _ in docgen.documented():
        summary, sections = docgen.parse_docstring(obj)
        assert summary, title
        missing = [s for s in docgen.REQUIRED if not sections.get(s)]
        assert not missing, f"{title} docstring lacks {missing}"


def test_every_builtin_registry_entry_is_documented():
    import posttrain.algorithms as A

    titles = {t for t, _, _ in docgen.documented()}
    for name in A.advantage_estimator_names():
        if docgen._builtin(A.ADVANTAGE_ESTIMATORS[name]):
            assert f"`{name}` (advantage estimator)" in titles
    for name in A.policy_loss_names():
        if docgen._builtin(A.POLICY_LOSSES[name]):
            assert f"`{name}` (policy loss)" in titles
