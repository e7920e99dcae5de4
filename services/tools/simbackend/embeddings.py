"""The simulator's ``POST /v1/embeddings``: OpenAI's request and response, with vectors made from
the text, so the same text always gets the same vector and different texts different ones.

Each vector is `DEFAULT_DIMENSIONS` long (OpenAI's text-embedding-3-small), or `dimensions` when
asked: the first that many of the full vector's values, scaled to unit length again, as OpenAI's
shortened embeddings are. The values come from SHA-256 of the text and a block counter, so no
model is needed. `encoding_format: base64` is the base64 of the little-endian 32-bit floats.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct

from pydantic import BaseModel, ConfigDict, Field

from inferq.tools.simbackend.protocol import count_tokens

DEFAULT_DIMENSIONS = 1_536
MAX_DIMENSIONS = 4_096


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    model: str = Field(min_length=1)
    input: str | list[str] = Field(min_length=1)
    dimensions: int | None = Field(default=None, ge=1, le=MAX_DIMENSIONS)
    encoding_format: str = "float"

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)

    def prompt_tokens(self) -> int:
        return sum(count_tokens(text) for text in self.texts())


def vector(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The unit vector of `text`, `dimensions` long (a prefix of the full one, rescaled)."""
    values: list[float] = []
    block = 0
    seed = text.encode("utf-8", "surrogatepass")
    while len(values) < dimensions:
        digest = hashlib.sha256(seed + block.to_bytes(4, "little")).digest()
        # 16 values of [-1, 1) from each digest's 16-bit words.
        values += [int.from_bytes(digest[i : i + 2], "little") / 32_768 - 1 for i in range(0, 32, 2)]
        block += 1
    values = values[:dimensions]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    # As 32-bit floats, what a real model answers.
    return [struct.unpack("<f", struct.pack("<f", v / norm))[0] for v in values]


def embedding_response(request: EmbeddingRequest) -> dict[str, object]:
    """OpenAI's ``CreateEmbeddingResponse`` for `request`."""
    dimensions = request.dimensions or DEFAULT_DIMENSIONS
    data = []
    for index, text in enumerate(request.texts()):
        values = vector(text, dimensions)
        encoded: list[float] | str = values
        if request.encoding_format == "base64":
            encoded = base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = request.prompt_tokens()
    return {
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
