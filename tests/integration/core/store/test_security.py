"""AuthN tokens and TLS against a real node started with both; object-name quoting."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import pickle
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

import pytest

import aisio
from aisio.core.store.client import Client, client_for
from aisio.core.store.urls import AISPath, Bucket, object_url
from tests.conftest import tar_bytes
from tests.faultproxy import fault_proxy
from tests.integration._recording_proxy import RecordingProxy

SECRET = "aisio-test-secret"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def make_token(secret: str = SECRET, ttl: int = 3600) -> str:
    """Returns an HS256 JWT with the claims AIStore checks (sub, exp, admin)."""
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64(json.dumps({"sub": "aisio-tests", "exp": int(time.time()) + ttl,
                            "admin": True}).encode())
    sig = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(sig)}"


class Secure(NamedTuple):
    """The secure playground: its endpoint, the CA that verifies it, a client certificate."""

    endpoint: str
    ca: str
    client_cert: str
    client_key: str
    client_pem: str  # the certificate and its key in one file


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    """A node serving HTTPS with a self-signed certificate, requiring AuthN tokens and client
    certificates signed by a CA of the test's own (mutual TLS)."""
    root = tmp_path_factory.mktemp("secure")
    cert, key = root / "cert.pem", root / "key.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    client_ca, client_ca_key = root / "client-ca.pem", root / "client-ca.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-keyout", str(client_ca_key), "-out", str(client_ca), "-subj", "/CN=aisio-client-ca")
    client_cert, client_key = root / "client.pem", root / "client.key"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(client_key),
             "-out", str(root / "client.csr"), "-subj", "/CN=aisio-tests")
    _openssl("x509", "-req", "-in", str(root / "client.csr"), "-CA", str(client_ca),
             "-CAkey", str(client_ca_key), "-CAcreateserial", "-days", "2",
             "-out", str(client_cert))
    client_pem = root / "client-with-key.pem"
    client_pem.write_text(client_cert.read_text() + client_key.read_text())
    playground = aisio.playground.Playground(root / "pg", tls=(str(cert), str(key)),
                                             auth_secret=SECRET, client_ca=str(client_ca))
    endpoint = playground.up()
    try:
        yield Secure(endpoint, str(cert), str(client_cert), str(client_key), str(client_pem))
    finally:
        playground.down(wipe=True, quiet=True)


def test_tls_needs_the_ca(secure_cluster: Secure) -> None:
    endpoint, ca, client_cert, client_key, _ = secure_cluster
    token = make_token()
    mtls = {"client_cert": client_cert, "client_key": client_key}
    with pytest.raises(aisio.AISConnectionError, match="TLS verification failed"):
        list(client_for(aisio.AISConfig(endpoint=endpoint, token=token, max_retries=0, **mtls)
                        ).list_objects(Bucket("any")))
    client = client_for(aisio.AISConfig(endpoint=endpoint, token=token, ca_cert=ca, **mtls))
    with pytest.raises(aisio.BucketNotFoundError):  # verified, authenticated, and answered
        list(client.list_objects(Bucket("aisio-none")))
    with pytest.warns(UserWarning, match="verification is off"):
        insecure = client_for(aisio.AISConfig(endpoint=endpoint, token=token, skip_verify=True,
                                              max_pool_size=3, **mtls))
        with pytest.raises(aisio.BucketNotFoundError):
            list(insecure.list_objects(Bucket("aisio-none")))


def test_mutual_tls_sends_the_client_certificate(secure_cluster: Secure) -> None:
    endpoint, ca, client_cert, client_key, client_pem = secure_cluster
    token = make_token()
    # Without a client certificate the node refuses the connection: a typed error.
    with pytest.raises(aisio.AISConnectionError):
        list(client_for(aisio.AISConfig(endpoint=endpoint, token=token, ca_cert=ca,
                                        max_retries=0)).list_objects(Bucket("aisio-none")))
    configs = [
        aisio.AISConfig(endpoint=endpoint, token=token, ca_cert=ca, client_cert=client_cert,
                        client_key=client_key),
        aisio.AISConfig(endpoint=endpoint, token=token, ca_cert=ca, client_cert=client_pem),
    ]
    # The environment's names: AIS_CRT, AIS_CRT_KEY (and AIS_SKIP_VERIFY_CRT instead of a CA).
    env = {"AIS_ENDPOINT": endpoint, "AIS_AUTHN_TOKEN": token, "AIS_CRT": client_cert,
           "AIS_CRT_KEY": client_key}
    configs.append(aisio.AISConfig.from_env({**env, "AIS_CLIENT_CA": ca}))
    insecure = aisio.AISConfig.from_env({**env, "AIS_SKIP_VERIFY_CRT": "true"})
    assert (insecure.skip_verify, insecure.ca_cert) == (True, None)
    for config in configs:
        assert config.client_cert in (client_cert, client_pem)
        with pytest.raises(aisio.BucketNotFoundError):  # verified both ways and answered
            list(client_for(config).list_objects(Bucket("aisio-none")))
    with pytest.warns(UserWarning, match="verification is off"), pytest.raises(
            aisio.BucketNotFoundError):
        list(client_for(insecure).list_objects(Bucket("aisio-none")))


@pytest.mark.torchdata
def test_token_is_required_and_used_everywhere(secure_cluster: Secure,
                                               monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    endpoint, ca, client_cert, client_key, _ = secure_cluster
    anonymous = client_for(aisio.AISConfig(endpoint=endpoint, ca_cert=ca, max_retries=0,
                                           client_cert=client_cert, client_key=client_key))
    with pytest.raises(aisio.AISRequestError, match="AIS_AUTHN_TOKEN") as info:
        anonymous.create_bucket(Bucket("aisio-auth"))
    assert info.value.status == 401

    token = make_token()
    monkeypatch.setenv("AIS_AUTHN_TOKEN", token)
    monkeypatch.setenv("AIS_CLIENT_CA", ca)
    monkeypatch.setenv("AIS_ENDPOINT", endpoint)
    monkeypatch.setenv("AIS_CRT", client_cert)  # workers and redirects present it too
    monkeypatch.setenv("AIS_CRT_KEY", client_key)
    config = aisio.AISConfig.from_env()
    assert config.token == token
    client = client_for(config)
    bucket = Bucket("aisio-auth")
    client.create_bucket(bucket, exist_ok=True)
    try:
        from tests.conftest import default_loader, write_shards

        template, keys = write_shards(client, bucket, tmp_path, shards=3, per_shard=4)
        assert len(list(aisio.AISFileLister(bucket.uri()))) == 3
        loader = default_loader(template, num_workers=2)  # config travels to workers
        try:
            assert sorted(s["__key__"] for s in loader) == sorted(keys)
        finally:
            loader.shutdown()
        # A rejected token is a cluster error: on_error="skip" must not turn it into an
        # empty epoch.
        monkeypatch.setenv("AIS_AUTHN_TOKEN", make_token(secret="not-the-secret"))
        with pytest.raises(aisio.AuthError, match="AIS_AUTHN_TOKEN"):
            list(aisio.webdataset_pipe(template, on_error="skip"))
    finally:
        client.destroy_bucket(bucket)


def test_token_never_shows_in_logs_reprs_or_errors(secure_cluster: Secure, ais_endpoint: str,
                                                   ais_client: Client, bucket: Bucket,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    endpoint, ca, client_cert, client_key, _ = secure_cluster
    token = make_token(ttl=7200)
    config = aisio.AISConfig(endpoint=endpoint, token=token, ca_cert=ca, max_retries=1,
                             backoff=0.01, client_cert=client_cert, client_key=client_key)
    pipe = aisio.AISFileLister("ais://aisio-none-here", config=config)
    with caplog.at_level(logging.DEBUG), pytest.raises(aisio.AISIOError) as info:
        list(pipe)
    texts = [r.getMessage() for r in caplog.records] + [str(info.value), repr(info.value),
                                                        repr(config), repr(pipe)]
    # A retried and a resumed read with the token (through the fault proxy, in front of the
    # session's cluster): each logs at debug level; the last one runs out of retries.
    path = AISPath(bucket, "o.bin")
    ais_client.put_object(path, b"x" * 100_000)
    with fault_proxy(ais_endpoint, fail_statuses=(503,), cut_after=30_000) as proxy:
        faulty = aisio.AISConfig(endpoint=proxy.endpoint, token=token, max_retries=3,
                                 backoff=0.01)
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="aisio"):
            stream = client_for(faulty).open(object_url(proxy.endpoint, path), name=path.uri())
            assert stream.read() == b"x" * 100_000
            stream.close()
            once = client_for(dataclasses.replace(faulty, max_retries=0))
            with pytest.raises(aisio.AISConnectionError) as ran_out:
                once.open(object_url(proxy.endpoint, path), name=path.uri()).read()
        assert set(proxy.auth_headers) == {f"Bearer {token}"}  # the token was on every request
    logged = [r.getMessage() for r in caplog.records]
    assert any("retry" in m and "HTTP 503" in m for m in logged), logged
    assert any("resuming" in m for m in logged), logged
    texts += [*logged, str(ran_out.value), repr(ran_out.value)]
    assert not [t for t in texts if token in t]
    assert token in pickle.dumps(config).decode("latin-1")  # it does travel to workers


class _Recorder(BaseHTTPRequestHandler):
    """Fake proxy (redirects) or target (answers), recording what each request carried."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str | None, int]]
    target: str | None

    def log_message(self, *args: object) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        self.seen.append((self.command, self.headers.get("Authorization"), len(body)))
        if self.target:
            self.send_response(307 if self.command == "PUT" else 301)
            self.send_header("Location", self.target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        payload = b"from-target"
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PUT = _handle


def _serve(target: str | None) -> tuple[ThreadingHTTPServer, list[tuple[str, str | None, int]]]:
    seen: list[tuple[str, str | None, int]] = []
    handler = type("H", (_Recorder,), {"seen": seen, "target": target})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_token_reaches_the_target_after_the_redirect() -> None:
    target, at_target = _serve(None)
    proxy, at_proxy = _serve(f"http://127.0.0.1:{target.server_address[1]}")
    try:
        token = make_token()
        client = client_for(aisio.AISConfig(
            endpoint=f"http://127.0.0.1:{proxy.server_address[1]}", token=token))
        path = AISPath(Bucket("b"), "o")
        assert client.get_bytes(path) == b"from-target"
        client.put_object(path, b"x" * 1000)
        bearer = f"Bearer {token}"
        assert at_proxy == [("GET", bearer, 0), ("PUT", bearer, 0)]  # the body goes once...
        assert at_target == [("GET", bearer, 0), ("PUT", bearer, 1000)]  # ...to the target
    finally:
        proxy.shutdown()
        target.shutdown()


@pytest.mark.parametrize("name", ["a/../b.bin", "./x.bin", "a/./b.bin", "..", "%2e%2e/c", "a/.."])
def test_dot_segments_are_names_or_typed_errors(ais_endpoint: str, bucket: Bucket,
                                                name: str) -> None:
    proxy = RecordingProxy(ais_endpoint).start()  # shows what reached the server
    try:
        client = client_for(aisio.AISConfig(endpoint=proxy.endpoint))
        path = AISPath(bucket, name)
        try:
            client.put_object(path, b"dots")
            stored = True
        except aisio.AISIOError as exc:  # refused by the server: said so, with the name
            assert bucket.name in str(exc)
            stored = False
        if stored:
            assert client.get_bytes(path) == b"dots"
    finally:
        proxy.stop()
    # Every request named the object exactly, with no dot segment left for a client, proxy or
    # server to resolve ("a/../b.bin" must never become "b.bin").
    sent = [r for r in proxy.log if r["object"] is not None]
    assert [r["method"] for r in sent] == (["PUT", "GET"] if stored else ["PUT"])
    for record in sent:
        assert record["object"] == name
        assert not {".", ".."} & set(record["path"].split("/")), record["path"]
    if stored:
        listed = [e["name"] for e in client_for(aisio.AISConfig(endpoint=ais_endpoint))
                  .list_objects(bucket)]
        assert listed == [name]


def test_double_slashes_are_collapsed_by_the_server_and_still_readable(
        ais_endpoint: str, bucket: Bucket) -> None:
    # AIStore's own naming rule (not aisio's): 'dir//x' is stored as 'dir/x'. Reading back by
    # the name written still finds it, so nothing is lost or crossed.
    client = client_for(aisio.AISConfig(endpoint=ais_endpoint))
    client.put_object(AISPath(bucket, "dir//x.bin"), b"1")
    assert [e["name"] for e in client.list_objects(bucket)] == ["dir/x.bin"]
    assert client.get_bytes(AISPath(bucket, "dir//x.bin")) == b"1"


SHELLISH = ["a;touch pwned;.tar", "$(touch pwned).tar", "`touch pwned`.tar", "a|b&c>d<e.tar",
            "x'y\"z\\.tar", "${IFS}*?[!]~.tar", "-rf --help.tar"]


def test_no_shell_is_ever_run_for_a_url(ais_endpoint: str, ais_client: Client, bucket: Bucket,
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i, name in enumerate(SHELLISH):
        ais_client.put_object(AISPath(bucket, name), tar_bytes([(f"k{i}.cls", b"1")]))
    ran: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        ran.append(args)
        raise AssertionError(f"a process was started for {args!r}")

    for module, name in [(subprocess, "Popen"), (os, "system"), (os, "popen"), (os, "execv"),
                         (os, "execve"), (os, "execvp"), (os, "posix_spawn"),
                         (os, "posix_spawnp"), (os, "fork")]:
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.chdir(tmp_path)  # where `touch pwned` would leave its file
    listed = list(aisio.AISFileLister(bucket.uri(), url=ais_endpoint))
    urls = list(aisio.AISSourceLister(bucket.uri(), url=ais_endpoint))
    samples = list(aisio.AISFileLoader(listed, url=ais_endpoint).ais_parse_webdataset())
    cache = aisio.ShardCache(tmp_path / "cache", max_bytes=10**8)
    threaded = list(aisio.webdataset_pipe(listed, url=ais_endpoint, concurrency=3, cache=cache,
                                          decode="pil", tuple_fields=("cls",)))
    assert sorted(n.rsplit("/", 1)[-1] for n in listed) == sorted(SHELLISH)
    assert len(urls) == len(samples) == len(threaded) == len(SHELLISH)
    assert ran == [] and not (tmp_path / "pwned").exists()
