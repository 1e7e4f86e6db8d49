"""The attach runtime (docs/attach.md, docs/design.md §6): a queue already deployed. The run
starts nothing of it and stops nothing of it; it talks to the server given by ``valkey.url``
and applies its faults to the members the scenario names, through each member's driver
(``chaos.runtime.drivers``: a Docker container on an engine given by URL, or argv templates).

What it does before the load starts (``admit_queue``, ``start_reapers``, ``start_workers``):
refuses a queue that holds jobs, connections that use the queue's keys (watched on MONITOR for
``attach.probe_ms``) or are named like a member but are none, a docker member whose container
is not running (or is paused), and a member whose every connection has been idle past
``attach.idle_limit_ms`` (frozen or cut off: a fault another run left?); ``attach.force`` (or
``run --force``) turns the refusals into warnings.

Every fault it applies it undoes on every exit path: the nemesis heals pauses and partitions
when they end and at the heal phase; ``stop_workers`` (the wind-down) undoes any still applied;
``close`` tries again and brings back the members a kill took down (``attach.restart_killed``);
``kill_now`` (a second Ctrl-C) thaws and heals without waiting for anything else. What is
outstanding is kept in ``attach.json`` in the run directory, each action in
``logs/attach-actions.jsonl``; what could not be undone is printed with the command to do it by
hand and listed in report.json (``run.runtime.left_undone``).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from chaos.errors import InfraError
from chaos.files import write_json_atomic
from chaos.history.monitor import callers_of, member_of
from chaos.network.client import ToxiproxyServerInfo
from chaos.protocol.client import QueueClient
from chaos.runtime.base import RuntimeBase
from chaos.runtime.drivers import ActionLog, CommandDriver, DockerDriver, Driver, Engines
from chaos.runtime.pids import PID_DIR, RUNNER, dirs_at, is_alive, read_record
from chaos.scenario.attach import Attach

JOURNAL = "attach.json"
ACTIONS_LOG = "attach-actions.jsonl"


@dataclass
class AttachedMember:
    """A member of the deployed queue, as the runner watches it (``chaos.runtime.base.Member``),
    and what the run has done to it that is not undone yet."""

    name: str
    role: str
    driver: Driver
    paused: bool = False
    killed: bool = False  # by a fault, on purpose
    expected_exit: bool = False
    frozen_with: dict[str, str] | None = None  # the values its pause ran with: resume's
    cut_with: dict[str, str] | None = None  # the values its partition ran with: heal's

    @property
    def alive(self) -> bool:
        return self.driver.alive(self.killed)

    @property
    def exit_code(self) -> int | None:
        return self.driver.exit_code()


def _identity(client: Mapping[str, Any]) -> str:
    """Whom a connection says it is, as the recorder reads it: its own ACL user, else the
    client name it set."""
    user = str(client.get("user") or "default")
    return user if user != "default" else str(client.get("name") or "")


@dataclass
class AttachRuntime(RuntimeBase):
    attached: dict[str, AttachedMember] = field(default_factory=dict)
    engines: Engines = field(default_factory=Engines)
    left_undone: list[str] = field(default_factory=list)  # for the report: undo by hand
    _log: ActionLog | None = None
    _closed: bool = False

    @property
    def settings(self) -> Attach:
        assert self.scenario.attach is not None
        return self.scenario.attach

    @property
    def actions(self) -> ActionLog:
        if self._log is None:
            self._log = ActionLog(self.logs / ACTIONS_LOG)
        return self._log

    def describe(self) -> dict[str, object]:
        return {"kind": "attach",
                "members": {name: {"role": member.role, **member.driver.describe()}
                            for name, member in self.attached.items()},
                "forced": self.settings.force,
                "actions": self.actions.count, "actions_log": f"logs/{ACTIONS_LOG}",
                "left_undone": self.left_undone}

    def members(self) -> Mapping[str, AttachedMember]:
        return self.attached

    # --- the server: the deployment's ------------------------------------------------------
    def start_valkey(self) -> str:
        url = super().start_valkey()  # valkey.url (validated: no password in it)
        client = self.client(retrying=False)
        try:
            client.ping()
        except redis.exceptions.AuthenticationError as error:
            raise InfraError(f"valkey.url {url}: {error}; the password comes from "
                             "ECHOMQ_VALKEY_PASSWORD (set it in the environment)") from None
        except redis.exceptions.ResponseError as error:
            if "NOAUTH" in str(error) or "WRONGPASS" in str(error):
                raise InfraError(f"valkey.url {url}: {error}; the password comes from "
                                 "ECHOMQ_VALKEY_PASSWORD (set it in the environment)") from None
            raise InfraError(f"valkey.url {url}: {error}") from None
        except redis.exceptions.ConnectionError as error:
            raise InfraError(f"valkey.url {url}: cannot connect ({error})") from None
        finally:
            client.close()
        return url

    def _start_own_valkey(self) -> tuple[str, str]:
        raise InfraError("runtime = 'attach' starts no server: give valkey.url")

    def _start_own_toxiproxy(self) -> ToxiproxyServerInfo:
        raise InfraError("runtime = 'attach' starts no Toxiproxy: members are cut off by their "
                         "partition commands")

    starts_members = False  # deployed: at work before the run began

    def start_timeout(self) -> float | None:
        return self.settings.connect_timeout_s

    # --- before the load: is it safe to attach? ---------------------------------------------
    def admit_queue(self, queue: QueueClient, backlog: Callable[[], tuple[int, int]],
                    key_base: str) -> None:
        """Refuse (InfraError) a queue that holds jobs, or has consumers the scenario does not
        name; with ``attach.force``, say so and go on."""
        problems = []
        waiting, leased = backlog()
        if waiting or leased:
            problems.append(f"the queue ({key_base}*) already holds {waiting} waiting and "
                            f"{leased} leased job(s): the run would judge jobs it did not "
                            "enqueue")
        strangers = self._strangers(queue, key_base)
        if strangers:
            problems.append("connections that are not members of the scenario: "
                            + "; ".join(strangers[:8])
                            + (f"; and {len(strangers) - 8} more" if len(strangers) > 8 else "")
                            + ". A member must log in as its own ACL user or name its "
                            "connections after itself (docs/attach.md); others must stop first")
        self._refuse_or_warn(problems)

    def _refuse_or_warn(self, problems: list[str]) -> None:
        if not problems:
            return
        if self.settings.force:
            for problem in problems:
                self.say(f"!! attach (forced): {problem}")
            return
        raise InfraError("refusing to attach: " + " | ".join(problems)
                         + " (to attach anyway: run --force, or attach.force = true)")

    def _strangers(self, queue: QueueClient, key_base: str) -> list[str]:
        members = frozenset([*self.scenario.worker_names, *self.scenario.reaper_names])
        server = queue.client.connection_pool.connection_kwargs
        callers: dict[str, str] = {}
        if self.settings.probe_ms and "host" in server:
            try:
                callers = callers_of(server["host"], int(server["port"]),
                                     server.get("username"), server.get("password"), key_base,
                                     self.settings.probe_ms / 1000)
            except OSError as error:
                raise InfraError(f"watching the server for the queue's consumers (MONITOR, "
                                 f"attach.probe_ms): {error}") from None
        listing = {str(c.get("addr")): c for c in queue.client.client_list()}
        stems = {stem for name in members if (stem := name.rstrip("0123456789"))}
        strangers = []
        for address, example in callers.items():
            client = listing.get(address)
            if client is None:
                strangers.append(f"{address} (gone since) ran {example!r}")
            elif member_of(_identity(client), members) is None:
                strangers.append(f"{_describe_client(client)} ran {example!r}")
        for address, client in listing.items():
            identity = _identity(client)
            if (address in callers or not identity or "O" in str(client.get("flags", ""))
                    or member_of(identity, members) is not None):
                continue
            if any(identity.startswith(stem) for stem in stems):
                strangers.append(f"{_describe_client(client)} is named like a member")
        return strangers

    # --- the members: found, not started ------------------------------------------------------
    def start_reapers(self) -> list[AttachedMember]:
        return self._attach(self.scenario.reaper_names)

    def start_workers(self) -> list[AttachedMember]:
        return self._attach(self.scenario.worker_names)

    def _attach(self, names: list[str]) -> list[AttachedMember]:
        """Find each member where its driver says it is (the container, running; the lookups,
        answering), then check none has gone quiet."""
        settings, found = self.settings, []
        for name in names:
            spec = settings.member(name)
            assert spec is not None
            driver: Driver
            if spec.driver == "docker":
                driver = DockerDriver(spec, settings, self.engines, self.actions)
            else:
                driver = CommandDriver(spec, settings, self.actions)
            driver.find()
            member = self.attached[name] = AttachedMember(name, spec.role, driver)
            found.append(member)
        self._journal()
        self._check_idle(names)
        return found

    def _check_idle(self, names: list[str]) -> None:
        limit = self.settings.idle_limit_ms
        if not limit:
            return
        client = self.client(retrying=False)
        try:
            listing = client.client_list()
        finally:
            client.close()
        members = frozenset([*self.scenario.worker_names, *self.scenario.reaper_names])
        quiet = []
        for name in names:
            idle = [0 if "b" in str(c.get("flags", "")) else int(c.get("idle", 0)) * 1000
                    for c in listing if member_of(_identity(c), members) == name]
            if idle and min(idle) > limit:
                quiet.append(f"{name}: all {len(idle)} of its connections idle for at least "
                             f"{min(idle) // 1000} s (frozen or cut off? a fault a killed run "
                             "left applied?)")
        self._refuse_or_warn(quiet)

    def restart_worker(self, name: str, incarnation: int = 0) -> AttachedMember:
        member = self.attached[name]
        member.driver.restart()
        member.killed = False
        self._journal()
        return member

    # --- faults -------------------------------------------------------------------------------
    def kill(self, name: str) -> None:
        member = self.attached[name]
        member.driver.kill()
        member.killed = True  # once it worked: the end of the run restarts only the killed
        self._journal()

    def pause(self, name: str) -> None:
        member = self.attached[name]
        member.frozen_with = member.driver.values_now()
        member.paused = True  # first: a pause that fails half-way is still resumed
        self._journal()
        member.driver.pause(member.frozen_with)

    def resume(self, name: str) -> None:
        member = self.attached[name]
        member.driver.resume(member.frozen_with or {})
        member.paused, member.frozen_with = False, None
        self._journal()

    def partition(self, name: str, fault_id: str, mode: str | None) -> Callable[[], None]:
        member = self.attached[name]
        member.cut_with = member.driver.values_now()
        self._journal()
        member.driver.partition(member.cut_with)
        return lambda: self._heal(name)

    def _heal(self, name: str) -> None:
        member = self.attached[name]
        if member.cut_with is None:
            return
        member.driver.heal(member.cut_with)
        member.cut_with = None
        self._journal()

    def control(self, name: str, kind: str, duration_ms: int, fault_id: str) -> None:
        raise InfraError(f"{kind}: an order only the reference worker carries out; an attached "
                         "member cannot")

    def in_claim_gap(self, name: str, fault_id: str) -> bool:
        return False

    # --- undoing: every exit path ----------------------------------------------------------------
    def _undo(self, restart: bool) -> list[str]:
        """Undo what is still applied (thaw, heal; with ``restart``, bring back the killed);
        what could not be undone, each with how to do it by hand."""
        failures = []
        for member in self.attached.values():
            steps = [action for action, due in (
                ("resume", member.paused), ("heal", member.cut_with is not None),
                ("restart", restart and member.killed and self.settings.restart_killed
                 and member.driver.can_restart)) if due]
            for action in steps:
                values = (member.frozen_with if action == "resume" else member.cut_with) or {}
                try:
                    if action == "resume":
                        self.resume(member.name)
                    elif action == "heal":
                        self._heal(member.name)
                    else:
                        self.restart_worker(member.name)
                except (InfraError, OSError) as error:
                    failures.append(f"{member.name}: {action} failed ({error}); by hand: "
                                    f"{member.driver.by_hand(action, values)}")
        return failures

    def stop_workers(self, timeout: float = 15.0) -> None:
        """The wind-down: nothing of the deployment is stopped; every pause and partition still
        applied is undone (the nemesis has healed them already, unless it could not)."""
        failures = self._undo(restart=False)
        if failures:
            raise InfraError("could not undo every fault: " + " | ".join(failures))

    def close(self) -> None:
        """Undo what is still applied and bring back the killed members (once the history is
        closed: their return is no part of the run); never raises. Idempotent."""
        if self._closed:
            return
        self._closed = True
        failures = self._undo(restart=True)
        self.left_undone.extend(failures)
        for failure in failures:
            self.say(f"!! LEFT UNDONE on the deployment: {failure}")
        self._journal()
        self.engines.close()
        if self._log is not None:
            self._log.close()
        self._close_children()
        self._retire()

    def kill_now(self) -> None:
        """A second Ctrl-C: thaw and heal at once (nothing is killed: nothing is the run's)."""
        with contextlib.suppress(Exception):
            self.left_undone.extend(self._undo(restart=False))
        self._kill_children_now()

    def log_tail(self, name: str, chars: int = 1500) -> str:
        member = self.attached.get(name)
        if member is None:
            return super().log_tail(name, chars)
        return member.driver.log_tail(chars)

    def _journal(self) -> None:
        """``attach.json``: each member's driver and what is applied to it now, so whoever
        finds a run killed outright (SIGKILL) knows what to undo."""
        write_json_atomic(self.run_dir / JOURNAL, {
            "updated": time.time(),
            "members": {name: {"driver": member.driver.describe(), "paused": member.paused,
                               "cut_off": member.cut_with is not None, "killed": member.killed,
                               "undo": [member.driver.by_hand(action, values)
                                        for action, values in (
                                            ("resume", member.frozen_with),
                                            ("heal", member.cut_with))
                                        if values is not None]}
                        for name, member in self.attached.items()}})


def _describe_client(client: Mapping[str, Any]) -> str:
    return (f"{client.get('addr')} (id {client.get('id')}, user {client.get('user', 'default')}, "
            f"name {client.get('name') or '-'}, last command {client.get('cmd', '?')})")


# How long `clean` gives one undo command (a resume or heal the scenario's driver would run).
UNDO_TIMEOUT_S = 30


def undo_left_behind(root: Path) -> list[str]:
    """``echomq-chaos clean``: for each attach run under ``root`` whose runner is gone (killed
    outright, so its own wind-down never ran), run the commands its ``attach.json`` says undo
    what is still applied (a resume, a heal; argv, no shell), and keep in the journal only what
    did not work. A member a kill took down is named, not restarted (the deployment's own
    business, as ``restart_killed`` would have done it). Returns one line per thing done."""
    done: list[str] = []
    for run_dir in dirs_at(root):
        journal_path = run_dir / JOURNAL
        runner = read_record(run_dir / PID_DIR / f"{RUNNER}.json")
        if not journal_path.exists() or (runner is not None and is_alive(runner)):
            continue
        try:
            journal = json.loads(journal_path.read_text())
            members = dict(journal["members"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            done.append(f"{journal_path}: unreadable ({error}); undo its members by hand")
            continue
        for name, state in members.items():
            left = []
            for command in state.get("undo", []):
                outcome = _run_undo(command)
                if outcome is None:
                    done.append(f"{run_dir}: {name}: ran {command}")
                else:
                    left.append(command)
                    done.append(f"{run_dir}: {name}: LEFT UNDONE: {command} ({outcome})")
            if not left:
                state["paused"] = state["cut_off"] = False
            state["undo"] = left
            if state.get("killed"):
                done.append(f"{run_dir}: {name} was killed by the run and is not restarted "
                            "by clean: bring it back as your deployment does")
        write_json_atomic(journal_path, {**journal, "members": members,
                                         "cleaned": time.time()})
    return done


def _run_undo(command: str) -> str | None:
    """Run one undo command of a journal; None when it worked, else why not."""
    if command.startswith("("):  # no template: "(resume NAME as your deployment does)"
        return "no command to run: do it by hand"
    try:
        done = subprocess.run(shlex.split(command), capture_output=True, text=True,
                              timeout=UNDO_TIMEOUT_S, check=False)
    except (OSError, ValueError, subprocess.TimeoutExpired) as error:
        return str(error)
    if done.returncode != 0:
        return f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-200:]}"
    return None
