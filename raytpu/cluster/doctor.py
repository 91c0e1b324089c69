"""``raytpu doctor --stack``: what runs on a deployed cluster against what the kit was built and tested for, read
through the Kubernetes API (list and get only; nothing is written). Each check is a
:class:`~raytpu.core.common.checkup.Check` row; a read the caller may not make (RBAC 403) is a ``?`` row naming the
permission, never an error. Sources of each rule: docs/FACTS.md#client-doctor."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from raytpu.cluster import occupancy
from raytpu.cluster.gke import service_ready
from raytpu.cluster.kube.crd_schema import served_schema, undeclared_fields
from raytpu.cluster.kube.kube_client import KubeClient
from raytpu.cluster.kube.kube_errors import KubeError
from raytpu.cluster.kube_timeline import parse_time
from raytpu.cluster.outputs import StackOutputs, cluster_stack_id
from raytpu.cluster.runs import SELECTOR
from raytpu.core.common.checkup import Check, fail, ok, unknown
from raytpu.core.common.names import NODE_POOL_LABEL
from raytpu.core.manifests import kuberay
from raytpu.core.manifests.kube_resources import resource
from raytpu.core.specs.slices import notice
from raytpu.core.specs.slices.gke_versions import version_floor, version_key
from raytpu.core.specs.slices.provisioning import TPU_TAINT
from raytpu.core.specs.spec import ClusterSpec, SliceSpec
from raytpu.core.tpu.plan import ACCELERATOR_LABEL, TOPOLOGY_LABEL, TPU_RESOURCE

WEBHOOK_CONFIG = "kuberay-tpu-mutating-webhook-cfg"
WEBHOOK_SERVICE = "kuberay-tpu-webhook"
"""The TPU webhook's MutatingWebhookConfiguration and its Service, as the open-source webhook names them. GKE's
pages name neither for the add-on's copy, so any configuration with this name, or with a webhook served by this
Service, counts. Source: GoogleCloudPlatform/ai-on-gke ``ray-on-gke/tpu/kuberay-tpu-webhook/deployments/
mutating-webhook-cfg.yaml`` (2890e65)."""
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
"""The Cloud Storage FUSE CSI driver's CSIDriver object. Source: https://cloud.google.com/kubernetes-engine/docs/how-to/
persistent-volumes/cloud-storage-fuse-csi-driver-setup (driver name)."""
GSA_ANNOTATION = "iam.gke.io/gcp-service-account"
"""Workload Identity: the KSA's annotation naming the Google service account it acts as (modules/
workload_identity.py)."""
OPERATOR_VERSION_NOTE = ("GKE documents no KubeRay version for the Ray Operator add-on: the served CRD fields are "
                         "the evidence")
"""What GKE's add-on says of its own KubeRay: nothing documented (docs/FACTS.md#kuberay-gke-addon), so
the doctor reports the fields the CRDs serve, never a guessed release."""
WAITING = ("", "Initializing", "Waiting")
"""RayJob ``jobDeploymentStatus`` values of a job that has not started running (New is ``""``). Source: KubeRay v1.7.0
``ray-operator/apis/ray/v1/rayjob_types.go`` ``JobDeploymentStatus``."""
FAILED = ("Failed", "ValidationFailed")
"""RayJob ``jobDeploymentStatus`` values of a job that failed for good (same source)."""
CRD_KINDS = ("RayJob", "RayService", "RayCluster")
Reader = Callable[[], Check | list[Check]]


class Permission:
    """What a read needs: ``verb``, ``resource`` and API ``group`` (``""``: core), named in a ``?`` row."""

    def __init__(self, verb: str, kind: str) -> None:
        res = resource(kind)
        self.verb, self.resource, self.group = verb, res.plural, res.group

    def __str__(self) -> str:
        return f"{self.verb} {self.resource} (API group {self.group or 'core'})"


RBAC_DENIAL = re.compile(r'cannot (\w+) resource "([^"]+)" in API group "([^"]*)"')
"""The RBAC authorizer's sentence in a 403 (k8s.io/apiserver ``forbiddenMessage``): the verb, resource and group
actually refused, which may be another read than the check's first (the holders' pod list reads nodes first)."""


def guarded(check: str, expected: str, need: Permission, read: Reader) -> list[Check]:
    """The rows of ``read``; a 403 is one ``?`` row naming the permission refused (the server's sentence, else
    ``need``), with the RBAC grant as the fix."""
    try:
        rows = read()
    except KubeError as exc:
        if exc.status != 403:
            raise
        said = RBAC_DENIAL.search(exc.problem)
        named = f"{said[1]} {said[2]} (API group {said[3] or 'core'})" if said else str(need)
        return [unknown(check, f"forbidden: {named}", expected,
                        f"grant the caller {named}: an RBAC rule, or an IAM role holding it")]
    return rows if isinstance(rows, list) else [rows]


def diagnose(client: KubeClient, spec: ClusterSpec, outputs: StackOutputs, refs: Mapping[str, str]) -> list[Check]:
    """Every check, in the table's order: versions, slices, identity and storage, what runs."""
    rows = versions(client, spec)
    for item in spec.slices:
        rows += slice_rows(client, spec, item)
    rows += identity(client, spec, outputs)
    rows += running(client, refs)
    return rows


# ---------------------------------------------------------------------------------------------- versions

def versions(client: KubeClient, spec: ClusterSpec) -> list[Check]:
    """The control plane against the config's floor, each KubeRay CRD's newest fields, the TPU webhook, GCS FUSE."""
    floor, why = version_floor((s.plan for s in spec.slices), spec.cluster.mode,
                               multislice=any(w.multislice for w in spec.workloads),
                               provisioning=[m for s in spec.slices for m in s.modes],
                               long_notice=any(s.notice_s > notice.NOTICE_S for s in spec.slices))
    rows = [_gke_version(client, floor, why)]
    for kind in CRD_KINDS:
        name = resource(kind).display
        rows += guarded(f"crd {name}", f"declares the kit's fields (KubeRay >= {kuberay.MIN_KUBERAY_VERSION})",
                        Permission("get", "CustomResourceDefinition"), partial(_crd, client, kind))
    rows += guarded("tpu webhook", f"a MutatingWebhookConfiguration for Service {WEBHOOK_SERVICE}",
                    Permission("list", "MutatingWebhookConfiguration"), lambda: _webhook(client))
    rows += guarded("gcs fuse csi driver", f"CSIDriver {GCSFUSE_DRIVER}", Permission("get", "CSIDriver"),
                    lambda: _gcsfuse(client))
    return rows


def _gke_version(client: KubeClient, floor: str, why: str) -> Check:
    expected = f">= {floor} ({why})"
    found = str(client.version().get("gitVersion", "")).removeprefix("v")
    try:
        older = version_key(found) < version_key(floor)
    except Exception:  # not a GKE version (a test cluster): shown, not compared
        return unknown("gke version", found or "(none)", expected, "run it against a GKE cluster")
    if older:
        return fail("gke version", found, expected, f"upgrade the control plane to {floor} or newer")
    return ok("gke version", found, expected)


def _crd(client: KubeClient, kind: str) -> Check:
    res = resource(kind)
    check = f"crd {res.display}"
    expected = f"declares the kit's fields (KubeRay >= {kuberay.MIN_KUBERAY_VERSION}); {OPERATOR_VERSION_NOTE}"
    crd = client.get("CustomResourceDefinition", res.display)
    if crd is None:
        return fail(check, "not served", expected, "enable the Ray Operator add-on (cluster stack: ray_operator)")
    newest, brought = kuberay.NEWEST_FIELDS.get(kind, ((), ""))
    missing = [f for f in newest if undeclared_fields(_probe(f), served_schema(crd, res))]
    if missing:
        return fail(check, f"lacks {', '.join(missing)} (KubeRay {brought})", expected,
                    kuberay.kuberay_remedy(kuberay.MIN_KUBERAY_VERSION, kind))
    served = [v.get("name") for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")]
    return ok(check, f"served {', '.join(map(str, served))}; declares {', '.join(newest) or 'the spec'}", expected)


def _probe(path: str) -> dict[str, Any]:
    """A minimal object setting ``path`` (``spec.a.b``): what :func:`undeclared_fields` checks a CRD with."""
    obj: dict[str, Any] = {}
    node = obj
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = 1
    return obj


def _webhook(client: KubeClient) -> Check:
    expected = f"a MutatingWebhookConfiguration for Service {WEBHOOK_SERVICE}"
    for config in client.listed("MutatingWebhookConfiguration"):
        name = str((config.get("metadata") or {}).get("name", ""))
        services = [((w.get("clientConfig") or {}).get("service") or {}) for w in config.get("webhooks") or []]
        if name == WEBHOOK_CONFIG or any(s.get("name") == WEBHOOK_SERVICE for s in services):
            return ok("tpu webhook", name, expected)
    return fail("tpu webhook", "none", expected, "enable the Ray Operator add-on (it installs the TPU webhook), or "
                "install ai-on-gke's kuberay-tpu-webhook")


def _gcsfuse(client: KubeClient) -> Check:
    expected = f"CSIDriver {GCSFUSE_DRIVER}"
    if client.get("CSIDriver", GCSFUSE_DRIVER) is None:
        return fail("gcs fuse csi driver", "absent", expected, "enable the GcsFuseCsiDriver add-on (cluster stack)")
    return ok("gcs fuse csi driver", GCSFUSE_DRIVER, expected)


# ---------------------------------------------------------------------------------------------- slices

def slice_rows(client: KubeClient, spec: ClusterSpec, item: SliceSpec) -> list[Check]:
    """Per copy of ``item`` (a node pool on Standard): Ready hosts, TPU labels, allocatable chips, taints, holders."""
    plan = item.plan
    if spec.cluster.autopilot:
        return guarded(f"slice {item.name}", "nodes made on demand", Permission("list", "Node"),
                       lambda: _autopilot_slice(client, item))
    rows: list[Check] = []
    for index, pool in enumerate(item.pool_names):
        expected = (f"{plan.hosts} Ready, {ACCELERATOR_LABEL}={plan.gke_accelerator}, {TOPOLOGY_LABEL}="
                    f"{plan.topology}, {TPU_RESOURCE}={plan.chips_per_host}, taint {TPU_TAINT} only")
        rows += guarded(f"slice {item.name} pool {pool}", expected, Permission("list", "Node"),
                        partial(_pool, client, item, pool, expected))
        rows += guarded(f"slice {item.name} pool {pool} holders", "free, or held by a running job",
                        Permission("list", "Pod"), partial(_holders, client, spec, item, index, pool))
    return rows


def _pool(client: KubeClient, item: SliceSpec, pool: str, expected: str) -> Check:
    plan = item.plan
    check = f"slice {item.name} pool {pool}"
    nodes = client.nodes(f"{NODE_POOL_LABEL}={pool}")
    ready = [n for n in nodes if _ready(n)]
    problems = []
    idle_ok = not nodes and any(m.pool.scale_from_zero for m in item.modes)  # flex-start, queued: 0 when idle
    if len(ready) != plan.hosts and not idle_ok:
        problems.append(f"{len(ready)} of {plan.hosts} hosts Ready ({len(nodes)} nodes)")
    for node in nodes:
        name = (node.get("metadata") or {}).get("name", "?")
        labels = (node.get("metadata") or {}).get("labels") or {}
        for label, want in ((ACCELERATOR_LABEL, plan.gke_accelerator), (TOPOLOGY_LABEL, plan.topology)):
            if labels.get(label) != want:
                problems.append(f"{name}: {label}={labels.get(label)}")
        chips = ((node.get("status") or {}).get("allocatable") or {}).get(TPU_RESOURCE)
        if str(chips) != str(plan.chips_per_host):
            problems.append(f"{name}: allocatable {TPU_RESOURCE}={chips}")
        other = sorted({f"{t.get('key')}:{t.get('effect')}" for t in (node.get("spec") or {}).get("taints") or []
                        if t.get("key") != TPU_TAINT})
        if other:
            problems.append(f"{name}: taints {', '.join(other)}")
    if problems:
        return fail(check, "; ".join(problems), expected,
                    "look at the pool's nodes (kubectl describe nodes -l " f"{NODE_POOL_LABEL}={pool}); recreate the "
                    "pool from the cluster stack if its labels or chips are wrong")
    return ok(check, f"{len(ready)} Ready, labels and {TPU_RESOURCE} as planned", expected)


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and str(c.get("status")) == "True" for c in conditions)


def _holders(client: KubeClient, spec: ClusterSpec, item: SliceSpec, index: int, pool: str) -> Check:
    check = f"slice {item.name} pool {pool} holders"
    held = occupancy.holders(client, item, index, spec.cluster.autopilot)
    if not held:
        return ok(check, "free", "free, or held by a running job")
    finished = _finished_holders(client, held)
    if finished:
        return fail(check, f"held by {', '.join(held[:3])}; finished: {', '.join(finished)}",
                    "free, or held by a running job", f"delete the finished run (raytpu runs cancel {finished[0]})")
    return ok(check, f"busy: {', '.join(held[:3])}{' ...' if len(held) > 3 else ''}", "free, or held by a running job")


def _finished_holders(client: KubeClient, held: list[str]) -> list[str]:
    """The kit's finished RayJobs whose pods still hold the slice (``namespace/pod`` in ``held``)."""
    pods = {f"{(p.get('metadata') or {}).get('namespace', '?')}/{(p.get('metadata') or {}).get('name', '?')}": p
            for p in client.pods("")}
    done = {str((j.get("metadata") or {}).get("name")) for j in client.objects("RayJob", SELECTOR)
            if str((j.get("status") or {}).get("jobDeploymentStatus")) in ("Complete", "Failed")}
    origins = {occupancy.owner(pods[h]) for h in held if h in pods}
    return sorted(origins & done)


def _autopilot_slice(client: KubeClient, item: SliceSpec) -> Check:
    plan = item.plan
    selector = f"{ACCELERATOR_LABEL}={plan.gke_accelerator},{TOPOLOGY_LABEL}={plan.topology}"
    nodes = client.nodes(selector)
    return ok(f"slice {item.name}", f"{sum(map(_ready, nodes))} Ready nodes with its labels (Autopilot makes them "
              "on demand)", "nodes made on demand")


# ---------------------------------------------------------------------------------------------- identity

def identity(client: KubeClient, spec: ClusterSpec, outputs: StackOutputs) -> list[Check]:
    """The pods' KSA exists with its Workload Identity annotation; the outputs' bucket is the config's."""
    expected = (f"ServiceAccount {outputs.service_account} with {GSA_ANNOTATION}="
                f"...@{spec.project}.iam.gserviceaccount.com")
    rows = guarded("service account", expected, Permission("get", "ServiceAccount"),
                   lambda: _ksa(client, spec, outputs, expected))
    rows += guarded("pods' service account", f"every kit RayService and running RayJob on {outputs.service_account}",
                    Permission("list", "RayService"), lambda: _old_ksa(client, spec, outputs))
    if outputs.bucket == spec.bucket:
        rows.append(ok("bucket", outputs.bucket, spec.bucket))
    else:
        rows.append(fail("bucket", outputs.bucket, spec.bucket, "deploy the cluster stack from this config, or pass "
                         "the outputs of the stack deployed from it (--outputs)"))
    return rows


def _ksa(client: KubeClient, spec: ClusterSpec, outputs: StackOutputs, expected: str) -> Check:
    obj = client.get("ServiceAccount", outputs.service_account)
    if obj is None:
        return fail("service account", "absent", expected, "deploy the workloads stack (it makes the KSA)")
    gsa = str(((obj.get("metadata") or {}).get("annotations") or {}).get(GSA_ANNOTATION, ""))
    if not gsa.endswith(f"@{spec.project}.iam.gserviceaccount.com"):
        return fail("service account", f"{GSA_ANNOTATION}={gsa or '(none)'}", expected,
                    "deploy the workloads stack again (it sets the annotation)")
    return ok("service account", f"{outputs.service_account} -> {gsa}", expected)


def _template_ksa(obj: Mapping[str, Any]) -> str | None:
    """The KSA a KubeRay object's head pod runs as (RayService ``rayClusterConfig``, RayJob ``rayClusterSpec``)."""
    spec = obj.get("spec") or {}
    cluster = spec.get("rayClusterConfig") or spec.get("rayClusterSpec") or {}
    name = ((cluster.get("headGroupSpec") or {}).get("template") or {}).get("spec", {}).get("serviceAccountName")
    return str(name) if name else None


def _old_ksa(client: KubeClient, spec: ClusterSpec, outputs: StackOutputs) -> Check:
    """The kit's RayServices and unfinished RayJobs whose pods run as another KSA than the stack's (the shared
    ``ray`` of a stack from before ``cluster.legacy_ksa``). KubeRay v1.7.0 applies no pod template change to a running
    RayService with upgradeStrategy None, so such a RayService keeps its KSA until re-created; ``legacy_ksa: drop``
    takes that KSA's binding away (docs/FACTS.md#networking-legacy-ksa,
    docs/FACTS.md#networking-legacy-ksa-services)."""
    expected = f"every kit RayService and running RayJob on {outputs.service_account}"
    live: dict[str, set[str]] = {}  # object name -> the KSAs its pods run as now
    for pod in client.pods(""):
        owner = occupancy.owner(pod)
        ksa = (pod.get("spec") or {}).get("serviceAccountName")  # admission always sets it on a created pod
        if owner and ksa:
            live.setdefault(owner, set()).add(str(ksa))
    others = []
    for kind in ("RayService", "RayJob"):
        for obj in client.objects(kind, SELECTOR):
            status = str((obj.get("status") or {}).get("jobDeploymentStatus", ""))
            if kind == "RayJob" and status in ("Complete", "Failed", "ValidationFailed"):
                continue
            name = str((obj.get("metadata") or {}).get("name"))
            # the live pods' KSA: a RayService updated in place keeps its pods (and their KSA) while its spec names
            # the new one; the spec only where no pod runs yet
            running = live.get(name) or ({ksa} if (ksa := _template_ksa(obj)) else set())
            others += [(kind, name, ksa) for ksa in sorted(running) if ksa != outputs.service_account]
    if not others:
        return ok("pods' service account", expected.removeprefix("every kit "), expected)
    found = "; ".join(f"{kind} {name} on {ksa}" for kind, name, ksa in others[:3]) + (
        f" and {len(others) - 3} more" if len(others) > 3 else "")
    services = [name for kind, name, _ in others if kind == "RayService"]
    stack = cluster_stack_id(outputs.cluster_name)
    fix = (f"raytpu submit {services[0]} --stack {stack} --replace (each RayService); " if services else "") + (
        "let running RayJobs end; only then set cluster.legacy_ksa: drop")
    if spec.cluster.legacy_ksa == "keep":
        return ok("pods' service account", f"{found} (kept bound: legacy_ksa keep; {fix})", expected)
    return fail("pods' service account", found, expected, fix)


# ---------------------------------------------------------------------------------------------- what runs

def running(client: KubeClient, refs: Mapping[str, str]) -> list[Check]:
    """Image digests of the kit's running pods against the images record; the kit's runs waiting or failed."""
    rows = guarded("images", "every Ray container's image by a digest in raytpu.images.json",
                   Permission("list", "Pod"), lambda: _images(client, refs))
    for kind in ("RayJob", "RayService"):
        rows += guarded(f"{resource(kind).plural}", "none waiting or failed", Permission("list", kind),
                        partial(_runs, client, kind))
    return rows


def _digest(text: str) -> str:
    return text.rpartition("@")[2] if "@sha256:" in text else ""


def _images(client: KubeClient, refs: Mapping[str, str]) -> Check:
    expected = "every Ray container's image by a digest in raytpu.images.json"
    known = {_digest(r) for r in refs.values()} - {""}
    kit = {str((o.get("metadata") or {}).get("name")) for kind in ("RayJob", "RayService")
           for o in client.objects(kind, SELECTOR)}
    foreign, seen = [], 0
    for pod in client.pods(""):
        meta = pod.get("metadata") or {}
        if occupancy.owner(pod) not in kit:
            continue
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if not str(status.get("name", "")).startswith("ray-"):
                continue  # injected sidecars (GCS FUSE) are GKE's
            seen += 1
            digest = _digest(str(status.get("imageID", ""))) or _digest(str(status.get("image", "")))
            if digest not in known:
                foreign.append(f"{meta.get('name')}/{status.get('name')}: {status.get('image')}")
    if foreign:
        return fail("images", "; ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""),
                    expected, "submit again after `raytpu images build` (the record names what pods run)")
    return ok("images", f"{seen} running Ray containers, each a recorded digest", expected)


def _runs(client: KubeClient, kind: str, now: float | None = None) -> list[Check]:
    """The kit's runs that are stuck now: a RayJob failed while its pods still hold a slice, or waiting past its
    capacity deadline; a RayService not serving. A failed RayJob whose cluster is gone is history (KubeRay keeps the
    object), and one still inside its wait is information: neither keeps the doctor red."""
    plural = resource(kind).plural
    rows = []
    holders = {occupancy.owner(p) for p in client.pods("")} if kind == "RayJob" else set()
    now = time.time() if now is None else now
    for obj in client.objects(kind, SELECTOR):
        name = str((obj.get("metadata") or {}).get("name"))
        status = obj.get("status") or {}
        note = ""
        if kind == "RayJob":
            state = str(status.get("jobDeploymentStatus", ""))
            left = _wait_left(obj, now) if state in WAITING else None
            if state in FAILED and name not in holders:
                continue  # its cluster is gone: nothing held, nothing to fix here
            stuck = state in WAITING + FAILED
            broken = _pods_broken(client, name) if state in WAITING else ""
            if left is not None and left > 0 and not broken:
                note = f"waiting for capacity, {left:.0f}s left of its preRunningDeadlineSeconds"
            elif broken:
                state = f"{state or 'New'} ({broken})"
        else:  # not serving: waiting for capacity, or failing (gke.service_ready reads both KubeRay forms)
            state = str(status.get("serviceStatus") or "not ready")
            stuck = not service_ready(obj)
        if not stuck:
            continue
        events = client.events(f"involvedObject.name={name}")
        last = max(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""), default=None)
        said = f"; last event {last.get('reason')}: {str(last.get('message', ''))[:160]}" if last else ""
        if note:
            rows.append(ok(f"{plural} {name}", f"{state or 'New'}: {note}{said}", "running or done"))
            continue
        rows.append(fail(f"{plural} {name}", f"{state or 'New'}{said}", "running or done",
                         f"raytpu runs logs {name}; free capacity, or cancel it (raytpu runs cancel {name})"))
    return rows or [ok(plural, "none waiting or failed", "none waiting or failed")]


BROKEN_POD_REASONS = ("CreateContainerConfigError", "CreateContainerError", "ImagePullBackOff", "ErrImagePull",
                      "InvalidImageName", "CrashLoopBackOff")
"""A container waiting for one of these is not waiting for capacity: no deadline makes it start (a Secret or an image
missing, a crash). Source: Kubernetes ``ContainerStateWaiting.reason`` (kubelet)."""


def _pods_broken(client: KubeClient, job: str) -> str:
    """A pod of RayJob ``job`` whose container waits for something capacity will not bring, as ``pod: reason``."""
    for pod in occupancy.pods_of(client, "RayJob", job):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in BROKEN_POD_REASONS:
                return f"{(pod.get('metadata') or {}).get('name')}: {waiting.get('reason')}"
    return ""


def _wait_left(job: Mapping[str, Any], now: float) -> float | None:
    """Seconds a waiting RayJob has left before KubeRay fails it (``status.startTime`` plus
    ``spec.preRunningDeadlineSeconds``); None when it names no deadline. Source: KubeRay v1.7.0
    ``checkPreRunningDeadlineAndUpdateStatusIfNeeded`` (docs/FACTS.md#kuberay-retries)."""
    started = parse_time((job.get("status") or {}).get("startTime"))
    deadline = (job.get("spec") or {}).get("preRunningDeadlineSeconds")
    if started is None or not isinstance(deadline, int):
        return None
    return started + deadline - now
