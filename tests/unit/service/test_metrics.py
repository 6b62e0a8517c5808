"""The metrics and health HTTP endpoint."""

from __future__ import annotations

from toolgate.service._metrics import HealthServer, Metrics

from tests.unit.worker_kit import get


class TestHealthServer:
    async def test_endpoints(self) -> None:
        """/metrics exposes the registry, /healthz is alive, /readyz follows readiness, else 404."""
        metrics = Metrics()
        metrics.decided("review_status", "rejected", "parse", "DUPLICATE_KEY", 120, 2e-6)
        ready = False
        server = HealthServer(metrics, "127.0.0.1", 0, lambda: ready)
        await server.start()
        try:
            status, body = await get(server.port, "/metrics")
            assert status == 200
            assert (
                b'toolgate_rejections_total{code="DUPLICATE_KEY",stage="parse",tool="review_status"} 1.0'
            ) in body
            assert (await get(server.port, "/healthz"))[0] == 200
            assert (await get(server.port, "/readyz"))[0] == 503
            ready = True
            assert (await get(server.port, "/readyz"))[0] == 200
            assert (await get(server.port, "/nope"))[0] == 404
        finally:
            await server.stop()
