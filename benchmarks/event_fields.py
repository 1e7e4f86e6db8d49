"""What each part of the claim event costs the server: the shipped ``claim.lua`` with its event
as shipped, and benchmark-only variants of it, each as the server's claims/s against the same
script recording no event (``ARGV[4] = '0'``), measured in the same round.

The variants are built from the shipped script's own source (its XADD's field/value pairs are
read out of it), so they follow the event format as it changes:

* ``no <field>``: the XADD without that field;
* ``type only``: an XADD of the one field ``type`` (what any event costs: the call, the entry);
* ``packed``: every value in one field, joined by spaces (one field instead of N);
* ``short names``: every field name cut to its first letter;
* ``no TIME (and no event)``: the no-event script with ``now`` a constant instead of the TIME
  call, against the no-event script (what the clock read costs; a claim needs it for its
  deadline anyway).

``redis-benchmark`` sends the EVALSHA at the server's ceiling (32 connections x 32 pipelined) on
a prefilled queue, as the queue section's ceiling rows do. Every round runs every variant and the
baseline, in an order rotated each round (the machine is shared and noisy); medians of the
per-round ratios. Runnable alone: ``python -m benchmarks.event_fields [claims] [rounds]``.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from benchmarks.common import (
    Row,
    median,
    redis_benchmark,
    redis_benchmark_missing,
    valkey_server,
)
from benchmarks.queue_path import CEILING_CLIENTS, CEILING_PIPELINE, LEASE_MS
from chaos.protocol.client import QueueKeys, connect, load_script_source

BASELINE = "no event"
# The claim's XADD, up to its closing parenthesis: the stream key, '*', then field/value pairs.
_XADD = re.compile(r"redis\.call\('XADD', KEYS\[3\], '\*', (?P<pairs>[^)]*)\)")
_EVENT_BLOCK = re.compile(r"if ARGV\[4\] ~= '0' then\n.*?\nend\n", re.DOTALL)
_TIME = re.compile(r"local t = redis\.call\('TIME'\)\nlocal now = [^\n]*\n")


def event_pairs(source: str) -> list[tuple[str, str]]:
    """The (field name, Lua value expression) pairs of a claim script's XADD."""
    match = _XADD.search(source)
    if match is None:
        raise ValueError("claim.lua: no XADD of the claim event found")
    parts = [part.strip() for part in match.group("pairs").split(",")]
    return [(name.strip("'"), value) for name, value in zip(parts[::2], parts[1::2], strict=True)]


def _with_xadd(source: str, pairs: list[tuple[str, str]]) -> str:
    args = ", ".join(f"'{name}', {value}" for name, value in pairs)
    return _XADD.sub(lambda _: f"redis.call('XADD', KEYS[3], '*', {args})", source, count=1)


def variants(source: str) -> dict[str, tuple[str, bool]]:
    """Name -> (script source, whether it records): the baseline, the shipped event and the
    benchmark-only variants of it."""
    pairs = event_pairs(source)
    packed = " .. ' ' .. ".join(value for _, value in pairs)
    without_time = _TIME.sub("local now = 1700000000000\n", source, count=1)
    if without_time == source:
        raise ValueError("claim.lua: no TIME call found")
    built: dict[str, tuple[str, bool]] = {BASELINE: (source, False), "as shipped": (source, True)}
    for index, (name, _) in enumerate(pairs):
        built[f"no {name}"] = (_with_xadd(source, pairs[:index] + pairs[index + 1:]), True)
    built["type only"] = (_with_xadd(source, pairs[:1]), True)
    built["packed"] = (_XADD.sub(lambda _: f"redis.call('XADD', KEYS[3], '*', 'e', {packed})",
                                 source, count=1), True)
    built["short names"] = (_with_xadd(source, [(name[0], value) for name, value in pairs]), True)
    built["no TIME (and no event)"] = (without_time, False)
    # A candidate, not shipped: no TIME call; the XADD goes first and its stream id's ms are the
    # clock, so ts and deadline (= id ms + lease_ms) need not be fields at all.
    clock_pairs = [(name, value) for name, value in pairs if name not in ("ts", "deadline")]
    stamp = ", ".join(f"'{name}', {value}" for name, value in clock_pairs)
    no_event = _EVENT_BLOCK.sub("", source, count=1)
    from_id = _TIME.sub(
        lambda _: f"local seq = redis.call('XADD', KEYS[3], '*', {stamp})\n"
        "local now = tonumber(string.sub(seq, 1, string.find(seq, '-', 1, true) - 1))\n",
        no_event, count=1)
    if no_event == source or from_id == no_event:
        raise ValueError("claim.lua: its event block or TIME call is not where expected")
    built["clock from the XADD's id, no ts/deadline"] = (from_id, True)
    return built


def _command(sha: str, keys: QueueKeys, record: bool) -> list[str]:
    return ["EVALSHA", sha, "3", keys.pending, keys.active, keys.events, keys.job_prefix,
            str(LEASE_MS), "bench", *([] if record else ["0"])]


# Setup, not measured: ``jobs`` pending jobs as enqueue.lua leaves them, in one server-side call
# (a pipelined fill would cost this benchmark far more time than its measurements).
_FILL = """
for i = 1, tonumber(ARGV[2]) do
  local id = 'j' .. i
  redis.call('HSET', ARGV[1] .. id, 'payload', '', 'state', 'pending', 'attempts', 0)
  redis.call('ZADD', KEYS[1], i, id)
end
"""


# One call claims every pending job with a variant's own source (its KEYS and ARGV unchanged).
_LOOP = """
local function claim()
{source}
end
local claimed = 0
while claim() do
  claimed = claimed + 1
end
return claimed
"""


def _server_cpu_s(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure(claims: int, rounds: int) -> dict[str, Any]:
    """Each round measures every variant right beside its own baseline run (the pair's order
    alternating round by round), so a ratio compares two runs seconds apart, never minutes."""
    if missing := redis_benchmark_missing():
        return {"skipped": missing}
    scripts = variants(load_script_source("claim"))
    names = [name for name in scripts if name != BASELINE]
    baseline_rates: list[float] = []
    ratios: dict[str, list[float]] = {name: [] for name in names}  # claims/s, per pair
    cpu_ratios: dict[str, list[float]] = {name: [] for name in names}  # server CPU, per pair
    cpu_us: dict[str, list[float]] = {name: [] for name in scripts}  # server CPU per claim
    # the same variants' CPU per claim when one script call claims the whole queue in a loop
    # (no client, no network, no event loop): the script's own work, far less noisy
    loop_us: dict[str, list[float]] = {BASELINE: []}
    costs: dict[str, list[float]] = {name: [] for name in names}  # loop CPU over the pair's base
    stream_bytes: dict[str, float] = {}  # the events stream's memory per claim (exact)
    with valkey_server("fields") as server:
        admin = connect(server.url, server.password)
        shas = {name: str(admin.script_load(source)) for name, (source, _) in scripts.items()}
        loops = {name: str(admin.script_load(_LOOP.format(source=source)))
                 for name, (source, _) in scripts.items()}

        def run(name: str) -> tuple[float, float, float]:
            """claims/s and the server's CPU us per claim of one redis-benchmark run, and
            the server's CPU us per claim of one looping call."""
            admin.flushdb()  # the scripts stay loaded
            keys = QueueKeys("bench:", "fields")
            admin.eval(_FILL, 1, keys.pending, keys.job_prefix, claims)
            cpu_before = _server_cpu_s(admin)
            rate = redis_benchmark(server, _command(shas[name], keys, scripts[name][1]),
                                   claims, CEILING_CLIENTS, CEILING_PIPELINE)
            cpu = (_server_cpu_s(admin) - cpu_before) / claims * 1e6
            stream_bytes[name] = int(admin.memory_usage(keys.events, samples=0) or 0) / claims
            admin.flushdb()
            admin.eval(_FILL, 1, keys.pending, keys.job_prefix, claims)
            cpu_before = _server_cpu_s(admin)
            looped = admin.evalsha(loops[name], 3, *_command(shas[name], keys,
                                                                 scripts[name][1])[3:])
            if looped != claims:
                raise RuntimeError(f"{name}: the loop claimed {looped} of {claims} jobs")
            return rate, cpu, (_server_cpu_s(admin) - cpu_before) / claims * 1e6

        run(BASELINE)  # warms the server up; not counted
        for number in range(rounds):
            shift = number % len(names)  # rotate which variant runs first
            for name in names[shift:] + names[:shift]:
                pair = [BASELINE, name] if number % 2 == 0 else [name, BASELINE]
                measured = dict(zip(pair, (run(pair[0]), run(pair[1])), strict=True))
                (base_rate, base_cpu, base_loop), (rate, cpu, loop) = (measured[BASELINE],
                                                                       measured[name])
                costs[name].append(loop - base_loop)
                loop_us[BASELINE].append(base_loop)
                baseline_rates.append(base_rate)
                ratios[name].append(rate / base_rate)
                cpu_ratios[name].append(base_cpu / cpu)
                cpu_us[name].append(cpu)
                cpu_us[BASELINE].append(base_cpu)
        admin.close()
    base = median(baseline_rates)
    rows = [Row("event fields", f"claims/s, claim event: {name}", base * median(ratios[name]),
                "claims/s", base,
                f"claim.lua recording no event, -c {CEILING_CLIENTS} -P {CEILING_PIPELINE}",
                # the value is the baseline's median times the median of the pairs' ratios,
                # so the printed ratio is that median
                note=f"stream {stream_bytes[name]:.1f} B per claim; "
                     f"in one script: {median(costs[name]):+.2f} us per claim over "
                     f"{median(loop_us[BASELINE]):.2f}; server CPU per claim "
                     f"{median(cpu_us[name]):.1f} us vs {median(cpu_us[BASELINE]):.1f} us, "
                     f"paired ratio {median(cpu_ratios[name]):.3f}; claims/s ratios "
                     f"{min(ratios[name]):.2f}..{max(ratios[name]):.2f}")
            for name in names]
    pairs = event_pairs(scripts["as shipped"][0])
    return {"rows": rows, "raw": {"claims": claims, "rounds": rounds,
                                  "event_fields": [name for name, _ in pairs],
                                  "claims_per_s_ratios": ratios, "server_cpu_ratios": cpu_ratios,
                                  "server_cpu_us_per_claim": cpu_us,
                                  "script_loop_baseline_cpu_us_per_claim": loop_us[BASELINE],
                                  "script_loop_cpu_us_over_baseline": costs,
                                  "stream_bytes_per_claim": stream_bytes,
                                  "baseline_claims_per_s": baseline_rates}}


def main(argv: list[str]) -> None:
    claims = int(argv[0]) if argv else 20_000
    rounds = int(argv[1]) if len(argv) > 1 else 5
    result = measure(claims, rounds)
    if "skipped" in result:
        print(result["skipped"])
        return
    for row in result["rows"]:
        print(f"{row.figure:<45} {row.value:>8,.0f} {row.baseline:>8,.0f} {row.ratio:6.3f}  "
              f"{row.note}")


if __name__ == "__main__":
    main(sys.argv[1:])
