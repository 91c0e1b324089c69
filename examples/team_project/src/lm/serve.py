"""``serve_app: lm.serve:app``: the model ``pretrain`` trained, answering next-token requests on the slice (Ray Serve,
public API only). Each replica loads the newest checkpoint of the run folder ``$RAYTPU_STORAGE`` holds (on GKE the
bucket's mount, ``/mnt/gcs/checkpoints``; locally the emulated slice's run folder), one replica per host holding all
its chips (``$RAYTPU_CHIPS_PER_HOST``).

POST ``{"tokens": [ids...]}`` -> ``{"next_token": id, "top": [[id, logit], ...], "step": N, "checkpoint": PATH}``.
``$LM_SERVE_RUN`` names the training run's prefix (default ``pretrain``: every ``pretrain-<run id>``).
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from lm import checkpoint, model, optim
from lm.config import resolve

TOP = 5


def latest_checkpoint(root: str, run: str) -> str:
    """The newest checkpoint Ray Train registered for a run ``<root>/<run>-*`` (the newest run first). Ray uploads a
    checkpoint's files in parallel and registers it in the run's checkpoint manager snapshot only once all are
    there, so a folder a preemption cut short mid-upload is never taken, whatever files it holds.
    Source: Ray 2.60 ``ray.train.Result.from_path`` (``CheckpointManager.latest_checkpoint_result``)."""
    import ray.train

    for folder in sorted(glob.glob(os.path.join(root, f"{run}-*")), key=os.path.getmtime, reverse=True):
        try:
            result = ray.train.Result.from_path(folder)
        except RuntimeError:  # no snapshot yet: the run registered no checkpoint
            continue
        if result.checkpoint is not None:
            return str(result.checkpoint.path)
    raise FileNotFoundError(f"no checkpoint of run {run!r} under {root} (train it first: raytpu submit {run})")


class NextToken:
    """One replica: the params of the newest checkpoint on this host's chips, a jitted forward."""

    def __init__(self, run: str = "pretrain") -> None:
        self.directory = latest_checkpoint(os.environ["RAYTPU_STORAGE"], os.environ.get("LM_SERVE_RUN", run))
        with open(os.path.join(self.directory, checkpoint.STATE), encoding="utf-8") as f:
            state = json.load(f)
        self.config = resolve(state["config"])
        self.step = int(state["step"])
        shapes = jax.eval_shape(lambda: model.init_params(self.config, jax.random.key(self.config.seed)))
        params, _, _ = checkpoint.load(self.directory, shapes, jax.eval_shape(optim.init, shapes))
        self.params = jax.tree_util.tree_map(jnp.asarray, params)
        config = self.config
        self.forward = jax.jit(lambda p, tokens: model.logits(p, tokens, config)[0, -1])

    def bad(self, tokens: Any) -> str | None:
        """Why ``tokens`` cannot be scored, or None."""
        c = self.config
        if not isinstance(tokens, list) or not tokens or len(tokens) > c.seq_len:
            return f"tokens: a list of 1 to {c.seq_len} token ids"
        if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < c.vocab for t in tokens):
            return f"tokens: ids are integers in [0, {c.vocab})"
        return None

    async def __call__(self, request: Request) -> Any:
        try:
            tokens = (await request.json()).get("tokens")
        except (ValueError, AttributeError):
            tokens = None
        problem = self.bad(tokens)
        if problem is not None:
            return JSONResponse({"error": problem}, status_code=400)
        logits = np.asarray(self.forward(self.params, jnp.asarray([tokens], dtype=jnp.int32)))
        top = np.argsort(-logits)[:TOP]
        return {"next_token": int(top[0]), "top": [[int(i), float(logits[i])] for i in top], "step": self.step,
                "checkpoint": self.directory}


def _chips() -> int:
    return int(os.environ.get("RAYTPU_CHIPS_PER_HOST", "0"))


app = serve.deployment(name="NextToken", num_replicas=int(os.environ.get("RAYTPU_HOSTS", "1")),
                       ray_actor_options={"num_cpus": 0, "resources": {"TPU": _chips()} if _chips() else {}}
                       )(NextToken).bind()
"""One replica per host of the slice, each on all of that host's chips (the variables the kit sets where Serve builds
the app: on GKE the RayService's hosts, locally the emulated slice's)."""
