"""Field rules: the patterns, limits and ``*_problems`` checks the specs and the construct props share.
Each returns one value's problems, named by ``field``, and raises none. Stdlib and the kit's errors only."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput, InvalidInputs

PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
CLUSTER_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z](?:[a-z0-9-]{0,28}[a-z0-9])?$")
DNS_LABEL_LENGTH = 30
"""The longest slice or workload name (:data:`DNS_LABEL`)."""
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""A DNS-1123 subdomain: dot-separated labels, each starting and ending alphanumeric, 253 characters at most.
Source: k8s.io/apimachinery pkg/util/validation ``IsDNS1123Subdomain``."""
REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
ZONE = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-[a-z]$")
BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")
# Source: https://cloud.google.com/compute/docs/machine-resource (SERIES-TYPE-VCPUS, custom-VCPUS-MEMORY[-ext])
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
DISK_SIZE_GIB = (10, 65536)
DEFAULT_DISK_SIZE_GIB = 100
"""Boot disk of every node the kit makes, unless a slice sets ``disk_size_gib``."""
NODE_COUNT = (0, 1000)


def dns_label_problems(field: str, value: object) -> list[InvalidInput]:
    """A slice or workload name: a DNS label of at most 30 characters (it prefixes pool and object names)."""
    return errors.unmatched(field, value, DNS_LABEL, "is not DNS-safe", "1-30 characters: lowercase letters, "
                            "digits, hyphens; starts with a letter, ends with a letter or digit")


def dns_subdomain_problems(field: str, value: object, what: str) -> list[InvalidInput]:
    """A Kubernetes object name validated as a DNS-1123 subdomain (Secrets, ServiceAccounts); ``what`` says which."""
    return errors.unmatched(field, value, DNS_SUBDOMAIN, f"is not {what}", "a DNS subdomain: lowercase letters, "
                            "digits, '-' and '.', at most 253 characters, each dot-separated part starting and ending "
                            "with a letter or digit")


def project_problems(field: str, value: object) -> list[InvalidInput]:
    """A GCP project id (https://cloud.google.com/resource-manager/docs/creating-managing-projects#before_you_begin)."""
    return errors.unmatched(field, value, PROJECT_ID, "is not a GCP project id", "6-30 characters: lowercase "
                            "letters, digits, hyphens; starts with a letter; does not end with a hyphen")


def region_problems(field: str, value: object) -> list[InvalidInput]:
    """A GCP region such as ``us-east5``."""
    return errors.unmatched(field, value, REGION, "is not a GCP region", "a region such as us-east5")


def cluster_name_problems(field: str, value: object) -> list[InvalidInput]:
    """A GKE cluster name: at most 40 characters (``gcloud container clusters create`` refuses longer)."""
    return errors.unmatched(field, value, CLUSTER_NAME, "is not a GKE cluster name", "1-40 characters: lowercase "
                            "letters, digits, hyphens; starts with a letter, ends with a letter or digit")


def bucket_problems(field: str, value: object) -> list[InvalidInput]:
    """A GCS bucket name (https://cloud.google.com/storage/docs/buckets#naming)."""
    found = errors.unmatched(field, value, BUCKET, "is not a bucket name",
                             "3-63 characters: lowercase letters, digits, '-', '_', '.'; starts and ends with a letter "
                             "or digit")
    if found or not isinstance(value, str):
        return found
    why = reserved_bucket_name(value)
    return [errors.invalid_value(field, value, why, "a name without goog at its start, without google or a close "
                                 "misspelling, not an IP address")] if why else []


_LOOKALIKE = str.maketrans("013", "ole")
_GOOGLE = re.compile(r"g+o+g+l+e+|g+o+g+e+l+|g+o{2,}l+e+")


def reserved_bucket_name(name: str) -> str | None:
    """Why GCS refuses ``name`` although its characters are valid, or None. Source:
    https://cloud.google.com/storage/docs/buckets#naming ("Bucket names cannot be represented as an IP address in
    dotted-decimal notation", "cannot begin with the goog prefix", "cannot contain google or close misspellings,
    such as g00gle")."""
    if re.fullmatch(r"[0-9]{1,3}(\.[0-9]{1,3}){3}", name):
        return "is an IP address in dotted-decimal form, which GCS refuses as a bucket name"
    if name.startswith("goog"):
        return "starts with goog, a prefix GCS keeps for Google"
    if _GOOGLE.search(re.sub(r"[-_.]", "", name.translate(_LOOKALIKE))):
        return "contains google or a close misspelling (such as g00gle), which GCS refuses in a bucket name"
    return None


def label_problems(field: str, labels: Mapping[str, str]) -> list[InvalidInput]:
    """GCP resource labels (https://cloud.google.com/resource-manager/docs/labels-overview#requirements)."""
    found = []
    for key, value in labels.items():
        if not isinstance(key, str) or not LABEL_KEY.match(key):
            found.append(errors.invalid_value(f"{field}[{key!r}]", key, "is not a valid label key",
                                              "lowercase letters, digits, '_' and '-', starting with a letter; "
                                              "at most 63 characters"))
        elif not isinstance(value, str) or not LABEL_VALUE.match(value):
            found.append(errors.invalid_value(f"{field}[{key!r}]", value, "is not a valid label value",
                                              "up to 63 lowercase letters, digits, '_' and '-'"))
    return found


def cidr_problems(field: str, value: object) -> list[InvalidInput]:
    """An IPv4 range such as ``10.10.0.0/20``."""
    try:
        ipaddress.IPv4Network(value)
    except (ValueError, TypeError):
        return [errors.invalid_value(field, value, "is not a CIDR range", "an IPv4 range such as 10.10.0.0/20")]
    return []


def range_problems(field: str, value: object, low: int, high: int, unit: str = "") -> list[InvalidInput]:
    """A whole number within ``[low, high]``."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return []
    return [errors.invalid_value(field, value, "is out of range", f"{low} to {high}{unit}")]


def choice_problems(field: str, value: object, choices: tuple[str, ...]) -> list[InvalidInput]:
    """One of a fixed set."""
    return [] if value in choices else [errors.invalid_choice(field, value, choices)]


def raise_all(found: list[InvalidInput]) -> None:
    """Raises ``found`` together as one InvalidInputs (a single problem too); nothing when it is empty."""
    if found:
        raise InvalidInputs(found)
