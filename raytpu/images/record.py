"""The record of built images: ``raytpu.images.json`` beside the config, image name -> digest reference.

A minimal reader of the interface the build side owns (``raytpu images build`` writes the file); the lead keeps
that side's version at merge.
"""

from __future__ import annotations

import json
from pathlib import Path

RECORD_NAME = "raytpu.images.json"


def load_refs(config_path: str | Path) -> dict[str, str]:
    """Image name -> ``REGISTRY/IMAGE@sha256:<64 hex>`` from ``raytpu.images.json`` beside ``config_path``;
    {} when the file is missing."""
    path = Path(config_path).resolve().parent / RECORD_NAME
    if not path.is_file():
        return {}
    return {str(k): str(v) for k, v in json.loads(path.read_text()).items()}
