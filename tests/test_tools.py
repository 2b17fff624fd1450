import time

from grpolab.tools import Tool, ToolBox, calculator, cap_output


def slow(seconds: float) -> dict:
    """Sleep.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return {"slept": seconds}


def broken(x: int) -> dict:
    """Always fails.

    Args:
        x: Anything.
    """
    raise RuntimeError("boom")


def test_schema_comes_from_signature_and_docstring():
    schema = Tool(calculator).schema["function"]
    assert schema["name"] == "calculator"
    assert schema["parameters"]["properties"]["expression"]["type"] == "string"
    assert schema["parameters"]["required"] == ["expression"]


def test_arguments_are_validated_before_execution():
    tool = Tool(broken)
    assert "invalid arguments" in tool.run({"x": "not an int"})["error"]
    assert "invalid arguments" in tool.run({})["error"]
    assert "invalid arguments" in tool.run(["x"])["error"]
    assert tool.run({"x": 1}) == {"error": "RuntimeError: boom"}


def test_timeout_becomes_an_error_response():
    tool = Tool(slow, timeout_s=0.2)
    assert "timed out" in tool.run({"seconds": 1.0})["error"]
    assert tool.run({"seconds": 0.0}) == {"slept": 0.0}


def test_output_is_capped():
    out = cap_output({"result": "x" * 10_000}, limit=100)
    assert "truncated" in out["error"] and len(out["preview"]) == 100
    assert cap_output({"bad": object()})["error"].startswith("tool returned")


def test_unknown_tool_is_a_response():
    box = ToolBox([Tool(calculator)])
    assert "unknown tool" in box.execute("rm", {})["error"]
    assert "unknown tool" in box.execute(None, {})["error"]
