"""Issue 48: what a team's code folder ships. Files named like credentials stay out (any case, through links),
files that hold a private key or a token are refused naming the file, ``.raytpuignore`` and the project's
``.gitignore`` are honoured with git's own matching (checked against ``git`` on the same tree), and a
``.raytpuignore`` negation is the one explicit way to ship such a file anyway."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from raytpu.core.common.errors import InvalidInput
from raytpu.teamcode import bundle as bundle_mod

pytestmark = pytest.mark.unit

SRC = {"lm/__init__.py": "", "lm/train.py": "def train_loop(config):\n    return config\n"}
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\n"


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def shipped(root: Path) -> list[str]:
    return [name for name, _ in bundle_mod.code_files("workloads[3].code", root)[0]]


@pytest.mark.parametrize("rel", [".aws/credentials", ".kube/config", "key.json", "secrets.env", "deploy_key",
                                 ".docker/config.json", "Credentials.JSON", ".env", ".ENV.local", "certs/TLS.KEY",
                                 "id_rsa.pub", ".netrc", ".git-credentials", "prod.env", "sa-key.json",
                                 "terraform.tfstate", ".ssh/known_hosts", ".config/gcloud/access_tokens.db"])
def test_files_named_like_credentials_stay_out_whatever_their_case(tmp_path: Path, rel: str) -> None:
    root = write(tmp_path, {**SRC, rel: "secret"})
    files, left_out = bundle_mod.code_files("workloads[3].code", root)
    assert [n for n, _ in files] == sorted(SRC)
    assert any(rel == x or rel.startswith(x) for x in left_out), left_out


def test_a_link_to_a_secret_file_stays_out(tmp_path: Path) -> None:
    root = write(tmp_path, {**SRC, ".env": "TOKEN=1"})
    (root / "settings.txt").symlink_to(".env")
    (root / "conf").symlink_to(write(root, {".aws/credentials": "x"}) / ".aws")
    assert shipped(root) == sorted(SRC)


@pytest.mark.parametrize(("text", "what"), [
    (PEM, "PEM private key"), ('{"type": "service_account", "private_key": "x"}', "service-account key"),
    ("aws = 'AKIAIOSFODNN7EXAMPLE'\n", "AWS access key"), ("t = 'ghp_" + "a" * 36 + "'\n", "GitHub token"),
    ("HF_TOKEN=hf_" + "b" * 34 + "\n", "Hugging Face token")])
def test_a_file_holding_a_secret_is_refused_naming_it_and_the_field(tmp_path: Path, text: str, what: str) -> None:
    root = write(tmp_path, {**SRC, "lm/settings.py": text})
    with pytest.raises(InvalidInput) as raised:
        shipped(root)
    assert raised.value.field == "workloads[3].code"
    assert "'lm/settings.py' looks like a secret" in str(raised.value) and what in str(raised.value)
    assert ".raytpuignore" in raised.value.valid


def test_a_raytpuignore_negation_is_the_explicit_opt_in(tmp_path: Path) -> None:
    root = write(tmp_path, {**SRC, "lm/settings.py": PEM, "test/fixture.pem": PEM,
                            ".raytpuignore": "!lm/settings.py\n!test/fixture.pem\n"})
    assert shipped(root) == sorted([*SRC, ".raytpuignore", "lm/settings.py", "test/fixture.pem"])


def test_a_gitignore_negation_is_no_opt_in(tmp_path: Path) -> None:
    root = write(tmp_path, {**SRC, "lm/settings.py": PEM, ".gitignore": "!lm/settings.py\n"})
    with pytest.raises(InvalidInput, match="looks like a secret"):
        shipped(root)


def test_ignored_files_are_neither_shipped_nor_scanned(tmp_path: Path) -> None:
    root = write(tmp_path, {**SRC, "local/creds.py": PEM, "data/big.bin": "x", ".gitignore": "local/\n",
                            ".raytpuignore": "data/\n"})
    assert shipped(root) == sorted([*SRC, ".gitignore", ".raytpuignore"])


def test_the_projects_gitignore_above_the_folder_counts(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    write(tmp_path, {".gitignore": "src/lm/generated/\n*.log\n"})
    root = write(tmp_path / "src", {**SRC, "lm/generated/x.py": "1", "run.log": "x"})
    assert shipped(root) == sorted(SRC)


@pytest.mark.parametrize(("rel", "problem"), [("dangling", "is a link to nothing"), ("loop", "is a link loop")])
def test_a_broken_link_is_one_error_naming_it(tmp_path: Path, rel: str, problem: str) -> None:
    root = write(tmp_path, SRC)
    (root / rel).symlink_to("nope" if rel == "dangling" else "loop")
    with pytest.raises(InvalidInput, match=f"workloads\\[3\\].code: '{rel}' {problem}"):
        shipped(root)


# ---------------------------------------------------------------------- gitignore matching, as git does it

PATTERNS = """\
# a comment
*.log
!keep.log
build/
/top.txt
docs/*.md
!docs/README.md
**/cache
a/**/z.txt
deep/**
\\#hash.txt
\\!bang.txt
[abc]x.txt
[a-c]r.txt
*.[Pp][Yy]c
[!q]y.txt
file?.py
*.tmp/
nested/inner/
""" + "trailing.txt   \n" + "sp\\ ace.txt\\ \n"  # trailing spaces dropped, or kept escaped
NESTED = "*.py\n!keep.py\n/local.txt\n"


def tree() -> list[str]:
    names = ["a.log", "keep.log", "sub/b.log", "sub/keep.log", "build/x.py", "sub/build/y.py", "top.txt",
             "sub/top.txt", "docs/a.md", "docs/README.md", "docs/sub/b.md", "cache/c.py", "x/cache/d.py",
             "x/y/cache", "a/z.txt", "a/b/z.txt", "a/b/c/z.txt", "b/a/z.txt", "deep/one", "deep/two/three",
             "#hash.txt", "!bang.txt", "trailing.txt", "sp ace.txt ", "sp ace.txt", "ax.txt", "dx.txt", "py.txt",
             "qy.txt",
             "br.txt", "dr.txt", "m.PYC", "file1.py", "file12.py", "dir.tmp/f", "f.tmp", "nested/inner/f",
             "x/nested/inner/g",
             "n/a.py", "n/keep.py", "n/local.txt", "n/m/local.txt", "plain.txt"]
    rng = random.Random(48)
    return names + [f"r{rng.randrange(99)}/{rng.choice(['a.log', 'cache', 'x.md', 'z.txt'])}" for _ in range(20)]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_gitignore_matching_agrees_with_git_on_the_same_tree(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    files = {".gitignore": PATTERNS, "n/.gitignore": NESTED, **{name: "x" for name in tree()}}
    write(root, files)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    out = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "-z"], cwd=root, check=True,
                         capture_output=True).stdout.decode()
    by_git = sorted(p for p in out.split("\0") if p)
    assert len(by_git) < len(files) - 20  # the patterns leave out many
    assert shipped(root) == by_git  # the walk that decides what ships, against git on the same tree

