from django.contrib.auth.decorators import login_required
from django.urls import path
from django.views.generic import RedirectView

from . import views

# Included by console.urls under its app namespace ("console:policy-...").
urlpatterns = [
    # The policy pages have no page of their own above them: /policy/ opens the first of them.
    path("", login_required(RedirectView.as_view(pattern_name="console:policy-teams")), name="policy"),
    path("teams/", views.teams, name="policy-teams"),
    path("teams/new/", views.team_new, name="policy-team-new"),
    path("teams/<int:pk>/", views.team_edit, name="policy-team"),
    path("teams/<int:pk>/delete/", views.team_delete, name="policy-team-delete"),
    path("teams/<int:pk>/members/", views.team_member_add, name="policy-team-member-add"),
    path("teams/<int:pk>/members/<int:user_id>/remove/", views.team_member_remove, name="policy-team-member-remove"),
    path("cohorts/", views.cohorts, name="policy-cohorts"),
    path("cohorts/new/", views.cohort_new, name="policy-cohort-new"),
    path("cohorts/<int:pk>/", views.cohort_edit, name="policy-cohort"),
    path("cohorts/<int:pk>/delete/", views.cohort_delete, name="policy-cohort-delete"),
    path("queues/", views.queues, name="policy-queues"),
    path("queues/new/", views.queue_new, name="policy-queue-new"),
    path("queues/<int:pk>/", views.queue_edit, name="policy-queue"),
    path("queues/<int:pk>/delete/", views.queue_delete, name="policy-queue-delete"),
    path("priority-classes/", views.priority_classes, name="policy-priority-classes"),
    path("priority-classes/new/", views.priority_class_new, name="policy-priority-class-new"),
    path("priority-classes/<int:pk>/", views.priority_class_edit, name="policy-priority-class"),
    path("priority-classes/<int:pk>/delete/", views.priority_class_delete, name="policy-priority-class-delete"),
    path("flavors/", views.flavors, name="policy-flavors"),
    path("flavors/new/", views.flavor_new, name="policy-flavor-new"),
    path("flavors/<int:pk>/", views.flavor_edit, name="policy-flavor"),
    path("flavors/<int:pk>/delete/", views.flavor_delete_page, name="policy-flavor-delete"),
]
