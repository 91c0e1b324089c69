"""A workload's ``requirements`` (a pip requirements file inside ``code``): checked, then resolved once against every
pin of the kit's job image into a lock named by its hash, cached so the next submit resolves nothing.

The lock is the one truth both places install: the emulated slice's venv per lock (:mod:`raytpu.teamcode.envs`) and
GKE (docs/DESIGN.md, "A team's libraries"). A clash with the image's pins (``jax==0.4.30``) or a package no index
has is refused here, exit 2 naming the field, before anything is built, uploaded or applied.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput

IMAGE_LOCK = Path(__file__).resolve().parents[1] / "images" / "job" / "requirements.lock"
"""Every pin of the kit's job image (what a team's lock is resolved against)."""
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_31"
"""The job image's interpreter and platform (the image lock's header: libtpu ships manylinux_2_31 wheels only)."""
MAX_REQUIREMENTS_BYTES = 64 * 1024
RESOLVE_TIMEOUT_S = 300.0
VALID = "a pip requirements file inside `code` (e.g. requirements.txt) naming what the project needs beyond the " \
        "kit's image, e.g. optax>=0.2"
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def normalized(name: str) -> str:
    """A distribution name as indexes compare it. Source: PEP 503 (normalized names)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """``{normalized name: version}`` of a ``uv pip compile`` lock (``name==version`` lines)."""
    found = {}
    for line in text.splitlines():
        if match := _PIN.match(line.strip()):
            found[normalized(match.group(1))] = match.group(2).split(";")[0].strip()
    return found


def image_pins() -> dict[str, str]:
    return pins(IMAGE_LOCK.read_text())


def file_problems(field: str, folder: Path, relative: object) -> list[InvalidInput]:
    """The file is a relative path inside ``folder`` (also after links) and a readable text file of bounded size."""
    if not isinstance(relative, str) or not relative.strip():
        return [errors.invalid_value(field, relative, "is not a file path", VALID)]
    path = Path(relative)
    if path.is_absolute() or ".." in path.parts:
        return [errors.invalid_value(field, relative, "is outside the code folder", VALID)]
    full = folder / path
    try:
        inside = full.resolve(strict=True).is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        return [errors.invalid_value(field, relative, f"is not a file in code ({folder})", VALID)]
    if not inside:
        return [errors.invalid_value(field, relative, "links outside the code folder", VALID)]
    if not full.is_file():
        return [errors.invalid_value(field, relative, f"is not a file in code ({folder})", VALID)]
    if full.stat().st_size > MAX_REQUIREMENTS_BYTES:
        return [errors.invalid_value(field, relative, f"is over {MAX_REQUIREMENTS_BYTES // 1024} KiB", VALID)]
    try:
        full.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return [errors.invalid_value(field, relative, "is not readable UTF-8 text", VALID)]
    return []


def clash_problems(field: str, text: str, pinned: dict[str, str]) -> list[InvalidInput]:
    """Each line asking for a version of a package the image pins that the pin does not satisfy (name, both
    versions). Transitive clashes are uv's to find (:func:`resolve`)."""
    from packaging.requirements import InvalidRequirement, Requirement

    found = []
    for line in _lines(text):
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue  # an option line or a spelling uv reports
        have = pinned.get(normalized(req.name))
        if have is not None and req.specifier and not req.specifier.contains(have, prereleases=True):
            found.append(errors.invalid_value(
                field, line, f"asks for {req.name}{req.specifier}, but the kit's image pins {req.name}=={have}",
                f"{req.name} left out (the image's {have} serves the project) or a range holding {have}; the "
                f"image's pins: {IMAGE_LOCK.name} of raytpu/images/job"))
    return found


def _lines(text: str) -> list[str]:
    """The requirement lines (comments, blanks and option lines such as ``-r``/``--index-url`` left out)."""
    out = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            out.append(line)
    return out


@dataclass(frozen=True)
class Lock:
    """A resolved lock: its text (``uv pip compile`` output), and what it adds to the image (``extras``)."""

    text: str
    extras: dict[str, str]

    @property
    def digest(self) -> str:
        """The lock's name: the first 16 hex digits of its extras' sha256 (the same extras, the same name)."""
        body = "".join(f"{name}=={version}\n" for name, version in sorted(self.extras.items()))
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def extras_text(self) -> str:
        """The pins the image lacks, one ``name==version`` a line (what a venv per lock or an image installs)."""
        return "".join(f"{name}=={version}\n" for name, version in sorted(self.extras.items()))


def cache_dir() -> Path:
    """Where locks are kept across submits: ``$XDG_CACHE_HOME/raytpu/locks`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "raytpu" / "locks"


def uv_binary() -> str:
    """The uv the kit runs: beside this interpreter (a venv's bin/), the ``uv`` package's, or on ``PATH``."""
    beside = Path(sys.executable).with_name("uv")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found is None:
        raise errors.RuntimeFailure("requirements: uv is not installed beside the kit (it resolves a workload's "
                                    "requirements)", "pip install uv (the kit pins it in requirements.lock)")
    return found


def resolve(field: str, folder: Path, relative: str, *, cache: Path | None = None) -> Lock:
    """The lock of ``folder/relative`` against every pin of the image: from the cache when the same file was
    resolved against the same image before, else through ``uv pip compile`` (the image's lock as constraints,
    its interpreter and platform). InvalidInput (exit 2, ``field``) for a clash or a package no index has."""
    text = (folder / relative).read_text(encoding="utf-8")
    image = IMAGE_LOCK.read_text()
    pinned = pins(image)
    errors.raise_found(clash_problems(field, text, pinned))
    key = hashlib.sha256("\0".join((text, image, PYTHON_VERSION, PLATFORM)).encode()).hexdigest()[:24]
    cache = cache or cache_dir()
    kept = cache / f"{key}.lock"
    if kept.is_file():
        return _lock(kept.read_text(), pinned)
    cache.mkdir(parents=True, exist_ok=True)
    source = cache / f".{key}.{os.getpid()}.in"
    source.write_text(text)
    out = cache / f".{key}.{os.getpid()}.out"
    try:
        done = subprocess.run(
            [uv_binary(), "pip", "compile", "--quiet", "--no-header", "--python-version", PYTHON_VERSION,
             "--python-platform", PLATFORM, "--constraint", str(IMAGE_LOCK), str(source), "-o", str(out)],
            capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S, cwd=folder, check=False)
        if done.returncode != 0:
            raise errors.invalid_value(field, relative, f"does not resolve against the kit's image pins: "
                                       f"{_uv_reason(done.stderr)}", VALID)
        lock = out.read_text()
        out.replace(kept)
        return _lock(lock, pinned)
    except subprocess.TimeoutExpired as exc:
        raise errors.RuntimeFailure(f"requirements: uv took over {RESOLVE_TIMEOUT_S:.0f} s to resolve {relative}",
                                    "a reachable package index (PyPI), then submit again") from exc
    finally:
        source.unlink(missing_ok=True)
        out.unlink(missing_ok=True)


def _lock(text: str, pinned: dict[str, str]) -> Lock:
    return Lock(text, {name: version for name, version in pins(text).items() if pinned.get(name) != version})


def _uv_reason(stderr: str) -> str:
    """uv's own explanation, on one bounded line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.strip().startswith("hint")]
    reason = " ".join(lines).replace("×", "").strip()
    return (reason[:400] + "...") if len(reason) > 400 else reason or "uv failed"
