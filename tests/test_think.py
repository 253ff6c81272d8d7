"""A leading inline <think> block becomes reasoning; everything else streams through untouched."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.stream.think import ThinkSplitter, split_think


def stream(*chunks: str) -> tuple[list[tuple[str, str]], tuple[str, str]]:
    """Per-chunk outputs plus the totals (reasoning, content) including finish()."""
    splitter = ThinkSplitter()
    outputs = [splitter.feed(chunk) for chunk in chunks]
    outputs.append(splitter.finish())
    return outputs, ("".join(r for r, _ in outputs), "".join(c for _, c in outputs))


def test_a_leading_think_block_becomes_reasoning() -> None:
    assert split_think("<think>The user greets me.</think>Hello!") == ("The user greets me.", "Hello!")


def test_whitespace_before_the_tag_and_after_the_close_is_dropped() -> None:
    assert split_think("\n  <think>\nplan\n</think>\n\nAnswer\n") == ("\nplan\n", "Answer\n")


def test_whitespace_after_the_close_is_dropped_across_chunks() -> None:
    assert stream("<think>r</think>", "\n", " \n", "Answer")[1] == ("r", "Answer")


def test_reasoning_and_content_arrive_on_the_same_chunk_when_the_close_does() -> None:
    outputs, _ = stream("<think>a", "b</think>\n\nHi", " there")
    assert outputs == [("a", ""), ("b", "Hi"), ("", " there"), ("", "")]


def test_only_the_first_block_is_extracted() -> None:
    assert split_think("<think>a</think>b<think>c</think>") == ("a", "b<think>c</think>")


def test_a_tag_that_is_not_at_the_start_is_content() -> None:
    assert split_think("Use <think> tags like <think>this</think>") == ("", "Use <think> tags like <think>this</think>")


def test_the_tag_is_exact_and_lowercase() -> None:
    for text in ("<THINK>x</THINK>", "<thinking>x</thinking>", "<think >x</think>"):
        assert split_think(text) == ("", text)


def test_an_opening_tag_split_across_chunks_is_recognised() -> None:
    outputs, totals = stream("  <th", "ink", ">deep", " thought</th", "ink>done")
    assert totals == ("deep thought", "done")
    assert outputs[0] == ("", "")


def test_at_most_seven_characters_of_a_possible_close_are_held() -> None:
    splitter = ThinkSplitter()
    splitter.feed("<think>")
    assert splitter.feed("abc</think") == ("abc", "")
    assert splitter.feed("x") == ("</thinkx", "")
    assert splitter.feed("no tag here <") == ("no tag here ", "")


def test_an_unclosed_block_is_released_as_reasoning_at_the_end() -> None:
    outputs, totals = stream("<think>cut off by max_tokens</th")
    assert outputs[-1] == ("</th", "")
    assert totals == ("cut off by max_tokens</th", "")


def test_a_held_partial_opening_tag_is_released_as_content_at_the_end() -> None:
    assert stream("\n<thi")[1] == ("", "\n<thi")


def test_up_to_512_whitespace_characters_are_held_before_deciding() -> None:
    assert split_think(" " * 512 + "<think>r</think>c") == ("r", "c")
    assert stream(" " * 300, " " * 212, "<think>r</think>c")[1] == ("r", "c")


def test_more_than_512_leading_whitespace_characters_pass_through() -> None:
    text = " " * 513 + "<think>r</think>c"
    assert split_think(text) == ("", text)
    outputs, totals = stream(" " * 513, "<think>r</think>c")
    assert outputs[0] == ("", " " * 513)
    assert totals == ("", text)


def test_a_stream_without_the_tag_is_emitted_as_it_arrives() -> None:
    outputs, _ = stream("Hello", " world", "!")
    assert outputs == [("", "Hello"), ("", " world"), ("", "!"), ("", "")]


def test_empty_chunks_are_harmless() -> None:
    assert stream("", "<think>", "", "r", "</think>", "", "c")[1] == ("r", "c")


# --- properties -----------------------------------------------------------------------------------------------------

_pieces = st.sampled_from(["<think>", "</think>", "<", "</th", "ink>", "think", " ", "\n", "a", "é", "🦀", "x y"])
_text = st.lists(_pieces, max_size=30).map("".join)


def _chunked(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in pairwise(bounds)]


@settings(max_examples=400)
@given(text=_text, data=st.data())
def test_any_chunking_gives_the_same_reasoning_and_content(text: str, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=15))
    assert stream(*_chunked(text, cuts))[1] == split_think(text)


@settings(max_examples=400)
@given(text=_text, data=st.data())
def test_text_without_a_leading_tag_passes_through_byte_identical(text: str, data: st.DataObject) -> None:
    text = "x" + text if text.lstrip().startswith("<think>") else text
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=15))
    assert stream(*_chunked(text, cuts))[1] == ("", text)


@settings(max_examples=200)
@given(
    lead=st.text(" \n\t", max_size=20),
    reasoning=_text.filter(lambda s: "</think>" not in s),
    gap=st.text(" \n", max_size=5),
    content=_text.filter(lambda s: not s[:1].isspace()),
    data=st.data(),
)
def test_a_leading_block_splits_into_its_parts_for_any_chunking(
    lead: str, reasoning: str, gap: str, content: str, data: st.DataObject
) -> None:
    text = f"{lead}<think>{reasoning}</think>{gap}{content}"
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=15))
    assert stream(*_chunked(text, cuts))[1] == (reasoning, content)
