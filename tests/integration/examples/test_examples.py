"""Every example script and the exploration notebook, run end to end against the real AIStore."""

from __future__ import annotations

import importlib
import io
import math
import os
import re
import shlex
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
from sklearn.datasets import load_sample_images

import aisio
from aisio.core.store.client import Client
from aisio.core.store.etl import local_etls
from aisio.core.store.urls import Bucket, parse_ais_url
from aisio.tools.explore import ls
from tests.conftest import HAS_DATALOADER2, ROOT, needs_dataloader2

NOTEBOOK = ROOT / "notebooks" / "explore.ipynb"


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch, ais_endpoint: str) -> Callable[[str], ModuleType]:
    """Imports an example script as a module, with AIS_ENDPOINT pointing at the test cluster."""
    monkeypatch.setenv("AIS_ENDPOINT", ais_endpoint)
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    return importlib.import_module


@pytest.fixture
def new_bucket(ais_client: Client) -> Iterator[Callable[[], str]]:
    """Returns fresh ``ais://`` bucket names; destroys those buckets afterwards."""
    names: list[str] = []

    def make() -> str:
        names.append(f"aisio-example-{uuid.uuid4().hex[:10]}")
        return f"ais://{names[-1]}"

    yield make
    for name in names:
        ais_client.destroy_bucket(Bucket(name))


def crops(stride: int, crop: int = 32) -> int:
    """Returns how many crops example 1 cuts from scikit-learn's two photos."""
    return sum(len(range(0, p.shape[0] - crop + 1, stride)) * len(range(0, p.shape[1] - crop + 1,
                                                                        stride))
               for p in load_sample_images().images)


def test_convert_dataset(example: Callable[[str], ModuleType], new_bucket: Callable[[], str],
                         ais_endpoint: str, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    convert = example("convert_dataset")
    expected = crops(96)
    root = tmp_path / "dataset"
    assert convert.build_dataset(root, stride=96) == expected
    assert len(list((root / "images").glob("*.jpg"))) == expected
    assert len(list((root / "masks").glob("*.png"))) == expected
    (root / "masks" / "flower_096_192.png").unlink()  # an incomplete record is skipped

    result = convert.convert(root, ais_endpoint, new_bucket(), per_shard=20)
    assert result.samples == expected - 1
    assert len(result.shards) == math.ceil((expected - 1) / 20)
    samples = list(aisio.AISFileLoader(result.template, url=ais_endpoint).ais_parse_webdataset())
    assert len(samples) == result.samples
    assert "flower_096_192" not in {s["__key__"] for s in samples}
    for sample in samples:
        assert set(sample) == {"__key__", "__url__", "cls", "image.jpg", "mask.png"}
        assert int(sample["cls"]) == convert.CLASSES.index(sample["__key__"].split("_")[0])
    decoded = aisio.Decoder("l8")(samples[0])
    assert decoded["image.jpg"].shape == (32, 32)
    assert set(decoded["mask.png"].ravel().tolist()) <= {0, 255}

    assert convert.main(["--bucket", new_bucket(), "--stride", "128", "--per-shard", "30"]) == 0
    out = capsys.readouterr().out
    assert f"uploaded {crops(128)} samples as {math.ceil(crops(128) / 30)} shards" in out


def test_dsort_shuffle(example: Callable[[str], ModuleType], new_bucket: Callable[[], str],
                       ais_endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    dsort = example("dsort_shuffle")
    bucket = new_bucket()
    assert dsort.main(["--bucket", bucket, "--stride", "96", "--per-shard", "20",
                       "--shard-size", "16KiB"]) == 0
    out = capsys.readouterr().out
    n = crops(96)
    assert f"input: {n} samples in 4 shards" in out
    assert f"all {n} samples kept, each with its fields cls, image.jpg, mask.png" in out
    assert "order changed: True" in out
    shuffled = ls(f"{bucket}/shuffled-", endpoint=ais_endpoint)
    assert shuffled.count >= 3  # about 16 KiB of content each
    keys = dsort.sample_keys([e.name for e in shuffled.entries], ais_endpoint)
    assert len(keys) == n and len({k for k, _ in keys}) == n


def test_etl_urls(example: Callable[[str], ModuleType], new_bucket: Callable[[], str],
                  ais_endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    etl = example("etl_urls")
    bucket = new_bucket().removeprefix("ais://")
    outcome = etl.run(ais_endpoint, bucket, aisio.ETL("resize-images", {"width": 8}))
    assert len(outcome.urls) == 2 and outcome.plain_samples == 10
    for url in outcome.urls:
        assert url.startswith(f"{ais_endpoint}/v1/objects/{bucket}/text-0")
        assert "etl_name=resize-images" in url and "etl_args=%7B%22width%22%3A8%7D" in url
    assert isinstance(outcome.error, aisio.ETLUnavailableError)
    assert outcome.error.status == 501 and "'resize-images'" in str(outcome.error)
    assert etl.main(["--bucket", bucket, "--etl", "blur"]) == 0
    out = capsys.readouterr().out
    assert "with the ETL: ETLUnavailableError: ETL 'blur'" in out and "Kubernetes" in out


def test_etl_resize_trains_through_its_local_etl(
        example: Callable[[str], ModuleType], new_bucket: Callable[[], str], ais_endpoint: str,
        ais_client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    resize = example("etl_resize")
    bucket = new_bucket().removeprefix("ais://")
    result = resize.run(ais_endpoint, bucket, size=12, epochs=2, num_workers=2)
    assert result.where == "local" and result.image_shape == (12, 12)  # digits were 32x32
    assert result.samples_per_epoch == 1797 and result.accuracy > 0.6
    assert "runs locally" in capsys.readouterr().out
    assert resize.ETL_NAME not in local_etls(ais_endpoint)  # stopped when training ended
    # the transform keeps every member, in order, and only resizes the images
    original = ais_client.get_bytes(parse_ais_url(f"ais://{bucket}/digits-0000.tar"))
    with tarfile.open(fileobj=io.BytesIO(original)) as before, \
            tarfile.open(fileobj=io.BytesIO(resize.resize_shard(original, 12))) as after:
        pairs = list(zip(before, after, strict=True))
        assert all(a.name == b.name for a, b in pairs)
        assert all(before.extractfile(a).read() == after.extractfile(b).read()  # type: ignore
                   for a, b in pairs if a.name.endswith(".cls"))


@needs_dataloader2
def test_dataloader2_pipeline(example: Callable[[str], ModuleType],
                              new_bucket: Callable[[], str],
                              capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = example("dataloader2_pipeline")
    argv = ["--bucket", new_bucket(), "--stride", "96", "--epochs", "2", "--workers", "2",
            "--worker-batch", "8", "--batch-size", "32"]
    assert pipeline.main(argv) == 0
    out = capsys.readouterr().out
    n = crops(96)
    assert f"{n} samples in ais://" in out
    assert "first batch: images (32, 3, 32, 32), labels (32,), masks (32, 3, 32, 32)" in out
    epochs = re.findall(r"epoch (\d): (\d+) samples in (\d+) batches", out)
    assert epochs == [("1", str(n), str(math.ceil(n / 32))), ("2", str(n), str(math.ceil(n / 32)))]


@pytest.mark.torchdata
def test_train_digits(example: Callable[[str], ModuleType], new_bucket: Callable[[], str],
                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    train = example("train_digits")
    loader = "dataloader2" if HAS_DATALOADER2 else "dataloader"
    monkeypatch.setattr(sys, "argv", ["train_digits.py", "--bucket", new_bucket(), "--epochs", "1",
                                      "--per-shard", "600", "--workers", "2", "--loader", loader])
    assert train.main() == 0
    out = capsys.readouterr().out
    assert "uploaded 1797 samples as 3 shards" in out
    assert re.search(r"epoch 1: 1797 samples in [\d.]+ s", out)


def test_notebook_is_stored_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def test_notebook_runs_end_to_end(ais_endpoint: str, tmp_path: Path) -> None:
    # As a user runs it (README: make notebook, or headless with nbconvert): the venv's own
    # jupyter and kernel, which import this checkout's aisio with no PYTHONPATH help.
    jupyter = Path(sys.executable).with_name("jupyter")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"AIS_ENDPOINT": ais_endpoint, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute", str(NOTEBOOK),
                    "--output-dir", str(tmp_path), "--ExecutePreprocessor.timeout=180"],
                   env=env, cwd=tmp_path, check=True, capture_output=True, timeout=400)
    nb = nbformat.read(tmp_path / NOTEBOOK.name, as_version=4)
    outputs = {cell.source.splitlines()[0]: cell.outputs for cell in nb.cells
               if cell.cell_type == "code"}
    by_type = {line: {k for o in outs for k in o.get("data", {})} for line, outs in outputs.items()}
    assert "text/html" in by_type['listing = aisio.tools.ls(f"ais://{BUCKET}/", endpoint=endpoint)']
    assert "text/html" in by_type["summary = aisio.tools.summarize(listing)"]
    assert "text/html" in by_type['samples = aisio.tools.head(f"ais://{BUCKET}/photos-00.tar", 4, '
                                  'endpoint=endpoint)']
    grid = 'aisio.tools.show_samples(f"ais://{BUCKET}/photos-03.tar", 6, endpoint=endpoint)'
    assert "image/png" in by_type[grid]
    printed = "".join(o.get("text", "") for outs in outputs.values() for o in outs)
    assert re.search(r"one epoch: (\d+) samples of \1 \(16 before the checkpoint", printed)
    # it teaches the resumable one-call loader and shows its state, not make_loader
    assert "make_loader" not in "".join(cell.source for cell in nb.cells)
    state = next(outs for line, outs in outputs.items() if line.startswith("n_shards"))
    assert "'delivered': 16" in "".join(o.get("data", {}).get("text/plain", "") for o in state)
    html = next(o["data"]["text/html"] for o in outputs["samples[0]"])
    assert 'src="data:image/png;base64,' in html


@needs_dataloader2  # once (nodes' kill and resume: core/epochs/test_resume.py)
@pytest.mark.slow
def test_resume_after_kill(example: Callable[[str], ModuleType], ais_endpoint: str,
                           monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AIS_ENDPOINT", ais_endpoint)
    resume = example("resume_after_kill")
    assert resume.main(["--loader", "dataloader2", "--workers", "2", "1", "--seed", "3",
                        "--order", "deterministic"]) == 0
    out = capsys.readouterr().out
    assert "killed at step" in out and "each exactly once" in out
    assert "the same order as the uninterrupted run" in out


def test_seed_article_pipeline(example: Callable[[str], ModuleType],
                               new_bucket: Callable[[], str],
                               capsys: pytest.CaptureFixture[str]) -> None:
    article = example("seed_article")
    bucket = new_bucket().removeprefix("ais://")
    assert article.main(["--bucket", bucket, "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "torch.Size([64]) torch.Size([64, 3, 32, 32]) torch.Size([64, 3, 32, 32])" in out
    assert "one pass: 96 of 96 samples" in out


def test_the_articles_call_signature_is_accepted(ais_endpoint: str) -> None:
    from aistore.sdk import Client as SDKClient

    bucket = SDKClient(ais_endpoint).bucket("any")
    lister = aisio.AISSourceLister(ais_sources=[bucket], etl_name="resize", url=ais_endpoint)
    assert lister.etl == aisio.ETL("resize")
    with pytest.raises(ValueError, match="not both"):
        aisio.AISSourceLister(ais_sources=[bucket], etl="a", etl_name="b", url=ais_endpoint)


def readme_section(title: str) -> list[tuple[str, str]]:
    """Returns the ``(language, code)`` blocks of the quick start's section with this title."""
    text = (ROOT / "docs" / "quickstart.md").read_text()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(python|bash)\n(.*?)```", section, flags=re.S)


def test_readme_folder_of_images_to_shards_in_a_bucket(
        ais_endpoint: str, new_bucket: Callable[[], str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    for c, name in enumerate(("cat", "dog")):
        (tmp_path / "photos" / name).mkdir(parents=True)
        for i in range(20):
            Image.new("RGB", (24, 20), (100 * c, 5 * i, 0)).save(
                tmp_path / "photos" / name / f"{i}.jpg")
    bucket = new_bucket()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIS_ENDPOINT", ais_endpoint)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    blocks = readme_section("From a folder of images to shards in a bucket")
    assert [lang for lang, _ in blocks] == ["python", "bash", "python"]
    namespace: dict[str, object] = {}
    outputs = []
    for lang, code in blocks:
        code = code.replace("ais://bucket", bucket)
        if lang == "python":
            exec(compile(code, "docs/quickstart.md", "exec"), namespace)
            continue
        for line in code.splitlines():
            argv = shlex.split(line.split("  #")[0])
            assert argv[0] == "aisio"
            done = subprocess.run([sys.executable, "-m", "aisio", *argv[1:]], env=env,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            outputs.append(done.stdout)
    assert len(list((tmp_path / "shards").glob("train-*.tar"))) == 1
    assert "put 1 file" in outputs[0] and f"{bucket}/train/train-0000.tar" in outputs[1]
    assert outputs[2].splitlines()[-1].startswith("3 sample(s)")
    images, labels = namespace["images"], namespace["labels"]
    assert tuple(images.shape) == (16, 3, 20, 24)  # type: ignore[attr-defined]
    assert set(labels.tolist()) <= {0, 1}  # type: ignore[attr-defined]
    again = subprocess.run([sys.executable, "-m", "aisio", "put", "shards/", f"{bucket}/train/"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert "put 0 files (0 B)" in again.stdout and "skipped 1 already there" in again.stdout
