from django.urls import include, path

from . import views

app_name = "scheduling"
urlpatterns: list = [
    path("", include("scheduling.quota_requests.urls")),
    path("queues/", views.queues, name="queues"),
    path("workloads/", views.workloads, name="workloads"),
    path("workloads/new/", views.workload_submit_view, name="workload-submit"),
    path("workloads/<int:pk>/", views.workload_detail, name="workload"),
    path("workloads/<int:pk>/cancel/", views.workload_cancel_view, name="workload-cancel"),
    path("workloads/<int:pk>/after-failure/", views.workload_after_failure_view, name="workload-after-failure"),
    path("preemptions/", views.preemptions, name="preemptions"),
    path("nodes/<str:name>/drain/", views.node_drain_view, name="node-drain"),
]
