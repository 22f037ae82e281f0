"""`aisio --help` and the light commands do not import torch, nor numpy; neither does
`import aisio`; DataPipes still find aisio's functional forms after a bare `import aisio`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(*args: str) -> set[str]:
    """Returns the modules a `python -X importtime ARGS` run imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    return _modules(done.stderr)


def _modules(importtime: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in importtime.splitlines()
            if line.startswith("import time:")}


CLI_RUNS = [
    ["--help"],
    ["ls", "--help"],
    ["playground", "status", "--dir", "/nonexistent/aisio-playground"],
    ["stat", "ais://b/o", "--endpoint", "http://127.0.0.1:9"],
    ["cat", "ais://b/o", "--endpoint", "http://127.0.0.1:9"],
    ["ls", "ais://b", "--endpoint", "http://127.0.0.1:9"],
    ["head", "ais://b/o.tar", "--endpoint", "http://127.0.0.1:9"],
    ["preview", "ais://b/o.tar", "-o", "/nonexistent/g.jpg", "--endpoint", "http://127.0.0.1:9"],
]


def test_cli_does_not_import_torch() -> None:
    """Each command in a process of its own, all at once: the ones given a dead endpoint spend
    their seconds in the client's retry backoff, asleep."""
    runs = [(argv, subprocess.Popen([sys.executable, "-X", "importtime", "-m", "aisio", *argv],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, cwd=ROOT)) for argv in CLI_RUNS]
    imported = [(argv, _modules(run.communicate(timeout=120)[1])) for argv, run in runs]
    for argv, modules in imported:
        assert "aisio.tools.cli" in modules, argv
        torch = {m for m in modules if m == "torch" or m.startswith(("torch.", "torchdata"))}
        assert not torch, argv
        assert "matplotlib" not in modules, argv  # about a second; preview draws with Pillow
        if argv[0] not in ("head", "preview"):  # those two parse a shard: they use numpy
            assert "numpy" not in modules, argv  # 0.2 s: imported by what uses it, when used


def test_import_aisio_imports_neither_numpy_nor_the_http_client() -> None:
    """`import aisio` loads the errors and nothing heavy; each name's module is imported on
    first use (numpy through the resumable loop, requests through the shard cache)."""
    modules = imported_modules("-c", "import aisio; aisio.UsageError; aisio.AISIOError")
    assert "aisio" in modules
    assert not {m for m in modules if m.split(".")[0] in ("numpy", "requests", "torch")}


def test_the_console_scripts_path_does_not_import_torch() -> None:
    """`aisio` as installed runs `from aisio.tools.cli import main`, not `-m aisio`."""
    modules = imported_modules("-c", "from aisio.tools.cli import main; main(['--help'])")
    assert "aisio.tools.cli" in modules and "torch" not in modules


def test_functional_forms_after_a_bare_import_aisio() -> None:
    code = """
import sys, warnings
warnings.simplefilter("ignore")
import aisio
assert "torch" not in sys.modules
from torch.utils.data.datapipes.iter import IterableWrapper
print(list(IterableWrapper(["ais://b/s-{0..1}.tar"]).ais_list_files(check_templates=False)))
from aisio import AISFileLoader
assert IterableWrapper([]).ais_load_files is not None and AISFileLoader is aisio.AISFileLoader
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ais://b/s-1.tar" in done.stdout


def test_torch_first_then_aisio() -> None:
    code = ("import warnings; warnings.simplefilter('ignore'); import torch, aisio; "
            "from torch.utils.data.datapipes.iter import IterableWrapper; "
            "print(IterableWrapper(['ais://b/x']).ais_list_sources(url='http://h:1').__class__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0 and "AISSourceLister" in done.stdout, done.stderr


def test_all_is_complete_and_resolvable() -> None:
    import aisio

    for name in aisio.__all__:
        assert getattr(aisio, name) is not None
    assert set(aisio.__all__) <= set(dir(aisio))


# What a fresh job would import only to throw away: torchdata's DataLoader2 brings its
# DataPipes, the aistore SDK (pydantic, tenacity, yaml) and fsspec along.
HEAVY = ("aistore", "fsspec", "pydantic", "tenacity", "torchdata.dataloader2",
         "torchdata.datapipes", "webdataset", "yaml")


def test_a_fresh_job_imports_only_what_its_first_batch_needs() -> None:
    """`import aisio` imports no torch; building the DataLoader front end's loader imports
    none of HEAVY (checked by sys.modules, in a process of its own; the loader opens no
    socket before its first batch). DataLoader2 still gets aisio's fix when it is imported
    after the DataPipes were built (tests/unit/datapipes/test_mpfix.py)."""
    code = f"""
import sys
heavy = lambda: sorted(m for m in sys.modules for h in {HEAVY!r} + ("torch",)
                       if m == h or m.startswith(h + "."))
import aisio
print("import aisio:", heavy())
loader = aisio.webdataset_dataloader(["ais://b/s-0.tar", "ais://b/s-1.tar"],
                                     endpoint="http://127.0.0.1:9", num_workers=2,
                                     batch_size=4, decode=aisio.Decoder(None, only=["cls"]))
print("built:", [m for m in heavy() if not m.startswith("torch.") and m != "torch"])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["import aisio: []", "built: []"]
