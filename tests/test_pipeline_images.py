"""The inline image downscale stage: real images built with Pillow in memory, no files, no network.

What a client can observe (spec §6): an oversized or heavy data-URL image reaches the upstream
fitted inside the edge cap, as JPEG unless it really is translucent, and only when that made it
smaller; everything else (small JPEGs, http URLs, SVG, broken payloads) arrives byte for byte
as sent, and the stage never fails the request or blocks the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageStat

from gateway.pipeline import images
from gateway.pipeline.images import ImageConfig, downscale_data_url, downscale_images
from gateway.wire.canonical import CanonicalRequest, Message

pytestmark = pytest.mark.timeout(60)

NO_THRESHOLD: dict[str, int] = {"threshold_bytes": 0, "quality": 90}


def noise(size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    """Random pixels: they compress badly, so the encoded file is heavy for its dimensions."""
    return Image.frombytes(mode, size, os.urandom(size[0] * size[1] * len(mode)))


def data_url(image: Image.Image, image_format: str, mime: str | None = None, **options: Any) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format=image_format, **options)
    payload = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f"data:{mime or 'image/' + image_format.lower()};base64,{payload}"


def decoded(url: str) -> tuple[str, bytes]:
    header, _, payload = url.partition(",")
    return header.removeprefix("data:").removesuffix(";base64"), base64.b64decode(payload)


def opened(url: str) -> tuple[str, Image.Image]:
    mime, raw = decoded(url)
    image = Image.open(io.BytesIO(raw))
    image.load()
    return mime, image


def with_alpha(image: Image.Image, alpha: Image.Image) -> Image.Image:
    rgba = image.convert("RGBA")
    rgba.putalpha(alpha)
    return rgba


def test_a_large_opaque_png_becomes_a_jpeg_within_the_edge_cap_keeping_its_aspect() -> None:
    url = data_url(noise((1200, 600)), "PNG")

    result = downscale_data_url(url, max_edge=256, **NO_THRESHOLD)

    mime, image = opened(result)
    assert (mime, image.format, image.size) == ("image/jpeg", "JPEG", (256, 128))
    assert len(result) < len(url)


def test_a_png_with_real_transparency_stays_a_png() -> None:
    alpha = Image.linear_gradient("L").resize((800, 400))
    url = data_url(with_alpha(noise((800, 400)), alpha), "PNG")

    result = downscale_data_url(url, max_edge=200, **NO_THRESHOLD)

    mime, image = opened(result)
    assert (mime, image.format, image.mode, image.size) == ("image/png", "PNG", "RGBA", (200, 100))
    assert image.getchannel("A").getextrema()[0] < 255


def test_a_png_whose_alpha_channel_is_fully_opaque_becomes_a_jpeg() -> None:
    opaque = Image.new("L", (800, 400), 255)
    url = data_url(with_alpha(noise((800, 400)), opaque), "PNG")
    assert opened(url)[1].mode == "RGBA"

    result = downscale_data_url(url, max_edge=200, **NO_THRESHOLD)

    mime, image = opened(result)
    assert (mime, image.mode, image.size) == ("image/jpeg", "RGB", (200, 100))


@pytest.mark.parametrize(("image_format", "mime"), [("JPEG", "image/jpeg"), ("WEBP", "image/webp")])
def test_a_small_jpeg_or_webp_under_the_threshold_is_not_even_decoded(
    monkeypatch: pytest.MonkeyPatch, image_format: str, mime: str
) -> None:
    # Over the edge cap, yet compact and under the threshold: the spec skips it undecoded.
    url = data_url(noise((400, 8)), image_format, mime)
    opens: list[object] = []
    real_open = Image.open

    def spying_open(*args: Any, **kwargs: Any) -> Image.Image:
        opens.append(args)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(Image, "open", spying_open)

    assert downscale_data_url(url, max_edge=64, threshold_bytes=1024 * 1024, quality=90) is url
    assert opens == []
    replaced = downscale_data_url(url, max_edge=64, threshold_bytes=0, quality=90)
    assert len(opens) == 1
    assert opened(replaced)[1].size == (64, 1)


def test_an_image_that_re_encoding_would_make_bigger_is_kept() -> None:
    # A 1-bit noise PNG is tiny for its pixel count; as a JPEG at full size it would balloon.
    url = data_url(noise((512, 512), "L").convert("1"), "PNG")

    assert downscale_data_url(url, max_edge=2048, **NO_THRESHOLD) is url
    assert opened(downscale_data_url(url, max_edge=32, **NO_THRESHOLD))[0] == "image/jpeg"


def test_it_never_enlarges_a_small_image() -> None:
    url = data_url(noise((40, 20)), "PNG")

    result = downscale_data_url(url, max_edge=2048, threshold_bytes=0, quality=30)

    mime, image = opened(result)
    assert (mime, image.size) == ("image/jpeg", (40, 20))


def tinted_noise(size: tuple[int, int], channel: int) -> Image.Image:
    bands = [Image.new("L", size, 0) for _ in range(3)]
    bands[channel] = noise(size, "L")
    return Image.merge("RGB", bands)


def dominant_channel(image: Image.Image) -> int:
    means = ImageStat.Stat(image.convert("RGB")).mean
    return means.index(max(means))


def test_an_animated_gif_keeps_only_its_first_frame() -> None:
    frames = [tinted_noise((300, 300), channel) for channel in (0, 1, 2)]
    url = data_url(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert opened(url)[1].n_frames == 3

    result = downscale_data_url(url, max_edge=100, **NO_THRESHOLD)

    mime, image = opened(result)
    assert (mime, image.size, getattr(image, "n_frames", 1)) == ("image/jpeg", (100, 100), 1)
    assert dominant_channel(image) == 0


def test_a_multi_page_tiff_keeps_only_its_first_page() -> None:
    pages = [tinted_noise((300, 150), channel) for channel in (2, 0)]
    url = data_url(pages[0], "TIFF", save_all=True, append_images=pages[1:])

    result = downscale_data_url(url, max_edge=100, **NO_THRESHOLD)

    mime, image = opened(result)
    assert (mime, image.size) == ("image/jpeg", (100, 50))
    assert dominant_channel(image) == 2


def test_a_rotated_jpeg_is_re_encoded_upright() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to display
    url = data_url(noise((400, 200)), "JPEG", exif=exif.tobytes())

    result = downscale_data_url(url, max_edge=100, **NO_THRESHOLD)

    assert opened(result)[1].size == (50, 100)


def test_only_raster_image_mimes_are_touched() -> None:
    png = data_url(noise((300, 300)), "PNG")
    payload = png.partition(",")[2]

    assert opened(downscale_data_url(png, max_edge=64, **NO_THRESHOLD))[0] == "image/jpeg"
    for mime in ("text/plain", "application/octet-stream", "image/svg+xml"):
        relabelled = f"data:{mime};base64,{payload}"
        assert downscale_data_url(relabelled, max_edge=64, **NO_THRESHOLD) is relabelled


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
UNTOUCHABLE = {
    "corrupt base64": "data:image/png;base64,@@not*base64@@",
    "non-image bytes": "data:image/png;base64," + base64.b64encode(b"hello, world\n" * 500).decode(),
    "truncated png": "data:image/png;base64," + base64.b64encode(PNG_SIGNATURE + b"\x00" * 64).decode(),
    "http url": "https://example.com/cat.png",
    "not base64": "data:image/png,rawbytes",
    "empty payload": "data:image/png;base64,",
    "svg": "data:image/svg+xml;base64,"
    + base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" width="4000" height="4000"/>').decode(),
}


@pytest.mark.parametrize("url", UNTOUCHABLE.values(), ids=UNTOUCHABLE.keys())
def test_anything_it_cannot_or_must_not_decode_is_kept_as_sent(url: str) -> None:
    assert downscale_data_url(url, max_edge=16, **NO_THRESHOLD) is url


def test_without_pillow_every_image_passes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    url = data_url(noise((300, 300)), "PNG")
    assert downscale_data_url(url, max_edge=64, **NO_THRESHOLD) != url

    monkeypatch.setattr(images, "Image", None)

    assert downscale_data_url(url, max_edge=64, **NO_THRESHOLD) is url


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    width=st.integers(1, 48),
    height=st.integers(1, 48),
    seed=st.binary(min_size=16, max_size=16),
    translucent=st.booleans(),
    image_format=st.sampled_from(["PNG", "GIF", "WEBP", "TIFF", "BMP", "JPEG"]),
    max_edge=st.integers(1, 64),
    threshold_bytes=st.integers(0, 4096),
    quality=st.integers(1, 100),
)
def test_property_the_result_is_the_original_or_a_smaller_valid_image_within_the_cap(
    width: int,
    height: int,
    seed: bytes,
    translucent: bool,
    image_format: str,
    max_edge: int,
    threshold_bytes: int,
    quality: int,
) -> None:
    pixels = (seed * (width * height * 4 // len(seed) + 1))[: width * height * 4]
    image = Image.frombytes("RGBA", (width, height), pixels)
    if not translucent:
        image.putalpha(255)
    if image_format == "JPEG":
        image = image.convert("RGB")
    url = data_url(image, image_format)

    result = downscale_data_url(url, max_edge=max_edge, threshold_bytes=threshold_bytes, quality=quality)

    if result is url:
        return
    mime, reencoded = opened(result)
    assert mime in {"image/jpeg", "image/png"}
    assert max(reencoded.size) <= max_edge
    assert reencoded.width <= width and reencoded.height <= height
    assert len(result) < len(url)
    assert len(decoded(result)[1]) < len(decoded(url)[1])


def test_config_defaults_and_environment() -> None:
    assert ImageConfig.from_env({}) == ImageConfig(enabled=True, max_edge=2048, threshold_kb=1024, quality=90)
    assert ImageConfig.from_env({}).threshold_bytes == 1024 * 1024
    configured = ImageConfig.from_env(
        {
            "IMAGE_NORMALIZE": "on",
            "IMAGE_NORMALIZE_MAX_DIMENSION": "1568",
            "IMAGE_NORMALIZE_THRESHOLD_KB": "0",
            "IMAGE_NORMALIZE_QUALITY": "75",
        }
    )
    assert configured == ImageConfig(enabled=True, max_edge=1568, threshold_kb=0, quality=75)


@pytest.mark.parametrize("value", ["off", "false", "0", "no", " OFF ", "No"])
def test_config_can_be_switched_off(value: str) -> None:
    assert ImageConfig.from_env({"IMAGE_NORMALIZE": value}).enabled is False


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"IMAGE_NORMALIZE_MAX_DIMENSION": "15"}, {"max_edge": 2048}),
        ({"IMAGE_NORMALIZE_MAX_DIMENSION": "16"}, {"max_edge": 16}),
        ({"IMAGE_NORMALIZE_MAX_DIMENSION": "big"}, {"max_edge": 2048}),
        ({"IMAGE_NORMALIZE_MAX_DIMENSION": "1000.7"}, {"max_edge": 1000}),
        ({"IMAGE_NORMALIZE_THRESHOLD_KB": "-1"}, {"threshold_kb": 1024}),
        ({"IMAGE_NORMALIZE_THRESHOLD_KB": "nan"}, {"threshold_kb": 1024}),
        ({"IMAGE_NORMALIZE_THRESHOLD_KB": ""}, {"threshold_kb": 1024}),
        ({"IMAGE_NORMALIZE_QUALITY": "500"}, {"quality": 100}),
        ({"IMAGE_NORMALIZE_QUALITY": "0"}, {"quality": 1}),
        ({"IMAGE_NORMALIZE_QUALITY": "ninety"}, {"quality": 90}),
        ({"IMAGE_NORMALIZE": "yes please"}, {"enabled": True}),
    ],
)
def test_config_reads_invalid_values_as_defaults_and_clamps_quality(
    environ: dict[str, str], expected: dict[str, object]
) -> None:
    config = ImageConfig.from_env(environ)
    assert {name: getattr(config, name) for name in expected} == expected


STAGE_CONFIG = ImageConfig(enabled=True, max_edge=64, threshold_kb=0, quality=80)


def image_part(url: str, form: str = "object") -> dict[str, Any]:
    if form == "string":
        return {"type": "image_url", "image_url": url}
    if form == "image":
        return {"type": "image", "image_url": {"url": url}}
    return {"type": "image_url", "image_url": {"url": url, "detail": "high"}}


def heavy_png() -> str:
    return data_url(noise((256, 128)), "PNG")


def small_jpeg() -> str:
    return data_url(noise((32, 32)), "JPEG", quality=50)


def vision_request(*parts: dict[str, Any]) -> CanonicalRequest:
    return CanonicalRequest(
        model="auto",
        messages=[
            Message(role="system", content="Describe what you see."),
            Message(role="user", content=[{"type": "text", "text": "What is this?"}, *parts]),
            Message(role="assistant", content="A picture."),
        ],
    )


def url_of(part: dict[str, Any]) -> str:
    source = part["image_url"]
    return source if isinstance(source, str) else source["url"]


async def test_the_stage_replaces_only_qualifying_image_parts() -> None:
    png, jpeg = heavy_png(), small_jpeg()
    request = vision_request(
        image_part(png),
        image_part(png, "string"),
        image_part(png, "image"),
        image_part("https://example.com/cat.png"),
        image_part(jpeg),
    )
    config = ImageConfig(enabled=True, max_edge=64, threshold_kb=1024, quality=80)

    result = await downscale_images(request, config)

    parts = result.messages[1].content
    assert parts[0] == {"type": "text", "text": "What is this?"}
    for part, form in zip(parts[1:4], ("object", "string", "image"), strict=True):
        mime, image = opened(url_of(part))
        assert (mime, image.size) == ("image/jpeg", (64, 32))
        assert part == image_part(url_of(part), form)
    assert parts[4] == image_part("https://example.com/cat.png")
    assert parts[5] == image_part(jpeg)
    assert result.messages[0] is request.messages[0]
    assert result.messages[2] is request.messages[2]
    assert result.model_dump(exclude={"messages"}) == request.model_dump(exclude={"messages"})


async def test_the_stage_never_mutates_its_input() -> None:
    request = vision_request(image_part(heavy_png()), image_part(heavy_png(), "string"))
    before = request.model_dump()

    result = await downscale_images(request, STAGE_CONFIG)

    assert result is not request
    assert result.model_dump() != before
    assert request.model_dump() == before


async def test_the_stage_encodes_off_the_event_loop_in_one_thread_hop(monkeypatch: pytest.MonkeyPatch) -> None:
    encoder_threads: list[int] = []
    hops: list[object] = []
    real_core, real_to_thread = images.downscale_data_url, asyncio.to_thread

    def recording_core(url: str, **knobs: int) -> str:
        encoder_threads.append(threading.get_ident())
        return real_core(url, **knobs)

    async def counting_to_thread(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        hops.append(func)
        return await real_to_thread(func, *args, **kwargs)

    monkeypatch.setattr(images, "downscale_data_url", recording_core)
    monkeypatch.setattr(asyncio, "to_thread", counting_to_thread)
    request = vision_request(*(image_part(heavy_png()) for _ in range(3)))

    result = await downscale_images(request, STAGE_CONFIG)

    assert all(opened(url_of(part))[0] == "image/jpeg" for part in result.messages[1].content[1:])
    assert len(hops) == 1
    assert len(encoder_threads) == 3
    assert set(encoder_threads) != {threading.get_ident()}
    assert len(set(encoder_threads)) == 1


@pytest.mark.parametrize(
    "parts",
    [
        (),
        (image_part("https://example.com/cat.png"),),
        (image_part(small_jpeg()), image_part("data:text/plain;base64,aGVsbG8=")),
    ],
    ids=["text only", "http image", "small jpeg and non-image"],
)
async def test_a_request_with_nothing_to_downscale_comes_back_as_the_same_object_without_a_thread_hop(
    monkeypatch: pytest.MonkeyPatch, parts: tuple[dict[str, Any], ...]
) -> None:
    async def no_hop(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no thread hop expected")

    monkeypatch.setattr(asyncio, "to_thread", no_hop)
    request = vision_request(*parts)
    config = ImageConfig(enabled=True, max_edge=64, threshold_kb=1024, quality=80)

    assert await downscale_images(request, config) is request


async def test_a_switched_off_stage_leaves_the_request_alone() -> None:
    request = vision_request(image_part(heavy_png()))

    assert await downscale_images(request, STAGE_CONFIG) is not request
    assert await downscale_images(request, ImageConfig(enabled=False, max_edge=64, threshold_kb=0)) is request


async def test_a_request_whose_images_cannot_shrink_comes_back_as_the_same_object() -> None:
    request = vision_request(image_part("data:image/png;base64,@@corrupt@@"))

    assert await downscale_images(request, STAGE_CONFIG) is request
