"""What a checkpoint holds besides model weights, and how each part is written without pickle.

Every part round-trips through a format that cannot run code on load (the issue's rule, and verl's
`torch.load(weights_only=True)` practice):

- JSON: step counters, the data sampler, KL controller and running reward statistics, python's
  and numpy's RNG states (their tuples/arrays converted to lists).
- safetensors: torch's global RNG state (CPU and CUDA) and every `torch.Generator` a component
  owns (rollout sampling, mini-batch shuffling), as uint8 tensors.
- `torch.save` + `torch.load(weights_only=True)`: optimizer and LR-scheduler state dicts (tensors,
  numbers, strings, lists and dicts only; the weights-only unpickler refuses anything else).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from posttrain.files import atomic_write_text


class Stateful(Protocol):
    """Anything with a `state_dict` / `load_state_dict` pair (optimizers, schedulers, samplers...)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Extra:
    """A `Stateful` from two callables, for objects whose methods have other names."""

    get: Callable[[], dict[str, Any]]
    set: Callable[[dict[str, Any]], None]

    def state_dict(self) -> dict[str, Any]:
        return self.get()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set(state)


def python_numpy_rng() -> dict[str, Any]:
    """python's and numpy's global RNG states as JSON-able lists."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }


def restore_python_numpy_rng(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def save_generators(path: Path, generators: dict[str, torch.Generator]) -> None:
    """torch's global RNG (CPU, every CUDA device) and the named generators, into one safetensors file."""
    tensors = {"torch/cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch/cuda{i}"] = s
    for name, gen in generators.items():
        tensors[f"gen/{name}"] = gen.get_state()
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))


def load_generators(path: Path, generators: dict[str, torch.Generator]) -> None:
    tensors = load_file(str(path))
    torch.set_rng_state(tensors["torch/cpu"])
    if torch.cuda.is_available():
        states = [tensors[f"torch/cuda{i}"] for i in range(torch.cuda.device_count()) if f"torch/cuda{i}" in tensors]
        if states:
            torch.cuda.set_rng_state_all(states)
    for name, gen in generators.items():
        if f"gen/{name}" not in tensors:
            raise KeyError(f"checkpoint {path} has no state for generator {name!r}")
        gen.set_state(tensors[f"gen/{name}"])


def save_torch_state(path: Path, state: dict[str, Any]) -> None:
    torch.save(state, path)


def load_torch_state(path: Path) -> dict[str, Any]:
    """Only tensors and plain containers: `weights_only=True` never unpickles arbitrary objects."""
    return torch.load(path, map_location="cpu", weights_only=True)


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))
