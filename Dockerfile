# One image for every Atlas Console process: web, worker, beat and the simulator.
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ATLAS_DATA_DIR=/var/lib/atlas
RUN apt-get update && apt-get install -y --no-install-recommends \
        libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz0b libharfbuzz-subset0 curl \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# media/ and static/ exist (owned by atlas) so that the named volumes compose mounts there
# start out writable: web stores uploads in media/, the artifact worker reads them.
RUN useradd --system --home /var/lib/atlas atlas \
    && mkdir -p /var/lib/atlas/media /var/lib/atlas/static \
    && chown -R atlas /var/lib/atlas
USER atlas
EXPOSE 8000
CMD ["gunicorn", "-c", "deploy/gunicorn.conf.py", "atlas_console.wsgi", "--bind", "0.0.0.0:8000"]
