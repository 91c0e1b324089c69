"""StackOutputs: the one schema of what a deployed cluster stack exports and ``raytpu submit``/``smoke`` read.

The cluster stack writes one Terraform output per field of :class:`StackOutputs`, named exactly like the field
(:meth:`StackOutputs.names`); the readers accept exactly the two JSON shapes Terraform tools write:

- ``cdktf deploy --outputs-file FILE`` (or ``cdktn deploy``): ``{"<stack id>": {"<output>": value}}``, the
  stack picked by ``--stack`` (the cluster stack's id, ``<cluster name>-cluster``);
- ``terraform output -json`` in the stack's directory: ``{"<output>": {"value": value, ...}}``.

Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from raytpu import errors
from raytpu.errors import InvalidInput

DEFAULT_OUTPUTS = "outputs.json"
"""Where ``cdktf deploy --outputs-file outputs.json`` (the documented deploy command) writes outputs."""


@dataclass(frozen=True)
class StackOutputs:
    """What a workload needs from a deployed cluster stack.

    Attributes:
        endpoint: The control plane's address (https): GKE's DNS-based endpoint, or its IP with control_plane ip.
        ca_certificate: The cluster CA, base64-encoded PEM; empty for the DNS-based endpoint (publicly trusted).
        cluster_name: The GKE cluster's name.
        location: Its region.
        project: Its GCP project.
        namespace: Namespace of the Ray objects.
        service_account: Kubernetes service account Ray pods run as (Workload Identity).
        bucket: The bucket Ray pods mount (checkpoints, the kit's core zip).
        registry: The Artifact Registry repository the kit's images are pushed to (REGION-docker.pkg.dev/PROJECT/REPO).
        builder_service_account: The service account Cloud Build runs the kit's image builds as.
    """

    endpoint: str
    ca_certificate: str
    cluster_name: str
    location: str
    project: str
    namespace: str
    service_account: str
    bucket: str
    registry: str = ""
    builder_service_account: str = ""

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
        """Output name -> one-line description (from the class docstring)."""
        doc = (cls.__doc__ or "").split("Attributes:", 1)[-1]
        found = {}
        for line in doc.splitlines():
            name, _, text = line.strip().partition(": ")
            if name in cls.names():
                found[name] = text
        return found

    @classmethod
    def parse(cls, data: Any, stack: str, source: str = "outputs") -> StackOutputs:
        """Reads ``data`` (either shape in the module docstring) for ``stack``.

        Raises:
            InvalidInput: no such stack in a cdktf outputs file, or an output is missing.
        """
        if not isinstance(data, dict) or not data:
            raise InvalidInput("--outputs", f"{source} holds no stack outputs",
                               "the JSON `cdktf deploy --outputs-file FILE` or `terraform output -json` writes")
        if all(isinstance(v, dict) and "value" in v for v in data.values()):  # terraform output -json
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
        return cls(**{n: str(values[n]) for n in cls.names() if n in values})

    @classmethod
    def read(cls, path: str | Path, stack: str) -> StackOutputs:
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
        return cls.parse(data, stack, str(path))
