"""A workload's ``requirements`` (a pip requirements file inside ``code``): checked, then resolved once against every
pin of the kit's job image into a lock named by its hash, cached so the next submit resolves nothing.

The lock is the one truth both places install: the emulated slice's venv per lock (:mod:`raytpu.teamcode.envs`) and
GKE (docs/DESIGN.md, "A team's libraries"). A clash with the image's pins (``jax==0.4.30``) or a package no index
has is refused here, exit 2 naming the field, before anything is built, uploaded or applied.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput

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


@dataclass(frozen=True)
class ImageLock:
    """Every pin of the image a team's lock is resolved against and layered on, handed in by its owner
    (:func:`raytpu.images.team.base_lock`): the lock file (uv's constraints), its text, and how errors name it."""

    path: Path
    text: str
    shown: str

    @property
    def pins(self) -> dict[str, str]:
        return pins(self.text)


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


INCLUDES = ("-r", "--requirement")
"""Lines that include another requirements file: honoured, the file read from the code folder into the one text
resolved (its content is part of the lock's cache key)."""
MAX_INCLUDE_DEPTH = 5
FROM_INDEX = ("every line a package from PyPI, `name` with optional extras, version specifiers and markers (the image "
              "build and the emulated slice's venv both install the lock from PyPI); put what PyPI lacks into your own "
              "image (workloads[].image)")
REFUSED_OPTIONS = {
    "-c": "a constraints file: put those pins in the requirements file (the kit resolves against its image's pins)",
    "--constraint": "a constraints file: put those pins in the requirements file",
    "-e": "an editable install: the project's own code ships as `code` (its folder is the job's working folder)",
    "--editable": "an editable install: the project's own code ships as `code`",
    "-i": "another index: the image build and the venv install from PyPI only, so the index would resolve here and "
          "the same names be fetched from PyPI there (dependency confusion)",
    "--index-url": "another index: the image build and the venv install from PyPI only (dependency confusion)",
    "--extra-index-url": "another index: the image build and the venv install from PyPI only (dependency confusion)",
    "-f": "a folder or page of archives: the image build cannot see it",
    "--find-links": "a folder or page of archives: the image build cannot see it",
    "--no-index": "no index: the kit installs the lock from PyPI",
}
"""Option lines the kit refuses, each with why (issue 71 item 2); any other option line is refused as unknown."""


def line_problems(field: str, folder: Path, relative: str, depth: int = 0) -> list[InvalidInput]:
    """Every line the kit would not honour on both sides: a direct URL, a VCS or local path, ``--hash``, another index,
    an editable, a constraints file, an unknown option; ``-r FILE`` is followed (inside the code folder)."""
    from packaging.requirements import InvalidRequirement, Requirement

    found: list[InvalidInput] = []
    text = (folder / relative).read_text(encoding="utf-8")
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        where = f"{relative}:{number}: {line[:120]}"
        if line.startswith("-"):
            option, _, value = line.replace("=", " ", 1).partition(" ")
            if option in INCLUDES:
                found += _include_problems(field, folder, relative, value.strip(), where, depth)
            else:
                why = REFUSED_OPTIONS.get(option, f"the option {option}, which the kit does not carry to the image "
                                          "build and the venv")
                found.append(errors.invalid_value(field, where, f"is {why}", FROM_INDEX))
            continue
        if "--hash" in line:
            found.append(errors.invalid_value(field, where, "pins a hash, which neither the image build nor the "
                                              "venv checks (they install the lock's name==version)",
                                              "the line without --hash (the lock pins the exact version)"))
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            found.append(errors.invalid_value(field, where, "is not a package requirement (a path, a URL or a "
                                              "VCS link installs what no index serves)", FROM_INDEX))
            continue
        if req.url:
            found.append(errors.invalid_value(field, where, f"installs {req.name} from {req.url[:80]}, which "
                                              "neither the image build nor the venv fetches", FROM_INDEX))
    return found


def _include_problems(field: str, folder: Path, relative: str, included: str, where: str,
                      depth: int) -> list[InvalidInput]:
    if depth >= MAX_INCLUDE_DEPTH:
        return [errors.invalid_value(field, where, f"includes files more than {MAX_INCLUDE_DEPTH} deep",
                                     "fewer nested -r files")]
    target = str(Path(relative).parent / included) if included else ""
    problems = file_problems(field, folder, target)
    if problems:
        return [errors.invalid_value(field, where, f"includes {included or '(nothing)'}, which is not a file "
                                     "inside the code folder", "-r FILE, a path relative to the requirements "
                                     "file, inside `code`")]
    return line_problems(field, folder, target, depth + 1)


def expanded(folder: Path, relative: str, depth: int = 0) -> str:
    """The requirements text with every ``-r FILE`` replaced by that file's (what is resolved, and keyed)."""
    out = []
    for raw in (folder / relative).read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        option, _, value = line.replace("=", " ", 1).partition(" ")
        if option in INCLUDES and depth < MAX_INCLUDE_DEPTH:
            out.append(expanded(folder, str(Path(relative).parent / value.strip()), depth + 1))
        else:
            out.append(raw)
    return "\n".join(out) + "\n"


def clash_problems(field: str, text: str, image: ImageLock) -> list[InvalidInput]:
    """Each line asking for a version of a package ``image`` pins that the pin does not satisfy (name, both
    versions). Transitive clashes are uv's to find (:func:`resolve`)."""
    from packaging.requirements import InvalidRequirement, Requirement

    pinned = image.pins
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
                f"image's pins: {image.shown}"))
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
    """Where locks are kept across submits: ``$XDG_CACHE_HOME/raytpu/locks`` (``~/.cache`` by default).

    A folder there that cannot be written is an error (:func:`cache_refused`), not a resolve without the cache: the
    kept lock is what keeps a team's image name (``team-<hash>``) the same from ``raytpu images build`` to a later
    ``submit`` (resolving again may pick a newer release), and a team image's build context is written beside it."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "raytpu" / "locks"


def cache_refused(folder: Path, exc: OSError) -> errors.RaytpuError:
    """The kit's cache ``folder`` (under ``$XDG_CACHE_HOME``, else ``~/.cache``) refused a write: one error line.
    A full disk or quota is RuntimeFailure (exit 1); a file where a folder belongs, a read-only or another user's
    folder is the environment's bad value, InvalidInput naming ``XDG_CACHE_HOME`` (else ``HOME``), exit 2 as
    :mod:`raytpu.console.machine` names a bad ``TMPDIR`` or ``HOME``."""
    where = f"{errors.excerpt(str(folder), 120, tail=True)}: {exc.strerror or exc}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return errors.RuntimeFailure(f"requirements: cannot keep the lock in the kit's cache ({where})",
                                     "free space on that disk, or XDG_CACHE_HOME naming a folder on another")
    if os.environ.get("XDG_CACHE_HOME"):
        return errors.invalid_value("XDG_CACHE_HOME", os.environ["XDG_CACHE_HOME"],
                                    f"cannot hold the kit's cache ({where})",
                                    "a folder you can write (made if missing; the kit keeps requirement locks in "
                                    "$XDG_CACHE_HOME/raytpu), or XDG_CACHE_HOME unset (~/.cache)")
    return errors.invalid_value("HOME", os.path.expanduser("~"), f"cannot hold the kit's cache ({where})",
                                "a home folder you can write, or XDG_CACHE_HOME naming a folder you can write (the "
                                "kit keeps requirement locks in ~/.cache/raytpu)")


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


def run_uv(cmd: list[str], timeout_s: float, **popen: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` for uv that an interrupt never leaves running: uv starts with Ctrl-C held (one inside
    ``Popen`` would leave a started uv unknown, writing on), and is killed and waited for on any exception before the
    caller removes what it wrote; a uv that Ctrl-C ended first (the terminal signals the whole group) is the
    interrupt, never a failure of uv's (issue 68). TimeoutExpired past ``timeout_s``."""
    from raytpu.core.common.interrupt import interrupts_held

    proc = None
    try:
        with interrupts_held():
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        if proc is not None:
            proc.kill()
            proc.wait()
        raise
    if proc.returncode == -signal.SIGINT:
        raise KeyboardInterrupt
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def resolve(field: str, folder: Path, relative: str, *, image: ImageLock, cache: Path | None = None) -> Lock:
    """The lock of ``folder/relative`` against every pin of ``image``: from the cache when the same file was
    resolved against the same image before, else through ``uv pip compile`` (the image's lock as constraints,
    its interpreter and platform). InvalidInput (exit 2, ``field``) for a clash or a package no index has."""
    errors.raise_found(line_problems(field, folder, relative))
    text = expanded(folder, relative)
    pinned = image.pins
    errors.raise_found(clash_problems(field, text, image))
    key = hashlib.sha256("\0".join((text, image.text, PYTHON_VERSION, PLATFORM, _uv_version())).encode()
                         ).hexdigest()[:24]
    cache = cache or cache_dir()
    kept = cache / f"{key}.lock"
    source = cache / f".{key}.{os.getpid()}.in"
    out = cache / f".{key}.{os.getpid()}.out"
    try:
        if kept.is_file():
            return _lock(kept.read_text(), pinned)
        cache.mkdir(parents=True, exist_ok=True)
        source.write_text(text)
    except OSError as exc:  # a read-only HOME, XDG_CACHE_HOME naming a file, a full disk
        raise cache_refused(cache, exc) from exc
    try:
        done = run_uv(
            # --no-config: a uv.toml or [tool.uv] of the team's folder (the cwd) would resolve against an index
            # the image build never uses. Source: uv 0.13 `--no-config`
            [uv_binary(), "pip", "compile", "--quiet", "--no-config", "--no-header", "--python-version", PYTHON_VERSION,
             "--python-platform", PLATFORM, "--constraint", str(image.path), str(source), "-o", str(out)],
            RESOLVE_TIMEOUT_S, cwd=folder)
        if done.returncode != 0:
            if unreachable(done.stderr):
                raise errors.RuntimeFailure(f"requirements: cannot reach the package index to resolve {relative}: "
                                            f"{_uv_reason(done.stderr)}", uv_valid(done.stderr))
            if uv_environment(done.stderr):  # uv's cache or a full disk, not the file
                raise errors.RuntimeFailure(f"requirements: uv could not resolve {relative}: "
                                            f"{_uv_reason(done.stderr)}", uv_valid(done.stderr))
            raise errors.invalid_value(field, relative, f"does not resolve against the kit's image pins: "
                                       f"{_uv_reason(done.stderr)}", VALID)
        lock = out.read_text()
        out.replace(kept)
        return _lock(lock, pinned)
    except subprocess.TimeoutExpired as exc:
        raise errors.RuntimeFailure(f"requirements: uv took over {RESOLVE_TIMEOUT_S:.0f} s to resolve {relative}",
                                    "a reachable package index (PyPI), then submit again") from exc
    except OSError as exc:  # the cache filled up while uv wrote the lock
        raise cache_refused(cache, exc) from exc
    finally:
        source.unlink(missing_ok=True)
        out.unlink(missing_ok=True)


def _uv_version() -> str:
    """The uv that resolves (part of a lock's cache key: another uv may resolve the same file otherwise)."""
    try:
        from importlib.metadata import version

        return version("uv")
    except Exception:  # uv from PATH, not the pinned package: its path stands for it
        return uv_binary()


def _lock(text: str, pinned: dict[str, str]) -> Lock:
    return Lock(text, {name: version for name, version in pins(text).items() if pinned.get(name) != version})


def _uv_reason(stderr: str) -> str:
    """uv's own explanation, on one bounded line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.strip().startswith("hint")]
    reason = " ".join(lines).replace("×", "").strip()
    return (reason[:400] + "...") if len(reason) > 400 else reason or "uv failed"


UV_CAUSES = (
    (("Failed to initialize cache",), "UV_CACHE_DIR (else XDG_CACHE_HOME, else HOME) naming a folder this user can "
                                      "write (uv's cache)"),
    (("No space left on device", "os error 28"), "free space where the run folder (--dir) and uv's cache are"),
    (("Read-only file system", "os error 30"), "a writable run folder (--dir) and uv cache (UV_CACHE_DIR)"),
    (("Permission denied", "os error 13"), "a run folder and uv cache this user can write"),
)
NETWORK_WORDS = ("dns error", "error sending request", "Connection refused", "connection error", "timed out",
                 "Could not connect", "Failed to fetch", "failed to lookup address")
"""What uv (its Rust I/O and HTTP errors) prints for each cause."""


def unreachable(stderr: str) -> bool:
    """uv failed because no package index answered (offline, DNS, a proxy), not because of what was asked."""
    return any(word.lower() in stderr.lower() for word in NETWORK_WORDS)


def uv_environment(stderr: str) -> bool:
    """uv failed for a cause of this machine (:data:`UV_CAUSES`: its cache, a full or read-only disk), not the file."""
    return any(word.lower() in stderr.lower() for words, _valid in UV_CAUSES for word in words)


def uv_valid(stderr: str) -> str:
    """What to do about a failed uv run, from what it printed; a reachable index only when that is what it says."""
    for words, valid in UV_CAUSES:
        if any(word.lower() in stderr.lower() for word in words):
            return f"{valid}, then submit again"
    if unreachable(stderr):
        return "a reachable package index (PyPI), then submit again"
    return "what uv's message above names, then submit again"
