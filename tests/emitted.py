"""Every KubeRay object ``raytpu submit`` and ``raytpu smoke`` emit, built the way they build them, over a matrix:
the two example configs, a config with every workload kind on a multi-host, a single-host and a tpu7x slice,
in Standard and Autopilot, with each serving endpoint option, and a multi-slice train config (its train RayJob and
the multi-slice smoke job over the copies it spans). ``tests/test_checkov_pods.py`` adds what the
synthesized workloads stacks apply."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from image_refs import FIXTURE_IMAGES

from raytpu import config
from raytpu.core.manifests import kuberay
from raytpu.core.specs.spec import ClusterSpec

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = {"standard": REPO / "raytpu.example.yaml", "autopilot": REPO / "examples" / "autopilot.yaml"}
KSA, BUCKET = "ray", "my-bucket"
MATRIX = """
project: my-ml-project
region: us-central1
cluster: {name: sec, mode: MODE}
slices:
  - {name: multi, generation: v6e, topology: 4x4, zone: us-central1-b}
  - {name: single, generation: v6e, topology: 2x4, machine_type: ct6e-standard-8t, zone: us-central1-b}
  - {name: ironwood, generation: tpu7x, topology: 2x2x2, zone: us-central1-c, provisioning: spot}
workloads:
  - {name: smoke, kind: smoke, slice: multi}
  - {name: train, kind: train, slice: multi}
  - {name: train-one, kind: train, slice: single}
  - {name: serve, kind: serve, slice: multi}
  - {name: serve-one, kind: serve, slice: single}
  - {name: serve-iw, kind: serve, slice: ironwood}
  - {name: batch-one, kind: batch, slice: single, input: gs://my-bucket/prompts.jsonl, output: gs://my-bucket/out,
     hf_token_secret: {name: hf-secret, key: hf_api_token}}
"""
MULTISLICE = """
project: my-ml-project
region: us-central1
cluster: {name: ms, mode: MODE}
slices:
  - {name: pod, generation: v6e, topology: 4x4, zone: us-central1-b, count: 3}
workloads:
  - {name: train, kind: train, slice: pod, slices: 2}
"""
"""A multi-slice train workload: its run spans 2 of the slice's 3 copies over DCN (and so does a smoke job)."""
ENDPOINTS = {
    "cluster-ip": {},
    "internal-lb": {"serve_endpoint": "internal-lb", "dashboard_from": ["10.128.0.0/20"],
                    "metrics_from": ["namespace:monitoring"]},
    "public-lb": {"serve_endpoint": "public-lb", "serve_api_key_secret": "serve-key",
                  "serve_from": ["198.51.100.0/24"]},
}


@dataclass(frozen=True)
class Emitted:
    """One object: where it came from, its cluster mode, the spec it was built from."""

    source: str
    mode: str
    spec: ClusterSpec
    obj: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.source}/{self.obj['kind']}/{self.obj['metadata']['name']}"


def matrix_spec(mode: str, endpoint: str) -> ClusterSpec:
    """The matrix config in ``mode`` with the ``security`` of ``endpoint``."""
    data = yaml.safe_load(MATRIX.replace("MODE", mode))
    if ENDPOINTS[endpoint]:
        data["security"] = ENDPOINTS[endpoint]
    return config.parse(yaml.safe_dump(data))


def objects_of(spec: ClusterSpec) -> list[dict[str, Any]]:
    """What ``raytpu submit`` applies for each workload (RayJobs with a run id) and ``raytpu smoke`` for each slice."""
    out = []
    for work in spec.workloads:
        name = f"{work.name}-r1" if work.kind.is_job else work.name
        out.append(kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, service_account=KSA, bucket=BUCKET,
                                             namespace=spec.namespace, name=name,
                                             args=work.kind.run_args(name)))
    return out + [job for build in (kuberay.smoke_jobs, kuberay.dcn_smoke_jobs)
                  for job in build(spec, images=FIXTURE_IMAGES, service_account=KSA, bucket=BUCKET,
                                   namespace=spec.namespace, suffix="n1")]


@functools.cache
def every_object() -> tuple[Emitted, ...]:
    """The matrix, built once per session."""
    found = [Emitted(f"example-{mode}", mode, spec, obj) for mode, path in EXAMPLES.items()
             for spec in [config.load(path)] for obj in objects_of(spec)]
    for mode in ("standard", "autopilot"):
        for endpoint in ENDPOINTS:
            spec = matrix_spec(mode, endpoint)
            found += [Emitted(f"matrix-{mode}-{endpoint}", mode, spec, obj) for obj in objects_of(spec)]
        spec = config.parse(MULTISLICE.replace("MODE", mode))
        found += [Emitted(f"multislice-{mode}", mode, spec, obj) for obj in objects_of(spec)]
    return tuple(found)


def as_pod(template: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    """A pod template as the Pod it becomes (for checkov and the Pod schema)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**template.get("metadata", {}), "name": name, "namespace": namespace},
            "spec": template["spec"]}


def pods_of(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(role, Pod) of every pod template of ``obj``: ``head``, the worker group's name, ``submitter``."""
    roles = ["head", *(g["groupName"] for g in kuberay.ray_cluster_of(obj)["workerGroupSpecs"])]
    roles += ["submitter"] if "submitterPodTemplate" in obj["spec"] else []
    meta = obj["metadata"]
    return [(role, as_pod(t, f"{meta['name']}-{role}", meta["namespace"]))
            for role, t in zip(roles, kuberay.pod_templates(obj), strict=True)]
