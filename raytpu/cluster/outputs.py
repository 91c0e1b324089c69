"""StackOutputs: the one schema of what a deployed cluster stack exports and ``raytpu submit``/``smoke`` read.

One Terraform output per field, named like it; read from ``cdktf deploy --outputs-file``
(``{"<stack id>": {"<output>": value}}``, picked by ``--stack``) or ``terraform output -json``
(``{"<output>": {"value": ...}}``). Outputs are input: each value is checked by its field's rule (:data:`RULES`) and,
given the config, as this config's stack (:func:`belong_problems`), each problem named where it sits
(``outputs.json: ray-tpu-cluster.namespace``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.field_rules import (
    PROJECT_ID,
    REGION,
    bucket_problems,
    cluster_name_problems,
    dns_label_problems,
    dns_subdomain_problems,
    project_problems,
    region_problems,
)

if TYPE_CHECKING:
    from raytpu.core.specs.spec import ClusterSpec

DEFAULT_OUTPUTS = "outputs.json"
"""Where ``cdktf deploy --outputs-file outputs.json`` (the documented deploy command) writes outputs."""


@dataclass(frozen=True)
class StackOutputs:
    """What a workload needs from a deployed cluster stack; each field carries its output's description."""

    endpoint: str = field(metadata={"description": "The control plane's address (https): GKE's DNS-based "
                                         "endpoint, or its IP with control_plane ip."})
    ca_certificate: str = field(metadata={"description": "The cluster CA, base64-encoded PEM; empty for the "
                                               "DNS-based endpoint (publicly trusted)."})
    cluster_name: str = field(metadata={"description": "The GKE cluster's name."})
    location: str = field(metadata={"description": "Its region."})
    project: str = field(metadata={"description": "Its GCP project."})
    namespace: str = field(metadata={"description": "Namespace of the Ray objects."})
    service_account: str = field(metadata={"description": "Kubernetes service account Ray pods run as (Workload "
                                                "Identity)."})
    bucket: str = field(metadata={"description": "The bucket Ray pods mount (checkpoints, the kit's core zip)."})
    registry: str = field(default="", metadata={"description": "The Artifact Registry repository the kit's images "
                                                            "are pushed to (REGION-docker.pkg.dev/PROJECT/REPO)."})
    builder_service_account: str = field(default="", metadata={"description": "The service account Cloud Build "
                                                                           "runs the kit's image builds as."})

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The output names, in order (what the cluster stack writes)."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def required(cls) -> tuple[str, ...]:
        """The outputs every reader needs; the others (the image registry's, added later) are empty when a stack
        deployed by an older version lacks them, and only ``raytpu images build`` requires them."""
        return tuple(f.name for f in fields(cls) if f.default is MISSING)

    @classmethod
    def descriptions(cls) -> dict[str, str]:
        """Output name -> one-line description (each field's metadata)."""
        return {f.name: f.metadata["description"] for f in fields(cls)}

    @classmethod
    def parse(cls, data: Any, stack: str, source: str = "outputs", spec: ClusterSpec | None = None,
              config: str = "the config") -> StackOutputs:
        """Reads ``data`` (either shape, see the module) for ``stack``; with ``spec`` (from ``config``), checks they are
        that config's outputs. InvalidInput(s): no such stack, an output missing or mistyped, another stack's or
        cluster's."""
        if not isinstance(data, dict) or not data:
            raise InvalidInput("--outputs", f"{source} holds no stack outputs",
                               "the JSON `cdktf deploy --outputs-file FILE` or `terraform output -json` writes")
        terraform = all(isinstance(v, dict) and "value" in v for v in data.values())
        if terraform:  # terraform output -json
            values = {k: v["value"] for k, v in data.items()}
        else:
            if stack not in data:  # the exact id: no cluster-name alias, no suffix guessing
                clusters = sorted(k for k, v in data.items() if isinstance(v, dict) and set(cls.required()) <= set(v))
                raise errors.invalid_choice("--stack", stack, clusters or sorted(data),
                                            f" (cluster stacks in {source})" if clusters else f" (stacks in {source})")
            values = data[stack]
            if not isinstance(values, dict):
                raise InvalidInput("--outputs", f"{source}: stack {stack!r} holds no outputs", "a JSON object")
        missing = [n for n in cls.required() if n not in values]
        if missing:
            raise errors.missing(f"outputs.{missing[0]}", f"in {source} for stack {stack!r} (missing: "
                                 f"{', '.join(missing)})", "the outputs " + ", ".join(cls.names()) +
                                 " that raytpu's cluster stack writes (deploy it with this version of raytpu)")
        where = (lambda n: f"{source}: {n}.value") if terraform else (lambda n: f"{source}: {stack}.{n}")
        errors.raise_found([p for n in cls.names() if n in values for p in RULES[n](where(n), values[n])])
        outputs = cls(**{n: values[n] for n in cls.names() if n in values})
        if terraform and stack != cluster_stack_id(outputs.cluster_name):
            # this shape names no stack: --stack is checked against the cluster the outputs are of
            raise errors.invalid_value("--stack", stack, f"is not the stack {source} is from (its cluster_name is "
                                       f"{outputs.cluster_name!r}: `terraform output -json` of stack "
                                       f"{cluster_stack_id(outputs.cluster_name)})",
                                       f"{cluster_stack_id(outputs.cluster_name)}, or the outputs of stack {stack}")
        if spec is not None:
            errors.raise_found(belong_problems(outputs, spec, where, config))
        return outputs

    @classmethod
    def read(cls, path: str | Path, stack: str, spec: ClusterSpec | None = None,
             config: str = "the config") -> StackOutputs:
        """Reads a stack outputs file; InvalidInput (exit 2) when it is missing or unreadable."""
        path = Path(path)
        valid = (f"the file `cdktf deploy --outputs-file FILE` wrote (default {DEFAULT_OUTPUTS}), or "
                 "`terraform output -json > FILE`")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInput("--outputs", f"cannot read {str(path)!r} ({exc.strerror})", valid) from exc
        except UnicodeDecodeError as exc:
            raise InvalidInput("--outputs", f"{str(path)!r} is not JSON (not UTF-8 text: byte {exc.start})",
                               valid) from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInput("--outputs", f"{str(path)!r} is not JSON ({exc.msg} at line {exc.lineno})",
                               "the JSON `cdktf deploy --outputs-file` writes") from exc
        return cls.parse(data, stack, str(path), spec, config)


def cluster_stack_id(cluster_name: str) -> str:
    """The id of the cluster stack of cluster ``cluster_name`` (``raytpu.stacks.app.stack_ids``)."""
    return f"{cluster_name}-cluster"


# ---------------------------------------------------------------------------------------------- the rules

REGISTRY = re.compile(rf"^({REGION.pattern[1:-1]})-docker\.pkg\.dev/({PROJECT_ID.pattern[1:-1]})/"
                      r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$")
"""``REGION-docker.pkg.dev/PROJECT/REPO``, a repository's ``registry_uri`` (id: lowercase letters, digits, hyphens, at
most 63). Source: google provider ``google_artifact_registry_repository``."""
SERVICE_ACCOUNT = re.compile(rf"^[a-z][a-z0-9-]{{4,28}}[a-z0-9]@({PROJECT_ID.pattern[1:-1]})"
                             r"\.iam\.gserviceaccount\.com$")
"""``ID@PROJECT.iam.gserviceaccount.com``, ID 6-30 characters (Source: IAM serviceAccounts.create, accountId)."""


def endpoint_problems(field: str, value: object) -> list[InvalidInput]:
    """The control plane's address, as the API client takes it (:func:`raytpu.cluster.kube.kube_client.api_host`)."""
    from raytpu.cluster.kube.kube_client import api_host

    if not isinstance(value, str) or not value.strip():
        return [errors.invalid_value(field, value, "is not an endpoint",
                                     "a host, an IP, or https://HOST[:PORT] (the cluster stack's endpoint output)")]
    try:
        api_host(value)
    except InvalidInput as exc:
        return [InvalidInput(field, exc.problem, exc.valid)]
    return []


def ca_problems(field: str, value: object) -> list[InvalidInput]:
    """The cluster CA as the API client takes it (:func:`raytpu.cluster.kube.kube_client.ca_pem`); empty for the DNS
    endpoint."""
    from raytpu.cluster.kube.kube_client import ca_pem

    if not isinstance(value, str):
        return [errors.invalid_value(field, value, "is not a CA certificate", "a base64-encoded PEM certificate, "
                                     "or empty (GKE's DNS-based endpoint)")]
    try:
        ca_pem(value)
    except InvalidInput as exc:
        return [InvalidInput(field, exc.problem, exc.valid)]
    return []


def _optional(pattern: re.Pattern[str], what: str, valid: str) -> Callable[[str, object], list[InvalidInput]]:
    """The rule of an output a stack deployed by an older kit lacks: empty, or ``pattern``."""
    def problems(field: str, value: object) -> list[InvalidInput]:
        if isinstance(value, str) and (value == "" or pattern.match(value)):
            return []
        return [errors.invalid_value(field, value, f"is not {what}", f"{valid}, or empty (a stack deployed "
                                     "before the kit built images)")]
    return problems


RULES: dict[str, Callable[[str, object], list[InvalidInput]]] = {
    "endpoint": endpoint_problems,
    "ca_certificate": ca_problems,
    "cluster_name": cluster_name_problems,
    "location": region_problems,
    "project": project_problems,
    "namespace": dns_label_problems,
    # Source: k8s.io/apimachinery pkg/api/validation ValidateServiceAccountName (NameIsDNSSubdomain)
    "service_account": lambda field, value: dns_subdomain_problems(field, value, "a Kubernetes ServiceAccount name"),
    "bucket": bucket_problems,
    "registry": _optional(REGISTRY, "an Artifact Registry repository", "REGION-docker.pkg.dev/PROJECT/REPO"),
    "builder_service_account": _optional(SERVICE_ACCOUNT, "a service account email",
                                         "ID@PROJECT.iam.gserviceaccount.com"),
}
"""Each output's rule, by name: one per field of :class:`StackOutputs`."""


def belong_problems(outputs: StackOutputs, spec: ClusterSpec, where: Callable[[str], str],
                    config: str) -> list[InvalidInput]:
    """The outputs that are not what the cluster stack of ``spec`` writes, each named by ``where(name)``: another
    project, cluster or region (these identify a stack), a registry or builder of another project or region."""
    expected = {"project": spec.project, "cluster_name": spec.cluster.name, "location": spec.region}
    found = [errors.invalid_value(where(name), getattr(outputs, name), f"is not {config}'s {name} ({want!r})",
                                  f"the outputs of the cluster stack deployed from {config} "
                                  f"({cluster_stack_id(spec.cluster.name)}), or the config it was deployed from")
             for name, want in expected.items() if getattr(outputs, name) != want]
    # What this kit's cluster stack of ``spec`` writes (stacks/cluster.py): an outputs file from another kit version
    # (before the per-cluster KSA, outputs ``ray``) or another bucket makes pods that can never run as the account.
    for name, want in (("service_account", spec.ksa_name), ("bucket", spec.bucket)):
        if getattr(outputs, name) != want:
            found.append(errors.invalid_value(
                where(name), getattr(outputs, name), f"is not the {name} the cluster stack of {config} writes "
                f"({want!r})", f"the outputs of `cdktf deploy {cluster_stack_id(spec.cluster.name)} --outputs-file "
                f"FILE` run with this raytpu (an outputs file from an earlier deploy is stale), or the config it "
                "was deployed from"))
    registry = REGISTRY.match(outputs.registry)
    builder = SERVICE_ACCOUNT.match(outputs.builder_service_account)
    for name, other in (("registry", registry and (registry[1], registry[2]) != (spec.region, spec.project)),
                        ("builder_service_account", builder and builder[1] != spec.project)):
        if other:
            found.append(errors.invalid_value(where(name), getattr(outputs, name), f"is not {config}'s {name} "
                                              f"(in project {spec.project}, region {spec.region})",
                                              f"the outputs of the cluster stack deployed from {config} "
                                              f"({cluster_stack_id(spec.cluster.name)}), or the config it was "
                                              "deployed from"))
    return found
