"""A RunResult as the run queue keeps it (JSON text) reads back equal."""

from __future__ import annotations

import satsuma
from satsuma.cluster._results import decode_result, encode_result


def test_a_run_result_survives_the_queue_whole() -> None:
    result = satsuma.RunResult(
        run_id="run_1",
        output="done",
        status="awaiting_approval",
        messages=(
            satsuma.Message.user("pay Bob"),
            satsuma.Message(
                role="assistant",
                content=[{"type": "tool_use", "id": "t1", "name": "pay", "input": {"eur": 10}}],
            ),
        ),
        usage=satsuma.Usage(input_tokens=3, output_tokens=4, cache_read_input_tokens=5),
        iterations=2,
        error=None,
        pending=(satsuma.PendingCall(id="t1", tool_name="pay", input={"eur": 10}, reason="money"),),
    )
    assert decode_result(encode_result(result)) == result
