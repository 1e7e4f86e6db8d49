"""python -m benchmarks.cpu_hogs [--hogs N] -- COMMAND ...: run COMMAND on a busy machine.

N processes (default 2) spin on the CPU for as long as COMMAND runs, so a claim such as "selftest
catches every variant every time" is tested where it matters: on a loaded machine, not an idle
one. The 1-minute load average is sampled while it runs and printed at the end (min / median /
max). The hogs die with this process (SIGKILL from the kernel if it is killed), and are stopped
by their pids when COMMAND ends; the exit code is COMMAND's.

    python -m benchmarks.cpu_hogs --hogs 2 -- echomq-chaos selftest --repeat 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading

SAMPLE_S = 5.0
# A hog: dies with its parent (this process), then spins.
HOG = ("from chaos.lifeline import die_with_parent; die_with_parent({parent})\n"
       "while True:\n    pass\n")


def start_hogs(count: int) -> list[subprocess.Popen[bytes]]:
    code = HOG.format(parent=os.getpid())
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


def stop_hogs(hogs: list[subprocess.Popen[bytes]]) -> None:
    for hog in hogs:
        hog.kill()
    for hog in hogs:
        hog.wait()


def sample_load(samples: list[float], stop: threading.Event) -> None:
    while not stop.wait(SAMPLE_S):
        samples.append(os.getloadavg()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_hogs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hogs", type=int, default=2, help="CPU-burning processes (default 2)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: python -m benchmarks.cpu_hogs --hogs 2 -- COMMAND ...")
    if args.hogs < 0:
        parser.error(f"--hogs {args.hogs}: must be 0 or more")
    samples: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_load, args=(samples, stop), daemon=True)
    hogs = start_hogs(args.hogs)
    try:
        sampler.start()
        code = subprocess.call(command)
    finally:
        stop.set()
        stop_hogs(hogs)
    if samples:
        print(f"cpu_hogs: {args.hogs} hog(s); 1-minute load average over {len(samples)} "
              f"samples: min {min(samples):.2f}, median {statistics.median(samples):.2f}, "
              f"max {max(samples):.2f}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
