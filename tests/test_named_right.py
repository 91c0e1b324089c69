"""Issue 68 item 3, "messages that name the wrong thing": each error names the user's own field or command, once.

- ``submit NAME --local`` of a RayService deploys it as ``local serve`` does (issue 70; it was refused);
- ``local serve --workload NAME`` judges NAME before it looks for a cluster;
- a union-typed field (``keep_checkpoints``, ``run_time_s``: ``int | str``) given neither is one line naming the field,
  never pydantic's member tags (``keep_checkpoints.int``);
- a key or value YAML reads as a date shows as YAML writes it (``2024-01-01``), never ``datetime.date(...)``;
- one problem is one line: a batch on a multi-host slice, an ``hf_token_secret`` that fails its own rules.
"""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from raytpu.cli import main
from raytpu.config import parse
from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput, InvalidInputs

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "raytpu.example.yaml"
GATED = "meta-llama/Llama-3.1-8B-Instruct"


def example() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return data


def lines_of(data: dict[str, Any], base: Path | None = None) -> list[str]:
    """Every error line the config gets (empty: it compiles)."""
    try:
        parse(yaml.safe_dump(data, sort_keys=False), base=base)
    except (InvalidInput, InvalidInputs) as exc:
        return [str(p) for p in errors.problems_of(exc)]
    return []


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error: ")]


# ------------------------------------------------------------------------------------ submit --local, local serve


def app_config(tmp_path: Path) -> Path:
    """The example plus a team's Serve app (``serve_app``) and a batch, written beside its code folder."""
    (tmp_path / "src" / "lm").mkdir(parents=True)
    (tmp_path / "src" / "lm" / "__init__.py").write_text("")
    (tmp_path / "src" / "lm" / "serve.py").write_text(
        "from ray import serve\n\n\n@serve.deployment\nclass App:\n    def __call__(self, request):\n"
        "        return 'ok'\n\n\napp = App.bind()\n")
    data = example()
    data["workloads"] += [{"name": "app", "kind": "serve", "slice": "serve", "code": "./src",
                           "serve_app": "lm.serve:app"},
                          {"name": "label", "kind": "batch", "slice": "serve", "input": "gs://my-data/in.jsonl",
                           "output": "gs://my-data/out"}]
    path = tmp_path / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("name", ["serve", "app"])
def test_submit_local_of_a_serving_workload_deploys_it_on_the_slice_it_looks_for(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Issue 70: ``submit NAME --local`` deploys a serving workload as ``local serve --workload NAME`` does (no longer
    refused naming the job kinds): with no slice up it says to start one, as for a job."""
    monkeypatch.setenv("RAYTPU_LOCAL_DIR", str(tmp_path / "no-slice"))
    assert main(["submit", name, "--local", "--config", str(app_config(tmp_path))]) == 1
    err = capsys.readouterr().err
    (line,) = error_lines(err)
    assert line.startswith("error: local: no local cluster recorded in") and "`raytpu local up`" in line
    assert "Traceback" not in err and not (tmp_path / "no-slice").exists()


@pytest.mark.parametrize(("name", "said"), [
    ("train", "is a train workload (a RayJob)"),
    ("smoke", "is a smoke workload (a RayJob)"),
    ("label", "is a batch workload (a RayJob)"),
    ("nope", "'nope' is not allowed"),
])
def test_local_serve_names_a_wrong_workload_before_looking_for_a_slice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str,
        said: str) -> None:
    monkeypatch.setenv("RAYTPU_LOCAL_DIR", str(tmp_path / "no-slice"))  # no slice up: "no local cluster" came first
    assert main(["local", "serve", "--config", str(app_config(tmp_path)), "--workload", name]) == 2
    err = capsys.readouterr().err
    (line,) = error_lines(err)
    assert line.startswith("error: workload: ") and said in line and "no local cluster" not in err
    assert "serve, app" in line  # the serving workloads to choose from
    if said.endswith("(a RayJob)"):
        assert f"`raytpu submit {name} --local` runs this one" in line


def test_local_serve_of_a_serving_workload_still_needs_a_slice(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYTPU_LOCAL_DIR", str(tmp_path / "no-slice"))
    assert main(["local", "serve", "--config", str(app_config(tmp_path)), "--workload", "app"]) == 1
    assert "no local cluster" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ union-typed fields


UNION_VALUES = [True, False, 2.5, -0.5, [1], [], {"a": 1}, datetime.date(2024, 1, 1)]


@pytest.mark.parametrize("field", ["keep_checkpoints", "run_time_s"])
@pytest.mark.parametrize("value", UNION_VALUES, ids=[repr(v) for v in UNION_VALUES])
def test_a_value_of_no_member_of_a_union_field_is_one_line_naming_the_field(field: str, value: object) -> None:
    data = example()
    data["workloads"][1][field] = value
    (line,) = lines_of(data)
    assert line.startswith(f"workloads[1].{field}: {errors.yaml_flow(value)}: is not a whole number or a string;")
    for internal in (".int", ".str", "Strict", "datetime"):
        assert internal not in line
    assert line.count("; valid: ") == 1


def test_two_union_fields_wrong_are_one_line_each_and_the_spec_rule_still_speaks_for_a_string() -> None:
    data = example()
    data["workloads"][1].update(keep_checkpoints=True, run_time_s=1.5)
    assert sorted(line.split(":")[0] for line in lines_of(data)) == ["workloads[1].keep_checkpoints",
                                                                     "workloads[1].run_time_s"]
    data["workloads"][1].update(keep_checkpoints="x", run_time_s=None)
    (line,) = lines_of(data)
    assert line.startswith("workloads[1].keep_checkpoints: 'x' is not a number of checkpoints")


# ------------------------------------------------------------------------------------------ YAML dates in paths


def test_a_key_is_joined_to_its_path_as_yaml_writes_it() -> None:
    assert errors.yaml_flow(datetime.date(2024, 1, 1)) == "2024-01-01"
    assert errors.excerpt({datetime.date(2024, 1, 1): [datetime.date(2024, 1, 2)]}) == "{2024-01-01: [2024-01-02]}"
    assert [errors.join_key("c", k) for k in (datetime.date(2024, 1, 1), "lr", "a b", 3, True, None, 2.5)] == [
        "c[2024-01-01]", "c.lr", "c['a b']", "c[3]", "c[true]", "c[null]", "c[2.5]"]


def train_loop_config(tmp_path: Path, train_config: object) -> dict[str, Any]:
    (tmp_path / "src" / "lm").mkdir(parents=True, exist_ok=True)
    (tmp_path / "src" / "lm" / "__init__.py").write_text("")
    (tmp_path / "src" / "lm" / "train.py").write_text("def train_loop(config):\n    return None\n")
    data = example()
    data["workloads"][1].update(code="./src", train_loop="lm.train:train_loop", train_config=train_config)
    return data


DAY = datetime.date(2024, 1, 1)
WHEN = datetime.datetime(2001, 12, 14, 21, 59, 43, 100000, tzinfo=datetime.timezone(datetime.timedelta(hours=-5)))


@pytest.mark.parametrize(("train_config", "field", "shows"), [
    ({DAY: 1}, "train_config[2024-01-01]", "the key 2024-01-01 is not a string"),
    ({"a": {DAY: 1}}, "train_config.a[2024-01-01]", "the key 2024-01-01 is a timestamp"),
    ({"a": {"b": {DAY: 1}}}, "train_config.a.b[2024-01-01]", "the key 2024-01-01 is a timestamp"),
    ({"a": {WHEN: 1}}, "train_config.a[2001-12-14T21:59:43.100000-05:00]", "is a timestamp"),
    ({"a": {3: 1}}, "train_config.a[3]", "the key 3 is an integer"),
    ({"a": {True: 1}}, "train_config.a[true]", "the key true is a boolean"),
    ({"a": {None: 1}}, "train_config.a[null]", "the key null is a null"),
    ({"a": DAY}, "train_config.a", "2024-01-01 is a timestamp"),
    ({"a": [1, DAY]}, "train_config.a[1]", "2024-01-01 is a timestamp"),
    ({"a b": {"c": WHEN}}, "train_config['a b'].c", "2001-12-14T21:59:43.100000-05:00 is a timestamp"),
    ({"a": float("nan")}, "train_config.a", ".nan is a number"),
])
def test_a_yaml_date_shows_as_yaml_writes_it_on_one_line(tmp_path: Path, train_config: object, field: str,
                                                           shows: str) -> None:
    (line,) = lines_of(train_loop_config(tmp_path, train_config), base=tmp_path)
    assert line.startswith(f"workloads[1].{field}: ") and shows in line
    assert "datetime" not in line and f"{field}: '" not in line  # not shown as a (quoted) string


def test_a_date_key_of_other_mappings_shows_as_yaml_writes_it() -> None:
    data = example()
    data["cluster"]["labels"] = {DAY: "x"}
    (line,) = lines_of(data)
    assert line.startswith("cluster.labels[2024-01-01]: the key 2024-01-01 is not a string;")
    assert "quote it: '2024-01-01'" in line and "datetime" not in line


# ------------------------------------------------------------------------------------ one problem, one line


def batch_on(machine_type: str | None) -> dict[str, Any]:
    data = example()
    if machine_type:
        data["slices"][1]["machine_type"] = machine_type
    data["workloads"].append({"name": "label", "kind": "batch", "slice": "serve",
                              "input": "gs://my-data/in.jsonl", "output": "gs://my-data/out"})
    return data


def test_a_batch_on_a_v6e_2x4_of_two_4_chip_hosts_is_one_line() -> None:
    data = batch_on("ct6e-standard-4t")
    del data["workloads"][2]  # the serve workload on it has its own (Serve LLM's) problem with that slice
    (line,) = lines_of(data)
    assert line.startswith("workloads[2].slice: 'v6e 2x4 (2 hosts)' is a multi-host slice")
    assert "Serve" not in line and "v6e 2x4 (ct6e-standard-8t)" in line
    assert lines_of(batch_on(None)) == []


def test_a_serve_on_that_slice_keeps_serve_llms_own_line() -> None:
    data = batch_on("ct6e-standard-4t")
    found = lines_of(data)
    assert [line.split(":")[0] for line in found] == ["workloads[2].slice", "workloads[3].slice"]
    assert "Ray Serve LLM" in found[0] and "multi-host slice" in found[1]


@pytest.mark.parametrize("kind", ["serve", "batch"])
@pytest.mark.parametrize(("secret", "fields"), [
    ({"name": "HF-Secret", "key": "tok"}, ["hf_token_secret.name"]),
    ({"name": "hf_secret", "key": "tok"}, ["hf_token_secret.name"]),
    ({"name": "", "key": "tok"}, ["hf_token_secret.name"]),
    ({"name": "HF", "key": "a b"}, ["hf_token_secret.name", "hf_token_secret.key"]),
    ({"name": "hf", "key": ".."}, ["hf_token_secret.key"]),
    ({"name": "hf", "key": "tok", "x": 1}, ["hf_token_secret.x"]),
    ({"name": "hf"}, ["hf_token_secret.key"]),
    (3, ["hf_token_secret"]),
    ("hf-secret", ["hf_token_secret"]),
])
def test_a_bad_hf_token_secret_of_a_gated_model_is_its_own_lines_only(kind: str, secret: object,
                                                                       fields: list[str]) -> None:
    data = batch_on(None)
    work = copy.deepcopy(data["workloads"][2 if kind == "serve" else 3])
    work.update(model=GATED, hf_token_secret=secret)
    data["workloads"] = [w for w in data["workloads"] if w["kind"] != kind] + [work]
    found = lines_of(data)
    index = len(data["workloads"]) - 1
    assert [line.split(": ")[0] for line in found] == [f"workloads[{index}].{f}" for f in fields]
    assert not any("is required for" in line for line in found)  # the gated model's "needs a token", said again


def test_a_gated_model_without_any_hf_token_secret_still_says_it_needs_one() -> None:
    data = example()
    data["workloads"][2]["model"] = GATED
    (line,) = lines_of(data)
    assert line.startswith("workloads[2].hf_token_secret: is required for meta-llama/Llama-3.1-8B-Instruct")
