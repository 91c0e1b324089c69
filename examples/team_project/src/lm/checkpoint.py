"""Checkpoints as plain files: ``params.npz`` and ``opt.npz`` (each pytree's leaves by path) and ``state.json``
(step, data position), so any numpy can read them back."""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import numpy as np

PARAMS, OPT, STATE = "params.npz", "opt.npz", "state.json"


def _flat(tree: Any) -> dict[str, Any]:
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def _unflat(template: Any, saved: Any) -> Any:
    paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    return jax.tree_util.tree_unflatten(treedef, [saved[jax.tree_util.keystr(p)] for p, _ in paths])


def save(directory: str, params: Any, opt_state: Any, state: dict[str, Any]) -> None:
    """Host copies of ``params`` and ``opt_state`` (fully gathered) and ``state`` into ``directory``."""
    np.savez(os.path.join(directory, PARAMS), **_flat(params))
    np.savez(os.path.join(directory, OPT), **_flat(opt_state))
    with open(os.path.join(directory, STATE), "w", encoding="utf-8") as f:
        json.dump(state, f)


def load(directory: str, params_like: Any, opt_like: Any) -> tuple[Any, Any, dict[str, Any]]:
    """Numpy pytrees shaped like the templates, and the saved state."""
    with np.load(os.path.join(directory, PARAMS)) as p, np.load(os.path.join(directory, OPT)) as o:
        params, opt_state = _unflat(params_like, p), _unflat(opt_like, o)
    with open(os.path.join(directory, STATE), encoding="utf-8") as f:
        return params, opt_state, json.load(f)
