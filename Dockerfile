# toolgate worker image: `docker build -t toolgate .`
# The same image runs the worker (`run`, the default) and one-shot commands
# such as `topics ensure` or `contracts lint`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TOOLGATE_CONTRACTS_DIR=/app/contracts \
    TOOLGATE_METRICS_PORT=9464 \
    TOOLGATE_METRICS_HOST=0.0.0.0

WORKDIR /app

RUN groupadd --system --gid 10001 toolgate \
 && useradd --system --uid 10001 --gid toolgate --home-dir /app \
        --no-create-home --shell /usr/sbin/nologin toolgate

COPY pyproject.toml README.md ./
COPY worker/ ./worker/
COPY contracts/ ./contracts/

# Install as root into the system site-packages, then drop the in-tree build
# leftovers so the runtime user owns nothing it could rewrite.
RUN pip install --no-cache-dir . \
 && rm -rf build ./*.egg-info

USER toolgate:toolgate

# Prometheus metrics, /healthz and /readyz (TOOLGATE_METRICS_PORT).
EXPOSE 9464

# python:3.11-slim has no curl; urllib raises on a non-2xx answer, so the
# exit status follows /healthz.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TOOLGATE_METRICS_PORT', '9464'), timeout=3)"]

ENTRYPOINT ["toolgate"]
CMD ["run"]
