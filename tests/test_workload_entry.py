"""What every workload program shares (issue 68 item 4): a bad flag is the CLI's one ``error:`` line and exit 2, not
argparse's usage; a Ray address where nothing answers is exit 1 at once, not minutes of ``ray.init`` retries."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from raytpu.core.specs import kinds
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
from raytpu.workloads.support._entry import check_address

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("program", ["batch", "train", "smoke", "every_host", "serve"])
def test_a_bad_flag_is_one_error_line_and_exit_2(program: str) -> None:
    done = subprocess.run([sys.executable, "-m", f"raytpu.workloads.{program}", "--max-tokens", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()  # train names its missing --storage-path first: argparse's order
    assert line.startswith("error: ARGS: ") and line.endswith(
        f"valid: the flags `python -m raytpu.workloads.{program} --help` lists"), done.stderr


def test_a_closed_ray_address_ends_the_batch_job_at_once(tmp_path: object) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path))
    (folder / "in.jsonl").write_text('{"prompt": "hi"}\n')
    item = SliceSpec.create(name="s", generation="v6e", topology="2x2", zone="us-east5-b")
    work = WorkloadSpec(name="b", kind=kinds.kind("batch"), slice=item, input=str(folder / "in.jsonl"),
                        output=str(folder / "out"))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "raytpu.workloads.batch"], capture_output=True, text=True,
                          timeout=60, env={**work.workload_env(), "RAY_ADDRESS": "127.0.0.1:9", "PATH": "/usr/bin"})
    assert time.monotonic() - started < 30
    assert done.returncode == 1 and done.stderr.startswith("error: address: cannot reach a Ray cluster (nothing "
                                                           "answers at 127.0.0.1:9"), done.stderr


@pytest.mark.parametrize("address", [None, "", "auto", "ray://head:10001", "no-port"])
def test_other_address_forms_are_left_to_ray(address: str | None) -> None:
    check_address(address)
