"""A workload's own ``env`` (plain values) and ``secrets`` (``ENV_NAME: secret-name`` or ``ENV_NAME: {name, key}``):
the names' rules and the Kubernetes ``EnvVar`` entries they become. Standard library only (it ships to the pods).

Secrets are read from Kubernetes Secrets (key :data:`SECRET_KEY`, or the key given) by the kubelet, never written into
the RayJob or the code zip; Workload Identity stays the way to Google APIs (no key files). Plain values go on the Ray
containers only, each ``$`` doubled so Kubernetes passes them as written (:func:`kube_env_value`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.cluster.security import secret_name_problems

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A POSIX environment variable name (letters, digits, underscore; not starting with a digit).
Source: POSIX.1-2017 XBD 8.1 "Environment Variable Definition" (portable names)."""

SECRET_KEY = "value"
"""The key of each Secret that ``secrets`` names by its name alone (``kubectl create secret generic NAME
--from-literal=value=...``); ``{name: SECRET, key: KEY}`` reads another key of an existing Secret."""


class KeyRef(Protocol):
    """One key of a Secret (:class:`raytpu.core.specs.workload_spec.SecretKeyRef`)."""

    @property
    def name(self) -> str: ...

    @property
    def key(self) -> str: ...


SECRET_FORMS = (f"NAME: SECRET, a Kubernetes Secret whose key {SECRET_KEY} holds the value (kubectl create secret "
                f"generic SECRET --from-literal={SECRET_KEY}=...), or NAME: {{name: SECRET, key: KEY}} for another key "
                "of an existing Secret")
"""The two forms of a ``secrets`` entry, as errors say them."""


def secret_source(secret: str | KeyRef) -> tuple[str, str]:
    """(the Secret's name, its key) of one ``secrets`` entry: a bare name reads key :data:`SECRET_KEY`."""
    return (secret, SECRET_KEY) if isinstance(secret, str) else (secret.name, secret.key)


KIT_PREFIXES = ("RAYTPU_", "RAY_", "TPU_", "JAX_", "MEGASCALE_", "XLA_", "LIBTPU_", "VLLM_")
"""Prefixes of variables the kit, KubeRay, Ray, JAX, libtpu or GKE's TPU webhook set on the pods and the emulated slice
(the builders in :mod:`raytpu.core.manifests`, :mod:`raytpu.core.specs.slices.multislice`, :mod:`raytpu.local`): a
workload may not override them, but for :data:`TUNING_NAMES`."""

TUNING_NAMES = frozenset(("LIBTPU_INIT_ARGS", "XLA_FLAGS"))
"""The names under :data:`KIT_PREFIXES` a workload may set: libtpu's and XLA's flags (TPU tuning, dumps). Nothing sets
them on the pods: not the kit's builders, not KubeRay's pod builder, not GKE's TPU webhook; JAX appends its own
launch-barrier flag to ``LIBTPU_INIT_ARGS``, keeping the workload's (docs/FACTS.md#spec-run-env)."""

KIT_NAMES = frozenset(("PATH", "HOME", "USER", "ENABLE_PJRT_COMPATIBILITY", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
                       "TRANSFORMERS_OFFLINE", "OMP_NUM_THREADS", "PYTHONUNBUFFERED"))
"""Exact names the kit sets (pod_security's HOME/USER, TPU_ENV, engine_pods' HF_TOKEN_PATH, the local CPU twins'
offline flags). Not ``PYTHONPATH``: Ray puts the code folder and the kit's zip before a workload's entries
(docs/FACTS.md#spec-run-env)."""

KUBERAY_NAMES = frozenset(("FQ_RAY_IP", "KUBERAY_GEN_RAY_START_CMD"))
"""What KubeRay sets on every Ray container beyond ``RAY_*`` (``RAY_IP``, ``RAY_PORT``, ``RAY_ADDRESS``,
``RAY_CLUSTER_NAME``, ``RAY_CLOUD_INSTANCE_ID``, ``RAY_NODE_TYPE_NAME``, ...): the head's address and the generated
``ray start`` command. Source: KubeRay v1.7.0 common/pod.go ``setContainerEnvVars`` (docs/FACTS.md#spec-run-env)."""

_NO_KEY_FILE = ("leave it unset: the pods reach Google APIs as the workload's service account through Workload "
                "Identity (grant that account what the code needs)")
_IN_IMAGE = "leave it unset; a library the code needs belongs in its own image (workloads[].image)"
BREAKING_NAMES: dict[str, tuple[str, str]] = {
    "PYTHONHOME": ("would make every Python process of the pods, Ray's and the workers', look for its standard "
                   "library there: none would start", "leave it unset: the image's Python runs the code"),
    "LD_PRELOAD": ("would load a library into every process of the pods, Ray's raylet and GCS included: one bad "
                   "library stops every worker", _IN_IMAGE),
    "LD_AUDIT": ("would load an audit library into every process of the pods, Ray's own included", _IN_IMAGE),
    "LD_LIBRARY_PATH": ("would put its folders first in the library search of every process of the pods, Ray's "
                        "own included, replacing any the image sets", _IN_IMAGE + " (its Dockerfile's ENV can set "
                        "this)"),
    "GOOGLE_APPLICATION_CREDENTIALS": ("would make Google's client libraries use a key file instead of the pods' "
                                       "Workload Identity", _NO_KEY_FILE),
    "GCE_METADATA_HOST": ("would send Google's client libraries' credential requests away from GKE's metadata "
                          "server, which serves the pods' Workload Identity", _NO_KEY_FILE),
    "GCE_METADATA_ROOT": ("would send Google's client libraries' credential requests away from GKE's metadata "
                          "server, which serves the pods' Workload Identity", _NO_KEY_FILE),
    "GCE_METADATA_IP": ("would send Google's client libraries' credential requests away from GKE's metadata "
                        "server, which serves the pods' Workload Identity", _NO_KEY_FILE),
}
"""Names that would break every Ray process of the pods, or bypass Workload Identity: (why, what to do instead).
Source: google-auth 2.63 ``google.auth.environment_vars``, ld.so(8), python(1) (docs/FACTS.md#spec-run-env)."""

VALID_NAME = "a POSIX name: letters, digits and _, not starting with a digit"
VALID_KIT_NAME = ("a name of your own: none starting with " + ", ".join(KIT_PREFIXES) + " ("
                  + " and ".join(sorted(TUNING_NAMES)) + " excepted: they are yours), nor "
                  + ", ".join([*sorted(KIT_NAMES), *sorted(KUBERAY_NAMES)]))
MAX_ENTRIES = 100
MAX_VALUE_CHARS = 32 * 1024


def name_problems(field: str, name: object) -> list[InvalidInput]:
    """One variable name: POSIX, not one the kit or KubeRay sets, none that breaks every worker or bypasses Workload
    Identity."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        return [errors.invalid_value(field, name, "is not an environment variable name", VALID_NAME)]
    if name in TUNING_NAMES:
        return []
    if name.upper() in TUNING_NAMES:  # xla_flags: nothing reads it
        return [errors.invalid_value(field, name, f"is not {name.upper()} (names are case-sensitive: libtpu and XLA "
                                     "read the upper-case one)", name.upper())]
    if name.upper().startswith(KIT_PREFIXES) or name in KIT_NAMES:
        return [errors.invalid_value(field, name, "is set by the kit, KubeRay, Ray, JAX or GKE's TPU webhook on the "
                                     "pods (overriding it would break the slice, or the runs' own paths)",
                                     VALID_KIT_NAME)]
    if name in KUBERAY_NAMES:
        return [errors.invalid_value(field, name, "is set by KubeRay on every Ray container (the head's address, "
                                     "the `ray start` command): overriding it would break the cluster's start",
                                     VALID_KIT_NAME)]
    if name in BREAKING_NAMES:
        why, instead = BREAKING_NAMES[name]
        return [errors.invalid_value(field, name, why, instead)]
    return []


def string_value_hint(name: str, value: object) -> str:
    """What ``valid:`` says of a non-string ``env`` value: how to quote it in YAML and in ``--set`` (YAML reads ``8``,
    ``true`` or ``3e-4`` as a number or a boolean; the kit does not guess how to spell one as text)."""
    if isinstance(value, dict | list | tuple):
        return "a string (a list or mapping is not an environment value)"
    text = "" if value is None else errors.yaml_flow(value)
    shown = text.replace('"', '\\"')
    return (f'a string: quote it in YAML ({name}: "{shown}"), and with --set quote it for YAML inside the '
            f"shell's quotes (--set env.{name}='\"{shown}\"')")


def env_problems(field: str, env: Mapping[str, Any] | None) -> list[InvalidInput]:
    """``env``: variable names to plain string values (YAML numbers and booleans must be quoted: the kit does not guess
    how to spell them)."""
    if env is None:
        return []
    found = _count(field, env)
    for name, value in env.items():
        where = errors.join_path(field, name) if isinstance(name, str) else field
        found += name_problems(where, name)
        if not isinstance(value, str):
            found.append(errors.invalid_value(where, value, "is not a string", string_value_hint(str(name), value)))
        elif len(value) > MAX_VALUE_CHARS or "\0" in value:
            found.append(errors.invalid_value(where, value, f"is {len(value):,} characters or holds NUL",
                                              f"at most {MAX_VALUE_CHARS:,} characters (files belong in `code`)"))
    return found


SECRET_LIKE = re.compile(r"(_KEY|_TOKEN|_SECRET)$|PASSWORD", re.IGNORECASE)
"""A plain ``env`` name that looks like a secret's: it ends in ``_KEY``, ``_TOKEN`` or ``_SECRET``, or holds
``PASSWORD``."""


def secret_like_warnings(prefix: str, env: Mapping[str, str] | None) -> list[str]:
    """``validate``'s warning for each ``env`` name that looks like a secret's: ``env`` is plain text in the RayJob
    and in the job's runtime env (the workload's spec), which Ray logs; ``secrets`` keeps the value in a Kubernetes
    Secret. ``prefix`` is the workload's config path (``workloads[3]``)."""
    return [f"{errors.join_path(prefix, f'env.{name}')}: looks like a secret (its name "
            f"{'holds PASSWORD' if 'PASSWORD' in name.upper() else 'ends in _' + name.rsplit('_', 1)[-1].upper()}), "
            "but env is plain text in the RayJob and in the job's runtime env, which Ray logs; move it to secrets "
            f"({name}: SECRET, a Kubernetes Secret with key {SECRET_KEY}, or {{name: SECRET, key: KEY}})"
            for name in sorted(env or {}) if SECRET_LIKE.search(name)]


def secrets_problems(field: str, secrets: Mapping[str, Any] | None, env: Mapping[str, Any] | None
                     ) -> list[InvalidInput]:
    """``secrets``: variable names to Kubernetes Secret names (DNS-1123 subdomains) or ``{name, key}`` (checked when
    built: :class:`raytpu.core.specs.workload_spec.SecretKeyRef`), none also in ``env``."""
    if secrets is None:
        return []
    found = _count(field, secrets)
    for name, secret in secrets.items():
        where = errors.join_path(field, name) if isinstance(name, str) else field
        found += name_problems(where, name)
        if isinstance(secret, str) or not hasattr(secret, "key"):
            found += secret_name_problems(where, secret)
        if env is not None and name in env:
            found.append(errors.invalid_value(where, secret, f"is also in env ({name})", "each name in env or "
                                              "secrets, not both"))
    return found


def _count(field: str, entries: Mapping[str, Any]) -> list[InvalidInput]:
    if len(entries) > MAX_ENTRIES:
        return [errors.invalid_value(field, f"{len(entries)} entries", "is over the limit",
                                     f"at most {MAX_ENTRIES} entries")]
    return []


def without_code_problems(runs_code: bool, env: object, secrets: object) -> list[InvalidInput]:
    """``env`` and ``secrets`` are for a workload that runs a team's code (the kit's own programs read neither)."""
    if runs_code:
        return []
    return [errors.forbidden(name, value, "for a workload without a team's code (the kit's own programs read none)",
                             "only with a workload that runs its own code (train_loop, entrypoint, serve_app)")
            for name, value in (("env", env), ("secrets", secrets)) if value is not None]


def secret_env_vars(secrets: Mapping[str, str | KeyRef] | None) -> list[dict[str, Any]]:
    """Kubernetes ``EnvVar`` entries reading each secret from its Secret's key (:func:`secret_source`).
    Source: Kubernetes v1 OpenAPI ``io.k8s.api.core.v1.EnvVar`` (valueFrom.secretKeyRef) and ``SecretKeySelector``
    (name, key required)."""
    refs = {name: secret_source(secret) for name, secret in (secrets or {}).items()}
    return [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for name, (secret, key) in sorted(refs.items())]


def kube_env_value(value: str) -> str:
    """``value`` as a container ``EnvVar.value`` the process receives unchanged: the kubelet expands ``$(NAME)`` from
    the container's earlier variables and reduces ``$$`` to ``$``, so every ``$`` is doubled.
    Source: Kubernetes API ``EnvVar.value`` ("$$(VAR_NAME)" escaping; docs/FACTS.md#spec-run-env)."""
    return value.replace("$", "$$")


def plain_env_vars(env: Mapping[str, str] | None) -> list[dict[str, str]]:
    """Kubernetes ``EnvVar`` entries with plain values, passed as written (:func:`kube_env_value`)."""
    return [{"name": name, "value": kube_env_value(value)} for name, value in sorted((env or {}).items())]


def local_secret_values(secrets: Mapping[str, object] | None, environ: Mapping[str, str], prefix: str
                        ) -> dict[str, str]:
    """Each secret's value from the submitting shell's environment (locally there is no Kubernetes Secret);
    InvalidInput naming ``<prefix>.secrets.NAME`` for each one unset."""
    missing = [name for name in sorted(secrets or {}) if name not in environ]
    errors.raise_found([errors.missing(errors.join_path(prefix, f"secrets.{name}"),
                                       "in the environment of `raytpu submit --local` (locally each secret is read "
                                       "from the submitting shell, never from a file)",
                                       f"export {name}=... before submitting") for name in missing])
    return {name: environ[name] for name in sorted(secrets or {})}
