"""Request-log retention: rows older than `request_log_retention_days` leave, with their attempts."""

from __future__ import annotations

import datetime

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from gateway import logwriter, services
from gateway.logwriter import log_writer
from gateway.models import Attempt, RequestLog, StoredResponse


def _rows(ages_in_days: list[int]) -> None:
    now = timezone.now()
    logs = RequestLog.objects.bulk_create(
        RequestLog(
            request_id=f"req-{age:03d}-{index}",
            surface="chat",
            status="success",
            created_at=now - datetime.timedelta(days=age, minutes=1),
        )
        for index, age in enumerate(ages_in_days)
    )
    Attempt.objects.bulk_create(
        Attempt(request=log, ordinal=ordinal, provider="p", model="m", outcome="ok")
        for log in logs
        for ordinal in (0, 1)
    )


def _remaining() -> tuple[list[str], int]:
    return sorted(RequestLog.objects.values_list("request_id", flat=True)), Attempt.objects.count()


@pytest.mark.django_db(transaction=True)
async def test_rows_past_the_retention_go_with_their_attempts(monkeypatch):
    monkeypatch.setattr(logwriter, "PURGE_BATCH", 2)  # several short transactions, not one
    await sync_to_async(services.setting_set)(name="request_log_retention_days", value=30)
    await sync_to_async(_rows)([100, 45, 31, 29, 1, 0])

    removed = await log_writer.purge()

    assert removed == 3
    assert await sync_to_async(_remaining)() == (["req-000-5", "req-001-4", "req-029-3"], 6)


@pytest.mark.django_db(transaction=True)
async def test_a_retention_of_zero_keeps_everything():
    await sync_to_async(services.setting_set)(name="request_log_retention_days", value=0)
    await sync_to_async(_rows)([400, 1])

    assert await log_writer.purge() == 0
    assert len((await sync_to_async(_remaining)())[0]) == 2


@pytest.mark.django_db(transaction=True)
async def test_the_default_retention_is_ninety_days():
    await sync_to_async(_rows)([91, 89])

    assert await log_writer.purge() == 1
    assert (await sync_to_async(_remaining)())[0] == ["req-089-1"]


@pytest.mark.django_db(transaction=True)
async def test_the_hourly_purge_also_deletes_expired_stored_responses(gateway_key):
    key, _ = gateway_key
    now = timezone.now()

    def store() -> None:
        for name, expires in (
            ("resp_old", now - datetime.timedelta(minutes=1)),
            ("resp_new", now + datetime.timedelta(days=1)),
            ("resp_kept", None),
        ):
            StoredResponse.objects.create(id=name, gateway_key=key, model="m", status="completed", expires_at=expires)

    await sync_to_async(store)()

    await log_writer.purge()

    remaining = await sync_to_async(lambda: sorted(StoredResponse.objects.values_list("id", flat=True)))()
    assert remaining == ["resp_kept", "resp_new"]
