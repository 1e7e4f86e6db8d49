"""echomq-chaos: run, validate and re-check lease-queue chaos scenarios.

Exit codes: 0 pass, 1 an invariant failed, 2 bad input or usage, 3 infrastructure error,
4 unknown (undrained jobs or missing evidence), 5 checker error, 130 aborted (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from chaos import __version__
from chaos.errors import EXIT_ABORTED, EXIT_FAIL, EXIT_INFRA, EXIT_PASS, EXIT_USAGE, InfraError
from chaos.files import write_json_atomic
from chaos.names import HISTORY_SOURCES
from chaos.run.interrupts import InterruptsTearDown
from chaos.runtime import forkserver, valkey

DEFAULT_CERTIFY_SEEDS = 3  # certify --seeds: what a likely (not certain) catch is repeated over
# certify --unexercised-retries: how often a run whose faults stranded no lease (no evidence)
# is run again with another seed
DEFAULT_UNEXERCISED_RETRIES = 2
# capacity --hold-ms: long enough for a backlog growing by the smallest step over the knee to
# show against a sustainable rate's noise (measured: docs/tuning-and-capacity.md)
HOLD_MS = 30_000

if TYPE_CHECKING:
    from chaos.run.result import RunResult
    from chaos.run.storing import RunRecorder
    from chaos.scenario.model import Scenario

# Each command imports what it uses, when it runs: `run` reaches its first claim sooner without
# the checker, the reports and their dependencies, which it needs only at the end.


def usage_errors() -> tuple[type[Exception], ...]:
    """Errors that are the user's input (exit 2). Imported only once one is being raised: an
    ``except`` clause evaluates its tuple only then."""
    from chaos.run.evaluate import SavedRunError
    from chaos.run.rundir import RunDirError
    from chaos.scenario.loading import ScenarioError
    from chaos.store.record import LabelError
    from chaos.store.trend import TrendError

    return ScenarioError, RunDirError, SavedRunError, LabelError, TrendError


def _recording(args: argparse.Namespace) -> RunRecorder | None:
    """The run store of a command that runs scenarios (its ``--store``, else
    $ECHOMQ_CHAOS_STORE; none: nothing stored), listening for every run it finishes."""
    from chaos.run.storing import recorder_for
    from chaos.store.record import parse_labels

    return recorder_for(args.store, parse_labels(args.label), args.command)


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` assignments, with ``--runtime`` as one more (it is the ``runtime`` field)."""
    return [*args.set, *([f"runtime={args.runtime}"] if args.runtime else [])]


def cmd_validate(args: argparse.Namespace) -> int:
    from chaos.run.plan import describe_plan
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(args.scenario, _overrides(args))
    print(describe_plan(scenario))
    print("valid")
    return EXIT_PASS


def cmd_run(args: argparse.Namespace) -> int:
    if args.dry_run:
        return _run(args)
    # The reference workers' fork server, started first: it imports them while this process
    # imports the runner and loads the scenario (docs/running.md, start-up). A run that does
    # not need it (Docker, a foreign SUT) ends it.
    forkserver.prestart()
    try:
        return _run(args)
    finally:
        forkserver.discard_spare()
        valkey.discard_early()


def _run(args: argparse.Namespace) -> int:
    from chaos.scenario.loading import load_scenario

    scenarios = [load_scenario(path, _overrides(args)) for path in args.scenario]
    if args.force:  # an attached queue's refusals too (docs/attach.md)
        scenarios = [scenario.forced() for scenario in scenarios]
    if not any(scenario.runtime == "local" for scenario in scenarios):
        forkserver.discard_spare()
    suite_dir: Path | None = None
    if args.dry_run:
        run_dirs = []
    elif len(scenarios) == 1:
        run_dirs = [_output_dir(args, scenarios[0].name)]
        if scenarios[0].runtime == "local":  # it boots while the runner is imported below
            valkey.launch_early(scenarios[0], run_dirs[0])
    else:  # one directory for the suite, one run directory per scenario inside it
        suite_dir = _output_dir(args, "suite")
        run_dirs = _suite_run_dirs(suite_dir, [scenario.name for scenario in scenarios])
    from chaos.run.plan import describe_plan
    from chaos.run.rundir import prepare_run_dir
    from chaos.run.runner import run_scenario

    if args.dry_run:
        print("\n\n".join(describe_plan(scenario) for scenario in scenarios))
        return EXIT_PASS
    results: list[RunResult] = []
    for index, (scenario, run_dir) in enumerate(zip(scenarios, run_dirs, strict=True)):
        if suite_dir is not None:
            print(f"== [{index + 1}/{len(scenarios)}] {scenario.name} -> {run_dir}",
                  file=sys.stderr, flush=True)
            prepare_run_dir(run_dir, args.force)
        print(describe_plan(scenario), file=sys.stderr)
        with InterruptsTearDown(scenario.name, run_dir):
            results.append(run_scenario(scenario, run_dir, strict=args.strict))
        if args.strict:
            results[-1] = _strict_exercise(results[-1])
        if results[-1].verdict == "aborted":
            break  # Ctrl-C stops the suite, not only the scenario running
    from chaos.report.junit import write_junit
    from chaos.run.suite import suite_junit_runs, suite_table, worst_exit_code

    junit_runs = suite_junit_runs(results, [s.name for s in scenarios], run_dirs)
    if suite_dir is not None:
        write_junit(suite_dir / "junit.xml", junit_runs)
        print(suite_table(results, [s.name for s in scenarios]))
        print(f"suite directory: {suite_dir} (junit.xml covers every run)")
    if args.junit:
        write_junit(Path(args.junit), junit_runs)
    return worst_exit_code([result.exit_code for result in results])


def _strict_exercise(result: RunResult) -> RunResult:
    """``run --strict``: a pass whose faults stranded no lease (report.json ``exercised``
    false) exits 4, as a run that cannot decide; its report keeps the verdict it judged."""
    if result.verdict != "pass" or result.report.get("exercised") is not False:
        return result
    from dataclasses import replace

    from chaos.errors import EXIT_UNKNOWN

    reason = (result.report.get("exercise") or {}).get("reason", "")
    print(f"--strict: {result.report.get('scenario')} passed without exercising recovery "
          f"({reason}): exit {EXIT_UNKNOWN}", file=sys.stderr)
    return replace(result, exit_code=EXIT_UNKNOWN)


def _output_dir(args: argparse.Namespace, name: str) -> Path:
    """``--out`` or ``runs/<utc-time>-<name>/``, made ready (a non-empty one only with
    ``--force``)."""
    from chaos.run.rundir import default_run_dir, prepare_run_dir

    out = Path(args.out) if args.out else default_run_dir(name)
    prepare_run_dir(out, args.force)
    return out


def _suite_run_dirs(suite_dir: Path, names: list[str]) -> list[Path]:
    """``<suite>/<name>``; the same scenario twice gets ``<name>-2``, ..."""
    seen: dict[str, int] = {}
    dirs = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        dirs.append(suite_dir / (name if seen[name] == 1 else f"{name}-{seen[name]}"))
    return dirs


def cmd_check(args: argparse.Namespace) -> int:
    from chaos.report.summary import summary_text
    from chaos.run.offline import recheck

    saved = recheck(Path(args.run_dir))
    if args.json:
        print(json.dumps(saved.report, indent=2))
    else:
        print(summary_text(saved.report))
    if saved.saved_is_stub:
        print(f"the saved report.json is the stub of a run stopped before it was judged "
              f"({(saved.saved or {}).get('error') or 'no verdict'}); `echomq-chaos report "
              f"{args.run_dir}` replaces it with this verdict", file=sys.stderr)
    elif saved.saved is not None:
        differences = saved.differences()
        if differences:
            print(f"note: differs from the saved report.json in {', '.join(differences)} "
                  "(a different checker version?)", file=sys.stderr)
        else:
            print("same verdict as the saved report.json", file=sys.stderr)
    return saved.exit_code


def cmd_report(args: argparse.Namespace) -> int:
    from chaos.report.summary import write_rendered_reports
    from chaos.run.offline import recheck
    from chaos.run.sources import judged_history

    run_dir = Path(args.run_dir)
    saved = recheck(run_dir)
    if saved.saved is None or saved.saved_is_stub:  # a run stopped before it wrote a verdict
        write_json_atomic(run_dir / "report.json", saved.report)
        was = "there was none" if saved.saved is None else "replacing the unjudged stub"
        print(f"wrote {run_dir / 'report.json'} ({was})", file=sys.stderr)
    problems = write_rendered_reports(run_dir, saved.report, saved.verdict,
                                      judged_history(run_dir))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return EXIT_INFRA
    print(f"{run_dir / 'report.html'}\n{run_dir / 'junit.xml'}")
    return saved.exit_code


def cmd_store_import(args: argparse.Namespace) -> int:
    from chaos.run.offline import recheck
    from chaos.run.storing import run_record, store_url
    from chaos.store.database import STORE_ENV, open_store
    from chaos.store.record import parse_labels

    url = store_url(args.store)
    if url is None:
        print(f"error: no store: give --store URL or set {STORE_ENV}", file=sys.stderr)
        return EXIT_USAGE
    labels = parse_labels(args.label)
    checked = [(Path(run_dir), recheck(Path(run_dir))) for run_dir in args.run_dir]
    store = open_store(url)
    try:
        for run_dir, saved in checked:
            run_id = store.add(run_record(run_dir, saved.report, saved.verdict,
                                          saved.exit_code, "import", labels))
            print(f"{run_dir}: stored as run {run_id} ({saved.word})")
    finally:
        store.close()
    return EXIT_PASS


def cmd_trend(args: argparse.Namespace) -> int:
    from chaos.files import write_text_atomic
    from chaos.run.storing import store_url
    from chaos.store.database import STORE_ENV, StoreError, open_store
    from chaos.store.trend import TrendSettings, parse_compare
    from chaos.tools import trend

    url = store_url(args.store)
    if url is None:
        print(f"error: no store: give --store URL or set {STORE_ENV}", file=sys.stderr)
        return EXIT_USAGE
    given = {name: getattr(args, name) for name in ("baseline", "candidates", "alpha",
                                                     "min_shift_ms", "min_shift_of_bound")}
    settings = TrendSettings(**{name: value for name, value in given.items()
                                if value is not None})  # the defaults are TrendSettings'
    settings.validate()  # exit 2 before the store is opened
    by, compare = parse_compare(args.by, args.compare)
    if "://" not in url and not Path(url).expanduser().exists():  # never make one to read it
        raise StoreError(f"store {url}: no such SQLite file")
    store = open_store(url)
    try:
        result = trend.trend(store, settings, by=by, scenario=args.scenario, compare=compare)
    finally:
        store.close()
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(trend.table(result))
    if args.html:
        write_text_atomic(Path(args.html), trend.render_html(result))
    if args.junit:
        write_text_atomic(Path(args.junit), trend.junit_document(result))
    return result.exit_code


def cmd_selftest(args: argparse.Namespace) -> int:
    from chaos.scenario.loading import ScenarioError
    from chaos.tools import selftest

    if args.repeat < 1:
        raise ScenarioError(f"--repeat {args.repeat}: must be at least 1")
    mutants = selftest.load_mutants(
        selftest.find_mutants(Path(args.scenarios or selftest.DEFAULT_MUTANTS)), args.only)
    out = _output_dir(args, "selftest")
    print(f"selftest: {len(mutants)} mutants x {args.repeat} seed(s), each also run with the "
          f"sound protocol{'; history ' + args.history if args.history else ''}; run "
          f"directories under {out}", file=sys.stderr)
    with InterruptsTearDown("selftest", out):
        result = selftest.selftest(mutants, out, args.repeat, history=args.history)
    summary = result.as_dict()
    write_json_atomic(out / "selftest.json", summary)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(selftest.table(result))
    return result.exit_code


def cmd_certify(args: argparse.Namespace) -> int:
    from chaos.tools import certify, certify_table

    if args.unexercised_retries < 0:
        from chaos.scenario.loading import ScenarioError

        raise ScenarioError(f"--unexercised-retries {args.unexercised_retries}: must be 0 or "
                            "more")
    target = (certify.Target.from_file(Path(args.scenario), args.protocol) if args.scenario
              else certify.Target.reference(args.protocol)).with_overrides(args.set)
    planned = certify.plan_battery(target, args.seeds, args.only, args.set)
    out = _output_dir(args, "certify")
    runs = sum(len(run.seeds) for run in planned)
    print(f"certify: {target.label}; {runs} runs of the battery (seeded scenarios x "
          f"{args.seeds}); a run whose faults strand no lease is run again with another seed, "
          f"up to {args.unexercised_retries} time{'s' if args.unexercised_retries != 1 else ''}"
          f"; run directories under {out}", file=sys.stderr)
    with InterruptsTearDown("certify", out):
        result = certify.certify(planned, target, args.seeds, out, args.unexercised_retries)
    summary = result.as_dict()
    write_json_atomic(out / "certify.json", summary)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(certify_table.table(result))
        print(f"certify directory: {out} (certify.json)", file=sys.stderr)
    return result.exit_code


def cmd_clean(args: argparse.Namespace) -> int:
    """Three parts: what attach runs left applied to a deployment (their attach.json), the
    processes (the pid files under --runs), then labelled containers."""
    from chaos.run.offline import write_missing_report
    from chaos.runtime.attach import undo_left_behind
    from chaos.runtime.pids import clean_processes

    root = Path(args.runs)
    if root.exists() and not root.is_dir():
        print(f"{root}: not a directory", file=sys.stderr)
        return EXIT_USAGE
    if root.exists():
        done = undo_left_behind(root) + clean_processes(root, write_report=write_missing_report)
        for line in done:
            print(line)
        if not done:
            print(f"{root}: nothing left behind")
    else:
        print(f"{root}: no such directory; no processes to clean")
    if not args.no_containers:
        from chaos.runtime.engine import clean_containers  # the Docker SDK only when it is used

        for line in clean_containers(everything=args.all):
            print(line)
    return EXIT_PASS


def cmd_sweep(args: argparse.Namespace) -> int:
    from chaos.scenario.loading import ScenarioError, load_scenario
    from chaos.tools import sweep  # matplotlib is only needed here

    if args.repeat < 1:
        raise ScenarioError(f"--repeat {args.repeat}: must be at least 1")
    leases = [v for v in sweep.parse_values("--lease-ms", args.lease_ms) if v]
    reaps = [v for v in sweep.parse_values("--reap-ms", args.reap_ms) if v]
    heartbeats: list[int | None] = (
        sweep.parse_values("--heartbeat-ms", args.heartbeat_ms, allow_off=True)
        if args.heartbeat_ms else [None])
    plans = sweep.plan_cells(args.scenario, leases, reaps, heartbeats, args.set)
    _not_attached(plans[0].scenario, "sweep", "each cell runs other lease and reap settings, "
                  "which a deployed queue does not take from the run")
    if args.target_recovery_ms is not None and args.target_recovery_ms <= 0:
        raise ScenarioError(f"--target-recovery-ms {args.target_recovery_ms}: must be > 0")
    if args.target_recovery_ms is None:  # keep at least the recovery the scenario promises
        target, source = sweep.default_target(load_scenario(args.scenario, args.set))
    else:
        target, source = args.target_recovery_ms, "--target-recovery-ms"
    name = plans[0].scenario.name
    out = _output_dir(args, f"sweep-{name}")
    planned_s = sum(p.scenario.phases.warmup_ms + p.scenario.phases.chaos_ms
                    + p.scenario.phases.heal_ms for p in plans) * args.repeat / 1000
    print(f"sweep {name}: {len(plans)} cells x {args.repeat} run(s), one after another "
          f"(phases alone {planned_s:.0f} s); run directories under {out}/cells",
          file=sys.stderr)
    # The first Ctrl-C ends the current run in order and stops the sweep (the cells done are
    # reported); a second one kills every child at once.
    with InterruptsTearDown(f"sweep-{name}", out):
        result = sweep.run_sweep(plans, out, args.repeat, target, source)
    sweep.write_outputs(result, out)
    print(sweep.table(result))
    print(f"sweep directory: {out} (sweep.json, sweep.html)")
    return result.exit_code


def _not_attached(scenario: Scenario, command: str, why: str) -> None:
    from chaos.scenario.loading import ScenarioError

    if scenario.attach is not None:
        raise ScenarioError(f"{command}: scenario {scenario.name} has runtime = 'attach'; "
                            f"{command} is not built for a deployed queue: {why}")


def cmd_capacity(args: argparse.Namespace) -> int:
    from chaos.scenario.loading import ScenarioError, load_scenario
    from chaos.tools import capacity

    scenario = load_scenario(args.scenario, args.set)
    _not_attached(scenario, "capacity", "it restarts and faults workers between its steps as "
                  "a run that started them does")
    if args.workers is not None:
        return _capacity_plan(args, scenario)
    for option in ("target_rate", "lose", "concurrency"):
        if getattr(args, option) is not None:
            raise ScenarioError(f"--{option.replace('_', '-')}: only with --workers (a plan "
                                "over pool sizes)")
    start = args.start_rate if args.start_rate is not None else scenario.load.rate / 2
    search = capacity.CapacitySearch(
        start_rate=start, step_rate=args.step_rate if args.step_rate is not None else start,
        max_steps=args.steps, step_ms=args.step_ms, p99_ms=args.p99_ms,
        backlog_growth=args.backlog_growth, fault=args.fault, refine=args.refine,
        hold_ms=args.hold_ms)
    search.validate(scenario)  # exit 2 before anything starts
    out = _output_dir(args, f"capacity-{scenario.name}")
    rates = search.rates()
    print(f"capacity {scenario.name}: {scenario.topology.workers} workers x "
          f"{scenario.topology.concurrency} slots; enqueue rate {rates[0]:g} .. {rates[-1]:g} "
          f"jobs/s in steps of {search.step_rate:g}, {search.step_ms} ms each, the knee held "
          f"{search.hold_ms} ms; output in {out}",
          file=sys.stderr)
    with InterruptsTearDown(f"capacity-{scenario.name}", out):
        result = capacity.run_capacity(scenario, search, out)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(capacity.table(result))
    print(f"capacity directory: {out} (capacity.json)", file=sys.stderr)
    return result.exit_code


def _capacity_plan(args: argparse.Namespace, scenario: Scenario) -> int:
    """``capacity --workers``: every size's scenario and search validated, the store reached,
    before anything starts."""
    from chaos.scenario.loading import ScenarioError, load_scenario
    from chaos.tools import capacity, capacity_plan

    sizes = capacity_plan.parse_workers(args.workers)
    if args.concurrency is not None and not 1 <= args.concurrency <= 1024:
        raise ScenarioError(f"--concurrency {args.concurrency}: must be 1..1024")
    concurrency = args.concurrency or scenario.topology.concurrency
    # how to hold one pool of the plan at the target rate (the recommendation's "hold it")
    confirm = shlex.join(["echomq-chaos", "capacity", args.scenario,
                          *(part for value in args.set for part in ("--set", value)),
                          "--set", f"topology.concurrency={concurrency}",
                          "--p99-ms", f"{args.p99_ms:g}"])
    spec = capacity_plan.PlanSpec(sizes, args.target_rate, args.lose or 0, confirm)
    spec.validate()
    slots = scenario.topology.workers * scenario.topology.concurrency
    start = args.start_rate if args.start_rate is not None else scenario.load.rate / 2 / slots
    search = capacity.CapacitySearch(
        start_rate=start, step_rate=args.step_rate if args.step_rate is not None else start,
        max_steps=args.steps, step_ms=args.step_ms, p99_ms=args.p99_ms,
        backlog_growth=args.backlog_growth, fault=args.fault, refine=args.refine,
        hold_ms=args.hold_ms)
    scenarios = {size: load_scenario(args.scenario, [*args.set, f"topology.workers={size}",
                                                     f"topology.concurrency={concurrency}"])
                 for size in sizes}
    for sized in scenarios.values():
        search.validate(sized)
    capacity_plan.check_store(scenario)
    out = _output_dir(args, f"capacity-{scenario.name}")
    print(f"capacity plan {scenario.name}: pools of {', '.join(map(str, sizes))} worker(s) x "
          f"{concurrency} slots; each searches from {search.start_rate:g} jobs/s per slot in "
          f"steps of {search.step_rate:g} per slot, {search.step_ms} ms each, each knee held "
          f"{search.hold_ms} ms; output in {out}",
          file=sys.stderr)
    with InterruptsTearDown(f"capacity-{scenario.name}", out):
        plan = capacity_plan.run_plan(scenarios, search, spec, out)
    if args.json:
        print(json.dumps(plan.as_dict(), indent=2))
    else:
        print(capacity_plan.plan_table(plan))
    print(f"capacity directory: {out} (capacity.json, capacity.html)", file=sys.stderr)
    return plan.exit_code


def tcp_port(text: str) -> int:
    """``toxiproxy serve --port``: the built-in server's own parser, imported (with asyncio and
    the server) only by that command, not by every start of a run."""
    from chaos.network.server import tcp_port as parse

    return parse(text)


def cmd_toxiproxy_serve(args: argparse.Namespace) -> int:
    from chaos.network.server import serve

    serve(args.host, args.port)
    return EXIT_PASS


def cmd_toxiproxy_proxy(args: argparse.Namespace) -> int:
    from chaos.network.client import NetworkError, populate, wait_for_api

    api_url = args.api.rstrip("/")
    try:
        wait_for_api(api_url, alive=lambda: True, timeout=args.wait)
        populate(api_url, [{"name": args.name, "listen": args.listen,
                            "upstream": args.upstream, "enabled": True}])
    except NetworkError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INFRA
    print(f"proxy {args.name}: {args.listen} -> {args.upstream} on {api_url}")
    return EXIT_PASS


def cmd_images_build(args: argparse.Namespace) -> int:
    from chaos.runtime.images import (
        build_images,  # the Docker SDK only for the commands that use it
    )

    started = time.monotonic()
    steps = build_images(base=args.base, rebuild=args.rebuild, mirror=args.mirror,
                         say=lambda text: print(f"   {text}", file=sys.stderr, flush=True))
    for step in steps:
        print(f"{step.image:40} {step.action:20} {step.seconds:6.1f} s")
    print(f"images ready in {time.monotonic() - started:.1f} s")
    return EXIT_PASS


def cmd_images_status(args: argparse.Namespace) -> int:
    from chaos.runtime.images import image_states

    states = image_states()
    for state in states:
        print(f"{state.role:10} {state.name:40} {'present' if state.present else 'absent':8}"
              f"  {state.note}")
    return EXIT_PASS


def cmd_protocol_export(args: argparse.Namespace) -> int:
    from chaos.tools.protocol_export import ExportError, export

    try:
        written = export(Path(args.directory))
    except ExportError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    for path in written:
        print(path)
    return EXIT_PASS


def cmd_families(args: argparse.Namespace) -> int:
    from chaos.registry import families, origin

    rows = []
    for name, spec in families().items():
        where = origin(name)
        rows.append({"name": name, "summary": spec.summary,
                     "history": "MONITOR, decoded" if spec.dialect else "its own scripts",
                     "bound": spec.bound.formula, "entry_point": where.entry_point,
                     "distribution": where.distribution})
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_PASS
    for row in rows:
        print(f"{row['name']:<10} {row['summary']}\n{'':<10} history: {row['history']}; "
              f"bound: {row['bound']}\n{'':<10} from {row['entry_point']} "
              f"({row['distribution']})")
    return EXIT_PASS


def _store_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--store", metavar="URL",
                         help="record each run in this store: a path (an SQLite file) or "
                              "postgresql://user:password@host:port/db (default: "
                              "$ECHOMQ_CHAOS_STORE; none: nothing stored; docs/store.md)")
    command.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                         help="tag the stored runs, e.g. sut_version=2.6.5 (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="echomq-chaos", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"echomq-chaos {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run", help="run one or more scenarios and check their histories",
        description="Run scenarios in order. Each run directory gets history.jsonl, "
                    "report.json, report.html and junit.xml. With several scenarios, --out is "
                    "the suite directory (one run directory per scenario inside, a combined "
                    "junit.xml, a summary table); the exit code is the worst run's.")
    run.add_argument("scenario", nargs="+", help="scenario file(s) (TOML)")
    run.add_argument("--out", help="run directory (default runs/<utc-time>-<scenario>/); with "
                                   "several scenarios the suite directory "
                                   "(default runs/<utc-time>-suite/)")
    run.add_argument("--junit", metavar="PATH",
                     help="also write the JUnit XML of every run to PATH (for CI)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a field, e.g. --set topology.lease_ms=2000 (repeatable)")
    run.add_argument("--dry-run", action="store_true", help="print the resolved plan and exit")
    run.add_argument("--force", action="store_true",
                     help="reuse a non-empty run directory; with runtime = attach, also attach "
                          "to a queue holding jobs, with consumers the scenario does not name, "
                          "or with a member gone quiet (warned, not refused; docs/attach.md)")
    run.add_argument("--strict", action="store_true",
                     help="fail (exit 3) when the preflight warns about the Valkey server: an "
                          "eviction policy other than noeviction, or no persistence on a server "
                          "given by valkey.url; and exit 4 for a pass whose faults stranded no "
                          "lease (report.json exercised false: recovery was not put to the "
                          "test)")
    run.add_argument("--runtime", choices=["local", "docker", "attach"],
                     help="where the processes run: child processes (local) or containers "
                          "(docker), or a queue already deployed (attach, with an [attach] "
                          "section); overrides the scenario's runtime field")
    _store_options(run)
    run.set_defaults(handler=cmd_run, store_runs=True)

    store = commands.add_parser("store", help="the run store (docs/store.md)")
    store_commands = store.add_subparsers(dest="store_command", required=True)
    store_import = store_commands.add_parser(
        "import", help="add run directories already on disk to the store",
        description="Judge each RUN_DIR as `check` does and store it (exit 2 a run directory "
                    "that cannot be judged, 3 the store unreachable or of a newer schema).")
    store_import.add_argument("run_dir", nargs="+", metavar="RUN_DIR")
    _store_options(store_import)
    store_import.set_defaults(handler=cmd_store_import)

    trend_cmd = commands.add_parser(
        "trend", help="each scenario's figures over the stored runs; flag a regression",
        description="Per scenario (whatever its settings: a --set is compared with the runs "
                    "before it), or the latest value of a label against the one before with "
                    "--by (any two with --compare): its verdict history and "
                    "rate of unknown, each figure over time, and its latest --candidates "
                    "judged runs against the --baseline passing runs before them, on the "
                    "samples behind the recovery figures and the run's pace (a one-sided "
                    "Mann-Whitney U test, and a median shift of at least the threshold). "
                    "Exit 0 no regression, 1 a regression (each named), 2 bad arguments, 3 "
                    "the store unreachable (docs/store.md).")
    trend_cmd.add_argument("--store", metavar="URL",
                           help="the store: a path (an SQLite file) or a postgresql:// URL "
                                "(default: $ECHOMQ_CHAOS_STORE)")
    trend_cmd.add_argument("--by", metavar="KEY",
                           help="per scenario, the latest value of this label (e.g. "
                                "sut_version, git) against the value before it")
    trend_cmd.add_argument("--compare", metavar="KEY=A..B",
                           help="per scenario, the runs labelled KEY=B against those labelled "
                                "KEY=A (e.g. code=v1..v2)")
    trend_cmd.add_argument("--scenario", metavar="NAME", help="only this scenario")
    trend_cmd.add_argument("--baseline", type=int, metavar="N",
                           help="passing runs in the baseline window (default 5)")
    trend_cmd.add_argument("--candidates", type=int, metavar="M",
                           help="the latest judged runs compared with it (default 3)")
    trend_cmd.add_argument("--alpha", type=float,
                           help="the test's significance level (default 0.01)")
    trend_cmd.add_argument("--min-shift-ms", type=float, metavar="MS",
                           help="the median shift an alarm needs at least (default 50)")
    trend_cmd.add_argument("--min-shift-of-bound", type=float, metavar="SHARE",
                           help="... and at least this share of the baseline's recovery bound "
                                "(default 0.05)")
    trend_cmd.add_argument("--json", action="store_true", help="print the trend as JSON")
    trend_cmd.add_argument("--html", metavar="PATH", help="write a page of plots to PATH")
    trend_cmd.add_argument("--junit", metavar="PATH",
                           help="write JUnit XML to PATH: one case per scenario x figure")
    trend_cmd.set_defaults(handler=cmd_trend)

    families_cmd = commands.add_parser(
        "families", help="list the queue families installed (docs/families.md)",
        description="Every queue family the toolkit can judge: its name (a scenario's "
                    "sut.dialect), how its history is recorded, its recovery bound, and the "
                    "entry point (echomq_chaos.families) and distribution it came from.")
    families_cmd.add_argument("--json", action="store_true", help="print them as JSON")
    families_cmd.set_defaults(handler=cmd_families)

    validate = commands.add_parser("validate", help="validate a scenario and print its plan")
    validate.add_argument("scenario", help="scenario file (TOML)")
    validate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                          help="override a field, as for run (repeatable)")
    validate.add_argument("--runtime", choices=["local", "docker", "attach"],
                          help="validate for this runtime, as for run")
    validate.set_defaults(handler=cmd_validate)

    check_cmd = commands.add_parser(
        "check", help="re-check a saved run's history offline (same verdict, same exit code)")
    check_cmd.add_argument("run_dir", help="a run directory (its history.jsonl)")
    check_cmd.add_argument("--json", action="store_true", help="print the report as JSON")
    check_cmd.set_defaults(handler=cmd_check)

    report_cmd = commands.add_parser(
        "report", help="re-render report.html and junit.xml of a saved run (offline)")
    report_cmd.add_argument("run_dir", help="a run directory (its history.jsonl)")
    report_cmd.set_defaults(handler=cmd_report)

    selftest_cmd = commands.add_parser(
        "selftest", help="prove the checker catches every broken protocol variant",
        description="Run every mutant scenario with its broken protocol (must fail with its "
                    "expect_fail invariants) and with the sound protocol (must pass).")
    selftest_cmd.add_argument("--json", action="store_true", help="print the results as JSON")
    selftest_cmd.add_argument("--repeat", type=int, default=1, metavar="N",
                              help="repeat with N seeds (the file's seed, +1, ...)")
    selftest_cmd.add_argument("--only", action="append", metavar="VARIANT",
                              help="only this variant (repeatable)")
    selftest_cmd.add_argument(
        "--history", choices=HISTORY_SOURCES, default=None,
        help="record every run from this history source (default: each scenario's own, the "
             "scripts): monitor judges on the MONITOR recorder alone; both records the two "
             "and requires them to agree")
    selftest_cmd.add_argument("--scenarios", default=None,
                              help="directory of mutant scenarios (default scenarios/mutants)")
    selftest_cmd.add_argument("--out", help="directory for the runs (default runs/<time>-selftest)")
    selftest_cmd.add_argument("--force", action="store_true", help="reuse a non-empty --out")
    selftest_cmd.set_defaults(handler=cmd_selftest)

    certify_cmd = commands.add_parser(
        "certify", help="run the certification battery against a queue, per bug class",
        description="Run the battery (scenarios/certify/) against the [sut] of SCENARIO (its "
                    "workers, reaper, dialect, login, cwd, history and key layout; the "
                    "battery supplies topology, load, phases, faults and checks), or against "
                    "the reference queue when no file is given. Print each run, then per bug "
                    "class the scenarios built to see it and what they found. Exit codes as "
                    "for run: 0 all sound, 1 something failed, 4 unknown, 2 bad input, 3 "
                    "infrastructure, 5 checker error, 130 aborted (docs/certify.md).")
    certify_cmd.add_argument("scenario", nargs="?", default=None,
                             help="a scenario file whose [sut] is the queue under test "
                                  "(default: the reference queue)")
    certify_cmd.add_argument("--protocol", metavar="NAME",
                             help="the reference queue's protocol variant (default sound; a "
                                  "mutant of the zoo: docs/protocol-and-mutants.md)")
    certify_cmd.add_argument("--seeds", type=int, default=DEFAULT_CERTIFY_SEEDS, metavar="N",
                             help="seeds for the scenarios that make a bug likely rather than "
                                  f"certain (default {DEFAULT_CERTIFY_SEEDS}); the others run "
                                  "once")
    certify_cmd.add_argument("--unexercised-retries", type=int,
                             default=DEFAULT_UNEXERCISED_RETRIES, metavar="N",
                             help="a run whose faults could strand a lease and stranded none "
                                  "proved nothing of recovery: run it again with a seed not yet "
                                  f"used, up to N times (default {DEFAULT_UNEXERCISED_RETRIES}); "
                                  "still unexercised, it is unknown (exit 4)")
    certify_cmd.add_argument("--only", action="append", metavar="SCENARIO",
                             help="only this battery scenario (repeatable)")
    certify_cmd.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                             help="override a field of every battery scenario, after the "
                                  "SUT's parts are merged in (repeatable)")
    certify_cmd.add_argument("--json", action="store_true", help="print certify.json")
    certify_cmd.add_argument("--out", help="directory for the runs (default "
                                           "runs/<utc-time>-certify)")
    certify_cmd.add_argument("--force", action="store_true", help="reuse a non-empty --out")
    _store_options(certify_cmd)
    certify_cmd.set_defaults(handler=cmd_certify, store_runs=True)

    clean = commands.add_parser(
        "clean", help="undo what crashed runs left behind: faults on an attached deployment "
        "(attach.json), processes, pid files, containers",
        description="An attach run killed outright leaves its faults applied to the "
                    "deployment: this runs the undo commands its attach.json lists (resume, "
                    "heal; argv, no shell) and keeps there only what failed. "
                    "Each run records its children in <run dir>/pids/. Children die with the "
                    "runner even when it is SIGKILLed; this removes anything left anyway: it "
                    "kills a recorded process only if its pid, boot and start time still match "
                    "(never a recycled pid), with its process group, and deletes the pid files. "
                    "Then it removes containers labelled echomq-chaos (the docker runtime's) "
                    "whose runner is gone, frozen ones included. Runs whose runner is still "
                    "alive are left alone. Safe to repeat.")
    clean.add_argument("--runs", default="runs", metavar="DIR",
                       help="a run directory, or a directory of them (default runs/)")
    clean.add_argument("--all", action="store_true",
                       help="also remove the containers of runs still going")
    clean.add_argument("--no-containers", action="store_true",
                       help="leave containers alone (by default, containers labelled "
                            "echomq-chaos whose runner is gone are removed, if an engine "
                            "answers)")
    clean.set_defaults(handler=cmd_clean)

    sweep_cmd = commands.add_parser(
        "sweep", help="run a scenario over a grid of lease/reap/heartbeat settings and "
                      "recommend one",
        description="Run SCENARIO once per cell (and repetition) of the grid, one after another, "
                    "with the cell's settings applied as --set does. Writes sweep.json, "
                    "sweep.html (heatmaps) and one run directory per run, prints a table, and "
                    "recommends the cell that meets the recovery target with zero needless "
                    "redeliveries and the widest safety margin (never a cell that failed an "
                    "invariant), or says which constraint binds. Exit 0 every cell passed, 1 a "
                    "cell failed an invariant, 2 bad input, 3 infrastructure, 130 interrupted "
                    "(the cells done are still reported, with no recommendation: part of a "
                    "grid cannot say which setting is best).")
    sweep_cmd.add_argument("scenario", help="scenario file (TOML)")
    sweep_cmd.add_argument("--lease-ms", required=True, metavar="LIST",
                           help="lease_ms values, e.g. 500,1000,2000")
    sweep_cmd.add_argument("--reap-ms", required=True, metavar="LIST",
                           help="reap_interval_ms values, e.g. 100,250,500")
    sweep_cmd.add_argument("--heartbeat-ms", metavar="LIST",
                           help="heartbeat_ms values; 'off' (or 0) = no heartbeat, 'auto' = the "
                                "scenario's (default lease/3, also when this option is absent)")
    sweep_cmd.add_argument("--repeat", type=int, default=1, metavar="N",
                           help="runs per cell (seeds: the file's, +1, ...); figures are pooled")
    sweep_cmd.add_argument("--target-recovery-ms", type=int, metavar="MS",
                           help="recovery target for the recommendation (default: the "
                                "scenario's own lease_ms + reap_interval_ms)")
    sweep_cmd.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                           help="override another field in every cell (repeatable)")
    sweep_cmd.add_argument("--out", help="sweep directory (default runs/<utc-time>-sweep-<name>/)")
    sweep_cmd.add_argument("--force", action="store_true", help="reuse a non-empty --out")
    _store_options(sweep_cmd)
    sweep_cmd.set_defaults(handler=cmd_sweep, store_runs=True)

    capacity_cmd = commands.add_parser(
        "capacity", help="find the enqueue rate a scenario's worker pool sustains (the knee)",
        description="Bring up the scenario's Valkey, reaper(s) and workers, then ramp the "
                    "enqueue rate in steps (each a headless Locust run) and report the highest "
                    "rate at which the backlog of the step's own jobs does not grow (jobs the "
                    "reaper returned after a fault do not count), the claim wait p99 "
                    "(enqueue to first claim, Valkey clock) stays under --p99-ms and the rate "
                    "is at most the pool's service rate (slots / mean claim-to-complete); then "
                    "hold that knee for --hold-ms (a failed hold steps down). Exit 0: a knee "
                    "was found and held (or every step fit: knee not reached); "
                    "1: not even the first step fits, or no hold held; 2: bad arguments; "
                    "3: infrastructure; 130: interrupted.")
    capacity_cmd.add_argument("scenario", help="scenario file (TOML): its topology is the pool")
    capacity_cmd.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                              help="override a scenario field (repeatable), as for run")
    capacity_cmd.add_argument("--start-rate", type=float, metavar="JOBS_S",
                              help="first step's rate (default: half the scenario's load.rate)")
    capacity_cmd.add_argument("--step-rate", type=float, metavar="JOBS_S",
                              help="added per step (default: the start rate)")
    capacity_cmd.add_argument("--steps", type=int, default=8, help="at most this many steps")
    capacity_cmd.add_argument("--step-ms", type=int, default=5000, help="length of a step")
    capacity_cmd.add_argument("--p99-ms", type=float, default=500.0,
                              help="claim wait p99 target in ms (default 500)")
    capacity_cmd.add_argument("--backlog-growth", type=float, default=0.0, metavar="SHARE",
                              help="bounded backlog: the backlog's slope (its lower one-sided "
                                   "99%% bound) may be at most SHARE x rate per second "
                                   "(default 0)")
    capacity_cmd.add_argument("--hold-ms", type=int, default=HOLD_MS, metavar="MS",
                              help="hold the knee this long to confirm it; a hold that fails "
                                   f"steps down and holds again (default {HOLD_MS}; 0: no hold)")
    capacity_cmd.add_argument("--fault", action="store_true",
                              help="run the scenario's fault schedule inside every step "
                                   "(killed workers are restarted between steps)")
    capacity_cmd.add_argument("--refine", type=int, default=0, metavar="N",
                              help="after the ramp, bisect between the knee and the first rate "
                                   "over it N times (N more steps; default 0)")
    capacity_cmd.add_argument("--workers", metavar="N,N,...",
                              help="a plan over pool sizes: each size's knee, what limited it, "
                                   "the USL fitted to them; --start-rate and --step-rate are "
                                   "then per slot (default: half the scenario's load.rate over "
                                   "its slots)")
    capacity_cmd.add_argument("--concurrency", type=int, metavar="SLOTS",
                              help="with --workers: slots per worker (default the scenario's)")
    capacity_cmd.add_argument("--target-rate", type=float, metavar="JOBS_S",
                              help="with --workers: the smallest pool that carries this rate "
                                   "with claim wait p99 <= --p99-ms")
    capacity_cmd.add_argument("--lose", type=int, metavar="K",
                              help="with --target-rate: ... after losing K workers")
    capacity_cmd.add_argument("--out", help="output directory (default "
                                            "runs/<utc-time>-capacity-<scenario>)")
    capacity_cmd.add_argument("--force", action="store_true", help="reuse a non-empty --out")
    capacity_cmd.add_argument("--json", action="store_true", help="print capacity.json")
    _store_options(capacity_cmd)
    capacity_cmd.set_defaults(handler=cmd_capacity, store_runs=True)

    toxiproxy = commands.add_parser("toxiproxy", help="the built-in Toxiproxy-compatible server")
    toxiproxy_commands = toxiproxy.add_subparsers(dest="toxiproxy_command", required=True)
    serve = toxiproxy_commands.add_parser(
        "serve", help="serve the Toxiproxy 2.x HTTP API (for runs using toxiproxy.url)")
    serve.add_argument("--host", default="127.0.0.1", help="API address (default 127.0.0.1)")
    serve.add_argument("--port", type=tcp_port, default=8474,
                       help="API port (default 8474; 0 picks a free one)")
    serve.set_defaults(handler=cmd_toxiproxy_serve)
    proxy = toxiproxy_commands.add_parser(
        "proxy", help="create (or update) one proxy on a running Toxiproxy server",
        description="Waits for the API, then creates or updates the proxy through /populate "
                    "(the compose stack uses it to put its workers behind Toxiproxy).")
    proxy.add_argument("name")
    proxy.add_argument("--listen", required=True, metavar="HOST:PORT")
    proxy.add_argument("--upstream", required=True, metavar="HOST:PORT")
    proxy.add_argument("--api", default="http://127.0.0.1:8474", metavar="URL",
                       help="the server's API (default http://127.0.0.1:8474)")
    proxy.add_argument("--wait", type=float, default=30.0, metavar="S",
                       help="how long to wait for the API to answer (default 30)")
    proxy.set_defaults(handler=cmd_toxiproxy_proxy)

    images = commands.add_parser(
        "images", help="container images for the docker runtime (offline builds)")
    images_commands = images.add_subparsers(dest="images_command", required=True)
    images_build = images_commands.add_parser(
        "build", help="build the base, worker and stand-in images without pulling any",
        description="Build, or reuse when present and current: the base image (debootstrap "
                    "minbase + python3, docker import; the tarball is cached), the worker "
                    "image (compose/Dockerfile, the project from wheels built here), and "
                    "offline stand-ins for the Valkey and Toxiproxy images. Needs root, "
                    "debootstrap and a Docker engine.")
    images_build.add_argument("--base", metavar="IMAGE",
                              help="build on this image instead of the debootstrap one, "
                                   "e.g. python:3.11-slim-bookworm where pulling works")
    images_build.add_argument("--mirror", metavar="URL",
                              help="Debian mirror for debootstrap (default: this machine's "
                                   "apt sources)")
    images_build.add_argument("--rebuild", action="store_true",
                              help="rebuild everything, the debootstrap tarball included")
    images_build.set_defaults(handler=cmd_images_build)
    images_status = images_commands.add_parser(
        "status", help="which images are present, and whether the worker image is current")
    images_status.set_defaults(handler=cmd_images_status)

    protocol = commands.add_parser("protocol", help="the queue protocol's scripts")
    protocol_commands = protocol.add_subparsers(dest="protocol_command", required=True)
    protocol_export = protocol_commands.add_parser(
        "export", help="write the recording Lua scripts and a note of their KEYS/ARGV to DIR",
        description="Write the protocol's sound scripts (byte for byte: the SHA1s the echomq "
                    "dialect knows) and README.md, what each takes, to DIR: for a worker of "
                    "your own that records its transitions itself ([history] source = "
                    "\"scripts\"; docs/sut.md).")
    protocol_export.add_argument("directory", metavar="DIR", help="created if absent")
    protocol_export.set_defaults(handler=cmd_protocol_export)

    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits 2 on usage errors, 0 on --help
        return int(exit_.code or 0)
    try:
        recorder = _recording(args) if getattr(args, "store_runs", False) else None
        if recorder is None:
            code: int = args.handler(args)
            return code
        with recorder.listening():
            return recorder.exit_code(args.handler(args))
    except usage_errors() as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (InfraError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INFRA
    except KeyboardInterrupt:  # outside a run's own handling (start-up, the final report)
        print("interrupted", file=sys.stderr)
        return EXIT_ABORTED


__all__ = ["main", "EXIT_FAIL", "EXIT_INFRA"]
