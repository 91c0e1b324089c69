"""The images record ``raytpu.images.json`` beside the config: each kit image's digest as built. ``raytpu images build``
writes it (atomically, after a build succeeded); :func:`load_refs` gives the manifest builders every pod's image by
digest. Format: docs/FACTS.md#images-record. Standard library only."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput

RECORD_NAME = "raytpu.images.json"
"""The record's file name, in the config's folder."""

DIGEST_REF = re.compile(r"^[a-z0-9][a-z0-9.-]*(?::[0-9]+)?(?:/[a-z0-9][a-z0-9._-]*)+@sha256:[0-9a-f]{64}$")
"""``REGISTRY/IMAGE@sha256:<64 hex>``: a Docker reference by digest. Source: distribution/reference ``reference.go``."""
REF_RULE = "REGISTRY/IMAGE@sha256:<64 lowercase hex digits>, as `raytpu images build` writes it"
BASE_REF = re.compile(r"^[a-z0-9][a-z0-9.-]*(?::[0-9]+)?(?:/[a-z0-9][a-z0-9._-]*)+"
                      r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[0-9a-f]{64}$")
"""``REGISTRY/IMAGE[:TAG]@sha256:<64 hex>``: a base kept with its tag for the reader (the digest is what is pulled).
Source: distribution/reference ``reference.go``."""
TEAM_NAME = re.compile(r"^team-[0-9a-f]{16}$")
"""A team's image per lock (raytpu.images.team.NAME)."""
BASE_RULE = "REGISTRY/IMAGE[:TAG]@sha256:<64 lowercase hex digits>, the base as the build resolved it"
FIELDS = {"ref", "build", "versions", "base"}


@dataclass(frozen=True)
class BuiltImage:
    """One recorded build: ``ref`` (by digest), ``build`` (``projects/P/locations/L/builds/ID``), the ``versions`` its
    definition records, ``base`` (FROM, by the resolved digest; None in a record from before)."""

    ref: str
    build: str
    versions: Mapping[str, str] = field(default_factory=dict)
    base: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ref": self.ref, "build": self.build, "versions": dict(self.versions)}
        if self.base is not None:
            out["base"] = self.base
        return out


def record_path(config_path: str | Path) -> Path:
    """``raytpu.images.json`` in the folder of ``config_path``."""
    return Path(config_path).resolve().parent / RECORD_NAME


def ref_problems(field_name: str, value: object) -> list[InvalidInput]:
    """The problems of one digest reference (empty when it is one)."""
    return errors.unmatched(field_name, value, DIGEST_REF, "is not an image reference by digest", REF_RULE)


def load(config_path: str | Path) -> dict[str, BuiltImage]:
    """Every recorded image by name; none when the file is missing. InvalidInputs when unreadable or malformed, each
    naming its field (``raytpu.images.json: images.job.ref``) and value."""
    from raytpu.images.definitions import IMAGES

    path = record_path(config_path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(str(path), f"cannot be read ({exc})", "the JSON `raytpu images build` writes, or no "
                           "file") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(str(path), f"is not JSON ({exc.msg} at line {exc.lineno})",
                           "the JSON `raytpu images build` writes; delete the file and build again") from exc
    found: list[InvalidInput] = []
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(data, dict) or set(data) != {"images"} or not isinstance(images, dict):
        raise InvalidInput(f"{path}: images", f"{text[:80]!r} is not a record", '{"images": {NAME: {"ref": ...}}}')
    built: dict[str, BuiltImage] = {}
    for name, entry in images.items():
        where = f"{path}: images.{name}"
        if name not in IMAGES and not TEAM_NAME.match(name):  # a team's image per lock: raytpu.images.team
            found.append(errors.invalid_choice(where, name, sorted(IMAGES), " (the kit's images)"))
            continue
        if not isinstance(entry, dict) or not {"ref", "build"} <= set(entry) <= FIELDS:
            found.append(errors.invalid_value(where, entry, "is not a built image",
                                              '{"ref": ..., "build": ..., "versions": {...}, "base": ...}'))
            continue
        found += ref_problems(f"{where}.ref", entry["ref"])
        if not isinstance(entry["build"], str) or not entry["build"]:
            found.append(errors.invalid_value(f"{where}.build", entry["build"], "is not a build name",
                                              "projects/P/locations/L/builds/ID"))
        versions = entry.get("versions", {})
        if not isinstance(versions, dict) or not all(isinstance(v, str) for v in versions.values()):
            found.append(errors.invalid_value(f"{where}.versions", versions, "is not a table of versions",
                                              '{"ray": "2.60.0", ...}'))
            versions = {}
        base = entry.get("base")
        if "base" in entry and not (isinstance(base, str) and BASE_REF.match(base)):
            found.append(errors.invalid_value(f"{where}.base", base, "is not a base image by digest", BASE_RULE))
            base = None
        built[name] = BuiltImage(entry["ref"], entry["build"], versions, base)
    errors.raise_found(found)
    return built


TEAM_BASE = "job"
"""The kit's image every team image is layered on (:data:`raytpu.images.team.BASE_IMAGE`)."""


def stale(name: str, image: BuiltImage, built: Mapping[str, BuiltImage]) -> bool:
    """A team image built on a job image other than the one recorded now (the kit upgraded, or the job image was
    rebuilt): its pods would run the old Ray, JAX and libtpu under the new ``rayVersion`` and core zip."""
    if not TEAM_NAME.match(name):
        return False
    job = built.get(TEAM_BASE)
    if job is None or image.base is None:  # nothing to check it against (or a record from before bases): built again
        return True
    return image.base.partition("@")[2] != job.ref.partition("@")[2]


def load_refs(config_path: str | Path, registry: str | None = None) -> dict[str, str]:
    """Image name -> reference by digest from the record beside ``config_path`` (``{}`` without one), less what no pod
    may run: a team image built on an earlier job image (:func:`stale`: ``raytpu images build`` builds it again), and,
    given the stack's ``registry``, an image outside it (another project's or region's record in the same folder).
    InvalidInput(s), exit 2, naming the field of a malformed record. Public API: ``from raytpu import load_refs``."""
    built = load(config_path)
    return {name: image.ref for name, image in built.items()
            if not stale(name, image, built) and (not registry or in_registry(image.ref, registry))}


def in_registry(ref: str, registry: str) -> bool:
    """``ref`` (``REGISTRY/NAME@sha256:...``) is an image of the repository ``registry`` itself."""
    return ref.partition("@")[0].rsplit("/", 1)[0] == registry.rstrip("/")


def save(config_path: str | Path, name: str, image: BuiltImage) -> Path:
    """Records ``image`` as ``name``'s build, keeping the others: written beside the old file and renamed over it, so a
    reader sees the old record or the new, never half."""
    errors.raise_found(ref_problems("ref", image.ref) + (
        [] if image.base is None or BASE_REF.match(image.base)
        else [errors.invalid_value("base", image.base, "is not a base image by digest", BASE_RULE)]))
    path = record_path(config_path)
    images = {n: b.to_json() for n, b in load(config_path).items()}
    images[name] = image.to_json()
    text = json.dumps({"images": dict(sorted(images.items()))}, indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{RECORD_NAME}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


VERSION_COLUMNS = ("image", "ref", "base digest", "ray", "jax/libtpu or vllm", "protobuf")


def versions_table(built: dict[str, BuiltImage]) -> str:
    """What each image built now runs, one row per image: its digest, its base's, and the versions that matter
    (the serving image's vLLM; the job image's JAX/libtpu)."""
    rows = [VERSION_COLUMNS]
    for name, image in built.items():
        v = image.versions
        stack = (f"vllm {v['vllm'][:12]}" if "vllm" in v
                 else f"jax {v.get('jax', '-')} / libtpu {v.get('libtpu', '-')}")
        base = image.base.rsplit("@", 1)[1] if image.base else "-"
        rows.append((name, image.ref.rsplit("@", 1)[0] + "@" + image.ref.rsplit("@", 1)[1][:19], base[:19],
                     v.get("ray", "-"), stack, v.get("protobuf", "-")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(VERSION_COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
