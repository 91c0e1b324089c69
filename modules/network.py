"""Network: the VPC a private GKE cluster needs (subnet with pod/service ranges, Cloud NAT, flow logs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytpu.core.common import errors
from raytpu.core.specs.cluster.cluster_parts import NetworkSpec
from raytpu.core.specs.field_rules import choice_problems, range_problems, region_problems
from raytpu.modules.parts import _props
from raytpu.modules.parts.cdk import (
    Construct,
    compute_firewall,
    compute_network,
    compute_router,
    compute_router_nat,
    compute_subnetwork,
)

PODS_RANGE = "pods"
SERVICES_RANGE = "services"
FLOW_LOG_INTERVALS = ("INTERVAL_5_SEC", "INTERVAL_30_SEC", "INTERVAL_1_MIN", "INTERVAL_5_MIN", "INTERVAL_10_MIN",
                      "INTERVAL_15_MIN")
NAT_LOG_FILTERS = ("ERRORS_ONLY", "TRANSLATIONS_ONLY", "ALL")


@dataclass(frozen=True, kw_only=True)
class NetworkProps:
    """Props of :class:`Network`: the VPC's name (the subnet, router and NAT are named after it), project, region, the
    ranges (``NetworkSpec``), flow log sampling and interval, the NAT log filter, and ``overrides`` of the subnet."""

    name: str
    project: str
    region: str
    spec: NetworkSpec = field(default_factory=NetworkSpec)
    flow_log_sampling: float = 0.5
    flow_log_interval: str = "INTERVAL_5_SEC"
    nat_log_filter: str = "ERRORS_ONLY"
    webhook_ports: tuple[int, ...] = ()
    """Node ports the control plane calls (webhooks, aggregated APIs) beyond 443 and 10250, which GKE's own rule
    opens: allowed from the control plane's range (``spec.master_cidr``)."""
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        errors.raise_found([
            *_props.resource_name_problems("name", self.name, max_len=50),
            *region_problems("region", self.region),
            *_props.fraction_problems("flow_log_sampling", self.flow_log_sampling),
            *choice_problems("flow_log_interval", self.flow_log_interval, FLOW_LOG_INTERVALS),
            *choice_problems("nat_log_filter", self.nat_log_filter, NAT_LOG_FILTERS),
            *(p for port in self.webhook_ports for p in range_problems("webhook_ports", port, 1, 65535)),
            *_props.override_problems("overrides", self.overrides)])


class Network(Construct):
    """A custom-mode VPC with one subnet, Cloud Router and Cloud NAT (private nodes need egress), and a logged,
    lowest-priority deny of all ingress under GKE's own allow rules (docs/FACTS.md#terraform-modules).

    Resources (ids are stable API): ``vpc``, ``subnet``, ``router``, ``nat``, ``deny-ingress``, and with
    ``webhook_ports`` ``control-plane-webhooks``."""

    def __init__(self, scope: Construct, id: str, props: NetworkProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.vpc = compute_network.ComputeNetwork(
            self, "vpc", name=props.name, project=props.project,
            auto_create_subnetworks=False, routing_mode="REGIONAL",
        )
        self.subnet = compute_subnetwork.ComputeSubnetwork(
            self, "subnet",
            name=f"{props.name}-subnet",
            project=props.project,
            region=props.region,
            network=self.vpc.id,
            ip_cidr_range=props.spec.subnet_cidr,
            private_ip_google_access=True,
            secondary_ip_range=[
                compute_subnetwork.ComputeSubnetworkSecondaryIpRange(range_name=PODS_RANGE,
                                                                     ip_cidr_range=props.spec.pods_cidr),
                compute_subnetwork.ComputeSubnetworkSecondaryIpRange(range_name=SERVICES_RANGE,
                                                                     ip_cidr_range=props.spec.services_cidr),
            ],
            log_config=compute_subnetwork.ComputeSubnetworkLogConfig(
                aggregation_interval=props.flow_log_interval,
                flow_sampling=props.flow_log_sampling,
                metadata="INCLUDE_ALL_METADATA",
            ),
        )
        self.router = compute_router.ComputeRouter(
            self, "router", name=f"{props.name}-router", project=props.project,
            region=props.region, network=self.vpc.id,
        )
        self.nat = compute_router_nat.ComputeRouterNat(
            self, "nat",
            name=f"{props.name}-nat",
            project=props.project,
            region=props.region,
            router=self.router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            log_config=compute_router_nat.ComputeRouterNatLogConfig(enable=True, filter=props.nat_log_filter),
        )
        self.deny_ingress = compute_firewall.ComputeFirewall(
            self, "deny-ingress",
            name=f"{props.name}-deny-ingress",
            project=props.project,
            network=self.vpc.id,
            direction="INGRESS",
            priority=65534,
            source_ranges=["0.0.0.0/0"],
            deny=[compute_firewall.ComputeFirewallDeny(protocol="all")],
            log_config=compute_firewall.ComputeFirewallLogConfig(metadata="INCLUDE_ALL_METADATA"),
        )
        # A private cluster's control plane reaches its nodes on 443 and 10250 only (GKE's own rule); a webhook served
        # on another port needs a rule from the control plane's range.
        # Source: https://cloud.google.com/kubernetes-engine/docs/how-to/private-clusters#add_firewall_rules
        self.webhooks = None if not props.webhook_ports else compute_firewall.ComputeFirewall(
            self, "control-plane-webhooks",
            name=f"{props.name}-control-plane-webhooks",
            project=props.project,
            network=self.vpc.id,
            direction="INGRESS",
            priority=1000,
            source_ranges=[props.spec.master_cidr],
            allow=[compute_firewall.ComputeFirewallAllow(protocol="tcp",
                                                         ports=[str(p) for p in props.webhook_ports])],
            log_config=compute_firewall.ComputeFirewallLogConfig(metadata="INCLUDE_ALL_METADATA"),
        )
        _props.apply_overrides(self.subnet, props.overrides)

    @property
    def pods_range_name(self) -> str:
        """Name of the secondary range for Pods."""
        return PODS_RANGE

    @property
    def services_range_name(self) -> str:
        """Name of the secondary range for Services."""
        return SERVICES_RANGE
