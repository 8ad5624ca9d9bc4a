"""Health pages."""
from django.urls import path

from . import views

app_name = "health"
urlpatterns = [
    path("events/", views.events, name="events"),
    path("tickets/", views.tickets, name="tickets"),
    path("tickets/<int:pk>/", views.ticket_detail, name="ticket"),
    path("tickets/<int:pk>/transition/", views.ticket_transition, name="ticket-transition"),
    path("tickets/<int:pk>/burn-in/", views.ticket_burn_in, name="ticket-burn-in"),
    path("idle-gpus/", views.idle_gpus, name="idle-gpus"),
]
