"""``manage.py generate_events``: write a Parquet file of shop events for the Spark pipeline.

Deterministic for a given ``--seed``: the same command writes the same rows,
so the pipeline's export (and its job msgids) are the same on every run.
Needs pyarrow (``pip install 'django-eventmq[spark]'``).
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

#: Event kinds and how often each occurs.
EVENTS = {"view": 70, "click": 20, "cart": 7, "purchase": 3}
DEFAULT_OUT = Path(settings.BASE_DIR).parent / "var" / "spark" / "events.parquet"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


class Command(BaseCommand):
    help = (
        "Write a Parquet file of shop events (user, e-mail, time, kind, amount) for "
        "example_project/pipeline/digest_export.py to turn into daily digest jobs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rows", type=_positive, default=300_000, help="events (300,000)")
        parser.add_argument("--users", type=_positive, default=2_000, help="users (2,000)")
        parser.add_argument("--days", type=_positive, default=7, help="days of events (7)")
        parser.add_argument(
            "--start", type=dt.date.fromisoformat, default=dt.date(2024, 5, 1), help="first day"
        )
        parser.add_argument("--seed", type=int, default=1, help="random seed (1)")
        parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"({DEFAULT_OUT})")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise CommandError(
                "generate_events needs pyarrow: pip install 'django-eventmq[spark]'"
            ) from None
        rows: int = options["rows"]
        users: int = options["users"]
        rng = random.Random(options["seed"])
        start = dt.datetime.combine(options["start"], dt.time(), tzinfo=dt.UTC)
        seconds = options["days"] * 86_400
        kinds = rng.choices(list(EVENTS), weights=list(EVENTS.values()), k=rows)
        user_ids = [rng.randint(1, users) for _ in range(rows)]
        table = pa.table(
            {
                "user_id": pa.array(user_ids, pa.int64()),
                "email": [f"user{u}@example.com" for u in user_ids],
                "ts": pa.array(
                    [start + dt.timedelta(seconds=rng.randrange(seconds)) for _ in range(rows)],
                    pa.timestamp("us", tz="UTC"),
                ),
                "event": kinds,
                "amount": pa.array(
                    [
                        Decimal(rng.randint(100, 20_000)) / 100 if kind == "purchase" else None
                        for kind in kinds
                    ],
                    pa.decimal128(10, 2),
                ),
            }
        )
        out: Path = options["out"]
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out)
        self.stdout.write(
            self.style.SUCCESS(
                f"Wrote {rows:,} events of {users:,} users over {options['days']} day(s) to {out}"
            )
        )
