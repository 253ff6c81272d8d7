"""Paging and date drill-down for admin change lists over tables that grow without bound.

It protects the request-log browser from its own table: the stock change list counts every
matching row (`SELECT COUNT(*)`) and builds its date hierarchy from `SELECT DISTINCT` over
every row's date, two full scans per page that make a million-row log unusable. Here the count
stops at `CappedPaginator.cap` rows (a LIMITed subquery) and the date links come from the first
and last timestamp (two index probes), so each page costs the same few indexed queries
whatever the table holds.
"""

from __future__ import annotations

import calendar
import datetime
from typing import Any

from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils import formats, timezone
from django.utils.functional import cached_property
from django.utils.text import capfirst
from django.utils.translation import gettext as _


class CappedPaginator(Paginator):
    """A paginator that counts at most `cap` rows.

    Past the cap the list shows `cap` results and says there are more: an operator looking for
    something older narrows by filter or date instead of paging through ten thousand rows.
    """

    cap = 10_000

    @cached_property
    def _counted(self) -> int:
        # Slicing before count() makes Django wrap the query: SELECT COUNT(*) FROM (... LIMIT n).
        # One row past the cap tells "exactly cap" from "more than cap". Without the ordering the
        # database may stop at any cap + 1 matching rows instead of sorting all of them first.
        return self.object_list.order_by()[: self.cap + 1].count()

    @cached_property
    def count(self) -> int:
        return min(self._counted, self.cap)

    @property
    def capped(self) -> bool:
        """Whether more rows match than were counted."""
        return self._counted > self.cap


def _local(value: datetime.date | None) -> datetime.date | None:
    if isinstance(value, datetime.datetime) and timezone.is_aware(value):
        return timezone.localtime(value)
    return value


def _bounds(queryset: QuerySet, field_name: str) -> tuple[datetime.date | None, datetime.date | None]:
    """The first and last value of an indexed date field.

    Two ORDER BY ... LIMIT 1 queries rather than one Min/Max aggregate: each is a single index
    probe on SQLite and PostgreSQL, also under a filter that has an index ending in the field,
    whereas SQLite answers a combined MIN() and MAX() by scanning.
    """
    values = queryset.values_list(field_name, flat=True)
    first = values.order_by(field_name).first()
    last = values.order_by(f"-{field_name}").first()
    return _local(first), _local(last)


def bounded_date_hierarchy(cl: ChangeList) -> dict[str, Any]:
    """The context of Django's admin/date_hierarchy.html, as Django's `date_hierarchy` tag builds it
    (same lookups, links and titles), with the year, month and day choices spanning the first to
    the last matching row instead of being read with DISTINCT from every row.

    The price: a period between the first and last row that has no rows still gets a link,
    leading to an empty page.
    """
    if not cl.date_hierarchy:
        return {"show": False}
    field_name = cl.date_hierarchy
    year_field = f"{field_name}__year"
    month_field = f"{field_name}__month"
    day_field = f"{field_name}__day"
    field_generic = f"{field_name}__"
    year_lookup = cl.params.get(year_field)
    month_lookup = cl.params.get(month_field)
    day_lookup = cl.params.get(day_field)

    def link(filters: dict[str, Any]) -> str:
        return cl.get_query_string(filters, [field_generic])

    if year_lookup and month_lookup and day_lookup:
        day = datetime.date(int(year_lookup), int(month_lookup), int(day_lookup))
        return {
            "show": True,
            "back": {
                "link": link({year_field: year_lookup, month_field: month_lookup}),
                "title": capfirst(formats.date_format(day, "YEAR_MONTH_FORMAT")),
            },
            "choices": [{"title": capfirst(formats.date_format(day, "MONTH_DAY_FORMAT"))}],
        }

    first, last = _bounds(cl.queryset, field_name)
    if not (year_lookup or month_lookup or day_lookup) and first and last and first.year == last.year:
        # As Django does: when every row falls in one year (or month), start one level down.
        year_lookup = first.year
        if first.month == last.month:
            month_lookup = first.month

    if year_lookup and month_lookup:
        year, month = int(year_lookup), int(month_lookup)
        return {
            "show": True,
            "back": {"link": link({year_field: year_lookup}), "title": str(year_lookup)},
            "choices": [
                {
                    "link": link({year_field: year_lookup, month_field: month_lookup, day_field: day.day}),
                    "title": capfirst(formats.date_format(day, "MONTH_DAY_FORMAT")),
                }
                for day in _days(first, last, year, month)
            ],
        }
    if year_lookup:
        year = int(year_lookup)
        return {
            "show": True,
            "back": {"link": link({}), "title": _("All dates")},
            "choices": [
                {
                    "link": link({year_field: year_lookup, month_field: month.month}),
                    "title": capfirst(formats.date_format(month, "YEAR_MONTH_FORMAT")),
                }
                for month in _months(first, last, year)
            ],
        }
    years = range(first.year, last.year + 1) if first and last else range(0)
    return {
        "show": True,
        "back": None,
        "choices": [{"link": link({year_field: str(year)}), "title": str(year)} for year in years],
    }


def _months(first: datetime.date | None, last: datetime.date | None, year: int) -> list[datetime.date]:
    if first is None or last is None:
        return []
    start = first.month if first.year == year else 1
    end = last.month if last.year == year else 12
    return [datetime.date(year, month, 1) for month in range(start, end + 1)]


def _days(first: datetime.date | None, last: datetime.date | None, year: int, month: int) -> list[datetime.date]:
    if first is None or last is None:
        return []
    start = first.day if (first.year, first.month) == (year, month) else 1
    end = last.day if (last.year, last.month) == (year, month) else calendar.monthrange(year, month)[1]
    return [datetime.date(year, month, day) for day in range(start, end + 1)]
