"""WSGI entry point (gunicorn/uwsgi in production, runserver in the demo)."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()
