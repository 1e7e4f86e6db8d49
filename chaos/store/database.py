"""The run store's database: an SQLite file (a plain path) or a team's PostgreSQL
(``postgresql://``), through SQLAlchemy Core, with its schema built by ordered migrations.

``schema_version`` holds the schema's version: opening a store applies the migrations it lacks,
and refuses a store of a newer schema (written by a newer echomq-chaos) rather than guess at it.
Every database failure is a ``StoreError``, an infrastructure error (exit 3), naming the store
(its password left out).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from chaos.errors import InfraError
from chaos.store.record import RunRecord

STORE_ENV = "ECHOMQ_CHAOS_STORE"  # the store when a command is given no --store
POSTGRES_SCHEMES = ("postgresql", "postgres")


class StoreError(InfraError):
    """The store cannot be opened, read or written (exit 3): the run directory still holds the
    run, and ``echomq-chaos store import`` can add it later."""


metadata = sa.MetaData()
schema_version = sa.Table("schema_version", metadata, sa.Column("version", sa.Integer,
                                                                  nullable=False))
runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("scenario", sa.String(200), nullable=False),
    sa.Column("settings_hash", sa.String(64), nullable=False),
    sa.Column("family", sa.String(100), nullable=False),
    sa.Column("seed", sa.BigInteger),
    sa.Column("started_ms", sa.BigInteger, nullable=False),
    sa.Column("verdict", sa.String(32), nullable=False),
    sa.Column("exit_code", sa.Integer, nullable=False),
    sa.Column("command", sa.String(32), nullable=False),
    sa.Column("run_dir", sa.Text, nullable=False),
    sa.Column("unknown_reasons", sa.Text, nullable=False),  # a JSON list
    sa.Column("stored_ms", sa.BigInteger, nullable=False),
    sa.Index("runs_by_scenario", "scenario", "started_ms"),
)
run_figures = sa.Table(
    "run_figures", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"),
              nullable=False, index=True),
    sa.Column("name", sa.String(64), nullable=False),
    sa.Column("value", sa.Float, nullable=False),
)
run_samples = sa.Table(
    "run_samples", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"),
              nullable=False, index=True),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("values_ms", sa.Text, nullable=False),  # a JSON list of ms
)
run_labels = sa.Table(
    "run_labels", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"),
              nullable=False, index=True),
    sa.Column("key", sa.String(100), nullable=False),
    sa.Column("value", sa.Text, nullable=False),
)


def _create_v1(connection: Connection) -> None:
    for table in (runs, run_figures, run_samples, run_labels):
        table.create(connection)


# Version N is reached by MIGRATIONS[N - 1]; a change of schema is one more function here.
MIGRATIONS: tuple[Callable[[Connection], None], ...] = (_create_v1,)
SCHEMA_VERSION = len(MIGRATIONS)
MIGRATION_LOCK = 0x6563686F6D71  # PostgreSQL's advisory lock key for migrating ("echomq")


def redacted(url: str) -> str:
    """The store's URL as messages name it: without its password."""
    if "://" not in url:
        return url
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url.split("://", 1)[0] + "://..."


def engine_url(url: str) -> str:
    """A plain path is an SQLite file; ``postgresql://`` uses the psycopg (3) driver."""
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    scheme, rest = url.split("://", 1)
    if scheme in POSTGRES_SCHEMES:
        return f"postgresql+psycopg://{rest}"
    if scheme in ("sqlite", "postgresql+psycopg"):
        return url
    raise StoreError(f"store {redacted(url)}: unsupported scheme {scheme!r} (a path for an "
                     "SQLite file, or postgresql://user:password@host:port/database)")


@dataclass
class StoredRun:
    """A run read back from the store (its samples only when asked for: ``RunStore.samples``)."""

    id: int
    record: RunRecord


class RunStore:
    """An open store: ``add`` records runs, ``runs`` and ``samples`` read them back."""

    def __init__(self, url: str, engine: Engine) -> None:
        self.url = url
        self.engine = engine

    @contextmanager
    def _failing_as_store_error(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sa.exc.SQLAlchemyError as error:
            cause = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
            raise StoreError(f"store {redacted(self.url)}: cannot {doing}: {cause}") from None

    def migrate(self) -> int:
        """Apply the migrations the store lacks; the schema version it then has. Several
        processes may open a new store at once (runs side by side, a team's runners on one
        server): each migrates holding the store's lock (``_migrating``), so one builds the
        schema and the others find it built."""
        with self._failing_as_store_error("read its schema version"), \
                self._migrating() as connection:
            if not sa.inspect(connection).has_table("schema_version"):
                schema_version.create(connection)
            found = connection.execute(sa.select(sa.func.max(schema_version.c.version))
                                       ).scalar() or 0
            if found > SCHEMA_VERSION:
                raise StoreError(
                    f"store {redacted(self.url)}: schema version {found} is newer than this "
                    f"echomq-chaos knows ({SCHEMA_VERSION}); upgrade echomq-chaos to use it")
            for version in range(found + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[version - 1](connection)
                connection.execute(sa.delete(schema_version))
                connection.execute(sa.insert(schema_version).values(version=version))
        return SCHEMA_VERSION

    @contextmanager
    def _migrating(self) -> Iterator[Connection]:
        """One transaction holding the store's migration lock from its first statement:
        PostgreSQL's advisory lock ``MIGRATION_LOCK``, SQLite's write lock (``BEGIN
        IMMEDIATE``; a second opener waits for it, up to the driver's busy timeout)."""
        with self.engine.connect() as connection:
            if self.engine.dialect.name == "sqlite":
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                connection.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK)))
            try:
                yield connection
            except BaseException:
                connection.rollback()
                raise
            connection.commit()

    def add(self, record: RunRecord) -> int:
        """Store one run in one transaction; its id."""
        with self._failing_as_store_error("store a run"), self.engine.begin() as connection:
            run_id = connection.execute(sa.insert(runs).values(
                scenario=record.scenario, settings_hash=record.settings_hash,
                family=record.family, seed=record.seed, started_ms=record.started_ms,
                verdict=record.verdict, exit_code=record.exit_code, command=record.command,
                run_dir=record.run_dir, unknown_reasons=json.dumps(record.unknown_reasons),
                stored_ms=int(time.time() * 1000))).inserted_primary_key
            assert run_id is not None
            run_id = run_id[0]
            if record.figures:
                connection.execute(sa.insert(run_figures), [
                    {"run_id": run_id, "name": name, "value": value}
                    for name, value in record.figures.items()])
            if record.samples:
                connection.execute(sa.insert(run_samples), [
                    {"run_id": run_id, "kind": kind, "values_ms": json.dumps(values)}
                    for kind, values in record.samples.items()])
            if record.labels:
                connection.execute(sa.insert(run_labels), [
                    {"run_id": run_id, "key": key, "value": value}
                    for key, value in record.labels.items()])
        return int(run_id)

    def runs(self) -> list[StoredRun]:
        """Every run, oldest first, with its figures and labels (no samples)."""
        with self._failing_as_store_error("read its runs"), self.engine.connect() as connection:
            found: dict[int, StoredRun] = {}
            for row in connection.execute(sa.select(runs).order_by(runs.c.started_ms,
                                                                   runs.c.id)):
                found[row.id] = StoredRun(row.id, RunRecord(
                    scenario=row.scenario, settings_hash=row.settings_hash, family=row.family,
                    seed=row.seed, started_ms=row.started_ms, verdict=row.verdict,
                    exit_code=row.exit_code, command=row.command, run_dir=row.run_dir,
                    unknown_reasons=json.loads(row.unknown_reasons)))
            for run_id, name, value in connection.execute(
                    sa.select(run_figures.c.run_id, run_figures.c.name, run_figures.c.value)):
                found[run_id].record.figures[name] = value
            for run_id, key, value in connection.execute(
                    sa.select(run_labels.c.run_id, run_labels.c.key, run_labels.c.value)):
                found[run_id].record.labels[key] = value
        return list(found.values())

    def samples(self, run_ids: Iterable[int]) -> dict[int, dict[str, list[int]]]:
        """The samples of these runs: {run id: {kind: ms, ...}}."""
        wanted = list(run_ids)
        found: dict[int, dict[str, list[int]]] = {run_id: {} for run_id in wanted}
        with self._failing_as_store_error("read samples"), self.engine.connect() as connection:
            for start in range(0, len(wanted), 500):  # a bounded IN list
                for run_id, kind, values in connection.execute(
                        sa.select(run_samples.c.run_id, run_samples.c.kind,
                                  run_samples.c.values_ms)
                        .where(run_samples.c.run_id.in_(wanted[start:start + 500]))):
                    found[run_id][kind] = json.loads(values)
        return found

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str) -> RunStore:
    """Open (and migrate) the store at ``url``: a path (SQLite) or a ``postgresql://`` URL."""
    try:
        engine = sa.create_engine(engine_url(url), connect_args=_connect_args(url))
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ValueError) as error:
        raise StoreError(f"store {redacted(url)}: not a store URL ({error})") from None
    store = RunStore(url, engine)
    try:
        store.migrate()
    except StoreError:
        store.close()
        raise
    return store


def _connect_args(url: str) -> dict[str, object]:
    if url.split("://", 1)[0] in POSTGRES_SCHEMES:
        return {"connect_timeout": 5}  # an unreachable server is an error in seconds, not minutes
    return {}
