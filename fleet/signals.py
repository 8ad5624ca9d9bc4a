"""Inventory events other parts subscribe to (an executor backend mirrors cordons, for example).

Both are sent only after the transaction that made the change has committed, so a receiver
never acts on a change that is later rolled back. Keyword arguments: node, reason, actor."""
from django.dispatch import Signal

node_cordoned = Signal()
node_uncordoned = Signal()
