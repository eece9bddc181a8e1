"""Pure parsers for probe payloads: no Django, no Celery, no network (NVML reading aside)."""
