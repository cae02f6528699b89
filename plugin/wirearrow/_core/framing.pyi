from collections.abc import Buffer

from wirearrow._core.buffers import OwnedBuffer

FRAMINGS: dict[str, int]

def split(data: Buffer, framing: int, base: int = 0) -> tuple[OwnedBuffer, OwnedBuffer, int]: ...
def compact(
    data: Buffer, starts: Buffer, ends: Buffer
) -> tuple[OwnedBuffer, OwnedBuffer, bool]: ...
