"""The C and C++ examples of README.md and docs/*.md, built from the Markdown itself.

doc_example_binary extracts the fenced block marked `<!-- example: NAME -->` from `doc` at
build time (tests/doc_example.awk) and compiles it into `doc_example_NAME` with the project's
flags; //tests:docs_py_test runs it and compares its output with the `<!-- output -->` block
that follows it in the Markdown. Editing the example in the Markdown rebuilds it.
"""

load("//tf_ext:build_defs.bzl", "TF_CC", "tf_ext_cc_binary")

def doc_example_binary(name, doc, lang, deps = []):
    """`name` is the example's marker name; lang is "c" or "cpp"."""
    ext = "c" if lang == "c" else "cc"
    src = "doc_example_%s.%s" % (name, ext)
    native.genrule(
        name = "doc_example_%s_src" % name,
        srcs = [doc],
        outs = [src],
        cmd = "awk -v name=%s -f $(location :doc_example.awk) $< > $@" % name,
        tools = [":doc_example.awk"],
    )
    if lang == "c":
        # A C program against TensorFlow's C API: TensorFlow's C++ flags do not apply.
        native.cc_binary(
            name = "doc_example_" + name,
            srcs = [src],
            copts = ["-std=c11", "-Wall", "-Werror"],
            deps = deps + [TF_CC],
        )
    else:
        tf_ext_cc_binary(
            name = "doc_example_" + name,
            srcs = [src],
            deps = deps,
        )
