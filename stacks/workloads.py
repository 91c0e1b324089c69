"""WorkloadsStack: KubeRay objects (and Autopilot ComputeClasses) applied onto a ClusterStack's outputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from raytpu import images
from raytpu.core.common import errors
from raytpu.core.manifests import kuberay, kueue
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
from raytpu.modules.compute_class import ComputeClass, ComputeClassProps
from raytpu.modules.kueue_object import KueueObject, KueueObjectProps
from raytpu.modules.parts.cdk import (
    Construct,
    DataResource,
    Fn,
    Precondition,
    TerraformLocal,
    TerraformResourceLifecycle,
    TerraformStack,
    ephemeral_google_client_config,
    google_provider,
    kubernetes_provider,
)
from raytpu.modules.ray_workload import RayWorkload, RayWorkloadProps
from raytpu.modules.workload_identity import (
    LEGACY_KSA_NAME,
    KubernetesNamespace,
    KubernetesNamespaceProps,
    KubernetesServiceAccount,
    KubernetesServiceAccountProps,
)
from raytpu.stacks.cluster import TERRAFORM_VERSIONS, ClusterStack, declare_backend


@dataclass(frozen=True, kw_only=True)
class WorkloadsStackProps:
    """Props of :class:`WorkloadsStack`: ``cluster`` (its outputs configure the kubernetes provider; its spec, every
    slice added, is what workloads run on) and ``images`` (:func:`raytpu.images.record.load_refs`): a workload whose kit
    image is missing stops the plan at a precondition naming the build command, while the cluster stack deploys.
    Public API: ``from raytpu import WorkloadsStackProps``."""

    cluster: ClusterStack
    images: Mapping[str, str]


class WorkloadsStack(TerraformStack):
    """The Kubernetes side: a kubernetes provider from the cluster stack's endpoint (token from an ephemeral
    ``google_client_config``, never in state), the KSA, a ComputeClass per slice on Autopilot, and a RayService per
    serving workload behind its NetworkPolicy (RayJobs are ``raytpu submit``'s); with ``teams``, each team's namespace
    and KSA and the Kueue objects. Construct ids (API): ``namespace``, ``ksa``, ``compute-class-<slice>``,
    ``workload-<name>``, ``image-not-built-<name>`` for an unbuilt kit image, ``team-<team>-namespace``,
    ``team-<team>-ksa``, ``kueue-<kind lowercase>-<name>``. Public API: ``from raytpu import WorkloadsStack``."""

    def __init__(self, scope: Construct, id: str, props: WorkloadsStackProps) -> None:
        super().__init__(scope, id)
        # cdktn refuses an ephemeral resource at synth unless the targeted Terraform versions all have them (context
        # "targetVersions", default ">=1.5.7"; cdktn 0.24 lib/validations/target-versions.js). Set on this stack, so
        # every app that builds it (cdktf synth, raytpu synth, a platform's own app) targets 1.10+. No
        # terraform.required_version: checkov 3.3's terraform_json parser fails the whole file on it (a string in the
        # terraform block), and a Terraform older than 1.10 already stops at the unknown "ephemeral" block.
        self.node.set_context("targetVersions", {"terraform": TERRAFORM_VERSIONS})
        self.props = props
        cluster = props.cluster
        # The RayServices load the core zip the cluster stack uploads (cluster.core_zip). A resource's
        # depends_on cannot name a resource of another stack, so the order is the stacks': deploying this
        # stack waits for the cluster stack, object included (the outputs read below imply it; stated here).
        self.add_dependency(cluster)
        spec = cluster.spec
        google_provider.GoogleProvider(self, "google", project=spec.project, region=spec.region)
        # The access token as an ephemeral resource: Terraform opens it on every plan and apply and never writes it to
        # state or plan files, where a data source's access_token would sit in plain text (:data:`TERRAFORM_VERSIONS`;
        # docs/FACTS.md#terraform-constructs).
        client = ephemeral_google_client_config.EphemeralGoogleClientConfig(self, "client")
        # The DNS-based endpoint has a publicly trusted certificate (no CA); the IP endpoint, the cluster's own CA.
        kubernetes_provider.KubernetesProvider(
            self, "kubernetes", host=f"https://{cluster.cluster.endpoint}", token=client.access_token,
            cluster_ca_certificate=None if spec.cluster.control_plane == "dns"
            else Fn.base64decode(cluster.cluster.ca_certificate))
        declare_backend(self, id, spec)

        self.namespace = KubernetesNamespace(self, "namespace", KubernetesNamespaceProps(name=spec.namespace))
        # cluster.legacy_ksa: no KSA changes name at an address (docs/FACTS.md#networking-legacy-ksa)
        legacy = spec.cluster.legacy_ksa
        self.service_account = KubernetesServiceAccount(self, "ksa" if legacy is None else "ksa-cluster",
                                                        KubernetesServiceAccountProps(
            name=spec.ksa_name, namespace=self.namespace.name, gsa_email=cluster.identity.email))
        self.legacy_service_account = None if legacy != "keep" else KubernetesServiceAccount(
            self, "ksa", KubernetesServiceAccountProps(name=LEGACY_KSA_NAME, namespace=self.namespace.name,
                                                       gsa_email=cluster.identity.email))
        self.team_namespaces: dict[str, KubernetesNamespace] = {}
        self.team_service_accounts: dict[str, KubernetesServiceAccount] = {}
        for team in spec.teams:
            self.team_namespaces[team.name] = KubernetesNamespace(
                self, f"team-{team.name}-namespace", KubernetesNamespaceProps(
                    name=team.namespace, labels={kueue.QUEUED_NAMESPACE_LABEL: "true"}))
            self.team_service_accounts[team.name] = KubernetesServiceAccount(
                self, f"team-{team.name}-ksa", KubernetesServiceAccountProps(
                    name=spec.ksa_name, namespace=self.team_namespaces[team.name].name,
                    gsa_email=cluster.team_identities[team.name].email))
        self.kueue_objects: list[KueueObject] = []
        self._apply_kueue_objects()
        self.compute_classes: dict[str, ComputeClass] = {}
        for item in spec.slices:
            self._compute_class(item)
        self.workloads: list[RayWorkload] = []
        self.unbuilt: dict[str, DataResource] = {}
        for work in spec.workloads:
            # one-shot RayJobs are submitted (`raytpu submit`), never applied here; so is a RayService of a team's
            # code (`serve_app`): submit uploads its code zip to the bucket first, which Terraform does not
            if not work.kind.is_job and work.code is None:
                self._apply(work)

    def _apply_kueue_objects(self) -> None:
        """Every Kueue object of the teams: a ClusterQueue after the flavors, cohort and checks it names; a LocalQueue
        after its namespace and every cluster-scoped object (destroyed in the reverse order, so Kueue's in-use
        finalizers never wait on an object still to go)."""
        spec = self.props.cluster.spec
        namespaces = {t.namespace: self.team_namespaces[t.name].namespace for t in spec.teams}
        named: list[KueueObject] = []
        queues: list[KueueObject] = []
        for manifest in kueue.objects(spec):
            props = KueueObjectProps(manifest=manifest)
            if props.namespaced:
                after = [namespaces[manifest["metadata"]["namespace"]], *(o.manifest for o in (*named, *queues))]
            else:
                after = [o.manifest for o in named] if props.kind == "ClusterQueue" else []
            made = KueueObject(self, f"kueue-{props.kind.lower()}-{props.name}", props, after=after)
            if not props.namespaced:
                (queues if props.kind == "ClusterQueue" else named).append(made)
            self.kueue_objects.append(made)

    def add_workload(self, work: WorkloadSpec) -> RayWorkload | None:
        """Adds a RayService on one of the cluster stack's slices and returns its KubeRay object (None while its kit
        image is not built); call it after the last ``add_slice``. Terraform owns long-lived objects only: a finished
        RayJob stays behind (docs/FACTS.md#kuberay-finished-rayjob). InvalidInput for a one-shot kind (naming ``raytpu
        submit``); InvalidInputs (``workloads[<i>]``) when its slice is not the cluster's or its name is taken."""
        if work.kind.is_job:
            raise errors.invalid_value(
                "kind", work.kind.name, f"of workload {work.name!r} is a one-shot RayJob, which Terraform does not "
                "apply (a finished RayJob stays: redeploys do nothing, deleting it re-runs the job)",
                f"`raytpu submit {work.name} --stack {self.props.cluster.spec.cluster.name}-cluster` for the job "
                "(list it in the config's workloads), add_workload for RayServices")
        if work.code is not None:
            raise errors.invalid_value(
                "code", work.code, f"of workload {work.name!r}: its code zip is uploaded by `raytpu submit`, which "
                "Terraform does not do", f"`raytpu submit {work.name} --stack {self.props.cluster.spec.cluster.name}"
                "-cluster` for a RayService of a team's serve_app")
        self.props.cluster.spec = self.props.cluster.spec.with_workload(work)
        self.props.cluster.fit_boot_disks(work.slice)
        return self._apply(work)

    def _compute_class(self, item: SliceSpec) -> None:
        """On Autopilot, the slice's ComputeClass (once; a slice added to the cluster stack after this stack was
        built gets it with its first workload). Queued slices use ProvisioningRequests instead."""
        spec = self.props.cluster.spec
        if spec.cluster.autopilot and item.provisioning.priority is not None and item.name not in self.compute_classes:
            self.compute_classes[item.name] = ComputeClass(
                self, f"compute-class-{item.name}", ComputeClassProps(
                    slice=item, project=spec.project,
                    master_version=self.props.cluster.cluster.cluster.master_version))

    def _image_not_built(self, work: WorkloadSpec, image: str) -> None:
        """Stands in for ``work``: a ``terraform_data`` whose precondition (on a false local: it must refer to an
        object) fails the plan with the image's name and the command that builds it."""
        stack = self.props.cluster.node.id
        built = TerraformLocal(self, f"image-{image}-built-for-{work.name}", False)
        self.unbuilt[work.name] = DataResource(
            self, f"image-not-built-{work.name}", input={"workload": work.name, "image": image},
            lifecycle=TerraformResourceLifecycle(precondition=[Precondition(
                condition=built.as_boolean,
                error_message=f"Workload {work.name} runs the kit's image {image!r}, which has no built digest: run "
                              f"`raytpu images build --stack {stack}` (it records the digest in raytpu.images.json "
                              "beside the config), then synthesize and deploy this stack again.")]))

    def _apply(self, work: WorkloadSpec) -> RayWorkload | None:
        cluster = self.props.cluster
        self._compute_class(work.slice)
        unbuilt = images.unbuilt(work, self.props.images)
        if unbuilt is not None:
            self._image_not_built(work, unbuilt)
            return None
        manifest = kuberay.workload_manifest(cluster.spec, work,
                                             images=images.resolver(self.props.images, stack=cluster.node.id),
                                             service_account=self.service_account.name,
                                             bucket=cluster.bucket.name, namespace=self.namespace.name)
        workload = RayWorkload(self, f"workload-{work.name}", RayWorkloadProps(
            manifest=manifest, requires=kuberay.NEWEST_FIELDS[manifest["kind"]],
            network_policy=kuberay.network_policy(manifest, cluster.spec)))
        self.workloads.append(workload)
        return workload
