"""What the path to the cluster really gives, measured from where the client runs.

``python -m benchmarks.net.probe ENDPOINT [--object ais://bucket/name] [--requests N]`` prints
JSON: ``rtt_ms``, the median (and ``rtt_p90_ms``) of ``N`` small requests (``GET /v1/health``
on one kept-alive connection to the proxy: a round trip plus the node's few microseconds), and,
given an object, ``mbit_s``: the rate of one GET of it, timed from the request to its target
(after the proxy's redirect) to the last byte. Run under ``ip netns exec`` to probe a shaped
network; the suite prints it before each run so that every figure says what it was measured on.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import time
import urllib.parse


def _conn(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)


def round_trips(endpoint: str, requests: int) -> list[float]:
    """Returns the seconds of each of ``requests`` ``GET /v1/health`` on one connection."""
    conn = _conn(endpoint)
    times = []
    try:
        for i in range(requests + 3):  # 3 first ones open the connection and warm it
            start = time.perf_counter()
            conn.request("GET", "/v1/health")
            conn.getresponse().read()
            if i >= 3:
                times.append(time.perf_counter() - start)
    finally:
        conn.close()
    return times


def bandwidth(endpoint: str, bucket: str, name: str) -> tuple[int, float]:
    """Returns ``(bytes, seconds)`` of one GET of ``ais://bucket/name``, redirect excluded."""
    path = f"/v1/objects/{urllib.parse.quote(bucket)}/{urllib.parse.quote(name)}?provider=ais"
    conn = _conn(endpoint)
    conn.request("GET", path)
    answer = conn.getresponse()
    location = answer.getheader("Location")
    answer.read()
    conn.close()
    if answer.status not in (301, 302, 307) or not location:
        raise SystemExit(f"probe: expected a redirect from the proxy, got {answer.status}")
    target = _conn(location)
    parts = urllib.parse.urlsplit(location)
    total = 0
    start = time.perf_counter()
    target.request("GET", f"{parts.path}?{parts.query}")
    body = target.getresponse()
    while chunk := body.read(1 << 20):
        total += len(chunk)
    seconds = time.perf_counter() - start
    target.close()
    return total, seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("endpoint")
    parser.add_argument("--object", help="ais://bucket/name of an object to time a GET of")
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args(argv)
    times = sorted(round_trips(args.endpoint.rstrip("/"), args.requests))
    out: dict[str, float] = {"rtt_ms": statistics.median(times) * 1e3,
                             "rtt_p90_ms": times[int(0.9 * (len(times) - 1))] * 1e3}
    if args.object:
        bucket, _, name = args.object.removeprefix("ais://").partition("/")
        size, seconds = bandwidth(args.endpoint.rstrip("/"), bucket, name)
        out.update(mbit_s=size * 8 / seconds / 1e6, probe_bytes=size)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
