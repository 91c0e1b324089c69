"""Ray pods are hardened and every Ray cluster sits behind its own NetworkPolicy, judged from the emitted objects
alone (:mod:`emitted`: what ``raytpu submit`` and ``raytpu smoke`` build, examples and a matrix of kinds, slice
shapes, cluster modes and serving endpoints).

- Schemas: NetworkPolicies, the pods the templates become and RayServices' ``serveService`` validate against the
  Kubernetes v1.34 API schema (vendored, strict: ``tests/k8s_schema.py``).
- Admission: which source each pod admits on every port it declares is computed with Kubernetes' NetworkPolicy
  semantics (``tests/netpol.py``) and compared with an explicit table.
- Pod security: the fields GKE and KubeRay honour (https://kubernetes.io/docs/concepts/security/pod-security-standards/
  "Restricted": non-root, no privilege escalation, capabilities dropped, RuntimeDefault seccomp).
"""

from __future__ import annotations

from typing import Any

import emitted
import k8s_schema
import pytest
import yaml
from crd import effective_pod_labels
from netpol import Pod, admits

from raytpu import cli
from raytpu.config import parse
from raytpu.core.common import names
from raytpu.core.common.errors import InvalidInputs
from raytpu.core.manifests import engine_pods, kuberay, pod_security, ray_ports, serving
from raytpu.core.specs.cluster.security import SecuritySpec

pytestmark = pytest.mark.unit

EMITTED = emitted.every_object()
NAMESPACE = "ray"


def _policy(item: emitted.Emitted) -> dict[str, Any]:
    return kuberay.network_policy(item.obj, item.spec)


def test_the_matrix_covers_every_kind_mode_endpoint_and_pod_role() -> None:
    kinds = {(e.mode, e.obj["kind"], role) for e in EMITTED for role, _ in emitted.pods_of(e.obj)}
    assert kinds == {(m, k, r) for m in ("standard", "autopilot") for k, r in [
        ("RayJob", "head"), ("RayJob", "tpu"), ("RayJob", "submitter"), ("RayService", "head"), ("RayService", "tpu")]}
    endpoints = {e.spec.security.serve_endpoint for e in EMITTED if e.obj["kind"] == "RayService"}
    assert endpoints == {"cluster-ip", "internal-lb", "public-lb"}


def test_policies_pods_and_services_validate_against_the_kubernetes_schema() -> None:
    for item in EMITTED:
        assert k8s_schema.schema_errors(_policy(item)) == [], item.name
        for role, pod in emitted.pods_of(item.obj):
            assert k8s_schema.schema_errors(pod) == [], f"{item.name} {role}"
        service = item.obj["spec"].get("serveService")
        if service is not None:
            assert k8s_schema.schema_errors({"apiVersion": "v1", "kind": "Service", **service}) == [], item.name


def test_a_typo_in_a_policy_is_caught_by_the_schema() -> None:
    policy = _policy(EMITTED[0])
    policy["spec"]["ingres"] = policy["spec"].pop("ingress")
    assert k8s_schema.schema_errors(policy) == ["spec: Additional properties are not allowed ('ingres' was unexpected)"]


def test_every_pod_is_non_root_unprivileged_read_only_and_has_no_api_token() -> None:
    for item in EMITTED:
        for role, pod in emitted.pods_of(item.obj):
            spec = pod["spec"]
            where = f"{item.name} {role}"
            assert spec["automountServiceAccountToken"] is False, where
            assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 100,
                                               "fsGroup": 100, "seccompProfile": {"type": "RuntimeDefault"}}, where
            assert "hostNetwork" not in spec and "hostPID" not in spec and "hostIPC" not in spec, where
            for container in spec["containers"]:
                assert container["securityContext"] == {
                    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "privileged": False,
                    "readOnlyRootFilesystem": True, "runAsNonRoot": True}, where
                mounts = {m["mountPath"] for m in container["volumeMounts"]}
                assert set(pod_security.SCRATCH.values()) <= mounts, where
                assert {"name": "HOME", "value": pod_security.HOME} in container["env"], where
                assert {"name": "USER", "value": pod_security.USER} in container["env"], where


def test_relaxing_is_only_through_the_named_options() -> None:
    relaxed = SecuritySpec(writable_root_filesystem=True, run_as_user=2000, run_as_group=3000)
    assert pod_security.container_context(relaxed)["readOnlyRootFilesystem"] is False
    assert pod_security.pod_context(relaxed)["runAsUser"] == 2000
    assert relaxed.warnings() == ["security.writable_root_filesystem is true: Ray containers may write anywhere in "
                                  "their image"]
    assert SecuritySpec().warnings() == []


def test_each_objects_policy_selects_all_its_pods_and_no_other_objects() -> None:
    for item in EMITTED:
        policies = [_policy(other) for other in EMITTED if other.source == item.source]
        mine = _policy(item)
        for role, pod in emitted.pods_of(item.obj):
            labels = effective_pod_labels(pod)
            selecting = [p["metadata"]["name"] for p in policies
                         if all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
            assert selecting == [mine["metadata"]["name"]], f"{item.name} {role}"


# ------------------------------------------------------------------------------------------ who reaches what

CONTROL_PLANE = "172.16.0.34"  # in network.master_cidr (172.16.0.32/28): KubeRay's operator, hosted by GKE
CI_RUNNER = "10.128.0.5"  # in the matrix's dashboard_from
VPC_CLIENT = "10.10.3.4"  # in network.subnet_cidr (10.10.0.0/20)
PARTNER = "198.51.100.20"  # in the public-lb matrix's serve_from
INTERNET = "203.0.113.9"
NEIGHBOUR = Pod(NAMESPACE, {"app": "notebook"})
OTHER_RAY = Pod(NAMESPACE, {"app.kubernetes.io/name": "kuberay", names.CLUSTER_LABEL: "job-other-r1"})
OTHER_NAMESPACE = Pod("default", {"app": "notebook"})
# Managed Prometheus's collector pods, labelled as GoogleCloudPlatform/prometheus-engine manifests/operator.yaml
# (DaemonSet collector, pod network) labels them; its rule evaluator, in the same namespace, scrapes nothing of Ray's.
GMP_COLLECTOR = Pod("gmp-system", {"app": "managed-prometheus-collector", "app.kubernetes.io/name": "collector"})
GMP_RULE_EVALUATOR = Pod("gmp-system", {"app.kubernetes.io/name": "rule-evaluator"})
SELF_RUN_PROMETHEUS = Pod("monitoring", {"app": "prometheus"})  # the internal-lb matrix's metrics_from
# GKE's control plane reaches pods through these (tigera/operator PR #5212: GKE labels them k8s-app); another
# kube-system pod is no more trusted than any pod.
KONNECTIVITY_AGENT = Pod("kube-system", {"k8s-app": "konnectivity-agent"})
KUBE_DNS = Pod("kube-system", {"k8s-app": "kube-dns"})
SOURCES = {"same cluster": None, "namespace pod": NEIGHBOUR, "other Ray cluster": OTHER_RAY,
           "other namespace": OTHER_NAMESPACE, "gmp collector": GMP_COLLECTOR, "gmp rule evaluator": GMP_RULE_EVALUATOR,
           "self-run prometheus": SELF_RUN_PROMETHEUS, "control plane": CONTROL_PLANE,
           "konnectivity agent": KONNECTIVITY_AGENT, "kube-dns": KUBE_DNS, "ci runner": CI_RUNNER,
           "vpc client": VPC_CLIENT, "partner": PARTNER, "internet": INTERNET}

NAMESPACE_WIDE = {"same cluster", "namespace pod", "other Ray cluster", "control plane", "konnectivity agent"}
SCRAPERS = {"same cluster", "gmp collector"}
EXPECTED: dict[str, dict[int, set[str]]] = {
    # endpoint option -> port -> the sources admitted (besides this, nothing reaches the pod)
    "cluster-ip": {6379: {"same cluster"}, 52365: {"same cluster"}, 8081: {"same cluster"}, 8080: SCRAPERS,
                   8265: NAMESPACE_WIDE, 10001: NAMESPACE_WIDE, 8000: NAMESPACE_WIDE},
    "internal-lb": {6379: {"same cluster"}, 52365: {"same cluster"}, 8081: {"same cluster"},
                    8080: SCRAPERS | {"self-run prometheus"}, 8265: NAMESPACE_WIDE | {"ci runner"},
                    10001: NAMESPACE_WIDE | {"ci runner"}, 8000: NAMESPACE_WIDE | {"vpc client"}},
    "public-lb": {6379: {"same cluster"}, 52365: {"same cluster"}, 8081: {"same cluster"}, 8080: SCRAPERS,
                  8265: NAMESPACE_WIDE, 10001: NAMESPACE_WIDE, 8000: NAMESPACE_WIDE | {"partner"}},
}


def _admitted(policies: list[dict[str, Any]], pod: dict[str, Any], port: int) -> set[str]:
    labels = effective_pod_labels(pod)
    ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    target = Pod(pod["metadata"]["namespace"], labels, ports)
    own = Pod(pod["metadata"]["namespace"], {names.CLUSTER_LABEL: labels[names.CLUSTER_LABEL]})
    return {name for name, source in SOURCES.items() if admits(policies, target, port, own if source is None
                                                              else source)}


@pytest.mark.parametrize("endpoint", list(EXPECTED))
def test_which_port_each_pod_admits_from_where(endpoint: str) -> None:
    """For every port a Ray pod of a RayJob or RayService declares: exactly the sources of the table."""
    items = [e for e in EMITTED if e.source == f"matrix-standard-{endpoint}"]
    policies = [_policy(e) for e in items]
    seen = set()
    for item in items:
        for role, pod in emitted.pods_of(item.obj):
            for container in pod["spec"]["containers"]:
                for port in container.get("ports", []):
                    number = port["containerPort"]
                    seen.add(number)
                    assert _admitted(policies, pod, number) == EXPECTED[endpoint][number], (
                        f"{item.name} {role} port {number} ({port['name']})")
            # an undeclared port (Ray's workers, Ray Train's JAX coordinator) is reached by the cluster's own pods only
            assert _admitted(policies, pod, 43123) == {"same cluster"}, f"{item.name} {role}"
    assert seen == {p.number for p in ray_ports.ALL}


def test_the_dashboard_of_a_job_is_not_reachable_from_another_namespace_without_a_named_source() -> None:
    spec = emitted.matrix_spec("standard", "cluster-ip")
    job = next(o for o in emitted.objects_of(spec) if o["kind"] == "RayJob")
    head = next(p for r, p in emitted.pods_of(job) if r == "head")
    target = Pod(NAMESPACE, effective_pod_labels(head), {"dashboard": 8265})
    assert not admits([kuberay.network_policy(job, spec)], target, 8265, OTHER_NAMESPACE)
    opened = parse(yaml.safe_dump({**yaml.safe_load(emitted.MATRIX.replace("MODE", "standard")),
                                   "security": {"dashboard_from": ["namespace:default"]}}))
    assert admits([kuberay.network_policy(job, opened)], target, 8265, OTHER_NAMESPACE)
    assert not admits([kuberay.network_policy(job, opened)], target, 6379, OTHER_NAMESPACE)


def test_operator_from_replaces_the_control_plane_and_its_konnectivity_agents() -> None:
    """A self-installed operator (``operator_from``) is the only operator source: the GKE control plane's range and
    its Konnectivity agents are no longer admitted to the head's dashboard."""
    data = {**yaml.safe_load(emitted.MATRIX.replace("MODE", "standard")),
            "security": {"operator_from": ["namespace:ray-system"]}}
    spec = parse(yaml.safe_dump(data))
    job = next(o for o in emitted.objects_of(spec) if o["kind"] == "RayJob")
    head = next(p for r, p in emitted.pods_of(job) if r == "head")
    target = Pod(NAMESPACE, effective_pod_labels(head), {"dashboard": 8265})
    policies = [kuberay.network_policy(job, spec)]
    operator = Pod("ray-system", {"app.kubernetes.io/name": "kuberay-operator"})
    assert admits(policies, target, 8265, operator)
    assert not admits(policies, target, 8265, KONNECTIVITY_AGENT)
    assert not admits(policies, target, 8265, CONTROL_PLANE)


# ------------------------------------------------------------------------------------------ the serving endpoint


def _service(endpoint: str) -> dict[str, Any]:
    spec = emitted.matrix_spec("standard", endpoint)
    return next(o for o in emitted.objects_of(spec) if o["kind"] == "RayService")


def test_the_openai_endpoint_is_cluster_ip_by_default() -> None:
    """No ``serveService``: KubeRay's own ``<name>-serve-svc`` takes the head group's ``serviceType``, ClusterIP
    (``BuildServeService``, ``controllers/ray/common/service.go``, KubeRay v1.6.0/v1.7.0)."""
    service = _service("cluster-ip")
    assert "serveService" not in service["spec"]
    assert service["spec"]["rayClusterConfig"]["headGroupSpec"]["serviceType"] == "ClusterIP"


def test_an_internal_load_balancer_is_gkes_internal_passthrough_lb() -> None:
    """``networking.gke.io/load-balancer-type: "Internal"``
    (https://cloud.google.com/kubernetes-engine/docs/concepts/service-load-balancer-parameters)."""
    service = _service("internal-lb")["spec"]["serveService"]
    assert service["metadata"] == {"name": "serve-serve-svc",
                                   "annotations": {"networking.gke.io/load-balancer-type": "Internal"}}
    assert service["spec"] == {"type": "LoadBalancer", "ports": [
        {"name": "serve", "port": 8000, "targetPort": 8000, "protocol": "TCP"}]}


def test_a_public_endpoint_needs_an_api_key_and_is_limited_to_serve_from() -> None:
    service = _service("public-lb")
    assert "annotations" not in service["spec"]["serveService"]["metadata"]
    assert service["spec"]["serveService"]["spec"]["loadBalancerSourceRanges"] == ["198.51.100.0/24"]
    app = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]
    key_file = {"api_key_file": engine_pods.SERVE_API_KEY_FILE}
    if "ingress_cls_config" in app["args"]:  # a multi-host slice: the kit's ingress checks the key
        assert app["args"]["ingress_cls_config"]["ingress_extra_kwargs"] == key_file
    else:  # direct streaming: the kit's LLM server does
        llm = app["args"]["llm_configs"][0]
        assert app["import_path"] == serving.DIRECT_BUILDER
        assert llm["runtime_env"]["env_vars"][serving.API_KEY_FILE_ENV] == key_file["api_key_file"]
    cluster = service["spec"]["rayClusterConfig"]
    for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
        spec = group["template"]["spec"]
        secret = {"secretName": "serve-key", "defaultMode": 0o440, "items": [{"key": "api-key", "path": "api-key"}]}
        assert {"name": "serve-api-key", "secret": secret} in spec["volumes"]
        mount = {"name": "serve-api-key", "mountPath": "/etc/raytpu/serve-api-key", "readOnly": True}
        assert mount in spec["containers"][0]["volumeMounts"]
    with pytest.raises(InvalidInputs, match="serve_api_key_secret: is required with serve_endpoint public-lb"):
        SecuritySpec(serve_endpoint="public-lb")


def test_validate_warns_about_every_opening(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load(emitted.MATRIX.replace("MODE", "standard"))
    data["security"] = {"serve_endpoint": "public-lb", "serve_api_key_secret": "serve-key",
                        "dashboard_from": ["0.0.0.0/0"]}
    path = tmp_path / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["validate", str(path)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: security.")]
    assert warnings == [  # (the matrix's other warnings, slices held by RayServices and zones, are tested elsewhere)
        "warning: security.serve_endpoint is public-lb: RayServices' OpenAI endpoint gets a public IP, guarded by the "
        "API key in Secret 'serve-key' and reachable from every address (serve_from is empty)",
        "warning: security.dashboard_from admits every address (0.0.0.0/0)"]


@pytest.mark.parametrize(("security", "field", "message"), [
    ({"serve_endpoint": "nodeport"}, "security.serve_endpoint", "'nodeport' is not allowed"),
    ({"serve_from": ["10.0.0.0/33"]}, "security.serve_from[0]", "is not a source"),
    ({"serve_from": ["10.0.0.1/8"]}, "security.serve_from[0]", "has host bits set"),
    ({"dashboard_from": ["namespace:Bad_NS"]}, "security.dashboard_from[0]", "names no valid namespace"),
    ({"metrics_from": ["gmp-system"]}, "security.metrics_from[0]", "is not a source"),
    ({"operator_from": ["namespace:"]}, "security.operator_from[0]", "names no valid namespace"),
    ({"serve_endpoint": "public-lb"}, "security.serve_api_key_secret", "is required with serve_endpoint public-lb"),
    ({"serve_api_key_secret": "Bad Secret"}, "security.serve_api_key_secret", "is not a Secret name"),
    ({"run_as_user": 0}, "security.run_as_user", "0 is not a non-root id"),
    ({"run_as_group": -5}, "security.run_as_group", "-5 is not a valid id"),
    ({"run_as_user": 2**31}, "security.run_as_user", "is not a valid id"),
    ({"writable_root_filesystem": "yes please"}, "security.writable_root_filesystem", ""),
    ({"serve_endpoints": "internal-lb"}, "security.serve_endpoints", ""),
])
def test_bad_security_settings_name_the_field_and_exit_2(tmp_path: Any, capsys: pytest.CaptureFixture[str],
                                                         security: dict[str, Any], field: str, message: str) -> None:
    data = yaml.safe_load(emitted.MATRIX.replace("MODE", "standard"))
    data["security"] = security
    path = tmp_path / "raytpu.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {field}: " in err and message in err and "valid: " in err and "Traceback" not in err, err
