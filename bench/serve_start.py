"""Benchmark: what a Serve replica answers while its vLLM engine starts, with user code on the replica's main loop or
on its own thread (``RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD`` 0 or 1).

    .venv-serve/bin/python bench/serve_start.py [--engine-start-s 90] [--arms 0 1] [--probe-every-s 2] [--json]

The kit's app (CPU twin, emulated slice, as ``raytpu local serve``) with its engine start made slow: every Ray
process imports ``bench/slow_engine/sitecustomize.py``, which blocks the engine start's thread for
``--engine-start-s`` as vLLM's ``AsyncLLM()`` does on TPU while weights load and XLA compiles. While the app deploys,
this driver calls the replica's ``check_health`` (the method Serve's controller calls once the replica runs, every
``health_check_period_s``, failing it after ``health_check_timeout_s``) every ``--probe-every-s`` and records how long
each call takes to come back. Reported per arm: the deploy's time to ready, the longest and median probe wait during the
start and after it, probes that waited past Serve's default health-check timeout, and replicas Serve restarted.
One cluster at a time; each stopped by :func:`raytpu.local.slice.procs.stop`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from raytpu.config import load
from raytpu.local.running.deploy import deploy_serve
from raytpu.local.slice import procs, startup, state
from raytpu.local.slice.connection import connect
from raytpu.local.slice.from_config import serving_on_slice
from raytpu.workloads import tiny_llm

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "raytpu.example.yaml"
SLOW_ENGINE = HERE / "slow_engine"
HEALTH_CHECK_TIMEOUT_S = 30.0
"""Serve's default ``health_check_timeout_s``. Source: Ray 2.56 and 2.60 ``ray/serve/_private/constants.py``
``DEFAULT_HEALTH_CHECK_TIMEOUT_S``."""
SEPARATE_THREAD = "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD"
WORK = next(w for w in load(EXAMPLE).workloads if w.kind.takes_model)


def _replica(ray: Any) -> Any:
    """The LLM server's replica actor, once Serve has created it (None before)."""
    from ray.util.state import list_actors

    for actor in list_actors(filters=[("state", "=", "ALIVE")], raise_on_missing_output=False):
        if actor.class_name.startswith("ServeReplica:") and actor.name:
            return ray.get_actor(actor.name, namespace="serve")
    return None


def _replicas_created() -> int:
    from ray.util.state import list_actors

    return sum(a.class_name.startswith("ServeReplica:") for a in list_actors(raise_on_missing_output=False))


def probe(cluster: state.LocalCluster, deployed: threading.Event, every_s: float, after_s: float
          ) -> list[dict[str, Any]]:
    """``check_health`` calls to the replica until ``after_s`` past ``deployed``: each with its start (seconds since
    the probe began), its wait, whether the deploy had finished, and the error it raised (an uninitialized replica
    raises)."""
    import ray

    connect(cluster)
    t0 = time.monotonic()
    pending: list[tuple[Any, dict[str, Any]]] = []
    done: list[dict[str, Any]] = []
    handle = None
    ended_at: float | None = None
    while ended_at is None or time.monotonic() - ended_at < after_s:
        if deployed.is_set() and ended_at is None:
            ended_at = time.monotonic()
        tick = time.monotonic()
        handle = handle or _replica(ray)
        if handle is not None:
            pending.append((handle.check_health.remote(), {"at_s": time.monotonic() - t0,
                                                           "ready": deployed.is_set()}))
        ready, _ = ray.wait([ref for ref, _ in pending], num_returns=len(pending), timeout=every_s)
        now = time.monotonic() - t0
        for ref, row in [p for p in pending if p[0] in ready]:
            try:
                ray.get(ref)
                row["error"] = None
            except Exception as exc:  # the replica's answer, whatever it is, is a response
                row["error"] = type(exc).__name__
            row["wait_s"] = now - row["at_s"]
            done.append(row)
        pending = [p for p in pending if p[0] not in ready]
        time.sleep(max(0.0, every_s - (time.monotonic() - tick)))  # one probe per period, however fast they answer
    for _, row in pending:
        row["wait_s"], row["error"] = None, "still waiting"
        done.append(row)
    return sorted(done, key=lambda r: r["at_s"])


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Longest and median wait of the probes sent during the start and after it."""
    out: dict[str, Any] = {}
    for phase, ready in (("during_start", False), ("after_start", True)):
        waits = [r["wait_s"] for r in rows if r["ready"] is ready and r["wait_s"] is not None]
        out[phase] = {"probes": sum(r["ready"] is ready for r in rows),
                      "max_wait_s": max(waits, default=None),
                      "median_wait_s": statistics.median(waits) if waits else None,
                      "over_health_check_timeout": sum(w > HEALTH_CHECK_TIMEOUT_S for w in waits),
                      "errors": sorted({str(r["error"]) for r in rows if r["ready"] is ready and r["error"]})}
    return out


def run_arm(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """One fresh cluster with user code on the main loop (``0``) or its own thread (``1``)."""
    os.environ[SEPARATE_THREAD] = arm
    with tempfile.TemporaryDirectory(prefix="raytpu-bench-start-") as directory:
        try:
            t0 = time.monotonic()
            cluster = startup.start(WORK.plan, 1, directory)
            deployed = threading.Event()
            outcome: dict[str, Any] = {}

            def deploy() -> None:
                started = time.monotonic()
                try:
                    deploy_serve(cluster, serving_on_slice(cluster, WORK), 900.0)
                    outcome["ready_s"] = time.monotonic() - started
                except Exception as exc:
                    outcome["failed"] = str(exc)
                finally:
                    deployed.set()

            thread = threading.Thread(target=deploy, daemon=True)
            thread.start()
            rows = probe(cluster, deployed, args.probe_every_s, args.after_s)
            thread.join()
            outcome["replicas_created"] = _replicas_created()
            outcome["cluster_s"] = cluster.started_s
            outcome["total_s"] = time.monotonic() - t0
        finally:
            import ray

            ray.shutdown()
            procs.stop(directory)
    return {"separate_thread": arm, **outcome, **summary(rows), "probes": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine-start-s", type=float, default=90.0)
    parser.add_argument("--arms", nargs="+", choices=["0", "1"], default=["0", "1"])
    parser.add_argument("--probe-every-s", type=float, default=2.0)
    parser.add_argument("--after-s", type=float, default=20.0, help="keep probing this long after the app is ready")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.engine_start_s <= 0 or args.probe_every_s <= 0 or args.after_s < 0:
        print("error: --engine-start-s/--probe-every-s: must be above 0, --after-s at least 0; valid: e.g. 90, 2, 20",
              file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    model = tiny_llm.ensure(None)
    os.environ[tiny_llm.ENV_CACHE_DIR] = str(model.path.parent)
    os.environ["RAYTPU_BENCH_ENGINE_START_S"] = f"{args.engine_start_s:g}"
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SLOW_ENGINE), os.environ.get("PYTHONPATH")) if p)
    results = []
    for arm in args.arms:
        print(f"{SEPARATE_THREAD}={arm}, engine start +{args.engine_start_s:g}s (load {os.getloadavg()[0]:.1f}):",
              file=sys.stderr, flush=True)
        results.append(run_arm(arm, args))
        r = results[-1]
        print(f"  ready in {r.get('ready_s', float('nan')):.0f}s ({r.get('failed', 'ok')}), replicas created "
              f"{r['replicas_created']}; during start: {r['during_start']}; after: {r['after_start']}",
              file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"engine_start_s": args.engine_start_s, "arms": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
