from hypothesis import given, settings
from hypothesis import strategies as st

from grpolab.protocol import parse_call, parse_transcript, render_tool_call, render_tool_response

GOOD = (
    "<thought>look it up</thought>\n"
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n</tool_call>\n'
    '<tool_response>\n{"result": 2}\n</tool_response>\n'
    "The answer is 2."
)


def test_parses_the_protocol():
    p = parse_transcript(GOOD)
    assert p.errors == []
    assert [s.kind for s in p.segments if s.text.strip()] == ["thought", "tool_call", "tool_response", "text"]
    assert p.calls[0].name == "calculator" and p.calls[0].arguments == {"expression": "1+1"}
    assert p.final_answer == "The answer is 2."


def test_unclosed_nested_and_stray_tags_are_errors_not_exceptions():
    p = parse_transcript('<tool_call>{"name": "x"')
    assert "<tool_call> is never closed" in p.errors
    assert p.segments[-1].closed is False
    p = parse_transcript("<thought>a <tool_call> b</thought> done")
    assert any("nested" in e for e in p.errors) and p.final_answer == "done"
    p = parse_transcript("answer </tool_response> tail")
    assert any("stray" in e for e in p.errors)
    assert p.final_answer == "answer </tool_response> tail"


def test_bad_call_json_is_reported():
    assert "not valid JSON" in parse_call("{name: calculator}").error
    assert parse_call("[1, 2]").error == "tool call JSON is not an object"
    assert parse_call('{"arguments": {}}').error == "tool call has no string 'name'"
    assert parse_call('{"name": "c", "arguments": "x"}').error == "tool call 'arguments' is not an object"
    assert parse_call("   ").error == "empty tool call"
    assert parse_call("[" * 100000).error is not None  # deep nesting: RecursionError is caught


def test_no_final_answer_when_transcript_ends_with_a_block():
    assert parse_transcript(render_tool_call("calculator", {"expression": "1"})).final_answer == ""
    text = render_tool_call("c", {}) + render_tool_response({"result": 1})
    assert parse_transcript(text).final_answer == ""


def test_megabyte_of_junk_is_fast_and_bounded():
    junk = "<tool_call>" * 200_000 + "\x00\xff" * 1000
    p = parse_transcript(junk)
    assert len(p.errors) <= 20


def test_non_string_input():
    assert parse_transcript(None).errors  # type: ignore[arg-type]


tag_soup = st.lists(
    st.sampled_from(
        [
            "<thought>",
            "</thought>",
            "<tool_call>",
            "</tool_call>",
            "<tool_response>",
            "</tool_response>",
            "{",
            "}",
            '"name"',
            ":",
            '"arguments"',
            "\x00",
            "é",
            " ",
            "\n",
            "[",
            "1",
        ]
    )
    | st.text(max_size=20),
    max_size=60,
).map("".join)


@given(tag_soup)
@settings(max_examples=400, deadline=None)
def test_parser_never_raises_on_tag_soup(text):
    p = parse_transcript(text)
    assert isinstance(p.final_answer, str)
    # segments cover only the input: no text is invented
    assert sum(len(s.text) for s in p.segments) <= len(text)


@given(st.binary(max_size=2000).map(lambda b: b.decode("utf-8", errors="replace")))
@settings(max_examples=200, deadline=None)
def test_parser_never_raises_on_random_bytes(text):
    parse_transcript(text)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    )
)
@settings(max_examples=200, deadline=None)
def test_round_trip_of_rendered_calls(arguments):
    args = {"x": arguments}
    call = parse_transcript(render_tool_call("tool", args)).calls[0]
    assert call.ok and call.name == "tool" and call.arguments == args
