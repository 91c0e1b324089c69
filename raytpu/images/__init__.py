"""The kit's images: their definitions (one folder per image), the digests they were built at (:mod:`.record`) and the
image a workload's pods run (:func:`pod_image`): always by digest, the kit's as built or the team's own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from raytpu.core.common import errors
from raytpu.core.tpu.catalog import RAY_VERSION
from raytpu.images.definitions import IMAGES, ImageDefinition
from raytpu.images.record import DIGEST_REF, REF_RULE

if TYPE_CHECKING:
    from raytpu.core.specs.spec import WorkloadSpec

class PodImage(NamedTuple):
    """The image of a workload's Ray pods and the Ray it runs (KubeRay's ``spec.rayVersion``)."""

    reference: str
    ray_version: str


def for_kind(kind: str) -> ImageDefinition:
    """The kit's image whose :attr:`~ImageDefinition.kinds` include ``kind`` (every kind has exactly one)."""
    found = [d for d in IMAGES.values() if kind in d.kinds]
    assert len(found) == 1, f"kind {kind} is the default of {len(found)} images"
    return found[0]


TEAM_SERVE_IMAGE_OF = "job"
"""A team's own Serve app (``serve_app``) runs on the image of kind ``job``: Ray 2.60 with Serve and JAX[tpu]. The
serving image is vLLM-TPU's, with Ray 2.56, for the kit's LLM app (raytpu/images/job/requirements.in says why)."""


def image_of(work: WorkloadSpec) -> ImageDefinition:
    """The kit's image ``work`` runs when it names none: its kind's, or the job image for a ``serve_app``."""
    return for_kind(TEAM_SERVE_IMAGE_OF if work.serve_app is not None else work.kind.name)


def pod_image(work: WorkloadSpec, refs: Mapping[str, str], *, stack: str, team_image: str | None = None) -> PodImage:
    """What ``work``'s pods run: its own ``image`` (carrying the kit's Ray), else the image of its requirements' lock
    (``team_image``, :func:`raytpu.images.team.name_of` of the lock its :class:`~raytpu.teamcode.prepared.TeamCode`
    holds), else its kind's image at the digest ``refs`` records. InvalidInput: no built digest (naming the command
    that builds it for ``stack``, the cluster stack's id), or a malformed reference."""
    if work.image is not None:
        return PodImage(work.image, RAY_VERSION)
    image = image_of(work)
    if work.requirements is not None:
        return _team_image(work, _team_name(work, team_image), refs, stack=stack)
    reference = refs.get(image.name)
    if reference is None:
        raise errors.missing(
            f"image {image.name}", f"by workload {work.name!r} (kind {work.kind.name}), but the kit's image "
            f"{image.name!r} has no built digest for this stack (none in raytpu.images.json beside the config, or "
            "one in another project's registry)",
            f"`raytpu images build --stack {stack}` first, or the workload's own image (workloads[].image, with a "
            "tag or digest)")
    if not DIGEST_REF.match(reference):
        raise errors.invalid_value(f"raytpu.images.json {image.name}", reference, "is not a digest reference",
                                   REF_RULE)
    return PodImage(reference, image.ray_version)


def _team_name(work: WorkloadSpec, team_image: str | None) -> str:
    """The team image a workload with requirements runs: its lock's, which its caller worked out once."""
    assert team_image is not None, f"{work.name}: a workload with requirements runs its lock's image (TeamCode.lock)"
    return team_image


def _team_image(work: WorkloadSpec, name: str, refs: Mapping[str, str], *, stack: str) -> PodImage:
    """The image ``name`` of ``work``'s lock by digest; InvalidInput naming ``raytpu images build`` when it is not
    built."""
    reference = refs.get(name)
    if reference is None:
        raise errors.missing(
            f"image {name}", f"by workload {work.name!r} (its requirements' lock {name.removeprefix('team-')}), but "
            "no image of that lock is built on the kit's current job image for this stack (raytpu.images.json beside "
            "the config records none, one built on an earlier job image, or one in another registry)",
            f"`raytpu images build --stack {stack}` first (it builds the kit's job image, then one image per lock "
            "on it)")
    if not DIGEST_REF.match(reference):
        raise errors.invalid_value(f"raytpu.images.json {name}", reference, "is not a digest reference", REF_RULE)
    from raytpu.images.team import BASE_IMAGE

    return PodImage(reference, IMAGES[BASE_IMAGE].ray_version)  # a lock's image is layered on the job image


def resolver(refs: Mapping[str, str], *, stack: str, team_image: str | None = None
             ) -> Callable[[WorkloadSpec], PodImage]:
    """:func:`pod_image` over ``refs``: the ``images`` :func:`raytpu.core.manifests.kuberay.workload_manifest` takes."""
    return partial(pod_image, refs=refs, stack=stack, team_image=team_image)


NOT_BUILT = "<not built: run raytpu images build>"
"""An unbuilt image's reference in a preview (``submit --dry-run``): not a Docker reference, so nothing can pull it."""
PREVIEW_ANNOTATION = "raytpu preview: images not built, not applicable"
"""The annotation key every object of such a preview carries: not a qualified name on purpose, so the API server refuses
each at ``kubectl apply``. Source: k8s.io/apimachinery ``ValidateAnnotations`` (``IsQualifiedName``)."""


def preview_resolver(refs: Mapping[str, str], *, stack: str, team_image: str | None = None
                     ) -> Callable[[WorkloadSpec], PodImage]:
    """:func:`resolver`, but an unbuilt kit image is :data:`NOT_BUILT` (:func:`mark_preview` makes it unappliable)."""
    def image(work: WorkloadSpec) -> PodImage:
        if unbuilt(work, refs, team_image) is None:
            return pod_image(work, refs, stack=stack, team_image=team_image)
        return PodImage(NOT_BUILT, image_of(work).ray_version)
    return image


def mark_preview(manifests: list[dict[str, object]], missing: list[str]) -> str:
    """Marks a preview's ``manifests`` with unbuilt images ``missing`` (:data:`PREVIEW_ANNOTATION`); returns the YAML
    comment to print above them ("" when every image is built)."""
    if not missing:
        return ""
    for manifest in manifests:
        metadata = manifest.setdefault("metadata", {})
        assert isinstance(metadata, dict)
        metadata.setdefault("annotations", {})[PREVIEW_ANNOTATION] = "run raytpu images build, then preview again"
    return (f"# PREVIEW ONLY, NOT APPLICABLE: image(s) {', '.join(missing)} not built, shown as {NOT_BUILT!r};\n"
            f"# every object carries the annotation {PREVIEW_ANNOTATION!r}, which the API server refuses.\n"
            "# `raytpu images build --stack STACK` first; then --dry-run shows what would be applied.\n")


def unbuilt(work: WorkloadSpec, refs: Mapping[str, str], team_image: str | None = None) -> str | None:
    """The name of the kit's image ``work`` needs (``team_image``: its lock's, for a workload with requirements) and
    ``refs`` lacks; None when it runs an image it has."""
    if work.image is not None:
        return None
    name = _team_name(work, team_image) if work.requirements is not None else image_of(work).name
    return None if name in refs else name
