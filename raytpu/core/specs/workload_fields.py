"""Which workload kind takes which ``workloads[]`` field: the one table (:data:`FIELDS`), one row per field.

A row names the kinds that take the field (in the order a refusal lists them; None: every kind, a new one too), the
kinds that require it, and how a refusal reads. ``validate``'s "only with kind ..." errors (:func:`refusals`), the
field groups the rules read (:func:`group`) and the config reference (``python -m raytpu.tools.gen_reference``) come
from it; the type and default of each field are its :class:`raytpu.core.specs.workload_spec.WorkloadSpec` attribute.
Adding a field: its row here and its attribute there (its value rule beside the others). Adding a kind: its entry in
:data:`raytpu.core.specs.kinds.KINDS` and its name in the rows of the fields it takes. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput

TEAM_RUNS = ("train", "job", "batch")
"""The kinds a team runs through its queue (``team``, ``priority``); serving and the smoke are the platform's."""
SERVING = ("serve", "batch")
"""The kinds that run a model on vLLM (:attr:`raytpu.core.specs.kinds.WorkloadKind.takes_model`, a test checks they
agree): they take the ``llm`` group."""


@dataclass(frozen=True, kw_only=True)
class Field:
    """One ``workloads[]`` field: who takes it and how a refusal reads.

    Attributes:
        name: The key in ``raytpu.yaml`` (a :class:`WorkloadSpec` attribute).
        group: The section it belongs to (``serving``, ``sampling``, ``code``...): the reference's sections and the
            groups the rules read (:func:`group`).
        doc: What it is for, one line (the reference).
        rule: The module holding its value rule, dotted below :mod:`raytpu.core.specs` (the reference's "source").
        kinds: The kinds that take it, in the order a refusal lists them; None: every kind.
        required: The kinds that must give it.
        why: A refusal's problem; ``{kind}`` the workload's kind, ``{kinds}`` :attr:`kinds`, ``{reason}`` a reason the
            rule passes.
        only: A refusal's valid values; ``{kinds}`` joined by commas, ``{kinds_and}`` with a final "and".
        reasons: ``{reason}`` by the workload's kind; ``reason`` for a kind not listed there.
        beside: A field it is taken only beside (its own rule refuses it alone); the reference lists that field's kinds.
    """

    name: str
    group: str
    doc: str
    rule: str = "workload_spec"
    kinds: tuple[str, ...] | None = None
    required: tuple[str, ...] = ()
    why: str = "for kind {kind}"
    only: str = "only with kinds {kinds}"
    reasons: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""
    beside: str = ""

    def takes(self, kind: str) -> bool:
        """``kind`` takes this field."""
        return self.kinds is None or kind in self.kinds


_C = "code"  # the team's-code fields: raytpu.core.specs.runtime.user_code
FIELDS: dict[str, Field] = {f.name: f for f in (
    Field(name="name", group="workload", required=("*",), doc="the workload's name: a DNS label of at most 30 "
          "characters, unique in the config (it names the RayJob or RayService)"),
    Field(name="kind", group="workload", required=("*",), rule="kinds",
          doc="what it runs: one of the kinds (listed below the workloads' fields)"),
    Field(name="slice", group="workload", required=("*",), doc="the name of the slice (slices[].name) it runs on"),
    Field(name="image", group="workload", doc="a team image with a tag or digest, carrying the kit's Ray; default "
          "the kit's image for the kind (raytpu images build)"),
    Field(name="slices", group="workload", rule="slices.multislice", doc="train and job: how many copies of the slice "
          "one run spans over DCN (default 1); the other kinds: how many copies it runs on (default all)"),
    Field(name="model", group="llm", kinds=SERVING, rule="serving.vllm_rules",
          doc="the Hugging Face model id the engine runs (default the kit's small model)"),
    Field(name="model_source", group="llm", kinds=SERVING, rule="serving.vllm_rules",
          doc="where the weights are read from: a Hugging Face id, gs://BUCKET/PATH or a local path"),
    Field(name="max_model_len", group="llm", kinds=SERVING, rule="serving.vllm_rules",
          doc="the engine's context length in tokens"),
    Field(name="engine_kwargs", group="llm", kinds=SERVING, rule="serving.vllm_rules",
          doc="vLLM engine arguments, checked against vLLM's own"),
    Field(name="hf_token_secret", group="llm", kinds=SERVING, doc="{name, key} of a Secret holding a Hugging "
          "Face token (gated models)"),
    Field(name="input", group="batch", kinds=("batch",), required=("batch",), rule="runtime.data",
          why="for a kind other than {kinds}", only="only with kind: {kinds}",
          doc="the prompts: a Parquet file or folder, a JSON lines file, or gs://BUCKET/PATH"),
    Field(name="output", group="batch", kinds=("batch",), required=("batch",), rule="runtime.data",
          why="for a kind other than {kinds}", only="only with kind: {kinds}",
          doc="where the answers are written (apart from input)"),
    Field(name="dataset", group="train", kinds=("train",), rule="runtime.data",
          only="only with kinds that train ({kinds})", doc="the training data: a Parquet file or folder, or gs://BUCKET/PATH"),
    *(Field(name=name, group="sampling", kinds=("batch",), rule="serving.sampling",
            only="only with kind: {kinds}", doc=doc)
      for name, doc in (("max_tokens", "tokens generated per row (default 64)"),
                        ("temperature", "sampling temperature (default 0: greedy)"),
                        ("top_p", "nucleus sampling's probability mass"),
                        ("stop", "strings that end a row's answer"),
                        ("chat_template", "apply the model's chat template to each row (default true)"))),
    Field(name="chat_template_kwargs", group="serving", kinds=SERVING, rule="serving.chat_template",
          only="only with kinds {kinds_and}", doc="keyword arguments of the model's chat template "
          "({enable_thinking: false}); a batch of a built-in Qwen3 gets {enable_thinking: false} unless set here"),
    Field(name="code", group=_C, kinds=("train", "job", "serve"), rule="runtime.user_code",
          only="only with kinds {kinds_and} (with serve_app)",
          doc="a local folder of the team's code, shipped with every run"),
    Field(name="train_loop", group=_C, kinds=("train",), rule="runtime.user_code", only="only with kind {kinds}",
          doc="MODULE:FUNCTION in code: the team's training function, run by the kit's JaxTrainer"),
    Field(name="train_config", group=_C, kinds=("train",), rule="runtime.user_code", only="only with kind {kinds} and "
          "train_loop", doc="the mapping the train_loop function receives (hyperparameters)"),
    Field(name="entrypoint", group=_C, kinds=("job",), required=("job",), rule="runtime.user_code",
          only="only with kind {kinds}", doc="the team's own Ray driver: a command run in the code folder"),
    Field(name="run_on", group="runtime", kinds=("job",), rule="runtime.user_code", only="only with kind {kinds}",
          doc="where the entrypoint runs: driver (default: once, on the Ray head, a Ray driver) or every_host (once "
          "on every TPU host of the run, all at once: a plain JAX program calling jax.distributed.initialize())"),
    Field(name="requirements", group=_C, rule="runtime.user_code", beside="code",
          doc="a requirements file, its path relative to code: the packages beyond the kit's image, resolved "
          "against its pins"),
    Field(name="serve_app", group="serving", kinds=("serve",), rule="serving.serve_app", only="only with kind {kinds}",
          doc="MODULE:APP in code: the team's own Ray Serve app instead of the kit's LLM app"),
    Field(name="compile_cache", group="runtime", kinds=("train", "job", "smoke"), rule="runtime.compile_cache",
          why="for kind {kind} (vLLM keeps its own XLA cache)", only="only with kinds that run JAX: {kinds}",
          doc="the folder of the kit's bucket compiled programs are cached in, or off"),
    Field(name="compile_budget_s", group="runtime", kinds=("train", "smoke"), rule="runtime.compile_cache",
          why="for kind {kind} (the kit does not measure its compile)", only="only with kinds {kinds_and}",
          doc="seconds a start may compile before the run reports it over budget"),
    Field(name="run_time_s", group="runtime", kinds=("smoke", "train", "job", "batch"), rule="kinds",
          why="for kind {kind} (a RayService has no deadline)",
          doc="seconds the RayJob may run once up (default its kind's), or unlimited for train and job"),
    Field(name="retries", group="runtime", kinds=("job",), rule="kinds", why="for kind {kind} ({reason})",
          only="only with kind {kinds}; remove it here", doc="whole new attempts after a failure (backoffLimit)",
          reason="it is not a team's own driver",
          reasons={"serve": "a RayService has no backoffLimit",
                   "train": "Ray Train restarts it inside the run, with the kit's budget per capacity",
                   "smoke": "a retried check would hide a failing slice",
                   "batch": "a retry runs the whole dataset again"}),
    Field(name="ray_disk_gib", group="runtime", rule="serving.node_disk",
          doc="GiB of disk each Ray container writes on Autopilot (not for engines)"),
    Field(name="keep_checkpoints", group="train", kinds=("train",), rule="runtime.checkpoints",
          why="for kind {kind} (the kit keeps no checkpoints of it)", only="only with kind {kinds}; remove it here",
          doc="how many of the newest checkpoints stay (default 2), or all; one Ray deletes past them stays a day "
          "as a noncurrent version (the bucket's lifecycle rule for checkpoints/), then 7 days in soft delete"),
    Field(name="env", group="runtime", rule="runtime.run_env", beside="code",
          doc="plain environment variables of the team's code (ENV_NAME: \"value\", quoted; passed as written, `$` "
          "and backquotes included); LIBTPU_INIT_ARGS and XLA_FLAGS are yours, names the kit, Ray, KubeRay or "
          "the TPU webhook set are refused, as are PYTHONHOME, LD_PRELOAD, LD_LIBRARY_PATH and "
          "GOOGLE_APPLICATION_CREDENTIALS"),
    Field(name="secrets", group="runtime", rule="runtime.run_env", beside="code",
          doc="ENV_NAME: the name of a Kubernetes Secret (its key `value`), or ENV_NAME: {name: SECRET, key: KEY}, "
          "that the team's code reads; locally, the "
          "submitting shell's variable of that name"),
    Field(name="team", group="teams", kinds=TEAM_RUNS, rule="cluster.teams",
          why="for kind {kind} (the platform's own: it runs outside the teams' queues)", only="only with kinds "
          "{kinds_and}", doc="the team (teams[].name) whose namespace, identity and queue the run uses; required "
          "once teams is set"),
    Field(name="priority", group="teams", kinds=TEAM_RUNS, rule="cluster.teams",
          why="for kind {kind} (the platform's own: it runs outside the teams' queues)", only="only with kinds "
          "{kinds_and}", doc="low, normal (default) or high: a high run may preempt a low one of the cohort"),
)}
"""Every ``workloads[]`` field, in the order ``raytpu.yaml``'s reference lists them."""


def _and(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def takes(kind: str, name: str) -> bool:
    """Kind ``kind`` takes field ``name``."""
    return FIELDS[name].takes(kind)


def requires(kind: str, name: str) -> bool:
    """Kind ``kind`` must give field ``name``."""
    required = FIELDS[name].required
    return kind in required or "*" in required


def taking(name: str) -> tuple[str, ...]:
    """The kinds that take field ``name`` (a field every kind takes: none listed, see :func:`takes`)."""
    return FIELDS[name].kinds or ()


def group(name: str) -> tuple[str, ...]:
    """The fields of group ``name``, in table order."""
    return tuple(f.name for f in FIELDS.values() if f.group == name)


def refusal(name: str, value: object, kind: str) -> InvalidInput:
    """The error for field ``name`` given to a kind that does not take it."""
    row = FIELDS[name]
    listed = row.kinds or ()
    return errors.forbidden(name, value, row.why.format(kind=kind, kinds=", ".join(listed),
                                                        reason=row.reasons.get(kind, row.reason)),
                            row.only.format(kinds=", ".join(listed), kinds_and=_and(listed) if listed else ""))


def refusals(kind: str, given: Mapping[str, object]) -> list[InvalidInput]:
    """The errors for each field of ``given`` (name -> value; None: not given) that ``kind`` does not take."""
    return [refusal(name, value, kind) for name, value in given.items() if value is not None and not takes(kind, name)]
