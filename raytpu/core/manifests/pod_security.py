"""The security fields of every pod the kit emits, and why each is enough: docs/FACTS.md#networking-pod-security.
Source: https://cloud.google.com/kubernetes-engine/docs/concepts/tpus (no privileged mode from 1.28)."""

from __future__ import annotations

from typing import Any

from raytpu.core.specs.cluster.security import SecuritySpec

HOME = "/home/raytpu"
"""``$HOME`` of every Ray container: an emptyDir (the image's own home may be root's, or read-only)."""
USER = "raytpu"
"""``$USER`` of every Ray container, for ``getpass.getuser()`` (docs/FACTS.md#networking-pod-security). Source: Python
``getpass.getuser``."""
SCRATCH = {"tmp": "/tmp", "home": HOME}
"""Writable emptyDir volumes (name: mount path): everything Ray, libtpu, pip, JAX and vLLM write at run time."""
IMAGE_PULL_POLICY = "Always"
"""The kubelet asks the registry each time, so a pod without pull access never uses a cached private image."""


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
    """Adds security fields, scratch volumes, ``HOME`` and ``USER`` to ``pod_spec`` (every container); returns it."""
    pod_spec["securityContext"] = pod_context(security)
    pod_spec["automountServiceAccountToken"] = False
    pod_spec["volumes"] = [*pod_spec.get("volumes", []), *scratch_volumes()]
    for container in pod_spec["containers"]:
        container["securityContext"] = container_context(security)
        container["imagePullPolicy"] = IMAGE_PULL_POLICY
        container["volumeMounts"] = [*container.get("volumeMounts", []), *scratch_mounts()]
        container["env"] = [*container.get("env", []), {"name": "HOME", "value": HOME}, {"name": "USER", "value": USER}]
    return pod_spec
