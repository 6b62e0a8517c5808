"""Reference signer for adapter authors: the ``tg-signature`` of one tool result, scheme v2.

Usage::

    python ops/signing/sign_result.py --request-id req.J7q94MkP --attempt 1 \\
        --hmac-secret BASE64 result.json
    python ops/signing/sign_result.py --request-id req.J7q94MkP --attempt 1 \\
        --ed25519-private-key BASE64 result.json

prints the base64 value to send as ``tg-signature``, beside ``tg-attempt`` (the same
attempt) and ``tg-request-id``. The signed message is four lines joined by ``\\n``::

    toolgate-sig-v2
    <request_id>
    <attempt, decimal, no leading zeros>
    <SHA-256 of the exact value bytes sent, lower-case hex>

HMAC-SHA256 with the shared secret, or Ed25519 (RFC 8032) with the private key.
``ops/signing/vectors.json`` holds published test vectors; an adapter's signer should
reproduce every one of them. Needs only the standard library (and ``cryptography``
for Ed25519).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import sys
from pathlib import Path

SCHEME = b"toolgate-sig-v2"


def signed_message(request_id: str, attempt: int, raw: bytes) -> bytes:
    """The bytes an adapter signs for one result (scheme v2)."""
    if attempt < 1:
        raise ValueError("attempt starts at 1")
    digest = hashlib.sha256(raw).hexdigest().encode("ascii")
    return b"\n".join((SCHEME, request_id.encode("utf-8"), str(attempt).encode("ascii"), digest))


def sign(
    request_id: str,
    attempt: int,
    raw: bytes,
    *,
    hmac_secret: bytes | None = None,
    ed25519_private_key: bytes | None = None,
) -> str:
    """The ``tg-signature`` header value (standard base64) for one result."""
    message = signed_message(request_id, attempt, raw)
    if (hmac_secret is None) == (ed25519_private_key is None):
        raise ValueError("give exactly one of hmac_secret and ed25519_private_key")
    if hmac_secret is not None:
        signature = hmac.new(hmac_secret, message, hashlib.sha256).digest()
    else:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        assert ed25519_private_key is not None
        signature = Ed25519PrivateKey.from_private_bytes(ed25519_private_key).sign(message)
    return base64.b64encode(signature).decode("ascii")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--request-id", required=True)
    parser.add_argument("--attempt", type=int, required=True)
    key = parser.add_mutually_exclusive_group(required=True)
    key.add_argument("--hmac-secret", help="the shared secret, base64")
    key.add_argument("--ed25519-private-key", help="the 32-byte private key, base64")
    parser.add_argument("file", help="the exact value bytes the adapter sends")
    args = parser.parse_args(argv)
    try:
        raw = Path(args.file).read_bytes()
        print(
            sign(
                args.request_id,
                args.attempt,
                raw,
                hmac_secret=base64.b64decode(args.hmac_secret) if args.hmac_secret else None,
                ed25519_private_key=(
                    base64.b64decode(args.ed25519_private_key) if args.ed25519_private_key else None
                ),
            )
        )
    except (OSError, ValueError) as exc:
        print(f"sign_result: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
