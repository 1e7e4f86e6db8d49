"""``echomq-chaos capacity --workers 1,2,4``: a capacity plan over pool sizes.

For each pool size the knee search of ``chaos.tools.capacity`` runs on its own bring-up (the
scenario with ``topology.workers`` set, in ``workers-N/``), its rates scaled with the pool's
slots, holds its knee (``--hold-ms``) and names what limited it (``chaos.tools.bottleneck``).
Then, pure (``chaos.tools.scaling``): the store's ceiling from the CPU per job every step
measured, the pool's service rate per worker (slots / mean claim-to-complete), the Universal
Scalability Law through the knees with its hold-out check and band, and with ``--target-rate``
the smallest pool whose survivors were held at it with ``--lose`` workers lost (or the one
predicted, not held, and how to hold it). Writes ``capacity.json`` and ``capacity.html`` beside
the sizes' directories.
"""

from __future__ import annotations

import html
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import redis

from chaos.errors import EXIT_ABORTED, EXIT_FAIL, EXIT_INFRA, EXIT_PASS, InfraError
from chaos.files import write_json_atomic, write_text_atomic
from chaos.report.html import figure_svg
from chaos.runtime.valkey import split_password
from chaos.scenario.loading import ScenarioError
from chaos.scenario.model import Scenario
from chaos.tools.bottleneck import HOST_WAY_OUT, host_cores
from chaos.tools.capacity import CapacityResult, CapacityRun, CapacitySearch, ceiling_of
from chaos.tools.capacity_result import hold_line
from chaos.tools.scaling import (
    NOT_THE_QUEUES,
    Knee,
    PlanRequest,
    Recommendation,
    ScalingModel,
    recommend,
    scaling_model,
)

SCHEMA = 1
MAX_WORKERS = 64
STORE_PING_TIMEOUT_S = 2.0


def parse_workers(text: str) -> tuple[int, ...]:
    """``--workers 1,2,4``: distinct pool sizes, each 1..MAX_WORKERS (ScenarioError: exit 2)."""
    sizes: list[int] = []
    for part in text.split(","):
        try:
            size = int(part.strip())
        except ValueError:
            raise ScenarioError(f"--workers {text}: {part.strip()!r} is not a whole number"
                                ) from None
        if not 1 <= size <= MAX_WORKERS:
            raise ScenarioError(f"--workers {text}: {size} must be 1..{MAX_WORKERS}")
        if size in sizes:
            raise ScenarioError(f"--workers {text}: {size} is given twice")
        sizes.append(size)
    return tuple(sorted(sizes))


@dataclass(frozen=True)
class PlanSpec:
    workers: tuple[int, ...]
    target_rate: float | None = None
    lose: int = 0
    confirm: str = ""  # the command that holds one pool of the plan (capacity SCENARIO --set ...)

    def validate(self) -> None:
        """Bad plan options are ScenarioError (exit 2), named with their value."""
        if self.target_rate is not None and not self.target_rate > 0:
            raise ScenarioError(f"--target-rate {self.target_rate}: must be > 0")
        if self.lose < 0:
            raise ScenarioError(f"--lose {self.lose}: must be >= 0")
        if self.lose and self.target_rate is None:
            raise ScenarioError(f"--lose {self.lose}: needs --target-rate (the rate the pool "
                                "must still carry)")
        if self.lose >= max(self.workers):
            raise ScenarioError(f"--lose {self.lose}: must be less than the largest pool "
                                f"(--workers {','.join(map(str, self.workers))}): a pool that "
                                "loses every worker carries nothing")


def check_store(scenario: Scenario) -> None:
    """A store the scenario names (``valkey.url``) answers, before anything starts (exit 3)."""
    url = scenario.valkey.url
    if not url:
        return  # the run starts its own
    client = redis.Redis.from_url(url, socket_connect_timeout=STORE_PING_TIMEOUT_S,
                                  socket_timeout=STORE_PING_TIMEOUT_S)
    try:
        client.ping()
    except redis.exceptions.RedisError as error:
        shown = split_password(url)[0]
        raise InfraError(f"valkey.url {shown}: the store does not answer ({error})") from None
    finally:
        client.close()


@dataclass
class CapacityPlan:
    scenario: str
    search: CapacitySearch  # per slot: each size's rates are these x its slots
    spec: PlanSpec
    concurrency: int
    under_faults: bool
    sizes: list[CapacityResult] = field(default_factory=list)
    ceiling: float | None = None
    model: ScalingModel | None = None
    recommendation: Recommendation | None = None
    stopped_by: str = ""  # "" | aborted | error

    @property
    def recorder(self) -> bool:
        """A MONITOR recorder ran (its MONITOR is in the store's CPU)."""
        return any(size.recorder for size in self.sizes)

    def service_per_worker(self) -> float | None:
        """One worker's slots over the mean claim-to-complete of every size's attempts."""
        weighted = [(size.service_ms_mean, sum(step.completed for step in size.steps))
                    for size in self.sizes if size.service_ms_mean]
        count = sum(n for _, n in weighted)
        if not count:
            return None
        mean_ms = sum(ms * n for ms, n in weighted) / count
        return round(self.concurrency * 1000 / mean_ms, 2)

    @property
    def exit_code(self) -> int:
        if self.stopped_by == "aborted":
            return EXIT_ABORTED
        if self.stopped_by == "error":
            return EXIT_INFRA
        if self.recommendation is not None:
            return EXIT_PASS if self.recommendation.workers is not None else EXIT_FAIL
        return EXIT_PASS if all(size.knee_rate is not None for size in self.sizes) else EXIT_FAIL

    def knees(self) -> list[Knee]:
        return [Knee(size.workers, size.knee_rate, size.over_rate, size.bottleneck, size.held)
                for size in self.sizes if size.knee_rate is not None]

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "scenario": self.scenario, "kind": "plan",
            "search_per_slot": asdict(self.search), "concurrency": self.concurrency,
            "under_faults": self.under_faults, "host_cores": host_cores(),
            "target_rate": self.spec.target_rate, "lose": self.spec.lose,
            "stopped_by": self.stopped_by, "store_ceiling": self.ceiling,
            "service_per_worker": self.service_per_worker(),
            "sizes": [{"workers": size.workers, "slots": size.slots,
                       "knee_rate": size.knee_rate, "over_rate": size.over_rate,
                       "held": size.held, "service_rate": size.service_rate,
                       "service_ms_mean": size.service_ms_mean,
                       "bottleneck": size.bottleneck, "bottleneck_why": size.bottleneck_why,
                       "stopped_by": size.stopped_by, "store_ceiling": size.store_ceiling(),
                       "error": size.error, "dir": f"workers-{size.workers}",
                       "steps": [asdict(step) for step in size.steps]}
                      for size in self.sizes],
            "model": self.model.as_dict() if self.model is not None else None,
            "recommendation": (self.recommendation.as_dict()
                               if self.recommendation is not None else None),
        }


def size_dir(out: Path, workers: int) -> Path:
    return out / f"workers-{workers}"


def run_plan(scenarios: dict[int, Scenario], search: CapacitySearch, spec: PlanSpec, out: Path,
             stream: TextIO = sys.stderr) -> CapacityPlan:
    """Each size's search in turn (``scenarios``: the scenario at each pool size, validated),
    then the model and the plan. An aborted or broken size ends the plan there."""
    first = next(iter(scenarios.values()))
    concurrency = first.topology.concurrency
    plan = CapacityPlan(first.name, search, spec, concurrency, search.fault)
    out.mkdir(parents=True, exist_ok=True)
    for workers in spec.workers:
        slots = workers * concurrency
        # unrounded: CapacitySearch.rates rounds each rate, so no rounding error compounds
        sized = replace(search, start_rate=search.start_rate * slots,
                        step_rate=search.step_rate * slots)
        print(f"== pool of {workers} worker(s) x {concurrency} slots: {sized.rates()[0]:g} .. "
              f"{sized.rates()[-1]:g} jobs/s in {size_dir(out, workers)}", file=stream,
              flush=True)
        result = CapacityRun(scenarios[workers], sized, size_dir(out, workers), stream).execute()
        plan.sizes.append(result)
        print(f"== {workers} worker(s): {knee_words(result)}", file=stream, flush=True)
        if result.stopped_by in ("aborted", "error"):
            plan.stopped_by = result.stopped_by
            break
    plan.ceiling = ceiling_of(step for size in plan.sizes for step in size.steps)
    largest = max(spec.workers)
    plan.model = scaling_model(plan.knees(), plan.ceiling, predict_to=max(2 * largest, 8),
                               service_per_worker=plan.service_per_worker())
    if spec.target_rate is not None and plan.stopped_by == "":
        plan.recommendation = recommend(
            PlanRequest(spec.target_rate, spec.lose, search.fault, search.hold_ms, spec.confirm),
            plan.knees(), plan.model, plan.ceiling, max_workers=max(4 * largest, MAX_WORKERS))
    write_json_atomic(out / "capacity.json", plan.as_dict())
    write_text_atomic(out / "capacity.html", render_html(plan))
    return plan


def knee_words(size: CapacityResult) -> str:
    if size.knee_rate is None:
        return f"no knee ({size.stopped_by}{': ' + size.error if size.error else ''})"
    over = f", {size.over_rate:g} did not" if size.over_rate is not None else ""
    held = (f"held {size.search.hold_ms / 1000:g} s" if size.held else "not held")
    return f"knee {size.knee_rate:g} jobs/s ({held}){over}; bottleneck {size.bottleneck}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def size_rows(plan: CapacityPlan) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for size in plan.sizes:
        over = [step for step in size.steps if not step.within]
        limit = min(over, key=lambda step: step.target_rate) if over else (
            max(size.steps, key=lambda step: step.target_rate) if size.steps else None)
        rows.append((str(size.workers), str(size.slots),
                     "-" if size.knee_rate is None else f"{size.knee_rate:g}",
                     "yes" if size.held else "no",
                     "-" if size.service_rate is None else f"{size.service_rate:g}",
                     "-" if size.over_rate is None else f"{size.over_rate:g}",
                     _share(limit.slots_busy if limit else None),
                     _share(limit.store_cpu if limit else None),
                     _share(limit.host_cpu if limit else None),
                     size.bottleneck or size.stopped_by))
    return rows


SIZE_COLUMNS = ("workers", "slots", "knee", "held", "service", "over", "slots busy",
                "store CPU", "host CPU", "bottleneck")


def model_lines(plan: CapacityPlan) -> list[str]:
    model = plan.model
    if model is None:
        return ["model: none (no pool size has a knee)"]
    usl = model.usl
    largest = max(size.workers for size in plan.sizes)
    peak = ("never peaks (kappa 0)" if usl.peak_workers is None
            else "no peak within 10x the largest size" if usl.peak_workers > 10 * largest
            else f"peaks near {usl.peak_workers:.0f} workers")
    lines = [f"model: USL X(N) = {usl.lam:.2f} N / (1 + {usl.sigma:.3f} (N-1) + "
             f"{usl.kappa:.4f} N (N-1)), {peak}; fitted to {model.sizes} size(s)"]
    if model.holdout_error is None:
        lines.append("hold-out: none (one size: nothing to leave out)")
    else:
        band = ("" if model.holdout_band is None else
                f", band {model.holdout_band[0]:g}-{model.holdout_band[1]:g}")
        lines.append(f"hold-out: fitted without {model.holdout_workers} workers, it predicts "
                     f"{model.holdout_predicted:g} jobs/s there{band}; measured "
                     f"{model.holdout_measured:g} (error {model.holdout_error:+.1%})")
    if model.service_per_worker is not None:
        lines.append(f"service rate: {model.service_per_worker:g} jobs/s a worker "
                     f"({plan.concurrency} slots / mean claim-to-complete, Little's law): no "
                     "prediction above N x that")
    lines.append("trust: " + ("the fit holds on what it was checked against" if model.trusted
                              else "not to be trusted: " + "; ".join(model.distrust)))
    measured = {size.workers for size in plan.sizes}
    beyond = [p for p in model.predictions if p.workers not in measured]
    if beyond:
        lines.append("predicted knees, not measured (jobs/s, band): " + ", ".join(
            f"{p.workers} workers {p.rate:g} ({p.low:g}-{p.high:g})"
            + (" store-capped" if p.capped else " service-capped" if p.served else "")
            for p in beyond))
    return lines


def plan_table(plan: CapacityPlan) -> str:
    search = plan.search
    lines = [f"capacity plan of {plan.scenario}: pool sizes "
             f"{', '.join(str(size) for size in plan.spec.workers)} x {plan.concurrency} slots; "
             f"claim wait p99 <= {search.p99_ms:g} ms; {lengths(search)}"
             + ("; the scenario's faults in every step" if plan.under_faults else ""),
             *_columns(SIZE_COLUMNS, size_rows(plan))]
    for size in plan.sizes:
        if size.bottleneck_why:
            lines.append(f"  {size.workers} worker(s): {size.bottleneck}: {size.bottleneck_why}")
        if held := hold_line(size):
            lines.append(f"  {size.workers} worker(s): {held}")
        if size.error:
            lines.append(f"  {size.workers} worker(s): error: {size.error}")
    lines.append("store ceiling: " + (
        f"{plan.ceiling:g} jobs/s (its main thread busy all the time at the CPU per completed "
        "job measured in these steps, INFO cpu)" if plan.ceiling is not None
        else "not measured (the store gave no INFO cpu)"))
    lines += model_lines(plan)
    if any(size.bottleneck in NOT_THE_QUEUES for size in plan.sizes):
        lines.append(f"!! a knee set by the host or the generator is this machine's, not the "
                     f"queue's: {HOST_WAY_OUT}")
    if plan.recommendation is not None:
        lines.append(f"recommendation (target {plan.spec.target_rate:g} jobs/s, claim wait p99 "
                     f"<= {search.p99_ms:g} ms, {plan.spec.lose} lost): "
                     f"{plan.recommendation.text}")
    return "\n".join(lines)


def lengths(search: CapacitySearch) -> str:
    """The step and hold lengths, as the plan's header and page say them."""
    hold = (f"each knee held {search.hold_ms / 1000:g} s" if search.hold_ms
            else "knees not held (--hold-ms 0)")
    return f"steps of {search.step_ms / 1000:g} s, {hold}"


def _columns(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(text) for text in column) for column in zip(header, *rows, strict=False)]
    lines = ["  ".join(text.ljust(width) for text, width in zip(header, widths, strict=True)),
             "  ".join("-" * width for width in widths)]
    lines += ["  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True))
              for row in rows]
    return [line.rstrip() for line in lines]


# --- capacity.html ----------------------------------------------------------------------------


def _curve_svg(plan: CapacityPlan) -> str:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 4.6), dpi=100)
    ax = figure.subplots()
    model = plan.model
    if model is not None and model.predictions:
        xs = [p.workers for p in model.predictions]
        ax.fill_between(xs, [p.low for p in model.predictions],
                        [p.high for p in model.predictions], color="#4e79a7", alpha=0.18,
                        linewidth=0, label="band (residuals, hold-out, leave-one-out and "
                                           "upper-bound fits)")
        if model.service_per_worker is not None:
            ax.plot(xs, [x * model.service_per_worker for x in xs], color="#9a6700",
                    linestyle="-.", linewidth=1,
                    label=f"service rate ({model.service_per_worker:g} jobs/s a worker)")
        ax.plot(xs, [p.rate for p in model.predictions], color="#4e79a7", linewidth=1.8,
                label="USL fit" + ("" if model.trusted else " (not to be trusted)"))
    for size in plan.sizes:
        if size.knee_rate is None:
            continue
        color = "#e15759" if size.bottleneck in NOT_THE_QUEUES else "#111827"
        top = size.over_rate if size.over_rate is not None else size.knee_rate
        ax.plot([size.workers] * 2, [size.knee_rate, top], color=color, linewidth=1)
        ax.plot(size.workers, size.knee_rate, "o", color=color, markersize=7)
        ax.annotate(f"{size.knee_rate:g} ({size.bottleneck}"
                    f"{'' if size.held else ', not held'})", (size.workers, size.knee_rate),
                    xytext=(6, -10), textcoords="offset points", fontsize=8, color=color)
    ax.plot([], [], "o", color="#111827", label="measured knee (bar: up to the first rate over)")
    if plan.spec.target_rate is not None:
        ax.axhline(plan.spec.target_rate, color="#59a14f", linestyle=":", linewidth=1.4,
                   label=f"target {plan.spec.target_rate:g} jobs/s")
    if plan.recommendation is not None and plan.recommendation.workers is not None:
        ax.axvline(plan.recommendation.workers, color="#59a14f", linewidth=1,
                   label=f"recommended: {plan.recommendation.workers} workers")
    top = max([p.high for p in (model.predictions if model else [])]
              + [size.over_rate or size.knee_rate or 0 for size in plan.sizes] + [1.0])
    if plan.ceiling is not None and plan.ceiling < 3 * top:
        top = max(top, plan.ceiling)
        ax.axhline(plan.ceiling, color="#9a6700", linestyle="--", linewidth=1.2,
                   label=f"store ceiling {plan.ceiling:g} jobs/s")
    elif plan.ceiling is not None:  # far above every knee: said, not drawn
        ax.annotate(f"store ceiling {plan.ceiling:g} jobs/s, above the chart", (0.01, 0.97),
                    xycoords="axes fraction", fontsize=9, color="#9a6700", va="top")
    ax.set_ylim(0, top * 1.1)
    ax.set_xlim(left=0)
    ax.set_xlabel("workers in the pool", fontsize=9)
    ax.set_ylabel("knee, jobs/s", fontsize=9)
    ax.grid(True, color="#e5e7eb", linewidth=0.8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return figure_svg(figure, "capacity-plan")


def render_html(plan: CapacityPlan) -> str:
    """A self-contained page: the knees, the fitted curve, its band, the store's ceiling and
    the recommendation; inline SVG, no script, no network."""
    escape = html.escape
    rows = "".join("<tr>" + "".join(f"<td>{escape(text)}</td>" for text in row) + "</tr>"
                   for row in size_rows(plan))
    header = "".join(f"<th>{escape(name)}</th>" for name in SIZE_COLUMNS)
    why = "".join(f"<li>{size.workers} worker(s): <b>{escape(size.bottleneck)}</b>: "
                  f"{escape(size.bottleneck_why or size.error or size.stopped_by)}"
                  f"{'; ' + escape(hold_line(size)) if hold_line(size) else ''}</li>"
                  for size in plan.sizes)
    recommendation = plan.recommendation
    rec = ("" if recommendation is None else
           f"<div class='rec{'' if recommendation.workers else ' none'}'><p>"
           f"{escape(recommendation.text)}</p></div>")
    model = "".join(f"<p>{escape(line)}</p>" for line in model_lines(plan))
    included = ("the recorder's MONITOR and the exporter's reads" if plan.recorder
                else "the exporter's reads")
    machine = [size.workers for size in plan.sizes if size.bottleneck in NOT_THE_QUEUES]
    host = ("" if not machine else
            f"<p>The knee(s) at {escape(', '.join(map(str, machine)))} workers were set by the "
            "host or the generator: this machine's limit, not the queue's: "
            f"{escape(HOST_WAY_OUT)}.</p>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>capacity plan {escape(plan.scenario)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; max-width: 1200px; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }}
svg {{ max-width: 100%; height: auto; }}
.rec {{ background: #eef6ee; border-left: 4px solid #4a4; padding: 0.6em 1em; }}
.none {{ background: #fbeeee; border-left: 4px solid #a44; }}
</style></head><body>
<h1>Capacity plan of {escape(plan.scenario)}</h1>
<p>Pool sizes {escape(', '.join(map(str, plan.spec.workers)))} x {plan.concurrency} slots; a
knee is the highest rate whose claim wait p99 stayed within {plan.search.p99_ms:g} ms with a
backlog that did not grow{escape("; the scenario's faults in every step" if plan.under_faults
                                 else "")}; {escape(lengths(plan.search))}.
{escape(f"Stopped: {plan.stopped_by}." if plan.stopped_by else "")}</p>
<h2>Recommendation</h2>
{rec or "<p>none asked for (--target-rate)</p>"}
<h2>Knees and the model</h2>
{_curve_svg(plan)}
{model}
<h2>Pool sizes</h2>
<table><tr>{header}</tr>{rows}</table>
<ul>{why}</ul>
{_predictions_html(plan)}
<p>Store ceiling: {escape(f"{plan.ceiling:g} jobs/s" if plan.ceiling else "not measured")}, the
rate at which the store's main thread would be busy all the time at the CPU per completed job
measured in these steps (INFO cpu; {escape(included)} included).</p>
{host}
</body></html>
"""


def _predictions_html(plan: CapacityPlan) -> str:
    """Every size the model predicts, measured or not, with its band."""
    model = plan.model
    if model is None or not model.predictions:
        return ""
    rows = "".join(
        f"<tr><td>{p.workers}</td><td>{p.rate:g}</td><td>{p.low:g}-{p.high:g}</td>"
        f"<td>{'-' if p.measured is None else f'{p.measured:g}'}</td>"
        f"<td>{'store' if p.capped else 'service rate' if p.served else '-'}</td></tr>"
        for p in model.predictions)
    return ("<h2>Predicted knees</h2><table><tr><th>workers</th><th>predicted</th><th>band</th>"
            f"<th>measured</th><th>capped by</th></tr>{rows}</table>")
