"""The Celery app's broker transport: kombu's Redis transport, one client per pool."""

from __future__ import annotations

import pytest

from worker.fleet.app import make_app
from worker.settings import RedisSettings, Settings


@pytest.mark.parametrize(
    ("url", "ours"),
    [
        ("redis://127.0.0.1:6379/0", True),
        ("rediss://127.0.0.1:6380/0?ssl_cert_reqs=required", True),
        ("unix:///run/redis.sock", False),
    ],
)
def test_redis_urls_get_the_reusing_transport(url: str, ours: bool) -> None:
    conf = make_app(Settings.model_construct(redis=RedisSettings(url=url))).conf
    assert (conf.broker_transport is not None) is ours


def test_acks_and_unacked_records_reuse_one_client_until_the_pool_changes(
    redis_url: str, namespace: str
) -> None:
    app = make_app(Settings.model_construct(redis=RedisSettings(url=redis_url)))
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        first = channel._create_client()
        assert channel._create_client() is first
        assert first.connection_pool is channel.pool
        # The consumer's own (asynchronous) client stays kombu's.
        assert channel.client is not first
        key = f"{namespace}:probe"
        with channel.conn_or_acquire() as client:
            client.set(key, "1", ex=10)
        assert first.get(key) == b"1"
        channel._disconnect_pools()  # what a reconnect does
        again = channel._create_client()
        assert again is not first
        assert again.connection_pool is channel.pool
        assert again.delete(key) == 1
