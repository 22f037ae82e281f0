"""The `aisio` command pointed at things that are not an AIStore, and preview titles."""

from __future__ import annotations

import http.server
import io
import itertools
import json
import threading
from collections.abc import Iterator

import pytest
import webdataset as wds
from PIL import Image

from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from aisio.tools.cli import main

PAGE = ("<!DOCTYPE html>\n<html>\n<head>\n<title>Not Found</title>\n</head>\n<body>\n"
        "<h1>Not Found</h1>\n<p>The requested URL was not found on this server.</p>\n"
        "<hr>\n<address>Apache Server</address>\n</body>\n</html>\n")


class _NotAIS(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGE.encode()
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[str]:
    """A plain-HTTP server on 127.0.0.1 that answers every GET with an HTML 404 page."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotAIS)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("command", [["cat", "ais://b/o.txt"], ["stat", "ais://b/o.txt"],
                                     ["ls", "ais://b"]])
def test_web_server_is_not_an_aistore_endpoint(web_server: str, command: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*command, "--endpoint", f"http://{web_server}"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1, err
    assert "not an AIStore endpoint" in err and "does not exist" not in err
    assert "<html>" not in err.lower()


def test_https_against_plain_http_says_so(web_server: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cat", "ais://b/o.txt", "--endpoint", f"https://{web_server}"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert "plain HTTP" in err and f"http://{web_server}" in err
    assert "certificate" not in err.lower() and "ca_cert" not in err


def test_real_cluster_still_says_object_missing(ais_endpoint: str, bucket: Bucket,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cat", bucket.uri("missing.txt"), "--endpoint", ais_endpoint]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and "not an AIStore" not in err


def test_preview_titles_with_json_labels_do_not_overlap(ais_client: Client, bucket: Bucket,
                                                        ais_endpoint: str) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from aisio.tools.preview import show_samples

    out = io.BytesIO()
    with wds.TarWriter(out) as sink:
        for i in range(8):
            png = io.BytesIO()
            Image.new("RGB", (16, 16), (30 * i, 0, 0)).save(png, "PNG")
            sink.write({"__key__": f"sample-{i:04d}", "png": png.getvalue(),
                        "json": json.dumps({"caption": "a long caption " * 4, "id": i})})
    ais_client.put_object(AISPath(bucket, "s.tar"), out.getvalue())
    fig = show_samples(bucket.uri("s.tar"), 8, endpoint=ais_endpoint)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
    assert len(boxes) == 8
    for a, b in itertools.pairwise(boxes):
        if abs(a.y0 - b.y0) < 1:  # same row
            assert a.x1 <= b.x0 or b.x1 <= a.x0, "titles overlap"
