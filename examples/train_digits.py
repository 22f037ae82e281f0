"""The main job: a real pipeline from a local AIStore into a training loop.

1. Start a local AIStore (unless AIS_ENDPOINT points at one).
2. Convert scikit-learn's digits (1,797 8x8 images that ship inside the package) into WebDataset
   shards with ``webdataset.ShardWriter``, uploading each shard as soon as it is written.
3. Stream the shards back: AISFileLoader -> WebDatasetParser -> decode -> batches, through
   torch's DataLoader with worker processes (or, with ``--loader``, DataLoader2,
   StatefulDataLoader or torchdata.nodes: the same pipeline).
4. Train a small classifier for a few epochs, printing samples/s and the loss going down.
   With ``--checkpoint``, kill it at any step (``--crash-at``) and run it again: it resumes
   mid-epoch, every sample once.

Run: ``make demo`` (or ``python examples/train_digits.py --help``).
"""

from __future__ import annotations

import argparse
import io
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import webdataset as wds
from PIL import Image
from sklearn.datasets import load_digits

import aisio
from aisio.core.store.client import client_for
from aisio.core.store.urls import parse_ais_url


def write_shards(bucket: str, workdir: Path, per_shard: int, endpoint: str,
                 limit: int | None = None) -> str:
    """Writes the digits (the first ``limit``) as PNG + cls WebDataset shards and uploads each
    one; returns a template."""
    client = client_for(aisio.AISConfig(endpoint=endpoint))
    client.create_bucket(parse_ais_url(bucket).bucket, exist_ok=True)
    digits = load_digits()
    images, targets = digits.images[:limit], digits.target[:limit]
    uploaded: list[str] = []

    def upload(path: str) -> None:
        name = f"{bucket}/{Path(path).name}"
        with open(path, "rb") as fh:
            client.put_object(parse_ais_url(name), fh)
        uploaded.append(name)
        os.unlink(path)  # only one shard on local disk at a time

    pattern = str(workdir / "digits-%04d.tar")
    with wds.ShardWriter(pattern, maxcount=per_shard, post=upload, verbose=0) as sink:
        for i, (image, label) in enumerate(zip(images, targets, strict=True)):
            png = io.BytesIO()
            Image.fromarray((image * 255 / 16).astype(np.uint8), mode="L").save(png, "PNG")
            sink.write({"__key__": f"sample{i:05d}", "png": png.getvalue(), "cls": int(label)})
    print(f"uploaded {len(images)} samples as {len(uploaded)} shards to {bucket}/")
    return f"{bucket}/digits-{{0000..{len(uploaded) - 1:04d}}}.tar"


LOADERS = {
    "dataloader2": aisio.webdataset_loader,  # DataLoader2 (torchdata < 0.10)
    "dataloader": aisio.webdataset_dataloader,  # torch.utils.data.DataLoader
    "stateful": aisio.webdataset_stateful_loader,  # torchdata's StatefulDataLoader
    "nodes": aisio.webdataset_node_loader,  # torchdata.nodes (torchdata >= 0.10)
}


def train(template: str, endpoint: str, args: argparse.Namespace) -> float:
    """Trains a small MLP on batches streamed from AIStore; returns the last epoch's mean loss.

    With ``--checkpoint``, the model, the optimizer and the loader's position are saved every
    ``--every`` steps, and a run that finds the file resumes from it mid-epoch: every sample of
    the epoch is trained on once across the runs, whatever killed the first one.
    """
    loader = LOADERS[args.loader](
        template, endpoint=endpoint, decode="torchl", tuple_fields=("png", "cls", "__key__"),
        shuffle_buffer=256, batch_size=args.batch_size, num_workers=args.workers, seed=0,
        order=args.order,
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    checkpoint = Path(args.checkpoint) if args.checkpoint else None
    first_epoch, step = 1, 0
    if checkpoint is not None and checkpoint.exists():
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["data"])
        first_epoch, step = saved["data"]["epoch"] + 1, saved.get("step", 0)
        done = (f"{saved['data']['delivered']} samples of it" if "delivered" in saved["data"]
                else f"{saved['step']} steps")  # (a deterministic-order state counts per stream)
        print(f"resumed from {checkpoint}: epoch {first_epoch}, {done} already trained on")
    loss_fn = torch.nn.CrossEntropyLoss()
    mean_loss = float("nan")
    keys = open(args.log_keys, "a") if args.log_keys else None  # noqa: SIM115
    try:
        for epoch in range(first_epoch, args.epochs + 1):
            start, seen, total_loss, correct, steps = time.perf_counter(), 0, 0.0, 0, 0
            for images, labels, names in loader:
                optimizer.zero_grad()
                logits = model(images)
                loss = loss_fn(logits, labels)
                loss.backward()
                optimizer.step()
                seen += len(labels)
                steps += 1
                step += 1
                total_loss += loss.item()
                correct += int((logits.argmax(1) == labels).sum())
                if keys is not None:
                    keys.write("".join(f"{epoch} {name}\n" for name in names))
                    keys.flush()
                if checkpoint is not None and step % args.every == 0:
                    tmp = checkpoint.with_suffix(".tmp")
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "data": loader.state_dict(), "step": step}, tmp)
                    tmp.replace(checkpoint)  # atomic: a kill never leaves half a checkpoint
                    if keys is not None:
                        keys.write(f"checkpoint {step}\n")
                        keys.flush()
                if step == args.crash_at:
                    print(f"step {step}: killing this process (SIGKILL), as a preemption would",
                          flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
            elapsed = time.perf_counter() - start
            mean_loss = total_loss / max(steps, 1)
            print(f"epoch {epoch}: {seen} samples in {elapsed:.2f} s = {seen / elapsed:,.0f} "
                  f"samples/s | loss {mean_loss:.3f} | train accuracy {correct / max(seen, 1):.1%}")
    finally:
        loader.shutdown()
        if keys is not None:
            keys.close()
    return mean_loss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", default="ais://aisio-demo", help="bucket to upload to")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--loader", choices=sorted(LOADERS), default="dataloader",
                        help="which PyTorch loader runs the pipeline (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--order", choices=["fast", "deterministic"], default="fast",
                        help="deterministic: the same batches on any workers, and after a "
                             "resume")
    parser.add_argument("--per-shard", type=int, default=200, help="samples per shard")
    parser.add_argument("--checkpoint", help="save model, optimizer and loader state here; "
                        "resume from it if it exists")
    parser.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    parser.add_argument("--crash-at", type=int, default=0,
                        help="SIGKILL this process at step N (to try resuming)")
    parser.add_argument("--log-keys", help="append '<epoch> <sample key>' per trained sample")
    parser.add_argument("--no-upload", action="store_true",
                        help="the shards are in the bucket already (from an earlier run)")
    args = parser.parse_args()

    try:
        with aisio.playground.cluster_endpoint() as endpoint:
            print(f"AIStore at {endpoint}")
            if args.no_upload:
                last = math.ceil(1797 / args.per_shard) - 1
                template = f"{args.bucket}/digits-{{0000..{last:04d}}}.tar"
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    template = write_shards(args.bucket, Path(tmp), args.per_shard, endpoint)
            print(f"streaming {template} through {args.loader} with {args.workers} workers")
            train(template, endpoint, args)
    except aisio.AISIOError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not os.environ.get("AIS_ENDPOINT"):
        print("stopped the local AIStore (keep one running with `aisio playground up`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
