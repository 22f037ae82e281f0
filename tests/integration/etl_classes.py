"""AIStore SDK ETL classes the ETL tests serve locally (in a file of its own: the server imports
it by path)."""

from __future__ import annotations

import io
import os
import tarfile

from aistore.sdk.etl.webserver.http_multi_threaded_server import HTTPMultiThreadedServer


class UpperText(HTTPMultiThreadedServer):
    """Upper-cases the ``.txt`` members of a tar shard (``etl_args`` is appended to each) and
    turns its ``.png`` images grayscale (mode ``L``); other members are kept as they are. A
    shard named ``bad-*`` makes the transform raise. Each call appends its path to the file
    ``AISIO_TEST_ETL_CALLS`` names, when set (tests count them)."""

    def transform(self, data: bytes, path: str, etl_args: str) -> bytes:
        calls = os.environ.get("AISIO_TEST_ETL_CALLS")
        if calls:
            with open(calls, "a") as log:
                log.write(path + "\n")
        if path.rsplit("/", 1)[-1].startswith("bad-"):
            raise ValueError(f"refusing {path}: this shard is marked bad")
        out = io.BytesIO()
        with tarfile.open(fileobj=io.BytesIO(data)) as src, \
                tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as dst:
            for member in src:
                body = src.extractfile(member)
                payload = body.read() if body is not None else b""
                if member.name.endswith(".txt"):
                    payload = payload.upper() + etl_args.encode()
                elif member.name.endswith(".png"):
                    from PIL import Image

                    gray = io.BytesIO()
                    Image.open(io.BytesIO(payload)).convert("L").save(gray, format="PNG")
                    payload = gray.getvalue()
                member.size = len(payload)
                dst.addfile(member, io.BytesIO(payload))
        return out.getvalue()


class Identity(HTTPMultiThreadedServer):
    """Returns every object as it is."""

    def transform(self, data: bytes, path: str, etl_args: str) -> bytes:
        return data
