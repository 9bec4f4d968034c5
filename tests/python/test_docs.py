"""README.md and docs/*.md: every code block is typed, every example runs, every link resolves.

Each Markdown file's fenced blocks are read at test time and handled by their language tag:

  python    run (in order, in one scratch directory per file) with the op library of the build
  sh        run by bash -e in that directory, where bazel-bin/tf_ext/ holds the built
            tf_ext_grad, tf_ext_gradcheck and _tf_ext_ops.so
  c, cpp    marked `<!-- example: NAME -->`: tests/doc_examples.bzl built the block into
            //tests:doc_example_NAME, which runs here; or marked `<!-- excerpt: PATH -->`
  starlark  marked `<!-- excerpt: PATH -->`
  text      not run (usage synopses, sample output, commands that need make or bazel)

`<!-- excerpt: PATH -->`: every line of the block, but `...`, appears in PATH, in order.
`<!-- output -->` before a text block: every line of it, but `...`, is a line of the previous
example's output (stripped), in order. A block with another or no language tag fails, as does
`make TARGET` in code that names no Makefile target.

The links test resolves every relative link and image of those files (files, and #anchors to
their headings, GitHub's way) in the source tree.
"""

import dataclasses
import glob
import os
import re
import subprocess
import sys

import pytest

RUNFILES = os.getcwd()  # Bazel runs tests in the workspace's runfiles root
SOURCE = os.path.dirname(os.path.realpath(os.path.join(RUNFILES, "README.md")))
DOCS = ["README.md"] + sorted(os.path.relpath(p, RUNFILES)
                              for p in glob.glob(os.path.join(RUNFILES, "docs", "*.md")))
LANGUAGES = {"python", "sh", "c", "cpp", "starlark", "text"}
BINARIES = ["tf_ext_grad", "tf_ext_gradcheck", "_tf_ext_ops.so"]
MARKER = re.compile(r"^<!-- (example|excerpt|output)(?:: (\S+))? -->$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*(.*)$")


@dataclasses.dataclass
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    body: str
    marker: tuple  # (kind, value) or ()

    def where(self):
        return f"{self.doc}:{self.line}"


def blocks(doc):
    """The fenced blocks of `doc`, each with the marker comment right before it (if any)."""
    lines = open(os.path.join(RUNFILES, doc), encoding="utf-8").read().split("\n")
    out, marker, i = [], (), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            indent, fence, info = m.groups()
            start, body = i, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            assert i < len(lines), f"{doc}:{start + 1}: code block never closed"
            out.append(Block(doc, start + 1, info.split()[0] if info else "", "\n".join(body),
                             marker))
            marker = ()
        elif MARKER.match(lines[i].strip()):
            marker = MARKER.match(lines[i].strip()).groups()
        elif lines[i].strip():
            marker = ()
        i += 1
    return out


def prose(doc):
    """`doc` without its fenced blocks and inline code spans (what links may live in)."""
    text = open(os.path.join(RUNFILES, doc), encoding="utf-8").read()
    text = re.sub(r"^(\s*)(```+|~~~+).*?^\1\2[ \t]*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def makefile_targets():
    text = open(os.path.join(SOURCE, "Makefile"), encoding="utf-8").read()
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, flags=re.M))


def lines_in_order(wanted, haystack):
    """The lines of `wanted` (stripped; blank and `...` lines skipped) that are not found in
    `haystack`'s lines (stripped) in that order; `...` inside a line matches any text."""
    have = [h.strip() for h in haystack.split("\n")]
    missing, pos = [], 0
    for w in wanted.split("\n"):
        w = w.strip()
        if not w or w == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in w.split("...")))
        found = next((i for i in range(pos, len(have)) if pattern.fullmatch(have[i])), None)
        if found is None:
            missing.append(w)
        else:
            pos = found + 1
    return missing


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A directory per Markdown file with bazel-bin/tf_ext/ holding the built tools."""
    def make(doc):
        d = tmp_path_factory.mktemp(re.sub(r"\W", "_", doc))
        os.makedirs(d / "bazel-bin" / "tf_ext")
        for b in BINARIES:
            os.symlink(os.path.realpath(os.path.join(RUNFILES, "tf_ext", b)),
                       d / "bazel-bin" / "tf_ext" / b)
        return d
    return make


def run(block, argv, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=600)
    assert r.returncode == 0, (f"{block.where()}: the {block.lang} example failed "
                               f"(exit {r.returncode}):\n{block.body}\n--- output:\n{r.stdout}")
    return r.stdout


def check_excerpt(block):
    path = block.marker[1]
    full = os.path.join(SOURCE, path)
    assert os.path.isfile(full), f"{block.where()}: excerpt of {path}, which does not exist"
    missing = lines_in_order(block.body, open(full, encoding="utf-8").read())
    assert not missing, f"{block.where()}: not in {path} (in this order): {missing}"


def test_every_doc_is_read():
    assert "docs/performance.md" in DOCS and len(DOCS) >= 11, DOCS


@pytest.mark.parametrize("doc", DOCS)
def test_code_blocks(doc, scratch):
    cwd = scratch(doc)
    targets = makefile_targets()
    last_output = None
    for b in blocks(doc):
        kind = b.marker[0] if b.marker else None
        assert b.lang in LANGUAGES, (
            f"{b.where()}: code block with language {b.lang or '(none)'!r}; use one of "
            f"{sorted(LANGUAGES)} (text for anything that is not run)")
        for target in re.findall(r"^\s*make ([\w-]+)", b.body, flags=re.M):
            assert target in targets, f"{b.where()}: `make {target}`: no such Makefile target"
        if kind == "excerpt":
            check_excerpt(b)
            continue
        if kind == "output":
            assert b.lang == "text" and last_output is not None, (
                f"{b.where()}: an output block must be text and follow an example")
            missing = lines_in_order(b.body, last_output)
            assert not missing, (f"{b.where()}: the example's output lacks {missing}:\n"
                                 f"{last_output}")
            continue
        last_output = None
        if b.lang == "python":
            script = cwd / f"example_{b.line}.py"
            script.write_text(b.body + "\n")
            last_output = run(b, [sys.executable, str(script)], cwd)
        elif b.lang == "sh":
            last_output = run(b, ["bash", "-e", "-o", "pipefail", "-c", b.body], cwd)
        elif b.lang in ("c", "cpp"):
            assert kind == "example", (
                f"{b.where()}: a {b.lang} block needs <!-- example: NAME --> (compiled and run) "
                "or <!-- excerpt: PATH --> before it")
            binary = os.path.join(RUNFILES, "tests", "doc_example_" + b.marker[1])
            assert os.path.isfile(binary), (
                f"{b.where()}: example {b.marker[1]} has no "
                f"doc_example_binary(name = \"{b.marker[1]}\") in tests/BUILD (in this test's data)")
            last_output = run(b, [binary], cwd)
        elif b.lang == "starlark":
            pytest.fail(f"{b.where()}: a starlark block needs <!-- excerpt: PATH --> before it")
        else:
            continue  # text
    # `make X` in inline code names a real target as well.
    for target in re.findall(r"`make ([\w-]+)", open(os.path.join(RUNFILES, doc)).read()):
        assert target in targets, f"{doc}: `make {target}`: no such Makefile target"


def slug(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"^(\s*)(```+|~~~+).*?^\1\2[ \t]*$", "", text, flags=re.S | re.M)
    out, seen = set(), {}
    for h in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
        s = slug(h)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve(doc):
    here = os.path.dirname(os.path.join(SOURCE, doc))
    links = re.findall(r"\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)", prose(doc))
    bad = []
    for link in links:
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):
            continue  # http:, https:, mailto:
        path, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(here, path)) if path else \
            os.path.join(SOURCE, doc)
        if not os.path.exists(target):
            bad.append(f"{link} (no such file)")
        elif anchor and not (target.endswith(".md") and anchor in anchors(target)):
            bad.append(f"{link} (no heading with that anchor)")
    assert not bad, f"{doc}: broken relative links: {bad}"


def test_every_page_is_reachable_from_the_readme():
    """Following relative links from README.md reaches every page of docs/."""
    seen, todo = set(), ["README.md"]
    while todo:
        doc = todo.pop()
        if doc in seen:
            continue
        seen.add(doc)
        here = os.path.dirname(doc)
        for link in re.findall(r"\]\(([^()\s#]+)", prose(doc)):
            target = os.path.normpath(os.path.join(here, link))
            if target.endswith(".md") and target in DOCS:
                todo.append(target)
    assert set(DOCS) <= seen, f"not linked from README.md or its pages: {set(DOCS) - seen}"


def test_performance_page_shows_the_latest_bench_run():
    """docs/performance.md holds docs/bench.md and docs/bench_models.md (the latest `make bench`
    and `make bench-models` tables) whole, and the charts of the same runs; no other bench
    artefacts are kept."""
    page = open(os.path.join(RUNFILES, "docs", "performance.md"), encoding="utf-8").read()
    for name in ("bench", "bench_models"):
        table = open(os.path.join(RUNFILES, "docs", name + ".md"), encoding="utf-8").read().strip()
        assert table in page, f"docs/performance.md does not show docs/{name}.md: copy it in"
        assert f"]({name}.png)" in page, name
    kept = sorted(f for f in os.listdir(os.path.join(SOURCE, "docs")) if f.startswith("bench"))
    assert kept == ["bench.json", "bench.md", "bench.png", "bench_models.json",
                    "bench_models.md", "bench_models.png"], kept


def test_the_checks_can_fail(tmp_path):
    """The helpers find what they are meant to find (so a passing run means something)."""
    assert lines_in_order("a\n...\nc", "a\nb\nc") == []
    assert lines_in_order("c\na", "a\nb\nc") == ["a"]
    assert lines_in_order("x ... z", "x y z") == [] and lines_in_order("x ... z", "x y") != []
    assert slug("`tf_ext_grad`: the main job") == "tf_ext_grad-the-main-job"
    assert slug("Where the op library is found") == "where-the-op-library-is-found"
    md = tmp_path / "x.md"
    md.write_text("# Top\n## A b\n## A b\n```text\n# not a heading\n```\n")
    assert anchors(str(md)) == {"top", "a-b", "a-b-1"}
