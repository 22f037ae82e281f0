"""scripts/mutation_report.py's sorting of mutants: a mutant that changes only a message's text
is kept as such and not run (scripts/mutate.py), so one that changes what a sample gets must
never be taken for one."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
try:
    import mutation_report
finally:
    sys.path.pop(0)


def kind(original: str, mutant: str) -> str:
    a, b = (ast.parse(f"def f(seed, epoch, n):\n    {body}\n").body[0]
            for body in (original, mutant))
    assert isinstance(a, ast.FunctionDef) and isinstance(b, ast.FunctionDef)
    return mutation_report.kind(a, b)[0]


@pytest.mark.parametrize("original, mutant", [
    ('raise ValueError("n must be positive")', 'raise ValueError("XXn must be positiveXX")'),
    ('raise ValueError(f"n={n} must be positive")',
     'raise ValueError(f"n={None} must be positive")'),
    ('warnings.warn(f"{n} samples dropped")', 'warnings.warn(f"{n} SAMPLES DROPPED")'),
    ('message = f"epoch {epoch} ended"', 'message = f"EPOCH {epoch} ended"'),
])
def test_a_message_is_text(original: str, mutant: str) -> None:
    assert kind(original, mutant) == "text"


@pytest.mark.parametrize("original, mutant", [
    # an f-string that makes a seed or a key is not a message
    ('return random.Random(f"{seed}:{epoch}")', 'return random.Random(f"{None}:{epoch}")'),
    ('return random.Random(f"{seed}:resampled")', 'return random.Random(f"{seed}:XXresampledXX")'),
    ('store.set(f"aisio/state/{n}", b"")', 'store.set(f"aisio/state/{n + 1}", b"")'),
    ('return n < 2', 'return n <= 2'),
    ('return {"skip": n}', 'return {"XXskipXX": n}'),
    ('raise ValueError("n must be positive")', 'raise ValueError(None)'),
])
def test_what_a_sample_may_depend_on_is_code(original: str, mutant: str) -> None:
    assert kind(original, mutant) == "code"
