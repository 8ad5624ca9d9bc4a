from django.apps import AppConfig
from django.db.models import Field, ForeignObject

from .lookups import AnyOf


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Fleetdeck core"

    def ready(self) -> None:
        # On every field, and on relations too (they keep lookups of their own): `node_id__any_of=ids`.
        Field.register_lookup(AnyOf)
        ForeignObject.register_lookup(AnyOf)
