"""Issue 70 part 3: each name of the package's face (tests/test_face.py) loads from its module and says it is public.
The heavy tier: loading them loads the CDK Terrain bindings, whose jsii runtime starts node (5 s a process)."""

from __future__ import annotations

import pytest
from test_face import FACE

import raytpu

pytestmark = pytest.mark.heavy

RE_EXPORTED = {"App"}
"""CDK Terrain's own class, offered as it is (its docstring is cdktn's)."""


def test_the_face_is_about_ten_names_each_from_its_module() -> None:
    assert 8 <= len(FACE) <= 14
    for name in FACE:
        value = getattr(raytpu, name)
        assert getattr(value, "__name__", name) == name


@pytest.mark.parametrize("name", [n for n in FACE if n not in RE_EXPORTED])
def test_each_name_says_in_its_docstring_that_it_is_public(name: str) -> None:
    assert f"Public API: ``from raytpu import {name}``." in (getattr(raytpu, name).__doc__ or "")


def test_app_is_cdktn_app() -> None:
    from cdktn import App

    assert raytpu.App is App
