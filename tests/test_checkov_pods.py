"""checkov's Kubernetes checks on every pod the kit emits: 0 failures except the ``kubernetes`` skips of
``checkov-skips.yaml``, each with its reason.

Scanned, as Pods next to the NetworkPolicies that guard them (checkov's graph check CKV2_K8S_6 needs both): every
pod template (head, TPU workers, RayJob submitter) of every KubeRay object ``raytpu submit`` and ``raytpu smoke``
build (:mod:`emitted`: the examples and a matrix of kinds, slice shapes, Standard and Autopilot, each serving
endpoint) and of every object the synthesized workloads stacks apply (``kubernetes_manifest``, Terraform tokens
and all). One checkov run over one file per source.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import checkov_skips
import emitted
import pytest
import yaml
from _synth import EXAMPLES, checkov_bin, resources, synth_config

from raytpu.core.manifests import kuberay

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

Scanned = dict[str, tuple[str, list[dict[str, Any]]]]
"""source -> (cluster mode, its documents: Pods and NetworkPolicies)."""


def _documents(objs: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """(KubeRay object, its NetworkPolicy) pairs -> the policies and the Pods of every template."""
    docs = []
    for obj, policy in objs:
        docs.append(policy)
        docs += [pod for _, pod in emitted.pods_of(obj)]
    return docs


def scanned_sources() -> Scanned:
    """Everything scanned, by source."""
    found: Scanned = {}
    for item in emitted.every_object():
        found.setdefault(item.source, (item.mode, []))[1].extend(
            _documents([(item.obj, kuberay.network_policy(item.obj, item.spec))]))
    for mode in ("standard", "autopilot"):
        _, stacks = synth_config(str(EXAMPLES[mode]))
        workloads = next(s for sid, s in stacks.items() if sid.endswith("-workloads"))
        manifests = [m["manifest"] for m in resources(workloads, "kubernetes_manifest").values()]
        policies = {m["spec"]["podSelector"]["matchLabels"]["raytpu.dev/ray-cluster"]: m
                    for m in manifests if m["kind"] == "NetworkPolicy"}
        objs = [(m, policies[f"service-{m['metadata']['name']}"]) for m in manifests if m["kind"] == "RayService"]
        assert objs, f"the {mode} workloads stack applies no RayService"
        found[f"stack-{mode}"] = (mode, _documents(objs))
    return found


@pytest.fixture(scope="module")
def scan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Scanned, dict[str, list[tuple[str, dict[str, Any]]]]]:
    """checkov over every source at once, no skips: (sources, source -> [(check id, failing document)])."""
    checkov = checkov_bin()
    if checkov is None:
        pytest.fail("checkov not found: set RAYTPU_CHECKOV or install it in .venv-checkov")
    directory = tmp_path_factory.mktemp("pods")
    sources = scanned_sources()
    for source, (_, docs) in sources.items():
        (directory / f"{source}.yaml").write_text(yaml.safe_dump_all(docs))
    done = subprocess.run([str(checkov), "--framework", "kubernetes", "-d", str(directory), "-o", "json", "--compact",
                           "--skip-download", "--quiet"], capture_output=True, text=True, timeout=500, cwd="/")
    assert done.stdout.strip(), done.stderr[-2000:]
    report = json.loads(done.stdout)
    failures: dict[str, list[tuple[str, dict[str, Any]]]] = {s: [] for s in sources}
    for item in report if isinstance(report, list) else [report]:
        results = item.get("results", {})
        assert results.get("parsing_errors", []) == []
        for check in results.get("failed_checks", []):
            source = Path(check["file_path"]).stem
            kind, rest = check["resource"].split(".", 1)  # Kind.namespace.name (a stack's namespace is a token)
            namespace, name = rest.rsplit(".", 1)
            (doc,) = [d for d in sources[source][1] if d["kind"] == kind and d["metadata"]["name"] == name
                      and d["metadata"]["namespace"] == namespace]
            failures[source].append((check["check_id"], doc))
    return sources, failures


def test_the_kubernetes_skips_have_reasons() -> None:
    checkov_skips.check_entries("kubernetes")


def test_the_scan_covers_every_source_and_pod_role() -> None:
    sources = scanned_sources()
    assert {s for s in sources if s.startswith("stack-")} == {"stack-standard", "stack-autopilot"}
    pods = [d for _, docs in sources.values() for d in docs if d["kind"] == "Pod"]
    assert {p["metadata"]["name"].rsplit("-", 1)[-1] for p in pods} == {"head", "tpu", "submitter"}
    assert len(pods) > 150


def test_checkov_passes_every_pod_and_policy(scan: tuple[Scanned, dict[str, list[tuple[str, dict[str, Any]]]]]
                                             ) -> None:
    sources, failures = scan
    left = {source: sorted(f"{check} {doc['kind']}/{doc['metadata']['name']}" for check, doc in found
                           if not any(checkov_skips.skipped(e, check, doc)
                                      for e in checkov_skips.for_mode("kubernetes", sources[source][0])))
            for source, found in failures.items()}
    total = sum(len(found) for found in failures.values())
    print(f"checkov kubernetes: {sum(len(d) for _, d in sources.values())} documents, {total} failures, all "
          f"covered by {len(checkov_skips.entries('kubernetes'))} documented skips" if not any(left.values()) else "")
    assert left == {source: [] for source in sources}


def test_every_kubernetes_skip_is_needed(scan: tuple[Scanned, dict[str, list[tuple[str, dict[str, Any]]]]]) -> None:
    """A skip no scanned pod trips is stale: remove it (or narrow it)."""
    sources, failures = scan
    for entry in checkov_skips.entries("kubernetes"):
        for mode in entry.get("modes", checkov_skips.MODES):
            assert any(checkov_skips.skipped(entry, check, doc) for source, found in failures.items()
                       if sources[source][0] == mode for check, doc in found), (
                f"{entry['check']} is skipped for {mode} pods but none of them fails it")
