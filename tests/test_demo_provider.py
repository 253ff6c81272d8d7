"""The offline demo provider streams a deterministic answer through the adapter contract."""

from __future__ import annotations

from gateway.providers.base import UpstreamTarget, adapter_class
from gateway.snapshot import ProviderInfo
from gateway.wire.canonical import CanonicalRequest, Finish, Message, TextDelta, Usage
from tests.factories import model_info

PROVIDER = ProviderInfo(name="demo", kind="demo", base_url="", timeout_s=60, keys=())
MODEL = model_info(
    public_id="demo", provider="demo", upstream_id="demo", display_name="Demo", context_window=8192,
    max_output_tokens=1024, tools=False,
)  # fmt: skip
TARGET = UpstreamTarget(provider=PROVIDER, model=MODEL, key=None)


def request(text: str, max_tokens: int | None = None) -> CanonicalRequest:
    return CanonicalRequest(model="demo", messages=[Message(role="user", content=text)], max_tokens=max_tokens)


async def collect(req: CanonicalRequest) -> list[object]:
    adapter = adapter_class("demo")(chunk_delay_s=0)
    return [event async for batch in adapter.stream(req, TARGET) for event in batch]


async def test_it_streams_several_text_deltas_then_usage_then_finish():
    events = await collect(request("Say hi"))

    texts = [e for e in events if isinstance(e, TextDelta)]
    assert len(texts) > 5
    assert isinstance(events[-2], Usage)
    assert events[-1] == Finish("stop")
    answer = "".join(t.text for t in texts)
    assert 'You said: "Say hi"' in answer
    assert events[-2].output_tokens == (len(answer) + 3) // 4


async def test_the_same_request_gives_the_same_stream():
    assert await collect(request("same")) == await collect(request("same"))


async def test_max_tokens_cuts_the_answer_with_finish_length():
    events = await collect(request("Say hi", max_tokens=5))

    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert 0 < (len(answer) + 3) // 4 <= 5
    assert events[-1] == Finish("length")
