"""Bound what one message inflates to under WebSocket permessage-deflate, RFC 7692.

mitmproxy relays a WebSocket message whole: wsproto inflates it, mitmproxy holds it, hands
it to the addons and compresses it again for the other side. wsproto's inflating has no
bound, so a quarter of a megabyte of deflate makes a message of close to a gigabyte in
mitmdump's memory. `BoundedDeflate` inflates exactly as wsproto does, each message up to
`MAX_INFLATED` bytes; a message past it ends the connection with 1009 (Message Too Big),
as RFC 6455 (7.4.1) has an endpoint do with a message too big to process. Every message
within the bound passes as it would without the capture: the extension stays negotiated,
nothing else changes. The capture addon installs it in mitmdump's process
(`install_bounded_deflate`).
"""

from __future__ import annotations

import zlib
from typing import Any

import wsproto.extensions
from wsproto.frame_protocol import CloseReason, Opcode, RsvBits

__all__ = ["MAX_INFLATED", "BoundedDeflate", "install_bounded_deflate"]

MAX_INFLATED = 64 << 20
"""Bytes one WebSocket message may inflate to.

Far past any API's events: a Responses session's largest, an image inlined as base64, is a
few megabytes."""


class BoundedDeflate(wsproto.extensions.PerMessageDeflate):
    """Inflate each inbound message to `MAX_INFLATED` bytes at most, as wsproto's deflate.

    Past it, the connection closes with 1009."""

    _inflated = 0

    def frame_inbound_header(
        self, proto: Any, opcode: Opcode, rsv: RsvBits, payload_length: int
    ) -> CloseReason | RsvBits:
        if self._inbound_compressed is None:  # a message begins
            self._inflated = 0
        return super().frame_inbound_header(proto, opcode, rsv, payload_length)

    def frame_inbound_payload_data(self, proto: Any, data: bytes) -> bytes | CloseReason:
        if not self._inbound_compressed or not self._inbound_is_compressible:
            return data
        assert self._decompressor is not None
        try:
            out = self._decompressor.decompress(bytes(data), self._room())
        except zlib.error:
            return CloseReason.INVALID_FRAME_PAYLOAD_DATA
        return self._counted(out)

    def frame_inbound_complete(self, proto: Any, fin: bool) -> bytes | CloseReason | None:
        if not fin or not self._inbound_is_compressible or not self._inbound_compressed:
            return super().frame_inbound_complete(proto, fin)
        assert self._decompressor is not None
        try:  # what is left to inflate: the end of the last block, all input taken
            data = self._decompressor.decompress(b"\x00\x00\xff\xff", self._room())
            data += self._decompressor.flush()
        except zlib.error:
            return CloseReason.INVALID_FRAME_PAYLOAD_DATA
        no_takeover = (
            self.server_no_context_takeover if proto.client else self.client_no_context_takeover
        )
        if no_takeover:
            self._decompressor = None
        self._inbound_compressed = None
        return self._counted(data)

    def _room(self) -> int:
        """Count the bytes the message may still inflate to, and one more: reaching it is past."""
        return max(MAX_INFLATED - self._inflated, 0) + 1

    def _counted(self, out: bytes) -> bytes | CloseReason:
        self._inflated += len(out)
        return CloseReason.MESSAGE_TOO_BIG if self._inflated > MAX_INFLATED else out


def install_bounded_deflate() -> None:
    """Have mitmproxy negotiate permessage-deflate as `BoundedDeflate` in this process.

    Its WebSocket layer makes one per connection side by this name."""
    wsproto.extensions.PerMessageDeflate = BoundedDeflate  # type: ignore[misc]
