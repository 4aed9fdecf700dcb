"""The stubs and annotations, checked by mypy in strict mode: the installed
package (with its native module's stub), a sample of code written against
it, and a sample of mistakes it must catch."""

from __future__ import annotations

import os
import re
from typing import Set

import pytest

HERE = os.path.dirname(__file__)
SAMPLE = os.path.join(HERE, "typing_sample.py")
WRONG = os.path.join(HERE, "typing_wrong.py")
STRICT = ["--strict", "--no-incremental", "--cache-dir", os.devnull]


def mypy(target: list[str]) -> tuple[str, int]:
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extra: pip install .[test]")
    out, err, status = api.run([*STRICT, *target])
    return out + err, status


@pytest.mark.parametrize("target", [["-p", "leasehold"], [SAMPLE]], ids=["package", "sample"])
def test_mypy_strict(target: list[str]) -> None:
    out, status = mypy(target)
    assert status == 0, out
    assert "Success" in out


def test_mypy_catches_each_face_used_as_the_other() -> None:
    with open(WRONG) as sample:
        marked = {n for n, line in enumerate(sample, start=1) if line.rstrip().endswith("# wrong")}
    out, status = mypy([WRONG])
    reported: Set[int] = {
        int(m.group(1)) for m in re.finditer(r"typing_wrong\.py:(\d+): error:", out)
    }
    assert status == 1, out
    assert len(marked) > 10
    assert reported == marked, out
