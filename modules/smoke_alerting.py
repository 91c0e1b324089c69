"""SmokeAlerting: on-call hears "slice X unhealthy: host 2 ..." from the nightly smoke, not from a dashboard."""

from __future__ import annotations

from dataclasses import dataclass

from raytpu.modules.cdk import Construct, logging_metric, monitoring_alert_policy
from raytpu.report import LOG_KEY
from raytpu.spec import AlertingSpec


@dataclass(frozen=True, kw_only=True)
class SmokeAlertingProps:
    """Props of :class:`SmokeAlerting`.

    Attributes:
        project: GCP project of the cluster (and of the metric and the policy).
        cluster_name: The GKE cluster whose smoke jobs are watched.
        namespace: Namespace the smoke RayJobs run in.
        notification_channels: Cloud Monitoring channels to notify (``projects/P/notificationChannels/N``).
    """

    project: str
    cluster_name: str
    namespace: str
    notification_channels: tuple[str, ...]

    def __post_init__(self) -> None:
        AlertingSpec(notification_channels=self.notification_channels)  # the same rule as the config's


class SmokeAlerting(Construct):
    """A log-based metric and an alert policy over the smoke jobs' structured verdict lines.

    The smoke program prints one JSON line per slice (:func:`raytpu.report.log_entry`); GKE ships the RayJob
    submitter's stdout to Cloud Logging, which reads it as ``jsonPayload`` (severity, message, ``raytpu_smoke``).
    The metric counts unhealthy verdicts with the slice and the headline as labels; the policy fires on any and
    names both in the notification (documentation variables ``${metric.label.*}``,
    https://cloud.google.com/monitoring/alerts/doc-variables).

    Resource ids: ``unhealthy-metric``, ``unhealthy-policy``.
    """

    def __init__(self, scope: Construct, id: str, props: SmokeAlertingProps) -> None:
        super().__init__(scope, id)
        self.props = props
        lm, ap = logging_metric, monitoring_alert_policy
        name = f"raytpu-smoke-unhealthy-{props.cluster_name}"
        self.metric = lm.LoggingMetric(
            self, "unhealthy-metric",
            name=name, project=props.project,
            description=f"Unhealthy TPU slices found by the raytpu smoke jobs of cluster {props.cluster_name}",
            filter=(f'resource.type="k8s_container" AND resource.labels.cluster_name="{props.cluster_name}" AND '
                    f'resource.labels.namespace_name="{props.namespace}" AND '
                    f'jsonPayload.{LOG_KEY}.state="unhealthy"'),
            metric_descriptor=lm.LoggingMetricMetricDescriptor(
                metric_kind="DELTA", value_type="INT64", labels=[
                    lm.LoggingMetricMetricDescriptorLabels(key="slice", value_type="STRING",
                                                           description="The unhealthy slice"),
                    lm.LoggingMetricMetricDescriptorLabels(key="reason", value_type="STRING",
                                                           description="What smoke found first")]),
            label_extractors={"slice": f"EXTRACT(jsonPayload.{LOG_KEY}.slice)",
                              "reason": "EXTRACT(jsonPayload.message)"},
        )
        self.policy = ap.MonitoringAlertPolicy(
            self, "unhealthy-policy",
            display_name=f"raytpu: unhealthy TPU slice in {props.cluster_name}",
            project=props.project,
            combiner="OR",
            severity="ERROR",
            conditions=[ap.MonitoringAlertPolicyConditions(
                display_name="A smoke job found an unhealthy slice",
                condition_threshold=ap.MonitoringAlertPolicyConditionsConditionThreshold(
                    filter=f'metric.type="logging.googleapis.com/user/{name}" AND resource.type="k8s_container"',
                    comparison="COMPARISON_GT", threshold_value=0, duration="0s",
                    aggregations=[ap.MonitoringAlertPolicyConditionsConditionThresholdAggregations(
                        alignment_period="300s", per_series_aligner="ALIGN_SUM")]),
            )],
            notification_channels=list(props.notification_channels),
            documentation=ap.MonitoringAlertPolicyDocumentation(
                subject="TPU slice $${metric.label.slice} unhealthy",  # $$: a Monitoring variable, not Terraform's
                content=("$${metric.label.reason}\n\nFound by the nightly `raytpu smoke` on cluster "
                         f"{props.cluster_name}. Re-check: `raytpu smoke --stack {props.cluster_name}-cluster "
                         "--outputs outputs.json`; the smoke report lists each host and check."),
                mime_type="text/markdown"),
            alert_strategy=ap.MonitoringAlertPolicyAlertStrategy(auto_close="86400s"),
            depends_on=[self.metric],
        )
