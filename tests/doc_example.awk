# Prints the body of the fenced code block that follows the line `<!-- example: NAME -->` in a
# Markdown file (run with -v name=NAME). Used by tests/doc_examples.bzl at build time; prints
# nothing (and the genrule fails) when the marker or its block is missing.
$0 == "<!-- example: " name " -->" { armed = 1; next }
armed == 1 && /^```/ { armed = 2; next }
armed == 1 && NF > 0 { exit 1 }
armed == 2 && /^```/ { found = 1; exit }
armed == 2 { print }
END { if (!found) exit 1 }
