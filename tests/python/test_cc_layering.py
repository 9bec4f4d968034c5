"""The C++ library's shape. Its layering: each room of tf_ext/ includes only from the rooms
below it, and production code includes no test helper (tf_ext/testing/).

From the bottom: the gradient library (grads/), the ops (ops/), the ops' gradients and the
kernels, then the XLA kernels (xla/, part of the op library beside them) and tf_ext/graph/'s
rooms (io, engine, passes, pipeline, runtime, c_api), then tools/ and train/. Bazel's targets
(tf_ext/BUILD) enforce the same order; this test names the offending include.

No include cycles: a header and its sources counted as one unit, no unit reaches itself
through the includes of tf_ext/'s files (within a room too, where Bazel cannot see them).

And the length of its functions: none in tf_ext/ longer than 150 lines (from its opening to its
closing brace), with named exceptions that may only shrink: the declarative tables that are
longer by nature, and the functions still waiting to be split, each at most as long as it is
now. A new long
function, or a listed one that grew, fails and is named with its file and line.

The scanner reads C++ as text: comments, string and character literals and preprocessor lines
blanked, then each brace classified by what precedes it since the last `;`, `{` or `}`: a
namespace, class, struct, union, enum or `extern "C"` opens a scope, an initializer (`= {`,
`T x{`) data, anything else at scope level a function body (free functions, member functions,
namespace-scope lambdas); braces inside a body belong to it (lambdas count in their function).
"""

from __future__ import annotations

import os
import re

import pytest

# Rank of each room: a file may include headers of its own room and of lower ranks. The op
# library is the base every layer may use: the gradient library (grads/: registration, FDH
# helpers, the load guard), the ops (ops/: registrations, shape functions, validation), the
# gradients of the ops ("grads/ops": grads/*_grad.cc, grads/tf/ and the manifest that declares
# them) beside the kernels, then the XLA kernels.
RANKS = {
    "grads": 0, "version.h": 0,
    "ops": 1,
    "grads/ops": 2, "kernels": 2,
    "xla": 3,
    "graph/io": 3,
    "graph/engine": 4,
    "graph/passes": 5,
    "graph/pipeline": 6,
    "graph/runtime": 7,
    "graph/c_api": 8,
    # train/'s rooms (tf_ext/BUILD): its options, data, distribution, the step's model, the
    # training loop, then its C API (train/c_trainer.h)
    "train/options": 9,
    "train/data": 10,
    "train/distribute": 11,
    "train/model": 12,
    "train/loop": 13,
    "train": 14,
    "tools": 15,
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
    if parts[0] in ("graph", "train") and len(parts) > 2:
        return "/".join(parts[:2]) if "/".join(parts[:2]) in RANKS else None
    if parts[0] == "grads" and (parts[1] == "tf" or parts[1].startswith("manifest.")
                                or parts[1].endswith("_grad.cc")):
        return "grads/ops"
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
    assert not violations("train/model/trainer.cc", '#include "tf_ext/graph/runtime/export.h"')
    assert violations("train/model/trainer.cc", '#include "tf_ext/train/loop/fit.h"')
    assert violations("train/options/options.h", '#include "tf_ext/train/model/trainer.h"')
    assert not violations("train/data/npz_data.cc", '#include "tf_ext/train/options/options.h"')
    assert violations("train/loop/fit.cc", '#include "tf_ext/train/c_trainer.h"')
    assert not violations("train/c_trainer.cc", '#include "tf_ext/train/loop/fit.h"')
    assert not violations("graph/engine/backprop.cc", '#include "tf_ext/grads/registry.h"')
    assert violations("kernels/roi_pool_op.cc", '#include "tf_ext/xla/lowerings.h"')
    assert not violations("xla/xla_kernels.cc", '#include "tf_ext/ops/roi_ops.h"')
    assert violations("ops/median_pool_ops.cc", '#include "tf_ext/kernels/median_pool_functor.h"')
    assert violations("grads/registry.cc", '#include "tf_ext/grads/manifest.h"')
    assert violations("grads/registry.cc", '#include "tf_ext/ops/roi_ops.h"')
    assert not violations("grads/roi_pool_grad.cc", '#include "tf_ext/ops/roi_ops.h"')
    assert not violations("kernels/median_pool_functor.h",
                          '#include "tf_ext/ops/median_pool_geometry.h"')


# Include cycles: a header and its sources (foo.h, foo.cc, foo_gpu.cu.cc) are one unit; no unit
# may reach itself through the includes of tf_ext/'s files.
def unit(path: str) -> str:
    return re.sub(r"(_gpu\.cu)?\.(h|cc|c)$", "", path)


def include_graph(texts: dict[str, str]) -> dict[str, set[str]]:
    """unit -> the units it includes, of the files `texts` (path under tf_ext/ -> source)."""
    graph: dict[str, set[str]] = {}
    for path, text in texts.items():
        u = unit(path)
        graph.setdefault(u, set())
        for inc in INCLUDE.findall(text):
            if unit(inc) != u:
                graph[u].add(unit(inc))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_cycle_check_finds_what_it_is_meant_to():
    texts = {
        "a/x.h": '#include "tf_ext/a/y.h"\n',
        "a/x.cc": '#include "tf_ext/a/x.h"\n',
        "a/y.h": "",
        "a/y.cc": '#include "tf_ext/a/y.h"\n#include "tf_ext/a/z.h"\n',
        "a/z.h": "",
        "a/z_gpu.cu.cc": '#include "tf_ext/a/x.h"\n',
        "a/w.cc": '#include "tf_ext/a/x.h"\n',
    }
    assert cycles(include_graph(texts)) == [["a/x", "a/y", "a/z"]]
    del texts["a/z_gpu.cu.cc"]
    assert cycles(include_graph(texts)) == []


def test_no_include_cycle():
    root = source_root()
    texts = {}
    for path in sources():
        with open(os.path.join(root, path), encoding="utf-8") as f:
            texts[path] = f.read()
    graph = include_graph(texts)
    found = cycles(graph)
    lines = [" <-> ".join(c) + ": " + "; ".join(
        f"{u} includes {', '.join(sorted(graph[u] & set(c)))}" for u in c) for c in found]
    assert not found, "include cycles (a header and its sources as one unit):\n" + "\n".join(lines)


def test_every_graph_and_train_file_is_in_a_room():
    loose = [p for p in sources() if p.startswith(("graph/", "train/")) and room(p) is None]
    assert loose == [], f"files of tf_ext/graph/ or tf_ext/train/ in no room: {loose}"
    assert {room(p) for p in sources() if p.startswith("graph/")} == {
        "graph/io", "graph/engine", "graph/passes", "graph/pipeline", "graph/runtime",
        "graph/c_api"}
    assert {room(p) for p in sources() if p.startswith("train/")} == {
        "train/options", "train/data", "train/distribute", "train/model", "train/loop", "train"}
    assert sorted(p for p in sources() if room(p) == "train") == [
        "train/c_trainer.cc", "train/c_trainer.h"]


def test_each_layer_includes_only_from_below():
    root = source_root()
    bad = []
    for path in sources():
        with open(os.path.join(root, path), encoding="utf-8") as f:
            bad += violations(path, f.read())
    assert bad == [], "\n".join(bad)


# Function length.
LIMIT = 150
# Declarative tables: data written as code, longer by nature.
TABLES = {
    ("train/options/options.cc", "MakeTable"),  # the option table: flags, C API keys and docs
}
# Functions still over the limit: (file, name) -> the most lines each may have. Split one and
# remove it here; none may grow, none may be added.
WAITING = {
    ("graph/engine/control_flow.cc", "RewriteWhile"): 551,
}

_SCOPE = re.compile(r'\b(namespace|class|struct|union|enum)\b[^()]*$|extern\s*"C"\s*$')
_LAMBDA = re.compile(r"\]\s*(\([^()]*(\([^()]*\)[^()]*)*\))?\s*(mutable\s*)?(->[^{]*)?$")
_DECLARED = re.compile(r"([A-Za-z_~][\w~]*(?:\s*::\s*[A-Za-z_~][\w~]*)*)\s*(?:<[^()]*>)?\s*\(")


def _name(head: str) -> str:
    """A body's name: the declarator before its first parenthesis ("Class::Member" kept to its
    last two parts); "<lambda>" for a lambda at namespace scope."""
    if _LAMBDA.search(head):
        return "<lambda>"
    head = re.sub(r"^template\s*<[^{]*?>\s*", "", head)
    m = _DECLARED.search(head)
    if not m:
        return "<unnamed>"
    return "::".join(re.sub(r"\s", "", m.group(1)).split("::")[-2:])


def _blank(text: str) -> str:
    """text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "R" and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i)
                j = n if end < 0 else end + len(m.group(1)) + 2
                out.append(re.sub(r"[^\n]", " ", text[i:j]))
                i = j
                continue
        if c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
            continue
        out.append(c)
        line_start = c == "\n" or (line_start and c in " \t")
        i += 1
    return "".join(out)


def functions(text: str):
    """(name, first line, number of lines) of each function body in C++ source text."""
    code = _blank(text)
    stack = []  # kinds of the open braces: "scope", "data", "function", "block"
    last_break = 0
    for i, c in enumerate(code):
        if c == "{":
            head = code[last_break:i].strip()
            if any(entry[0] in ("function", "data") for entry in stack):
                kind = "block"
            elif _SCOPE.search(head):
                kind = "scope"
            elif head.endswith("=") or re.search(r"[\w>\]]\s*$", head) and not head.endswith(
                    ("const", "override", "noexcept", "final", "mutable")) and not re.search(
                    r"\)\s*(->\s*[\w:<>,\s*&]+)?$", head):
                kind = "data"
            else:
                kind = "function"
            stack.append((kind, i, head))
            last_break = i + 1
        elif c == "}":
            if stack:
                kind, start, head = stack.pop()
                if kind == "function":
                    first = code.count("\n", 0, start) + 1
                    last = code.count("\n", 0, i) + 1
                    yield _name(head), first, last - first + 1
            last_break = i + 1
        elif c == ";":
            last_break = i + 1


def all_functions():
    """(path under tf_ext/, name, first line, lines) of every function body in tf_ext/."""
    root = source_root()
    for rel in sources():
        with open(os.path.join(root, rel), encoding="utf-8") as fh:
            for name, line, length in functions(fh.read()):
                yield rel, name, line, length


def test_no_function_is_longer_than_the_limit():
    found, too_long = {}, []
    for rel, name, line, length in all_functions():
        key = (rel, name)
        if length <= LIMIT or key in TABLES:
            continue
        found[key] = max(found.get(key, 0), length)
        allowed = WAITING.get(key)
        if allowed is None or length > allowed:
            too_long.append(f"tf_ext/{rel}:{line}: {name} is {length} lines"
                            f" (limit {LIMIT}{'' if allowed is None else f', listed at {allowed}'})")
    assert not too_long, "\n".join(too_long)
    # A listed function that was split (or shortened) comes off the list.
    stale = sorted(f"{rel} {name}: listed at {n}, now {found.get((rel, name), 'within the limit')}"
                   for (rel, name), n in WAITING.items() if found.get((rel, name)) != n)
    assert not stale, "\n".join(stale)


def test_the_scanner_measures_functions_and_skips_the_rest():
    src = (
        '#include "x.h"\n'                     # 1
        "namespace a {\n"                      # 2
        "const int kTable[] = {1, 2,\n"        # 3  data
        "  3};\n"                              # 4
        "struct S { int f() const { return 1; } };\n"  # 5  member function, 1 line
        "int Foo::Bar(int x) {\n"              # 6
        '  const char* s = "}{";  // }\n'      # 7
        "  if (x) { auto l = [](int) { return 0; }; }\n"  # 8
        "  /* { */ return x;\n"                # 9
        "}\n"                                  # 10
        "}  // namespace a\n")
    got = list(functions(src))
    assert got == [("f", 5, 1), ("Foo::Bar", 6, 5)], got
