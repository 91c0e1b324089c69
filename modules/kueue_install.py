"""KueueInstall: Kueue from its Helm chart (``helm_release``), the queue the config's ``teams`` share slices through."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from raytpu.core.common import errors
from raytpu.core.manifests import kueue
from raytpu.modules.parts import _props
from raytpu.modules.parts.cdk import Construct, ITerraformDependable, TerraformResource, helm_release

CHART = kueue.RELEASE
CHART_REPOSITORY = "oci://registry.k8s.io/kueue/charts"
"""Where Kueue publishes its chart, one version per release. Source: Kueue v0.19.2 charts/kueue/README.md (``helm
install kueue oci://registry.k8s.io/kueue/charts/kueue --version="0.19.2"``); docs/FACTS.md#kueue-chart."""
NAMESPACE = kueue.SYSTEM_NAMESPACE
RAY_FRAMEWORKS = kueue.RAY_FRAMEWORKS
CHART_FRAMEWORKS = ("batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster",
                    "jobset.x-k8s.io/jobset", "workload.codeflare.dev/appwrapper", "trainer.kubeflow.org/trainjob",
                    "pod", "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset")
"""The chart's default ``integrations.frameworks``, not the kit's: with ``pod``, ``deployment`` or ``statefulset``
listed their webhooks fail closed, so while Kueue's controller is down no pod is created in any namespace it
manages. Source: Kueue v0.19.2 charts/kueue/values.yaml; charts/kueue/templates/webhook/manifests.yaml
(``mpod.kb.io`` failurePolicy)."""
MANAGED_NAMESPACES = {"matchLabels": {kueue.QUEUED_NAMESPACE_LABEL: "true"}}
"""``managedJobsNamespaceSelector``: every Kueue webhook (``failurePolicy: Fail`` for RayJobs and RayClusters) acts in
the teams' namespaces only; the stack's own namespace (serving, the smoke) never waits on Kueue.
Source: Kueue v0.19.2 charts/kueue/templates/webhook/manifests.yaml (each webhook's namespaceSelector)."""
CHART_MANAGER_CONFIG: Mapping[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {"groupKindConcurrency": {
        "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
        "ClusterQueue.kueue.x-k8s.io": 5, "ResourceFlavor.kueue.x-k8s.io": 1}},
    "clientConnection": {"qps": 300, "burst": 500},
}
"""The chart's default manager configuration less its frameworks: a value given for
``managerConfig.controllerManagerConfigYaml`` replaces the chart's whole string, so the kit repeats the rest.
ProvisioningRequest admission checks need nothing here: ``ProvisioningACC`` went GA in 0.14 and its gate is gone.
Source: Kueue v0.19.2 charts/kueue/values.yaml; pkg/features/kube_features.go (docs/FACTS.md#kueue-chart)."""
KUEUE_PORTS = (9443, 8082)
"""The ports the control plane calls on Kueue's controller pod: its webhooks and its visibility API (an aggregated
API). Source: Kueue v0.19.2 charts/kueue/templates/manager/manager.yaml (containerPort ``webhook-server``,
``visibility``)."""
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


@dataclass(frozen=True, kw_only=True)
class KueueInstallProps:
    """Props of :class:`KueueInstall`: the chart version (default :data:`raytpu.core.manifests.kueue.VERSION`, the
    release whose APIs the kit's Kueue objects use), its namespace (created), the integrations (default
    :data:`RAY_FRAMEWORKS` alone), Helm's wait per operation, and ``overrides`` of ``helm_release``."""

    version: str = kueue.VERSION
    namespace: str = NAMESPACE
    frameworks: tuple[str, ...] = RAY_FRAMEWORKS
    timeout_s: int = 600
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        found = [] if _VERSION.match(self.version) else [errors.invalid_value(
            "version", self.version, "is not a Kueue chart version", f"MAJOR.MINOR.PATCH, e.g. {kueue.VERSION}")]
        found += _props.resource_name_problems("namespace", self.namespace)
        found += [errors.missing("frameworks", f"to hold {framework} (teams' RayJobs are queued through it)",
                                 ", ".join(RAY_FRAMEWORKS) + " among the others")
                  for framework in RAY_FRAMEWORKS if framework not in self.frameworks]
        errors.raise_found([*found, *_props.override_problems("overrides", self.overrides)])

    @property
    def manager_config(self) -> dict[str, Any]:
        """The controller's configuration: the chart's, with :attr:`frameworks`."""
        return {**CHART_MANAGER_CONFIG, "managedJobsNamespaceSelector": MANAGED_NAMESPACES,
                "integrations": {"frameworks": list(self.frameworks)}}

    @property
    def values(self) -> str:
        """The release's values (YAML)."""
        config = yaml.safe_dump(self.manager_config, sort_keys=False)
        return "managerConfig:\n  controllerManagerConfigYaml: |\n" + textwrap.indent(config, "    ")


class KueueInstall(Construct):
    """Kueue's controller, webhooks and CRDs from the chart, into its own namespace; Helm waits until the controller
    is ready, so the workloads stack's Kueue objects meet a serving webhook. Resource id: ``release``."""

    def __init__(self, scope: Construct, id: str, props: KueueInstallProps, *,
                 after: Sequence[ITerraformDependable] = ()) -> None:
        super().__init__(scope, id)
        self.props = props
        self.release = helm_release.Release(
            self, "release", name=CHART, chart=CHART, repository=CHART_REPOSITORY, version=props.version,
            namespace=props.namespace, create_namespace=True, values=[props.values], timeout=props.timeout_s,
            depends_on=list(after) or None)
        _props.apply_overrides(self.release, props.overrides)

    def wait_for(self, *items: TerraformResource) -> None:
        """Installs (and uninstalls) Kueue after (before) ``items`` too: node pools added later."""
        # bare addresses: cdktn renders a resource's fqn as "${...}", which Terraform's JSON syntax refuses in
        # depends_on (hashicorp/terraform-cdk#3532)
        added = [f"{i.terraform_resource_type}.{i.friendly_unique_id}" for i in items]
        self.release.depends_on = [*(self.release.depends_on or []), *added]
