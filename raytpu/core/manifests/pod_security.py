"""The security fields of every pod the kit emits (Ray head, TPU workers, RayJob submitter): non-root, no
privilege escalation, no capabilities, the runtime's seccomp profile, a read-only root filesystem with writable
scratch volumes, and no Kubernetes API token.

What each grants and why that is enough:

- TPU containers need no privilege on the GKE versions the kit deploys: GKE's TPU device plugin hands the chips
  to the container (``google.com/tpu`` limits); "Versions 1.28 and later don't require privileged mode or special
  capabilities" (https://cloud.google.com/kubernetes-engine/docs/concepts/tpus), and the Ray Operator add-on the kit
  needs starts at 1.30 (:data:`raytpu.core.tpu.catalog.RAY_OPERATOR_MIN_GKE_VERSION`).
- Ray writes its session directory, logs and runtime environments (``pip``, ``py_modules``) under ``/tmp/ray``;
  libtpu writes ``/tmp/tpu_logs``; pip, Hugging Face, vLLM and JAX caches go under ``$HOME/.cache``. So ``/tmp``
  and ``$HOME`` are emptyDirs (node-local disk) and the rest of the image is read-only. KubeRay adds ``/dev/shm``
  itself (``shared-mem``, an in-memory emptyDir for Ray's object store).
- No Ray process calls the Kubernetes API (no autoscaler; Workload Identity and the GCS FUSE sidecar get their
  token from the kubelet, not from the pod's mounted token), so ``automountServiceAccountToken`` is false.

``tests/test_pod_sandbox.py`` runs a real emulated slice under exactly these rules (uid/gid, no capabilities,
no_new_privs, read-only root with only :data:`SCRATCH` writable).
"""

from __future__ import annotations

from typing import Any

from raytpu.core.specs.security import SecuritySpec

HOME = "/home/raytpu"
"""``$HOME`` of every Ray container: an emptyDir (the image's own home may be root's, or read-only)."""
USER = "raytpu"
"""``$USER`` of every Ray container. The uid it runs as may have no passwd entry (the vllm-tpu base adds no user), and
Python's ``getpass.getuser()`` (which torch's compile caches call for their directory) reads ``LOGNAME``, ``USER``,
``LNAME`` and ``USERNAME`` before it asks the passwd database, which raises ``KeyError: 'getpwuid(): uid not found'``
(https://docs.python.org/3/library/getpass.html#getpass.getuser)."""
SCRATCH = {"tmp": "/tmp", "home": HOME}
"""Writable emptyDir volumes (name: mount path): everything Ray, libtpu, pip, JAX and vLLM write at run time."""
IMAGE_PULL_POLICY = "Always"
"""The kubelet asks the registry for every pod, so a node's cached copy of a private image is never used by a pod
without pull access (it still reuses cached layers)."""


def pod_context(security: SecuritySpec) -> dict[str, Any]:
    """The pod's ``securityContext``: non-root ids, group ownership of volumes, the runtime's seccomp profile."""
    return {"runAsNonRoot": True, "runAsUser": security.run_as_user, "runAsGroup": security.run_as_group,
            "fsGroup": security.run_as_group, "seccompProfile": {"type": "RuntimeDefault"}}


def container_context(security: SecuritySpec) -> dict[str, Any]:
    """A container's ``securityContext``: no privilege escalation, no capabilities, read-only root."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "privileged": False,
            "readOnlyRootFilesystem": not security.writable_root_filesystem, "runAsNonRoot": True}


def scratch_volumes() -> list[dict[str, Any]]:
    """The emptyDirs of :data:`SCRATCH`."""
    return [{"name": name, "emptyDir": {}} for name in SCRATCH]


def scratch_mounts() -> list[dict[str, Any]]:
    """Their mounts in a container."""
    return [{"name": name, "mountPath": path} for name, path in SCRATCH.items()]


def harden(pod_spec: dict[str, Any], security: SecuritySpec) -> dict[str, Any]:
    """Adds the security fields, scratch volumes, ``HOME`` and ``USER`` to ``pod_spec`` (every container) and
    returns it."""
    pod_spec["securityContext"] = pod_context(security)
    pod_spec["automountServiceAccountToken"] = False
    pod_spec["volumes"] = [*pod_spec.get("volumes", []), *scratch_volumes()]
    for container in pod_spec["containers"]:
        container["securityContext"] = container_context(security)
        container["imagePullPolicy"] = IMAGE_PULL_POLICY
        container["volumeMounts"] = [*container.get("volumeMounts", []), *scratch_mounts()]
        container["env"] = [*container.get("env", []), {"name": "HOME", "value": HOME}, {"name": "USER", "value": USER}]
    return pod_spec
