"""One rank of a job whose ranks see different shards, for test_shard_agreement.py.

``python _shards_job.py --kind KIND --rank R --world W --port P --endpoint URL --bucket URI
--shards N --out FILE``

Joins a gloo group on 127.0.0.1 and builds loaders of one kind (``dl2``, ``dataloader``,
``stateful`` or ``nodes``; ``uneven="keep"``, batches of 2 uncollated samples) over the bucket
``URI``, which holds ``shard-0000.tar`` .. ``shard-{N-1}.tar``, in three scenarios, one after
the other (every rank builds its loaders in the same order):

* ``listed``, ``listed-deterministic``: the bucket as a prefix, in each order; rank 1's
  listings leave out the last shard (as a listing made a moment apart would, with an object
  uploaded in between);
* ``other-shards``: rank 0 is given a template of every shard, rank 1 one of all but the last.

For each, it writes to the JSON ``FILE``: the loader's shard list and the keys it read in one
epoch, or the aisio error that stopped it; and how many listings of the bucket this rank made.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--kind", "--endpoint", "--bucket", "--out"):
        parser.add_argument(flag, required=True)
    for flag in ("--rank", "--world", "--port", "--shards"):
        parser.add_argument(flag, type=int, required=True)
    args = parser.parse_args()

    import torch.distributed as dist

    import aisio
    import aisio.core.store.sources as sources

    last = f"shard-{args.shards - 1:04d}.tar"
    listings = 0
    list_prefix = sources.list_prefix

    def counted(*a: Any, **k: Any) -> Any:
        nonlocal listings
        listings += 1
        for entry in list_prefix(*a, **k):
            if not (args.rank == 1 and entry[0].obj == last):
                yield entry

    sources.list_prefix = counted  # type: ignore[assignment]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                            world_size=args.world, timeout=timedelta(seconds=60))
    make = {"dl2": aisio.webdataset_loader, "dataloader": aisio.webdataset_dataloader,
            "stateful": aisio.webdataset_stateful_loader,
            "nodes": aisio.webdataset_node_loader}[args.kind]
    count = args.shards - (1 if args.rank == 1 else 0)
    scenarios = [("listed", args.bucket, "fast"),
                 ("listed-deterministic", args.bucket, "deterministic"),
                 ("other-shards", f"{args.bucket}shard-{{0000..{count - 1:04d}}}.tar", "fast")]
    results: dict[str, Any] = {}
    for name, shards, order in scenarios:
        before, result = listings, results.setdefault(name, {})
        try:
            loader = make(shards, url=args.endpoint, seed=5, uneven="keep", batch_size=2,
                          collate=False, order=order)
            try:
                result["shards"] = [ref.uri() for ref in loader.shards]
                result["keys"] = [sample["__key__"] for batch in loader for sample in batch]
            finally:
                loader.shutdown()
        except aisio.AISIOError as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
        result["listings"] = listings - before
        dist.barrier()
    dist.destroy_process_group()
    with open(args.out, "w") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
