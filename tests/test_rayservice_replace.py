"""A RayService applied by the workloads stack is replaced when its Ray cluster spec changes: KubeRay v1.7.0 applies
no cluster change to a running RayService with upgradeStrategy None (rayservice_controller.go
``shouldPrepareNewCluster``), so Terraform must delete and re-create it, as ``submit --replace`` does.

Judged by Terraform 1.11 itself on the emitted JSON: the kubernetes provider cannot be downloaded here, so the
RayService's ``lifecycle`` block, exactly as synthesized, is carried by a built-in ``terraform_data`` stand-in beside
the synthesized ``cluster-spec`` resource; Terraform validates the block's JSON form, applies it to a local state,
and plans again with a changed spec (Source: developer.hashicorp.com/terraform/language/resources/terraform-data,
``triggers_replace``; developer.hashicorp.com/terraform/language/meta-arguments/lifecycle, ``replace_triggered_by``).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _synth import STANDARD_EXAMPLE, read_stacks, resources, synth_config

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

WORKLOADS = "ray-tpu-workloads"


def _rayservice(stack: dict[str, Any]) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The RayService's manifest resource, the address its lifecycle names and that resource."""
    [service] = [r for r in resources(stack, "kubernetes_manifest").values() if r["manifest"]["kind"] == "RayService"]
    [address] = service["lifecycle"]["replace_triggered_by"]
    rtype, name = address.split(".")
    return service, address, stack["resource"][rtype][name]


def _terraform(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null", "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"}
    return subprocess.run(["terraform", *argv, "-no-color"], cwd=folder, capture_output=True, text=True,
                          timeout=180, env=env)


def _literal(value: Any) -> Any:
    """``value`` with each reference to the cluster stack's outputs (``${...}``) a fixed string: the stand-in
    has no remote state to read."""
    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return "a stack output" if isinstance(value, str) and "${" in value else value


def _write(folder: Path, name: str, spec: dict[str, Any], lifecycle: dict[str, Any]) -> None:
    probe = {"input": "the RayService", "lifecycle": lifecycle}
    (folder / "main.tf.json").write_text(json.dumps({"resource": {"terraform_data": {
        name: {"triggers_replace": spec}, "rayservice": probe}}}))


def test_a_changed_cluster_spec_replaces_the_rayservice_and_an_unchanged_one_does_not(tmp_path: Path) -> None:
    _, stacks = synth_config(str(STANDARD_EXAMPLE))
    service, address, trigger = _rayservice(stacks[WORKLOADS])
    assert address.startswith("terraform_data.") and "${" not in address  # Terraform's JSON refuses "${...}" there
    assert trigger["triggers_replace"] == {"rayClusterConfig": service["manifest"]["spec"]["rayClusterConfig"]}
    lifecycle = {k: v for k, v in service["lifecycle"].items() if k != "precondition"}  # it reads a live CRD
    name = address.split(".")[1]
    spec = _literal(trigger["triggers_replace"])

    _write(tmp_path, name, spec, lifecycle)
    for argv in (("init", "-input=false"), ("validate",), ("apply", "-auto-approve", "-input=false")):
        done = _terraform(tmp_path, *argv)
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])

    same = _terraform(tmp_path, "plan", "-input=false", "-detailed-exitcode")
    assert same.returncode == 0, same.stdout[-2000:]  # 0: no changes

    changed = copy.deepcopy(spec)
    changed["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = "1"
    _write(tmp_path, name, changed, lifecycle)
    plan = _terraform(tmp_path, "plan", "-input=false", "-detailed-exitcode")
    assert plan.returncode == 2, plan.stdout[-2000:] + plan.stderr[-2000:]  # 2: changes
    assert "terraform_data.rayservice will be replaced due to changes in replace_triggered_by" in plan.stdout, \
        plan.stdout[-3000:]


def test_a_rayservice_that_rolls_by_itself_is_never_replaced(tmp_path: Path) -> None:
    """upgradeStrategy NewCluster: KubeRay v1.7.0 rolls a changed cluster spec by itself (a new RayCluster, then the
    switch), so a replacement would only add downtime: no trigger."""
    from raytpu.modules.parts.cdk import App, TerraformStack, kubernetes_provider
    from raytpu.modules.ray_workload import RayWorkload, RayWorkloadProps

    _, stacks = synth_config(str(STANDARD_EXAMPLE))
    service, _, _ = _rayservice(stacks[WORKLOADS])
    rolling = copy.deepcopy(service["manifest"])
    rolling["spec"]["upgradeStrategy"] = {"type": "NewCluster"}
    app = App(outdir=str(tmp_path))
    stack = TerraformStack(app, "services")
    kubernetes_provider.KubernetesProvider(stack, "kubernetes", host="https://example.invalid")
    RayWorkload(stack, "serve", RayWorkloadProps(manifest=rolling))
    app.synth()
    synthesized = read_stacks(tmp_path)["services"]["resource"]
    assert "terraform_data" not in synthesized
    assert "lifecycle" not in next(iter(synthesized["kubernetes_manifest"].values()))
