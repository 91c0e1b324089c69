"""What looks like a secret in a team's code folder: by name (credential files every tool writes in known places) and,
cheaply, by content (a PEM private key, a service-account key, tokens in published formats). The zip lands in the
bucket every Ray pod of the project reads, and stays there: a secret in it is a leak.

Name rules are case-insensitive (``Credentials.JSON`` is the same file to a person). Token formats:
AWS access key ids (``AKIA``/``ASIA`` + 16, https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html),
GitHub tokens (``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``, ``github_pat_``,
https://github.blog/2021-04-05-behind-githubs-new-authentication-token-formats/), Hugging Face tokens (``hf_``),
Slack (``xox?-``), Google API keys (``AIza`` + 35), a service-account key file (``"private_key"`` beside
``"client_email"``, https://cloud.google.com/iam/docs/keys-create-delete).
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

SECRET_DIRS = (".ssh", ".gnupg", ".aws", ".kube", ".docker", ".azure")
"""Folders of credentials (``~/.aws``, ``~/.kube`` ...), never shipped."""
SECRET_DIR_PATHS = (".config/gcloud",)
"""Path tails of credential folders whose own name a team's package could have (the Cloud SDK's config folder)."""
SECRET_NAMES = (".env", ".env.*", "*.env", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore",
                "*.ppk", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "deploy_key*", "*_deploy_key*",
                ".netrc", "_netrc", ".npmrc", ".pypirc", ".git-credentials", ".htpasswd", ".pgpass", "credentials",
                "*credentials*.json", "*credential*.json", "*service-account*.json", "*service_account*.json",
                "*serviceaccount*.json", "key.json", "*-key.json", "*_key.json", "keyfile.json", "client_secret*.json",
                "secrets.json", "secrets.yaml", "secrets.yml", "secrets.toml", "secret.json", "*.tfstate",
                "*.tfstate.*", "kubeconfig", "*.kubeconfig", "application_default_credentials.json")
"""File names of credentials, matched case-insensitively against the last part of the path."""
SECRET_PATHS = (".aws/credentials", ".aws/config", ".kube/config", ".docker/config.json")
"""Path tails of credentials whose own name is common (``config``)."""

_CONTENT = (
    (re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"), "a PEM private key"),
    (re.compile(rb'"private_key"\s*:\s*"'), "a service-account key (a \"private_key\" field)"),
    (re.compile(rb"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])"), "an AWS access key id"),
    (re.compile(rb"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36,}"), "a GitHub token"),
    (re.compile(rb"github_pat_[A-Za-z0-9_]{60,}"), "a GitHub token"),
    (re.compile(rb"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{34,}(?![A-Za-z0-9])"), "a Hugging Face token"),
    (re.compile(rb"xox[abposr]-[0-9A-Za-z-]{10,}"), "a Slack token"),
    (re.compile(rb"(?<![A-Za-z0-9_])AIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"), "a Google API key"),
)
SCAN_BYTES = 1 << 20
"""How much of each file the content check reads (a key or token sits near the top of what holds it)."""


def secret_name(rel: str, is_dir: bool) -> bool:
    """Whether the path ``rel`` (``/``-separated) is named like a credential (case-insensitively)."""
    lowered = rel.lower()
    name = lowered.rsplit("/", 1)[-1]
    if is_dir:
        return name in SECRET_DIRS or any(lowered == tail or lowered.endswith("/" + tail) for tail in SECRET_DIR_PATHS)
    return (any(fnmatch.fnmatchcase(name, pattern) for pattern in SECRET_NAMES)
            or any(lowered == tail or lowered.endswith("/" + tail) for tail in SECRET_PATHS))


def secret_content(path: Path) -> str | None:
    """What secret the file at ``path`` holds in its first :data:`SCAN_BYTES` (``"a PEM private key"``), or None.
    Raises OSError when it cannot be read."""
    with path.open("rb") as handle:
        data = handle.read(SCAN_BYTES)
    for pattern, what in _CONTENT:
        if pattern.search(data):
            return what
    return None
