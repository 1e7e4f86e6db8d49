"""The user's own enqueue path for Celery (docs/celery.md, the [sut] producer protocol of
docs/load.md): one payload a line on stdin, each sent as a chaos.handle task through Celery's own
send_task; once kombu's LPUSH returned, one line out: ``<unix ms> enqueue id=<task id>``."""

from __future__ import annotations

import sys
import time

from chaos_celery import app


def main() -> None:
    print("ready", flush=True)
    for line in sys.stdin:
        payload = line.rstrip("\n")
        if not payload:
            continue
        result = app.send_task("chaos.handle", args=[payload])
        print(f"{int(time.time() * 1000)} enqueue id={result.id}", flush=True)


if __name__ == "__main__":
    main()
