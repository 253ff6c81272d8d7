"""Inline image downscale: the pipeline stage that shrinks base64 data-URL images (spec §6).

It protects the upstream payload limits and our own buffering: agents replay every screenshot
of a conversation on every turn, and every upstream resizes to about 2048 px anyway, so pixels
beyond the edge cap are transport waste. An image whose data URL is over the size threshold
(or not already a compact JPEG/WebP) is decoded, fitted inside a max_edge square without
ever enlarging, and re-encoded: PNG only when its alpha channel really carries transparency,
otherwise JPEG flattened on white. The result replaces the original only when it is smaller.

The stage never fails a request: a corrupt payload, an undecodable format (HEIC, AVIF where the
installed Pillow lacks it), a missing Pillow or any other error keeps the original bytes, and
the provider decides. http(s) URLs are never fetched. SVG is kept untouched: Pillow cannot
rasterise vector images, so the spec's "SVG rasterised at native size" is not offered.

Decoding and encoding are CPU work, so the async stage runs them in one worker thread per
request; a request without a qualifying image returns as the very same object, with no hop.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from gateway.wire.canonical import CanonicalRequest, Message

try:
    from PIL import Image, ImageOps
except ImportError:  # spec §6: without the image library every image passes through
    Image = ImageOps = None

logger = logging.getLogger(__name__)

DEFAULT_MAX_EDGE = 2048
MIN_MAX_EDGE = 16
DEFAULT_THRESHOLD_KB = 1024
DEFAULT_QUALITY = 90
IMAGE_PART_TYPES = frozenset({"image_url", "image"})
# Already-lossy formats under the threshold have nothing to win: they are skipped undecoded.
COMPACT_MIMES = frozenset({"image/jpeg", "image/webp"})
# Vector images Pillow cannot decode: skipped without trying.
VECTOR_MIMES = frozenset({"image/svg+xml"})
DISABLED_VALUES = frozenset({"off", "false", "0", "no"})
WHITE = (255, 255, 255)
# Like Image.thumbnail: decode a large JPEG at a reduced DCT scale no smaller than twice the
# target, then resample, which costs a fraction of a full decode at no visible loss.
DRAFT_GAP = 2


@dataclass(frozen=True, slots=True)
class ImageConfig:
    """The stage's knobs, read once from the environment (spec §6)."""

    enabled: bool = True
    max_edge: int = DEFAULT_MAX_EDGE
    threshold_kb: int = DEFAULT_THRESHOLD_KB
    quality: int = DEFAULT_QUALITY

    @property
    def threshold_bytes(self) -> int:
        return self.threshold_kb * 1024

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ImageConfig:
        """IMAGE_NORMALIZE (`off|false|0|no` disables) and the three IMAGE_NORMALIZE_* numbers;
        a value that is not a number, or is below its minimum, means the default; the quality
        is clamped to 1-100."""
        quality = _env_int(environ, "IMAGE_NORMALIZE_QUALITY", default=DEFAULT_QUALITY)
        return cls(
            enabled=environ.get("IMAGE_NORMALIZE", "").strip().lower() not in DISABLED_VALUES,
            max_edge=_env_int(environ, "IMAGE_NORMALIZE_MAX_DIMENSION", default=DEFAULT_MAX_EDGE, minimum=MIN_MAX_EDGE),
            threshold_kb=_env_int(environ, "IMAGE_NORMALIZE_THRESHOLD_KB", default=DEFAULT_THRESHOLD_KB, minimum=0),
            quality=min(100, max(1, quality)),
        )


def _env_int(environ: Mapping[str, str], name: str, *, default: int, minimum: float = -math.inf) -> int:
    try:
        value = float(environ.get(name, "").strip())
    except ValueError:
        return default
    if not math.isfinite(value) or value < minimum:
        return default
    return math.floor(value)


class DataUrl(NamedTuple):
    mime: str
    payload: str


def parse_image_data_url(url: str) -> DataUrl | None:
    """The MIME type and base64 payload of a raster `data:image/*;base64,` URL, else None."""
    if url[:5].lower() != "data:":
        return None
    header, comma, payload = url[5:].partition(",")
    mime, *params = (token.strip().lower() for token in header.split(";"))
    if not comma or not payload or params[-1:] != ["base64"]:
        return None
    if not mime.startswith("image/") or mime in VECTOR_MIMES:
        return None
    return DataUrl(mime, payload)


def worth_decoding(image: DataUrl, threshold_bytes: int) -> bool:
    """False for a JPEG/WebP whose decoded size (≈ 3/4 of the base64 length) is under the
    threshold: the one case decided without decoding."""
    decoded_size = len(image.payload) * 3 // 4
    return not (decoded_size < threshold_bytes and image.mime in COMPACT_MIMES)


def downscale_data_url(url: str, *, max_edge: int, threshold_bytes: int, quality: int) -> str:
    """The re-encoded data URL when it qualifies and comes out smaller; otherwise `url` itself.

    Never raises: any failure to decode or encode keeps the original.
    """
    image = parse_image_data_url(url)
    if image is None or not worth_decoding(image, threshold_bytes) or Image is None:
        return url
    try:
        original = base64.b64decode(image.payload, validate=True)
        encoded, mime = _reencode(original, max_edge=max_edge, quality=quality)
    except Exception as exc:
        logger.debug("keeping an inline %s image: %s: %s", image.mime, type(exc).__name__, exc)
        return url
    if len(encoded) >= len(original):
        return url
    smaller = f"data:{mime};base64,{base64.b64encode(encoded).decode('ascii')}"
    # The URL is what travels: a barely smaller payload under the longer `image/jpeg` prefix
    # could still make the request bigger.
    return smaller if len(smaller) < len(url) else url


def _reencode(original: bytes, *, max_edge: int, quality: int) -> tuple[bytes, str]:
    with Image.open(io.BytesIO(original)) as source:
        source.draft(None, (max_edge * DRAFT_GAP, max_edge * DRAFT_GAP))
        # exif_transpose copies the current frame, which after open is the first frame of an
        # animated GIF or the first page of a TIFF; the orientation tag would not survive the
        # re-encode, so it is applied to the pixels instead.
        frame = _rgb_or_rgba(ImageOps.exif_transpose(source))
    frame.thumbnail((max_edge, max_edge), Image.Resampling.LANCZOS)
    if _is_translucent(frame):
        return _encode(frame, "PNG"), "image/png"
    return _encode(_flatten_on_white(frame), "JPEG", quality=quality, optimize=True), "image/jpeg"


def _rgb_or_rgba(image: Image.Image) -> Image.Image:
    """RGBA when the image can carry alpha (an alpha band or a transparent palette/colour key),
    else RGB; converting before resizing keeps palette images off nearest-neighbour resampling."""
    if "A" in image.getbands() or "a" in image.getbands() or "transparency" in image.info:
        return image.convert("RGBA")
    return image.convert("RGB")


def _is_translucent(image: Image.Image) -> bool:
    """True when some pixel is not fully opaque: an RGBA screenshot whose alpha is all 255
    would otherwise stay a PNG several times the size of its JPEG."""
    return image.mode == "RGBA" and image.getchannel("A").getextrema()[0] < 255


def _flatten_on_white(image: Image.Image) -> Image.Image:
    if image.mode != "RGBA":
        return image
    canvas = Image.new("RGB", image.size, WHITE)
    canvas.paste(image, mask=image.getchannel("A"))
    return canvas


def _encode(image: Image.Image, image_format: str, **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=image_format, **options)
    return buffer.getvalue()


class _Slot(NamedTuple):
    """Where a qualifying image URL sits: message index, part index, the URL."""

    message: int
    part: int
    url: str


def image_part_url(part: dict[str, Any]) -> str | None:
    """The URL of an `image_url`/`image` part, whether `image_url` is a string or `{url}`."""
    if part.get("type") not in IMAGE_PART_TYPES:
        return None
    source = part.get("image_url")
    if isinstance(source, dict):
        source = source.get("url")
    return source if isinstance(source, str) else None


def _with_url(part: dict[str, Any], url: str) -> dict[str, Any]:
    source = part["image_url"]
    if isinstance(source, dict):
        return {**part, "image_url": {**source, "url": url}}
    return {**part, "image_url": url}


def _qualifying_slots(request: CanonicalRequest, threshold_bytes: int) -> list[_Slot]:
    slots = []
    for m, message in enumerate(request.messages):
        if not isinstance(message.content, list):
            continue
        for p, part in enumerate(message.content):
            url = image_part_url(part)
            if url is None:
                continue
            image = parse_image_data_url(url)
            if image is not None and worth_decoding(image, threshold_bytes):
                slots.append(_Slot(m, p, url))
    return slots


def _downscale_all(urls: list[str], config: ImageConfig) -> list[str]:
    return [
        downscale_data_url(
            url, max_edge=config.max_edge, threshold_bytes=config.threshold_bytes, quality=config.quality
        )
        for url in urls
    ]


def _replace_parts(message: Message, replacements: dict[int, str]) -> Message:
    content = list(message.content or [])
    for p, url in replacements.items():
        content[p] = _with_url(content[p], url)
    return message.model_copy(update={"content": content})


async def downscale_images(request: CanonicalRequest, config: ImageConfig) -> CanonicalRequest:
    """The request with its qualifying inline images re-encoded, as a new object; the input is
    never mutated, and comes back itself when no image changed."""
    if not config.enabled:
        return request
    slots = _qualifying_slots(request, config.threshold_bytes)
    if not slots:
        return request
    results = await asyncio.to_thread(_downscale_all, [slot.url for slot in slots], config)
    changed: dict[int, dict[int, str]] = {}
    for slot, url in zip(slots, results, strict=True):
        if url != slot.url:
            changed.setdefault(slot.message, {})[slot.part] = url
    if not changed:
        return request
    messages = list(request.messages)
    for m, replacements in changed.items():
        messages[m] = _replace_parts(messages[m], replacements)
    return request.model_copy(update={"messages": messages})
