"""The one stand-in in the loopback Cloud Build's steps (``tests/cloudbuild_server.py``): a ``docker`` CLI that
knows only the calls the kit's build steps make, and refuses any other, so a step script that asks Docker something
else fails the test.

- ``docker pull REF``: REF (a tag, ``tag@digest`` or ``repository@digest``) must be in the registry the server was
  given;
- ``docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' REF``: the image's ``RepoDigests``
  as Docker prints them (the familiar repository name, without ``docker.io/`` or the tag, ``@`` its digest);
- ``docker build --tag T --build-arg K=V .``: the Dockerfile read with BuildKit's parser (the ``dockerfile``
  package), its ``FROM`` resolved through its ``ARG`` defaults and the build args; a ``FROM`` by digest must name a
  digest the registry serves. The resolved ``FROM`` is written back to the state file for the test to assert on.

The state (``$FAKE_DOCKER_STATE``, JSON): ``registry`` (tag -> digest), ``fail_build``, and what it did.
"""

from __future__ import annotations

import json
import os
import re
import sys

import dockerfile

INSPECT_FORMAT = "{{range .RepoDigests}}{{println .}}{{end}}"


def _tag_and_digest(ref: str) -> tuple[str, str | None]:
    tag, _, digest = ref.partition("@")
    return tag, digest or None


def _familiar(tag: str) -> str:
    """``docker.io/rayproject/ray:2.60.0-py311`` -> ``rayproject/ray`` (Docker's familiar name)."""
    name = re.sub(r":[^/:]+$", "", tag)
    return name.removeprefix("docker.io/").removeprefix("library/")


def main(argv: list[str]) -> int:
    path = os.environ["FAKE_DOCKER_STATE"]
    with open(path) as f:
        state = json.load(f)
    registry: dict[str, str] = state["registry"]
    pulled: list[str] = state.setdefault("pulled", [])
    code = 0
    if argv[:1] == ["pull"] and len(argv) == 2:
        tag, digest = _tag_and_digest(argv[1])
        if tag not in registry or digest not in (None, registry[tag]):
            print(f"Error response from daemon: manifest for {argv[1]} not found: manifest unknown", file=sys.stderr)
            return 1
        pulled.append(argv[1])
        label = tag.rsplit("/", 1)[-1].partition(":")[2] or digest  # a reference by digest alone: its digest
        print(f"{label}: Pulling from {_familiar(tag)}\nDigest: {registry[tag]}\n"
              f"Status: Downloaded newer image for {argv[1]}")
    elif argv[:3] == ["image", "inspect", "--format"] and len(argv) == 5:
        if argv[3] != INSPECT_FORMAT or argv[4] not in pulled:
            print(f"fake docker: cannot answer image inspect {argv[3:]} (pulled: {pulled})", file=sys.stderr)
            return 1
        tag, _ = _tag_and_digest(argv[4])
        print(f"{_familiar(tag)}@{registry[tag]}")
    elif argv[:1] == ["build"]:
        code = _build(argv[1:], state, registry)
    else:
        print(f"fake docker: unknown call {argv}", file=sys.stderr)
        return 1
    with open(path, "w") as f:
        json.dump(state, f)
    return code


def _build(argv: list[str], state: dict, registry: dict[str, str]) -> int:
    args: dict[str, str] = {}
    tag = ""
    rest = list(argv)
    while rest and rest[0].startswith("--"):
        option, value = rest.pop(0), rest.pop(0)
        if option == "--tag":
            tag = value
        elif option == "--build-arg":
            key, _, val = value.partition("=")
            args[key] = val
        else:
            print(f"fake docker: unknown build option {option}", file=sys.stderr)
            return 1
    if rest != ["."] or not tag:
        print(f"fake docker: build wants --tag T [--build-arg K=V] . (got {argv})", file=sys.stderr)
        return 1
    defaults: dict[str, str] = {}
    base = ""
    for command in dockerfile.parse_file("Dockerfile"):
        if command.cmd == "ARG":
            key, _, val = command.value[0].partition("=")
            defaults[key] = val
        elif command.cmd == "FROM":
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m[1], defaults.get(m[1], "")), command.value[0])
    print(f"Step 1/4 : FROM {base}")
    base_tag, digest = _tag_and_digest(base)
    if base_tag not in registry or digest not in (None, registry[base_tag]):
        print(f"ERROR: pull access denied for {base}: manifest unknown", file=sys.stderr)
        return 1
    if state.get("fail_build"):
        print("ERROR: No matching distribution found for jax==0.0.0", file=sys.stderr)
        return 1
    print(f"Successfully tagged {tag}")
    state["built"] = {"tag": tag, "from": base}
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
