"""What of ``raytpu.images.json`` a stack's pods may run (issue 71 items 1 and 10): a team image built on an earlier
job image is not run (``raytpu images build`` builds it again), nor an image of another registry (a second config's
record in the same folder: another project or region)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raytpu.images import record

pytestmark = pytest.mark.unit

REG = "us-east5-docker.pkg.dev/prod-project/raytpu"
OTHER = "europe-west4-docker.pkg.dev/staging-project/raytpu"
OLD, NEW, TEAM = "a" * 64, "b" * 64, "c" * 64


def _write(folder: Path, images: dict[str, dict[str, str]]) -> Path:
    config = folder / "raytpu.yaml"
    config.write_text("")
    for entry in images.values():
        entry.setdefault("build", "projects/p/locations/l/builds/1")
    (folder / record.RECORD_NAME).write_text(json.dumps({"images": images}))
    return config


def test_a_team_image_built_on_an_earlier_job_image_is_not_run(tmp_path: Path) -> None:
    config = _write(tmp_path, {
        "job": {"ref": f"{REG}/job@sha256:{NEW}"},
        "team-0123456789abcdef": {"ref": f"{REG}/team-0123456789abcdef@sha256:{TEAM}",
                                  "base": f"{REG}/job@sha256:{OLD}"},
        "team-fedcba9876543210": {"ref": f"{REG}/team-fedcba9876543210@sha256:{TEAM}",
                                  "base": f"{REG}/job:2.60@sha256:{NEW}"}})
    refs = record.load_refs(config)
    assert sorted(refs) == ["job", "team-fedcba9876543210"]  # the one on the current job image stays


def test_a_team_image_whose_base_cannot_be_checked_is_built_again(tmp_path: Path) -> None:
    """A record from before bases were kept, or no job image recorded: nothing proves it is on the current job image."""
    team = {"ref": f"{REG}/team-0123456789abcdef@sha256:{TEAM}"}
    config = _write(tmp_path, {"job": {"ref": f"{REG}/job@sha256:{NEW}"}, "team-0123456789abcdef": dict(team)})
    assert sorted(record.load_refs(config)) == ["job"]
    config = _write(tmp_path, {"team-0123456789abcdef": {**team, "base": f"{REG}/job@sha256:{NEW}"}})
    assert record.load_refs(config) == {}


def test_only_the_stacks_registry_counts(tmp_path: Path) -> None:
    config = _write(tmp_path, {"job": {"ref": f"{OTHER}/job@sha256:{NEW}"},
                               "serve": {"ref": f"{REG}/serve@sha256:{OLD}"}})
    assert sorted(record.load_refs(config, REG)) == ["serve"]
    assert sorted(record.load_refs(config, REG + "/")) == ["serve"]
    assert sorted(record.load_refs(config)) == ["job", "serve"]  # no stack (synth): the record as written
    assert record.load_refs(config, REG.rsplit("/", 1)[0]) == {}  # a prefix of a repository is not the repository
