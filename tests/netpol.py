"""Kubernetes NetworkPolicy semantics, for judging which traffic a set of policies admits (ingress only).

The rules, from the NetworkPolicy API reference (https://kubernetes.io/docs/concepts/services-networking/
network-policies/ and ``k8s.io/api/networking/v1/types.go``):

- a pod is isolated for ingress when some policy in its namespace selects it (``podSelector``) and lists
  ``Ingress`` in ``policyTypes``; a pod no policy selects admits everything;
- an isolated pod admits a connection when some rule of some policy selecting it matches it: every port when the
  rule has no ``ports`` (else port, named port of the pod, or ``port``..``endPort``, protocol TCP by default),
  every source when the rule has no ``from`` (else one peer matching);
- a peer with only ``podSelector`` means pods of the policy's own namespace; with only ``namespaceSelector``, every
  pod of the matching namespaces; with both, pods matching both; an ``ipBlock`` matches addresses in ``cidr`` but
  not in ``except`` (used for sources outside the pod network: the control plane, load balancers, VPC clients);
- traffic from the pod's own node (the kubelet's probes) is always allowed ("traffic to and from the node where a
  Pod is running is always allowed").
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    """A pod as policies see it: namespace, labels, its namespace's labels, declared container ports."""

    namespace: str
    labels: Mapping[str, str]
    ports: Mapping[str, int] = field(default_factory=dict)

    @property
    def namespace_labels(self) -> dict[str, str]:
        """Every namespace carries ``kubernetes.io/metadata.name`` (Kubernetes 1.22+)."""
        return {"kubernetes.io/metadata.name": self.namespace}


Source = Pod | str
"""A connection's source: a pod, or an IP address outside the pod network."""


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector (``matchLabels`` and ``matchExpressions``) matches ``labels``; ``{}`` matches all."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _peer_matches(peer: Mapping[str, Any], policy_namespace: str, source: Source) -> bool:
    if "ipBlock" in peer:
        if not isinstance(source, str):
            return False
        address = ipaddress.ip_address(source)
        block = peer["ipBlock"]
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except") or [])
    if isinstance(source, str):
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], source.namespace_labels):
            return False
    elif source.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector") or {}, source.labels)


def _port_matches(rule_port: Mapping[str, Any], target: Pod, port: int) -> bool:
    if rule_port.get("protocol", "TCP") != "TCP":
        return False
    if "port" not in rule_port:
        return True
    wanted = rule_port["port"]
    number = target.ports.get(wanted) if isinstance(wanted, str) else wanted
    return number is not None and number <= port <= rule_port.get("endPort", number)


def admits(policies: Iterable[Mapping[str, Any]], target: Pod, port: int, source: Source) -> bool:
    """Whether ``policies`` admit a TCP connection from ``source`` to ``target`` on ``port``."""
    selecting = [p for p in policies if p["metadata"]["namespace"] == target.namespace
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
                 and selects(p["spec"]["podSelector"], target.labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports_ok = not rule.get("ports") or any(_port_matches(p, target, port) for p in rule["ports"])
            from_ok = not rule.get("from") or any(_peer_matches(peer, policy["metadata"]["namespace"], source)
                                                  for peer in rule["from"])
            if ports_ok and from_ok:
                return True
    return False
