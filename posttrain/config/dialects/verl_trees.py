"""verl's trainer configs as data: how verl_defaults.yaml, verl_megatron_defaults.yaml and
verl_sft_defaults.yaml are made.

verl publishes each trainer config flattened into one file (``verl/trainer/config/
_generated_ppo_trainer.yaml`` and ``_generated_ppo_megatron_trainer.yaml``: Hydra's composition of
``ppo_trainer.yaml`` / ``ppo_megatron_trainer.yaml`` with their ``defaults`` lists). Each of the two
files here is that file with Hydra's ``_target_`` class paths left out (they name verl classes) and
its mandatory values (``???``, the rollout engine names) set to null: posttrain's engine is used
unless the line names one. Interpolations are kept; they resolve after the overrides, as in Hydra.

    python -m posttrain.config.dialects.verl_trees VERL_CHECKOUT

rewrites the files from a verl checkout (the same bytes for the same verl commit).

verl's SFT trainer (``verl.trainer.fsdp_sft_trainer``) has no generated file: its ``sft_trainer.yaml``
names one Hydra group (``optim: fsdp``), whose file is composed under ``optim`` and then overlaid
with sft_trainer.yaml's own ``optim`` keys (``_self_`` comes last), as Hydra composes it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
# our file -> (verl's generated file, our header)
TREES: dict[str, tuple[str, str]] = {
    "verl_defaults.yaml": ("_generated_ppo_trainer.yaml", """\
# verl's PPO trainer configuration (FSDP backend) as data: every key and its default value, the tree
# `posttrain ... --dialect verl KEY=VALUE` starts from, as verl's own launcher does. Hydra's
# `_target_` class paths are left out (they name verl classes); its two mandatory values (`???`,
# the rollout engine names) are null here: posttrain's engine is used unless the line names one.
# Interpolations are kept: they resolve after the overrides, as in Hydra.
# Checked against verl's trainer config at its release of 2026-01 (posttrain/config/dialects/verl_launch.py).
"""),
    "verl_megatron_defaults.yaml": ("_generated_ppo_megatron_trainer.yaml", """\
# verl's PPO trainer configuration for its Megatron backend (`--config-name ppo_megatron_trainer`) as
# data, made from verl's _generated_ppo_megatron_trainer.yaml as verl_defaults.yaml is made from
# _generated_ppo_trainer.yaml (posttrain/config/dialects/verl_trees.py): `_target_` left out, `???`
# null, interpolations kept. posttrain runs it on FSDP2: the `megatron` sections translate as
# posttrain/config/dialects/verl_megatron.py says.
"""),
}


SFT_TREE = ("verl_sft_defaults.yaml", "sft_trainer.yaml", """\
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


def render(generated: Path, header: str) -> str:
    """Our file's text from verl's generated file."""
    tree = clean(yaml.safe_load(generated.read_text()))
    return header + yaml.safe_dump(tree, sort_keys=False, default_flow_style=False, width=1000)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m posttrain.config.dialects.verl_trees VERL_CHECKOUT", file=sys.stderr)
        return 2
    config_dir = Path(argv[0]) / "verl" / "trainer" / "config"
    for ours, (theirs, header) in TREES.items():
        (HERE / ours).write_text(render(config_dir / theirs, header))
        print(f"wrote {HERE / ours} from {config_dir / theirs}")
    ours, theirs, header = SFT_TREE
    (HERE / ours).write_text(header + yaml.safe_dump(compose_sft(config_dir), sort_keys=False, default_flow_style=False, width=1000))
    print(f"wrote {HERE / ours} from {config_dir / theirs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
