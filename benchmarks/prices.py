"""Cost accounting's CPU per model call (issue 33, item 8: at most 20 µs a call).

What satsuma adds to each model call to know its cost: pricing the call's usage
(``satsuma.models._prices.priced``: the model's family from its name, a look-up among the
overrides and the table, the cost, a new ``Usage``) and adding it to the run's sum
(``Usage.__add__`` with its cost). Measured in CPU time (``time.process_time``) over many
calls, for a dated id, an alias, a Bedrock id and a model without prices, the median of
a few repetitions; the row's verdict compares it with the 20 µs bar.

Figures are printed, never asserted: the exit status is 0 whatever they are.

    python benchmarks/prices.py [--quick] [--calls N] [--repeat R]

``--quick`` uses tiny sizes so that a test can exercise the harness in a moment.
"""

from __future__ import annotations

import argparse
import time

from _harness import header, median, spread, table

import satsuma
from satsuma.models._prices import priced

BAR_US = 20.0
# (row name, the model asked for, the model that answered)
CASES = [
    ("dated id", "claude-haiku-4-5", "claude-haiku-4-5-20251001"),
    ("alias", "claude-sonnet-5-5", "claude-sonnet-5-5"),
    ("bedrock id", "us.anthropic.claude-haiku-4-5-20251001-v1:0", ""),
    ("no prices", "openai:my-llama", "my-llama"),
]


def _per_call_us(asked: str, answered: str, calls: int) -> float:
    """CPU µs per call of pricing one call's usage and adding it to a run's sum."""
    usage = satsuma.Usage(
        input_tokens=1200,
        output_tokens=300,
        cache_creation_input_tokens=800,
        cache_read_input_tokens=24_000,
    )
    total = satsuma.Usage()
    start = time.process_time()
    for _ in range(calls):
        total = total + priced(usage, asked, answered)
    elapsed = time.process_time() - start
    assert total.input_tokens == 1200 * calls  # the loop did its work
    return elapsed / calls * 1e6


def _baseline_us(calls: int) -> float:
    """The same loop without pricing: the sum alone (its cost summed too)."""
    usage = satsuma.Usage(input_tokens=1200, output_tokens=300)
    total = satsuma.Usage()
    start = time.process_time()
    for _ in range(calls):
        total = total + usage
    return (time.process_time() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    calls, repeat = (1000, 2) if args.quick else (args.calls, args.repeat)
    lines = header("cost accounting: CPU per model call")
    lines.append(f"{calls} calls x {repeat} repetitions; bar: {BAR_US:.0f} µs a call")
    rows = []
    base = [_baseline_us(calls) for _ in range(repeat)]
    rows.append(["sum only", f"{median(base):.2f}", spread(base, digits=2), "-"])
    for name, asked, answered in CASES:
        samples = [_per_call_us(asked, answered, calls) for _ in range(repeat)]
        figure = median(samples)
        verdict = "target met" if figure <= BAR_US else "target MISSED"
        rows.append([name, f"{figure:.2f}", spread(samples, digits=2), verdict])
    lines += table(["case", "µs/call", "spread", "vs 20 µs"], rows)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
