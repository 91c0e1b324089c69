"""``raytpu doctor --stack`` with ``teams``: Kueue's release, its Ray integrations and the queues against the config
(each team's ClusterQueue quota, LocalQueue and namespace KSA), read only. Source: Kueue v0.19.2
charts/kueue/templates/manager (the Deployment ``<release>-controller-manager``, the ConfigMap
``<release>-manager-config`` holding ``controller_manager_config.yaml``); docs/FACTS.md#kueue-chart."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import yaml

from raytpu.cluster.doctor import GSA_ANNOTATION, Permission, guarded
from raytpu.cluster.kube.kube_client import KubeClient
from raytpu.cluster.queues import tpu_quota
from raytpu.core.common.checkup import Check, fail, ok
from raytpu.core.manifests import kueue
from raytpu.core.specs.cluster.teams import TeamSpec, service_account_id
from raytpu.core.specs.spec import ClusterSpec

NAMESPACE, RELEASE, RAY_FRAMEWORKS = kueue.SYSTEM_NAMESPACE, kueue.RELEASE, kueue.RAY_FRAMEWORKS
CONFIG_KEY = "controller_manager_config.yaml"
FIX_DEPLOY = "deploy the cluster stack (it installs Kueue for teams) and then the workloads stack (the queues)"


def rows(client: KubeClient, spec: ClusterSpec) -> list[Check]:
    """Kueue's rows; none without ``teams`` (nothing is queued then)."""
    if not spec.teams:
        return []
    with client.in_namespace(NAMESPACE) as system:
        found = guarded("kueue version", f"v{kueue.VERSION}", Permission("get", "Deployment"),
                        partial(_version, system))
        found += guarded("kueue integrations", ", ".join(RAY_FRAMEWORKS), Permission("get", "ConfigMap"),
                         partial(_integrations, system))
    expected = {o["metadata"]["name"]: o for o in kueue.objects(spec) if o["kind"] == "ClusterQueue"}
    for team in spec.teams:
        found += guarded(f"queue {team.name}", _quota_text(expected[team.queue]), Permission("get", "ClusterQueue"),
                         partial(_cluster_queue, client, expected[team.queue]))
        with client.in_namespace(team.namespace) as theirs:
            found += guarded(f"local queue {team.name}", f"LocalQueue {team.queue} in {team.namespace}",
                             Permission("get", "LocalQueue"), partial(_local_queue, theirs, team))
            found += guarded(f"service account {team.name}", f"ServiceAccount {spec.ksa_name} in {team.namespace} "
                             f"acting as the team's own Google SA", Permission("get", "ServiceAccount"),
                             partial(_team_ksa, theirs, spec, team))
    return found


def _version(client: KubeClient) -> Check:
    expected = f"v{kueue.VERSION}"
    deployment = client.get("Deployment", f"{RELEASE}-controller-manager")
    if deployment is None:
        return fail("kueue version", "not installed", expected, FIX_DEPLOY)
    images = [str(c.get("image", "")) for c in (((deployment.get("spec") or {}).get("template") or {})
                                                .get("spec") or {}).get("containers") or ()]
    tag = next((i.rpartition(":")[2] for i in images if "/kueue" in i), "(no kueue image)")
    if tag != expected:
        return fail("kueue version", tag, expected, f"upgrade Kueue to {expected} (the cluster stack pins it)")
    return ok("kueue version", tag, expected)


def _integrations(client: KubeClient) -> Check:
    expected = ", ".join(RAY_FRAMEWORKS)
    config = client.get("ConfigMap", f"{RELEASE}-manager-config")
    if config is None:
        return fail("kueue integrations", "no manager config", expected, FIX_DEPLOY)
    try:
        parsed = yaml.safe_load(str((config.get("data") or {}).get(CONFIG_KEY, "")))
    except yaml.YAMLError:
        parsed = None
    frameworks = ((parsed or {}).get("integrations") or {}).get("frameworks") or [] if isinstance(parsed, dict) else []
    missing = [f for f in RAY_FRAMEWORKS if f not in frameworks]
    if missing:
        return fail("kueue integrations", f"without {', '.join(missing)}", expected,
                    "deploy the cluster stack again (its Kueue release turns them on): without them Kueue never "
                    "admits a team's RayJob, which stays suspended")
    return ok("kueue integrations", expected, expected)


def _quota_text(queue: Mapping[str, Any]) -> str:
    return ", ".join(f"{flavor} {chips}" for flavor, chips in tpu_quota(queue).items() if chips) or "no chips"


def _cluster_queue(client: KubeClient, want: Mapping[str, Any]) -> Check:
    name = str(want["metadata"]["name"])
    check, expected = f"queue {name.removeprefix('raytpu-')}", _quota_text(want)
    found = client.get("ClusterQueue", name)
    if found is None:
        return fail(check, "absent", expected, "deploy the workloads stack (it makes the teams' queues)")
    if tpu_quota(found) != tpu_quota(want) or (found.get("spec") or {}).get("cohortName") != kueue.COHORT:
        return fail(check, _quota_text(found), expected, "deploy the workloads stack again: the queue differs from "
                    "the config's teams")
    return ok(check, _quota_text(found), expected)


def _local_queue(client: KubeClient, team: TeamSpec) -> Check:
    check, expected = f"local queue {team.name}", f"LocalQueue {team.queue} in {team.namespace}"
    found = client.get("LocalQueue", team.queue)
    if found is None:
        return fail(check, "absent", expected, "deploy the workloads stack (it makes each team's LocalQueue)")
    return ok(check, f"{team.queue} -> {(found.get('spec') or {}).get('clusterQueue')}", expected)


def _team_ksa(client: KubeClient, spec: ClusterSpec, team: TeamSpec) -> Check:
    check = f"service account {team.name}"
    expected = f"ServiceAccount {spec.ksa_name} in {team.namespace} acting as the team's own Google SA"
    found = client.get("ServiceAccount", spec.ksa_name)
    if found is None:
        return fail(check, "absent", expected, "deploy the workloads stack (it makes each team's KSA)")
    gsa = str(((found.get("metadata") or {}).get("annotations") or {}).get(GSA_ANNOTATION, ""))
    if gsa != f"{service_account_id(spec.cluster.name, team.name)}@{spec.project}.iam.gserviceaccount.com":
        return fail(check, f"{GSA_ANNOTATION}={gsa or '(none)'}", expected, "deploy the workloads stack again")
    return ok(check, f"{spec.ksa_name} -> {gsa}", expected)
