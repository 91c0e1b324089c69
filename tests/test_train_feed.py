"""The training feed (:class:`raytpu.workloads.support.train_data.Feed`) on 8 JAX CPU devices in one process, no Ray
cluster: batches arrive on the trainer's own sharding (no reshard before the step), padding rows carry weight 0, and a
feed started at a checkpointed position yields exactly the rows the first one had not yet given. Beside it, Ray 2.60's
own conversion (``ray.data.util.jax_util.jax_sync_generator``, what ``iter_jax_batches`` returns) on the same data, and
the device order it would use on a v5e 2x4 (``create_device_mesh`` over 8 "TPU v5 lite" devices)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.heavy  # one JAX process on 8 CPU devices (seconds)

PROBE = r"""
import json
import numpy as np
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax.experimental import mesh_utils
from ray.data.util.jax_util import jax_sync_generator
from raytpu.workloads import train
from raytpu.workloads.support import train_data

ROWS, FEATURES, GLOBAL = 20, 3, 8


class Shard:
    # one host's rows as Ray's DataIterator.iter_batches gives them: dicts of numpy columns, the last batch short
    def iter_batches(self, batch_size, batch_format, drop_last):
        ids = np.arange(ROWS)
        table = {"id": ids, "y": ids * 0.5, **{f"f{i}": ids + i / 10 for i in range(FEATURES)}}
        for start in range(0, ROWS, batch_size):
            yield {k: v[start:start + batch_size] for k, v in table.items()}


def take(feed, steps):
    out = []
    for _ in range(steps):
        x, y, w = feed.next()
        out.append({"ids": [int(v) for v, keep in zip(np.asarray(x)[:, 0], np.asarray(w)) if keep],
                    "weight": float(np.asarray(w).sum()), "rows": len(np.asarray(w))})
    return out


class V5e:  # what create_device_mesh reads of a TPU device (jax._src.mesh_utils._v5e_create_device_mesh)
    platform, device_kind, core_on_chip = "tpu", "TPU v5 lite", 0
    def __init__(self, i):
        self.id, self.coords = i, (i % 2, i // 2, 0)


devices = jax.devices()
ring = [devices[i] for i in (0, 1, 2, 3, 7, 6, 5, 4)]
report = {"v5e_2x4_ray_order": [d.id for d in mesh_utils.create_device_mesh((8,), [V5e(i) for i in range(8)])]}
for label, order in (("kit", devices), ("ring", ring)):
    mesh = Mesh(np.array(order).reshape(1, 8), train.MESH_AXES)
    sharding = NamedSharding(mesh, P(train.MESH_AXES))
    feed = train_data.Feed(FEATURES, GLOBAL, sharding, shard=Shard())
    x, y, w = feed.next()
    step = jax.jit(lambda x, y, w: jax.numpy.sum(w * (x[:, 0] - y[:, 0]))).lower(x, y, w).compile()
    step(x, y, w)  # an AOT executable takes only the sharding it was compiled for: a mismatch raises
    ray_batch = next(iter(jax_sync_generator([{"x": np.zeros((GLOBAL, FEATURES), np.float32)}], False, GLOBAL)))["x"]
    try:
        step(ray_batch, y, w)
        ray_accepted = True
    except ValueError:
        ray_accepted = False
    moved = sum(ray_batch.sharding.devices_indices_map(x.shape)[d] != sharding.devices_indices_map(x.shape)[d]
                for d in devices)
    report[label] = {"equal": [a.sharding == sharding for a in (x, y, w)], "ray_equivalent":
                     ray_batch.sharding.is_equivalent_to(sharding, 2), "ray_accepted": ray_accepted,
                     "ray_devices_moved": int(moved)}

sharding = NamedSharding(Mesh(np.array(devices).reshape(1, 8), train.MESH_AXES), P(train.MESH_AXES))
first = train_data.Feed(FEATURES, GLOBAL, sharding, shard=Shard())
report["epoch"] = take(first, 4)
report["summary"] = first.summary()
first = train_data.Feed(FEATURES, GLOBAL, sharding, shard=Shard())
take(first, 1)
report["position"] = position = first.position()
report["continued"] = take(first, 4)
report["resumed"] = take(train_data.Feed(FEATURES, GLOBAL, sharding, position, Shard()), 4)
report["odd_start"] = take(train_data.Feed(FEATURES, GLOBAL, sharding, {"epoch": 0, "rows": 5}, Shard()), 2)
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ray_lays_a_v5e_2x4_batch_out_in_ring_order_not_device_order(probe: dict[str, Any]) -> None:
    assert probe["v5e_2x4_ray_order"] == [0, 1, 2, 3, 7, 6, 5, 4]


@pytest.mark.parametrize("mesh", ["kit", "ring"])
def test_batches_arrive_on_the_trainers_sharding_and_its_compiled_step_takes_them(
        probe: dict[str, Any], mesh: str) -> None:
    assert probe[mesh]["equal"] == [True, True, True]


def test_rays_own_batch_would_move_half_the_devices_rows_on_a_ring_ordered_mesh(probe: dict[str, Any]) -> None:
    """The kit's CPU mesh is in Ray's order (nothing to move); a mesh in the v5e ring order is not: Ray's batch is
    not equivalent, the compiled step refuses it, and 4 of 8 devices would receive other rows every step."""
    assert probe["kit"] | {"equal": None} == {"equal": None, "ray_equivalent": True, "ray_accepted": True,
                                              "ray_devices_moved": 0}
    assert probe["ring"] | {"equal": None} == {"equal": None, "ray_equivalent": False, "ray_accepted": False,
                                               "ray_devices_moved": 4}


def test_padding_rows_carry_weight_zero_and_an_epoch_trains_each_row_once(probe: dict[str, Any]) -> None:
    epoch = probe["epoch"]  # 20 rows in batches of 8: 8, 8, 4 (+4 padding), then the next epoch
    assert [b["weight"] for b in epoch] == [8, 8, 4, 8] and all(b["rows"] == 8 for b in epoch)
    assert sorted(i for b in epoch[:3] for i in b["ids"]) == list(range(20))
    assert epoch[3]["ids"] == list(range(8))
    summary = probe["summary"]
    assert (summary["total_rows"], summary["unique_rows"], summary["id_ranges"]) == (20, 20, [[0, 20]])
    assert (summary["epochs_started"], summary["batches"], summary["start"]) == (2, 4, {"epoch": 0, "rows": 0})


def test_a_feed_started_at_a_position_continues_where_the_first_one_was(probe: dict[str, Any]) -> None:
    assert probe["position"] == {"epoch": 0, "rows": 8}
    assert probe["resumed"] == probe["continued"]
    odd = probe["odd_start"]  # a position inside a batch (the batch size changed): the next row still, padded
    assert (odd[0]["ids"], odd[0]["weight"], odd[1]["ids"]) == ([5, 6, 7], 3, list(range(8, 16)))
