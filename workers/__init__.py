"""Celery app and thin tasks that call es_rag.pipeline (arrives with the queue issue)."""
