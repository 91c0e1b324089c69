"""SmokeAlerting: on-call hears "slice X unhealthy: host 2 ..." from the nightly smoke, not from a dashboard."""

from __future__ import annotations

from dataclasses import dataclass

from raytpu.core.common.report import LOG_KEY
from raytpu.core.specs.cluster.cluster_parts import AlertingSpec
from raytpu.modules.parts.cdk import Construct, logging_metric, monitoring_alert_policy


@dataclass(frozen=True, kw_only=True)
class SmokeAlertingProps:
    """Props of :class:`SmokeAlerting`: the cluster's project and name, the smoke RayJobs' namespace, and the Cloud
    Monitoring channels to notify (``projects/P/notificationChannels/N``)."""

    project: str
    cluster_name: str
    namespace: str
    notification_channels: tuple[str, ...]

    def __post_init__(self) -> None:
        AlertingSpec(notification_channels=self.notification_channels)  # the same rule as the config's


class SmokeAlerting(Construct):
    """A log-based alert policy over the smoke jobs' verdict lines, and a log-based metric that counts them.

    The policy matches the log entries itself (a LogMatch condition) and names the slice and headline, so the first
    apply succeeds; the metric keeps the history for charts. Source: terraform-provider-google #11102
    (docs/FACTS.md#terraform-modules, docs/FACTS.md#terraform-constructs).

    Resource ids: ``unhealthy-metric``, ``unhealthy-policy``."""

    def __init__(self, scope: Construct, id: str, props: SmokeAlertingProps) -> None:
        super().__init__(scope, id)
        self.props = props
        lm, ap = logging_metric, monitoring_alert_policy
        name = f"raytpu-smoke-unhealthy-{props.cluster_name}"
        unhealthy = (f'resource.type="k8s_container" AND resource.labels.cluster_name="{props.cluster_name}" AND '
                     f'resource.labels.namespace_name="{props.namespace}" AND '
                     f'jsonPayload.{LOG_KEY}.state="unhealthy"')
        extractors = {"slice": f"EXTRACT(jsonPayload.{LOG_KEY}.slice)", "reason": "EXTRACT(jsonPayload.message)"}
        self.metric = lm.LoggingMetric(
            self, "unhealthy-metric",
            name=name, project=props.project,
            description=f"Unhealthy TPU slices found by the raytpu smoke jobs of cluster {props.cluster_name}",
            filter=unhealthy,
            metric_descriptor=lm.LoggingMetricMetricDescriptor(
                metric_kind="DELTA", value_type="INT64", labels=[
                    lm.LoggingMetricMetricDescriptorLabels(key="slice", value_type="STRING",
                                                           description="The unhealthy slice"),
                    lm.LoggingMetricMetricDescriptorLabels(key="reason", value_type="STRING",
                                                           description="What smoke found first")]),
            label_extractors=extractors,
        )
        self.policy = ap.MonitoringAlertPolicy(
            self, "unhealthy-policy",
            display_name=f"raytpu: unhealthy TPU slice in {props.cluster_name}",
            project=props.project,
            combiner="OR",
            severity="ERROR",
            conditions=[ap.MonitoringAlertPolicyConditions(
                display_name="A smoke job found an unhealthy slice",
                condition_matched_log=ap.MonitoringAlertPolicyConditionsConditionMatchedLog(
                    filter=unhealthy, label_extractors=extractors),
            )],
            notification_channels=list(props.notification_channels),
            documentation=ap.MonitoringAlertPolicyDocumentation(
                subject="TPU slice $${log.extracted_label.slice} unhealthy",  # $$: a Monitoring variable
                content=("$${log.extracted_label.reason}\n\nFound by the nightly `raytpu smoke` on cluster "
                         f"{props.cluster_name}. Re-check: `raytpu smoke --stack {props.cluster_name}-cluster "
                         "--outputs outputs.json`; the smoke report lists each host and check. The page to read: "
                         "`report.html` beside `smoke.json` in the nightly job's reports (examples/nightly: "
                         "`gs://<report bucket>/smoke/<build id>/report.html` on Cloud Build, the `tpu-smoke-<run id>` "
                         "artifact on GitHub Actions); `raytpu report smoke.json` draws it again from a saved report."),
                mime_type="text/markdown"),
            alert_strategy=ap.MonitoringAlertPolicyAlertStrategy(
                auto_close="86400s",
                notification_rate_limit=ap.MonitoringAlertPolicyAlertStrategyNotificationRateLimit(period="300s")),
        )
