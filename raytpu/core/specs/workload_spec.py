"""A Ray workload in ``raytpu.yaml`` (``workloads[]``) on one kind of slice, valid once built, and its JSON form (the
``RAYTPU_WORKLOAD`` a job receives). Which kind takes which field: :mod:`raytpu.core.specs.workload_fields`.

Stdlib and the core only. Details: docs/FACTS.md#spec-build.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from raytpu.core.common import errors, names
from raytpu.core.common.errors import InvalidInput, InvalidInputs
from raytpu.core.specs import kinds, spec_json, workload_fields
from raytpu.core.specs.cluster.security import secret_name_problems
from raytpu.core.specs.field_rules import (
    dns_label_problems,
    raise_all,
    range_problems,
)
from raytpu.core.specs.kinds import WorkloadKind
from raytpu.core.specs.runtime import checkpoints, compile_cache, data, run_env, user_code
from raytpu.core.specs.serving import chat_template, node_disk, sampling, serve_app, vllm_rules
from raytpu.core.specs.slices import multislice
from raytpu.core.specs.slices.provisioning import MODES as PROVISIONING_MODES
from raytpu.core.specs.slices.slice_spec import SliceSpec, derived_name_problems
from raytpu.core.tpu.catalog import RAY_VERSION, generation
from raytpu.core.tpu.models import by_hf_id
from raytpu.core.tpu.plan import SlicePlan

SERVING_FIELDS = workload_fields.group("llm")
"""WorkloadSpec fields only a serving kind takes (the kit's LLM app's)."""

WORKLOAD_ENV = "RAYTPU_WORKLOAD"
ENCODED_PREFIX = "base64:"
"""Environment variable that carries a workload's spec (JSON) into its Ray job: workloads never re-plan."""

_REF_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_REF_DOMAIN = rf"(?:{_REF_LABEL}(?:\.{_REF_LABEL})*(?::[0-9]+)?/)?"
_REF_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(rf"^{_REF_DOMAIN}{_REF_COMPONENT}(?:/{_REF_COMPONENT})*"
                              r"(?::(?P<tag>[\w][\w.-]{0,127})(?P<digest>@sha256:[0-9a-f]{64})?|@sha256:[0-9a-f]{64})$")
"""An image reference with a tag, a digest or both (required here; no IPv6 hosts; sha256 digests only).
Source: distribution/reference ``regexp.go`` ``referencePat``."""


def image_problem(image: str) -> tuple[str, str] | None:
    """(what is wrong, what is valid), or None when it pins what every pod pulls (``latest`` alone floats)."""
    found = _IMAGE_REFERENCE.match(image)
    if found and (found["tag"] != "latest" or found["digest"]):
        return None
    return ("is not an image reference with a tag or digest (without one, every pod pulls whatever 'latest' is then)"
            if not found else "has the floating tag 'latest' (every pod pulls whatever 'latest' is then)",
            "REGISTRY/NAME:TAG (not latest) or REGISTRY/NAME@sha256:<64 hex> (both allowed), e.g. "
            "us-docker.pkg.dev/my-project/ray/jax:1.0; or leave it out for the kit's image")


SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
"""A Secret key (not ``.`` or ``..`` either). Source: k8s.io/apimachinery ``validation.IsConfigMapKey``."""


@dataclass(frozen=True, kw_only=True)
class SecretKeyRef:
    """One key (``key``) of a Secret (``name``, DNS-1123) in the workloads' namespace, read as an env var."""

    name: str
    key: str

    def __post_init__(self) -> None:
        found = secret_name_problems("name", self.name)
        if not isinstance(self.key, str) or not SECRET_KEY.match(self.key) or self.key in (".", ".."):
            found.append(errors.invalid_value("key", self.key, "is not a Secret key",
                                              "1-253 letters, digits, '-', '_' or '.' (not '.' or '..')"))
        raise_all(found)


def gated_model_problems(source: str, secret: SecretKeyRef | None, field: str = "hf_token_secret",
                         outcome: str = "the RayService never becomes ready") -> list[InvalidInput]:
    """A gated model of the built-in table downloaded from Hugging Face without a token: refused, since the
    download surely fails after the slices were provisioned and the fix is cheap (docs/FACTS.md#spec-build)."""
    if secret is not None or source.startswith(("gs://", "/")):
        return []
    shape = by_hf_id(source)
    if shape is None or not shape.gated:
        return []
    return [errors.missing(
        field, f"for {source}: its Hugging Face repository is gated (each account must accept the model's license), "
        f"so without a token the download is refused and {outcome}",
        "hf_token_secret: {name: SECRET, key: KEY}, a Secret in the namespace holding a Hugging Face token whose "
        "account was granted access (kubectl create secret generic hf-secret --from-literal=hf_api_token=hf_...); or "
        "model_source: gs://BUCKET/PATH with the weights copied there")]


BUDGETED_KINDS = workload_fields.taking("compile_budget_s")
"""Kinds whose start's compile the kit measures."""


@dataclass(frozen=True, kw_only=True)
class WorkloadSpec:
    """A Ray workload on one kind of slice; serving, batch, training and team-code fields apply by kind.

    Field meanings and defaults (the config's reference): docs/FACTS.md#spec-fields.
    Public API: ``from raytpu import WorkloadSpec``.
    """

    name: str
    kind: WorkloadKind
    slice: SliceSpec
    image: str | None = None
    slices: int | None = None
    model: str | None = None
    model_source: str | None = None
    max_model_len: int | None = None
    engine_kwargs: Mapping[str, Any] | None = field(default=None, hash=False)
    hf_token_secret: SecretKeyRef | None = None
    input: str | None = None
    output: str | None = None
    dataset: str | None = None
    # batch sampling (raytpu.core.specs.serving.sampling.SAMPLING_FIELDS)
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] | None = None
    chat_template: bool | None = None
    chat_template_kwargs: Mapping[str, Any] | None = field(default=None, hash=False)
    code: str | None = None
    train_loop: str | None = None
    train_config: Mapping[str, Any] | None = field(default=None, hash=False)
    entrypoint: str | None = None
    run_on: str | None = None
    requirements: str | None = None
    serve_app: str | None = None
    compile_cache: str | None = None
    compile_budget_s: float | None = None
    run_time_s: int | str | None = None
    retries: int | None = None
    ray_disk_gib: int | None = None
    keep_checkpoints: int | str | None = None
    env: Mapping[str, str] | None = field(default=None, hash=False)
    secrets: Mapping[str, str | SecretKeyRef] | None = field(default=None, hash=False)
    team: str | None = None
    priority: str | None = None

    def __post_init__(self) -> None:
        found = dns_label_problems("name", self.name)
        if self.image is not None and (wrong := image_problem(self.image)):
            found.append(errors.invalid_value("image", self.image, *wrong))
        if not self.slice.provisioning.runs_ray and self.team is None:  # a team's run: Kueue's admission check
            found.append(errors.invalid_value(
                # Source: GKE API NodePool.QueuedProvisioning.enabled (docs/FACTS.md#preemption-restart-waits)
                "slice", self.slice.name, f"uses provisioning: {self.slice.provisioning.name}, whose node pool gets "
                "nodes only through a ProvisioningRequest (GKE queued provisioning), and the kit makes none for a run "
                "of no team (Kueue makes one for a team's run): the TPU pods would stay Pending",
                "a team's run (teams, and team on the workload), or a slice whose provisioning runs a Ray cluster: " +
                ", ".join(m.name for m in PROVISIONING_MODES.values() if m.runs_ray)))
        if not found and not self.plan.single_host:
            found += derived_name_problems("name", self.name, self.name, f"its {self.kind.object_kind}",
                                           run=self.kind.is_job)
            if self.multislice:  # `raytpu smoke` then runs the slice's multi-slice smoke job too
                found += derived_name_problems("slice", self.slice.name, names.dcn_smoke_job(self.slice.name),
                                               "its multi-slice smoke job")
        if not self.plan.ray_reservable:
            nearest = generation(self.plan.generation).nearest_ray_topologies(self.plan.topology)
            found.append(errors.invalid_value(
                "slice", self.slice.name, f"is {self.plan.generation} {self.plan.topology}, which GKE provisions but "
                f"Ray {RAY_VERSION} cannot reserve as one slice (slice_placement_group raises ValueError outside "
                "its VALID_TPU_TOPOLOGY)", f"a slice of a shape Ray {RAY_VERSION} reserves, nearest: "
                f"{', '.join(nearest)}; or keep this slice without workloads"))
        found += workload_fields.refusals(self.kind.name, {name: getattr(self, name) for name in SERVING_FIELDS})
        found += serve_app.problems(self.kind.name, serve_app=self.serve_app, code=self.code, image=self.image,
                                    llm_fields={name: getattr(self, name) for name in SERVING_FIELDS})
        if self.runs_vllm:
            if not self.kind.batches:  # Serve LLM's reservation; a batch's one host is data.batch_problems' rule
                found += vllm_rules.slice_problems(self.plan)
            found += vllm_rules.model_source_problems(self.model_source)
            if self.max_model_len is not None:
                found += range_problems("max_model_len", self.max_model_len, vllm_rules.MIN_MAX_MODEL_LEN, 10**7,
                                        " tokens")
            batch = self.kind.batches  # a batch RayJob's engine: its messages speak of it, not of a RayService
            found += vllm_rules.engine_kwargs_problems(
                self.engine_kwargs, self.plan, model=self.model, model_source=self.model_source,
                vllm_version=self.vllm_version or vllm_rules.VLLM_VERSION,
                holder="the host the batch job's engine holds" if batch else "the slice a replica reserves")
            found += gated_model_problems(self.model_source or self.model or vllm_rules.DEFAULT_MODEL,
                                          self.hf_token_secret, outcome="the batch RayJob fails when its engine "
                                          "starts" if batch else "the RayService never becomes ready")
        found += data.batch_problems(kind=self.kind.name, plan=self.plan, input=self.input,
                                     output=self.output, ray_version=self.ray_version)
        if self.dataset is not None:
            found += (data.path_problems("dataset", self.dataset) if workload_fields.takes(self.kind.name, "dataset")
                      else [workload_fields.refusal("dataset", self.dataset, self.kind.name)])
        found += user_code.workload_problems(self.kind, image=self.image, **{
            name: getattr(self, name) for name in user_code.CODE_FIELDS})
        found += user_code.run_on_problems("run_on", self.run_on, self.kind.name)
        found += run_env.env_problems("env", self.env) + run_env.secrets_problems("secrets", self.secrets, self.env)
        found += run_env.without_code_problems(self.has_code, self.env, self.secrets)
        found += sampling.sampling_problems(self)
        found += chat_template.problems(self.kind.name, self.kind.takes_model, self.kind.batches,
                                        self.chat_template_kwargs, self.chat_template, self.engine_kwargs)
        found += self._compile_problems()
        found += kinds.run_time_problems(self.kind, self.run_time_s)
        found += kinds.retries_problems(self.kind, self.retries)
        found += self._ray_disk_problems()
        found += checkpoints.problems(self.kind, self.keep_checkpoints)
        if self.kind.batches:
            found += data.row_stats_problems(self.engine_kwargs)
        refused = {p.field for p in found}  # a field no rule refused yet (a new one): refused by the table alone
        found += workload_fields.refusals(self.kind.name, {name: getattr(self, name) for name in workload_fields.FIELDS
                                                           if name not in refused})
        if self.slices is not None:
            bad = range_problems("slices", self.slices, 1, self.slice.count)
            found += bad
            if not bad and self.kind.spans_slices:
                found += multislice.problems(self.plan, self.slices, pins_each_slice=self.on_every_host)
        raise_all(found)

    def _ray_disk_problems(self) -> list[InvalidInput]:
        """``ray_disk_gib``: not for engines (their request is sized from the model), else a whole GiB in range."""
        if self.ray_disk_gib is None:
            return []
        if self.runs_vllm:
            return [errors.forbidden("ray_disk_gib", self.ray_disk_gib, f"for kind {self.kind.name}",
                                     "leave it out: an engine's request is its model's weights + "
                                     f"{node_disk.SCRATCH_GIB:g} GiB (raytpu plan --mode serve prints it)")]
        return range_problems("ray_disk_gib", self.ray_disk_gib, *node_disk.RAY_DISK_GIB, node_disk.RAY_DISK_WHY)

    @property
    def ray_files_gib(self) -> float:
        """GiB each Ray container writes on Autopilot (spilled objects, logs): ``ray_disk_gib``, else the allowance."""
        return float(self.ray_disk_gib) if self.ray_disk_gib is not None else node_disk.SCRATCH_GIB

    def _compile_problems(self) -> list[InvalidInput]:
        found: list[InvalidInput] = []
        for name, rule in (("compile_cache", compile_cache.folder_problems),
                           ("compile_budget_s", compile_cache.budget_problems)):
            value = getattr(self, name)
            if value is not None:
                found += (rule(name, value) if workload_fields.takes(self.kind.name, name)
                          else [workload_fields.refusal(name, value, self.kind.name)])
        return found

    @property
    def run_deadline_s(self) -> int | None:
        """Seconds its RayJob may run once up: ``run_time_s``, else its kind's; None: no deadline."""
        if self.run_time_s == kinds.NO_RUN_DEADLINE or self.kind.limits is None:
            return None
        return self.run_time_s if isinstance(self.run_time_s, int) else self.kind.limits.active_deadline_s

    @property
    def backoff_limit(self) -> int:
        """Its RayJob's ``backoffLimit``: ``retries``, else its kind's (0: a failed run stays failed)."""
        assert self.kind.limits is not None, f"kind {self.kind.name} is not a RayJob"
        return self.kind.limits.backoff_limit if self.retries is None else self.retries

    @property
    def plan(self) -> SlicePlan:
        """The slice's plan."""
        return self.slice.plan

    @property
    def vllm_version(self) -> str | None:
        """The vLLM a serving workload's pods run (the kit's image's, or the one ``ray[llm]`` pins); else None."""
        if not self.runs_vllm:
            return None
        return vllm_rules.VLLM_VERSION if self.image is not None else vllm_rules.IMAGE_VLLM_VERSION

    @property
    def ray_version(self) -> str:
        """The Ray the pods run: the serving image's for kinds that take a model in the kit's image, else the kit's."""
        return vllm_rules.IMAGE_RAY_VERSION if self.runs_vllm and self.image is None else RAY_VERSION

    @property
    def runs_vllm(self) -> bool:
        """It runs the kit's vLLM engine (a kind that takes a model, without a team's own ``serve_app``)."""
        return self.kind.takes_model and self.serve_app is None

    @property
    def slices_spanned(self) -> int:
        """How many copies of :attr:`slice` it spans: ``slices``, else all of them (``slice.count``)."""
        return self.slice.count if self.slices is None else self.slices

    @property
    def slices_per_run(self) -> int:
        """How many slices one run reserves together (all or none): ``slices`` for multi-slice kinds, else 1."""
        return (self.slices or 1) if self.kind.spans_slices else 1

    @property
    def runs_team_code(self) -> bool:
        """It runs a team's code (a ``train_loop`` or an ``entrypoint``), not only a program of the kit's."""
        return self.train_loop is not None or self.kind.runs_entrypoint or self.serve_app is not None

    @property
    def on_every_host(self) -> bool:
        """Its entrypoint runs once on every TPU host of the run (``run_on: every_host``), not as a driver on the
        head."""
        return self.run_on == user_code.EVERY_HOST

    @property
    def has_code(self) -> bool:
        """It brings a team's code (``code``, ``train_loop``, ``entrypoint``, or any code field another kind adds, such
        as ``serve_app``): what ``env`` and ``secrets`` are for."""
        return any(getattr(self, name, None) is not None for name in (*user_code.CODE_FIELDS, "serve_app"))

    @property
    def multislice(self) -> bool:
        """One run spans several slices joined over DCN."""
        return self.slices_per_run > 1

    def to_json(self) -> dict[str, Any]:
        """The JSON form a Ray job receives in ``RAYTPU_WORKLOAD``: every field, derived from the dataclass (one
        serialization for every path that ships or rebuilds a spec, so a new field cannot be dropped; issue 49)."""
        return {f.name: spec_json.encode(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkloadSpec:
        """Inverse of :meth:`to_json` (each field decoded by its annotated type)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a workload spec is a JSON object, not {type(data).__name__}")
        hints = spec_json.field_types(cls)
        given = {name: spec_json.decode(hints[name], value) for name, value in data.items() if name in hints}
        if unknown := sorted(set(data) - set(hints)):
            raise TypeError(f"unknown workload fields {', '.join(unknown)}")
        return cls(**given)

    def workload_env(self) -> dict[str, str]:
        """``{RAYTPU_WORKLOAD: <json>}``, base64-encoded when it holds ``$`` or a backquote (bash would expand them);
        ``code`` as the job sees it (Ray's ``working_dir``), not the submitting machine's path (issue 49).
        Source: KubeRay v1.7.0 ``BuildJobSubmitCommand`` (``strconv.Quote``)."""
        shipped = self.to_json()
        if shipped.get("code") is not None:  # the submitting machine's path: the job runs in the folder's copy
            shipped["code"] = user_code.SHIPPED_CODE
        text = json.dumps(shipped, sort_keys=True, separators=(",", ":"))
        if "$" in text or "`" in text:
            text = ENCODED_PREFIX + base64.b64encode(text.encode()).decode()
        return {WORKLOAD_ENV: text}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkloadSpec:
        """The spec a job was given (``RAYTPU_WORKLOAD``); InvalidInput when it is missing or unreadable."""
        text = (os.environ if environ is None else environ).get(WORKLOAD_ENV)
        if not text:
            raise errors.missing(WORKLOAD_ENV, "in the environment (the job's workload spec)",
                                 "run through `raytpu submit`/`raytpu local`, or set it to WorkloadSpec.to_json()")
        try:
            if text.startswith(ENCODED_PREFIX):
                text = base64.b64decode(text.removeprefix(ENCODED_PREFIX), validate=True).decode()
            return cls.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, InvalidInput | InvalidInputs):
                raise
            raise errors.invalid_value(WORKLOAD_ENV, text[:80], f"is not a workload spec ({exc})",
                                       "the JSON of WorkloadSpec.to_json()") from exc
