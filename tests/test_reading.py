"""Issue 28 (3, 5, 7, 8): what a user's file may hold before the config's rules even run: its size, its encoding,
its YAML (one value per key, a bounded number of values with aliases expanded), its scalar types; and every error
shows a bounded excerpt of the value."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from raytpu import config
from raytpu.config import reading
from raytpu.core.common.errors import MAX_EXCERPT, InvalidInput, InvalidInputs, excerpt, problems_of

pytestmark = pytest.mark.unit

EXAMPLE_TEXT = Path(__file__).resolve().parents[1].joinpath("raytpu.example.yaml").read_text()
EXAMPLE: dict[str, Any] = yaml.safe_load(EXAMPLE_TEXT)


def _refusal(text: str) -> list[InvalidInput]:
    with pytest.raises((InvalidInput, InvalidInputs)) as caught:
        config.parse(text)
    assert isinstance(caught.value, InvalidInput | InvalidInputs)
    return problems_of(caught.value)


def _edited(path: str, value: object) -> str:
    data = copy.deepcopy(EXAMPLE)
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value
    return yaml.safe_dump(data, sort_keys=False)


# ---------------------------------------------------------------------------------------------- bytes


def test_a_file_over_the_size_limit_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    big = tmp_path / "raytpu.yaml"
    with big.open("wb") as out:
        out.truncate(64 * reading.MAX_BYTES)  # sparse: 64 MiB of zeros
    with pytest.raises(InvalidInput, match="is over 1 MiB") as caught:
        config.load(big)
    assert caught.value.field == "config"


@pytest.mark.parametrize(("data", "shown"), [
    (b"project: caf\xe9\n", "byte 0xe9 at line 1, column 13"),
    (b"project: p\nregion: \xff\n", "byte 0xff at line 2, column 9"),
    ("project: p\n".encode("utf-16"), "UTF-16"),
    ("project: p\n".encode("utf-16-be").join([b"\xfe\xff", b""]), "UTF-16"),
])
def test_text_that_is_not_utf8_is_refused_saying_where(tmp_path: Path, data: bytes, shown: str) -> None:
    path = tmp_path / "raytpu.yaml"
    path.write_bytes(data)
    with pytest.raises(InvalidInput) as caught:
        config.load(path)
    assert caught.value.field == "config" and shown in caught.value.problem
    assert "UTF-8" in caught.value.valid


def test_a_utf8_byte_order_mark_is_read_as_text(tmp_path: Path) -> None:
    """Windows editors save UTF-8 with a BOM; YAML 1.2 allows it
    (https://yaml.org/spec/1.2.2/#52-character-encodings)."""
    path = tmp_path / "raytpu.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + EXAMPLE_TEXT.encode())
    assert config.load(path).project == EXAMPLE["project"]


# ---------------------------------------------------------------------------------------------- YAML


@pytest.mark.parametrize(("text", "field"), [
    (EXAMPLE_TEXT.replace("region:", "region: us-east5\nregion:", 1), "region"),
    (EXAMPLE_TEXT + "cluster:\n  name: other\n", "cluster"),
    (_edited("cluster.labels", {"team": "a"}).replace("team: a", "team: a\n    team: b"), "cluster.labels['team']"),
    (_edited("slices.0.count", 1).replace("count: 1", "count: 1\n  count: 4", 1), "slices[0].count"),
])
def test_a_key_given_twice_is_refused_naming_it_and_both_lines(text: str, field: str) -> None:
    """YAML 1.2 requires unique keys (https://yaml.org/spec/1.2.2/#3211-nodes); PyYAML keeps the last silently."""
    [problem] = _refusal(text)
    assert problem.field == field
    assert "given twice" in problem.problem and "lines " in problem.problem


def test_anchors_and_merge_keys_within_the_limits_still_read() -> None:
    data = copy.deepcopy(EXAMPLE)
    data["cluster"]["labels"] = {"team": "ml"}
    text = yaml.safe_dump(data, sort_keys=False).replace("labels:\n    team: ml", "labels: &labels\n    team: ml")
    text += "x-shared: *labels\n"
    [problem] = _refusal(text)  # the alias itself is fine; the unknown top-level key is what is refused
    assert problem.field == "x-shared" and "not a known key" in problem.problem


@pytest.mark.parametrize(("bomb", "field"), [
    ("workloads.2.model", "workloads[2].model"),
    ("workloads.2.engine_kwargs", "workloads[2].engine_kwargs['x9']"),
    ("cluster.labels", "cluster.labels['x9']"),
])
def test_an_alias_bomb_is_refused_by_counting_naming_the_field_it_is_under(bomb: str, field: str) -> None:
    """Ten levels of ten aliases stand for 10^9 values: refused by counting, never expanded (the
    ``engine_kwargs`` mapping takes any value, so nothing later would have stopped it before writing it out)."""
    parts = ['x0: &a0 "lol"'] + [f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    text = _edited(bomb, "PLACEHOLDER").replace("PLACEHOLDER", "{" + ", ".join(parts) + "}")
    [problem] = _refusal(text)
    assert problem.field.startswith(field.split("[")[0]) and f"over {reading.MAX_NODES:,}" in problem.problem
    assert len(str(problem)) < 400


def test_an_alias_that_contains_itself_is_refused_not_followed_forever() -> None:
    text = _edited("workloads.2.engine_kwargs", "PLACEHOLDER").replace("PLACEHOLDER", "&loop {a: [*loop]}")
    [problem] = _refusal(text)
    assert problem.field.startswith("workloads[2].engine_kwargs")


def test_nesting_deeper_than_libyaml_reads_is_a_yaml_error_not_a_recursion_error() -> None:
    [problem] = _refusal("project: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert problem.field == "config" and "not valid YAML" in problem.problem


@pytest.mark.parametrize(("section", "limit"), sorted(config.LIMITS.items()))
def test_more_entries_than_a_list_limit_are_refused_before_any_is_compiled(section: str, limit: int) -> None:
    data = copy.deepcopy(EXAMPLE)
    one = data[section][0] if section in data else {"name": "research", "quota": {"train": 16}}
    data[section] = [one] * (limit + 1)
    [problem] = _refusal(yaml.safe_dump(data))
    assert problem.field == section and f"at most {limit}" in problem.valid


# ---------------------------------------------------------------------------------------------- types


@pytest.mark.parametrize(("path", "value", "field"), [
    ("slices.0.count", "2", "slices[0].count"),
    ("slices.0.count", 2.0, "slices[0].count"),
    ("slices.0.count", True, "slices[0].count"),
    ("cluster.deletion_protection", "no", "cluster.deletion_protection"),
    ("cluster.deletion_protection", 0, "cluster.deletion_protection"),
    ("cluster.name", 12345678, "cluster.name"),
    ("cluster.labels", {"team": 7}, "cluster.labels.team"),
])
def test_a_scalar_of_another_yaml_type_is_refused_not_coerced(path: str, value: object, field: str) -> None:
    [problem] = _refusal(_edited(path, value))
    assert problem.field == field


@pytest.mark.parametrize("image", ["us-docker.pkg.dev/p/r/train:latest", "train:latest", "train"])
def test_an_image_that_floats_is_refused(image: str) -> None:
    [problem] = _refusal(_edited("workloads.1.image", image))
    assert problem.field == "workloads[1].image" and "not latest" in problem.valid


def test_latest_pinned_by_a_digest_is_an_exact_image() -> None:
    config.parse(_edited("workloads.1.image", "us-docker.pkg.dev/p/r/train:latest@sha256:" + "a" * 64))


# ---------------------------------------------------------------------------------------------- excerpts


def test_an_error_shows_a_bounded_excerpt_of_any_value() -> None:
    looped: list[object] = []
    looped.append(looped)
    for value in ("p" * 1_000_000, 10**5000, looped, {"k": ["v" * 500] * 500}):
        assert len(excerpt(value)) <= MAX_EXCERPT + 40
    assert excerpt("p" * 1_000_000).endswith("(1000000 characters)")
    [problem] = _refusal(_edited("project", "p" * 1_000_000))
    assert problem.field == "project" and len(str(problem)) < 400


@pytest.mark.parametrize(("written", "read"), [
    ('start_utc: "02:00"', 'start_utc: 12:30'),   # YAML 1.1: 750 (sexagesimal)
    ("hours: 6", "hours: 08"),                     # YAML 1.1: the string '08' (not octal)
])
def test_scalars_are_read_by_yaml_1_2_core_rules(written: str, read: str) -> None:
    """PyYAML resolves YAML 1.1; a user writes what YAML 1.2's core schema means
    (https://yaml.org/spec/1.2.2/#1032-tag-resolution): ``12:30`` a string, ``08``/``010`` base 10, ``no`` a string."""
    spec = config.parse(EXAMPLE_TEXT.replace(written, read))
    window = spec.cluster.maintenance_window
    assert window is not None and (window.start_utc, window.hours) in {("12:30", 6), ("02:00", 8)}
    assert reading.load_yaml("a: 010\nb: no\nc: on\nd: true\ne: 0x10", "t") == {
        "a": 10, "b": "no", "c": "on", "d": True, "e": "0x10"}


def test_a_label_value_no_is_the_word_no() -> None:
    spec = config.parse(_edited("cluster.labels", {"team": "PLACEHOLDER"}).replace("PLACEHOLDER", "no"))
    assert spec.cluster.labels["team"] == "no"
