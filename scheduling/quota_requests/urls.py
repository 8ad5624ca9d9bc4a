"""Pages under /scheduling/: teams and quota requests (included from scheduling.urls)."""
from django.urls import path

from . import views

urlpatterns = [
    path("teams/", views.team_list, name="team-list"),
    path("teams/<int:team_id>/", views.team_detail, name="team-detail"),
    path("quota-requests/", views.quota_request_list, name="quota-request-list"),
    path("quota-requests/new/", views.quota_request_new, name="quota-request-new"),
    path("quota-requests/<int:request_id>/", views.quota_request_detail, name="quota-request-detail"),
    path("quota-requests/<int:request_id>/approve/", views.quota_request_approve, name="quota-request-approve"),
    path("quota-requests/<int:request_id>/deny/", views.quota_request_deny, name="quota-request-deny"),
    path("quota-requests/<int:request_id>/withdraw/", views.quota_request_withdraw, name="quota-request-withdraw"),
]
