"""A workload's own ``env`` (plain values) and ``secrets`` (``ENV_NAME: secret-name``): the names' rules and the
Kubernetes ``EnvVar`` entries they become. Standard library only (it ships to the pods).

Secrets are read from Kubernetes Secrets (key :data:`SECRET_KEY`) by the kubelet, never written into the RayJob or
the code zip; Workload Identity stays the way to Google APIs (no key files).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.security import secret_name_problems

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A POSIX environment variable name (letters, digits, underscore; not starting with a digit).
Source: POSIX.1-2017 XBD 8.1 "Environment Variable Definition" (portable names)."""

SECRET_KEY = "value"
"""The key of each Secret that ``secrets`` names (``kubectl create secret generic NAME --from-literal=value=...``)."""

KIT_PREFIXES = ("RAYTPU_", "RAY_", "TPU_", "JAX_", "MEGASCALE_", "XLA_", "LIBTPU_", "VLLM_")
"""Prefixes of variables the kit, Ray, JAX or libtpu set on the pods and the emulated slice (the builders in
:mod:`raytpu.core.manifests`, :mod:`raytpu.core.specs.multislice`, :mod:`raytpu.local`): a workload may not override
them."""

KIT_NAMES = frozenset(("PATH", "HOME", "USER", "PYTHONPATH", "ENABLE_PJRT_COMPATIBILITY", "HF_TOKEN_PATH",
                       "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "OMP_NUM_THREADS", "PYTHONUNBUFFERED"))
"""Exact names the kit sets (pod_security's HOME/USER, TPU_ENV, engine_pods' HF_TOKEN_PATH, the local CPU twins'
offline flags) or Ray's runtime env owns (``working_dir`` and ``py_modules`` set PYTHONPATH)."""

VALID_NAME = ("a POSIX name (letters, digits, _; not starting with a digit) not set by the kit: none starting with "
              + ", ".join(KIT_PREFIXES) + " nor " + ", ".join(sorted(KIT_NAMES)))
MAX_ENTRIES = 100
MAX_VALUE_CHARS = 32 * 1024


def name_problems(field: str, name: object) -> list[InvalidInput]:
    """One variable name: POSIX, and not one the kit owns."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        return [errors.invalid_value(field, name, "is not an environment variable name", VALID_NAME)]
    if name.upper().startswith(KIT_PREFIXES) or name in KIT_NAMES:
        return [errors.invalid_value(field, name, "is set by the kit on the pods (overriding it would break the "
                                     "slice, or the runs' own paths)", VALID_NAME)]
    return []


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
            found.append(errors.invalid_value(where, value, "is not a string", "a quoted value, e.g. \"1\""))
        elif len(value) > MAX_VALUE_CHARS or "\0" in value:
            found.append(errors.invalid_value(where, value, f"is {len(value):,} characters or holds NUL",
                                              f"at most {MAX_VALUE_CHARS:,} characters (files belong in `code`)"))
    return found


def secrets_problems(field: str, secrets: Mapping[str, Any] | None, env: Mapping[str, Any] | None
                     ) -> list[InvalidInput]:
    """``secrets``: variable names to Kubernetes Secret names (DNS-1123 subdomains), none also in ``env``."""
    if secrets is None:
        return []
    found = _count(field, secrets)
    for name, secret in secrets.items():
        where = errors.join_path(field, name) if isinstance(name, str) else field
        found += name_problems(where, name)
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


def secret_env_vars(secrets: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """Kubernetes ``EnvVar`` entries reading each secret from its Secret's key :data:`SECRET_KEY`.
    Source: Kubernetes v1 OpenAPI ``io.k8s.api.core.v1.EnvVar`` (valueFrom.secretKeyRef) and ``SecretKeySelector``
    (name, key required)."""
    return [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": SECRET_KEY}}}
            for name, secret in sorted((secrets or {}).items())]


def plain_env_vars(env: Mapping[str, str] | None) -> list[dict[str, str]]:
    """Kubernetes ``EnvVar`` entries with plain values."""
    return [{"name": name, "value": value} for name, value in sorted((env or {}).items())]


def local_secret_values(secrets: Mapping[str, str] | None, environ: Mapping[str, str], prefix: str
                        ) -> dict[str, str]:
    """Each secret's value from the submitting shell's environment (locally there is no Kubernetes Secret);
    InvalidInput naming ``<prefix>.secrets.NAME`` for each one unset."""
    missing = [name for name in sorted(secrets or {}) if name not in environ]
    errors.raise_found([errors.missing(errors.join_path(prefix, f"secrets.{name}"),
                                       "in the environment of `raytpu submit --local` (locally each secret is read "
                                       "from the submitting shell, never from a file)",
                                       f"export {name}=... before submitting") for name in missing])
    return {name: environ[name] for name in sorted(secrets or {})}
