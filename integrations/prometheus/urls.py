from django.urls import path

from .api import AlertmanagerWebhookView

urlpatterns = [
    path("alertmanager/webhook/", AlertmanagerWebhookView.as_view(), name="alertmanager-webhook"),
]
