"""One rank of a distributed read: ``python _dist_job.py RANK WORLD PORT ENDPOINT TEMPLATE UNEVEN
WORKERS OUT``. Joins a gloo group on 127.0.0.1, reads one epoch, writes the keys it got as JSON."""

from __future__ import annotations

import json
import sys
from datetime import timedelta


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    endpoint, template, uneven, workers, out = sys.argv[4:9]
    import torch.distributed as dist

    import aisio

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    loader = aisio.webdataset_loader(template, url=endpoint, num_workers=int(workers), seed=7,
                                     uneven=uneven)  # type: ignore[arg-type]
    try:
        keys = [sample["__key__"] for sample in loader]
    finally:
        loader.shutdown()
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as fh:
        json.dump(keys, fh)


if __name__ == "__main__":
    main()
