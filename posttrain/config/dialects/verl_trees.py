"""verl's trainer configs as data: how the verl_*defaults.yaml files are made.

verl publishes each trainer config flattened into one file (``verl/trainer/config/
_generated_ppo_trainer.yaml``, ``_generated_ppo_megatron_trainer.yaml`` and, from its 0.10 release,
``_generated_ppo_veomni_trainer.yaml``: Hydra's composition of ``ppo_trainer.yaml`` with its
``defaults`` lists, the engine chosen). Each file here is one of those with Hydra's ``_target_``
class paths left out (they name verl classes) and its mandatory values (``???``, the rollout engine
names) set to null: posttrain's engine is used unless the line names one. Interpolations are kept;
they resolve after the overrides, as in Hydra.

posttrain reads two of verl's releases (`RELEASES`): its configuration moved between them (0.10 has a
``reward`` section in place of ``reward_model``'s reward-loop keys, ``critic.fsdp`` in place of
``critic.model.fsdp_config``, a ``distillation`` section, the ``model_engine`` choice), and users run
launch lines written for either. A launch line is read with the newest release whose tree has every
key it sets (posttrain.config.dialects.verl_launch).

    python -m posttrain.config.dialects.verl_trees VERL_CHECKOUT

rewrites the files of the checkout's release (``verl/version/version``) from it (the same bytes for
the same verl commit).

verl's SFT trainer (``verl.trainer.fsdp_sft_trainer``, 0.8) has no generated file: its ``sft_trainer.yaml``
names one Hydra group (``optim: fsdp``), whose file is composed under ``optim`` and then overlaid
with sft_trainer.yaml's own ``optim`` keys (``_self_`` comes last), as Hydra composes it.
"""

from __future__ import annotations

import functools
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
# verl's releases posttrain reads, newest first: release -> (our files' infix, the month of the commit checked)
RELEASES: dict[str, tuple[str, str]] = {"0.10": ("_0_10", "2026-08"), "0.8": ("", "2026-01")}
NEWEST = next(iter(RELEASES))
# verl's trees: our base name -> (verl's generated file, what the tree is, the releases that have it)
GENERATED: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "ppo_trainer": ("_generated_ppo_trainer.yaml", "PPO trainer configuration (FSDP backend)", ("0.10", "0.8")),
    "ppo_megatron_trainer": ("_generated_ppo_megatron_trainer.yaml",
                             "PPO trainer configuration for its Megatron backend (`--config-name ppo_megatron_trainer`, "
                             "or `model_engine=megatron` from 0.10); posttrain runs it on FSDP2 (posttrain/config/dialects/verl_megatron.py)",
                             ("0.10", "0.8")),
    "ppo_veomni_trainer": ("_generated_ppo_veomni_trainer.yaml",
                           "PPO trainer configuration for its VeOmni backend (`model_engine=veomni`); posttrain runs it on FSDP2 "
                           "(posttrain/config/dialects/verl_veomni.py)", ("0.10",)),
}
_OURS = {"ppo_trainer": "defaults", "ppo_megatron_trainer": "megatron_defaults", "ppo_veomni_trainer": "veomni_defaults"}


SFT = "sft_trainer"  # verl's SFT trainer (verl.trainer.fsdp_sft_trainer): posttrain.config.dialects.verl_sft


def tree_file(base: str, release: str) -> Path:
    """Our file of verl tree ``base`` at ``release``: verl_defaults.yaml (0.8's FSDP tree),
    verl_0_10_megatron_defaults.yaml, ..."""
    return HERE / f"verl{RELEASES[release][0]}_{_OURS[base]}.yaml"


# (verl tree, release) -> our file of it
FILES: dict[tuple[str, str], Path] = {(base, release): tree_file(base, release) for base, (_, _, releases) in GENERATED.items() for release in releases}
FILES[(SFT, "0.8")] = HERE / "verl_sft_defaults.yaml"


def releases_of(base: str) -> list[str]:
    """The verl releases that have tree ``base``, newest first."""
    return [release for release in RELEASES if (base, release) in FILES]


@functools.lru_cache(maxsize=8)
def defaults_tree(base: str = "ppo_trainer", release: str | None = None) -> dict[str, Any]:
    """verl's trainer config ``base`` at ``release`` (the newest that has it when None): every key
    and its default (interpolations unresolved)."""
    return yaml.safe_load(FILES[(base, release or releases_of(base)[0])].read_text())


def header(base: str, release: str) -> str:
    text = (f"verl {release}'s {GENERATED[base][1]} as data: every key and its default value, the tree "
            "`posttrain ... --dialect verl KEY=VALUE` starts from, as verl's own launcher does. Hydra's `_target_` "
            "class paths are left out (they name verl classes); its mandatory values (`???`, the rollout engine names) "
            "are null here: posttrain's engine is used unless the line names one. Interpolations are kept: they resolve "
            f"after the overrides, as in Hydra. Made from verl's {GENERATED[base][0]} at a commit of {RELEASES[release][1]} "
            "by posttrain/config/dialects/verl_trees.py.")
    return textwrap.indent(textwrap.fill(text, width=98), "# ") + "\n"


SFT_TREE = (FILES[(SFT, "0.8")].name, "sft_trainer.yaml", """\
# verl's SFT trainer configuration (`torchrun -m verl.trainer.fsdp_sft_trainer`, `--config-name
# sft_trainer` here) as data: sft_trainer.yaml composed with its `optim: fsdp` group as Hydra composes
# it, `_target_` left out (posttrain/config/dialects/verl_trees.py). posttrain runs it as an SFT stage
# (posttrain/config/dialects/verl_sft.py).
""")


def compose_sft(config_dir: Path) -> dict[str, Any]:
    """sft_trainer.yaml with its ``defaults`` groups composed in (each group's file under its name,
    the file's own keys over them)."""
    from posttrain.config.validate import deep_merge

    own = yaml.safe_load((config_dir / SFT_TREE[1]).read_text())
    tree: dict[str, Any] = {}
    for entry in own.pop("defaults", []):
        if isinstance(entry, dict):
            for group, name in entry.items():
                tree[group] = yaml.safe_load((config_dir / group / f"{name}.yaml").read_text())
    return _floats(clean(deep_merge(tree, own)))


def _floats(node: Any) -> Any:
    """Numbers PyYAML reads as text (``1e-5``: YAML 1.1 wants a dot) as the floats Hydra reads."""
    if isinstance(node, dict):
        return {k: _floats(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_floats(v) for v in node]
    if isinstance(node, str) and re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", node):
        return float(node)
    return node


def clean(node: Any) -> Any:
    """verl's tree without ``_target_`` keys, with ``???`` (Hydra's mandatory value) as null."""
    if isinstance(node, dict):
        return {k: clean(v) for k, v in node.items() if k != "_target_"}
    if isinstance(node, list):
        return [clean(v) for v in node]
    return None if node == "???" else node


def render(generated: Path, head: str) -> str:
    """Our file's text from verl's generated file."""
    tree = clean(yaml.safe_load(generated.read_text()))
    return head + yaml.safe_dump(tree, sort_keys=False, default_flow_style=False, width=1000)


def release_of(checkout: Path) -> str:
    """The release of ``RELEASES`` a verl checkout is (its ``verl/version/version``, ``0.10.0.dev``)."""
    version = (checkout / "verl" / "version" / "version").read_text().strip()
    release = ".".join(version.split(".")[:2])
    if release not in RELEASES:
        raise SystemExit(f"{checkout}: verl {version} is not a release posttrain reads ({', '.join(RELEASES)}): add it to RELEASES")
    return release


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m posttrain.config.dialects.verl_trees VERL_CHECKOUT", file=sys.stderr)
        return 2
    checkout = Path(argv[0])
    release = release_of(checkout)
    config_dir = checkout / "verl" / "trainer" / "config"
    for base, (theirs, _, releases) in GENERATED.items():
        if release in releases:
            tree_file(base, release).write_text(render(config_dir / theirs, header(base, release)))
            print(f"wrote {tree_file(base, release)} from {config_dir / theirs}")
    if release == "0.8":  # verl's FSDP SFT trainer, read from its 0.8 release
        ours, theirs, text = SFT_TREE
        (HERE / ours).write_text(text + yaml.safe_dump(compose_sft(config_dir), sort_keys=False, default_flow_style=False, width=1000))
        print(f"wrote {HERE / ours} from {config_dir / theirs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
