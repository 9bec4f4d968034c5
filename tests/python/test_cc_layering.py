"""The C++ library's layering: each folder of tf_ext/ includes only from the folders below it,
and production code includes no test helper (tf_ext/testing/).

From the bottom: the gradient library (grads/) and kernels, then the XLA kernels (xla/, part
of the op library beside them) and tf_ext/graph/'s rooms (io, engine, passes, pipeline,
runtime, c_api), then tools/ and train/. Bazel's targets
(tf_ext/BUILD) enforce the same order; this test names the offending include.
"""

from __future__ import annotations

import os
import re

import pytest

# Rank of each folder: a file may include headers of its own folder and of lower ranks.
# grads/, ops/, kernels/ and version.h are the base every layer may use.
BASE = 0
RANKS = {
    "grads": BASE, "ops": BASE, "kernels": BASE, "version.h": BASE,
    "xla": 1,
    "graph/io": 1,
    "graph/engine": 2,
    "graph/passes": 3,
    "graph/pipeline": 4,
    "graph/runtime": 5,
    "graph/c_api": 6,
    "tools": 7,
    "train": 7,
}
# tf_ext_gradcheck's job is the numeric gradient check: it is the one program built on the
# checker in tf_ext/testing/ (gradient_checker.h), which the tests share.
CHECKERS = {"tools/tf_ext_gradcheck.cc"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"tf_ext/([^"]+)"', re.M)


def source_root() -> str:
    # Bazel runs tests from the workspace root of the runfiles tree; a source checkout has the
    # sources two levels above tests/python.
    here = os.path.dirname(os.path.abspath(__file__))
    for root in (os.getcwd(), os.path.dirname(os.path.dirname(here))):
        if os.path.isdir(os.path.join(root, "tf_ext", "graph", "pipeline")):
            return os.path.join(root, "tf_ext")
    pytest.fail("tf_ext/ sources not found (data dependency of this test)")


def room(path: str) -> str | None:
    """The layer a path under tf_ext/ belongs to ("graph/engine", "tools", ...), or None."""
    parts = path.split("/")
    if parts[0] == "graph" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if parts[0] in RANKS else None


def sources() -> list[str]:
    root = source_root()
    found = []
    for dirpath, _, files in os.walk(root, followlinks=True):
        for f in files:
            if f.endswith((".h", ".cc", ".c")):
                found.append(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return sorted(found)


def violations(path: str, text: str) -> list[str]:
    """Includes of `path` (relative to tf_ext/) that break the layering."""
    own = room(path)
    if own is None or own == "testing":
        return []
    bad = []
    for inc in INCLUDE.findall(text):
        if inc.startswith("testing/") and path not in CHECKERS:
            bad.append(f"{path} includes test helper tf_ext/{inc}")
            continue
        if inc.startswith("testing/"):
            continue
        target = room(inc)
        if target is None:
            if inc.startswith("graph/"):
                bad.append(f"{path} includes tf_ext/{inc}, which is in no room of graph/")
            continue
        if RANKS[target] > RANKS[own]:
            bad.append(f"{path} ({own}) includes tf_ext/{inc} ({target}), a higher layer")
    return bad


def test_the_check_finds_what_it_is_meant_to():
    assert violations("graph/engine/backprop.cc", '#include "tf_ext/graph/runtime/export.h"')
    assert violations("graph/io/feeds.h", '#include "tf_ext/graph/pipeline/gradient_request.h"')
    assert violations("graph/runtime/export.cc", '#include "tf_ext/testing/op_runner.h"')
    assert violations("tools/tf_ext_grad.cc", '#include "tf_ext/testing/gradient_checker.h"')
    assert violations("graph/passes/x.cc", '#include "tf_ext/graph/gradient_graph.h"')
    assert not violations("graph/runtime/export.cc", '#include "tf_ext/graph/engine/backprop.h"')
    assert not violations("train/trainer.cc", '#include "tf_ext/graph/runtime/export.h"')
    assert not violations("graph/engine/backprop.cc", '#include "tf_ext/grads/registry.h"')
    assert violations("kernels/roi_pool_op.cc", '#include "tf_ext/xla/lowerings.h"')
    assert not violations("xla/xla_kernels.cc", '#include "tf_ext/ops/roi_ops.h"')


def test_every_graph_file_is_in_a_room():
    loose = [p for p in sources() if p.startswith("graph/") and room(p) is None]
    assert loose == [], f"files directly under tf_ext/graph/: {loose}"
    assert {room(p) for p in sources() if p.startswith("graph/")} == {
        "graph/io", "graph/engine", "graph/passes", "graph/pipeline", "graph/runtime",
        "graph/c_api"}


def test_each_layer_includes_only_from_below():
    root = source_root()
    bad = []
    for path in sources():
        with open(os.path.join(root, path), encoding="utf-8") as f:
            bad += violations(path, f.read())
    assert bad == [], "\n".join(bad)
