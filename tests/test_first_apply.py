"""The first ``cdktf deploy`` on a fresh project, checked on the synthesized JSON (issue 18, items 2, 5 and 14).

Terraform's google provider cannot be downloaded here, so no plan runs: each rule is transcribed from its source
(cited beside it) and checked on the synthesized stacks of the example configs and of a config with every
provisioning mode; each rule is also shown to fire on the shape the stacks had before.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _synth import (
    AUTOPILOT_EXAMPLE,
    EVERY_MODE,
    STANDARD_EXAMPLE,
    resources,
    synth_added_slices,
    synth_config,
    synth_text,
)
from image_refs import FIXTURE_REFS

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

Stacks = dict[str, dict[str, Any]]


def _stacks(name: str) -> Stacks:
    if name == "every-mode":
        return synth_text(EVERY_MODE)
    if name == "added-slices":  # slices and workloads added after the stacks were built (ClusterStack.add_slice)
        return synth_added_slices()[1]
    return synth_config(str({"standard": STANDARD_EXAMPLE, "autopilot": AUTOPILOT_EXAMPLE}[name]))[1]


CONFIGS = ["standard", "autopilot", "every-mode", "added-slices"]


def _stack(stacks: Stacks, suffix: str) -> dict[str, Any]:
    return next(s for sid, s in stacks.items() if sid.endswith(suffix))


def _all(stacks: Stacks, suffix: str) -> list[dict[str, Any]]:
    return [s for sid, s in sorted(stacks.items()) if sid.endswith(suffix)]


# ------------------------------------------------------------------ the dependency graph of a synthesized stack


def _elements(stack: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Terraform address -> (type, body) of every resource and data source."""
    out = {f"{t}.{n}": (t, body) for t, named in stack.get("resource", {}).items() for n, body in named.items()}
    out |= {f"data.{t}.{n}": (t, body) for t, named in stack.get("data", {}).items() for n, body in named.items()}
    return out


_ADDRESS = re.compile(r"(?:data\.)?[a-z][a-z0-9_]*\.[A-Za-z0-9_-]+")


def _depends(stack: dict[str, Any]) -> dict[str, set[str]]:
    """Address -> addresses it depends on directly: ``depends_on`` and every reference in its body (Terraform orders
    an element after everything it references: https://developer.hashicorp.com/terraform/language/meta-arguments/depends_on)."""
    elements = _elements(stack)
    edges = {}
    for address, (_, body) in elements.items():
        text = json.dumps({k: v for k, v in body.items() if k != "//"})
        edges[address] = {m for m in _ADDRESS.findall(text) if m in elements and m != address}
    return edges


def _reaches(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


# ------------------------------------------------------------------ item 5: the project's APIs


API_OF_PREFIX = {
    # Terraform type prefix -> the API its calls go to (the provider's packages: google/services/compute, container,
    # resourcemanager for google_project_iam_*, storage, logging, monitoring; IAM's service accounts)
    "google_compute_": "compute.googleapis.com",
    "google_container_": "container.googleapis.com",
    "google_service_account": "iam.googleapis.com",
    "google_project_iam_": "cloudresourcemanager.googleapis.com",
    "google_storage_": "storage.googleapis.com",
    "google_logging_": "logging.googleapis.com",
    "google_monitoring_": "monitoring.googleapis.com",
    "google_artifact_registry_": "artifactregistry.googleapis.com",
}
KIT_CALLS = ("cloudbuild.googleapis.com",)
"""APIs no resource of the stack calls but the kit's own commands do in its project: ``raytpu images build`` creates
Cloud Build builds (``projects.locations.builds.create``), so the stack enables it for them."""
CLUSTER_ALSO = ("logging.googleapis.com", "monitoring.googleapis.com")
"""GKE sends the cluster's system and workload logs to Cloud Logging and its metrics (Managed Prometheus too) to Cloud
Monitoring (https://cloud.google.com/kubernetes-engine/docs/how-to/configure-metrics); the stack's cluster enables both
(``logging_config``, ``monitoring_config``)."""


def missing_apis(stack: dict[str, Any]) -> list[str]:
    """Every ``google_*`` resource and data source waits for the API its calls go to.

    Rule: a call to a disabled API fails (on a fresh project the first plan stops with 403 at
    ``data.google_container_engine_versions``); ``google_project_service`` enables one
    (hashicorp/terraform-provider-google 8.x ``website/docs/r/google_project_service.html.markdown``); every GKE how-to
    begins "Enable the Google Kubernetes Engine API" (e.g. https://cloud.google.com/kubernetes-engine/docs/how-to/spot-vms).
    Which API: :data:`API_OF_PREFIX`, :data:`CLUSTER_ALSO`."""
    elements, edges = _elements(stack), _depends(stack)
    enabled = {body["service"]: address for address, (t, body) in elements.items() if t == "google_project_service"}
    found = []
    for address, (kind, _) in elements.items():
        if not kind.startswith("google_") or kind == "google_project_service":
            continue
        apis = [api for prefix, api in API_OF_PREFIX.items() if kind.startswith(prefix)] or ["<no API known>"]
        if kind == "google_container_cluster":
            apis += CLUSTER_ALSO
        waits_for = _reaches(edges, address)
        found += [f"{address} does not wait for {api}" for api in apis if enabled.get(api) not in waits_for]
    return found


@pytest.mark.parametrize("config", CONFIGS)
def test_every_resource_waits_for_the_apis_it_calls(config: str) -> None:
    for stack in _all(_stacks(config), "-cluster"):
        assert missing_apis(stack) == []


@pytest.mark.parametrize("config", CONFIGS)
def test_the_cluster_stack_enables_each_api_it_uses_and_never_disables_one(config: str) -> None:
    """Each API enabled once, in the stack's project, with a reason, and kept on destroy: the provider's default
    ``disable_on_destroy = true`` (hashicorp/terraform-provider-google ``google/services/resourcemanager/
    resource_google_project_service.go`` schema ``Default: true``) would turn it
    off for everything else in the project. No API is enabled that nothing here (or the kit's commands) calls."""
    wanted = {*API_OF_PREFIX.values(), *CLUSTER_ALSO, *KIT_CALLS}
    for stack in _all(_stacks(config), "-cluster"):
        services = list(resources(stack, "google_project_service").values())
        assert sorted(s["service"] for s in services) == sorted(wanted)
        assert all(s["disable_on_destroy"] is False and s["project"] == "my-ml-project" for s in services)
    from raytpu.modules.project_services import API_REASONS

    assert set(API_REASONS) == wanted and all(API_REASONS.values())  # each with its reason


def test_the_version_lookup_waits_for_the_gke_api() -> None:
    """The issue's failure: ``data.google_container_engine_versions`` read at the first plan of a fresh project. A data
    source whose ``depends_on`` has pending changes is read at apply, after them
    (https://developer.hashicorp.com/terraform/language/data-sources, "Data resource behavior")."""
    stack = _stack(_stacks("standard"), "-cluster")
    (versions,) = stack["data"]["google_container_engine_versions"].values()
    container = next(k for k, s in resources(stack, "google_project_service").items()
                     if s["service"] == "container.googleapis.com")
    assert f"google_project_service.{container}" in versions["depends_on"]


def test_the_api_rule_fires_on_the_stack_as_it_was() -> None:
    """Before: no ``google_project_service`` at all, so every resource misses its API."""
    stack = json.loads(json.dumps(_stack(_stacks("standard"), "-cluster")))
    del stack["resource"]["google_project_service"]
    for named in [*stack["resource"].values(), *stack["data"].values()]:
        for body in named.values():
            body.pop("depends_on", None)
    found = missing_apis(stack)
    assert any(f.startswith("data.google_container_engine_versions.") for f in found)
    assert len(found) >= len(_elements(stack)) - 1


def test_a_resource_an_app_adds_to_the_cluster_stack_waits_for_its_api_too() -> None:
    """The rule is an aspect over the whole stack, so a resource added after the stack was built (by the kit's
    ``add_slice`` or by a platform's own app) waits for its API as well."""
    import tempfile

    from cdktn_provider_google import compute_address

    from raytpu import config
    from raytpu.modules.parts.cdk import App
    from raytpu.stacks.cluster import ClusterStack, ClusterStackProps

    outdir = tempfile.mkdtemp(prefix="raytpu-apis-")
    app = App(outdir=outdir)
    cluster = ClusterStack(app, "c", ClusterStackProps(spec=config.load(STANDARD_EXAMPLE)))
    compute_address.ComputeAddress(cluster, "addr", name="a", region="us-east5")
    app.synth()
    stack = json.loads((Path(outdir) / "stacks" / "c" / "cdk.tf.json").read_text())
    assert missing_apis(stack) == []
    assert resources(stack, "google_compute_address")["addr"]["depends_on"] == [
        f"google_project_service.{k}" for k, s in resources(stack, "google_project_service").items()
        if s["service"] == "compute.googleapis.com"]


# ------------------------------------------------------------------ item 2: the smoke alert on the first apply

_USER_METRIC = re.compile(r"logging\.googleapis\.com/user/([A-Za-z0-9_.\-]+)")


def alert_on_new_metric(stack: dict[str, Any]) -> list[str]:
    """No alert policy reads a log-based metric that the same apply creates.

    Rule: for up to 10 minutes after a log-based metric is created, creating a policy on it fails with 404 "Cannot
    find metric(s) that match type = logging.googleapis.com/user/... could take up to 10 minutes to become
    available", and the provider retries only concurrent-edit errors (hashicorp/terraform-provider-google#11102;
    ``google/services/monitoring/resource_monitoring_alert_policy.go`` ``resourceMonitoringAlertPolicyCreate``:
    ``ErrorRetryPredicates: IsMonitoringConcurrentEditError``); ``depends_on`` orders the calls but does not wait
    (GoogleCloudPlatform/cloud-foundation-fabric PR #3739 removed its metric-based alert from the first apply)."""
    created = {m["name"] for m in resources(stack, "google_logging_metric").values()}
    found = []
    for name, policy in resources(stack, "google_monitoring_alert_policy").items():
        conditions = json.dumps(policy["conditions"])
        read = set(_USER_METRIC.findall(conditions)) & created
        if "${google_logging_metric." in conditions:
            read.add("a metric of this stack (by reference)")
        found += [f"{name} reads {metric}, created in the same apply" for metric in sorted(read)]
    return found


def log_match_shape(policy: dict[str, Any]) -> str | None:
    """A LogMatch policy has that one condition and a notification rate limit (Monitoring API v3
    ``AlertPolicy.Condition.LogMatch``; ``AlertStrategy.notification_rate_limit``: "Required for alert policies with a
    LogMatch condition"; provider schema ``condition_matched_log``: "If set, no other conditions can be present"), at
    least 5 minutes apart (https://cloud.google.com/logging/docs/alerting/log-based-incidents: one notification every
    5 minutes at most)."""
    matched = [c for c in policy["conditions"] if "condition_matched_log" in c]
    if not matched:
        return None
    if len(policy["conditions"]) != 1:
        return f"{len(policy['conditions'])} conditions with a LogMatch one"
    period = (policy.get("alert_strategy") or {}).get("notification_rate_limit", {}).get("period")
    if not period or int(period.rstrip("s")) < 300:
        return f"notification_rate_limit.period {period!r}"
    return None


def test_the_smoke_alert_reads_no_metric_created_in_its_apply() -> None:
    cluster = _stack(_stacks("autopilot"), "-cluster")
    assert resources(cluster, "google_monitoring_alert_policy")  # the autopilot example opts in to alerting
    assert alert_on_new_metric(cluster) == []


def test_the_smoke_alert_is_a_well_formed_log_match_policy() -> None:
    cluster = _stack(_stacks("autopilot"), "-cluster")
    (policy,) = resources(cluster, "google_monitoring_alert_policy").values()
    assert log_match_shape(policy) is None
    (condition,) = policy["conditions"]
    assert set(condition["condition_matched_log"]["label_extractors"]) == {"slice", "reason"}
    # nothing orders it after the metric any more: it does not need one (only its API)
    assert not [d for d in policy.get("depends_on", []) if d.startswith("google_logging_metric.")]


def test_the_alert_rules_fire_on_the_policy_as_it_was() -> None:
    """Before: a threshold condition on ``logging.googleapis.com/user/<the stack's metric>``, ``depends_on`` it."""
    cluster = json.loads(json.dumps(_stack(_stacks("autopilot"), "-cluster")))
    (metric_id, metric), = resources(cluster, "google_logging_metric").items()
    (policy,) = resources(cluster, "google_monitoring_alert_policy").values()
    policy["conditions"] = [{"display_name": "A smoke job found an unhealthy slice", "condition_threshold": {
        "filter": f'metric.type="logging.googleapis.com/user/{metric["name"]}" AND resource.type="k8s_container"',
        "comparison": "COMPARISON_GT", "threshold_value": 0, "duration": "0s"}}]
    policy["depends_on"] = [f"google_logging_metric.{metric_id}"]
    assert alert_on_new_metric(cluster) != []
    assert log_match_shape({"conditions": [{"condition_matched_log": {"filter": "x"}}]}) is not None
    assert log_match_shape({"conditions": [{"condition_matched_log": {"filter": "x"}}, {"condition_threshold": {}}],
                            "alert_strategy": {"notification_rate_limit": {"period": "300s"}}}) is not None


# ------------------------------------------------------------------ item 14: no access token in state


def token_in_state(stack: dict[str, Any]) -> list[str]:
    """No access token is read by a data source or resource: Terraform stores every data source's and resource's
    attributes in state and plan files; an ephemeral resource's never (Terraform 1.10+,
    https://developer.hashicorp.com/terraform/language/resources/ephemeral), and a provider block may take an
    ephemeral value (hashicorp/terraform-provider-google 8.x
    ``google/services/resourcemanager/ephemeral_google_client_config_test.go``,
    ``TestAccEphemeralGoogleClientConfig_usedInProvider``)."""
    found = [f"data.google_client_config.{n}" for n in stack.get("data", {}).get("google_client_config", {})]
    for kind, configs in stack.get("provider", {}).items():
        for config in configs:
            for key, value in config.items():
                if "access_token" in json.dumps(value) and "${ephemeral." not in json.dumps(value):
                    found.append(f"provider {kind}.{key} = {value}")
    return found


@pytest.mark.parametrize("config", CONFIGS)
def test_the_workloads_stack_keeps_no_access_token_in_state(config: str) -> None:
    for stack in _all(_stacks(config), "-workloads"):
        assert token_in_state(stack) == []
        assert "google_client_config" in stack["ephemeral"]
        (kubernetes,) = stack["provider"]["kubernetes"]
        assert kubernetes["token"] == "${ephemeral.google_client_config.client.access_token}"


def test_the_workloads_stack_targets_a_terraform_with_ephemeral_resources() -> None:
    """Ephemeral resources exist from Terraform 1.10 (same source); cdktn checks every ephemeral resource against the
    targeted versions at synth (cdktn 0.24 ``lib/validations/target-versions.js``, ``ProviderFeature.
    EPHEMERAL_RESOURCES``: terraform ``>=1.10.0``) and refuses it under the default target, ``>=1.5.7``: the workloads
    stack must target 1.10+ itself, so that any app building it synthesizes."""
    import tempfile

    from raytpu import config
    from raytpu.modules.parts.cdk import App
    from raytpu.stacks.cluster import ClusterStack, ClusterStackProps
    from raytpu.stacks.workloads import TERRAFORM_VERSIONS, WorkloadsStack, WorkloadsStackProps

    assert TERRAFORM_VERSIONS == ">=1.10.0"
    app = App(outdir=tempfile.mkdtemp(prefix="raytpu-tf-"), context={"targetVersions": {"terraform": ">=1.5.7"}})
    cluster = ClusterStack(app, "c", ClusterStackProps(spec=config.load(STANDARD_EXAMPLE)))
    WorkloadsStack(app, "w", WorkloadsStackProps(cluster=cluster, images=FIXTURE_REFS))
    app.synth()  # an app that targets older Terraform still synthesizes the workloads stack


def test_the_token_rule_fires_on_the_stack_as_it_was() -> None:
    """Before: ``data.google_client_config.client`` feeding the kubernetes provider's token."""
    stack = json.loads(json.dumps(_stack(_stacks("standard"), "-workloads")))
    stack.pop("ephemeral")
    stack["data"]["google_client_config"] = {"client": {}}
    stack["provider"]["kubernetes"][0]["token"] = "${data.google_client_config.client.access_token}"
    assert len(token_in_state(stack)) == 2
