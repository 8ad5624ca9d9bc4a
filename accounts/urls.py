from django.urls import path

from . import views

app_name = "accounts"
urlpatterns = [
    path("tokens/", views.tokens_page, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke_view, name="token-revoke"),
]
