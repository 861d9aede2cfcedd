"""An HTTPS upstream whose certificate a private CA signed: mitmproxy refuses it, wirediff
says `upstream_tls` and names mitmproxy's options, and the first one fixes it.

The CA and the server certificate are made here (with `cryptography`, which mitmproxy
depends on); the upstream is the openai stand-in's server with its socket wrapped in TLS.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.fixtures.analysed import diagnose
from wirediff.backends.server import StandinServer
from wirediff.backends.standin import make_standin, standin
from wirediff.cli.replay import main_replay
from wirediff.record.store import load_records

pytestmark = pytest.mark.e2e

MODEL = "gpt-4o-mini"
ASK: Any = [{"role": "user", "content": "Say hello."}]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def private_ca(tmp: Path) -> tuple[Path, Path, Path]:
    """`(ca.pem, server.pem, server.key)`: a CA of our own and a certificate it signed for
    127.0.0.1, valid for a day."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("wirediff test CA"))
        .issuer_name(_name("wirediff test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = tmp / "ca.pem", tmp / "server.pem", tmp / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@pytest.fixture
def https_upstream(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`(https URL, CA file)`: the openai stand-in served over TLS with a private CA."""
    ca, cert, key = private_ca(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    owner = make_standin("openai")
    server = StandinServer(("127.0.0.1", 0), owner)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", ca
    finally:
        owner.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def chat(base_url: str) -> Any:
    client = openai.OpenAI(
        base_url=base_url,
        api_key="sk-e2e-tls",
        max_retries=0,
        timeout=30.0,
        http_client=openai.DefaultHttpxClient(trust_env=False),
    )
    with client:
        return client.chat.completions.create(model=MODEL, messages=ASK)


def test_an_untrusted_upstream_certificate_is_upstream_tls(
    mitmdump: Any, https_upstream: tuple[str, Path]
) -> None:
    url, ca = https_upstream
    m = mitmdump([f"reverse:{url}"])
    with pytest.raises(openai.APIStatusError) as failed:
        chat(m.url + "/v1")
    assert failed.value.status_code == 502
    (rec,) = m.records(1)
    assert rec["response"] is None and rec["error"]["kind"] == "tls"
    assert "certificate verify failed" in rec["error"]["message"].lower()

    (row,) = diagnose([rec]).to_dict("records")
    assert row["code"] == "upstream_tls" and row["provider"] == "unknown"
    assert "TLS handshake with the upstream failed" in row["summary"]
    assert "ssl_verify_upstream_trusted_ca" in row["remedy"] and "ssl_insecure" in row["remedy"]

    # the remedy works: trust the CA that signed it
    trusted = mitmdump(
        [f"reverse:{url}"], session="trusted",
        extra=["--set", f"ssl_verify_upstream_trusted_ca={ca}"],
    )  # fmt: skip
    assert chat(trusted.url + "/v1").choices[0].message.content
    (ok,) = trusted.records(1)
    assert ok["response"]["status"] == 200 and diagnose([ok]).empty


def test_https_to_a_plain_http_server_is_upstream_tls_through_capture_and_replay(
    mitmdump: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An https:// URL for a server that speaks plain HTTP: mitmdump and the replayer both
    record the failed handshake as `tls`, the remedy says to name it with http://, and a
    resumed replay sends it again."""
    with standin("openai") as plain:
        https = plain.replace("http://", "https://")
        m = mitmdump([f"reverse:{https}"])
        with pytest.raises(openai.APIStatusError) as failed:
            chat(m.url + "/v1")
        assert failed.value.status_code == 502
        (captured,) = m.records(1)
        capture = tmp_path / "s.jsonl"
        capture.write_text(json.dumps(captured) + "\n")
        code = main_replay([str(capture), "--to", https + "/v1", "--label", "plain"])
        err = capsys.readouterr().err
        assert code == 2
        assert (
            f"TLS failed with plain at {https}/v1: all 1 requests failed (recorded as tls; "
            "`wirediff diagnose` says what to fix; then run the same command again to retry them)"
        ) in err
        (replayed,) = load_records([tmp_path / "s.plain.jsonl"])
        # as said, the same command names it with http:// and tries it again: it sent nothing
        assert main_replay([str(capture), "--to", plain + "/v1", "--label", "plain"]) == 0
        assert "1 recorded (1 ok" in capsys.readouterr().err
        first, again = load_records([tmp_path / "s.plain.jsonl"])
        assert first == replayed and again["response"] is not None
    for rec in (captured, replayed):
        error = rec["error"]
        assert rec["response"] is None and error is not None and error["kind"] == "tls", error
        (row,) = diagnose([rec]).to_dict("records")
        assert row["code"] == "upstream_tls"
        assert (
            row["remedy"]
            == "the server speaks plain HTTP, not TLS: name it with http://, not https://"
        )
