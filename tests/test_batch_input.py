"""The batch program reads its input once: a JSON lines input's columns come from its first row (read here, not by a
Ray ``schema()`` that reads a whole file), and its rows are counted as they stream into the engine (no ``count()``).
No Ray cluster: the columns are read with pyarrow's file system; ``bench/batch_input.py`` runs the whole input path
(with the engine left out) beside the revision that counted and read the schema with Ray, and checks rows in = out."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from raytpu.core.common.errors import InvalidInput
from raytpu.workloads import batch

pytestmark = pytest.mark.unit


class NoSchema:
    """A dataset whose ``schema()`` must not be called (JSON lines)."""

    def schema(self) -> Any:
        raise AssertionError("schema() read the input")


def lines(*rows: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.mark.parametrize(("files", "columns"), [
    ({"in.jsonl": lines({"id": 1, "prompt": "a"}, {"id": 2, "prompt": "b", "extra": 1})}, ("id", "prompt")),
    ({"in.jsonl": "\n\n" + lines({"prompt": "a", "topic": "x"})}, ("prompt", "topic")),
    ({"in.jsonl/b.jsonl": lines({"b": 1}), "in.jsonl/a.jsonl": lines({"prompt": "a"}),
      "in.jsonl/_SUCCESS": "", "in.jsonl/.hidden": "x"}, ("prompt",)),
])
def test_a_jsonl_inputs_columns_are_its_first_rows_keys(tmp_path: Path, files: dict[str, str],
                                                         columns: tuple[str, ...]) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert batch.input_columns(str(tmp_path / "in.jsonl"), NoSchema()) == columns


def test_a_gzipped_jsonl_file_is_read_through_its_compression(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").mkdir()
    (tmp_path / "in.jsonl" / "part.jsonl.gz").write_bytes(gzip.compress(lines({"prompt": "a"}).encode()))
    assert batch.input_columns(str(tmp_path / "in.jsonl"), NoSchema()) == ("prompt",)


BAD = [
    ("empty file", {"in.jsonl": ""}, "does not begin with a JSON object row"),
    ("blank lines", {"in.jsonl": "\n  \n"}, "does not begin with a JSON object row"),
    ("a list row", {"in.jsonl": lines([1, 2])}, "does not begin with a JSON object row"),
    ("not JSON", {"in.jsonl": "prompt: a\n"}, "does not begin with a JSON object row"),
    ("empty folder", {"in.jsonl/_SUCCESS": ""}, "is a folder with no files"),
]


@pytest.mark.parametrize(("case", "files", "problem"), BAD, ids=[b[0] for b in BAD])
def test_an_unreadable_jsonl_input_is_refused_naming_input(tmp_path: Path, case: str, files: dict[str, str],
                                                            problem: str) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    with pytest.raises(InvalidInput) as caught:
        batch.input_columns(str(tmp_path / "in.jsonl"), NoSchema())
    assert str(caught.value).startswith("input: ") and problem in str(caught.value)
    assert "JSON lines, one object a row" in str(caught.value)
