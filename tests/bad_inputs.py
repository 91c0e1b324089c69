"""A corpus of bad inputs to every ``raytpu`` command, as data, and the runner that checks each one end to end.

Issue 28 ("edges that refuse, never destroy"): every bad input exits 2 (or the code docs/DESIGN.md's CLI contract
documents) with one ``error: <field>: <what is wrong>; valid: <...>`` line first, no traceback, nothing of the user's
changed, in under 10 s. Each :class:`Case` names the argv, the files it writes into an empty folder first (the
user's folder: the run's working directory), the exit code and the field its first error line must name. The
runner (:func:`run_case`) runs ``python -m raytpu`` there with no cloud credentials and compares the folder before
and after. ``python -m tests.bad_inputs --table`` prints the markdown table the issue's closing note carries.

The per-rule tests (tests/test_config.py, test_cli.py, test_plan_command.py, test_outputs.py) check single
values in process; this corpus checks the whole path from argv to exit code for inputs they do not have.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from raytpu.images.definitions import IMAGES as KIT_IMAGES

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_TEXT = (ROOT / "raytpu.example.yaml").read_text()
TIMEOUT_S = 10.0
MAX_STDERR = 4096
STACK = "ray-tpu-cluster"
OUT_FIELD = f"outputs.json: {STACK}."
"""An output's field, as errors name it: the outputs file, then ``<stack>.<output>`` (raytpu/cluster/outputs.py)."""
IMAGE_NAMES = tuple(KIT_IMAGES)


class Dir:
    """A folder to create (a file's content in :attr:`Case.files`)."""


DIR = Dir()


class Fifo:
    """A named pipe to create (reading one blocks until a writer comes: a reader must refuse it, not open it)."""


FIFO = Fifo()


@dataclass(frozen=True)
class Link:
    """A symbolic link to create, leading to ``target`` (as written: relative to the link's folder, or absolute)."""

    target: str


Content = str | bytes | Dir | Fifo | Link


@dataclass(frozen=True)
class Case:
    """One bad input.

    Attributes:
        id: Short, unique, the test id.
        argv: The arguments after ``raytpu`` (paths relative to the user's folder, the run's cwd).
        files: Files (or :data:`DIR` folders) written into the user's folder before the run.
        field: The field the first ``error:`` line names (``error: <field>: ...``); an absolute path before it is
            allowed (the images record is named by its path). Progress lines (``raytpu synth: ...``) and
            warnings may come before that line; it is the table's "first line".
        code: The exit code: 2 (bad input), or what the CLI contract documents (1: a runtime failure).
        allowed: Paths (relative) the run may create or change; anything else changed is a failure.
        env: Extra environment (``{ROOT}`` and ``{CWD}`` are replaced).
        item: The issue item that owns the case, when another change fixes it (for the report).
        process: Run it in its own process even in the test (:func:`run_in_process` cannot stop a run that hangs,
            nor one that reaches the network or loads CDK Terrain or matplotlib).
        shows: Text the first error line must hold (the value as the user wrote it in YAML: ``true``, ``{a: 1}``).
        hides: Texts the first error line must not hold (a Python repr, a class name of the kit's).
    """

    id: str
    argv: tuple[str, ...]
    field: str
    files: Mapping[str, Content] = dataclasses.field(default_factory=dict)
    code: int = 2
    allowed: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    item: str = ""
    process: bool = False
    shows: str = ""
    hides: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        return " ".join(self.argv[:2]) if self.argv[:1] in (("images",), ("local",)) else " ".join(self.argv[:1])


@dataclass(frozen=True)
class Outcome:
    """What one run did."""

    exit_code: int
    first_line: str
    stderr: str
    traceback: bool
    seconds: float
    changed: list[str]

    def problems(self, case: Case) -> list[str]:
        """Every way this outcome breaks the contract for ``case`` (empty: it held)."""
        found = []
        if self.exit_code != case.code:
            found.append(f"exit {self.exit_code}, expected {case.code}")
        if self.traceback:
            found.append("a traceback on stderr")
        head = self.first_line.split("; valid: ", 1)[0]
        if not head.startswith("error: "):
            found.append("the first stderr line does not start with 'error: '")
        elif not (head.startswith(f"error: {case.field}: ") or f"/{case.field}: " in head):
            found.append(f"the first line does not name {case.field!r}")
        if case.shows and case.shows not in self.first_line:
            found.append(f"the first line does not show {case.shows!r}")
        found += [f"the first line shows {hidden!r}" for hidden in case.hides if hidden in self.first_line]
        if len(self.stderr.encode()) > MAX_STDERR:
            found.append(f"stderr is {len(self.stderr.encode())} bytes (over {MAX_STDERR})")
        if self.changed:
            found.append(f"changed the user's files: {', '.join(self.changed[:5])}")
        if self.seconds > TIMEOUT_S:
            found.append(f"took {self.seconds:.1f} s")
        return found


# ---------------------------------------------------------------------------------------------- inputs

EXAMPLE: dict[str, Any] = yaml.safe_load(EXAMPLE_TEXT)


def config(edit: Callable[[dict[str, Any]], object] | None = None) -> str:
    """The example config, edited (libyaml's emitter where it is built: the same text as ``yaml.safe_dump``, and the
    corpus is written at collection, in every test worker, with values of megabytes)."""
    data = copy.deepcopy(EXAMPLE)
    if edit is not None:
        edit(data)
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def _set(path: str, value: object) -> Callable[[dict[str, Any]], object]:
    """An edit setting ``path`` (``slices.0.count``) to ``value``."""
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[int(last) if last.isdigit() else last] = value
    return edit


def _all(*edits: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], object]:
    def edit(data: dict[str, Any]) -> None:
        for one in edits:
            one(data)
    return edit


def serving(topology: str, model: str) -> str:
    """The example with its serving slice of ``topology`` serving ``model``."""
    return config(_all(_set("slices.1.topology", topology), _set("workloads.2.model", model)))


def batch_config(**fields: object) -> str:
    """The example plus a batch workload on its single-host slice (``fields`` replace its own; None drops one)."""
    work = {"name": "batch", "kind": "batch", "slice": "serve", "input": "gs://my-ml-project-data/prompts.jsonl",
            "output": "gs://my-ml-project-data/results", **fields}
    return config(lambda d: d["workloads"].append({k: v for k, v in work.items() if v is not None}))


OUTPUTS: dict[str, str] = {
    "endpoint": "https://gke-0123456789abcdef-123456789012.us-east5.gke.goog", "ca_certificate": "",
    "cluster_name": "ray-tpu", "location": "us-east5", "project": "my-ml-project", "namespace": "ray",
    "service_account": "ray-tpu-ray", "bucket": "my-ml-project-ray-tpu-ray",
    "registry": "us-east5-docker.pkg.dev/my-ml-project/ray-tpu-images",
    "builder_service_account": "raytpu-ray-tpu-img@my-ml-project.iam.gserviceaccount.com"}
"""The outputs of the example's cluster stack (raytpu.cluster.outputs.StackOutputs)."""


def outputs(**change: object) -> str:
    """``cdktf deploy --outputs-file`` JSON of the example's stack, with outputs changed (None: removed)."""
    values: dict[str, object] = {**OUTPUTS, **change}
    return json.dumps({STACK: {k: v for k, v in values.items() if k not in change or change[k] is not None},
                       "ray-tpu-workloads": {}})


def outputs_null(name: str) -> str:
    values: dict[str, object] = {**OUTPUTS, name: None}
    return json.dumps({STACK: values})


def terraform_outputs() -> str:
    """``terraform output -json`` in the cluster stack's directory."""
    return json.dumps({k: {"sensitive": False, "type": "string", "value": v} for k, v in OUTPUTS.items()})


MODEL_CONFIG: dict[str, Any] = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                                "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                                "max_position_embeddings": 131072}


def model_config(**change: object) -> str:
    return json.dumps({**MODEL_CONFIG, **change})


PRICES: dict[str, Any] = {"source": "a test", "read_on": "2026-01-01", "region": "us-east5",
                          "per_chip_hour": {"v6e": {"on_demand": 2.7, "spot": 0.5, "flex_start": None}}}


def prices(**change: object) -> str:
    return json.dumps({**PRICES, **change}, allow_nan=True)


def prices_v6e(**change: object) -> str:
    return prices(per_chip_hour={"v6e": {**PRICES["per_chip_hour"]["v6e"], **change}})


DIGEST = "sha256:" + "a" * 64
RECORD_REF = f"us-east5-docker.pkg.dev/my-ml-project/ray-tpu-images/job@{DIGEST}"


def record(**entry: object) -> str:
    """A ``raytpu.images.json`` with one ``job`` entry (fields changed)."""
    return json.dumps({"images": {"job": {"ref": RECORD_REF, "build": "projects/p/locations/l/builds/b",
                                          "versions": {"ray": "2.60.0"}, **entry}}})


def alias_bomb_text() -> str:
    """The bomb defined inside the serving workload: ``model: {x0: &a0 lol, x1: &a1 [*a0 x10], ..., x9: ...}``."""
    parts = ['x0: &a0 "lol"'] + [f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    text = config(_set("workloads.2.model", "PLACEHOLDER"))
    return text.replace("model: PLACEHOLDER", "model: {" + ", ".join(parts) + "}")


def many_slices(count: int = 134_000) -> str:
    """A 10 MB config: ``count`` slices."""
    head = config(lambda d: d.update(slices=[], workloads=[])).split("slices:")[0]
    rows = "".join(f"- {{name: s{i}, generation: v6e, topology: 2x4, zone: us-east5-b}}\n" for i in range(count))
    return head + "slices:\n" + rows + "workloads: []\n"


def _utf16(text: str) -> bytes:
    return text.encode("utf-16")


SUBMIT = ("submit", "train", "--stack", STACK, "--dry-run")
SMOKE = ("smoke", "--stack", STACK, "--dry-run")
IMAGES = ("images", "build", "--stack", STACK)
FIXTURE_RECORD = json.dumps({"images": {
    name: {"ref": f"us-east5-docker.pkg.dev/my-ml-project/ray-tpu-images/{name}@sha256:"
                  f"{hashlib.sha256(name.encode()).hexdigest()}", "build": f"projects/p/locations/l/builds/{name}"}
    for name in IMAGE_NAMES}})
"""A record of every kit image built (tests/image_refs.py's kind), so submit and smoke get past the images."""
CFG = {"raytpu.yaml": EXAMPLE_TEXT, "raytpu.images.json": FIXTURE_RECORD}
CFG_OUT = {**CFG, "outputs.json": outputs()}
PLAN = ("plan", "--model", "llama-3.1-8b")
UP = ("local", "--dir", "run", "up", "--generation", "v6e", "--topology", "2x4")


def dead_cluster() -> str:
    """A ``cluster.json`` whose head is gone: no process names its Ray temp dir (``raytpu local up`` then crashed,
    or the machine restarted)."""
    from raytpu.core.tpu.plan import plan_slice

    head = {"role": "head", "pid": 4_000_000, "log": "head.log"}
    return json.dumps({"run_dir": "run", "temp_dir": "/tmp/raytpu-gone-000000", "address": "127.0.0.1:9",
                       "plan": plan_slice("v6e", "2x4").to_json(), "slices": ["s-0"], "nodes": [head],
                       "dashboard": "http://127.0.0.1:9", "auth_token_path": "run/auth_token",
                       "started_by": "raytpu local up"})


DEAD: dict[str, Content] = {"run": DIR, "run/cluster.json": dead_cluster()}
STALE_RAY = {"RAY_ADDRESS": "127.0.0.1:9", "RAY_API_SERVER_ADDRESS": "http://127.0.0.1:9"}
"""What an earlier `raytpu local up` printed, exported, its cluster gone."""


def _validate(case_id: str, text: str | bytes, field_name: str, item: str = "") -> Case:
    return Case(case_id, ("validate", "raytpu.yaml"), field_name, {"raytpu.yaml": text}, item=item)


def _edit(case_id: str, path: str, value: object, field_name: str, item: str = "") -> Case:
    return _validate(case_id, config(_set(path, value)), field_name, item)


def _process(case: Case) -> Case:
    return dataclasses.replace(case, process=True)


def team_config(train: Mapping[str, object] | None = None, job: Mapping[str, object] | None = None) -> str:
    """The example plus a team's ``train_loop`` workload and its ``job`` workload (issue 38), fields replaced (None
    drops one)."""
    pretrain = {"name": "pretrain", "kind": "train", "slice": "train", "code": "./src",
                "train_loop": "lm.train:train_loop", "train_config": {"steps": 20, "lr": 3.0e-4}, **(train or {})}
    custom = {"name": "custom", "kind": "job", "slice": "train", "code": "./src",
              "entrypoint": "python tools/reserve.py --topology 4x4", **(job or {})}
    return config(lambda d: d["workloads"].extend(
        {k: v for k, v in w.items() if v is not None} for w in (pretrain, custom)))


TEAM_SRC: dict[str, Content] = {"src": DIR, "src/lm/__init__.py": "", "src/tools/reserve.py": "print('hi')\n",
                                "src/lm/train.py": "def train_loop(config):\n    return config\n"}


def _team(case_id: str, field_name: str, train: Mapping[str, object] | None = None,
          job: Mapping[str, object] | None = None, files: Mapping[str, Content] | None = None,
          item: str | None = None) -> Case:
    """A bad team-code workload: validate exits 2 naming the field (workloads[3] is the train_loop one, [4] the job)."""
    return Case(case_id, ("validate", "raytpu.yaml"), field_name,
                {**TEAM_SRC, **(files or {}), "raytpu.yaml": team_config(train, job)}, item=item or I38)


REQS: dict[str, Content] = {**TEAM_SRC, "src/requirements.txt": "inflection==0.5.1\n",
                             "raytpu.yaml": team_config({"requirements": "requirements.txt"})}
"""A team's workload with requirements: what the lock cache (``$XDG_CACHE_HOME/raytpu``) is written for."""

I38 = "38.4 your code: checked before anything runs"
I47 = "47.1 requirements: checked and resolved before anything runs"
I71_2 = "71.2 every requirements line honoured or refused"
I68_4 = "68.4 checks that come too late or never"
I68_1 = "68.1 interrupted and starved runs"
I67 = "67 run_on: every_host"
TEAM_CASES: tuple[Case, ...] = (
    _team("team-train-loop-no-colon", "workloads[3].train_loop", {"train_loop": "lm.train.train_loop"}),
    _team("team-env-kit-name", "workloads[3].env.JAX_PLATFORMS", {"env": {"JAX_PLATFORMS": "cpu"}}),
    _team("team-secret-not-dns", "workloads[3].secrets.WANDB_API_KEY", {"secrets": {"WANDB_API_KEY": "Wandb_Key"}}),
    _team("team-train-loop-keyword", "workloads[3].train_loop", {"train_loop": "lm.class:train_loop"}),
    _team("team-train-loop-number", "workloads[3].train_loop", {"train_loop": 3}),
    _team("team-train-loop-no-module", "workloads[3].train_loop", {"train_loop": "lm.nope:train_loop"}),
    _team("team-train-loop-no-function", "workloads[3].train_loop", {"train_loop": "lm.train:nope"}),
    _team("team-train-loop-two-args", "workloads[3].train_loop",
          files={"src/lm/train.py": "def train_loop(config, extra):\n    pass\n"}),
    _team("team-train-config-to-no-args", "workloads[3].train_config",  # no train_config: fine (Ray calls it bare)
          files={"src/lm/train.py": "def train_loop():\n    pass\n"}),
    _team("team-train-loop-async", "workloads[3].train_loop",
          files={"src/lm/train.py": "async def train_loop(config):\n    pass\n"}),
    _team("team-train-loop-syntax-error", "workloads[3].train_loop", files={"src/lm/train.py": "def train_loop(:\n"}),
    _team("team-train-loop-not-utf8", "workloads[3].train_loop", files={"src/lm/train.py": b"\xff\xfe def"}),
    _team("team-train-loop-on-smoke", "workloads[3].train_loop", {"kind": "smoke", "code": None,
                                                                   "train_config": None}),
    _team("team-train-loop-no-code-kit-image", "workloads[3].code", {"code": None}),
    _team("team-train-config-list", "workloads[3].train_config", {"train_config": [1, 2]}),
    _team("team-train-config-string", "workloads[3].train_config", {"train_config": "steps=3"}),
    _team("team-train-config-nan", "workloads[3].train_config.lr", {"train_config": {"lr": float("nan")}}),
    _team("team-train-config-inf-nested", "workloads[3].train_config.opt.b[1]",
          {"train_config": {"opt": {"b": [0.9, float("inf")]}}}),
    _team("team-train-config-huge", "workloads[3].train_config", {"train_config": {"blob": "x" * 70_000}}),
    _team("team-train-config-no-loop", "workloads[3].train_config", {"train_loop": None, "code": None}),
    _team("team-code-no-loop", "workloads[3].code", {"train_loop": None, "train_config": None}),
    _team("team-code-missing", "workloads[3].code", {"code": "./nope"}),
    _team("team-code-a-file", "workloads[3].code", {"code": "./notes.txt"}, files={"notes.txt": "mine\n"}),
    _team("team-code-gs", "workloads[3].code", {"code": "gs://team/src"}),
    _team("team-code-empty", "workloads[3].code", {"code": " "}),
    _team("team-entrypoint-on-train", "workloads[3].entrypoint", {"entrypoint": "python x.py"}),
    _team("team-entrypoint-missing", "workloads[4].entrypoint", job={"entrypoint": None}),
    _team("team-entrypoint-empty", "workloads[4].entrypoint", job={"entrypoint": "  "}),
    _team("team-entrypoint-unclosed-quote", "workloads[4].entrypoint", job={"entrypoint": "python 'x.py"}),
    _team("team-entrypoint-newline", "workloads[4].entrypoint", job={"entrypoint": "python x.py\nrm -rf /"}),
    # Source: KubeRay v1.7.0 common/job.go BuildJobSubmitCommand (unquoted in `bash -ce`: \r is not a separator)
    _team("team-entrypoint-carriage-return", "workloads[4].entrypoint",
          job={"entrypoint": "python tools/reserve.py\r--topology 4x4"}),
    _team("team-entrypoint-form-feed", "workloads[4].entrypoint", job={"entrypoint": "python\x0ctools/reserve.py"}),
    _team("team-entrypoint-no-script", "workloads[4].entrypoint", job={"entrypoint": "python tools/nope.py"}),
    # the script is checked whichever spelling starts it (issue 68 item 4)
    _team("team-entrypoint-assignment-no-script", "workloads[4].entrypoint",
          job={"entrypoint": "FOO=1 python tools/missing.py"}, item=I68_4),
    _team("team-entrypoint-python3-11-no-script", "workloads[4].entrypoint",
          job={"entrypoint": "python3.11 tools/missing.py"}, item=I68_4),
    _team("team-run-on-unknown", "workloads[4].run_on", job={"run_on": "everywhere"}, item=I67),
    _team("team-run-on-train", "workloads[3].run_on", {"run_on": "every_host"}, item=I67),
    _team("team-run-on-every-host-no-script", "workloads[4].entrypoint",
          job={"entrypoint": "python tools/nope.py", "run_on": "every_host"}, item=I67),
    _team("team-entrypoint-outside", "workloads[4].entrypoint", job={"entrypoint": "python ../raytpu.yaml"}),
    _team("team-entrypoint-no-module", "workloads[4].entrypoint", job={"entrypoint": "python -m tools.nope"}),
    _team("team-entrypoint-excluded", "workloads[4].entrypoint", job={"entrypoint": "python .venv/run.py"},
          files={"src/.venv/run.py": "print(1)\n"}),
    _team("team-entrypoint-shell-and", "workloads[4].entrypoint", job={"entrypoint": "python tools/reserve.py && x"}),
    _team("team-entrypoint-shell-variable", "workloads[4].entrypoint", job={"entrypoint": "python $SCRIPT"}),
    _team("team-entrypoint-too-long", "workloads[4].entrypoint", job={"entrypoint": "python x.py " + "a" * 5000}),
    _team("team-train-loop-on-job", "workloads[4].train_loop", job={"train_loop": "lm.train:train_loop"}),
    _team("team-code-on-smoke", "workloads[4].code", job={"kind": "smoke", "entrypoint": None}),
    _team("team-job-slices-zero", "workloads[4].slices", job={"slices": 0}),
    _team("reqs-missing-file", "workloads[3].requirements", {"requirements": "requirements.txt"}, item=I47),
    _team("reqs-outside-code", "workloads[3].requirements", {"requirements": "../raytpu.yaml"}, item=I47),
    _team("reqs-absolute", "workloads[3].requirements", {"requirements": "/etc/hosts"}, item=I47),
    _team("reqs-clash-jax", "workloads[3].requirements", {"requirements": "requirements.txt"},
          files={"src/requirements.txt": "jax==0.4.30\n"}, item=I47),
    _team("reqs-without-code", "workloads[3].requirements", {"requirements": "r.txt", "code": None,
                                                             "train_loop": None, "train_config": None}, item=I47),
    # resolving needs the index: `validate --resolve` (plain validate reads files only, offline; issue 71 item 13)
    dataclasses.replace(_team("reqs-unresolvable", "workloads[3].requirements", {"requirements": "requirements.txt"},
                              files={"src/requirements.txt": "no-such-package-raytpu-heldout-zz\n"}, item=I47),
                        argv=("validate", "raytpu.yaml", "--resolve")),
    # every line honoured on both sides or refused, naming the line (issue 71 item 2)
    *(_team(f"reqs-line-{case}", "workloads[3].requirements", {"requirements": "requirements.txt"},
            files={"src/requirements.txt": f"optax==0.2.8\n{line}\n", **extra}, item=I71_2)
      for case, line, extra in (
          ("direct-url", "mylib @ https://example.com/mylib-1.0-py3-none-any.whl", {}),
          ("vcs", "git+https://github.com/org/mylib.git@v1#egg=mylib", {}),
          ("local-path", "./vendor/mylib", {}),
          ("editable", "-e .", {}),
          ("hash", "einops==0.8.1 --hash=sha256:" + "0" * 64, {}),
          ("index-url", "--index-url https://pypi.internal.example/simple", {}),
          ("extra-index", "--extra-index-url https://pypi.internal.example/simple", {}),
          ("constraints", "-c constraints.txt", {"src/constraints.txt": "einops==0.8.1\n"}),
          ("include-missing", "-r base.txt", {}),
          ("include-outside", "-r ../outside.txt", {"outside.txt": "einops\n"}),
          ("include-refuses", "-r base.txt", {"src/base.txt": "--find-links /wheels\n"}),
          ("unknown-option", "--prefer-binary", {}),
      )),
)


I68_2 = "68.2 env and secrets rules a team can live with"
I71_8 = "71.8 --set reads values as the config file does"


def _team_set(case_id: str, field_name: str, *given: str, shows: str = "",
              train: Mapping[str, object] | None = None) -> Case:
    """``raytpu submit pretrain --stack ... --dry-run --set ...`` of the team workload (issue 68.2, 71.8)."""
    return Case(case_id, ("submit", "pretrain", "--stack", STACK, "--dry-run",
                          *(arg for text in given for arg in ("--set", text))), field_name,
                {**TEAM_SRC, "raytpu.yaml": team_config(train), "raytpu.images.json": FIXTURE_RECORD,
                 "outputs.json": outputs()}, item=I68_2, shows=shows)


ENV_CASES: tuple[Case, ...] = (
    # names that break every worker, bypass Workload Identity, or that KubeRay sets: refused, saying why
    *(dataclasses.replace(_team(f"env-name-{name.lower()}", f"workloads[3].env.{name}", {"env": {name: "x"}},
                                item=I68_2), shows=why)
      for name, why in (("PYTHONHOME", "standard library"), ("LD_PRELOAD", "every process of the pods"),
                        ("LD_AUDIT", "every process of the pods"), ("LD_LIBRARY_PATH", "library search"),
                        ("GOOGLE_APPLICATION_CREDENTIALS", "Workload Identity"),
                        ("GCE_METADATA_HOST", "Workload Identity"), ("GCE_METADATA_ROOT", "Workload Identity"),
                        ("GCE_METADATA_IP", "Workload Identity"), ("FQ_RAY_IP", "KubeRay"),
                        ("KUBERAY_GEN_RAY_START_CMD", "KubeRay"), ("RAY_IP", "set by the kit"),
                        ("RAY_PORT", "set by the kit"), ("RAY_CLUSTER_NAME", "set by the kit"),
                        ("RAY_CLOUD_INSTANCE_ID", "set by the kit"), ("RAY_NODE_TYPE_NAME", "set by the kit"),
                        ("xla_flags", "case-sensitive"), ("XLA_PYTHON_CLIENT_PREALLOCATE", "set by the kit"),
                        ("LIBTPU_INIT_ARG", "set by the kit"), ("HOME", "set by the kit"))),
    dataclasses.replace(_team("secret-name-ld-preload", "workloads[3].secrets.LD_PRELOAD",
                              {"secrets": {"LD_PRELOAD": "lib"}}, item=I68_2), shows="every process of the pods"),
    # a value that is not a string: how to quote it, in YAML and on a command line
    *(dataclasses.replace(_team(f"env-value-{label}", "workloads[3].env.N", {"env": {"N": value}}, item=I68_2),
                          shows=shows)
      for label, value, shows in (("int", 8, "N: \"8\""), ("bool", True, "--set env.N='\"true\"'"),
                                  ("float", 2.5, "N: \"2.5\""), ("null", None, "N: \"\""),
                                  ("list", [1], "a list or mapping"), ("mapping", {"a": 1}, "a list or mapping"))),
    # secrets: a Secret's name or {name, key}; anything else says both forms
    *(dataclasses.replace(_team(f"secret-{label}", field_name, {"secrets": {"TOKEN": value}}, item=I68_2),
                          shows=shows)
      for label, value, field_name, shows in (
          ("number", 5, "workloads[3].secrets.TOKEN", "{name: SECRET, key: KEY}"),
          ("null", None, "workloads[3].secrets.TOKEN", "--from-literal=value="),
          ("list", ["a"], "workloads[3].secrets.TOKEN", "{name: SECRET, key: KEY}"),
          ("ref-no-key", {"name": "tok"}, "workloads[3].secrets.TOKEN.key", "is required"),
          ("ref-extra", {"name": "tok", "key": "v", "ns": "x"}, "workloads[3].secrets.TOKEN.ns",
           "is not a known key"),
          ("ref-bad-name", {"name": "Tok_1", "key": "v"}, "workloads[3].secrets.TOKEN.name", "Secret name"),
          ("ref-bad-key", {"name": "tok", "key": ".."}, "workloads[3].secrets.TOKEN.key", "Secret key"),
          ("ref-key-number", {"name": "tok", "key": 1}, "workloads[3].secrets.TOKEN.key", "is not a string"))),
    # --set: env values quoted as in the file, secrets never per run
    _team_set("set-env-number", "--set env.BATCH", "env.BATCH=32", shows="--set env.BATCH='\"32\"'"),
    _team_set("set-env-true", "--set env.DEBUG", "env.DEBUG=true", shows="DEBUG: \"true\""),
    _team_set("set-env-preload", "--set env.LD_PRELOAD", "env.LD_PRELOAD=/x.so", shows="every process"),
    _team_set("set-env-credentials", "--set env.GOOGLE_APPLICATION_CREDENTIALS",
              "env.GOOGLE_APPLICATION_CREDENTIALS=/k.json", shows="Workload Identity"),
    _team_set("set-secret", "--set 'secrets.WANDB_API_KEY'", "secrets.WANDB_API_KEY=abc",
              shows="cannot be set for one run"),
    _team_set("set-secrets-whole", "--set 'secrets'", "secrets=abc", shows="cannot be set for one run"),
    dataclasses.replace(_team_set("set-python-tag", "--set train_config.lr", "train_config.lr=!!python/name:os.system",
                                  shows="YAML tag"), item=I71_8),
    dataclasses.replace(_team_set("set-compile-cache-bool", "--set compile_cache", "compile_cache=false"),
                        item=I71_8),
)

I47_2 = "47.2 serve_app: a team's own Ray Serve app, checked before it runs"
SERVE_SRC: dict[str, Content] = {"src": DIR, "src/lm/__init__.py": "",
                                 "src/lm/serve.py": "from ray import serve\n\n\n@serve.deployment\nclass Scorer:\n"
                                                    "    def __call__(self, request):\n        return 'x'\n\n\n"
                                                    "app = Scorer.bind()\n"}


def _serve_app(case_id: str, field_name: str, fields: Mapping[str, object],
               files: Mapping[str, Content] | None = None) -> Case:
    """The example's serve workload (workloads[2]) made a team's own app, fields replaced (None drops one)."""
    def edit(d: dict[str, Any]) -> None:
        work = {**d["workloads"][2], "code": "./src", "serve_app": "lm.serve:app", **fields}
        d["workloads"][2] = {k: v for k, v in work.items() if v is not None}
    return Case(case_id, ("validate", "raytpu.yaml"), field_name,
                {**SERVE_SRC, **(files or {}), "raytpu.yaml": config(edit)}, item=I47_2)


SERVE_APP_CASES: tuple[Case, ...] = (
    _serve_app("serve-app-no-module", "workloads[2].serve_app", {"serve_app": "lm.nope:app"}),
    _serve_app("serve-app-no-name", "workloads[2].serve_app", {"serve_app": "lm.serve:nope"}),
    _serve_app("serve-app-not-module-app", "workloads[2].serve_app", {"serve_app": "lm.serve"}),
    _serve_app("serve-app-keyword", "workloads[2].serve_app", {"serve_app": "lm.class:app"}),
    _serve_app("serve-app-syntax-error", "workloads[2].serve_app", {}, files={"src/lm/serve.py": "app = (\n"}),
    _serve_app("serve-app-name-only-nested", "workloads[2].serve_app", {},
               files={"src/lm/serve.py": "def build():\n    app = 1\n    return app\n"}),
    _serve_app("serve-app-with-model", "workloads[2].serve_app", {"model": "Qwen/Qwen2.5-0.5B-Instruct"}),
    _serve_app("serve-app-with-engine-kwargs", "workloads[2].serve_app", {"engine_kwargs": {"enforce_eager": True}}),
    _serve_app("serve-app-no-code", "workloads[2].code", {"code": None}),
    _serve_app("serve-code-no-app", "workloads[2].code", {"serve_app": None}),
    Case("serve-app-on-train", ("validate", "raytpu.yaml"), "workloads[1].serve_app",
         {**SERVE_SRC, "raytpu.yaml": config(lambda d: d["workloads"][1].update(serve_app="lm.serve:app"))},
         item=I47_2),
)

I48_1 = "48.1 a secret in the code folder"
I48_2 = "48.2 tracebacks"
I48_3 = "48.3 values that lose data or GCS refuses"
PEM_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\n-----END OPENSSH PRIVATE KEY-----\n"


def _secret(case_id: str, files: Mapping[str, Content]) -> Case:
    """A code folder holding a file that looks secret by content: refused naming ``workloads[3].code``."""
    return dataclasses.replace(_team(case_id, "workloads[3].code", files=files), item=I48_1)


def _link(case_id: str, files: Mapping[str, Content]) -> Case:
    return dataclasses.replace(_team(case_id, "workloads[3].code", files=files), item=I48_2)


def _cache(case_id: str, folder: str) -> Case:
    return _edit(case_id, "workloads.1.compile_cache", folder, "workloads[1].compile_cache", I48_3)


def _data_bucket(case_id: str, name: str) -> Case:
    return _edit(case_id, "storage", {"data_buckets": [{"name": name}]}, "storage.data_buckets[0].name", I48_3)


I48_4 = "48.4 messages in YAML's terms"


def _yaml_shown(case_id: str, path: str, value: object, shows: str, hides: tuple[str, ...]) -> Case:
    """A wrong-typed value, named as the user wrote it in YAML (never its Python repr, never a model class)."""
    return dataclasses.replace(_edit(case_id, path, value, shows.split(": ", 1)[0], I48_4), shows=shows,
                               hides=hides)

ISSUE48_CASES: tuple[Case, ...] = (
    _secret("code-pem-in-a-py-file", {"src/lm/settings.py": f"KEY = {PEM_KEY!r}\n"}),
    _secret("code-service-account-json", {"src/conf/app.json": '{"type": "service_account", "private_key": "x"}'}),
    _secret("code-aws-key-id", {"src/lm/cfg.py": "AWS = 'AKIAIOSFODNN7EXAMPLE'\n"}),
    _secret("code-github-token", {"src/notes.txt": "token ghp_" + "x" * 36 + "\n"}),
    _secret("code-hf-token", {"src/run.sh": "export HF_TOKEN=hf_" + "Ab1" * 12 + "\n"}),
    _secret("code-link-to-a-key", {"src/key.txt": PEM_KEY, "src/lm/key_link.py": Link("../key.txt")}),
    _secret("code-gitignore-negation-no-opt-in", {"src/lm/k.py": PEM_KEY, "src/.gitignore": "!lm/k.py\n"}),
    _link("code-dangling-link", {"src/old.py": Link("gone.py")}),
    _link("code-link-loop", {"src/loop": Link("loop")}),
    _link("code-link-out", {"src/etc": Link("/etc")}),
    _validate("yaml-env-tag", "project: !env GCP_PROJECT\n", "project", I48_2),
    _validate("yaml-python-tag", "project: !!python/name:os.system\n", "project", I48_2),
    _validate("yaml-5000-digit-int", EXAMPLE_TEXT.replace("count: 1", "count: " + "9" * 5000, 1), "slices[0].count",
              I48_2),
    _validate("yaml-list-key", "? [a, b]\n: 1\n", "config", I48_2),
    _validate("yaml-mapping-key", "slices:\n  - {name: x}\n  - ? {a: 1}\n    : 2\n", "slices[1]", I48_2),
    _validate("yaml-bad-date", "project: 2024-13-45\n", "config", I48_2),
    _cache("compile-cache-checkpoints", "checkpoints"),
    _cache("compile-cache-raytpu", "raytpu"),
    _cache("compile-cache-in-checkpoints", "checkpoints/jax"),
    _cache("compile-cache-code", "code"),
    _cache("compile-cache-holds-xla", "xla-cache"),
    _validate("compile-cache-holds-a-dataset", config(_all(
        _set("workloads.1.dataset", "gs://my-ml-project-ray-tpu-ray/teams/data"),
        _set("workloads.1.compile_cache", "teams"))), "workloads[1].compile_cache", I48_3),
    _validate("batch-output-in-the-default-cache", batch_config(
        output="gs://my-ml-project-ray-tpu-ray/compile-cache/answers"), "workloads[3].output", I48_3),
    # issue 49 item 5: the pods only read the kit bucket's raytpu/ and code/ (IAM Conditions scope their writes)
    _validate("batch-output-in-the-code-zips", batch_config(output="gs://my-ml-project-ray-tpu-ray/code/answers"),
              "workloads[3].output", I48_3),
    _validate("batch-output-at-the-kit-bucket-root", batch_config(output="gs://my-ml-project-ray-tpu-ray/"),
              "workloads[3].output", I48_3),
    _data_bucket("data-bucket-goog-prefix", "goog-data"),
    _data_bucket("data-bucket-google", "my-google-data"),
    _data_bucket("data-bucket-g00gle", "team-g00gle"),
    _data_bucket("data-bucket-ip", "192.168.5.4"),
    _data_bucket("data-bucket-the-kits-default", "my-ml-project-ray-tpu-ray"),
    _yaml_shown("yaml-shown-true", "cluster.name", True, "cluster.name: true: is not a string", ("True",)),
    _yaml_shown("yaml-shown-null", "project", None, "project: null: is not a string", ("None",)),
    _yaml_shown("yaml-shown-mapping", "slices.0.zone", {"a": 1}, "slices[0].zone: {a: 1}: is not a string",
                ("{'a'",)),
    _yaml_shown("yaml-shown-list", "region", ["x"], "region: [x]: is not a string", ("['x']",)),
    _yaml_shown("yaml-shown-cluster-list", "cluster", ["ray-tpu"], "cluster: [ray-tpu]: is not a mapping",
                ("clustermodel", "instance of")),
    _yaml_shown("yaml-shown-workloads-mapping", "workloads", {"a": 1}, "workloads: {a: 1}: is not a list",
                ("tuple",)),
    _yaml_shown("yaml-shown-hf-token-secret", "workloads.2.hf_token_secret", True,
                "workloads[2].hf_token_secret: true: is not a mapping", ("secretkeyrefmodel", "instance of")),
    _yaml_shown("yaml-shown-count-bool", "slices.0.count", True, "slices[0].count: true", ("True",)),
    _yaml_shown("hf-token-secret-keys-named", "workloads.2.hf_token_secret", "hf-secret",
                "workloads[2].hf_token_secret: 'hf-secret': is not a mapping; valid: a mapping with the keys name, key",
                ("secretkeyrefmodel",)),
    _yaml_shown("hf-token-secret-on-smoke-as-yaml", "workloads.0.hf_token_secret", {"name": "hf", "key": "k"},
                "workloads[0].hf_token_secret: {name: hf, key: k} is not allowed for kind smoke", ("SecretKeyRef",)),
)


# ---------------------------------------------------------------------------------------------- the corpus

I1 = "28.1 synth --out"
I2 = "28.2 stack outputs values"
I3 = "28.3 non-UTF-8 config"
I4 = "28.4 plan --plot"
I5 = "28.5 1 MB project id"
I6 = "28.6 YAML alias bomb"
I7 = "28.7 10 MB config"
I8 = "28.8 serving TP"
I9 = "28.9 duplicate YAML keys"
I10 = "28.10 lax YAML types, :latest"
I11 = "28.11 numeric flags"
I12 = "28.12 DCN smoke job name"
I13 = "28.13 smoke --local, local status --dir"
I14 = "28.14 no slice fits"
I31 = "31.1 batch and dataset"
I39_1 = "39.1 one owner per run folder, no hang"
I39_6 = "39.6 flags that cannot go together"
I38_8 = "38.8 batch sampling fields"
I39_2 = "39.2 faults of the machine"
I39_3 = "39.3 batch and dataset paths"
I39_4 = "39.4 model configs"
I39_5 = "39.5 what validate misses"
I40_1 = "40.1 a large model fits its hosts' disks"
I41 = "41 compile cache and compile budget"
I49 = "49 Autopilot disk, outputs of another kit version, chat template"

I69 = "69 teams share the slices"
TEAMS = [{"name": "research", "quota": {"train": 16}}, {"name": "product", "quota": {"train": 16, "serve": 8}}]


def _teams(case_id: str, field_name: str, *edits: Callable[[dict[str, Any]], object], shows: str = "") -> Case:
    """The example with two teams (``train`` a run of research's): one edit makes it wrong (issue 69)."""
    text = config(_all(_set("teams", copy.deepcopy(TEAMS)), _set("workloads.1.team", "research"), *edits))
    return Case(case_id, ("validate", "raytpu.yaml"), field_name, {"raytpu.yaml": text}, item=I69, shows=shows)


TEAMS_CASES: tuple[Case, ...] = (
    _teams("teams-workload-without-team", "workloads[1].team", _set("workloads.1.team", None)),
    _teams("teams-unknown-team", "workloads[1].team", _set("workloads.1.team", "reserch"), shows="research"),
    _teams("teams-quota-unknown-slice", "teams[0].quota", _set("teams.0.quota", {"trian": 16}), shows="train"),
    _teams("teams-quota-part-of-a-host", "teams[0].quota.train", _set("teams.0.quota.train", 6)),
    _teams("teams-quota-negative", "teams[0].quota.train", _set("teams.0.quota.train", -4)),
    _teams("teams-quota-string", "teams[0].quota.train", _set("teams.0.quota.train", "16")),
    _teams("teams-quota-never-admits", "workloads[1].team", _set("teams.0.quota.train", 8),
           shows="teams[0].quota.train"),
    _teams("teams-same-name", "teams[1].name", _set("teams.1.name", "research")),
    _teams("teams-name-too-long", "teams[0].name", _set("teams.0.name", "r" * 60), _set("workloads.1.team", None)),
    _teams("teams-name-not-dns", "teams[0].name", _set("teams.0.name", "Research")),
    _teams("teams-priority-unknown", "workloads[1].priority", _set("workloads.1.priority", "urgent"),
           shows="high"),
    _teams("teams-priority-number", "workloads[1].priority", _set("workloads.1.priority", 1)),
    _teams("teams-team-on-serve", "workloads[2].team", _set("workloads.2.team", "product")),
    _teams("teams-team-on-smoke", "workloads[0].priority", _set("workloads.0.priority", "high")),
    _teams("teams-own-compile-cache", "workloads[1].compile_cache", _set("workloads.1.compile_cache", "jax")),
    _teams("teams-can-borrow-string", "teams[0].can_borrow", _set("teams.0.can_borrow", "yes")),
    _teams("teams-not-a-list", "teams", _set("teams", {"research": {}})),
    _teams("teams-unknown-key", "teams[0].quotas", _set("teams.0.quotas", {"train": 16})),
    _edit("team-without-teams", "workloads.1.team", "research", "workloads[1].team", I69),
)


CASES: tuple[Case, ...] = (
    # catalog, describe
    Case("catalog-positional", ("catalog", "v6e"), "v6e"),
    Case("catalog-json-value", ("catalog", "--json=yes"), "--json"),
    Case("describe-zero-dim", ("describe", "v6e", "0x4"), "topology"),
    Case("describe-huge-dim", ("describe", "v6e", "9" * 40 + "x4"), "topology"),
    Case("describe-trailing-x", ("describe", "v6e", "4x4x"), "topology"),
    Case("describe-fullwidth-digits", ("describe", "v6e", "\uff14x\uff14"), "topology"),
    Case("describe-empty-generation", ("describe", "", "4x4"), "generation"),
    Case("describe-upper-generation", ("describe", "V6E", "4x4"), "generation"),
    Case("describe-empty-machine-type", ("describe", "v6e", "4x4", "--machine-type", ""), "machine_type"),
    # the config file itself
    _validate("config-non-utf8", EXAMPLE_TEXT.encode() + b"# caf\xe9\n", "config", I3),
    _validate("config-utf16", _utf16(EXAMPLE_TEXT), "config", I3),
    Case("config-is-a-folder", ("validate", "conf"), "config", {"conf": DIR}),
    Case("config-env-is-a-folder", ("validate",), "config", {"conf": DIR}, env={"RAYTPU_CONFIG": "conf"}),
    Case("config-default-missing", ("validate",), "config"),
    Case("config-fifo", ("validate", "conf.yaml"), "config", {"conf.yaml": FIFO}, item=I39_4, process=True),
    Case("config-dev-zero", ("validate", "/dev/zero"), "config", item=I39_4, process=True),
    _validate("config-nul-byte", EXAMPLE_TEXT + "\x00\n", "config"),
    _validate("config-tab-indent", EXAMPLE_TEXT.replace("  name: ray-tpu", "\tname: ray-tpu"), "config"),
    _validate("config-only-comment", "# nothing here\n", "config"),
    _validate("config-a-string", "raytpu\n", "config"),
    _process(_validate("config-alias-bomb", alias_bomb_text(), "workloads[2].model", I6)),
    # A 10 MB config is over the byte limit before any slice is read (raytpu.config.reading.MAX_BYTES); the count limit
    # (raytpu.config.LIMITS) has its own cases.
    _process(_validate("config-134k-slices", many_slices(), "config", I7)),
    _validate("config-101-slices", many_slices(101), "slices", I7),
    _validate("config-101-workloads", config(lambda d: d.update(workloads=[d["workloads"][0]] * 101)), "workloads",
              I7),
    _edit("project-1mb", "project", "p" * 1_000_000, "project", I5),
    _validate("duplicate-key", EXAMPLE_TEXT.replace("region: us-east5", "region: us-east5\nregion: europe-west4"),
              "region", I9),
    _edit("slices-true", "slices", True, "slices", I10),
    _edit("count-string", "slices.0.count", "2", "slices[0].count", I10),
    _edit("count-float", "slices.0.count", 2.0, "slices[0].count", I10),
    _edit("image-latest", "workloads.1.image", "us-docker.pkg.dev/p/r/train:latest", "workloads[1].image", I10),
    _edit("count-bool", "slices.0.count", True, "slices[0].count", I10),
    _edit("count-huge", "slices.0.count", 10**30, "slices[0].count"),
    _edit("count-negative", "slices.0.count", -1, "slices[0].count"),
    # top level and cluster
    _edit("region-empty", "region", "", "region"),
    _edit("project-non-ascii", "project", "pr\u00f8ject-one", "project"),
    _edit("cluster-null", "cluster", None, "cluster"),
    _edit("cluster-a-list", "cluster", ["ray-tpu"], "cluster"),
    _edit("cluster-name-int", "cluster.name", 123, "cluster.name"),
    _edit("cluster-mode-case", "cluster.mode", "Standard", "cluster.mode"),
    _edit("cluster-legacy-ksa-bool", "cluster.legacy_ksa", True, "cluster.legacy_ksa", I49),
    _edit("cluster-legacy-ksa-unknown", "cluster.legacy_ksa", "remove", "cluster.legacy_ksa", I49),
    _edit("control-plane-unknown", "cluster.control_plane", "public", "cluster.control_plane"),
    _edit("maintenance-day", "cluster.maintenance_window.days", ["XX"], "cluster.maintenance_window.days[0]"),
    _edit("maintenance-start", "cluster.maintenance_window.start_utc", "25:00",
          "cluster.maintenance_window.start_utc"),
    _edit("maintenance-hours-zero", "cluster.maintenance_window.hours", 0, "cluster.maintenance_window.hours"),
    # Source: https://cloud.google.com/compute/docs/machine-resource (SERIES-TYPE-VCPUS, lowercase)
    _edit("head-pool-machine", "cluster.head_pool", {"machine_type": "not a machine"},
          "cluster.head_pool.machine_type"),
    _edit("label-value-long", "cluster.labels", {"team": "x" * 64}, "cluster.labels['team']"),
    _edit("deletion-protection-str", "cluster.deletion_protection", "no", "cluster.deletion_protection", I10),
    # network, storage, alerting, security
    _edit("subnet-ipv6", "network", {"subnet_cidr": "fd00::/64"}, "network.subnet_cidr"),
    _edit("services-cidr-prefix", "network", {"services_cidr": "192.168.0.0/33"}, "network.services_cidr"),
    _edit("network-a-string", "network", "default", "network"),
    _edit("bucket-one-char", "storage", {"bucket": "b"}, "storage.bucket"),
    _edit("state-bucket-upper", "storage", {"state_bucket": "State-Bucket"}, "storage.state_bucket"),
    # storage.data_buckets (issue 40 item 2): a bucket name, access read | read-write, each once, never the state
    _edit("data-bucket-access-write", "storage", {"data_buckets": [{"name": "team-data", "access": "write"}]},
          "storage.data_buckets[0].access"),
    _edit("data-bucket-bad-name", "storage", {"data_buckets": [{"name": "Team Data!"}]},
          "storage.data_buckets[0].name"),
    _edit("data-bucket-twice", "storage", {"data_buckets": [{"name": "team-data"},
                                                            {"name": "team-data", "access": "read-write"}]},
          "storage.data_buckets[1].name"),
    _edit("data-bucket-dot-dash-twice", "storage", {"data_buckets": [{"name": "team.data"}, {"name": "team-data"}]},
          "storage.data_buckets[1].name"),
    _edit("data-bucket-is-state", "storage", {"state_bucket": "tf-state", "data_buckets": [{"name": "tf-state"}]},
          "storage.data_buckets[0].name"),
    _edit("data-bucket-is-the-kits", "storage", {"bucket": "ckpt", "data_buckets": [{"name": "ckpt"}]},
          "storage.data_buckets[0].name"),
    _edit("data-bucket-a-string", "storage", {"data_buckets": "team-data"}, "storage.data_buckets"),
    _edit("data-bucket-misspelt-key", "storage", {"data_buckets": [{"name": "team-data", "acess": "read"}]},
          "storage.data_buckets[0].acess"),
    _edit("data-bucket-no-name", "storage", {"data_buckets": [{"access": "read"}]}, "storage.data_buckets[0].name"),
    # a boot disk too small for what an engine writes per host (issue 40 item 1: GKE leaves 43.8 GiB of 100 GiB
    # allocatable; Llama 3.3 70B is 131.4 GiB of bf16 weights on every host, Qwen3-8B 15.3 GiB)
    _validate("disk-small-for-70b-serve", config(_all(
        _set("slices.1.disk_size_gib", 100), _set("workloads.2.model", "meta-llama/Llama-3.3-70B-Instruct"),
        _set("workloads.2.hf_token_secret", {"name": "hf", "key": "token"}))), "slices[1].disk_size_gib", I40_1),
    _validate("disk-small-for-70b-from-another-bucket", config(_all(
        _set("slices.1.disk_size_gib", 270), _set("workloads.2.model", "meta-llama/Llama-3.3-70B-Instruct"),
        _set("workloads.2.model_source", "gs://team-weights/llama-3.3-70b"))), "slices[1].disk_size_gib", I40_1),
    _validate("disk-small-for-8b-batch", batch_config(model="Qwen/Qwen3-8B").replace(
        "provisioning: spot", "provisioning: spot\n  disk_size_gib: 40"), "slices[1].disk_size_gib", I40_1),
    _validate("disk-tiny-for-default-model", config(_set("slices.1.disk_size_gib", 10)), "slices[1].disk_size_gib",
              I40_1),
    # a TPU worker's Pod over Autopilot's accelerator maximum (issue 49 item 3): 57,340 + the GCS FUSE sidecar's 5 GiB
    # Source: GKE autopilot-resource-requests#min-max-requests, 56 TiB per accelerator Pod
    # (docs/FACTS.md#autopilot-tpu-pod-ceiling)
    _validate("ray-disk-over-autopilot-accelerator-pod", config(_all(
        _set("cluster.mode", "autopilot"), _set("workloads.1.ray_disk_gib", 57340))), "workloads[1].ray_disk_gib",
              I49),
    _edit("alerting-channel-form", "alerting", {"notification_channels": ["email:me@example.com"]},
          "alerting.notification_channels[0]"),
    _edit("alerting-channels-string", "alerting", {"notification_channels": "projects/p/notificationChannels/1"},
          "alerting.notification_channels"),
    _edit("serve-endpoint-unknown", "security", {"serve_endpoint": "public"}, "security.serve_endpoint"),
    _edit("serve-from-not-cidr", "security", {"serve_from": ["office"]}, "security.serve_from[0]"),
    _edit("dashboard-from-prefix", "security", {"dashboard_from": ["10.0.0.0/40"]}, "security.dashboard_from[0]"),
    _edit("run-as-root", "security", {"run_as_user": 0}, "security.run_as_user"),
    _edit("api-key-secret-name", "security", {"serve_api_key_secret": "Bad_Secret"},
          "security.serve_api_key_secret"),
    # slices
    _edit("provisioning-underscore", "slices.0.provisioning", "flex_start", "slices[0].provisioning"),
    # Source: https://cloud.google.com/compute/docs/reference/rest/v1/reservations (name: RFC 1035, 1-63)
    _validate("reservation-bad-name", config(_all(_set("slices.0.provisioning", "reservation"),
                                                  _set("slices.0.reservation", "my reservation!"))),
              "slices[0].reservation"),
    _validate("fallback-a-string", config(_all(_set("cluster.mode", "autopilot"),
                                               _set("slices.1.fallback", "on-demand"))), "slices[1].fallback"),
    _validate("max-run-huge", config(_all(_set("slices.0.provisioning", "flex-start"),
                                          _set("slices.0.max_run_duration_s", 10**9))),
              "slices[0].max_run_duration_s"),
    _validate("max-run-negative", config(_all(_set("slices.0.provisioning", "flex-start"),
                                              _set("slices.0.max_run_duration_s", -5))),
              "slices[0].max_run_duration_s"),
    # a node's shutdown window: 30 or 120 s, Spot VMs only (compute-class-api KubeletConfig, Priority XValidation)
    _validate("notice-60", config(_set("slices.1.preemption_notice_s", 60)), "slices[1].preemption_notice_s"),
    _validate("notice-zero", config(_set("slices.1.preemption_notice_s", 0)), "slices[1].preemption_notice_s"),
    _validate("notice-a-string", config(_set("slices.1.preemption_notice_s", "120s")),
              "slices[1].preemption_notice_s"),
    _validate("notice-on-demand", config(_set("slices.0.preemption_notice_s", 120)), "slices[0].preemption_notice_s"),
    _validate("notice-with-a-fallback", config(_all(
        _set("cluster.mode", "autopilot"), _set("slices.1.preemption_notice_s", 120),
        _set("slices.1.fallback", ["on-demand"]))), "slices[1].preemption_notice_s"),
    _validate("hugepages-a-string", config(_set("slices.0.transparent_hugepages", "always")),
              "slices[0].transparent_hugepages"),
    # any mode takes a run duration, within a VM's 120 days (Compute Engine limit-vm-runtime) and the kit's 600 s
    _validate("max-run-on-demand-past-120-days", config(_set("slices.0.max_run_duration_s", 121 * 86400)),
              "slices[0].max_run_duration_s"),
    _validate("max-run-spot-too-short", config(_all(_set("slices.0.provisioning", "spot"),
                                                    _set("slices.0.max_run_duration_s", 30))),
              "slices[0].max_run_duration_s"),
    _validate("max-run-past-a-flex-start-fallback", config(_all(
        _set("cluster.mode", "autopilot"), _set("slices.1.fallback", ["flex-start"]),
        _set("slices.1.max_run_duration_s", 8 * 86400))), "slices[1].max_run_duration_s"),
    # issue 40 item 12: a queued pool gets nodes only through a ProvisioningRequest, which the kit does not make
    # (GKE API NodePool.QueuedProvisioning.enabled): every workload on it is refused, the first naming its slice
    _edit("workload-on-a-queued-slice", "slices.0.provisioning", "queued", "workloads[0].slice"),
    # A zone of the region that Google's TPU page does not list (us-east5-z) is warned, not refused: the zone
    # table is dated and a refusal would block a zone added since (raytpu/core/tpu/catalog.py OFFERED;
    # tests/test_capacity.py).
    _edit("zone-other-region", "slices.0.zone", "europe-west4-a", "slices[0].zone"),
    _edit("zone-empty", "slices.0.zone", "", "slices[0].zone"),
    _edit("generation-int", "slices.0.generation", 6, "slices[0].generation"),
    _edit("topology-upper-x", "slices.0.topology", "4X4", "slices[0].topology"),
    _edit("machine-type-empty", "slices.0.machine_type", "", "slices[0].machine_type"),
    _edit("disk-float", "slices.0.disk_size_gib", 100.5, "slices[0].disk_size_gib"),
    _edit("slices-a-mapping", "slices", {"train": {"generation": "v6e"}}, "slices"),
    # workloads
    _edit("model-int", "workloads.2.model", 123, "workloads[2].model"),
    _edit("max-model-len-zero", "workloads.2.max_model_len", 0, "workloads[2].max_model_len"),
    _edit("max-model-len-huge", "workloads.2.max_model_len", 10**12, "workloads[2].max_model_len"),
    _edit("engine-kwargs-string", "workloads.2.engine_kwargs", "tensor_parallel_size=8",
          "workloads[2].engine_kwargs"),
    _edit("engine-kwargs-tp-3", "workloads.2.engine_kwargs", {"tensor_parallel_size": 3},
          "workloads[2].engine_kwargs.tensor_parallel_size"),
    # Source: vllm 0.29.0 vllm/config/scheduler.py SchedulerConfig.stream_interval Field(ge=1), max_num_seqs (ge=1);
    # vllm/config/cache.py CacheConfig.gpu_memory_utilization Field(gt=0, le=1)
    _edit("engine-kwargs-stream-interval-zero", "workloads.2.engine_kwargs", {"stream_interval": 0},
          "workloads[2].engine_kwargs.stream_interval"),
    _edit("engine-kwargs-memory-fraction-over-one", "workloads.2.engine_kwargs", {"gpu_memory_utilization": 1.5},
          "workloads[2].engine_kwargs.gpu_memory_utilization"),
    _edit("engine-kwargs-max-num-seqs-word", "workloads.2.engine_kwargs", {"max_num_seqs": "lots"},
          "workloads[2].engine_kwargs.max_num_seqs"),
    _edit("engine-kwargs-max-num-seqs-fraction", "workloads.2.engine_kwargs", {"max_num_seqs": 2.5},
          "workloads[2].engine_kwargs.max_num_seqs"),
    _edit("model-source-scheme", "workloads.2.model_source", "ftp://models/llama", "workloads[2].model_source"),
    # issue 49: Source: Ray 2.60 ray.train.v2.api.config.CheckpointConfig (num_to_keep >= 1, or None: all)
    _edit("keep-checkpoints-zero", "workloads.1.keep_checkpoints", 0, "workloads[1].keep_checkpoints"),
    _edit("keep-checkpoints-word", "workloads.1.keep_checkpoints", "newest", "workloads[1].keep_checkpoints"),
    _edit("keep-checkpoints-on-serve", "workloads.2.keep_checkpoints", 3, "workloads[2].keep_checkpoints"),
    _edit("workload-slices-zero", "workloads.1.slices", 0, "workloads[1].slices"),
    _edit("workload-slices-beyond-count", "workloads.1.slices", 4, "workloads[1].slices"),
    _edit("image-uppercase", "workloads.1.image", "US-Docker.pkg.dev/P/R/Train:v1", "workloads[1].image"),
    _edit("image-short-digest", "workloads.1.image", "us-docker.pkg.dev/p/r/train@sha256:abc",
          "workloads[1].image"),
    _edit("workloads-a-mapping", "workloads", {"train": {"kind": "train"}}, "workloads"),
    _validate("qwen3-8b-on-v6e-8x8", serving("8x8", "Qwen/Qwen3-8B"), "workloads[2].model", I8),
    _validate("llama-70b-on-v6e-16x16", serving("16x16", "meta-llama/Llama-3.1-70B-Instruct"), "workloads[2].model",
              I8),
    _validate("dcn-job-name-long", config(_all(_set("slices.0.name", "t" * 30), _set("slices.0.count", 2),
                                               _set("workloads.0.slice", "t" * 30),
                                               _set("workloads.1.slice", "t" * 30), _set("workloads.1.slices", 2))),
              "slices[0].name", I12),
    # Ray Data (issue 31): a batch workload and a train workload's dataset
    _validate("batch-no-input", batch_config(input=None), "workloads[3].input", I31),
    _validate("batch-no-output", batch_config(output=None), "workloads[3].output", I31),
    # an output in a bucket storage.data_buckets grants read only: the batch would run, then get 403 writing
    _validate("batch-output-read-only-bucket",
              batch_config() + "storage: {data_buckets: [{name: my-ml-project-data}]}\n", "workloads[3].output"),
    _validate("batch-output-read-only-second-entry", batch_config(output="gs://team-out/a/b.jsonl") +
              "storage: {data_buckets: [{name: x-data}, {name: team-out, access: read}]}\n", "workloads[3].output"),
    _validate("batch-input-http", batch_config(input="https://example.com/prompts.jsonl"), "workloads[3].input", I31),
    _validate("batch-output-is-input", batch_config(output="gs://my-ml-project-data/prompts.jsonl"),
              "workloads[3].output", I31),
    _validate("batch-multi-host-slice", batch_config(slice="train"), "workloads[3].slice", I31),
    Case("batch-output-exists", ("validate", "raytpu.yaml"), "workloads[3].output",
         {"raytpu.yaml": batch_config(output="results"), "results": DIR, "results/part-0.parquet": "mine"}, item=I31),
    _edit("dataset-int", "workloads.1.dataset", 42, "workloads[1].dataset", I31),
    _edit("dataset-s3", "workloads.1.dataset", "s3://bucket/train.parquet", "workloads[1].dataset", I31),
    _edit("dataset-blank", "workloads.1.dataset", " ", "workloads[1].dataset", I31),
    _edit("dataset-on-serve", "workloads.2.dataset", "gs://b/train.parquet", "workloads[2].dataset", I31),
    # JAX's compilation cache and compile budget (issue 41): a location the pods cannot write, a budget not > 0
    *(_edit(f"compile-{label}", f"workloads.{index}.{name}", value, f"workloads[{index}].{name}", I41)
      for label, index, name, value in (
          ("cache-other-bucket", 1, "compile_cache", "gs://someone-elses-bucket/jax"),
          ("cache-absolute", 1, "compile_cache", "/tmp/jax-cache"), ("cache-dotdot", 0, "compile_cache", "../x"),
          ("cache-blank", 1, "compile_cache", ""), ("cache-number", 1, "compile_cache", 7),
          ("cache-on-serve", 2, "compile_cache", "compile-cache"), ("budget-zero", 1, "compile_budget_s", 0),
          ("budget-negative", 0, "compile_budget_s", -30), ("budget-text", 1, "compile_budget_s", "2m"),
          ("budget-bool", 1, "compile_budget_s", True), ("budget-inf", 1, "compile_budget_s", float("inf")),
          ("budget-nan", 1, "compile_budget_s", float("nan")), ("budget-on-serve", 2, "compile_budget_s", 60))),
    # the batch kind's sampling (issue 38 item 8): ranges, YAML types, and only with kind batch
    *(_validate(f"batch-{name.replace('_', '-')}-{label}", batch_config(**{name: value}), f"workloads[3].{shown}",
                I38_8) for name, label, value, shown in (
        ("max_tokens", "zero", 0, "max_tokens"), ("max_tokens", "context", 4096, "max_tokens"),
        ("max_tokens", "text", "64", "max_tokens"), ("max_tokens", "float", 8.5, "max_tokens"),
        ("temperature", "negative", -0.5, "temperature"), ("temperature", "over-2", 2.5, "temperature"),
        ("temperature", "nan", float("nan"), "temperature"), ("temperature", "text", "hot", "temperature"),
        ("temperature", "bool", True, "temperature"), ("top_p", "zero", 0, "top_p"),
        ("top_p", "over-1", 1.5, "top_p"), ("top_p", "inf", float("inf"), "top_p"),
        ("stop", "string", "END", "stop"), ("stop", "empty-string", ["ok", ""], "stop[1]"),
        ("stop", "number", [3], "stop[0]"), ("stop", "too-many", [f"s{i}" for i in range(65)], "stop"),
        ("chat_template", "text", "yes", "chat_template"), ("chat_template", "one", 1, "chat_template"))),
    _edit("max-tokens-on-serve", "workloads.2.max_tokens", 64, "workloads[2].max_tokens", I38_8),
    _edit("temperature-on-train", "workloads.1.temperature", 0.5, "workloads[1].temperature", I38_8),
    _edit("stop-on-smoke", "workloads.0.stop", ["END"], "workloads[0].stop", I38_8),
    _edit("chat-template-on-serve", "workloads.2.chat_template", False, "workloads[2].chat_template", I38_8),
    # issue 49 item 10: chat_template_kwargs for the engine kinds, a mapping of template variable names
    _edit("chat-template-kwargs-on-train", "workloads.1.chat_template_kwargs", {"enable_thinking": False},
          "workloads[1].chat_template_kwargs", I49),
    _edit("chat-template-kwargs-list", "workloads.2.chat_template_kwargs", ["enable_thinking"],
          "workloads[2].chat_template_kwargs", I49),
    _edit("chat-template-kwargs-reserved", "workloads.2.chat_template_kwargs", {"tokenize": True},
          "workloads[2].chat_template_kwargs.tokenize", I49),
    _validate("batch-chat-template-kwargs-without-template",
              batch_config(chat_template=False, chat_template_kwargs={"enable_thinking": False}),
              "workloads[3].chat_template_kwargs", I49),
    # issue 39.3: formats by suffix, gs:// as Cloud Storage names it, an output apart from its input
    Case("batch-output-holds-input", ("validate", "raytpu.yaml", "--overwrite"), "workloads[3].output",
         {"raytpu.yaml": batch_config(input="data/prompts.jsonl", output="data"), "data": DIR,
          "data/prompts.jsonl": '{"prompt": "mine"}\n'}, item=I39_3),
    _validate("batch-output-inside-input", batch_config(input="prompts", output="prompts/answers"),
              "workloads[3].output", I39_3),
    _validate("batch-output-dot-slash", batch_config(input="./answers/", output="answers"), "workloads[3].output",
              I39_3),
    _validate("batch-output-dotdot", batch_config(input="data/prompts.jsonl", output="x/../data/"),
              "workloads[3].output", I39_3),
    _validate("batch-output-cwd", batch_config(input="prompts.jsonl", output="."), "workloads[3].output", I39_3),
    _validate("batch-gs-output-holds-input", batch_config(input="gs://my-data/run/prompts.jsonl",
                                                          output="gs://my-data/./run/"), "workloads[3].output", I39_3),
    _validate("batch-input-gs-one-slash", batch_config(input="gs:/my-data/prompts.jsonl"), "workloads[3].input",
              I39_3),
    _validate("batch-input-gs-upper-scheme", batch_config(input="GS://my-data/prompts.jsonl"), "workloads[3].input",
              I39_3),
    _validate("batch-input-bucket-upper", batch_config(input="gs://My-Data/prompts.jsonl"), "workloads[3].input",
              I39_3),
    _validate("batch-input-bucket-google", batch_config(input="gs://google-data/prompts.jsonl"),
              "workloads[3].input", I39_3),
    _validate("batch-input-bucket-two-chars", batch_config(input="gs://ab/prompts.jsonl"), "workloads[3].input",
              I39_3),
    _validate("batch-output-object-dotdot", batch_config(output="gs://my-data/.."), "workloads[3].output", I39_3),
    _validate("batch-input-csv", batch_config(input="prompts.csv"), "workloads[3].input", I39_3),
    _validate("batch-output-txt", batch_config(output="gs://my-data/answers.txt"), "workloads[3].output", I39_3),
    _edit("dataset-bucket-ip", "workloads.1.dataset", "gs://10.0.0.1/train.parquet", "workloads[1].dataset", I39_3),
    _edit("dataset-csv", "workloads.1.dataset", "train.csv", "workloads[1].dataset", I39_3),
    Case("submit-local-batch-input-missing", ("submit", "batch", "--local", "--cpu-model", "model", "--dir", "run"),
         "workloads[3].input", {**CFG, "raytpu.yaml": batch_config(input="nope.jsonl", output="answers"),
                                "model": DIR}, item=I39_3),
    Case("submit-local-batch-cpu-model-empty", ("submit", "batch", "--local", "--cpu-model", "model", "--dir", "run"),
         "--cpu-model", {**CFG, "raytpu.yaml": batch_config(input="in.jsonl", output="answers"),
                         "in.jsonl": '{"prompt": "hi"}\n', "model/.keep": ""}, item=I68_4),
    Case("submit-local-train-dataset-missing", ("submit", "train", "--local", "--dir", "run"), "workloads[1].dataset",
         {**CFG, "raytpu.yaml": config(_set("workloads.1.dataset", "nope.parquet"))}, item=I39_3),
    # issue 39.5: what validate missed
    _validate("flex-start-on-v4", config(lambda d: d.update(
        region="us-central2", workloads=[], slices=[{"name": "old", "generation": "v4", "topology": "2x2x2",
                                                     "zone": "us-central2-b", "provisioning": "flex-start"}])),
              "slices[0].provisioning", I39_5),
    _validate("flex-start-fallback-on-v4", config(lambda d: d.update(
        region="us-central2", workloads=[], cluster={**d["cluster"], "mode": "autopilot"},
        slices=[{"name": "old", "generation": "v4", "topology": "2x2x2", "zone": "us-central2-b",
                 "provisioning": "spot", "fallback": ["on-demand", "flex-start"]}])),
              "slices[0].fallback[1]", I39_5),
    _validate("serve-gs-source-known-heads", config(_all(_set("slices.1.topology", "4x8"),
                                                         _set("workloads.2.model", "Qwen/Qwen3-0.6B"),
                                                         _set("workloads.2.model_source", "gs://my-data/qwen"))),
              "workloads[2].model", I39_5),
    # issue 39.2: faults of the machine, before any work (as root a chmod stops no write: /proc, /dev/full, missing
    # folders and files where folders belong stand in for read-only and full ones)
    Case("synth-tmpdir-missing", ("synth", "raytpu.yaml", "--out", "out"), "TMPDIR", CFG,
         env={"TMPDIR": "{CWD}/no-tmp"}, item=I39_2, process=True),
    Case("synth-tmpdir-a-file", ("synth", "raytpu.yaml", "--out", "out"), "TMPDIR", {**CFG, "notes.txt": "mine\n"},
         env={"TMPDIR": "{CWD}/notes.txt"}, item=I39_2, process=True),
    Case("synth-home-unwritable", ("synth", "raytpu.yaml", "--out", "out"), "HOME", CFG,
         env={"HOME": "/proc/raytpu-home"}, item=I39_2, process=True),
    Case("synth-home-missing", ("synth", "raytpu.yaml", "--out", "out"), "HOME", CFG,
         env={"HOME": "{CWD}/no-home"}, item=I39_2, process=True),
    Case("plan-plot-home-unwritable", (*PLAN, "--plot", "plan.png"), "HOME", env={"HOME": "/proc/raytpu-home"},
         item=I39_2, process=True),
    Case("plan-plot-mplconfigdir-a-file", (*PLAN, "--plot", "plan.png"), "MPLCONFIGDIR", {"notes.txt": "mine\n"},
         env={"MPLCONFIGDIR": "{CWD}/notes.txt"}, item=I39_2, process=True),
    Case("plan-plot-tmpdir-missing", (*PLAN, "--plot", "plan.png"), "TMPDIR", env={"TMPDIR": "{CWD}/no-tmp"},
         item=I39_2, process=True),
    # checked before the run, not after it: a whole job, then a failure (issue 68 item 1); no cluster is needed
    Case("submit-local-report-unwritable", ("submit", "train", "--local", "--dir", "run", "--report",
                                            "/proc/raytpu/train.json"), "--report", CFG, item=I68_1),
    Case("submit-local-report-under-a-file", ("submit", "train", "--local", "--dir", "run", "--report",
                                              "notes.txt/train.json"), "--report", {**CFG, "notes.txt": "mine\n"},
         item=I68_1),
    Case("demo-report-unwritable", ("demo", "--config", "raytpu.yaml", "--no-synth", "--dir", "run", "--report",
                                    "/proc/raytpu/demo.json"), "--report", CFG, item=I39_2),
    Case("demo-report-dev-full", ("demo", "--config", "raytpu.yaml", "--no-synth", "--dir", "run", "--report",
                                  "/dev/full"), "--report", CFG, item=I39_2),
    Case("demo-report-under-a-file", ("demo", "--config", "raytpu.yaml", "--no-synth", "--dir", "run", "--report",
                                      "notes.txt/demo.json"), "--report", {**CFG, "notes.txt": "mine\n"}, item=I39_2),
    Case("demo-home-missing", ("demo", "--config", "raytpu.yaml", "--no-synth", "--dir", "run"), "HOME", CFG,
         env={"HOME": "{CWD}/no-home"}, item=I39_2),
    Case("demo-tmpdir-unwritable", ("demo", "--config", "raytpu.yaml", "--no-synth", "--dir", "run"), "TMPDIR", CFG,
         env={"TMPDIR": "/proc/raytpu-tmp"}, item=I39_2),
    Case("local-smoke-report-unwritable", ("local", "--dir", "run", "smoke", "--report", "/proc/raytpu-reports"),
         "--report", item=I39_2),
    Case("local-smoke-report-a-file", ("local", "--dir", "run", "smoke", "--report", "notes.txt"), "--report",
         {"notes.txt": "mine\n"}, item=I39_2),
    # issue 68 item 1: a cache the kit writes, or the run folder, that cannot be (a file where the folder belongs; as
    # root /proc stands in for a read-only HOME: tests/test_cache_homes.py and test_full_disk.py mount real ones)
    *(Case(f"{name}-cache-home-a-file", argv, "XDG_CACHE_HOME", {**REQS, "notes.txt": "mine\n"},
           env={"XDG_CACHE_HOME": "{CWD}/notes.txt", "MPLCONFIGDIR": ""}, item=I68_1, process=True)
      for name, argv in (("validate-resolve", ("validate", "raytpu.yaml", "--resolve")),
                         ("images-list", ("images", "list", "--config", "raytpu.yaml")),
                         ("plan-plot", (*PLAN, "--plot", "plan.png")))),
    Case("validate-resolve-home-unwritable", ("validate", "raytpu.yaml", "--resolve"), "HOME", REQS,
         env={"HOME": "/proc/raytpu-home", "XDG_CACHE_HOME": ""}, item=I68_1, process=True),
    Case("demo-serve-cache-home-a-file", ("demo", "--serve", "--config", "raytpu.yaml", "--dir", "run"),
         "XDG_CACHE_HOME", {**CFG, "notes.txt": "mine\n"}, env={"XDG_CACHE_HOME": "{CWD}/notes.txt"}, item=I68_1),
    Case("local-up-dir-under-a-file", ("local", "--dir", "notes.txt/run", "up", "--generation", "v6e", "--topology",
                                       "2x4"), "--dir", {"notes.txt": "mine\n"}, item=I68_1),
    # synth
    Case("synth-out-nonempty-folder", ("synth", "raytpu.yaml", "--out", "mine"), "--out",
         {**CFG, "mine": DIR, "mine/notes.txt": "mine\n"}, item=I1, process=True),
    Case("synth-out-a-file", ("synth", "raytpu.yaml", "--out", "notes.txt"), "--out",
         {**CFG, "notes.txt": "mine\n"}, item=I1, process=True),
    Case("synth-out-unwritable", ("synth", "raytpu.yaml", "--out", "/proc/raytpu-out"), "--out", CFG,
         item=I1, process=True),
    Case("synth-bad-config", ("synth", "raytpu.yaml", "--out", "out"), "region",
         {"raytpu.yaml": config(_set("region", "mars-1"))}),
    Case("synth-bad-images-record", ("synth", "raytpu.yaml", "--out", "out"), "raytpu.images.json: images.job.ref",
         {**CFG, "raytpu.images.json": record(ref="job:latest")}, process=True),
    # plan
    Case("plan-model-config-folder", ("plan", "--model-config", "models"), "--model-config", {"models": DIR}),
    Case("plan-model-config-non-utf8", ("plan", "--model-config", "config.json"), "--model-config",
         {"config.json": b'{"hidden_size": 4096, "name": "caf\xe9"}'}),
    Case("plan-model-config-null", ("plan", "--model-config", "config.json"), "--model-config",
         {"config.json": "null"}),
    Case("plan-layers-huge", ("plan", "--model-config", "config.json"), "--model-config.num_hidden_layers",
         {"config.json": model_config(num_hidden_layers=10**12)}),
    Case("plan-hidden-float", ("plan", "--model-config", "config.json"), "--model-config.hidden_size",
         {"config.json": model_config(hidden_size=4096.5)}),
    Case("plan-layers-bool", ("plan", "--model-config", "config.json"), "--model-config.num_hidden_layers",
         {"config.json": model_config(num_hidden_layers=True)}),
    Case("plan-vocab-nan", ("plan", "--model-config", "config.json"), "--model-config.vocab_size",
         {"config.json": model_config(vocab_size=float("nan"))}),
    # issue 39.4: regular files only, bounded size and depth, one value per key, encoders refused, paths in the file
    Case("plan-model-config-fifo", ("plan", "--model-config", "config.json"), "--model-config", {"config.json": FIFO},
         item=I39_4, process=True),
    Case("plan-model-config-dev-zero", ("plan", "--model-config", "/dev/zero"), "--model-config", item=I39_4,
         process=True),
    Case("plan-model-config-2mib", ("plan", "--model-config", "config.json"), "--model-config",
         {"config.json": model_config(notes="x" * (2 << 20))}, item=I39_4),
    Case("plan-model-config-nested-100k", ("plan", "--model-config", "config.json"), "--model-config",
         {"config.json": "[" * 100_000 + "]" * 100_000}, item=I39_4),
    Case("plan-model-config-nested-40", ("plan", "--model-config", "config.json"), "--model-config" + "[0]" * 33,
         {"config.json": "[" * 40 + "]" * 40}, item=I39_4),
    Case("plan-model-config-duplicate-key", ("plan", "--model-config", "config.json"),
         "--model-config.num_hidden_layers",
         {"config.json": model_config()[:-1] + ', "num_hidden_layers": 64}'}, item=I39_4),
    Case("plan-model-config-duplicate-text-key", ("plan", "--model-config", "config.json"),
         "--model-config.text_config.num_attention_heads",
         {"config.json": '{"model_type": "gemma3", "text_config": {"num_attention_heads": 8, '
                         '"num_attention_heads": 16}}'}, item=I39_4),
    Case("plan-model-config-bert", ("plan", "--model-config", "config.json"), "--model-config.model_type",
         {"config.json": model_config(model_type="bert", architectures=["BertForMaskedLM"])}, item=I39_4),
    Case("plan-model-config-encoder-head", ("plan", "--model-config", "config.json"), "--model-config.architectures",
         {"config.json": model_config(model_type="acme", architectures=["AcmeForSequenceClassification"])},
         item=I39_4),
    Case("plan-model-config-text-heads-string", ("plan", "--model-config", "config.json"),
         "--model-config.text_config.num_attention_heads",
         {"config.json": json.dumps({"model_type": "gemma3", "text_config": {"num_attention_heads": "8"}})},
         item=I39_4),
    Case("plan-model-config-text-missing-layers", ("plan", "--model-config", "config.json"),
         "--model-config.text_config.num_hidden_layers",
         {"config.json": json.dumps({"model_type": "acme_vl", "text_config": {
             k: v for k, v in MODEL_CONFIG.items() if k != "num_hidden_layers"}})}, item=I39_4),
    Case("plan-model-config-text-config-list", ("plan", "--model-config", "config.json"),
         "--model-config.text_config", {"config.json": model_config(text_config=[1])}, item=I39_4),
    Case("plan-prices-duplicate-key", (*PLAN, "--prices", "prices.json"), "--prices.region",
         {"prices.json": prices()[:-1] + ', "region": "europe-west4"}'}, item=I39_4),
    Case("plan-prices-folder", (*PLAN, "--prices", "prices"), "--prices", {"prices": DIR}),
    Case("plan-prices-nan", (*PLAN, "--prices", "prices.json"), "--prices.per_chip_hour.v6e.on_demand",
         {"prices.json": prices_v6e(on_demand=float("nan"))}),
    Case("plan-prices-infinity", (*PLAN, "--prices", "prices.json"), "--prices.per_chip_hour.v6e.spot",
         {"prices.json": prices_v6e(spot=float("inf"))}),
    Case("plan-prices-bool", (*PLAN, "--prices", "prices.json"), "--prices.per_chip_hour.v6e.on_demand",
         {"prices.json": prices_v6e(on_demand=True)}),
    Case("plan-prices-currency", (*PLAN, "--prices", "prices.json"), "--prices.currency",
         {"prices.json": prices(currency="dollars")}),
    Case("plan-prices-misspelt-key", (*PLAN, "--prices", "prices.json"), "--prices",
         {"prices.json": prices(curency="EUR")}),
    Case("plan-prices-unknown-key", (*PLAN, "--prices", "prices.json"), "--prices",
         {"prices.json": prices(per_chip_hours={"v6e": {"on_demand": 1.0}})}),
    Case("plan-prices-table-list", (*PLAN, "--prices", "prices.json"), "--prices.per_chip_hour",
         {"prices.json": prices(per_chip_hour=[["v6e", 2.7]])}),
    Case("plan-headroom-nan", (*PLAN, "--headroom", "nan"), "--headroom"),
    Case("plan-tokens-nan", (*PLAN, "--tokens-per-s", "nan"), "--tokens-per-s"),
    Case("plan-write-rate-nan", (*PLAN, "--mode", "train", "--write-gb-s", "nan"), "--write-gb-s"),
    Case("plan-write-rate-zero", (*PLAN, "--mode", "train", "--write-gb-s", "0"), "--write-gb-s"),
    # GKE's kubelet shutdownGracePeriodSeconds takes 0, 30 or 120 (compute-class-api KubeletConfig enum)
    Case("plan-notice-60", (*PLAN, "--mode", "train", "--notice-s", "60"), "--notice-s"),
    Case("plan-notice-serve", (*PLAN, "--notice-s", "120"), "--notice-s"),
    Case("plan-step-zero", (*PLAN, "--mode", "train", "--step-s", "0"), "--step-s"),
    Case("plan-step-nan", (*PLAN, "--mode", "train", "--step-s", "nan"), "--step-s"),
    Case("plan-writers-unknown", (*PLAN, "--mode", "train", "--checkpoint-writers", "rank0"),
         "--checkpoint-writers"),
    Case("plan-tokens-inf", (*PLAN, "--tokens-per-s", "inf"), "--tokens-per-s"),
    Case("plan-context-huge", (*PLAN, "--context", "9" * 30), "--context"),
    Case("plan-batch-float", (*PLAN, "--batch", "1.5"), "--batch"),
    Case("plan-params-inf", ("plan", "--params", "inf"), "--params"),
    Case("plan-params-hex", ("plan", "--params", "0x10"), "--params"),
    Case("plan-model-empty", ("plan", "--model", ""), "--model"),
    Case("plan-plot-jpg", (*PLAN, "--plot", "plan.jpg"), "--plot", item=I4, process=True),
    Case("plan-plot-folder", (*PLAN, "--plot", "chart.png"), "--plot", {"chart.png": DIR}, item=I4, process=True),
    Case("plan-plot-unwritable", (*PLAN, "--plot", "/proc/plan.png"), "--plot", item=I4, process=True),
    # 1e14 (the largest --params taken) to train fits only tpu7x slices Ray cannot reserve: nothing to draw; with
    # 20% headroom it fits no slice at all (5e13 to serve fits v5p; 5e14 is refused as out of range before sizing)
    Case("plan-plot-empty-chart", ("plan", "--params", "1e14", "--mode", "train", "--plot", "plan.png"), "--params",
         item=I4, process=True),
    Case("plan-no-slice-fits", ("plan", "--params", "1e14", "--mode", "train", "--headroom", "0.2"), "--params",
         item=I14),
    # images build
    Case("images-unknown-image", (*IMAGES, "base"), "IMAGE", CFG_OUT),
    Case("images-unknown-team-image", (*IMAGES, "team-0123456789abcdef"), "IMAGE",
         {**CFG_OUT, **TEAM_SRC, "src/requirements.txt": "inflection==0.5.1\n",
          "raytpu.yaml": team_config({"requirements": "requirements.txt"})}, item=I47, process=True),
    Case("images-no-action", ("images",), "ACTION"),
    Case("images-no-stack", ("images", "build"), "--stack", CFG_OUT),
    Case("images-poll-negative", (*IMAGES, "--poll-s", "-1"), "--poll-s", CFG_OUT, item=I11, process=True),
    Case("images-poll-nan", (*IMAGES, "--poll-s", "nan"), "--poll-s", CFG_OUT, item=I11, process=True),
    Case("images-timeout-huge", (*IMAGES, "--timeout-s", "1000000"), "--timeout-s", CFG_OUT, process=True),
    Case("images-timeout-float", (*IMAGES, "--timeout-s", "1.5"), "--timeout-s", CFG_OUT, process=True),
    Case("images-no-registry", IMAGES, "outputs.registry", {**CFG, "outputs.json": outputs(registry="")}),
    Case("images-record-not-json", IMAGES, "raytpu.images.json", {**CFG_OUT, "raytpu.images.json": "{"}),
    Case("images-record-unknown", IMAGES, "raytpu.images.json: images.nope",
         {**CFG_OUT, "raytpu.images.json": json.dumps({"images": {"nope": {"ref": RECORD_REF, "build": "b"}}})}),
    Case("images-record-base", IMAGES, "raytpu.images.json: images.job.base",
         {**CFG_OUT, "raytpu.images.json": record(base="ubuntu:latest")}),
    Case("images-record-versions", IMAGES, "raytpu.images.json: images.job.versions",
         {**CFG_OUT, "raytpu.images.json": record(versions={"ray": 2.6})}),
    # submit
    Case("submit-unknown-workload", ("submit", "nope", "--stack", STACK, "--dry-run"), "WORKLOAD", CFG_OUT),
    Case("submit-no-stack", ("submit", "train"), "--stack", CFG_OUT),
    Case("submit-report-without-wait", (*SUBMIT, "--report", "run.json"), "--report", CFG_OUT),
    Case("submit-outputs-folder", (*SUBMIT, "--outputs", "out"), "--outputs", {**CFG, "out": DIR}),
    Case("submit-outputs-non-utf8", SUBMIT, "--outputs", {**CFG, "outputs.json": b"{\"a\xff\": 1}"}),
    Case("submit-outputs-null", SUBMIT, OUT_FIELD + "endpoint", {**CFG, "outputs.json": outputs_null("endpoint")},
         item=I2),
    Case("submit-outputs-list", SUBMIT, OUT_FIELD + "bucket", {**CFG, "outputs.json": outputs(bucket=["b"])}, item=I2),
    Case("submit-outputs-object", SUBMIT, OUT_FIELD + "namespace",
         {**CFG, "outputs.json": outputs(namespace={"name": "ray"})}, item=I2),
    Case("submit-outputs-empty", SUBMIT, OUT_FIELD + "service_account",
         {**CFG, "outputs.json": outputs(service_account="")}, item=I2),
    Case("submit-outputs-other-project", SUBMIT, OUT_FIELD + "project",
         {**CFG, "outputs.json": outputs(project="another-project")}, item=I2),
    Case("submit-outputs-other-cluster", SUBMIT, OUT_FIELD + "cluster_name",
         {**CFG, "outputs.json": outputs(cluster_name="other")}, item=I2),
    Case("submit-outputs-other-location", SUBMIT, OUT_FIELD + "location",
         {**CFG, "outputs.json": outputs(location="europe-west4")}, item=I2),
    # an outputs file from before the per-cluster KSA (service_account ray) or of another bucket: pods never run
    Case("submit-outputs-before-ksa-rename", SUBMIT, OUT_FIELD + "service_account",
         {**CFG, "outputs.json": outputs(service_account="ray")}, item=I49),
    Case("smoke-outputs-before-ksa-rename", SMOKE, OUT_FIELD + "service_account",
         {**CFG, "outputs.json": outputs(service_account="ray")}, item=I49),
    Case("submit-outputs-other-bucket", SUBMIT, OUT_FIELD + "bucket",
         {**CFG, "outputs.json": outputs(bucket="another-bucket")}, item=I49),
    Case("submit-terraform-form-other-stack", ("submit", "train", "--stack", "other-cluster", "--dry-run"),
         "--stack", {**CFG, "outputs.json": terraform_outputs()}, item=I2),
    Case("submit-wait-timeout-negative", ("submit", "train", "--stack", STACK, "--wait", "--timeout-s", "-5"),
         "--timeout-s", CFG_OUT, item=I11, process=True),
    Case("submit-run-id-upper", (*SUBMIT, "--run-id", "Run_1"), "--run-id", CFG_OUT),
    Case("submit-run-id-long", (*SUBMIT, "--run-id", "r" * 80), "--run-id", CFG_OUT),
    Case("submit-py-modules-scheme", (*SUBMIT, "--py-modules", "ftp://host/raytpu.zip"), "--py-modules", CFG_OUT),
    Case("submit-local-no-cluster", ("submit", "train", "--local", "--dir", "run"), "local", CFG, code=1),
    Case("submit-local-overwrite-train", ("submit", "train", "--local", "--overwrite", "--dir", "run"), "--overwrite",
         CFG),
    Case("submit-cpu-model-no-local", (*SUBMIT, "--cpu-model", "model"), "--cpu-model", {**CFG_OUT, "model": DIR}),
    Case("submit-local-with-stack", ("submit", "train", "--local", "--stack", STACK), "--stack", CFG, item=I39_6),
    Case("submit-local-dry-run", ("submit", "train", "--local", "--dry-run"), "--dry-run", CFG, item=I39_6),
    Case("submit-local-py-modules", ("submit", "train", "--local", "--py-modules", "gs://b/raytpu.zip"),
         "--py-modules", CFG, item=I39_6),
    Case("submit-local-example-config", ("submit", "train", "--local", "--dir", "run"), "local",
         {"raytpu.example.yaml": EXAMPLE_TEXT, "raytpu.images.json": FIXTURE_RECORD}, code=1, item=I39_6),
    Case("submit-local-dead-head", ("submit", "train", "--local", "--dir", "run"), "local", {**CFG, **DEAD}, code=1,
         env=STALE_RAY, item=I39_1, process=True),
    # smoke
    Case("smoke-no-stack", ("smoke",), "--stack", CFG_OUT),
    Case("smoke-image-latest", (*SMOKE, "--image", "us-docker.pkg.dev/p/r/smoke:latest"), "--image", CFG_OUT,
         item=I10),
    Case("smoke-image-no-tag", (*SMOKE, "--image", "smoke"), "--image", CFG_OUT),
    Case("smoke-timeout-negative", ("smoke", "--stack", STACK, "--timeout-s", "-1"), "--timeout-s", CFG_OUT,
         process=True),
    Case("smoke-local-flag", ("smoke", "--local"), "--local", CFG_OUT, item=I13),
    # doctor (issue 52): the stack's outputs as submit reads them, flags that cannot go together, --report a folder
    Case("doctor-no-stack", ("doctor",), "--stack", CFG_OUT),
    Case("doctor-unknown-stack", ("doctor", "--stack", "nope-cluster"), "--stack", CFG_OUT),
    Case("doctor-outputs-folder", ("doctor", "--stack", STACK, "--outputs", "out"), "--outputs", {**CFG, "out": DIR}),
    Case("doctor-outputs-not-json", ("doctor", "--stack", STACK), "--outputs", {**CFG, "outputs.json": "{"}),
    Case("doctor-outputs-other-project", ("doctor", "--stack", STACK), OUT_FIELD + "project",
         {**CFG, "outputs.json": outputs(project="another-project")}),
    Case("doctor-local-with-stack", ("doctor", "--local", "--stack", STACK), "--stack", CFG),
    Case("doctor-local-with-outputs", ("doctor", "--local", "--outputs", "outputs.json"), "--outputs", CFG_OUT),
    Case("doctor-dir-without-local", ("doctor", "--stack", STACK, "--dir", "run"), "--dir", CFG_OUT),
    Case("doctor-report-is-a-file", ("doctor", "--stack", STACK, "--report", "raytpu.yaml"), "--report", CFG_OUT),
    Case("doctor-json-value", ("doctor", "--stack", STACK, "--json=yes"), "--json", CFG_OUT),
    Case("doctor-local-no-cluster", ("doctor", "--local", "--dir", "run"), "local", CFG, code=1),
    # local
    Case("local-status-dir-after-action", ("local", "status", "--dir", "run"), "local", code=1, item=I13),
    Case("local-no-action", ("local",), "ACTION"),
    Case("local-unknown-action", ("local", "start"), "ACTION"),
    Case("local-up-slices-zero", (*UP, "--slices", "0"), "--slices"),
    Case("local-up-timeout-negative", (*UP, "--timeout-s", "-1"), "--timeout-s"),
    Case("local-up-timeout-nan", (*UP, "--timeout-s", "nan"), "--timeout-s"),
    Case("local-up-generation-only", ("local", "up", "--generation", "v6e"), "topology"),
    Case("local-up-bad-topology", ("local", "up", "--generation", "v6e", "--topology", "3x3"), "topology"),
    Case("local-up-config-missing", ("local", "up", "--config", "nope.yaml"), "config"),
    Case("local-up-unknown-slice", ("local", "up", "--config", "raytpu.yaml", "--slice", "nope"), "--slice", CFG),
    Case("local-up-tmp-prefix", UP, "RAYTPU_LOCAL_TMP_PREFIX", env={"RAYTPU_LOCAL_TMP_PREFIX": "/etc/"}),
    Case("local-smoke-dcn-zero", ("local", "--dir", "run", "smoke", "--dcn-slices", "0"), "--dcn-slices",
         item=I11),
    Case("local-smoke-timeout-negative", ("local", "--dir", "run", "smoke", "--timeout-s", "-1"), "--timeout-s",
         item=I11),
    Case("local-serve-timeout-negative", ("local", "--dir", "run", "serve", "--timeout-s", "-1"), "--timeout-s",
         item=I11),
    Case("local-status-corrupt-state", ("local", "--dir", "run", "status"), "run/cluster.json",
         {"run": DIR, "run/cluster.json": "{not json"}),
    Case("local-status-dir-a-file", ("local", "--dir", "notes.txt", "status"), "--dir", {"notes.txt": "mine\n"}),
    Case("local-up-dir-a-file", ("local", "--dir", "notes.txt", "up", "--generation", "v6e", "--topology", "2x4"),
         "--dir", {"notes.txt": "mine\n"}),
    Case("local-down-corrupt-state", ("local", "--dir", "run", "down"), "run/cluster.json",
         {"run": DIR, "run/cluster.json": json.dumps({"run_dir": 3})}),
    Case("local-status-dead-head", ("local", "--dir", "run", "status"), "local", DEAD, code=1, env=STALE_RAY,
         item=I39_1, process=True),
    Case("local-smoke-dead-head", ("local", "--dir", "run", "smoke"), "local", DEAD, code=1, item=I39_1, process=True),
    # this environment is checked first (`local serve` needs vLLM, in .venv-serve), then the head
    Case("local-serve-dead-head", ("local", "--dir", "run", "serve"),
         "local" if importlib.util.find_spec("vllm") else "local.serve", DEAD, code=1, item=I39_1, process=True),
    Case("local-preempt-dead-head", ("local", "--dir", "run", "preempt", "--host", "0"), "--dir", DEAD, item=I39_1),
    Case("local-preempt-no-cluster", ("local", "--dir", "run", "preempt"), "--dir", item=I39_1),
    Case("local-up-config-with-generation", (*UP, "--config", "raytpu.yaml"), "--config", CFG, item=I39_6),
    Case("local-up-slice-with-generation", (*UP, "--slice", "train"), "--slice", item=I39_6),
    Case("local-up-machine-type-alone", ("local", "--dir", "run", "up", "--machine-type", "ct6e-standard-4t"),
         "--machine-type", item=I39_6),
    Case("local-smoke-config-with-dcn", ("local", "--dir", "run", "smoke", "--config", "raytpu.yaml", "--dcn-slices",
                                         "2"), "--config", CFG, item=I39_6),
    # demo
    Case("demo-config-missing", ("demo", "--config", "nope.yaml"), "config"),
    Case("demo-notice-without-preempt", ("demo", "--notice-s", "5"), "--notice-s", item=I39_6),
    Case("demo-notice-zero-without-preempt", ("demo", "--notice-s", "0", "--serve"), "--notice-s", item=I39_6),
    Case("demo-preempt-with-serve", ("demo", "--preempt", "--serve"), "--preempt", item=I39_6),
    Case("demo-preempt-with-data", ("demo", "--data", "--preempt"), "--preempt", item=I39_6),
    Case("demo-serve-with-data", ("demo", "--serve", "--data"), "--serve", item=I39_6),
    Case("demo-serve-python-without-data", ("demo", "--serve-python", "python3"), "--serve-python", item=I39_6),
    Case("demo-steps-zero", ("demo", "--config", "raytpu.yaml", "--no-synth", "--dir", "run", "--steps", "0"),
         "--steps", CFG),
    Case("demo-report-folder", ("demo", "--config", "raytpu.yaml", "--no-synth", "--dir", "run", "--report", "rep"),
         "--report", {**CFG, "rep": DIR}),
    Case("demo-serve-no-serving", ("demo", "--serve", "--config", "raytpu.yaml"), "config",
         {"raytpu.yaml": config(lambda d: d["workloads"].pop(2))}),
    # report (issue 42): the report file and --out; --out is checked before the report is read
    Case("report-missing-file", ("report", "nope.json"), "FILE"),
    Case("report-not-json", ("report", "r.json"), "FILE", {"r.json": "slices: []\n"}),
    Case("report-truncated", ("report", "smoke.json"), "FILE", {"smoke.json": '{"healthy": false, "slices": [{"sl'}),
    Case("report-not-a-report", ("report", "r.json"), "FILE", {"r.json": '{"config": "raytpu.yaml"}'}),
    Case("report-verdicts-not-a-list", ("report", "r.json"), "FILE", {"r.json": '{"slices": {"a": 1}}'}),
    Case("report-newer-format", ("report", "r.json"), "FILE", {"r.json": '{"format": 99, "slices": []}'}),
    Case("report-utf16", ("report", "r.json"), "FILE", {"r.json": '{"slices": []}'.encode("utf-16")}),
    # issue 68 item 5: hostile reports are exit 2 naming the file, never a traceback
    Case("report-checks-strings", ("report", "r.json"), "FILE",
         {"r.json": '{"slices": [{"slice": "a", "healthy": false, "checks": ["hosts", "psum"]}]}'}),
    Case("report-nested-5000", ("report", "r.json"), "FILE", {"r.json": "[" * 5000 + "]" * 5000}),
    Case("report-timeline-nested-5000", ("report", "r.json"), "FILE",
         {"r.json": '{"slices": [], "timeline": ' + '{"a": ' * 5000 + "1" + "}" * 5001}),
    Case("report-out-folder", ("report", "r.json", "--out", "page.html"), "--out",
         {"r.json": '{"slices": []}', "page.html": DIR}),
    Case("report-out-not-html", ("report", "r.json", "--out", "r.json"), "--out", {"r.json": '{"slices": []}'}),
    Case("report-out-unwritable", ("report", "r.json", "--out", "/proc/page.html"), "--out",
         {"r.json": '{"slices": []}'}),
    Case("report-out-not-the-kits", ("report", "r.json", "--out", "notes.html"), "--out",
         {"r.json": '{"slices": []}', "notes.html": "<p>my notes</p>"}),
    Case("report-out-before-the-report", ("report", "r.json", "--out", "no/page.html"), "--out",
         {"r.json": '{"slices": ['}),
    Case("unknown-command", ("deploy",), "COMMAND"),
    *TEAM_CASES,
    *ENV_CASES,
    *SERVE_APP_CASES,
    *ISSUE48_CASES,
    *TEAMS_CASES,
)


# ---------------------------------------------------------------------------------------------- the runner


Snapshot = dict[str, tuple[int, int, int, bool]]


def snapshot(folder: Path) -> Snapshot:
    """Every path under ``folder``: (size, mtime_ns, mode, is a folder)."""
    found: Snapshot = {}
    for path in folder.rglob("*"):
        st = path.lstat()
        found[str(path.relative_to(folder))] = (0 if path.is_dir() else st.st_size, st.st_mtime_ns, st.st_mode,
                                                path.is_dir())
    return found


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """What a run created, deleted or modified (a folder's mtime alone is not a change)."""
    out = [f"deleted {p}" for p in sorted(set(before) - set(after))]
    out += [f"created {p}" for p in sorted(set(after) - set(before))]
    out += [f"modified {p}" for p in sorted(set(before) & set(after))
            if before[p] != after[p] and not (before[p][3] and after[p][3] and before[p][2] == after[p][2])]
    return out


def write_files(folder: Path, files: Mapping[str, Content]) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Dir):
            path.mkdir(exist_ok=True)
        elif isinstance(content, Fifo):
            os.mkfifo(path)
        elif isinstance(content, Link):
            path.symlink_to(content.target)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def environment(cwd: Path, empty: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """The run's environment: no cloud credentials, no Ray usage stats, raytpu from this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYTPU_", "CLOUDSDK_", "GOOGLE_", "KUBECONFIG"))}
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "CHECKPOINT_DISABLE": "1", "CLOUDSDK_CONFIG": str(empty),
                "GOOGLE_APPLICATION_CREDENTIALS": str(empty / "no-credentials.json"),
                "KUBECONFIG": str(empty / "no-kubeconfig"), "NO_GCE_CHECK": "True", "GCE_METADATA_HOST": "127.0.0.1:9",
                "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})
    env.update({k: v.replace("{ROOT}", str(ROOT)).replace("{CWD}", str(cwd)) for k, v in extra.items()})
    return env


def _prepare(case: Case, tmp_dir: Path) -> tuple[Path, Path, Snapshot]:
    """The user's folder with the case's files, an empty gcloud config folder, and the snapshot before the run."""
    user, empty = tmp_dir / "user", tmp_dir / "gcloud"
    user.mkdir(parents=True)
    empty.mkdir()
    write_files(user, case.files)
    return user, empty, snapshot(user)


def _outcome(case: Case, user: Path, before: Snapshot, code: int, err: str, seconds: float) -> Outcome:
    allowed = set(case.allowed)
    changed = [c for c in changes(before, snapshot(user)) if c.split(" ", 1)[1] not in allowed]
    lines = err.splitlines()
    first = next((line for line in lines if line.startswith("error: ")), lines[0] if lines else "")
    return Outcome(code, first, err, "Traceback (most recent call last)" in err, seconds, changed)


def run_case(case: Case, tmp_dir: Path) -> Outcome:
    """Runs ``python -m raytpu <argv>`` in ``tmp_dir/user`` (the case's files written there first) and reports what
    it did; a run past :data:`TIMEOUT_S` is killed and reported as exit 124."""
    user, empty, before = _prepare(case, tmp_dir)
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "raytpu", *case.argv], cwd=user, capture_output=True,
                              env=environment(user, empty, case.env), timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        code, err = proc.returncode, proc.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as exc:
        code, err = 124, (exc.stderr or b"").decode("utf-8", "replace") + f"\n(killed after {TIMEOUT_S:g} s)"
    return _outcome(case, user, before, code, err, time.monotonic() - started)


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Any:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_in_process(case: Case, tmp_dir: Path) -> Outcome:
    """:func:`run_case` in this process (``raytpu.cli.main``, cwd and environment switched for the run): a fraction
    of a second instead of a Python start and the imports. An exception out of ``main`` is the traceback a real
    run would print. No time limit is enforced: cases that may hang are :attr:`Case.process`."""
    from raytpu.cli import main

    user, empty, before = _prepare(case, tmp_dir)
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    started = time.monotonic()
    with _environ(environment(user, empty, case.env)), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        os.chdir(user)
        try:
            code = main(list(case.argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception:
            import traceback

            err.write(traceback.format_exc())
            code = 1
        finally:
            os.chdir(cwd)
    return _outcome(case, user, before, code, err.getvalue(), time.monotonic() - started)


def run_all(cases: tuple[Case, ...] = CASES, workers: int = 2) -> list[tuple[Case, Outcome]]:
    with tempfile.TemporaryDirectory(prefix="raytpu-bad-") as tmp, ThreadPoolExecutor(workers) as pool:
        folders = [Path(tmp) / case.id for case in cases]
        return list(zip(cases, pool.map(run_case, cases, folders), strict=True))


def table(results: list[tuple[Case, Outcome]]) -> str:
    """The markdown table of the closing note."""
    rows = ["| case | command | exit | first stderr line | s | result |", "|---|---|---|---|---|---|"]
    for case, out in results:
        problems = out.problems(case)
        line = out.first_line[:120].replace("|", "\\|")
        verdict = "OK" if not problems else "FAIL: " + "; ".join(problems) + (f" ({case.item})" if case.item else "")
        rows.append(f"| {case.id} | {case.command} | {out.exit_code} | `{line}` | {out.seconds:.2f} | {verdict} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--table", action="store_true", help="run every case and print the markdown table")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("ids", nargs="*", help="only these cases")
    args = parser.parse_args(argv)
    chosen = tuple(c for c in CASES if not args.ids or c.id in args.ids)
    results = run_all(chosen, args.workers)
    print(table(results))
    failed = sum(1 for case, out in results if out.problems(case))
    print(f"\n{len(results)} cases, {len(results) - failed} OK, {failed} FAIL", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
