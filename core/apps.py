from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models import Field, ForeignObject

from .lookups import AnyOf
from .timestamps import register as timestamps_register


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Fleetdeck core"

    def ready(self) -> None:
        # On every field, and on relations too (they keep lookups of their own): `node_id__any_of=ids`.
        Field.register_lookup(AnyOf)
        ForeignObject.register_lookup(AnyOf)
        # psycopg's C parser for timestamps on every PostgreSQL connection (core.timestamps).
        connection_created.connect(timestamps_register, dispatch_uid="core.timestamps")
