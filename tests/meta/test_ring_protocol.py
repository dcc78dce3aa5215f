"""The turn ring's code against its protocol number (bench/run/interleave.py PROTOCOL, PROTOCOL_CODE): a test
of the module's text, kept because a user would notice what it guards. `rlbench check --against REF` pairs
two trees in one ring and refuses a tree of another PROTOCOL; a change to how seats take turns that kept the
old number would let an old and a new tree share a ring under different rules, and the A/B's cells would no
longer take the turns its verdict assumes. The ring's behaviour itself: tests/unit/harness/test_interleave.py."""
from __future__ import annotations

import ast
import hashlib
import io
import tokenize

from rlbench.run import interleave


def ring_fingerprint(source: str) -> str:
    """sha256 (16 hex digits) of interleave.py's ring code: every line but docstrings, comments, blank lines,
    the PROTOCOL / PROTOCOL_CODE lines and class Pacer (the cell's side, not the ring's rules). Line-based,
    so the same on every Python version."""
    tree, drop = ast.parse(source), set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            drop |= set(range(body[0].lineno, body[0].end_lineno + 1))
    for node in tree.body:
        names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if getattr(node, "name", None) == "Pacer" or {"PROTOCOL", "PROTOCOL_CODE"} & set(names):
            drop |= set(range(node.lineno, node.end_lineno + 1))
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    kept = [line.rstrip() for i, line in enumerate(lines, 1) if i not in drop and line.strip()]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]


def test_the_ring_code_has_not_moved_without_a_new_protocol():
    """A change to the ring's rules (75a2f3a changed when a later cell may set up and kept protocol 1) must
    bump PROTOCOL, so that `check --against` refuses a tree with the old rules. Formatting, comments and the
    cell's side (Pacer) do not count."""
    code = ring_fingerprint(open(interleave.__file__).read())
    assert code == interleave.PROTOCOL_CODE, (
        f"the turn ring's code changed (fingerprint {code}, protocol {interleave.PROTOCOL} has "
        f"{interleave.PROTOCOL_CODE}): if the rules by which seats take turns changed, bump PROTOCOL; then set "
        f"PROTOCOL_CODE = {code!r}")


def test_the_fingerprint_sees_code_and_not_comments():
    src = 'PROTOCOL = 2\ndef f():\n    """Doc."""\n    return 1  # why\n\n\nclass Pacer:\n    x = 1\n'
    same = 'PROTOCOL = 3\ndef f():\n    """Other doc."""\n    # a comment\n    return 1\nclass Pacer:\n    x = 2\n'
    assert ring_fingerprint(src) == ring_fingerprint(same)
    assert ring_fingerprint(src) != ring_fingerprint(src.replace("return 1", "return 2"))
